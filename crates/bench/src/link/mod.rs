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

pub use report::{payload_capacity, result_json, table_lines, waterfall, waterfall_head};

use crate::error::{Context, Result};
use linkem::Profile;
use rand_core::SeedableRng;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use system::{ensure_cc, HostSysctls};

/// What `satstp bench link` was asked for (its flags, parsed).
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// Link profile.
    pub profile: Profile,
    /// The contenders, in the order they run.
    pub contenders: Vec<Contender>,
    /// Bulk download size; `None`: the default.
    pub size: Option<u64>,
    /// Bulk upload size; `None`: the default.
    pub upload_size: Option<u64>,
    /// Runs of every contender.
    pub runs: u32,
    /// Objects on the web page.
    pub objects: u32,
    /// Seed of the page's object sizes; run i uses seed + i for the emulated link.
    pub seed: u64,
    /// Leave out the browser workload.
    pub no_browser: bool,
    /// The browser (`--browser`), else found.
    pub browser: Option<String>,
    /// The browser workload's protocol.
    pub http: Protocol,
    /// TLS session resumption at the HTTPS origin.
    pub tls_resumption: bool,
    /// TLS 1.3 0-RTT at the HTTPS origin.
    pub tls_early_data: bool,
}

/// `on` or `off` (the `--tls-resumption` flag).
pub fn on_off(s: &str) -> std::result::Result<bool, String> {
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
pub const BROWSER_CONNECTIONS: usize = loadgen::page::BROWSER_CONNECTIONS;
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

impl LinkOptions {
    /// The flags' checks that need nothing else (made before any output file is touched).
    pub fn check(&self) -> Result<()> {
        if !(1..=100).contains(&self.runs) {
            bail!("--runs must be between 1 and 100, got {}", self.runs);
        }
        if !(1..=1000).contains(&self.objects) {
            bail!("--objects must be between 1 and 1000, got {}", self.objects);
        }
        if self.contenders.is_empty() {
            bail!("--contenders: name at least one contender");
        }
        if self.http == Protocol::H3 {
            // Chromium carries no QUIC over a SOCKS5 proxy: only the routed paths can.
            if let Some(c) = self
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
            if self.tls_early_data {
                bail!("--tls-early-data: not offered over QUIC here (use it with https1 or h2)");
            }
        }
        if let Some(c) = self.contenders.iter().find(|c| c.quic_fallback().is_some()) {
            if self.http != Protocol::H3 {
                bail!(
                    "--contenders {c}: the terminal's QUIC policy matters only to a browser that goes \
                     for QUIC; use it with --http h3 (with --http {} it is split-stp-tproxy)",
                    self.http
                );
            }
        }
        if self.http != Protocol::H1 && self.no_browser {
            bail!(
                "--http {}: the protocol is the browser workload's; drop --no-browser",
                self.http
            );
        }
        if self.tls_early_data && !self.tls_resumption {
            bail!("--tls-early-data needs --tls-resumption on (0-RTT resumes a session)");
        }
        Ok(())
    }

    /// No contender twice; the download and upload sizes (the defaults: 100 MB, or about 30 s
    /// of the link if less).
    pub fn sizes(&self) -> Result<(u64, u64)> {
        for (i, c) in self.contenders.iter().enumerate() {
            if self.contenders[..i].contains(c) {
                bail!("--contenders: '{c}' is listed twice");
            }
        }
        let (down_bps, up_bps, _) = self.profile.parameters();
        let size = match self.size {
            Some(0) => bail!("--size must be positive"),
            Some(s) if s > 100_000_000_000 => bail!("--size must be at most 100GB, got {s}"),
            Some(s) => s,
            None => DEFAULT_SIZE.min(down_bps / 8 * DEFAULT_TRANSFER_S),
        };
        let upload_size = match self.upload_size {
            Some(0) => bail!("--upload-size must be positive"),
            Some(s) if s > 100_000_000_000 => {
                bail!("--upload-size must be at most 100GB, got {s}")
            }
            Some(s) => s,
            None => size.min(up_bps / 8 * DEFAULT_TRANSFER_S),
        };
        Ok((size, upload_size))
    }
}

/// Whether a contender needs the kernel's BBR.
fn uses_bbr(c: &Contender) -> bool {
    *c == Contender::Kernel("bbr") || c.tcp_hop() == Some("bbr")
}

/// One contender's runs: its samples and its errors (`skipped: …` when it could not run).
pub type Outcome = (Contender, Vec<Sample>, Vec<String>);

impl Plan {
    /// Everything the contenders share, set up: the emulator's support checked, the host's
    /// socket buffer limits raised (restored by [`Plan::finish`] or on drop), BBR loaded when
    /// a contender needs it, the page, the browser and the run's TLS. `exe` is the satstp
    /// binary the split contenders start as their daemons; `stop` ends the runs early.
    pub fn new(
        opts: &LinkOptions,
        size: u64,
        upload_size: u64,
        exe: PathBuf,
        stop: Arc<AtomicBool>,
    ) -> Result<Plan> {
        linkem::net::check_support().map_err(|e| err!("satstp bench link: {e}"))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let (down_bps, up_bps, rtt_ns) = opts.profile.parameters();
        // Socket buffers: 4 × the downlink's bandwidth-delay product (≥ 2 × BDP even when the
        // one-BDP queue doubles the round trip), at least 4 MiB.
        let bdp = down_bps.max(up_bps) * rtt_ns / 8 / 1_000_000_000;
        let buffer = (4 * bdp).max(4 << 20);
        let mut host = HostSysctls::default();
        for name in ["net/core/rmem_max", "net/core/wmem_max"] {
            host.raise(name, buffer)?;
        }
        let bbr = if opts.contenders.iter().any(uses_bbr) {
            Some(ensure_cc("bbr"))
        } else {
            None
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(opts.seed);
        let page: Vec<u64> = (0..opts.objects)
            .map(|_| netsim::web::response_size(&mut rng))
            .collect();
        let mut browser_skipped = None;
        let browser = if opts.no_browser {
            None
        } else if let Some(name) = &opts.browser {
            Some(browser::Chromium::named(name).map_err(|e| err!("--browser: {e}"))?)
        } else {
            match browser::Chromium::find() {
                Ok(c) => Some(c),
                Err(e) => {
                    browser_skipped = Some(e.to_string());
                    None
                }
            }
        };
        let tls = match opts.http.alpn() {
            Some(alpn) => {
                let pki =
                    loadgen::tls::TestPki::generate(&[linkem::Side::Gateway.ipv4().to_string()])
                        .context("cannot make the run's test certificates")?;
                let options = loadgen::tls::TlsOptions {
                    alpn,
                    resumption: opts.tls_resumption,
                    early_data: opts.tls_early_data,
                };
                let config = pki
                    .server_config(options)
                    .context("cannot configure the HTTPS origin")?;
                // The TCP origin beside the QUIC one (what a browser falls back to under block
                // or reject) speaks HTTP/2.
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
            opts.contenders.iter().find(|c| c.quic_fallback().is_some()),
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
                opts.http
            );
        }
        Ok(Plan {
            http: opts.http,
            tls,
            browser,
            browser_skipped,
            site: browser::Site::standard(),
            rt,
            profile: opts.profile,
            size,
            upload_size,
            page,
            buffer,
            exe,
            stop,
            host,
            bbr,
        })
    }

    /// Why `contender` cannot run (BBR missing), if it cannot.
    pub fn skip_reason(&self, contender: Contender) -> Option<&str> {
        match (uses_bbr(&contender), &self.bbr) {
            (true, Some(Err(why))) => Some(why),
            _ => None,
        }
    }

    /// Run `run` (from 0) of `contender`: a fresh emulator (link seed `seed + run`), the origin,
    /// the daemons of a split contender, the transfers timed and checked.
    pub fn measure(&self, contender: Contender, run: u64, seed: u64) -> Result<Sample> {
        measure::measure(self, contender, run, seed)
    }

    /// The settings of the run as the JSON report gives them.
    pub fn settings_json(&self, opts: &LinkOptions) -> Value {
        report::settings_json(opts, self, &self.host, self.bbr.as_ref())
    }

    /// The host's settings restored.
    pub fn finish(mut self) -> Result<()> {
        self.host.restore()
    }
}

/// The contenders that failed (a run failed; a skipped contender did not fail).
pub fn failed_contenders(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|(_, _, e)| e.iter().any(|e| !e.starts_with("skipped:")))
        .map(|(c, _, _)| c.to_string())
        .collect()
}
/// The HTTPS origin's certificates and configuration (one per bench run).
struct Tls {
    pki: loadgen::tls::TestPki,
    config: Arc<rustls::ServerConfig>,
    /// HTTP/2 over TLS for the TCP origin of `--http h3`'s block and reject cells.
    fallback: Arc<rustls::ServerConfig>,
}

/// What every contender is asked to do.
pub struct Plan {
    /// The browser workload's protocol.
    pub http: Protocol,
    /// TLS for the browser workload (`--http https1|h2`).
    tls: Option<Tls>,
    /// The browser of the browser workload, if it runs.
    pub browser: Option<browser::Chromium>,
    /// Why the browser workload is left out (no Chromium found), if it is.
    pub browser_skipped: Option<String>,
    /// The site the origin serves to the browser.
    pub site: browser::Site,
    /// The runtime the origin and the clients run on.
    rt: tokio::runtime::Runtime,
    pub profile: Profile,
    /// Bulk download and upload sizes.
    pub size: u64,
    pub upload_size: u64,
    /// The web page's object sizes (the first is the page).
    pub page: Vec<u64>,
    /// The socket buffer limit set in the host and the namespaces.
    pub buffer: u64,
    exe: PathBuf,
    stop: Arc<AtomicBool>,
    /// The host's sysctls raised for the run, restored by [`Plan::finish`].
    host: HostSysctls,
    /// Whether BBR is available, when a contender needs it.
    bbr: Option<std::result::Result<(), String>>,
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
pub struct Sample {
    pub download_bps: f64,
    pub upload_bps: f64,
    pub page_load_s: f64,
    pub page_per_object_s: f64,
    /// The browser's load event (NaN when the browser workload did not run).
    pub browser_load_s: f64,
    pub uplink_bytes_per_mb: f64,
    pub uplink_packets_per_mb: f64,
    pub retransmitted_bytes: f64,
    pub connect_s: f64,
    /// IP bytes on the emulated uplink (the return channel) during the browser load.
    pub browser_uplink_bytes: f64,
    /// The browser load in detail (when the browser workload ran).
    pub browser: Option<BrowserSample>,
    /// Requests the origin answered 404 (a real browser's `/favicon.ico` and the like): normal,
    /// reported, never a failure of the run.
    pub not_found: loadgen::origin::NotFound,
}

/// One browser load: the browser's figures, its critical path and the machine's load then.
#[derive(Debug, Clone)]
pub struct BrowserSample {
    pub load: browser::PageLoad,
    pub critical_path: Option<browser::CriticalPath>,
    /// One-minute load average when the load ended (the machine may be busy with other work).
    pub loadavg: f64,
    /// Under the terminal's `block` or `reject`: the QUIC packets its rule caught (the browser
    /// went for QUIC first).
    pub quic_caught: Option<u64>,
}

/// The metrics of a sample: key (in the JSON) and the table's label.
pub const METRICS: [(&str, &str); 12] = [
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
    /// A metric by its key in [`METRICS`] (`connect_s` for anything else).
    pub fn get(&self, metric: &str) -> f64 {
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
pub fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
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

    fn options() -> LinkOptions {
        LinkOptions {
            profile: Profile::Geo,
            contenders: vec![Contender::Kernel("cubic"), Contender::SplitStp],
            size: None,
            upload_size: None,
            runs: 1,
            objects: 30,
            seed: 1,
            no_browser: true,
            browser: None,
            http: Protocol::H1,
            tls_resumption: true,
            tls_early_data: false,
        }
    }

    #[test]
    fn bad_options_are_refused_naming_the_flag() {
        assert!(options().check().is_ok());
        let cases: Vec<(LinkOptions, &str)> = vec![
            (
                LinkOptions {
                    runs: 0,
                    ..options()
                },
                "--runs",
            ),
            (
                LinkOptions {
                    objects: 1001,
                    ..options()
                },
                "--objects",
            ),
            (
                LinkOptions {
                    contenders: vec![],
                    ..options()
                },
                "--contenders",
            ),
            (
                LinkOptions {
                    http: Protocol::H2,
                    ..options()
                },
                "--no-browser",
            ),
            (
                LinkOptions {
                    tls_early_data: true,
                    tls_resumption: false,
                    ..options()
                },
                "--tls-early-data",
            ),
            (
                LinkOptions {
                    http: Protocol::H3,
                    no_browser: false,
                    ..options()
                },
                "--http h3 --contenders split-stp",
            ),
        ];
        for (o, flag) in cases {
            let e = o.check().unwrap_err().to_string();
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }

    #[test]
    fn sizes_default_to_thirty_seconds_of_the_link_and_refuse_repeats() {
        // geo: 50 Mb/s down (30 s is 187.5 MB, more than the 100 MB default), 5 Mb/s up.
        assert_eq!(options().sizes().unwrap(), (100_000_000, 18_750_000));
        let o = LinkOptions {
            size: Some(1000),
            ..options()
        };
        assert_eq!(o.sizes().unwrap(), (1000, 1000));
        let o = LinkOptions {
            size: Some(0),
            ..options()
        };
        assert!(o.sizes().unwrap_err().to_string().contains("--size"));
        let twice = vec![Contender::SplitStp, Contender::SplitStp];
        let o = LinkOptions {
            contenders: twice,
            ..options()
        };
        assert!(o.sizes().unwrap_err().to_string().contains("listed twice"));
    }

    #[test]
    fn a_skipped_contender_has_not_failed() {
        let outcomes: Vec<Outcome> = vec![
            (
                Contender::Kernel("bbr"),
                vec![],
                vec!["skipped: no bbr".into()],
            ),
            (Contender::SplitStp, vec![], vec!["run 1: timed out".into()]),
        ];
        assert_eq!(failed_contenders(&outcomes), vec!["split-stp".to_string()]);
    }

    #[test]
    fn spread_is_median_min_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(spread(&[]), None);
    }
}
