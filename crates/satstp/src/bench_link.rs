//! `satstp bench link`: every contender over the same emulated satellite link (Linux, root).
//! The flags, the runs' progress, the table, the JSON and the charts; what a run does (the
//! emulator, the origin, the daemons, the measurements) is `bench::link`'s.

use anyhow::{bail, Context, Result};
use bench::link::{spread, Contender, LinkOptions, Outcome, Plan, Protocol};
use clap::Args;
use netsim::units::parse_bytes;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct LinkBenchArgs {
    /// Link profile: geo (50/5 Mb/s, 600 ms), geo-1998, direcpc, leo.
    #[arg(long)]
    profile: linkem::Profile,
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
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = bench::link::on_off, action = clap::ArgAction::Set)]
    tls_resumption: bool,
    /// Let the HTTPS origin accept TLS 1.3 0-RTT early data on resumed sessions.
    #[arg(long)]
    tls_early_data: bool,
}

impl LinkBenchArgs {
    fn options(&self) -> LinkOptions {
        LinkOptions {
            profile: self.profile,
            contenders: self.contenders.clone(),
            size: self.size,
            upload_size: self.upload_size,
            runs: self.runs,
            objects: self.objects,
            seed: self.seed,
            no_browser: self.no_browser,
            browser: self.browser.clone(),
            http: self.http,
            tls_resumption: self.tls_resumption,
            tls_early_data: self.tls_early_data,
        }
    }
}

pub fn run(args: &LinkBenchArgs) -> Result<()> {
    let opts = args.options();
    opts.check()?;
    crate::outpath::json_start(&args.json)?;
    if let Some(dir) = &args.out {
        crate::outpath::dir("--out", dir)?;
    }
    if let Some(p) = &args.browser_waterfall {
        crate::outpath::file("--browser-waterfall", p)?;
    }
    let (size, upload_size) = opts.sizes()?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    if let Some(path) = &args.browser_waterfall {
        // Checked now rather than after minutes of measuring.
        std::fs::write(path, "")
            .with_context(|| format!("--browser-waterfall: cannot write {}", path.display()))?;
    }
    let exe = std::env::current_exe().context("cannot find the satstp binary itself")?;
    let stop = crate::signals::stop_flag(Some("\nsatstp bench link: stopping (signal)"))?;
    let plan = Plan::new(&opts, size, upload_size, exe, stop.clone())?;
    if let Some(e) = &plan.browser_skipped {
        outln!("  browser workload skipped: {e}");
    }
    let settings = plan.settings_json(&opts);
    let (down_bps, up_bps, rtt_ns) = plan.profile.parameters();
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
        bench::link::BROWSER_CONNECTIONS,
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

    let mut outcomes: Vec<Outcome> = args
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
            if let Some(why) = plan.skip_reason(*contender) {
                if run == 0 {
                    errors.push(format!("skipped: {why}"));
                }
                continue;
            }
            eprint!("  run {} {contender:<10} ", run + 1);
            let t0 = Instant::now();
            match plan.measure(*contender, u64::from(run), args.seed) {
                Ok(s) => {
                    let browser = match &s.browser {
                        Some(b) => {
                            let p = b.critical_path.as_ref().map_or(String::new(), |p| {
                                format!(" ({} requests on the critical path)", p.requests())
                            });
                            waterfalls.push_str(&bench::link::waterfall(
                                *contender,
                                run,
                                b,
                                plan.profile,
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
                    let e = anyhow::Error::from(e);
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
        .map(|(c, s, e)| bench::link::result_json(*c, s, e, &plan))
        .collect();
    for line in bench::link::table_lines(&plan, &outcomes) {
        outln!("{line}");
    }
    outln!("  wall time {wall:.0} s");
    let report = json!({
        "profile": plan.profile.name(),
        "settings": settings,
        "wall_seconds": wall,
        "results": results,
    });
    crate::outpath::write_json(&args.json, &report)?;
    if let Some(dir) = &args.out {
        write_charts(dir, &plan, &outcomes)?;
    }
    if let Some(path) = &args.browser_waterfall {
        let head = bench::link::waterfall_head(plan.profile);
        std::fs::write(path, head + &waterfalls)
            .with_context(|| format!("--browser-waterfall: cannot write {}", path.display()))?;
    }
    plan.finish()?;
    let failed = bench::link::failed_contenders(&outcomes);
    if !failed.is_empty() {
        bail!("contender(s) failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Bar charts of the medians (SVG and PNG) in `dir`.
fn write_charts(dir: &Path, plan: &Plan, outcomes: &[Outcome]) -> Result<()> {
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
            "link-page-load-per-object",
            "page_per_object_s",
            "page load time, a connection per object (HTTP/1.0 style)",
            "s",
            1.0,
        ),
        (
            "link-browser-load",
            "browser_load_s",
            "test site's load event in headless Chromium",
            "s",
            1.0,
        ),
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
            error_bars: Some("the farther of the runs' minimum and maximum".into()),
            ..Chart::default()
        };
        chart.write(dir, file)?;
    }
    Ok(())
}
