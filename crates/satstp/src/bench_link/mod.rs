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
//! - `split-tcp` (`split-tcp-bbr`) and `split-stp`: the `satstp terminal` daemon (SOCKS5 on
//!   127.0.0.1:1080) in the terminal namespace and the `satstp gateway` daemon
//!   (198.18.0.2:4433) in the gateway namespace, this very binary started with generated keys
//!   and configuration files, the hop over kernel TCP (cubic, or bbr) or STP, sized from the
//!   profile's rates and round trip (for the TCP hop the namespaces also get what
//!   `docs/gateway.md` asks of its hosts: initial windows on the route, no slow start after
//!   idle, TCP Fast Open); the client speaks SOCKS5 to the terminal, and the gateway connects
//!   to the origin inside its namespace;
//! - `split-stp-fo`: `split-stp` with the terminal's SOCKS5 fast open (`socks_fast_open`), which
//!   saves a satellite round trip per new connection but reports failed connects as resets;
//! - `split-stp-tproxy`: `split-stp` with the client in a LAN namespace behind the terminal,
//!   connecting straight to the origin's address and intercepted by the terminal's transparent
//!   listener (`deploy/nftables-tproxy.nft` loaded in the terminal namespace);
//! - `split-stp-tproxy-block` and `-reject` (`--http h3` only): `split-stp-tproxy` with the
//!   terminal's `quic = "block"` or `"reject"`, the browser a repeat visitor whose profile, kept
//!   from a load over QUIC just before, makes it go for QUIC first and fall back to HTTP/2 over
//!   TCP through the terminal.
//!
//! Each contender moves a bulk download, a bulk upload and a web page twice: HTTP/1.1 (the page,
//! then its objects over six persistent connections) and HTTP/1.0 style (a new connection per
//! object, six at a time), sizes from [`netsim::web::response_size`]. The origin, the clients
//! and the byte checks are the load-generation kit's (`loadgen`); every byte is checked, and a
//! contender whose bytes are wrong fails.
//! Around the download the emulator's uplink counters and the sender's retransmissions (the
//! gateway namespace's `RetransSegs` for TCP, the gateway's `/metrics` for STP) are read.

mod contender;
mod daemons;
mod lan;
mod measure;
mod report;
mod system;

pub use contender::{Contender, Protocol};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use linkem::Profile;
use netsim::units::parse_bytes;
use rand_core::SeedableRng;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use system::{ensure_cc, HostSysctls};

#[derive(Debug, Args)]
pub struct LinkBenchArgs {
    /// Link profile: geo (50/5 Mb/s, 600 ms), geo-1998, direcpc, leo.
    #[arg(long)]
    profile: Profile,
    /// Contenders, comma-separated: cubic, bbr, reno (kernel TCP end to end), split-tcp,
    /// split-tcp-bbr (the split-TCP hop with cubic or bbr, its hosts tuned as docs/gateway.md
    /// describes), split-stp, split-stp-fo (split STP with the terminal's SOCKS5 fast open),
    /// split-stp-tproxy (split STP, the client intercepted transparently; the terminal's
    /// quic = "pass"), split-stp-tproxy-block and split-stp-tproxy-reject (the same with
    /// quic = "block" or "reject"; --http h3 only: the browser, a repeat visitor that reached the
    /// origin over QUIC before, falls back to HTTP/2 over TCP through the terminal).
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
    /// Results as JSON: --json (or --json -) prints them on standard output instead of
    /// the text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Write bar charts (SVG and PNG) to this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Leave out the browser workload (the test site loaded in headless Chromium). Without this
    /// flag it runs whenever a Chromium is found (`SATSTP_CHROMIUM` or `PATH`), and is skipped
    /// with the reason printed when none is.
    #[arg(long, conflicts_with = "browser")]
    no_browser: bool,
    /// The browser for the browser workload: `chromium` (Debian's full browser, run with
    /// `--headless`), `chromium-headless-shell`, or an executable's path. Default: `SATSTP_CHROMIUM`,
    /// else the first of chromium-headless-shell, chromium, chromium-browser, google-chrome found
    /// in PATH.
    #[arg(long, value_name = "NAME|PATH")]
    browser: Option<String>,
    /// Write every browser load's waterfall (the browser's Resource Timing of each fetch) and
    /// its critical path, split into round trips and the rest, to this text file.
    #[arg(long, value_name = "PATH")]
    browser_waterfall: Option<PathBuf>,
    /// The browser workload's protocol: h1 (plain HTTP/1.1, port 8080), https1 (HTTP/1.1 over
    /// TLS 1.3, port 443), h2 (HTTP/2 over TLS 1.3, port 443), h3 (HTTP/3 over QUIC on UDP 443,
    /// the browser forced to QUIC for the origin; only the routed contenders). The TLS
    /// certificate comes from a test CA made for the run; the browser trusts it by its key's
    /// hash for that process only.
    #[arg(long, value_name = "h1|https1|h2|h3", default_value = "h1")]
    http: Protocol,
    /// TLS session resumption (tickets) at the HTTPS origin: on or off.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    tls_resumption: bool,
    /// Let the HTTPS origin accept TLS 1.3 0-RTT early data on resumed sessions.
    #[arg(long)]
    tls_early_data: bool,
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("'{s}' is neither on nor off")),
    }
}

/// The origin's port on the gateway side.
const ORIGIN_PORT: u16 = 8080;
/// The HTTPS origin's port (the browser workload over TLS).
const HTTPS_PORT: u16 = 443;
/// The terminal daemon's SOCKS5 port (loopback of the terminal namespace).
const SOCKS_PORT: u16 = 1080;
/// The terminal daemon's transparent listener (`TPROXY_PORT` of deploy/nftables-tproxy.nft).
const TPROXY_PORT: u16 = 12345;
/// The gateway daemon's hop port (UDP for STP, TCP for the TCP hop).
const HOP_PORT: u16 = 4433;
/// The daemons' `/metrics` ports (loopback of their namespaces).
const TERMINAL_METRICS_PORT: u16 = 9464;
const GATEWAY_METRICS_PORT: u16 = 9465;
/// Parallel connections of the page loads (HTTP/1.1 browsers: six per host).
const BROWSER_CONNECTIONS: usize = loadgen::page::BROWSER_CONNECTIONS;
/// TCP payload of a full segment on `sat0` (1500-byte MTU, IPv4 and TCP headers with
/// timestamps): the unit of `RetransSegs`, and the payload share of the link's capacity.
const TCP_MSS: u64 = 1448;
const MTU: u64 = 1500;
/// Default download size, and the seconds of link time a default transfer is cut to.
const DEFAULT_SIZE: u64 = 100_000_000;
const DEFAULT_TRANSFER_S: u64 = 30;
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
    if args.http == Protocol::H3 {
        // Chromium carries no QUIC over a SOCKS5 proxy: only the routed paths can.
        if let Some(c) = args
            .contenders
            .iter()
            .find(|c| c.is_split() && !c.transparent())
        {
            bail!(
                "--http h3 --contenders {c}: Chromium does not carry QUIC through a SOCKS5 proxy; \
                 with h3 use direct contenders (cubic, bbr: the kernel's congestion control does \
                 not apply to QUIC, so both are QUIC as the origin's stack runs it) or \
                 split-stp-tproxy (the terminal's quic = \"pass\" routes QUIC as it is), \
                 split-stp-tproxy-block, split-stp-tproxy-reject"
            );
        }
        if args.tls_early_data {
            bail!("--tls-early-data: not offered over QUIC here (use it with https1 or h2)");
        }
    }
    if let Some(c) = args.contenders.iter().find(|c| c.quic_fallback().is_some()) {
        if args.http != Protocol::H3 {
            bail!(
                "--contenders {c}: the terminal's QUIC policy matters only to a browser that goes \
                 for QUIC; use it with --http h3 (with --http {} it is split-stp-tproxy)",
                args.http
            );
        }
    }
    if args.http != Protocol::H1 && args.no_browser {
        bail!(
            "--http {}: the protocol is the browser workload's; drop --no-browser",
            args.http
        );
    }
    if args.tls_early_data && !args.tls_resumption {
        bail!("--tls-early-data needs --tls-resumption on (0-RTT resumes a session)");
    }
    crate::outpath::json_start(&args.json)?;
    if let Some(dir) = &args.out {
        crate::outpath::dir("--out", dir)?;
    }
    if let Some(p) = &args.browser_waterfall {
        crate::outpath::file("--browser-waterfall", p)?;
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
    if let Some(path) = &args.browser_waterfall {
        // Checked now rather than after minutes of measuring.
        std::fs::write(path, "")
            .with_context(|| format!("--browser-waterfall: cannot write {}", path.display()))?;
    }
    linkem::net::check_support().map_err(|e| anyhow!("satstp bench link: {e}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
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
    let uses_bbr = |c: &Contender| *c == Contender::Kernel("bbr") || c.tcp_hop() == Some("bbr");
    let bbr = if args.contenders.iter().any(uses_bbr) {
        Some(ensure_cc("bbr"))
    } else {
        None
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let page: Vec<u64> = (0..args.objects)
        .map(|_| netsim::web::response_size(&mut rng))
        .collect();
    let browser = if args.no_browser {
        None
    } else if let Some(name) = &args.browser {
        Some(browser::Chromium::named(name).map_err(|e| anyhow!("--browser: {e}"))?)
    } else {
        match browser::Chromium::find() {
            Ok(c) => Some(c),
            Err(e) => {
                outln!("  browser workload skipped: {e}");
                None
            }
        }
    };
    let tls = match args.http.alpn() {
        Some(alpn) => {
            let pki = loadgen::tls::TestPki::generate(&[linkem::Side::Gateway.ipv4().to_string()])
                .context("cannot make the run's test certificates")?;
            let options = loadgen::tls::TlsOptions {
                alpn,
                resumption: args.tls_resumption,
                early_data: args.tls_early_data,
            };
            let config = pki
                .server_config(options)
                .context("cannot configure the HTTPS origin")?;
            // The TCP origin beside the QUIC one (what a browser falls back to under block or
            // reject) speaks HTTP/2.
            let fallback = pki
                .server_config(loadgen::tls::TlsOptions {
                    alpn: loadgen::tls::Alpn::Http2,
                    ..options
                })
                .context("cannot configure the HTTPS origin")?;
            Some(Tls {
                pki,
                config,
                fallback,
            })
        }
        None => None,
    };
    if let (Some(c), Some(b)) = (
        args.contenders.iter().find(|c| c.quic_fallback().is_some()),
        &browser,
    ) {
        if b.is_headless_shell() {
            bail!(
                "--contenders {c}: the cell is a repeat visit, which needs a browser that keeps \
                 what it learned (the origin's Alt-Svc, that QUIC worked) in its profile between \
                 two loads; {} keeps no network state: use --browser chromium",
                b.path().display()
            );
        }
    }
    if tls.is_some() && browser.is_none() {
        bail!(
            "--http {}: the browser workload is needed (no Chromium found; set --browser)",
            args.http
        );
    }
    let plan = Plan {
        http: args.http,
        tls,
        browser,
        site: browser::Site::standard(),
        rt,
        profile: args.profile,
        size,
        upload_size,
        page,
        buffer,
        exe,
        stop: stop.clone(),
    };
    let settings = report::settings_json(args, &plan, &host, bbr.as_ref());
    outln!(
        "satstp bench link: profile {} ({:.2} Mb/s down, {:.3} Mb/s up, {} ms RTT, drop-tail queues of one BDP)",
        plan.profile,
        down_bps as f64 / 1e6,
        up_bps as f64 / 1e6,
        rtt_ns / 1_000_000
    );
    outln!(
        "  download {} bytes, upload {} bytes, page of {} objects ({} bytes) over {} connections; {} run(s); socket buffer limits {} bytes",
        plan.size,
        plan.upload_size,
        plan.page.len(),
        plan.page.iter().sum::<u64>(),
        BROWSER_CONNECTIONS,
        args.runs,
        plan.buffer
    );
    if let Some(b) = &plan.browser {
        outln!(
            "  browser: {} loads the test site ({} objects, {} bytes, chains of dependent requests) in a fresh profile, {}",
            b.path().display(),
            plan.site.objects().len(),
            plan.site.total_bytes(),
            match plan.http {
                Protocol::H1 => "plain HTTP/1.1".to_string(),
                Protocol::H3 => format!(
                    "HTTP/3 over QUIC on UDP 443, forced for the origin (test CA of this run; \
                     resumption {})",
                    if args.tls_resumption { "on" } else { "off" }
                ),
                p => format!(
                    "{} over TLS 1.3 (test CA of this run; resumption {}, 0-RTT {})",
                    if p == Protocol::H2 { "HTTP/2" } else { "HTTP/1.1" },
                    if args.tls_resumption { "on" } else { "off" },
                    if args.tls_early_data { "on" } else { "off" }
                ),
            }
        );
    }

    let mut outcomes: Vec<(Contender, Vec<Sample>, Vec<String>)> = args
        .contenders
        .iter()
        .map(|c| (*c, Vec::new(), Vec::new()))
        .collect();
    let mut waterfalls = String::new();
    let started = Instant::now();
    for run in 0..args.runs {
        for (contender, samples, errors) in outcomes.iter_mut() {
            if stop.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            if let (true, Some(Err(why))) = (uses_bbr(contender), &bbr) {
                if run == 0 {
                    errors.push(format!("skipped: {why}"));
                }
                continue;
            }
            eprint!("  run {} {contender:<10} ", run + 1);
            let t0 = Instant::now();
            match measure::measure(&plan, *contender, u64::from(run), args.seed) {
                Ok(s) => {
                    let browser = match &s.browser {
                        Some(b) => {
                            let p = b.critical_path.as_ref().map_or(String::new(), |p| {
                                format!(" ({} requests on the critical path)", p.requests())
                            });
                            let caught = b.quic_caught.map_or(String::new(), |n| {
                                format!(
                                    " ({} over TCP after {n} QUIC packet(s) caught by the terminal's rule; a repeat visit)",
                                    b.load.protocol
                                )
                            });
                            waterfalls.push_str(&format!(
                                "{contender} run {}: load event {:.0} ms{caught}, DOMContentLoaded {:.0} ms, first byte {:.0} ms; load average {:.2}\n{}\n",
                                run + 1,
                                b.load.load.as_secs_f64() * 1e3,
                                b.load.dom_content_loaded.as_secs_f64() * 1e3,
                                b.load.first_byte.as_secs_f64() * 1e3,
                                b.loadavg,
                                browser::waterfall::render(
                                    &b.load.fetches,
                                    b.critical_path.as_ref(),
                                    b.load.load.as_secs_f64() * 1e3,
                                    rtt_ns as f64 / 1e6
                                )
                            ));
                            format!(", browser {:.2} s{p}", s.browser_load_s)
                        }
                        None => String::new(),
                    };
                    let extra = match s.not_found.count {
                        0 => String::new(),
                        n => format!(
                            "; {n} request(s) answered 404 ({})",
                            s.not_found.first.join(", ")
                        ),
                    };
                    eprintln!(
                        "download {:.2} Mb/s, upload {:.2} Mb/s, page {:.2} s, page HTTP/1.0 {:.2} s{browser} ({:.0} s){extra}",
                        s.download_bps / 1e6,
                        s.upload_bps / 1e6,
                        s.page_load_s,
                        s.page_per_object_s,
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
        .map(|(c, s, e)| report::result_json(*c, s, e, &plan))
        .collect();
    report::print_table(&plan, &outcomes);
    outln!("  wall time {wall:.0} s");
    let report = json!({
        "profile": plan.profile.name(),
        "settings": settings,
        "wall_seconds": wall,
        "results": results,
    });
    crate::outpath::write_json(&args.json, &report)?;
    if let Some(dir) = &args.out {
        report::write_charts(dir, &plan, &outcomes)?;
    }
    if let Some(path) = &args.browser_waterfall {
        let head = format!(
            "satstp bench link: browser waterfalls, profile {} (RTT {} ms); times in ms since the navigation started; * on the critical path\n\n",
            plan.profile,
            rtt_ns / 1_000_000
        );
        std::fs::write(path, head + &waterfalls)
            .with_context(|| format!("--browser-waterfall: cannot write {}", path.display()))?;
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

/// The HTTPS origin's certificates and configuration (one per bench run).
struct Tls {
    pki: loadgen::tls::TestPki,
    config: Arc<rustls::ServerConfig>,
    /// HTTP/2 over TLS for the TCP origin of `--http h3`'s block and reject cells.
    fallback: Arc<rustls::ServerConfig>,
}

/// What every contender is asked to do.
struct Plan {
    /// The browser workload's protocol.
    http: Protocol,
    /// TLS for the browser workload (`--http https1|h2`).
    tls: Option<Tls>,
    /// The browser of the browser workload, if it runs.
    browser: Option<browser::Chromium>,
    /// The site the origin serves to the browser.
    site: browser::Site,
    /// The runtime the origin and the clients run on.
    rt: tokio::runtime::Runtime,
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
    fn limit(&self, bytes: u64, rate_bps: u64) -> Duration {
        let ideal = bytes as f64 * 8.0 / rate_bps as f64;
        Duration::from_secs_f64((10.0 * ideal).max(120.0))
    }
}

/// One contender's figures from one run.
#[derive(Debug, Clone)]
struct Sample {
    download_bps: f64,
    upload_bps: f64,
    page_load_s: f64,
    page_per_object_s: f64,
    /// The browser's load event (NaN when the browser workload did not run).
    browser_load_s: f64,
    uplink_bytes_per_mb: f64,
    uplink_packets_per_mb: f64,
    retransmitted_bytes: f64,
    connect_s: f64,
    /// IP bytes on the emulated uplink (the return channel) during the browser load.
    browser_uplink_bytes: f64,
    /// The browser load in detail (when the browser workload ran).
    browser: Option<BrowserSample>,
    /// Requests the origin answered 404 (a real browser's `/favicon.ico` and the like): normal,
    /// reported, never a failure of the run.
    not_found: loadgen::origin::NotFound,
}

/// One browser load: the browser's figures, its critical path and the machine's load then.
#[derive(Debug, Clone)]
struct BrowserSample {
    load: browser::PageLoad,
    critical_path: Option<browser::CriticalPath>,
    /// One-minute load average when the load ended (the machine may be busy with other work).
    loadavg: f64,
    /// Under the terminal's `block` or `reject`: the QUIC packets its rule caught (the browser
    /// went for QUIC first).
    quic_caught: Option<u64>,
}

const METRICS: [(&str, &str); 12] = [
    ("download_bps", "download Mb/s"),
    ("upload_bps", "upload Mb/s"),
    ("page_load_s", "page load s"),
    ("page_per_object_s", "page 1.0 s"),
    ("browser_load_s", "browser s"),
    ("browser_tls_s", "br. TLS s"),
    ("browser_wait_s", "br. rounds s"),
    ("browser_queue_s", "br. queue s"),
    ("browser_uplink_bytes", "br. up B"),
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
            "page_per_object_s" => self.page_per_object_s,
            "browser_load_s" => self.browser_load_s,
            "browser_tls_s" => self.path_part(|p| p.tls_ms),
            "browser_wait_s" => self.path_part(|p| p.wait_ms),
            "browser_queue_s" => self.path_part(|p| p.queue_ms),
            "browser_uplink_bytes" => self.browser_uplink_bytes,
            "uplink_bytes_per_mb" => self.uplink_bytes_per_mb,
            "uplink_packets_per_mb" => self.uplink_packets_per_mb,
            "retransmitted_bytes" => self.retransmitted_bytes,
            _ => self.connect_s,
        }
    }
}

impl Sample {
    /// A part of the browser load's critical path, in seconds (NaN without one).
    fn path_part(&self, part: impl Fn(&browser::CriticalPath) -> f64) -> f64 {
        self.browser
            .as_ref()
            .and_then(|b| b.critical_path.as_ref())
            .map_or(f64::NAN, |p| part(p) / 1e3)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&[]), None);
    }
}
