//! `satstp emulate …`: real-time link emulators. `emulate udp` relays UDP between a terminal and
//! a gateway through two directions of the shared link model (see the `linkem` crate), until
//! Ctrl-C or `--duration`, then prints (and with `--json` writes) per-direction counters.
//! `emulate net` (root, Linux) joins two network namespaces through the same model at the IP
//! level and runs a command on the terminal side, or stays up until Ctrl-C (see `net_emulate`).
//! The links the flags describe and the JSON reports are `bench::emulate`'s; here the flags and
//! the printing.

use anyhow::{bail, Context, Result};
use bench::emulate::{direction_json, LeoPath, LinkArgs};
use clap::{Args, Subcommand};
use linkem::{EmulatorConfig, EmulatorStats, Profile, UdpEmulator};
use linkmodel::{Delay, LinkConfig, QueueLimit};
use netsim::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod net;

#[derive(Debug, Subcommand)]
pub enum EmulateCommand {
    /// Relay UDP between a terminal and a gateway through an emulated satellite link, in real
    /// time (no privileges needed).
    Udp(Box<UdpArgs>),
    /// IP-level emulator (root, Linux): a terminal-side and a gateway-side network namespace
    /// joined only through an emulated satellite link; runs CMD on the terminal side, or stays
    /// up until Ctrl-C.
    Net(Box<net::NetArgs>),
}

/// `host:port` or `[v6]:port`, a host name resolved now (its first address).
fn parse_host_port(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?} is not host:port or cannot be resolved: {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?} has no address"))
}

#[derive(Debug, Args)]
pub struct UdpArgs {
    /// Address the terminal sends to (port 0 picks a free port, printed at start).
    #[arg(long)]
    listen: SocketAddr,
    /// The gateway's address, host:port (a name is resolved at start): terminal datagrams go
    /// there, its replies go back to the terminal.
    #[arg(long, value_parser = parse_host_port)]
    to: SocketAddr,
    /// A named path: geo, geo-1998, direcpc or leo. Without it, --down-rate, --up-rate and
    /// --delay are required.
    #[arg(long)]
    profile: Option<Profile>,
    /// Gateway → terminal rate (e.g. 50Mbps).
    #[arg(long, value_parser = parse_rate_bps)]
    down_rate: Option<u64>,
    /// Terminal → gateway rate (e.g. 5Mbps).
    #[arg(long, value_parser = parse_rate_bps)]
    up_rate: Option<u64>,
    /// One-way delay of each direction (e.g. 300ms).
    #[arg(long, value_parser = parse_duration_ns)]
    delay: Option<u64>,
    /// Queue limit of each direction in bytes, headers included (default: one bandwidth-delay
    /// product of that direction, at least 24000 bytes).
    #[arg(long, value_parser = parse_bytes)]
    queue: Option<u64>,
    /// The one-way delay (and outages) of a LEO path, computed at start:
    /// CONSTELLATION:FROM:TO[:ROUTING], e.g. "iridium:New York:San Francisco:min-delay"
    /// (rates default to the preset's GSL rate; see docs/leo.md).
    #[arg(long, conflicts_with_all = ["delay", "profile"])]
    leo: Option<String>,
    /// One-way delay of each direction over time, from a file of 'TIME_MS DELAY_MS' lines
    /// (as `satstp leo trace` writes; format in docs/emulate-net.md).
    #[arg(long, conflicts_with_all = ["delay", "leo"])]
    delay_trace: Option<PathBuf>,
    /// Gateway → terminal rate from a mahimahi packet-delivery trace (one line per 1500-byte
    /// delivery opportunity, in ms; repeats), as `emulate net` reads it.
    #[arg(long)]
    down_rate_trace: Option<PathBuf>,
    /// Terminal → gateway rate from a mahimahi packet-delivery trace.
    #[arg(long)]
    up_rate_trace: Option<PathBuf>,
    /// Random packet loss of each direction, as a fraction from 0 to 1.
    #[arg(long, conflicts_with = "ber", allow_negative_numbers = true)]
    loss: Option<f64>,
    /// Bit-error rate of each direction, from 0 to 1.
    #[arg(long, allow_negative_numbers = true)]
    ber: Option<f64>,
    /// Seed of the links' random generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this long (e.g. 30s) instead of waiting for Ctrl-C.
    #[arg(long, value_parser = parse_duration_ns)]
    duration: Option<u64>,
    /// The counters as JSON at exit: --json (or --json -) prints them on standard output
    /// instead of the text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

pub fn run(cmd: &EmulateCommand) -> Result<()> {
    match cmd {
        EmulateCommand::Udp(args) => udp(args),
        EmulateCommand::Net(args) => net::run(args),
    }
}

fn links(args: &UdpArgs) -> Result<(LinkConfig, LinkConfig)> {
    let leo = leo_path(args.leo.as_deref(), args.duration)?;
    let flags = LinkArgs {
        profile: args.profile,
        down_rate: args.down_rate,
        up_rate: args.up_rate,
        delay: args.delay,
        delay_trace: args.delay_trace.as_deref(),
        down_rate_trace: args.down_rate_trace.as_deref(),
        up_rate_trace: args.up_rate_trace.as_deref(),
        queue: args.queue,
        loss: args.loss,
        ber: args.ber,
    };
    let (up, down) = bench::emulate::links(&flags, leo, false)?;
    bench::emulate::validate(&up, &down)?;
    Ok((up, down))
}

/// The LEO path of a `--leo` flag, traced over `duration_ns` (an hour if absent).
pub fn leo_path(spec: Option<&str>, duration_ns: Option<u64>) -> Result<Option<LeoPath>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let (path, summary) = bench::leo::path(spec, duration_ns.map(|d| d as f64 / 1e9))?;
    outln!("LEO path {summary}");
    Ok(Some(path))
}

fn udp(args: &UdpArgs) -> Result<()> {
    if args.duration == Some(0) {
        bail!("--duration 0s: a run must last; give a positive duration (e.g. 30s) or leave it out to run until Ctrl-C");
    }
    let (up, down) = links(args)?;
    crate::outpath::json_start(&args.json)?;

    let describe = |l: &LinkConfig| {
        let delay_ms = match l.delay {
            Delay::Fixed(d) => format!("{:.1} ms", d as f64 / 1e6),
            Delay::Trace { .. } => "traced".to_string(),
        };
        let queue = match l.queue {
            QueueLimit::Bytes(b) => format!("{b} B"),
            QueueLimit::Packets(p) => format!("{p} packets"),
        };
        let rate = match &l.rate_trace {
            Some(t) => format!(
                "rate trace (mean {:.3} Mb/s)",
                t.mean_rate_bps() as f64 / 1e6
            ),
            None => format!("{:.3} Mb/s", l.rate_bps as f64 / 1e6),
        };
        format!("{rate}, one-way {delay_ms}, queue {queue}")
    };
    let (up_text, down_text) = (describe(&up), describe(&down));
    let config = EmulatorConfig {
        listen: args.listen,
        to: args.to,
        up: up.clone(),
        down: down.clone(),
        seed: args.seed,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let (stats, seconds) = runtime.block_on(async {
        let emu = UdpEmulator::start(config).await?;
        outln!(
            "relaying terminal side {} <-> gateway {} (from {})",
            emu.local_addr(),
            args.to,
            emu.gateway_side_addr()
        );
        outln!("  up   {up_text}");
        outln!("  down {down_text}");
        let start = std::time::Instant::now();
        match args.duration {
            Some(ns) => tokio::select! {
                _ = tokio::time::sleep(Duration::from_nanos(ns)) => {}
                r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
            },
            None => tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?,
        }
        let seconds = start.elapsed().as_secs_f64();
        anyhow::Ok((emu.shutdown().await, seconds))
    })?;
    print_stats(&stats, seconds);
    let value = json!({
        "seconds": seconds,
        "up": direction_json(&stats.up, &up),
        "down": direction_json(&stats.down, &down),
    });
    crate::outpath::write_json(&args.json, &value)?;
    Ok(())
}

fn print_stats(stats: &EmulatorStats, seconds: f64) {
    outln!("after {seconds:.1} s:");
    for (name, s) in [("up", &stats.up), ("down", &stats.down)] {
        let l = &s.link;
        outln!(
            "  {name:<4} received {} pkts / {} B, sent {} pkts / {} B; dropped {} (queue {}, red {}, \
             error {}, outage {}, schedule {}, no terminal {}); duplicated {}, corrupted {}, \
             ignored {}, still in flight {}",
            s.received_packets,
            s.received_bytes,
            s.sent_packets,
            s.sent_bytes,
            s.dropped(),
            l.dropped_queue,
            l.dropped_red,
            l.dropped_error,
            l.dropped_outage,
            s.dropped_schedule,
            s.dropped_no_peer,
            l.duplicated,
            l.corrupted,
            s.ignored_foreign,
            s.in_flight,
        );
    }
}
