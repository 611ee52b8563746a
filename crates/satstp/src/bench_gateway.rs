//! `satstp bench gateway`: the split-connection gateway on real sockets, on loopback (see
//! `bench::gateway`): the flags, and the figures printed.

use anyhow::{Context, Result};
use bench::gateway::{GatewayOptions, MAX_DATAGRAM, RELAY_BUFFER, STP_BUFFER};
use clap::Args;
use netsim::units::parse_bytes;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// Bytes for the single-flow download; the parallel run moves the same total split evenly
    /// (units such as 1GB accepted).
    #[arg(long, default_value = "1GB", value_parser = parse_bytes)]
    bytes: u64,
    /// Parallel connections in the second run.
    #[arg(long, default_value_t = 100)]
    parallel: u32,
    /// Idle connections held open for the memory measurement.
    #[arg(long, default_value_t = 1000)]
    idle: u32,
    /// Hop workers of each daemon (`workers` in their configuration files, 1 to 64; default:
    /// the daemons' own default, at the gateway the cores available, at a terminal 1).
    #[arg(long)]
    workers: Option<u32>,
    /// The tunnel cipher of both daemons (`tunnel_cipher`): auto, chacha20-poly1305, aes-256-gcm.
    #[arg(long, default_value = "auto")]
    tunnel_cipher: String,
    /// Terminal daemons (1 to 200), each with its own key and tunnel session; the parallel
    /// downloads are spread evenly over them.
    #[arg(long, default_value_t = 1)]
    terminals: u32,
    /// `limits.memory_cap_bytes` of both daemons (64MiB to 1TiB; default: theirs, 512 MiB): the
    /// most the relays may hold, which bounds what the gateway reads ahead of the hop.
    #[arg(long, value_parser = parse_bytes)]
    memory_cap: Option<u64>,
    /// `limits.read_ahead_bytes` of both daemons (256KiB to 1GiB, at most the memory cap;
    /// default: theirs, 20 ms of the hop's allocation and at least 32 MiB): how far the relays
    /// may read ahead of STP's first transmission, all connections together.
    #[arg(long, value_parser = parse_bytes)]
    read_ahead: Option<u64>,
    /// `stp.min_poll_interval_ms` of both daemons, 1 to 1000 ms (default: theirs, 10 ms; runs
    /// before 27 November 2026 evening used 1 ms): the shortest POLL interval of each
    /// connection, so with 100 flows over loopback (srtt a few ms) the POLLs and STATs per GB.
    #[arg(long, value_name = "MS")]
    min_poll_interval: Option<u32>,
    /// Start the gateway daemon from this satstp binary instead of this one (another version,
    /// to measure or check a mixed pair: its configuration file must read as this version's).
    #[arg(long, value_name = "PATH")]
    gateway_exe: Option<PathBuf>,
    /// Start the terminal daemons from this satstp binary instead of this one.
    #[arg(long, value_name = "PATH")]
    terminal_exe: Option<PathBuf>,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

pub fn run(args: &GatewayBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    let opts = GatewayOptions {
        bytes: args.bytes,
        parallel: args.parallel,
        idle: args.idle,
        workers: args.workers,
        terminals: args.terminals,
        tunnel_cipher: args.tunnel_cipher.clone(),
        memory_cap: args.memory_cap,
        read_ahead: args.read_ahead,
        min_poll_interval_ms: args.min_poll_interval,
    };
    opts.check()?;
    let exe = std::env::current_exe().context("cannot find the satstp binary itself")?;
    // Another binary must answer `--version` as satstp does; its answer is printed.
    let daemon_exe = |flag: &str, path: &Option<PathBuf>| -> Result<(PathBuf, String)> {
        let Some(p) = path else {
            return Ok((exe.clone(), format!("satstp {}", env!("SATSTP_VERSION"))));
        };
        let not = |why: String| {
            anyhow::anyhow!(
                "{flag} {}: {why}; give the path of a satstp binary",
                p.display()
            )
        };
        let out = std::process::Command::new(p)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| not(format!("cannot run it ({e})")))?;
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || !v.starts_with("satstp ") {
            return Err(not(format!(
                "`--version` did not answer as satstp does ({v:?})"
            )));
        }
        Ok((p.clone(), v))
    };
    let ((gateway_exe, gateway_version), (terminal_exe, terminal_version)) = (
        daemon_exe("--gateway-exe", &args.gateway_exe)?,
        daemon_exe("--terminal-exe", &args.terminal_exe)?,
    );
    let exes = bench::gateway::DaemonExes {
        gateway: gateway_exe,
        terminal: terminal_exe,
    };
    let dir = bench::process::daemon_dir("satstp-bench-gateway")?;
    let result = bench::gateway::run(&opts, &exes, &dir);
    for line in bench::process::end_daemon_dir(&dir, result.is_err()) {
        eprintln!("{line}");
    }
    let f = result?;
    let mib = STP_BUFFER >> 20;
    let single = f.single_cpu.per_gb(args.bytes);
    let parallel = f.parallel_cpu.per_gb(f.parallel_bytes);
    let (t_idle, g_idle) = f.idle_kib();
    if args.json.is_some() {
        let mut j = f.json(&opts);
        j["gateway_exe"] = serde_json::json!(exes.gateway.display().to_string());
        j["terminal_exe"] = serde_json::json!(exes.terminal.display().to_string());
        j["gateway_version"] = serde_json::json!(gateway_version);
        j["terminal_version"] = serde_json::json!(terminal_version);
        crate::outpath::write_json(&args.json, &j)?;
    }
    outln!("satstp bench gateway: SOCKS client → terminal daemon → encrypted STP hop → gateway daemon → origin, all on loopback, no impairment");
    outln!(
        "  daemons             {} terminal(s) (the parallel run spread over them), 1 gateway; hop workers each: {}",
        args.terminals,
        args.workers
            .map_or("the daemons' default".to_string(), |w| w.to_string())
    );
    outln!(
        "  STP config          recv/send buffers {mib} MiB, max datagram {MAX_DATAGRAM} bytes, min POLL interval {}; relay buffer {} MiB",
        args.min_poll_interval
            .map_or("the daemons' default (10 ms)".to_string(), |ms| format!("{ms} ms")),
        RELAY_BUFFER >> 20
    );
    if let Some(h) = &f.host {
        outln!("  host                {}", h.line());
    }
    outln!(
        "  single flow         {} bytes in {:.3} s = {:.2} Gbit/s  (target ≥ 2)",
        args.bytes,
        f.single_secs,
        f.single_gbps
    );
    outln!(
        "  {} parallel        {} bytes in {:.3} s = {:.2} Gbit/s",
        args.parallel,
        f.parallel_bytes,
        f.parallel_secs,
        f.parallel_gbps
    );
    for (name, c) in [("single flow", single), ("parallel", parallel)] {
        outln!(
            "  CPU s/GB, {name:<11} terminal {:.2}, gateway {:.2} (daemons, each its own process; terminals together); load generator {:.2} (client and origin)",
            c.terminal,
            c.gateway,
            c.loadgen
        );
    }
    for (name, h) in [
        ("single-flow", &f.single_hop),
        ("parallel", &f.parallel_hop),
    ] {
        outln!(
            "  {name:<11} hop     gateway sent {} datagrams ({:.0} bytes each), received {} ({} STATs and USTATs for {} POLLs sent); {} STP retransmissions; receives the kernel dropped at full hop sockets: terminal {}, gateway {}; receive backpressure episodes: terminal {}, gateway {}",
            h.datagrams_sent,
            h.bytes_per_datagram_sent(),
            h.datagrams_received,
            h.stats_received,
            h.polls_sent,
            h.retransmitted_packets,
            h.terminal_socket_overflows,
            h.gateway_socket_overflows,
            reported(h.terminal_backpressure_episodes),
            reported(h.gateway_backpressure_episodes),
        );
        let filled = |n: Option<u64>| {
            n.map_or(
                "not reported (an older daemon: it computes every one)".to_string(),
                |n| n.to_string(),
            )
        };
        outln!(
            "  {name:<11} tunnel  STP checksums computed as the tunnel sealed (for a peer that verifies them): gateway {}, terminal {}",
            filled(h.gateway_stp_checksums_filled),
            filled(h.terminal_stp_checksums_filled)
        );
    }
    if args.gateway_exe.is_some() || args.terminal_exe.is_some() {
        outln!(
            "  daemons from        gateway {} ({gateway_version}), terminal {} ({terminal_version})",
            exes.gateway.display(),
            exes.terminal.display()
        );
    }
    outln!(
        "  tunnel sessions     the gateway completed {} handshakes",
        f.gateway_handshakes
    );
    outln!(
        "  peak memory         VmHWM terminal {} KiB, gateway {} KiB; memory_cap_bytes {}, read_ahead_bytes {}, min_poll_interval_ms {}",
        f.peak_rss_kib.0,
        f.peak_rss_kib.1,
        args.memory_cap
            .map_or("the daemons' default (512 MiB)".to_string(), |b| b
                .to_string()),
        args.read_ahead
            .map_or("the daemons' default".to_string(), |b| b.to_string()),
        args.min_poll_interval
            .map_or("the daemons' default (10)".to_string(), |ms| ms.to_string())
    );
    outln!(
        "  idle connections    {}: VmRSS terminal {} → {} KiB = {t_idle:.1} KiB, gateway {} → {} KiB = {g_idle:.1} KiB per connection  (target ≤ 64 for both)",
        args.idle,
        f.rss_before_kib.0,
        f.rss_after_kib.0,
        f.rss_before_kib.1,
        f.rss_after_kib.1
    );
    Ok(())
}

/// A counter a daemon may not report (an older version).
fn reported(n: Option<u64>) -> String {
    n.map_or_else(|| "not reported".to_string(), |n| n.to_string())
}
