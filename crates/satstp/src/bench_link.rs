//! `satstp bench link`: every contender over the same emulated satellite link (Linux, root).
//!
//! For each run and each contender, a fresh [`NetEmulator`] with the profile's links joins a
//! terminal-side and a gateway-side network namespace (fresh namespaces: no TCP metrics cache,
//! no socket or counter left from the contender before). An HTTP/1.1 origin runs in this process
//! with its socket in the gateway namespace at 198.18.0.2:8080; the client runs in this process
//! with its sockets in the terminal namespace. The contenders:
//!
//! - kernel TCP end to end, `cubic`, `bbr` or `reno` set per socket (`TCP_CONGESTION`) on both
//!   ends, the client connecting straight to the origin across the emulated link;
//! - `split-tcp` and `split-stp`: the `satstp terminal` daemon (SOCKS5 on 127.0.0.1:1080) in the
//!   terminal namespace and the `satstp gateway` daemon (198.18.0.2:4433) in the gateway
//!   namespace, this very binary started with generated keys and configuration files, the hop
//!   over kernel TCP (cubic) or STP, sized from the profile's rates and round trip; the client
//!   speaks SOCKS5 to the terminal, and the gateway connects to the origin inside its namespace;
//! - `split-stp-fo`: `split-stp` with the terminal's SOCKS5 fast open (`socks_fast_open`), which
//!   saves a satellite round trip per new connection but reports failed connects as resets.
//!
//! Each contender moves a bulk download, a bulk upload and a web page (the page, then its
//! objects over six persistent connections, sizes from [`netsim::web::response_size`]); every
//! byte is checked against the origin's pattern, and a contender whose bytes are wrong fails.
//! Around the download the emulator's uplink counters and the sender's retransmissions (the
//! gateway namespace's `RetransSegs` for TCP, the gateway's `/metrics` for STP) are read.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use linkem::{NetConfig, NetEmulator, NetStats, Profile, Side};
use netsim::units::parse_bytes;
use rand_core::SeedableRng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct LinkBenchArgs {
    /// Link profile: geo (50/5 Mb/s, 600 ms), geo-1998, direcpc, leo.
    #[arg(long)]
    profile: Profile,
    /// Contenders, comma-separated: cubic, bbr, reno (kernel TCP end to end), split-tcp,
    /// split-stp, split-stp-fo (split STP with the terminal's SOCKS5 fast open).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cubic,bbr,reno,split-tcp,split-stp,split-stp-fo"
    )]
    contenders: Vec<Contender>,
    /// Bulk download size (units such as 20MB accepted). Default: 100 MB, or about 30 s of the
    /// profile's downlink if that is less.
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// Bulk upload size. Default: the download size, or about 30 s of the uplink if that is less.
    #[arg(long, value_parser = parse_bytes)]
    upload_size: Option<u64>,
    /// Runs of every contender; the table shows the median and the min–max spread.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Objects on the web page (the first is the page itself).
    #[arg(long, default_value_t = 30)]
    objects: u32,
    /// Seed of the page's object sizes; run i uses seed + i for the emulated link.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write bar charts (SVG and PNG) to this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// One way of carrying the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Kernel TCP end to end with this congestion control.
    Kernel(&'static str),
    /// satstp terminal and gateway with TCP on the hop.
    SplitTcp,
    /// satstp terminal and gateway with STP on the hop.
    SplitStp,
    /// As `SplitStp`, with the terminal's SOCKS5 fast open (`socks_fast_open = true`).
    SplitStpFastOpen,
}

const KERNEL_CCS: [&str; 3] = ["cubic", "bbr", "reno"];

impl FromStr for Contender {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        if let Some(cc) = KERNEL_CCS.iter().find(|c| **c == s) {
            return Ok(Contender::Kernel(cc));
        }
        match s.as_str() {
            "split-tcp" => Ok(Contender::SplitTcp),
            "split-stp" => Ok(Contender::SplitStp),
            "split-stp-fo" => Ok(Contender::SplitStpFastOpen),
            _ => Err(format!(
                "unknown contender '{s}' (valid: cubic, bbr, reno, split-tcp, split-stp, split-stp-fo)"
            )),
        }
    }
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Contender::Kernel(cc) => f.write_str(cc),
            Contender::SplitTcp => f.write_str("split-tcp"),
            Contender::SplitStp => f.write_str("split-stp"),
            Contender::SplitStpFastOpen => f.write_str("split-stp-fo"),
        }
    }
}

impl Contender {
    fn describe(self) -> String {
        match self {
            Contender::Kernel(cc) => format!("kernel TCP end to end, {cc}"),
            Contender::SplitTcp => "satstp terminal + gateway, TCP (cubic) on the hop".into(),
            Contender::SplitStp => "satstp terminal + gateway, STP on the hop".into(),
            Contender::SplitStpFastOpen => {
                "satstp terminal + gateway, STP on the hop, SOCKS5 fast open".into()
            }
        }
    }
}

/// The origin's port on the gateway side.
const ORIGIN_PORT: u16 = 8080;
/// The terminal daemon's SOCKS5 port (loopback of the terminal namespace).
const SOCKS_PORT: u16 = 1080;
/// The gateway daemon's hop port (UDP for STP, TCP for the TCP hop).
const HOP_PORT: u16 = 4433;
/// The daemons' `/metrics` ports (loopback of their namespaces).
const TERMINAL_METRICS_PORT: u16 = 9464;
const GATEWAY_METRICS_PORT: u16 = 9465;
/// Parallel persistent connections of the page load (HTTP/1.1 browsers).
const BROWSER_CONNECTIONS: usize = 6;
/// TCP payload of a full segment on `sat0` (1500-byte MTU, IPv4 and TCP headers with
/// timestamps): the unit of `RetransSegs`, and the payload share of the link's capacity.
const TCP_MSS: u64 = 1448;
const MTU: u64 = 1500;
/// Default download size, and the seconds of link time a default transfer is cut to.
const DEFAULT_SIZE: u64 = 100_000_000;
const DEFAULT_TRANSFER_S: u64 = 30;
/// How often blocking socket calls wake up to look at the deadline and the stop flag.
const POLL: Duration = Duration::from_millis(500);
/// The daemons' `shutdown_timeout_s`: time for the closes still crossing the hop when a run
/// ends. A drain that needs it all has failed (a connection did not close).
const DRAIN_S: u64 = 20;
/// The untimed object fetched before a run's measurements.
const WARM_UP_BYTES: u64 = 1000;

pub fn run(args: &LinkBenchArgs) -> Result<()> {
    if !(1..=100).contains(&args.runs) {
        bail!("--runs must be between 1 and 100, got {}", args.runs);
    }
    if !(1..=1000).contains(&args.objects) {
        bail!("--objects must be between 1 and 1000, got {}", args.objects);
    }
    if args.contenders.is_empty() {
        bail!("--contenders: name at least one contender");
    }
    for (i, c) in args.contenders.iter().enumerate() {
        if args.contenders[..i].contains(c) {
            bail!("--contenders: '{c}' is listed twice");
        }
    }
    let (down_bps, up_bps, rtt_ns) = args.profile.parameters();
    let size = match args.size {
        Some(0) => bail!("--size must be positive"),
        Some(s) if s > 100_000_000_000 => bail!("--size must be at most 100GB, got {s}"),
        Some(s) => s,
        None => DEFAULT_SIZE.min(down_bps / 8 * DEFAULT_TRANSFER_S),
    };
    let upload_size = match args.upload_size {
        Some(0) => bail!("--upload-size must be positive"),
        Some(s) if s > 100_000_000_000 => bail!("--upload-size must be at most 100GB, got {s}"),
        Some(s) => s,
        None => size.min(up_bps / 8 * DEFAULT_TRANSFER_S),
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    linkem::net::check_support().map_err(|e| anyhow!("satstp bench link: {e}"))?;
    let exe = std::env::current_exe().context("cannot find the satstp binary itself")?;
    let stop = crate::signals::stop_flag(Some("\nsatstp bench link: stopping (signal)"))?;

    // Socket buffers: 4 × the downlink's bandwidth-delay product (≥ 2 × BDP even when the
    // one-BDP queue doubles the round trip), at least 4 MiB.
    let bdp = down_bps.max(up_bps) * rtt_ns / 8 / 1_000_000_000;
    let buffer = (4 * bdp).max(4 << 20);
    let mut host = HostSysctls::default();
    for name in ["net/core/rmem_max", "net/core/wmem_max"] {
        host.raise(name, buffer)?;
    }
    let bbr = if args.contenders.contains(&Contender::Kernel("bbr")) {
        Some(ensure_cc("bbr"))
    } else {
        None
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let page: Vec<u64> = (0..args.objects)
        .map(|_| netsim::web::response_size(&mut rng))
        .collect();
    let plan = Plan {
        profile: args.profile,
        size,
        upload_size,
        page,
        buffer,
        exe,
        stop: stop.clone(),
    };
    let settings = settings_json(args, &plan, &host, bbr.as_ref());
    println!(
        "satstp bench link: profile {} ({:.2} Mb/s down, {:.3} Mb/s up, {} ms RTT, drop-tail queues of one BDP)",
        plan.profile,
        down_bps as f64 / 1e6,
        up_bps as f64 / 1e6,
        rtt_ns / 1_000_000
    );
    println!(
        "  download {} bytes, upload {} bytes, page of {} objects ({} bytes) over {} connections; {} run(s); socket buffer limits {} bytes",
        plan.size,
        plan.upload_size,
        plan.page.len(),
        plan.page.iter().sum::<u64>(),
        BROWSER_CONNECTIONS,
        args.runs,
        plan.buffer
    );

    let mut outcomes: Vec<(Contender, Vec<Sample>, Vec<String>)> = args
        .contenders
        .iter()
        .map(|c| (*c, Vec::new(), Vec::new()))
        .collect();
    let started = Instant::now();
    for run in 0..args.runs {
        for (contender, samples, errors) in outcomes.iter_mut() {
            if stop.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            if let (Contender::Kernel("bbr"), Some(Err(why))) = (*contender, &bbr) {
                if run == 0 {
                    errors.push(format!("skipped: {why}"));
                }
                continue;
            }
            eprint!("  run {} {contender:<10} ", run + 1);
            let t0 = Instant::now();
            match measure(&plan, *contender, u64::from(run), args.seed) {
                Ok(s) => {
                    eprintln!(
                        "download {:.2} Mb/s, upload {:.2} Mb/s, page {:.2} s ({:.0} s)",
                        s.download_bps / 1e6,
                        s.upload_bps / 1e6,
                        s.page_load_s,
                        t0.elapsed().as_secs_f64()
                    );
                    samples.push(s);
                }
                Err(e) => {
                    eprintln!("FAILED: {e:#}");
                    errors.push(format!("run {}: {e:#}", run + 1));
                }
            }
        }
    }
    if stop.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let wall = started.elapsed().as_secs_f64();
    let results: Vec<Value> = outcomes
        .iter()
        .map(|(c, s, e)| result_json(*c, s, e, &plan))
        .collect();
    print_table(&plan, &outcomes);
    println!("  wall time {wall:.0} s");
    let report = json!({
        "profile": plan.profile.name(),
        "settings": settings,
        "wall_seconds": wall,
        "results": results,
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("--json: cannot write {}", path.display()))?;
    }
    if let Some(dir) = &args.out {
        write_charts(dir, &plan, &outcomes)?;
    }
    host.restore()?;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, _, e)| e.iter().any(|e| !e.starts_with("skipped:")))
        .map(|(c, _, _)| c.to_string())
        .collect();
    if !failed.is_empty() {
        bail!("contender(s) failed: {}", failed.join(", "));
    }
    Ok(())
}

/// What every contender is asked to do.
struct Plan {
    profile: Profile,
    size: u64,
    upload_size: u64,
    page: Vec<u64>,
    buffer: u64,
    exe: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Plan {
    /// Time allowed for a transfer of `bytes` at `rate_bps`: ten times the ideal, at least 2 min.
    fn deadline(&self, bytes: u64, rate_bps: u64) -> Instant {
        let ideal = bytes as f64 * 8.0 / rate_bps as f64;
        Instant::now() + Duration::from_secs_f64((10.0 * ideal).max(120.0))
    }
}

/// One contender's figures from one run.
#[derive(Debug, Clone)]
struct Sample {
    download_bps: f64,
    upload_bps: f64,
    page_load_s: f64,
    uplink_bytes_per_mb: f64,
    uplink_packets_per_mb: f64,
    retransmitted_bytes: f64,
    connect_s: f64,
}

const METRICS: [(&str, &str); 6] = [
    ("download_bps", "download Mb/s"),
    ("upload_bps", "upload Mb/s"),
    ("page_load_s", "page load s"),
    ("uplink_bytes_per_mb", "uplink B/MB"),
    ("uplink_packets_per_mb", "uplink pkt/MB"),
    ("retransmitted_bytes", "retrans B"),
];

impl Sample {
    fn get(&self, metric: &str) -> f64 {
        match metric {
            "download_bps" => self.download_bps,
            "upload_bps" => self.upload_bps,
            "page_load_s" => self.page_load_s,
            "uplink_bytes_per_mb" => self.uplink_bytes_per_mb,
            "uplink_packets_per_mb" => self.uplink_packets_per_mb,
            "retransmitted_bytes" => self.retransmitted_bytes,
            _ => self.connect_s,
        }
    }
}

/// Median, min and max.
fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[0], v[n - 1]))
}

// ---------------------------------------------------------------------------------------------
// One run of one contender

fn measure(plan: &Plan, contender: Contender, run: u64, seed: u64) -> Result<Sample> {
    let mut config = NetConfig::from_profile(plan.profile);
    config.seed = seed.wrapping_add(run);
    let emu = NetEmulator::start(config).context("cannot start the IP-level emulator")?;
    let tns = emu.namespace(Side::Terminal).to_string();
    let gns = emu.namespace(Side::Gateway).to_string();
    for ns in [&tns, &gns] {
        tune_namespace(ns, plan.buffer)?;
    }
    let origin_addr = SocketAddrV4::new(Side::Gateway.ipv4(), ORIGIN_PORT);
    let origin_cc = match contender {
        Contender::Kernel(cc) => Some(cc),
        _ => None,
    };
    let origin = Origin::start(&gns, origin_addr, origin_cc, plan.stop.clone())?;
    let daemons = match contender {
        Contender::Kernel(_) => None,
        Contender::SplitTcp | Contender::SplitStp | Contender::SplitStpFastOpen => {
            Some(Daemons::start(
                plan,
                &emu,
                contender != Contender::SplitTcp,
                contender == Contender::SplitStpFastOpen,
            )?)
        }
    };
    let client = Client {
        ns: tns.clone(),
        origin: origin_addr,
        route: match contender {
            Contender::Kernel(cc) => Route::Direct(cc),
            _ => Route::Socks(SocketAddr::from((Ipv4Addr::LOCALHOST, SOCKS_PORT))),
        },
        stop: plan.stop.clone(),
    };
    let (down_bps, up_bps, _) = plan.profile.parameters();

    // A small object first, untimed: the path is up as it is in use (the terminal's tunnel
    // established, ARP done), so no contender's figures include a one-time set-up.
    origin.set_phase("warm-up");
    let deadline = plan.deadline(WARM_UP_BYTES, down_bps);
    let mut conn = client.connect(deadline).context("warm-up connect")?;
    conn.get(0, WARM_UP_BYTES, deadline).context("warm-up")?;
    drop(conn);

    // Bulk download, timed from the connection attempt to the last byte: what a user waits for
    // a file on a new connection (a SOCKS verdict, a TCP handshake or neither is included).
    origin.set_phase("bulk download");
    let deadline = plan.deadline(plan.size, down_bps);
    let retrans_before = retransmitted(contender, &gns)?;
    let before = emu.stats();
    let t_connect = Instant::now();
    let mut conn = client.connect(deadline).context("bulk download connect")?;
    let connect_s = t_connect.elapsed().as_secs_f64();
    conn.get(1, plan.size, deadline).context("bulk download")?;
    let download_s = t_connect.elapsed().as_secs_f64();
    let after = emu.stats();
    let retrans_after = retransmitted(contender, &gns)?;
    drop(conn);
    let (up_bytes, up_packets) = uplink_delta(&before, &after);
    let mb = plan.size as f64 / 1e6;

    // Bulk upload, timed from the request's first byte to the origin's answer.
    origin.set_phase("bulk upload");
    let deadline = plan.deadline(plan.upload_size, up_bps);
    let mut conn = client.connect(deadline)?;
    let t0 = Instant::now();
    conn.post(2, plan.upload_size, deadline)
        .context("bulk upload")?;
    let upload_s = t0.elapsed().as_secs_f64();
    drop(conn);

    // The web page, from the first connection attempt to the last object's last byte.
    origin.set_phase("page load");
    let page_bytes: u64 = plan.page.iter().sum();
    let deadline = plan.deadline(page_bytes, down_bps);
    let t0 = Instant::now();
    fetch_page(&client, &plan.page, deadline).context("page load")?;
    let page_load_s = t0.elapsed().as_secs_f64();

    // The client has closed its connections; their closes may still be crossing the hop. The
    // daemons drain (they wait for every stream's end to be delivered) before they exit.
    origin.set_phase("daemons' graceful shutdown");
    if let Some(d) = daemons {
        d.stop().context("stopping the daemons")?;
    }
    origin.stop()?;
    emu.stop().context("cannot stop the emulator")?;
    Ok(Sample {
        download_bps: plan.size as f64 * 8.0 / download_s,
        upload_bps: plan.upload_size as f64 * 8.0 / upload_s,
        page_load_s,
        uplink_bytes_per_mb: up_bytes as f64 / mb,
        uplink_packets_per_mb: up_packets as f64 / mb,
        retransmitted_bytes: retrans_after.saturating_sub(retrans_before) as f64,
        connect_s,
    })
}

/// IP bytes and packets the emulated uplink delivered between two readings.
fn uplink_delta(before: &NetStats, after: &NetStats) -> (u64, u64) {
    (
        after
            .up
            .written_bytes
            .saturating_sub(before.up.written_bytes),
        after
            .up
            .written_packets
            .saturating_sub(before.up.written_packets),
    )
}

/// Retransmitted bytes so far at the download's sender: for STP the gateway's SD payload bytes
/// retransmitted (`/metrics`), for TCP the gateway namespace's `RetransSegs` × the MSS.
fn retransmitted(contender: Contender, gns: &str) -> Result<u64> {
    match contender {
        Contender::SplitStp | Contender::SplitStpFastOpen => {
            let name = "satstp_stp_retransmitted_bytes_total";
            let m = scrape_metrics(gns, GATEWAY_METRICS_PORT)?;
            let values: Vec<f64> = m
                .iter()
                .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
                .map(|(_, v)| *v)
                .collect();
            if values.is_empty() {
                bail!("the gateway's /metrics has no {name}");
            }
            Ok(values.iter().sum::<f64>() as u64)
        }
        _ => Ok(retrans_segs(gns)? * TCP_MSS),
    }
}

/// `Tcp: RetransSegs` of a namespace (`/proc/thread-self/net/snmp` read from inside it).
fn retrans_segs(ns: &str) -> Result<u64> {
    let text =
        linkem::net::in_namespace(ns, || std::fs::read_to_string("/proc/thread-self/net/snmp"))??;
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        bail!("no Tcp lines in /proc/net/snmp of {ns}");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RetransSegs")
        .and_then(|(_, v)| v.parse().ok())
        .context("no RetransSegs in /proc/net/snmp")
}

/// `GET /metrics` from a daemon's metrics port in a namespace, as `name{labels}` → value.
fn scrape_metrics(ns: &str, port: u16) -> Result<BTreeMap<String, f64>> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let body = linkem::net::in_namespace(ns, move || -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    })?
    .with_context(|| format!("cannot read /metrics on port {port}"))?;
    let mut out = BTreeMap::new();
    let body = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        if let Some((name, value)) = line.rsplit_once(' ') {
            if let Ok(v) = value.trim().parse::<f64>() {
                out.insert(name.to_string(), v);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// System settings

/// Host-wide sysctls raised for the benchmark, put back on restore or drop.
#[derive(Default)]
struct HostSysctls {
    saved: Vec<(String, String, u64)>,
}

impl HostSysctls {
    /// Raises `/proc/sys/<name>` to at least `value`, remembering the old value.
    fn raise(&mut self, name: &str, value: u64) -> Result<()> {
        let path = format!("/proc/sys/{name}");
        let old = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {path}"))?
            .trim()
            .to_string();
        let current: u64 = old.parse().unwrap_or(0);
        if current < value {
            std::fs::write(&path, value.to_string())
                .with_context(|| format!("cannot set {path}"))?;
        }
        self.saved.push((path, old, current.max(value)));
        Ok(())
    }

    fn restore(&mut self) -> Result<()> {
        let mut first_error = None;
        for (path, old, _) in self.saved.drain(..) {
            if let Err(e) = std::fs::write(&path, &old) {
                first_error.get_or_insert(anyhow!("cannot restore {path} to {old}: {e}"));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for HostSysctls {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

/// Per-namespace TCP settings: buffer limits for autotuning up to `buffer` bytes, and no
/// metrics carried from one connection to the next (each starts from the same state).
fn namespace_sysctls(buffer: u64) -> Vec<(&'static str, String)> {
    vec![
        ("net/ipv4/tcp_rmem", format!("4096 131072 {buffer}")),
        ("net/ipv4/tcp_wmem", format!("4096 16384 {buffer}")),
        ("net/ipv4/tcp_no_metrics_save", "1".into()),
    ]
}

fn tune_namespace(ns: &str, buffer: u64) -> Result<()> {
    let settings = namespace_sysctls(buffer);
    let name = ns.to_string();
    linkem::net::in_namespace(ns, move || -> Result<()> {
        for (key, value) in &settings {
            let path = format!("/proc/sys/{key}");
            std::fs::write(&path, value)
                .with_context(|| format!("cannot set {path} in namespace {name}"))?;
            let got = std::fs::read_to_string(&path)?;
            let got: Vec<&str> = got.split_whitespace().collect();
            let want: Vec<&str> = value.split_whitespace().collect();
            if got != want {
                bail!("{path} in namespace {name} reads {got:?} after setting {value}");
            }
        }
        Ok(())
    })?
}

/// Makes a congestion control available (loading `tcp_<name>` with modprobe if needed); the
/// error says why it is not.
fn ensure_cc(name: &str) -> Result<(), String> {
    let path = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let available = || {
        std::fs::read_to_string(path)
            .map(|s| s.split_whitespace().any(|c| c == name))
            .unwrap_or(false)
    };
    if available() {
        return Ok(());
    }
    let loaded = Command::new("modprobe")
        .arg(format!("tcp_{name}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    if available() {
        return Ok(());
    }
    let why = match loaded {
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => format!("cannot run modprobe: {e}"),
    };
    Err(format!(
        "{name} is not available in this kernel (modprobe tcp_{name}: {why})"
    ))
}

fn settings_json(
    args: &LinkBenchArgs,
    plan: &Plan,
    host: &HostSysctls,
    bbr: Option<&Result<(), String>>,
) -> Value {
    let (down_bps, up_bps, rtt_ns) = plan.profile.parameters();
    let (up, down) = plan.profile.ip_links();
    let queue = |l: &linkmodel::LinkConfig| match l.queue {
        linkmodel::QueueLimit::Bytes(b) => json!({"bytes": b}),
        linkmodel::QueueLimit::Packets(p) => json!({"packets": p}),
    };
    let host_sysctls: serde_json::Map<String, Value> = host
        .saved
        .iter()
        .map(|(path, old, now)| {
            let key = path.trim_start_matches("/proc/sys/").replace('/', ".");
            (key, json!({"during": now, "before": old}))
        })
        .collect();
    let ns_sysctls: serde_json::Map<String, Value> = namespace_sysctls(plan.buffer)
        .into_iter()
        .map(|(k, v)| (k.replace('/', "."), json!(v)))
        .collect();
    json!({
        "down_rate_bps": down_bps,
        "up_rate_bps": up_bps,
        "rtt_ms": rtt_ns / 1_000_000,
        "down_queue": queue(&down),
        "up_queue": queue(&up),
        "payload_capacity_bps": payload_capacity(down_bps),
        "download_bytes": plan.size,
        "upload_bytes": plan.upload_size,
        "page_objects": plan.page.len(),
        "page_bytes": plan.page.iter().sum::<u64>(),
        "page_object_bytes": plan.page,
        "page_connections": BROWSER_CONNECTIONS,
        "runs": args.runs,
        "seed": args.seed,
        "contenders": args.contenders.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        "emulator": "one fresh NetEmulator (new namespaces) per run and contender; link seed = seed + run",
        "host_sysctls": host_sysctls,
        "namespace_sysctls": ns_sysctls,
        "kernel_tcp": "TCP_CONGESTION set on the client's and the origin's socket; buffers autotuned up to the namespace limits",
        "split": {
            "hop_rates_and_rtt": "up_rate_bps, down_rate_bps and rtt_ms of the profile in both daemons",
            "hop_tcp_congestion": "cubic",
            "origin": "198.18.0.2:8080 in the gateway namespace (allowed by the gateway's policy)",
        },
        "bbr": match bbr { Some(Err(e)) => json!(e), Some(Ok(())) => json!("available"), None => Value::Null },
        "retransmitted_bytes": "during the download, at its sender: TCP RetransSegs of the gateway namespace x 1448; STP satstp_stp_retransmitted_bytes_total of the gateway",
        "uplink_counters": "IP bytes and packets written by the emulator's up direction during the download, per 1e6 bytes downloaded",
    })
}

/// TCP payload the downlink can carry: its rate × MSS / MTU.
fn payload_capacity(down_bps: u64) -> f64 {
    down_bps as f64 * TCP_MSS as f64 / MTU as f64
}

// ---------------------------------------------------------------------------------------------
// The daemons

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("satstp-bench-link-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The terminal and gateway daemons of a split contender; stopped on drop.
struct Daemons {
    children: Vec<(&'static str, Child)>,
    dir: TempDir,
}

impl Daemons {
    fn start(plan: &Plan, emu: &NetEmulator, stp: bool, fast_open: bool) -> Result<Daemons> {
        let dir = TempDir::new()?;
        let (tkey, tpub) = pep::keys::generate_keypair()?;
        let (gkey, gpub) = pep::keys::generate_keypair()?;
        let (tkey_path, _) = pep::keys::write_keypair(&dir.0.join("terminal"), &tkey, &tpub)?;
        let (gkey_path, _) = pep::keys::write_keypair(&dir.0.join("gateway"), &gkey, &gpub)?;
        let (down_bps, up_bps, rtt_ns) = plan.profile.parameters();
        let transport = if stp { "stp" } else { "tcp" };
        let hop = SocketAddrV4::new(Side::Gateway.ipv4(), HOP_PORT);
        let hop_tcp = |side: &str| {
            if stp {
                String::new()
            } else {
                format!("\n[{side}.hop_tcp]\ncongestion = \"cubic\"\n")
            }
        };
        let terminal = format!(
            "[terminal]\n\
             socks_listen = \"127.0.0.1:{SOCKS_PORT}\"\n\
             gateway = \"{hop}\"\n\
             gateway_public_key = \"{gpub}\"\n\
             private_key_file = {tkey:?}\n\
             hop_transport = \"{transport}\"\n\
             up_rate_bps = {up_bps}\n\
             down_rate_bps = {down_bps}\n\
             rtt_ms = {rtt}\n\
             metrics_listen = \"127.0.0.1:{TERMINAL_METRICS_PORT}\"\n\
             socks_fast_open = {fast_open}\n\
             shutdown_timeout_s = {DRAIN_S}\n{extra}",
            tkey = tkey_path.display().to_string(),
            rtt = rtt_ns / 1_000_000,
            extra = hop_tcp("terminal"),
        );
        let gateway = format!(
            "[gateway]\n\
             listen = \"{hop}\"\n\
             private_key_file = {gkey:?}\n\
             allowed_terminals = [\"{tpub}\"]\n\
             hop_transport = \"{transport}\"\n\
             up_rate_bps = {up_bps}\n\
             down_rate_bps = {down_bps}\n\
             rtt_ms = {rtt}\n\
             metrics_listen = \"127.0.0.1:{GATEWAY_METRICS_PORT}\"\n\
             shutdown_timeout_s = {DRAIN_S}\n\
             \n[gateway.policy]\nallow = [\"{origin}/32\"]\n{extra}",
            gkey = gkey_path.display().to_string(),
            rtt = rtt_ns / 1_000_000,
            origin = Side::Gateway.ipv4(),
            extra = hop_tcp("gateway"),
        );
        let mut d = Daemons {
            children: Vec::new(),
            dir,
        };
        for (name, side, text, port) in [
            ("gateway", Side::Gateway, gateway, GATEWAY_METRICS_PORT),
            ("terminal", Side::Terminal, terminal, SOCKS_PORT),
        ] {
            let config = d.dir.0.join(format!("{name}.toml"));
            std::fs::write(&config, text)
                .with_context(|| format!("cannot write {}", config.display()))?;
            let log = std::fs::File::create(d.dir.0.join(format!("{name}.log")))?;
            let mut cmd = emu.command(side, &plan.exe);
            cmd.arg(name)
                .arg("--config")
                .arg(&config)
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            // The daemon dies with this thread (the main one) even if the bench is killed.
            // SAFETY: prctl is async-signal-safe and touches only the child.
            unsafe {
                use std::os::unix::process::CommandExt;
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .with_context(|| format!("cannot start the {name} daemon"))?;
            d.children.push((name, child));
            d.wait_listening(name, emu.namespace(side), port, &plan.stop)?;
        }
        Ok(d)
    }

    /// Waits until a daemon accepts TCP on `port` in namespace `ns`.
    fn wait_listening(&mut self, name: &str, ns: &str, port: u16, stop: &AtomicBool) -> Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = linkem::net::in_namespace(ns, move || {
                TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
            })?;
            if up {
                return Ok(());
            }
            if let Some((_, child)) = self.children.iter_mut().find(|(n, _)| *n == name) {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "the {name} daemon exited ({status}): {}",
                        self.log_tail(name)
                    );
                }
            }
            if Instant::now() > deadline || stop.load(Ordering::SeqCst) {
                bail!(
                    "the {name} daemon did not listen on port {port} within 20 s: {}",
                    self.log_tail(name)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.0.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Stops both daemons gracefully; an error if one had died on its own, did not exit in
    /// time, exited with a failure, or had to reset connections its drain could not finish.
    fn stop(mut self) -> Result<()> {
        for (name, child) in self.children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let name = *name;
                bail!(
                    "the {name} daemon exited during the run ({status}): {}",
                    self.log_tail(name)
                );
            }
        }
        let problems = self.shutdown();
        if let Some(p) = problems.first() {
            bail!("{p}");
        }
        Ok(())
    }

    /// SIGTERM to both daemons at once, then up to the drain time and a margin for each to
    /// exit (SIGKILL after that); what went wrong, daemon by daemon.
    fn shutdown(&mut self) -> Vec<String> {
        for (_, child) in self.children.iter_mut() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: SIGTERM to our own child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(DRAIN_S + 5);
        let mut problems = Vec::new();
        let children = std::mem::take(&mut self.children);
        for (name, mut child) in children {
            let mut status = None;
            while Instant::now() < deadline {
                if let Ok(Some(st)) = child.try_wait() {
                    status = Some(st);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            match status {
                None => {
                    let _ = child.kill();
                    problems.push(format!(
                        "the {name} daemon did not exit within {} s of SIGTERM (killed): {}",
                        DRAIN_S + 5,
                        self.log_tail(name)
                    ));
                }
                Some(st) if !st.success() => problems.push(format!(
                    "the {name} daemon exited with {st} on SIGTERM: {}",
                    self.log_tail(name)
                )),
                Some(_) if self.log_tail(name).contains("shutdown_timeout_s passed") => problems
                    .push(format!(
                        "the {name} daemon's drain ran out of time ({DRAIN_S} s) and reset \
                         connections: {}",
                        self.log_tail(name)
                    )),
                Some(_) => {}
            }
            let _ = child.wait();
        }
        problems
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

// ---------------------------------------------------------------------------------------------
// The origin: HTTP/1.1 with keep-alive. `GET /bytes/N/K` answers N bytes of object K's pattern;
// `POST /upload/N/K` with N bytes of that pattern answers 200 if every byte is right, else 422.

/// Byte `i` of object `key`: position-dependent, so loss, duplication, reordering and mixing
/// up objects all show.
fn pattern_byte(key: u64, i: u64) -> u8 {
    let x = i
        .wrapping_add(key.wrapping_mul(0x0000_0100_0000_01b3))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8
}

fn fill_pattern(key: u64, offset: u64, out: &mut [u8]) {
    for (b, i) in out.iter_mut().zip(offset..) {
        *b = pattern_byte(key, i);
    }
}

/// The first wrong byte of `data` (at stream offset `offset`), if any.
fn first_wrong(key: u64, offset: u64, data: &[u8]) -> Option<u64> {
    data.iter()
        .zip(offset..)
        .find(|(b, i)| **b != pattern_byte(key, *i))
        .map(|(_, i)| i)
}

struct Origin {
    listener: Arc<TcpListener>,
    /// What the run is doing (set by `measure`), named in the origin's errors.
    phase: Arc<Mutex<&'static str>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    handlers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    fn start(
        ns: &str,
        addr: SocketAddrV4,
        cc: Option<&'static str>,
        bench_stop: Arc<AtomicBool>,
    ) -> Result<Origin> {
        let listener = linkem::net::in_namespace(ns, move || TcpListener::bind(addr))?
            .with_context(|| format!("the origin cannot listen on {addr}"))?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let handlers = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let phase = Arc::new(Mutex::new("start"));
        let (l, st, hs, es, ph) = (
            listener.clone(),
            stop.clone(),
            handlers.clone(),
            errors.clone(),
            phase.clone(),
        );
        let acceptor = std::thread::Builder::new()
            .name("bench-origin".into())
            .spawn(move || {
                let mut accepted = 0u64;
                while let Ok((s, peer)) = l.accept() {
                    if st.load(Ordering::SeqCst) {
                        break;
                    }
                    accepted += 1;
                    let opened_in = ph.lock().map(|p| *p).unwrap_or("?");
                    let (st, bs, es, ph) = (st.clone(), bench_stop.clone(), es.clone(), ph.clone());
                    let h = std::thread::spawn(move || {
                        let mut requests = 0u64;
                        if let Err(e) = serve(s, cc, &st, &bs, &mut requests) {
                            if !st.load(Ordering::SeqCst) {
                                let now = ph.lock().map(|p| *p).unwrap_or("?");
                                if let Ok(mut v) = es.lock() {
                                    v.push(format!(
                                        "connection {accepted} from {peer} (opened during the \
                                         {opened_in}, {requests} request(s) answered) failed \
                                         during the {now}: {e:#}"
                                    ));
                                }
                            }
                        }
                    });
                    if let Ok(mut v) = hs.lock() {
                        v.push(h);
                    }
                }
            })
            .context("cannot start the origin")?;
        Ok(Origin {
            listener,
            phase,
            stop,
            acceptor: Some(acceptor),
            handlers,
            errors,
        })
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // SAFETY: shutdown on our own listening socket wakes the blocked accept (Linux).
        unsafe {
            libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR);
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let handlers = match self.handlers.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => Vec::new(),
        };
        for h in handlers {
            let _ = h.join();
        }
    }

    /// Names what the run does from now on, for the origin's errors.
    fn set_phase(&self, phase: &'static str) {
        if let Ok(mut p) = self.phase.lock() {
            *p = phase;
        }
    }

    /// Stops the origin; an error if it saw a bad upload or failed on its own.
    fn stop(mut self) -> Result<()> {
        self.shutdown();
        let errors = self.errors.lock().map(|v| v.clone()).unwrap_or_default();
        if let Some(e) = errors.first() {
            bail!("origin: {e}");
        }
        Ok(())
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Serves one connection until the peer closes it.
fn serve(
    s: TcpStream,
    cc: Option<&str>,
    stop: &AtomicBool,
    bench_stop: &AtomicBool,
    requests: &mut u64,
) -> Result<()> {
    if let Some(cc) = cc {
        pep::sockopt::set_congestion(&s, cc)?;
    }
    let mut c = Conn::new(s, Arc::new(AtomicBool::new(false)))?;
    let far = Instant::now() + Duration::from_secs(24 * 3600);
    loop {
        if stop.load(Ordering::SeqCst) || bench_stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(request) = c.read_line_or_eof(far, stop)? else {
            return Ok(());
        };
        let mut length = 0u64;
        loop {
            let line = c.read_line(far, stop)?;
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().context("bad Content-Length")?;
                }
            }
        }
        let mut parts = request.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let fields: Vec<u64> = path
            .trim_start_matches('/')
            .split('/')
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let (n, key) = match fields.as_slice() {
            [n, key] => (*n, *key),
            _ => bail!("bad request {request:?}"),
        };
        *requests += 1;
        match method {
            "GET" => {
                c.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes(),
                    far,
                    stop,
                )?;
                let mut block = vec![0u8; 64 * 1024];
                let mut sent = 0u64;
                while sent < n {
                    let k = (n - sent).min(block.len() as u64) as usize;
                    fill_pattern(key, sent, &mut block[..k]);
                    c.write_all(&block[..k], far, stop)?;
                    sent += k as u64;
                }
            }
            "POST" => {
                if length != n {
                    bail!("upload of {n} bytes announced Content-Length {length}");
                }
                let mut wrong = None;
                c.read_body(n, far, stop, |offset, data| {
                    if wrong.is_none() {
                        wrong = first_wrong(key, offset, data);
                    }
                })?;
                if let Some(i) = wrong {
                    c.write_all(
                        b"HTTP/1.1 422 Unprocessable Content\r\nContent-Length: 0\r\n\r\n",
                        far,
                        stop,
                    )?;
                    bail!("upload {key}: byte {i} of {n} is wrong");
                }
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", far, stop)?;
            }
            _ => bail!("bad request {request:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sockets

/// A blocking connection with a read buffer; every call gives up at a deadline or when the
/// bench is stopped.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    stop: Arc<AtomicBool>,
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

impl Conn {
    fn new(s: TcpStream, stop: Arc<AtomicBool>) -> Result<Conn> {
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(POLL))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s,
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
            stop,
        })
    }

    fn check(&self, deadline: Instant, stop: &AtomicBool) -> Result<()> {
        if stop.load(Ordering::SeqCst) || self.stop.load(Ordering::SeqCst) {
            bail!("stopped");
        }
        if Instant::now() > deadline {
            bail!("timed out");
        }
        Ok(())
    }

    /// Refills the buffer; false at end of stream.
    fn fill(&mut self, deadline: Instant, stop: &AtomicBool) -> Result<bool> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        loop {
            self.check(deadline, stop)?;
            match self.s.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if timed_out(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// One header line without its CRLF; `None` at a clean end of stream.
    fn read_line_or_eof(&mut self, deadline: Instant, stop: &AtomicBool) -> Result<Option<String>> {
        loop {
            if let Some(p) = self.buf[self.start..self.end]
                .iter()
                .position(|&b| b == b'\n')
            {
                let line = String::from_utf8_lossy(&self.buf[self.start..self.start + p])
                    .trim_end_matches('\r')
                    .to_string();
                self.start += p + 1;
                return Ok(Some(line));
            }
            if self.end - self.start > 8192 {
                bail!("header line longer than 8 KiB");
            }
            if self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if !self.fill(deadline, stop)? {
                if self.start == self.end {
                    return Ok(None);
                }
                bail!("connection closed in a header line");
            }
        }
    }

    fn read_line(&mut self, deadline: Instant, stop: &AtomicBool) -> Result<String> {
        self.read_line_or_eof(deadline, stop)?
            .context("connection closed before the header ended")
    }

    /// Reads exactly `n` body bytes, handing each piece (with its offset) to `sink`.
    fn read_body(
        &mut self,
        n: u64,
        deadline: Instant,
        stop: &AtomicBool,
        mut sink: impl FnMut(u64, &[u8]),
    ) -> Result<()> {
        let mut got = 0u64;
        while got < n {
            if self.start == self.end && !self.fill(deadline, stop)? {
                bail!("connection closed after {got} of {n} body bytes");
            }
            let k = ((n - got) as usize).min(self.end - self.start);
            sink(got, &self.buf[self.start..self.start + k]);
            self.start += k;
            got += k as u64;
        }
        Ok(())
    }

    fn write_all(&mut self, mut data: &[u8], deadline: Instant, stop: &AtomicBool) -> Result<()> {
        while !data.is_empty() {
            self.check(deadline, stop)?;
            match self.s.write(data) {
                Ok(0) => bail!("connection closed while writing"),
                Ok(n) => data = &data[n..],
                Err(e) if timed_out(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reads a response header; returns the status code and Content-Length.
    fn response(&mut self, deadline: Instant) -> Result<(u32, u64)> {
        let never = AtomicBool::new(false);
        let status = self.read_line(deadline, &never)?;
        let code = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("bad status line {status:?}"))?;
        let mut length = None;
        loop {
            let line = self.read_line(deadline, &never)?;
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().ok();
                }
            }
        }
        Ok((code, length.context("response without Content-Length")?))
    }

    /// `GET` object `key` of `n` bytes and checks every byte.
    fn get(&mut self, key: u64, n: u64, deadline: Instant) -> Result<()> {
        let never = AtomicBool::new(false);
        self.write_all(
            format!("GET /bytes/{n}/{key} HTTP/1.1\r\nHost: origin\r\n\r\n").as_bytes(),
            deadline,
            &never,
        )?;
        let (code, length) = self.response(deadline)?;
        if code != 200 || length != n {
            bail!("origin answered {code} with {length} bytes for an object of {n}");
        }
        let mut wrong = None;
        self.read_body(n, deadline, &never, |offset, data| {
            if wrong.is_none() {
                wrong = first_wrong(key, offset, data);
            }
        })?;
        if let Some(i) = wrong {
            bail!("object {key}: byte {i} of {n} arrived wrong");
        }
        Ok(())
    }

    /// `POST` `n` bytes of object `key`; the origin checks every byte.
    fn post(&mut self, key: u64, n: u64, deadline: Instant) -> Result<()> {
        let never = AtomicBool::new(false);
        self.write_all(
            format!(
                "POST /upload/{n}/{key} HTTP/1.1\r\nHost: origin\r\nContent-Length: {n}\r\n\r\n"
            )
            .as_bytes(),
            deadline,
            &never,
        )?;
        let mut block = vec![0u8; 64 * 1024];
        let mut sent = 0u64;
        while sent < n {
            let k = (n - sent).min(block.len() as u64) as usize;
            fill_pattern(key, sent, &mut block[..k]);
            self.write_all(&block[..k], deadline, &never)?;
            sent += k as u64;
        }
        let (code, _) = self.response(deadline)?;
        if code != 200 {
            bail!("the origin found the upload wrong (status {code})");
        }
        Ok(())
    }
}

/// How the client reaches the origin.
#[derive(Clone, Copy)]
enum Route {
    /// Straight across the link, with this congestion control.
    Direct(&'static str),
    /// Through the terminal daemon's SOCKS5 listener.
    Socks(SocketAddr),
}

/// Opens connections to the origin from the terminal namespace.
#[derive(Clone)]
struct Client {
    ns: String,
    origin: SocketAddrV4,
    route: Route,
    stop: Arc<AtomicBool>,
}

impl Client {
    fn connect(&self, deadline: Instant) -> Result<Conn> {
        let target = match self.route {
            Route::Direct(_) => SocketAddr::V4(self.origin),
            Route::Socks(proxy) => proxy,
        };
        let s = linkem::net::in_namespace(&self.ns, move || {
            TcpStream::connect_timeout(&target, Duration::from_secs(30))
        })?
        .with_context(|| format!("cannot connect to {target}"))?;
        if let Route::Direct(cc) = self.route {
            pep::sockopt::set_congestion(&s, cc)?;
        }
        let mut c = Conn::new(s, self.stop.clone())?;
        if let Route::Socks(_) = self.route {
            socks5(&mut c, self.origin, deadline)?;
        }
        Ok(c)
    }
}

/// SOCKS5 CONNECT without authentication (RFC 1928); returns once the proxy has connected.
fn socks5(c: &mut Conn, dest: SocketAddrV4, deadline: Instant) -> Result<()> {
    let never = AtomicBool::new(false);
    c.write_all(&[5, 1, 0], deadline, &never)?;
    let mut reply = Vec::new();
    read_exact(c, 2, deadline, &mut reply)?;
    if reply != [5, 0] {
        bail!("SOCKS5 method negotiation failed: {reply:?}");
    }
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&dest.ip().octets());
    req.extend_from_slice(&dest.port().to_be_bytes());
    c.write_all(&req, deadline, &never)?;
    reply.clear();
    read_exact(c, 10, deadline, &mut reply)?;
    if reply.get(1) != Some(&0) {
        bail!("the terminal refused the connection: SOCKS5 reply {reply:?}");
    }
    Ok(())
}

fn read_exact(c: &mut Conn, n: u64, deadline: Instant, out: &mut Vec<u8>) -> Result<()> {
    let never = AtomicBool::new(false);
    c.read_body(n, deadline, &never, |_, d| out.extend_from_slice(d))
}

/// The page on one connection, then the other objects over up to six persistent connections
/// (the page's connection and five new ones), each object checked byte for byte.
fn fetch_page(client: &Client, sizes: &[u64], deadline: Instant) -> Result<()> {
    let Some((&page, objects)) = sizes.split_first() else {
        return Ok(());
    };
    let mut first = client.connect(deadline)?;
    first.get(100, page, deadline)?;
    let queue: Arc<Mutex<Vec<(u64, u64)>>> = Arc::new(Mutex::new(
        objects
            .iter()
            .zip(101u64..)
            .map(|(&n, k)| (k, n))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect(),
    ));
    let lanes = BROWSER_CONNECTIONS.min(objects.len());
    let mut first = Some(first);
    let mut tasks = Vec::new();
    for _ in 0..lanes {
        let conn = first.take();
        let (client, queue) = (client.clone(), queue.clone());
        tasks.push(std::thread::spawn(move || -> Result<()> {
            let mut conn = match conn {
                Some(c) => c,
                None => client.connect(deadline)?,
            };
            loop {
                let next = queue
                    .lock()
                    .map_err(|_| anyhow!("page queue poisoned"))?
                    .pop();
                let Some((key, n)) = next else {
                    return Ok(());
                };
                conn.get(key, n, deadline)?;
            }
        }));
    }
    let mut result = Ok(());
    for t in tasks {
        let r = t
            .join()
            .map_err(|_| anyhow!("a page fetch thread panicked"))
            .and_then(|r| r);
        if result.is_ok() {
            result = r;
        }
    }
    result
}

// ---------------------------------------------------------------------------------------------
// Output

fn result_json(c: Contender, samples: &[Sample], errors: &[String], plan: &Plan) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("contender".into(), json!(c.to_string()));
    m.insert("description".into(), json!(c.describe()));
    m.insert("runs_ok".into(), json!(samples.len()));
    m.insert("failed".into(), json!(!errors.is_empty()));
    m.insert("errors".into(), json!(errors));
    for (key, _) in METRICS.iter().chain([("connect_s", "")].iter()) {
        let values: Vec<f64> = samples.iter().map(|s| s.get(key)).collect();
        match spread(&values) {
            Some((med, lo, hi)) => {
                m.insert((*key).into(), json!(med));
                m.insert(format!("{key}_min"), json!(lo));
                m.insert(format!("{key}_max"), json!(hi));
            }
            None => {
                m.insert((*key).into(), Value::Null);
            }
        }
    }
    let (down_bps, _, _) = plan.profile.parameters();
    if let Some((med, _, _)) = spread(&samples.iter().map(|s| s.download_bps).collect::<Vec<_>>()) {
        m.insert(
            "download_share_of_payload_capacity".into(),
            json!(med / payload_capacity(down_bps)),
        );
    }
    m.insert(
        "samples".into(),
        json!(samples
            .iter()
            .map(|s| {
                let mut o = serde_json::Map::new();
                for (key, _) in METRICS.iter().chain([("connect_s", "")].iter()) {
                    o.insert((*key).into(), json!(s.get(key)));
                }
                Value::Object(o)
            })
            .collect::<Vec<_>>()),
    );
    Value::Object(m)
}

/// A metric for the table: scaled median and spread.
fn cell(samples: &[Sample], key: &str) -> String {
    let scale = match key {
        "download_bps" | "upload_bps" => 1e-6,
        _ => 1.0,
    };
    let values: Vec<f64> = samples.iter().map(|s| s.get(key) * scale).collect();
    let fmt = |v: f64| match key {
        "download_bps" | "upload_bps" | "page_load_s" => format!("{v:.2}"),
        _ => format!("{v:.0}"),
    };
    match spread(&values) {
        None => "-".into(),
        Some((m, lo, hi)) if samples.len() == 1 || lo == hi => fmt(m),
        Some((m, lo, hi)) => format!("{} ({}–{})", fmt(m), fmt(lo), fmt(hi)),
    }
}

fn print_table(plan: &Plan, outcomes: &[(Contender, Vec<Sample>, Vec<String>)]) {
    let (down_bps, _, _) = plan.profile.parameters();
    let mut rows = vec![{
        let mut h = vec!["contender".to_string()];
        h.extend(METRICS.iter().map(|(_, label)| label.to_string()));
        h.push("% of payload cap.".into());
        h
    }];
    for (c, samples, errors) in outcomes {
        let mut r = vec![c.to_string()];
        if samples.is_empty() {
            r.push(format!(
                "FAILED: {}",
                errors.first().map_or("", String::as_str)
            ));
            rows.push(r);
            continue;
        }
        r.extend(METRICS.iter().map(|(k, _)| cell(samples, k)));
        let dl: Vec<f64> = samples.iter().map(|s| s.download_bps).collect();
        r.push(spread(&dl).map_or("-".into(), |(m, _, _)| {
            format!("{:.1}", 100.0 * m / payload_capacity(down_bps))
        }));
        if !errors.is_empty() {
            r.push(format!("({} run(s) FAILED)", errors.len()));
        }
        rows.push(r);
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter(|r| r.len() > 2)
                .filter_map(|r| r.get(i))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    println!();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let w = widths.get(i).copied().unwrap_or(0);
                if i == 0 {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect();
        println!("  {}", line.join("  ").trim_end());
    }
    println!(
        "\n  median (min–max) over runs; uplink B/MB and pkt/MB: IP bytes and packets on the emulated uplink during the download per MB downloaded;\n  retrans B: bytes retransmitted by the download's sender; payload capacity {:.2} Mb/s (downlink × {TCP_MSS}/{MTU})",
        payload_capacity(down_bps) / 1e6
    );
    for (c, _, errors) in outcomes {
        for e in errors {
            println!("  {c}: {e}");
        }
    }
}

fn write_charts(
    dir: &Path,
    plan: &Plan,
    outcomes: &[(Contender, Vec<Sample>, Vec<String>)],
) -> Result<()> {
    use crate::plot::{Chart, Series, XAxis};
    let names: Vec<String> = outcomes.iter().map(|(c, _, _)| c.to_string()).collect();
    let charts = [
        (
            "link-download",
            "download_bps",
            "download goodput",
            "Mb/s",
            1e-6,
        ),
        ("link-upload", "upload_bps", "upload goodput", "Mb/s", 1e-6),
        ("link-page-load", "page_load_s", "page load time", "s", 1.0),
        (
            "link-uplink",
            "uplink_bytes_per_mb",
            "uplink bytes per MB downloaded",
            "bytes",
            1.0,
        ),
    ];
    for (file, key, what, unit, scale) in charts {
        let points: Vec<(f64, f64, f64)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, (_, samples, _))| {
                let v: Vec<f64> = samples.iter().map(|s| s.get(key) * scale).collect();
                // The error bar reaches the farther end of the min–max spread.
                spread(&v).map(|(m, lo, hi)| (i as f64, m, (m - lo).max(hi - m)))
            })
            .collect();
        let chart = Chart {
            title: format!("{what}, profile {} (median, min–max)", plan.profile),
            x_label: "contender".into(),
            y_label: unit.into(),
            x_axis: XAxis::Categories(names.clone()),
            series: vec![Series {
                name: "median".into(),
                points,
            }],
        };
        chart.write(dir, file)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contenders_parse_and_name_themselves() {
        for name in ["cubic", "bbr", "reno", "split-tcp", "split-stp"] {
            let c: Contender = name.parse().unwrap();
            assert_eq!(c.to_string(), name);
        }
        let e = "vegas".parse::<Contender>().unwrap_err();
        assert!(e.contains("unknown contender 'vegas'"), "{e}");
    }

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&[]), None);
    }

    fn conn(addr: SocketAddr) -> Conn {
        Conn::new(
            TcpStream::connect(addr).unwrap(),
            Arc::new(AtomicBool::new(false)),
        )
        .unwrap()
    }

    #[test]
    fn a_wrong_byte_in_a_download_fails_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 256];
            let _ = s.read(&mut req).unwrap();
            let mut body = vec![0u8; 5000];
            fill_pattern(1, 0, &mut body);
            body[4321] ^= 0x40;
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")
                .unwrap();
            s.write_all(&body).unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let e = conn(addr).get(1, 5000, deadline).unwrap_err();
        assert!(
            format!("{e:#}").contains("object 1: byte 4321 of 5000 arrived wrong"),
            "{e:#}"
        );
        server.join().unwrap();
    }

    #[test]
    fn the_origin_serves_keep_alive_and_refuses_a_wrong_upload() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let origin = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let stop = AtomicBool::new(false);
            serve(s, Some("reno"), &stop, &stop, &mut 0)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut c = conn(addr);
        c.post(3, 300_000, deadline).unwrap();
        c.get(4, 700_000, deadline).unwrap();
        c.get(5, 0, deadline).unwrap();
        let never = AtomicBool::new(false);
        let mut body = vec![0u8; 1000];
        fill_pattern(6, 0, &mut body);
        body[10] ^= 1;
        c.write_all(
            b"POST /upload/1000/6 HTTP/1.1\r\nContent-Length: 1000\r\n\r\n",
            deadline,
            &never,
        )
        .unwrap();
        c.write_all(&body, deadline, &never).unwrap();
        assert_eq!(c.response(deadline).unwrap().0, 422);
        let e = origin.join().unwrap().unwrap_err();
        assert!(
            format!("{e:#}").contains("upload 6: byte 10 of 1000 is wrong"),
            "{e:#}"
        );
    }

    #[test]
    fn pattern_finds_the_first_wrong_byte() {
        let mut b = vec![0u8; 1000];
        fill_pattern(7, 500, &mut b);
        assert_eq!(first_wrong(7, 500, &b), None);
        assert!(first_wrong(8, 500, &b).is_some(), "objects differ");
        b[123] ^= 1;
        assert_eq!(first_wrong(7, 500, &b), Some(623));
    }
}
