//! `satstp bench gateway`: the split-connection gateway on real sockets, on loopback.
//!
//! Three processes: the gateway and terminal daemons (`satstp gateway` and `satstp terminal`
//! with generated keys and configuration files: the terminal's SOCKS5 listener and its STP hop,
//! the gateway's STP hop and relay with a destination policy allowing 127.0.0.0/8), and this
//! one, the load generator: a SOCKS5 client and an origin TCP server (the load-generation kit's;
//! every byte is checked). The satellite hop is encrypted (Noise IK) and has no emulated
//! impairment. Measured: throughput of one bulk download and of N parallel downloads; the CPU
//! seconds per GB of each daemon (its CPU-time clock, in nanoseconds, around each run) and of
//! the load generator apart (getrusage of this process); the resident memory each daemon spends
//! per idle connection (its VmRSS growth while N idle connections are held open, divided by N).

use crate::error::{Context, Result};
use crate::process::{cpu_seconds, free_port, scrape, spawn, Proc};
use loadgen::client::{Client, Route};
use loadgen::origin::Origin;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whole benchmark must finish within this.
const OVERALL_TIMEOUT: Duration = Duration::from_secs(300);
/// STP receive and send buffers per connection (allocated as data arrives, not up front).
pub const STP_BUFFER: u32 = 32 << 20;
/// Bytes a relay stream may hand to the hop before STP accepts them.
pub const RELAY_BUFFER: u32 = 8 << 20;
/// STP datagram size of the hop (the daemons' default on an IPv4 hop: a 1500-byte path).
pub const MAX_DATAGRAM: u16 = 1443;
/// Smallest `--memory-cap`: one connection's relay buffer and STP send buffer with room to
/// spare, so the single flow is never held back by the cap.
pub const MIN_MEMORY_CAP: u64 = 64 << 20;
/// Idle connections opened concurrently at most.
const OPEN_CONCURRENCY: usize = 32;

/// What `satstp bench gateway` was asked for (its flags, parsed).
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// Bytes of the single-flow download; the parallel run moves the same total split evenly.
    pub bytes: u64,
    /// Parallel connections in the second run.
    pub parallel: u32,
    /// Idle connections held open for the memory measurement.
    pub idle: u32,
    /// Hop workers of each daemon (`None`: the daemons' default).
    pub workers: Option<u32>,
    /// Terminal daemons.
    pub terminals: u32,
    /// The tunnel cipher of both daemons (`tunnel_cipher`: auto, chacha20-poly1305,
    /// aes-256-gcm).
    pub tunnel_cipher: String,
    /// `limits.memory_cap_bytes` of both daemons (`None`: their default, 512 MiB).
    pub memory_cap: Option<u64>,
    /// `limits.read_ahead_bytes` of both daemons (`None`: their default).
    pub read_ahead: Option<u64>,
    /// `stp.min_poll_interval_ms` of both daemons (`None`: the engine's default, 10 ms).
    pub min_poll_interval_ms: Option<u32>,
}

/// CPU seconds spent during one run, by process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub terminal: f64,
    pub gateway: f64,
    pub loadgen: f64,
}

impl Cpu {
    /// Per GB of `bytes` moved.
    pub fn per_gb(&self, bytes: u64) -> Cpu {
        let gb = bytes as f64 / 1e9;
        Cpu {
            terminal: self.terminal / gb,
            gateway: self.gateway / gb,
            loadgen: self.loadgen / gb,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "terminal": self.terminal,
            "gateway": self.gateway,
            "loadgen": self.loadgen,
        })
    }
}

/// What the benchmark measured.
pub struct Figures {
    pub single_secs: f64,
    pub single_gbps: f64,
    pub parallel_secs: f64,
    pub parallel_bytes: u64,
    pub parallel_gbps: f64,
    pub single_cpu: Cpu,
    pub parallel_cpu: Cpu,
    /// VmRSS, KiB, of (terminal, gateway) before and after the idle connections opened.
    pub rss_before_kib: (u64, u64),
    pub rss_after_kib: (u64, u64),
    /// VmHWM, KiB, of (terminal, gateway) at the end: the most each held at once.
    pub peak_rss_kib: (u64, u64),
    pub idle: u64,
    /// The gateway hop (the sender of the downloads) during the single flow.
    pub single_hop: HopDelta,
    /// The same during the parallel flows.
    pub parallel_hop: HopDelta,
    /// Tunnel handshakes the gateway completed by the end (one per terminal session).
    pub gateway_handshakes: u64,
    /// How fast this host seals and copies, measured before the daemons started.
    pub host: Option<crate::host::HostReference>,
}

impl Figures {
    /// KiB per idle connection of the terminal and of the gateway.
    pub fn idle_kib(&self) -> (f64, f64) {
        let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / self.idle as f64;
        (
            per(self.rss_after_kib.0, self.rss_before_kib.0),
            per(self.rss_after_kib.1, self.rss_before_kib.1),
        )
    }
}

/// What the gateway's hop did during one run, from its `/metrics`: datagrams it sent and
/// received with their bytes (tunnel and STP headers included), the STP retransmissions among
/// those sent, the POLLs it sent and the STATs and USTATs it received (the acknowledgement
/// traffic a run costs per byte); and the receives the kernel dropped at each daemon's hop
/// sockets, their receive buffers full (`satstp_hop_socket_overflows_total`, a segmented send
/// counting once: the terminals' is where a download's losses on loopback come from), and the
/// times their receive backpressure held the windows instead
/// (`satstp_hop_backpressure_episodes_total`; `None` from a daemon that does not report it).
#[derive(Debug, Clone, Copy, Default)]
pub struct HopDelta {
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub retransmitted_packets: u64,
    pub polls_sent: u64,
    pub stats_received: u64,
    pub gateway_socket_overflows: u64,
    pub terminal_socket_overflows: u64,
    pub gateway_backpressure_episodes: Option<u64>,
    pub terminal_backpressure_episodes: Option<u64>,
    /// STP checksums the tunnel computed as it sealed, for a peer that verifies them
    /// (`satstp_tunnel_stp_checksums_filled_total`); `None` where a daemon does not report it
    /// (an older version, which computes every one).
    pub gateway_stp_checksums_filled: Option<u64>,
    pub terminal_stp_checksums_filled: Option<u64>,
}

impl HopDelta {
    /// Mean bytes per datagram the gateway sent (0 without any).
    pub fn bytes_per_datagram_sent(&self) -> f64 {
        self.bytes_sent as f64 / self.datagrams_sent.max(1) as f64
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "datagrams_sent": self.datagrams_sent,
            "datagrams_received": self.datagrams_received,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "bytes_per_datagram_sent": self.bytes_per_datagram_sent(),
            "retransmitted_packets": self.retransmitted_packets,
            "polls_sent": self.polls_sent,
            "stats_received": self.stats_received,
            "gateway_socket_overflows": self.gateway_socket_overflows,
            "terminal_socket_overflows": self.terminal_socket_overflows,
            "gateway_backpressure_episodes": self.gateway_backpressure_episodes,
            "terminal_backpressure_episodes": self.terminal_backpressure_episodes,
            "gateway_stp_checksums_filled": self.gateway_stp_checksums_filled,
            "terminal_stp_checksums_filled": self.terminal_stp_checksums_filled,
        })
    }
}

/// The gateway counters [`HopDelta`] is made of.
#[derive(Debug, Clone, Copy, Default)]
struct HopCounters {
    datagrams_sent: f64,
    datagrams_received: f64,
    bytes_sent: f64,
    bytes_received: f64,
    retransmissions: f64,
    polls_sent: f64,
    stats_received: f64,
    gateway_socket_overflows: f64,
    terminal_socket_overflows: f64,
    gateway_backpressure_episodes: Option<f64>,
    terminal_backpressure_episodes: Option<f64>,
    gateway_stp_checksums_filled: Option<f64>,
    terminal_stp_checksums_filled: Option<f64>,
}

/// The sum of the `satstp_hop_socket_overflows_total` a daemon's `/metrics` reports.
fn socket_overflows(m: &std::collections::BTreeMap<String, f64>) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with("satstp_hop_socket_overflows_total"))
        .map(|(_, v)| v)
        .sum()
}

/// `satstp_tunnel_stp_checksums_filled_total` as a daemon's `/metrics` reports it, if it does.
fn stp_checksums_filled(m: &std::collections::BTreeMap<String, f64>) -> Option<f64> {
    reported(m, "satstp_tunnel_stp_checksums_filled_total")
}

/// The figure `name` of a daemon's `/metrics`, if it reports it.
fn reported(m: &std::collections::BTreeMap<String, f64>, name: &str) -> Option<f64> {
    m.iter().find(|(k, _)| k.starts_with(name)).map(|(_, v)| *v)
}

impl HopCounters {
    /// The gateway's counters from its `/metrics` at `metrics`, and the terminals' socket
    /// overflows and checksums from theirs.
    fn read(metrics: SocketAddr, terminals: &[SocketAddr]) -> Result<HopCounters> {
        let mut terminal_socket_overflows = 0.0;
        let mut terminal_stp_checksums_filled = Some(0.0);
        let mut terminal_backpressure_episodes = Some(0.0);
        for &t in terminals {
            let m = scrape(t)?;
            terminal_socket_overflows += socket_overflows(&m);
            terminal_backpressure_episodes = terminal_backpressure_episodes
                .zip(reported(&m, "satstp_hop_backpressure_episodes_total"))
                .map(|(a, b)| a + b);
            terminal_stp_checksums_filled = terminal_stp_checksums_filled
                .zip(stp_checksums_filled(&m))
                .map(|(a, b)| a + b);
        }
        let m = scrape(metrics)?;
        let sum = |name: &str, label: &str| -> f64 {
            m.iter()
                .filter(|(k, _)| k.starts_with(name) && k.contains(label))
                .map(|(_, v)| v)
                .sum()
        };
        Ok(HopCounters {
            // At the gateway, "down" (towards the terminal) is sent and "up" received.
            datagrams_sent: sum("satstp_hop_datagrams_total{", "direction=\"down\""),
            datagrams_received: sum("satstp_hop_datagrams_total{", "direction=\"up\""),
            bytes_sent: sum("satstp_hop_bytes_total{", "direction=\"down\""),
            bytes_received: sum("satstp_hop_bytes_total{", "direction=\"up\""),
            retransmissions: sum("satstp_stp_retransmissions_total{", ""),
            polls_sent: sum("satstp_stp_packets_sent_total{", "type=\"poll\""),
            stats_received: sum("satstp_stp_packets_received_total{", "type=\"stat\"")
                + sum("satstp_stp_packets_received_total{", "type=\"ustat\""),
            gateway_socket_overflows: socket_overflows(&m),
            terminal_socket_overflows,
            gateway_backpressure_episodes: reported(&m, "satstp_hop_backpressure_episodes_total"),
            terminal_backpressure_episodes,
            gateway_stp_checksums_filled: stp_checksums_filled(&m),
            terminal_stp_checksums_filled,
        })
    }

    fn delta(&self, later: &HopCounters) -> HopDelta {
        let d = |a: f64, b: f64| (b - a).max(0.0) as u64;
        // A counter only some daemons report: the difference where both readings have it.
        let both = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| d(a, b));
        HopDelta {
            datagrams_sent: d(self.datagrams_sent, later.datagrams_sent),
            datagrams_received: d(self.datagrams_received, later.datagrams_received),
            bytes_sent: d(self.bytes_sent, later.bytes_sent),
            bytes_received: d(self.bytes_received, later.bytes_received),
            retransmitted_packets: d(self.retransmissions, later.retransmissions),
            polls_sent: d(self.polls_sent, later.polls_sent),
            stats_received: d(self.stats_received, later.stats_received),
            gateway_socket_overflows: d(
                self.gateway_socket_overflows,
                later.gateway_socket_overflows,
            ),
            terminal_socket_overflows: d(
                self.terminal_socket_overflows,
                later.terminal_socket_overflows,
            ),
            gateway_backpressure_episodes: both(
                self.gateway_backpressure_episodes,
                later.gateway_backpressure_episodes,
            ),
            terminal_backpressure_episodes: both(
                self.terminal_backpressure_episodes,
                later.terminal_backpressure_episodes,
            ),
            gateway_stp_checksums_filled: both(
                self.gateway_stp_checksums_filled,
                later.gateway_stp_checksums_filled,
            ),
            terminal_stp_checksums_filled: both(
                self.terminal_stp_checksums_filled,
                later.terminal_stp_checksums_filled,
            ),
        }
    }
}

/// The daemons of one bench: the processes and their addresses (a SOCKS5 listener per
/// terminal).
struct Daemons {
    terminals: Vec<Proc>,
    gateway: Proc,
    socks: Vec<SocketAddr>,
    metrics: SocketAddr,
    /// Each terminal's `/metrics` address.
    terminal_metrics: Vec<SocketAddr>,
}

impl Daemons {
    /// CPU seconds of the terminals together and of the gateway.
    fn cpu(&self) -> Result<(f64, f64)> {
        let mut t = 0.0;
        for p in &self.terminals {
            t += p.cpu_seconds()?;
        }
        Ok((t, self.gateway.cpu_seconds()?))
    }

    /// VmRSS of the first terminal (the one holding the idle connections) and the gateway.
    fn rss(&self) -> Result<(u64, u64)> {
        let t = self.terminals.first().context("no terminal")?;
        Ok((t.rss_kib()?, self.gateway.rss_kib()?))
    }

    /// VmHWM (the peak of VmRSS) of the first terminal and the gateway.
    fn peak_rss(&self) -> Result<(u64, u64)> {
        let t = self.terminals.first().context("no terminal")?;
        Ok((t.status_kib("VmHWM")?, self.gateway.status_kib("VmHWM")?))
    }

    fn check_running(&mut self) -> Result<()> {
        for t in &mut self.terminals {
            t.check_running()?;
        }
        self.gateway.check_running()
    }
}

impl GatewayOptions {
    /// The flags' checks.
    pub fn check(&self) -> Result<()> {
        let args = self;
        if args.bytes == 0 || args.bytes > 1 << 40 {
            bail!(
                "--bytes must be between 1 byte and 1 TiB, got {}",
                args.bytes
            );
        }
        if !(1..=1000).contains(&args.parallel) {
            bail!(
                "--parallel must be between 1 and 1000, got {}",
                args.parallel
            );
        }
        if u64::from(args.parallel) > args.bytes {
            bail!("--bytes must be at least --parallel (one byte per connection)");
        }
        if !(1..=5000).contains(&args.idle) {
            bail!("--idle must be between 1 and 5000, got {}", args.idle);
        }
        if let Some(w) = args.workers {
            if !(1..=64).contains(&w) {
                bail!("--workers must be between 1 and 64, got {w}");
            }
        }
        if let Err(e) = pep::tunnel::CipherChoice::parse(&args.tunnel_cipher) {
            bail!("--tunnel-cipher {e}");
        }
        if let Some(b) = args.memory_cap {
            if !(MIN_MEMORY_CAP..=1 << 40).contains(&b) {
                bail!("--memory-cap must be between 64MiB and 1TiB, got {b} bytes");
            }
        }
        if let Some(b) = args.read_ahead {
            if !(256 << 10..=1 << 30).contains(&b) {
                bail!("--read-ahead must be between 256KiB and 1GiB, got {b} bytes");
            }
            if b > args.memory_cap.unwrap_or(512 << 20) {
                bail!("--read-ahead must not exceed the memory cap (--memory-cap, default 512MiB), got {b} bytes");
            }
        }
        if let Some(ms) = args.min_poll_interval_ms {
            if !(1..=1000).contains(&ms) {
                bail!("--min-poll-interval must be between 1 and 1000 ms, got {ms}");
            }
        }
        if !(1..=200).contains(&args.terminals) {
            bail!(
                "--terminals must be between 1 and 200, got {}",
                args.terminals
            );
        }
        Ok(())
    }
}

/// The satstp binaries the daemons are started from (usually both this one).
#[derive(Debug, Clone)]
pub struct DaemonExes {
    pub gateway: std::path::PathBuf,
    pub terminal: std::path::PathBuf,
}

/// Runs the benchmark: the daemons started from `exes` with their files in `dir` (see
/// [`crate::process::daemon_dir`]), the idle connections, the single flow and the parallel
/// flows measured.
pub fn run(args: &GatewayOptions, exes: &DaemonExes, dir: &Path) -> Result<Figures> {
    let _ = pep::fdlimit::raise_nofile_limit();
    // Before anything of the bench runs, so the figures describe the host, not the bench.
    let host = crate::host::measure(usize::from(MAX_DATAGRAM), Duration::from_millis(200));
    let mut daemons = start_daemons(exes, dir, args, args.idle + args.parallel + 64)?;
    let mut f = measure(args, &mut daemons)?;
    f.host = Some(host);
    Ok(f)
}

impl Figures {
    /// The JSON report.
    pub fn json(&self, args: &GatewayOptions) -> serde_json::Value {
        let f = self;
        let single = f.single_cpu.per_gb(args.bytes);
        let parallel = f.parallel_cpu.per_gb(f.parallel_bytes);
        let (t_idle, g_idle) = f.idle_kib();
        serde_json::json!({
            "benchmark": "gateway",
            "encryption": format!(
                "noise-ik {}",
                pep::tunnel::CipherChoice::parse(&args.tunnel_cipher)
                    .ok()
                    .and_then(|c| c.ciphers().first().map(|c| c.name()))
                    .unwrap_or("?")
            ),
            "processes": "terminal and gateway daemons each in its own process; client and origin (the load generator) in the bench's",
            "workers": args.workers,
            "terminals": args.terminals,
            "stp_buffer_bytes": STP_BUFFER,
            "relay_buffer_bytes": RELAY_BUFFER,
            "max_datagram_bytes": MAX_DATAGRAM,
            "bytes": args.bytes,
            "single_flow_seconds": f.single_secs,
            "single_flow_gbps": f.single_gbps,
            "parallel_connections": args.parallel,
            "parallel_bytes": f.parallel_bytes,
            "parallel_seconds": f.parallel_secs,
            "parallel_gbps": f.parallel_gbps,
            "single_flow_cpu_seconds": f.single_cpu.json(),
            "single_flow_cpu_s_per_gb": single.json(),
            "parallel_cpu_seconds": f.parallel_cpu.json(),
            "parallel_cpu_s_per_gb": parallel.json(),
            "cpu_s_per_gb": single.terminal + single.gateway,
            "idle_connections": args.idle,
            "terminal_rss_kib": [f.rss_before_kib.0, f.rss_after_kib.0],
            "gateway_rss_kib": [f.rss_before_kib.1, f.rss_after_kib.1],
            "terminal_peak_rss_kib": f.peak_rss_kib.0,
            "gateway_peak_rss_kib": f.peak_rss_kib.1,
            "memory_cap_bytes": args.memory_cap,
            "read_ahead_bytes": args.read_ahead,
            "min_poll_interval_ms": args.min_poll_interval_ms,
            "terminal_idle_conn_kib": t_idle,
            "gateway_idle_conn_kib": g_idle,
            "idle_conn_kib": t_idle + g_idle,
            "single_flow_gateway_datagrams_sent": f.single_hop.datagrams_sent,
            "single_flow_gateway_datagrams_received": f.single_hop.datagrams_received,
            "single_flow_retransmitted_packets": f.single_hop.retransmitted_packets,
            "single_flow_gateway_hop": f.single_hop.json(),
            "parallel_gateway_hop": f.parallel_hop.json(),
            "gateway_tunnel_handshakes": f.gateway_handshakes,
            "host": f.host.as_ref().map(|h| h.json()),
        })
    }
}

/// Writes keys and configuration files into `dir` and starts the gateway and the terminal
/// daemons; returns once every daemon's metrics endpoint answers ([`wait_ready`]): a terminal
/// binds its SOCKS5 listener before it.
fn start_daemons(
    exes: &DaemonExes,
    dir: &Path,
    args: &GatewayOptions,
    max_connections: u32,
) -> Result<Daemons> {
    let (gk, gp) = pep::keys::generate_keypair()?;
    let (gkey, _) = pep::keys::write_keypair(&dir.join("gateway"), &gk, &gp)?;
    let mut terminals = Vec::new();
    for i in 0..args.terminals {
        let (tk, tp) = pep::keys::generate_keypair()?;
        let (tkey, _) = pep::keys::write_keypair(&dir.join(format!("terminal{i}")), &tk, &tp)?;
        terminals.push((tkey, tp, free_port()?, free_port()?));
    }
    let (hop, metrics) = (free_port()?, free_port()?);
    let workers = args
        .workers
        .map_or(String::new(), |w| format!("workers = {w}\n"))
        + &format!("tunnel_cipher = \"{}\"\n", args.tunnel_cipher);
    let memcap = args
        .memory_cap
        .map_or(String::new(), |b| format!("memory_cap_bytes = {b}\n"))
        + &args
            .read_ahead
            .map_or(String::new(), |b| format!("read_ahead_bytes = {b}\n"));
    let poll = args
        .min_poll_interval_ms
        .map_or(String::new(), |ms| format!("min_poll_interval_ms = {ms}\n"));
    let common = format!(
        "idle_timeout_s = 3600\n{workers}\
         [{{side}}.limits]\nrelay_buffer_bytes = {RELAY_BUFFER}\nmax_connections = {max_connections}\n\
         max_connections_per_terminal = {max_connections}\n{memcap}\
         [{{side}}.stp]\nrecv_buffer_bytes = {STP_BUFFER}\nsend_buffer_bytes = {STP_BUFFER}\n{poll}"
    );
    let allowed: Vec<String> = terminals
        .iter()
        .map(|(_, tp, _, _)| format!("\"{}\"", tp.to_hex()))
        .collect();
    let gateway = format!(
        "[gateway]\nlisten = \"127.0.0.1:{hop}\"\nprivate_key_file = {gkey:?}\n\
         allowed_terminals = [{allowed}]\nmetrics_listen = \"127.0.0.1:{metrics}\"\n{}\
         [gateway.policy]\nallow = [\"127.0.0.0/8\"]\n",
        common.replace("{side}", "gateway"),
        gkey = gkey.display().to_string(),
        allowed = allowed.join(", ")
    );
    let mut configs = vec![("gateway".to_string(), gateway)];
    for (i, (tkey, _, socks, metrics)) in terminals.iter().enumerate() {
        let text = format!(
            "[terminal]\nsocks_listen = \"127.0.0.1:{socks}\"\ngateway = \"127.0.0.1:{hop}\"\n\
             metrics_listen = \"127.0.0.1:{metrics}\"\n\
             gateway_public_key = \"{gp}\"\nprivate_key_file = {tkey:?}\nsocks_fast_open = false\n{}",
            common.replace("{side}", "terminal"),
            tkey = tkey.display().to_string(),
            gp = gp.to_hex()
        );
        configs.push((format!("terminal{i}"), text));
    }
    // The daemons log at `warn` unless `SATSTP_BENCH_LOG` names a level (`info`, `debug`, a
    // filter such as "info,pep=debug"): with `SATSTP_KEEP=1` their logs stay for a look.
    let level = std::env::var("SATSTP_BENCH_LOG").unwrap_or_else(|_| "warn".to_string());
    let deadline = Instant::now() + Duration::from_secs(20 + u64::from(args.terminals) / 5);
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics));
    let mut procs = Vec::new();
    for (name, text) in &configs {
        let conf = dir.join(format!("{name}.toml"));
        std::fs::write(&conf, text).with_context(|| format!("cannot write {}", conf.display()))?;
        let role = if name == "gateway" {
            "gateway"
        } else {
            "terminal"
        };
        let exe = if role == "gateway" {
            &exes.gateway
        } else {
            &exes.terminal
        };
        procs.push(spawn(
            exe,
            &[
                role,
                "--config",
                &conf.to_string_lossy(),
                "--log-level",
                &level,
            ],
            role,
            Some(&dir.join(format!("{name}.log"))),
        )?);
        if role == "gateway" {
            // The terminals start once the gateway listens: a terminal whose first handshake
            // finds no gateway retries later, and its session starts on the fallback suite.
            // The metrics endpoint is bound after the hop's socket.
            let gateway = procs.last_mut().context("the gateway process")?;
            wait_ready(metrics, deadline, || gateway.check_running())?;
        }
    }
    let mut procs = procs.into_iter();
    let gateway = procs.next().context("the gateway process")?;
    let mut d = Daemons {
        terminals: procs.collect(),
        gateway,
        socks: terminals
            .iter()
            .map(|(_, _, p, _)| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect(),
        metrics,
        terminal_metrics: terminals
            .iter()
            .map(|(_, _, _, p)| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect(),
    };
    for (_, _, _, port) in &terminals {
        let addr = SocketAddr::from(([127, 0, 0, 1], *port));
        wait_ready(addr, deadline, || d.check_running())?;
    }
    Ok(d)
}

/// Waits until the daemon whose metrics endpoint is `addr` answers `GET /metrics`, checking
/// that it still runs (`running`) between tries. The readiness probe the daemons know: a bare
/// connection to a terminal's SOCKS5 listener, closed without a request, is logged and counted
/// there as a connection refused for its protocol.
fn wait_ready(
    addr: SocketAddr,
    deadline: Instant,
    mut running: impl FnMut() -> Result<()>,
) -> Result<()> {
    loop {
        let answer = crate::process::fetch_metrics(addr).unwrap_or_default();
        if answer.starts_with("HTTP/1.1 200") {
            return Ok(());
        }
        running()?;
        if Instant::now() > deadline {
            bail!("the daemon does not serve its metrics on {addr} in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn measure(args: &GatewayOptions, d: &mut Daemons) -> Result<Figures> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let res = rt.block_on(async {
        match tokio::time::timeout(OVERALL_TIMEOUT, bench(args, d)).await {
            Ok(r) => r,
            Err(_) => Err(err!(
                "gateway benchmark did not finish within {} s",
                OVERALL_TIMEOUT.as_secs()
            )),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    let f = res?;
    d.check_running()?;
    Ok(f)
}

/// CPU seconds of the daemons and of this process so far.
fn cpu_now(d: &Daemons) -> Result<Cpu> {
    let (terminal, gateway) = d.cpu()?;
    Ok(Cpu {
        terminal,
        gateway,
        loadgen: cpu_seconds()?,
    })
}

fn cpu_since(before: Cpu, d: &Daemons) -> Result<Cpu> {
    let now = cpu_now(d)?;
    Ok(Cpu {
        terminal: now.terminal - before.terminal,
        gateway: now.gateway - before.gateway,
        loadgen: now.loadgen - before.loadgen,
    })
}

async fn bench(args: &GatewayOptions, d: &Daemons) -> Result<Figures> {
    let origin = Origin::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .context("cannot start the origin")?;
    let socks = *d.socks.first().context("no terminal")?;

    // Idle connections first, before bulk transfers leave freed memory in the heap: established
    // through both hops to the origin, which holds them. A warm-up download sets up the tunnel.
    download(socks, origin.addr(), 1000)
        .await
        .context("warm-up download")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before_kib = d.rss()?;
    let held_before = origin.accepted();
    let idle = args.idle as usize;
    let mut conns = Vec::with_capacity(idle);
    let mut set = tokio::task::JoinSet::new();
    let mut opened = 0usize;
    while conns.len() < idle {
        while opened < idle && set.len() < OPEN_CONCURRENCY {
            let addr = origin.addr();
            set.spawn(async move { loadgen::socks5::connect(socks, addr).await });
            opened += 1;
        }
        match set.join_next().await {
            Some(r) => conns.push(
                r.context("idle connection task")?
                    .context("opening an idle connection")?,
            ),
            None => bail!("idle connection tasks ended early"),
        }
    }
    // Every SOCKS success means the gateway connected; wait for the origin to have them all.
    let wait = Instant::now();
    while origin.accepted() < held_before + idle as u64 {
        if wait.elapsed() > Duration::from_secs(30) {
            bail!(
                "the origin holds {} of {idle} idle connections after 30 s",
                origin.accepted() - held_before
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_after_kib = d.rss()?;
    drop(conns);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Single flow, with each process's CPU time around it.
    let hop0 = HopCounters::read(d.metrics, &d.terminal_metrics)?;
    let cpu0 = cpu_now(d)?;
    let t0 = Instant::now();
    download(socks, origin.addr(), args.bytes)
        .await
        .context("single-flow download")?;
    let single_secs = t0.elapsed().as_secs_f64();
    let single_cpu = cpu_since(cpu0, d)?;
    let single_hop = hop0.delta(&HopCounters::read(d.metrics, &d.terminal_metrics)?);

    // Parallel flows: the same total split evenly.
    let n = u64::from(args.parallel);
    let each = args.bytes / n;
    // Warm every terminal's tunnel session first, so the run measures transfers only.
    for &proxy in d.socks.iter().skip(1) {
        download(proxy, origin.addr(), 1000)
            .await
            .context("warm-up download")?;
    }
    let hop0 = HopCounters::read(d.metrics, &d.terminal_metrics)?;
    let cpu0 = cpu_now(d)?;
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let addr = origin.addr();
        let proxy = d.socks[i as usize % d.socks.len()];
        set.spawn(async move { download(proxy, addr, each).await });
    }
    while let Some(r) = set.join_next().await {
        r.context("parallel download task")?
            .context("parallel download")?;
    }
    let parallel_secs = t0.elapsed().as_secs_f64();
    let parallel_cpu = cpu_since(cpu0, d)?;
    let parallel_hop = hop0.delta(&HopCounters::read(d.metrics, &d.terminal_metrics)?);
    let peak_rss_kib = d.peak_rss()?;
    let parallel_bytes = each * n;
    let gateway_handshakes = scrape(d.metrics)?
        .iter()
        .filter(|(k, _)| k.starts_with("satstp_tunnel_handshakes_total{"))
        .map(|(_, v)| *v as u64)
        .sum();

    Ok(Figures {
        single_secs,
        single_gbps: args.bytes as f64 * 8.0 / single_secs / 1e9,
        parallel_secs,
        parallel_bytes,
        parallel_gbps: parallel_bytes as f64 * 8.0 / parallel_secs / 1e9,
        single_cpu,
        parallel_cpu,
        rss_before_kib,
        rss_after_kib,
        peak_rss_kib,
        idle: idle as u64,
        single_hop,
        parallel_hop,
        gateway_handshakes,
        host: None,
    })
}

/// Downloads `n` bytes of object 0 from the origin through the SOCKS5 listener `proxy`, every
/// byte checked.
pub async fn download(proxy: SocketAddr, origin: SocketAddr, n: u64) -> Result<()> {
    let client = Client::new(origin, Route::Socks5(proxy));
    let mut conn = client
        .connect()
        .await
        .context("SOCKS5 through the terminal")?;
    conn.get(0, n).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_out_of_range_are_refused_naming_the_flag() {
        let ok = GatewayOptions {
            bytes: 1_000_000,
            parallel: 10,
            idle: 100,
            workers: None,
            tunnel_cipher: "auto".into(),
            terminals: 1,
            memory_cap: Some(MIN_MEMORY_CAP),
            read_ahead: Some(8 << 20),
            min_poll_interval_ms: Some(1),
        };
        assert!(ok.check().is_ok());
        for (o, flag) in [
            (
                GatewayOptions {
                    bytes: 0,
                    ..ok.clone()
                },
                "--bytes",
            ),
            (
                GatewayOptions {
                    parallel: 0,
                    ..ok.clone()
                },
                "--parallel",
            ),
            (
                GatewayOptions {
                    bytes: 5,
                    ..ok.clone()
                },
                "--bytes must be at least --parallel",
            ),
            (
                GatewayOptions {
                    idle: 5001,
                    ..ok.clone()
                },
                "--idle",
            ),
            (
                GatewayOptions {
                    workers: Some(65),
                    tunnel_cipher: "auto".into(),
                    ..ok.clone()
                },
                "--workers",
            ),
            (
                GatewayOptions {
                    terminals: 0,
                    ..ok.clone()
                },
                "--terminals",
            ),
            (
                GatewayOptions {
                    memory_cap: Some(MIN_MEMORY_CAP - 1),
                    ..ok.clone()
                },
                "--memory-cap",
            ),
            (
                GatewayOptions {
                    read_ahead: Some(1000),
                    ..ok.clone()
                },
                "--read-ahead",
            ),
            (
                GatewayOptions {
                    read_ahead: Some(MIN_MEMORY_CAP + 1),
                    ..ok.clone()
                },
                "--read-ahead must not exceed",
            ),
            (
                GatewayOptions {
                    min_poll_interval_ms: Some(0),
                    ..ok.clone()
                },
                "--min-poll-interval",
            ),
        ] {
            let e = o.check().unwrap_err().to_string();
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }

    #[test]
    fn idle_memory_is_the_growth_per_connection() {
        let f = Figures {
            single_secs: 1.0,
            single_gbps: 1.0,
            parallel_secs: 1.0,
            parallel_bytes: 1,
            parallel_gbps: 1.0,
            single_cpu: Cpu::default(),
            parallel_cpu: Cpu::default(),
            rss_before_kib: (1000, 2000),
            rss_after_kib: (1500, 2000),
            peak_rss_kib: (1500, 2000),
            idle: 100,
            single_hop: HopDelta::default(),
            parallel_hop: HopDelta::default(),
            gateway_handshakes: 1,
            host: None,
        };
        assert_eq!(f.idle_kib(), (5.0, 0.0));
        let v = f.json(&GatewayOptions {
            bytes: 1,
            parallel: 1,
            idle: 100,
            workers: None,
            tunnel_cipher: "auto".into(),
            terminals: 1,
            memory_cap: None,
            read_ahead: None,
            min_poll_interval_ms: None,
        });
        assert_eq!(v["terminal_idle_conn_kib"], 5.0);
        assert_eq!(v["idle_conn_kib"], 5.0);
    }
}
