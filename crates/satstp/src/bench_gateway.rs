//! `satstp bench gateway`: the split-connection gateway on real sockets, on loopback.
//!
//! One process holds everything: a SOCKS5 client, the terminal (SOCKS listener and its STP hop),
//! the gateway (STP hop and relay, destination policy allowing 127.0.0.0/8), and an origin TCP
//! server (the client and the origin are the load-generation kit's; every byte is checked). The satellite hop is encrypted (Noise IK) and has no emulated impairment. Measured:
//! throughput of one bulk download, of N parallel downloads, CPU seconds per GB (getrusage of
//! the whole process around the single-flow run) and resident memory per idle connection (VmRSS
//! growth while N idle connections are held open, divided by N).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use loadgen::client::{Client, Route};
use loadgen::origin::Origin;
use netsim::units::parse_bytes;
use pep::gateway::policy::{Policy, PolicyConfig};
use pep::hop::{HopMonitor, HopStatus};
use pep::keys::generate_keypair;
use pep::socks::SocksAuth;
use pep::stack::{SocksListener, StpHop, TerminalHop};
use pep::{GatewayOptions, TerminalOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stp::{Config, EndpointConfig};

/// Whole benchmark must finish within this.
const OVERALL_TIMEOUT: Duration = Duration::from_secs(300);
/// STP receive and send buffers per connection (allocated as data arrives, not up front).
const STP_BUFFER: u32 = 32 << 20;
/// Bytes a relay stream may hand to the hop before STP accepts them.
const RELAY_BUFFER: u32 = 8 << 20;
/// Idle connections opened concurrently at most.
const OPEN_CONCURRENCY: usize = 32;

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
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

struct Figures {
    single_secs: f64,
    single_gbps: f64,
    parallel_secs: f64,
    parallel_bytes: u64,
    parallel_gbps: f64,
    cpu_secs: f64,
    cpu_s_per_gb: f64,
    rss_before_kib: u64,
    rss_after_kib: u64,
    idle_conn_kib: f64,
    /// The gateway hop (the sender of the downloads) during the single flow.
    single_hop: HopDelta,
}

/// What the gateway's hop did during one run: datagrams it sent, the STP retransmissions among
/// them, and losses its STP connections detected.
#[derive(Debug, Clone, Copy, Default)]
struct HopDelta {
    datagrams_sent: u64,
    datagrams_received: u64,
    retransmitted_packets: u64,
    losses_detected: u64,
}

impl HopDelta {
    fn between(a: &HopStatus, b: &HopStatus) -> HopDelta {
        HopDelta {
            datagrams_sent: b.datagrams_sent.saturating_sub(a.datagrams_sent),
            datagrams_received: b.datagrams_received.saturating_sub(a.datagrams_received),
            retransmitted_packets: b
                .totals
                .retransmitted_packets
                .saturating_sub(a.totals.retransmitted_packets),
            losses_detected: b
                .totals
                .losses_detected
                .saturating_sub(a.totals.losses_detected),
        }
    }
}

async fn hop_status(m: &HopMonitor) -> Result<HopStatus> {
    m.status().await.context("the gateway hop stopped")
}

pub fn run(args: &GatewayBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let res = rt.block_on(async {
        match tokio::time::timeout(OVERALL_TIMEOUT, bench(args)).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!(
                "gateway benchmark did not finish within {} s",
                OVERALL_TIMEOUT.as_secs()
            )),
        }
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    let f = res?;
    let mib = STP_BUFFER >> 20;
    if args.json.is_some() {
        let v = serde_json::json!({
            "benchmark": "gateway",
            "encryption": "noise-ik chacha20-poly1305",
            "stp_buffer_bytes": STP_BUFFER,
            "relay_buffer_bytes": RELAY_BUFFER,
            "max_datagram_bytes": Config::default().max_datagram_bytes,
            "bytes": args.bytes,
            "single_flow_seconds": f.single_secs,
            "single_flow_gbps": f.single_gbps,
            "parallel_connections": args.parallel,
            "parallel_bytes": f.parallel_bytes,
            "parallel_seconds": f.parallel_secs,
            "parallel_gbps": f.parallel_gbps,
            "cpu_seconds": f.cpu_secs,
            "cpu_s_per_gb": f.cpu_s_per_gb,
            "idle_connections": args.idle,
            "rss_before_kib": f.rss_before_kib,
            "rss_after_kib": f.rss_after_kib,
            "idle_conn_kib": f.idle_conn_kib,
            "single_flow_gateway_datagrams_sent": f.single_hop.datagrams_sent,
            "single_flow_gateway_datagrams_received": f.single_hop.datagrams_received,
            "single_flow_retransmitted_packets": f.single_hop.retransmitted_packets,
            "single_flow_losses_detected": f.single_hop.losses_detected,
        });
        crate::outpath::write_json(&args.json, &v)?;
    }
    {
        outln!("satstp bench gateway: SOCKS client → terminal → encrypted STP hop → gateway → origin, all on loopback, no impairment");
        outln!(
            "  STP config          recv/send buffers {mib} MiB, max datagram {} bytes, min POLL interval 1 ms; relay buffer {} MiB",
            Config::default().max_datagram_bytes,
            RELAY_BUFFER >> 20
        );
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
        outln!(
            "  CPU                 {:.3} s user+system for the single flow = {:.2} CPU s/GB (whole process: client, terminal, gateway, origin)",
            f.cpu_secs, f.cpu_s_per_gb
        );
        outln!(
            "  single-flow hop     gateway sent {} datagrams, received {}; {} STP retransmissions, {} losses detected",
            f.single_hop.datagrams_sent,
            f.single_hop.datagrams_received,
            f.single_hop.retransmitted_packets,
            f.single_hop.losses_detected
        );
        outln!(
            "  idle connections    {}: VmRSS {} → {} KiB = {:.1} KiB per connection  (target ≤ 64; both hops, relay tasks, client and origin)",
            args.idle, f.rss_before_kib, f.rss_after_kib, f.idle_conn_kib
        );
    }
    Ok(())
}

async fn bench(args: &GatewayBenchArgs) -> Result<Figures> {
    let origin = Origin::bind("127.0.0.1:0".parse()?)
        .await
        .context("cannot start the origin")?;
    let (socks, gw_hop, _gateway) = setup(args.idle + args.parallel + 64).await?;

    // Idle connections first, before bulk transfers leave freed memory in the heap: established
    // through both hops to the origin, which holds them. A warm-up download sets up the tunnel.
    download(socks, origin.addr(), 1000)
        .await
        .context("warm-up download")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before_kib = rss_kib()?;
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
    let rss_after_kib = rss_kib()?;
    drop(conns);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Single flow, with the process's CPU time around it.
    let hop0 = hop_status(&gw_hop).await?;
    let cpu0 = cpu_seconds()?;
    let t0 = Instant::now();
    download(socks, origin.addr(), args.bytes)
        .await
        .context("single-flow download")?;
    let single_secs = t0.elapsed().as_secs_f64();
    let cpu_secs = cpu_seconds()? - cpu0;
    let single_hop = HopDelta::between(&hop0, &hop_status(&gw_hop).await?);

    // Parallel flows: the same total split evenly.
    let n = u64::from(args.parallel);
    let each = args.bytes / n;
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let addr = origin.addr();
        set.spawn(async move { download(socks, addr, each).await });
    }
    while let Some(r) = set.join_next().await {
        r.context("parallel download task")?
            .context("parallel download")?;
    }
    let parallel_secs = t0.elapsed().as_secs_f64();
    let parallel_bytes = each * n;

    let gb = args.bytes as f64 / 1e9;
    Ok(Figures {
        single_secs,
        single_gbps: args.bytes as f64 * 8.0 / single_secs / 1e9,
        parallel_secs,
        parallel_bytes,
        parallel_gbps: parallel_bytes as f64 * 8.0 / parallel_secs / 1e9,
        cpu_secs,
        cpu_s_per_gb: cpu_secs / gb,
        rss_before_kib,
        rss_after_kib,
        idle_conn_kib: rss_after_kib.saturating_sub(rss_before_kib) as f64 / idle as f64,
        single_hop,
    })
}

/// Starts the gateway and the terminal (SOCKS5) on loopback; returns the SOCKS address, a
/// monitor of the gateway's hop and the gateway (which lives as long as it is kept).
async fn setup(max_connections: u32) -> Result<(SocketAddr, HopMonitor, pep::Gateway)> {
    let (tk, tp) = generate_keypair().map_err(|e| anyhow!("generating a key pair: {e}"))?;
    let (gk, gp) = generate_keypair().map_err(|e| anyhow!("generating a key pair: {e}"))?;
    let endpoint = EndpointConfig {
        max_connections,
        max_accept_queue: max_connections,
        connection: Config {
            recv_buffer_bytes: STP_BUFFER,
            send_buffer_bytes: STP_BUFFER,
            min_poll_interval_ms: 1,
            ..Config::default()
        },
        ..EndpointConfig::default()
    };
    let policy = Policy::new(PolicyConfig {
        allow: vec!["127.0.0.0/8".into()],
        deny: vec![],
        allow_private: false,
        own_addresses: vec![],
    })
    .map_err(|e| anyhow!("building the gateway policy: {e}"))?;
    let loopback: SocketAddr = "127.0.0.1:0".parse()?;
    let mut g = GatewayOptions::new(
        gk,
        vec![tp],
        loopback,
        StpHop::new(endpoint.clone(), 2),
        RELAY_BUFFER,
        Arc::new(policy),
        Duration::from_secs(5),
    );
    g.responder_seed = 3;
    let gw = pep::Gateway::start(g)
        .await
        .map_err(|e| anyhow!("starting the gateway: {e}"))?;
    let gw_monitor = gw.monitor().context("the gateway's hop")?;
    let mut stp = StpHop::new(endpoint, 1);
    stp.bind = Some(loopback);
    let mut t = TerminalOptions::new(
        tk,
        gw.hop_addr(),
        gp,
        TerminalHop::Stp(Box::new(stp)),
        RELAY_BUFFER,
    );
    t.socks = Some(SocksListener {
        listen: loopback,
        auth: SocksAuth::None,
        fast_open: false,
    });
    let term = pep::Terminal::start(t)
        .await
        .map_err(|e| anyhow!("starting the terminal: {e}"))?;
    let socks = term
        .socks_addr()
        .context("the terminal's SOCKS5 listener")?;
    Ok((socks, gw_monitor, gw))
}

/// Downloads `n` bytes of object 0 from the origin through the SOCKS5 listener `proxy`, every
/// byte checked.
pub(crate) async fn download(proxy: SocketAddr, origin: SocketAddr, n: u64) -> Result<()> {
    let client = Client::new(origin, Route::Socks5(proxy));
    let mut conn = client
        .connect()
        .await
        .context("SOCKS5 through the terminal")?;
    conn.get(0, n).await?;
    Ok(())
}

/// User plus system CPU time of this process so far, in seconds.
fn cpu_seconds() -> Result<f64> {
    // SAFETY: getrusage only writes the struct we pass it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        bail!("getrusage failed: {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// Resident set size of this process, KiB (VmRSS of /proc/self/status).
pub(crate) fn rss_kib() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS line in /proc/self/status")
}
