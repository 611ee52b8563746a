//! The short-transfer and web reproductions (`web-*` in `satstp reproduce`): thesis Table 4.2
//! (analytic model and simulation), Table 5.3 (TCP, T/TCP, STP on HTTP transfers), Table 5.4
//! (DirecPC and Ricochet file transfers), HTTP/1.0 vs persistent vs pipelined vs parallel
//! connections, and browsing over a 1 kb/s return channel.
//!
//! Each reproduction is a data file (`scenarios/reproduce/web/NAME.toml`: the seeds' figures,
//! the checkable claims, sizes of the full and quick runs) and an experiment here that produces
//! rows of named metrics (mean and 95 % half-width). Claims compare metrics of rows, as in the
//! scenario-based reproductions (`docs/scenarios.md`).

use crate::reproduce::{compare, Side};
use crate::sim::{Time, MS, SEC};
use crate::stp_agent::Framing;
use crate::tcp::{InitialWindow as TcpIw, TcpConfig};
use crate::web::experiments::{
    run_bulk, run_http, seeds_tcp, Bulk, ExperimentError, Network, PathSpec,
};
use crate::web::http::{HttpLog, HttpVersion, Pages, Think, Transport, Workload};
use crate::web::latency_model::ModelTcp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stp::{EndpointConfig, InitialWindow};

/// A web reproduction file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebRepro {
    pub name: String,
    pub title: String,
    pub source: String,
    /// Which experiment: "table4.2", "table5.3", "table5.4", "http-versions", "thin-return".
    pub experiment: String,
    /// Transfers, pages or files per row in the full run and with `--quick`.
    pub samples: u32,
    pub quick_samples: u32,
    /// The seeds' qualitative conclusion, in one line.
    pub conclusion: String,
    /// Why ours differs, where we found the cause.
    pub note: Option<String>,
    #[serde(rename = "seed", default)]
    pub seeds: Vec<WebSeed>,
    #[serde(rename = "claim", default)]
    pub claims: Vec<WebClaim>,
}

/// A figure the seeds report for one (row, metric).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebSeed {
    pub row: String,
    pub metric: String,
    pub value: f64,
    pub source: String,
}

/// One side of a claim: a row's metric, or a constant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebOperand {
    pub row: Option<String>,
    pub metric: Option<String>,
    pub value: Option<f64>,
}

/// `lhs op factor × rhs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebClaim {
    pub text: String,
    pub lhs: WebOperand,
    pub op: String,
    #[serde(default = "one")]
    pub factor: f64,
    pub rhs: WebOperand,
}

fn one() -> f64 {
    1.0
}

/// A metric's mean and 95 % half-width (0 for exact figures).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Value {
    pub mean: f64,
    pub ci95: f64,
}

impl Value {
    fn exact(v: f64) -> Value {
        Value { mean: v, ci95: 0.0 }
    }

    /// Mean and 95 % half-width of samples.
    pub fn of(v: &[f64]) -> Value {
        let n = v.len() as f64;
        if v.is_empty() {
            return Value {
                mean: f64::NAN,
                ci95: f64::NAN,
            };
        }
        let mean = v.iter().sum::<f64>() / n;
        let var = if v.len() > 1 {
            v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Value {
            mean,
            ci95: 1.96 * (var / n).sqrt(),
        }
    }
}

/// One row: a name, its group (plotted as a series) and its metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    pub group: String,
    pub label: String,
    pub metrics: BTreeMap<String, Value>,
}

/// A checked claim of a web reproduction: the same record as the scenario reproductions'.
pub type WebClaimResult = crate::reproduce::ClaimResult;

/// Everything a web reproduction produced.
#[derive(Debug, Clone, Serialize)]
pub struct WebResult {
    pub name: String,
    pub samples: u32,
    pub rows: Vec<Row>,
    pub claims: Vec<WebClaimResult>,
    pub conclusion_holds: bool,
    pub events: u64,
}

/// Why a web reproduction failed.
#[derive(Debug, thiserror::Error)]
pub enum WebReproError {
    #[error("web reproduction file: {0}")]
    Parse(String),
    #[error("{0}")]
    Bad(String),
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
}

impl WebRepro {
    pub fn from_toml(text: &str) -> Result<WebRepro, WebReproError> {
        toml::from_str(text).map_err(|e| WebReproError::Parse(e.to_string()))
    }

    /// Runs the experiment (rows in parallel on `threads`) and checks the claims.
    pub fn run(&self, quick: bool, threads: usize) -> Result<WebResult, WebReproError> {
        let n = if quick {
            self.quick_samples
        } else {
            self.samples
        }
        .max(1);
        let jobs: Vec<Job> = match self.experiment.as_str() {
            "table4.2" => table42_jobs(),
            "table5.3" => table53_jobs(),
            "table5.4" => table54_jobs(),
            "http-versions" => versions_jobs(),
            "thin-return" => thin_return_jobs(),
            other => return Err(WebReproError::Bad(format!("unknown experiment '{other}'"))),
        };
        let results = par_map(&jobs, threads, |j| (j.run)(n));
        let mut rows = Vec::new();
        let mut events = 0;
        for (job, r) in jobs.iter().zip(results) {
            let (metrics, ev) = r?;
            events += ev;
            rows.push(Row {
                name: job.name.clone(),
                group: job.group.clone(),
                label: job.label.clone(),
                metrics,
            });
        }
        if self.experiment == "thin-return" {
            add_slowdowns(&mut rows);
        }
        let claims = self
            .claims
            .iter()
            .map(|c| check(c, &rows))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(WebResult {
            name: self.name.clone(),
            samples: n,
            conclusion_holds: claims.iter().all(|c| c.holds),
            rows,
            claims,
            events,
        })
    }

    /// The seeds' figure for a row's metric.
    pub fn seed(&self, row: &str, metric: &str) -> Option<&WebSeed> {
        self.seeds
            .iter()
            .find(|s| s.row == row && s.metric == metric)
    }
}

fn operand(o: &WebOperand, rows: &[Row]) -> Result<Side, WebReproError> {
    if let Some(v) = o.value {
        return Ok(Side {
            label: String::new(),
            metric: o.metric.clone(),
            value: v,
            ci95: 0.0,
        });
    }
    let (Some(r), Some(m)) = (&o.row, &o.metric) else {
        return Err(WebReproError::Bad(
            "a claim operand needs value, or row + metric".into(),
        ));
    };
    rows.iter()
        .find(|x| &x.name == r)
        .ok_or_else(|| WebReproError::Bad(format!("claim names unknown row '{r}'")))?
        .metrics
        .get(m)
        .map(|v| Side {
            label: r.clone(),
            metric: Some(m.clone()),
            value: v.mean,
            ci95: v.ci95,
        })
        .ok_or_else(|| WebReproError::Bad(format!("claim names unknown metric '{m}' of '{r}'")))
}

fn check(c: &WebClaim, rows: &[Row]) -> Result<WebClaimResult, WebReproError> {
    let lhs = operand(&c.lhs, rows)?;
    let rhs = operand(&c.rhs, rows)?;
    compare(&c.text, &lhs, &c.op, c.factor, &rhs).ok_or_else(|| {
        WebReproError::Bad(format!(
            "unknown claim operator '{}' (accepted: <, <=, >, >=)",
            c.op
        ))
    })
}

type Metrics = BTreeMap<String, Value>;
type JobFn = Box<dyn Fn(u32) -> Result<(Metrics, u64), WebReproError> + Send + Sync>;

struct Job {
    name: String,
    group: String,
    label: String,
    run: JobFn,
}

fn job(group: &str, label: &str, run: JobFn) -> Job {
    Job {
        name: format!("{group} / {label}"),
        group: group.to_string(),
        label: label.to_string(),
        run,
    }
}

/// Runs `f` over `items` on up to `threads` threads, keeping the order.
fn par_map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let out: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                if let Ok(mut slot) = out[i].lock() {
                    *slot = Some(r);
                }
            });
        }
    });
    out.into_iter()
        .filter_map(|m| m.into_inner().ok().flatten())
        .collect()
}

fn secs(ns: Time) -> f64 {
    ns as f64 / 1e9
}

fn transfer_metrics(log: &HttpLog) -> Metrics {
    let lat: Vec<f64> = log.transfers.iter().map(|t| secs(t.latency_ns)).collect();
    let mut m = Metrics::new();
    m.insert("latency_s".into(), Value::of(&lat));
    let n = log.transfers.len().max(1) as f64;
    m.insert(
        "packets".into(),
        Value::exact((log.client_packets + log.server_packets) as f64 / n),
    );
    m.insert("transfers".into(), Value::exact(log.transfers.len() as f64));
    m
}

fn single_transfers(n: u32) -> Workload {
    Workload {
        version: HttpVersion::Http10 { parallel: 1 },
        pages: Pages::Objects(1),
        // 200-400 ms between transfers: a random phase against the delayed-ACK tick.
        think: Think::Uniform {
            min: 200 * MS,
            max: 400 * MS,
        },
        max_pages: n,
    }
}

/// Table 4.2: 2 orbits × 2 segment sizes × 4 TCP options.
fn table42_jobs() -> Vec<Job> {
    let mut v = Vec::new();
    for (orbit, rtt) in [("GEO", 600 * MS), ("LEO", 80 * MS)] {
        for (seg, mss) in [(1500u32, 1460u32), (500, 460)] {
            for (label, ttcp, kss) in [
                ("Standard TCP", false, false),
                ("T/TCP", true, false),
                ("TCP 4KSS", false, true),
                ("T/TCP 4KSS", true, true),
            ] {
                let group = format!("{orbit} {seg} B");
                v.push(job(
                    &group,
                    label,
                    Box::new(move |n| {
                        let model = ModelTcp {
                            ttcp,
                            four_kss: kss,
                            ..ModelTcp::standard(secs(rtt), u64::from(mss))
                        };
                        let s = model.summary(100);
                        let tcp = TcpConfig {
                            data_on_syn: ttcp,
                            initial_window: if kss { TcpIw::FourKss } else { TcpIw::One },
                            ..seeds_tcp(mss)
                        };
                        let (log, ev) = run_http(
                            PathSpec::lab(rtt),
                            Transport::Tcp(tcp),
                            single_transfers(n),
                            u64::from(mss) * 7 + rtt / MS,
                            u64::from(n) * 60 * SEC,
                        )?;
                        let mut m = transfer_metrics(&log);
                        m.insert("model_min_s".into(), Value::exact(s.min_s));
                        m.insert("model_median_s".into(), Value::exact(s.median_s));
                        m.insert("model_mean_s".into(), Value::exact(s.mean_s));
                        m.insert("model_left_out".into(), Value::exact(s.left_out));
                        Ok((m, ev))
                    }),
                ));
            }
        }
    }
    v
}

/// STP as the seeds' short-transfer experiments ran it: initial window 1, STP over IP,
/// 1500-byte packets.
fn seeds_stp() -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.connection.initial_window = InitialWindow::Packets(1);
    c.connection.max_datagram_bytes = 1480;
    c
}

/// Table 5.3's size classes: (group, smallest and largest reply in bytes), by 1460-byte
/// segments ("seg").
const TABLE53_CLASSES: [(&str, u64, u64); 5] = [
    ("1 seg", 1, 1460),
    ("2-3 seg", 1461, 3 * 1460),
    ("4-10 seg", 3 * 1460 + 1, 10 * 1460),
    ("11-100 seg", 10 * 1460 + 1, 100 * 1460),
    (">100 seg", 100 * 1460 + 1, u64::MAX),
];

/// Table 5.3: HTTP transfers at 600 ms with TCP, T/TCP and STP (and STP's unpaced option),
/// over the model's reply sizes; then the three protocols again with the replies restricted to
/// each size class (a quarter of the samples each), to show where each protocol's cost lies.
fn table53_jobs() -> Vec<Job> {
    let tcp = Transport::Tcp(seeds_tcp(1460));
    let ttcp = Transport::Tcp(TcpConfig {
        data_on_syn: true,
        ..seeds_tcp(1460)
    });
    let stp = Transport::Stp {
        config: seeds_stp(),
        framing: Framing::Ip,
    };
    let unpaced = {
        let mut c = seeds_stp();
        c.connection.unpaced_first_flight = true;
        Transport::Stp {
            config: c,
            framing: Framing::Ip,
        }
    };
    // The seeds' STP (stp spec §11a): each window spread uniformly over srtt on 10 ms ticks, no
    // report allowance, initial window 1.
    let thesis_paced = {
        let mut c = seeds_stp();
        stp::Profile::Thesis.apply_to(&mut c.connection);
        Transport::Stp {
            config: c,
            framing: Framing::Ip,
        }
    };
    let mut v = Vec::new();
    // `quarter`: a size-class row, with a quarter of the samples.
    let mut add =
        |group: String, label: &str, transport: &Transport, pages: Pages, quarter: bool| {
            let transport = transport.clone();
            v.push(job(
                &group,
                label,
                Box::new(move |n| {
                    let n = if quarter { (n / 4).max(1) } else { n };
                    let workload = Workload {
                        pages,
                        ..single_transfers(n)
                    };
                    let (log, ev) = run_http(
                        PathSpec::lab(600 * MS),
                        transport.clone(),
                        workload,
                        53,
                        u64::from(n) * 60 * SEC,
                    )?;
                    let mut m = transfer_metrics(&log);
                    // The reply's size in 1460-byte segments, for reading packets per transfer.
                    let segments: Vec<f64> = log
                        .transfers
                        .iter()
                        .map(|t| t.reply_bytes.div_ceil(1460) as f64)
                        .collect();
                    m.insert("reply_segments".into(), Value::of(&segments));
                    Ok((m, ev))
                }),
            ));
        };
    // The reply sizes the seeds' figures imply (mean 3.9 segments, http_model), on which the
    // claims are checked; and our stand-in for Mah's sizes (mean 7.6 segments in the sample).
    let seeds_sizes = Pages::SeedsImplied { objects: Some(1) };
    let main = "GEO 600 ms".to_string();
    add(main.clone(), "TCP", &tcp, seeds_sizes, false);
    add(main.clone(), "T/TCP", &ttcp, seeds_sizes, false);
    add(main.clone(), "STP", &stp, seeds_sizes, false);
    add(
        main.clone(),
        "STP, first flight unpaced",
        &unpaced,
        seeds_sizes,
        false,
    );
    add(
        main,
        "STP (thesis profile)",
        &thesis_paced,
        seeds_sizes,
        false,
    );
    let stand_in = "GEO 600 ms, stand-in sizes".to_string();
    for (label, t) in [
        ("TCP", &tcp),
        ("T/TCP", &ttcp),
        ("STP (thesis profile)", &thesis_paced),
    ] {
        add(stand_in.clone(), label, t, Pages::Objects(1), false);
    }
    for (class, lo, hi) in TABLE53_CLASSES {
        let pages = Pages::Single {
            min_bytes: lo,
            max_bytes: hi,
        };
        let group = class.to_string();
        add(group.clone(), "TCP", &tcp, pages, true);
        add(group.clone(), "T/TCP", &ttcp, pages, true);
        add(group.clone(), "STP", &stp, pages, true);
        add(group, "STP (thesis profile)", &thesis_paced, pages, true);
    }
    v
}

/// Table 5.4: file transfers over DirecPC and Ricochet.
fn table54_jobs() -> Vec<Job> {
    let stp_backoff = {
        let mut c = seeds_stp();
        c.connection.window_rtt_backoff_ms = Some(1000);
        c
    };
    let mut v = Vec::new();
    for (net, group) in [
        (Network::DirecPc, "DirecPC"),
        (Network::Ricochet, "Ricochet"),
    ] {
        for (label, bulk) in [
            ("STP", Bulk::Stp(seeds_stp())),
            ("TCP SACK-NewReno", Bulk::Tcp(seeds_tcp(1460))),
            ("STP, RTT back-off", Bulk::Stp(stp_backoff.clone())),
        ] {
            v.push(job(
                group,
                label,
                Box::new(move |n| {
                    let mut fwd = Vec::new();
                    let mut rev = Vec::new();
                    let mut maxq = Vec::new();
                    let mut meanq = Vec::new();
                    let mut done = 0.0;
                    let mut events = 0;
                    for i in 0..n {
                        let r = run_bulk(net, &bulk, 5400 + u64::from(i), 900 * SEC)?;
                        fwd.push(r.goodput_bps / 1000.0);
                        rev.push(r.reverse_bps / 1000.0);
                        maxq.push(r.max_queue_s);
                        meanq.push(r.mean_queue_s);
                        done += f64::from(u8::from(r.completed));
                        events += r.events;
                    }
                    let mut m = Metrics::new();
                    m.insert("fwd_kbps".into(), Value::of(&fwd));
                    m.insert("rev_kbps".into(), Value::of(&rev));
                    m.insert("max_queue_s".into(), Value::of(&maxq));
                    m.insert("mean_queue_s".into(), Value::of(&meanq));
                    m.insert("completed".into(), Value::exact(done / f64::from(n)));
                    Ok((m, events))
                }),
            ));
        }
    }
    v
}

fn page_metrics(log: &HttpLog, pages: u32) -> Metrics {
    let load: Vec<f64> = log.pages.iter().map(|p| secs(p.load_ns)).collect();
    let mut m = Metrics::new();
    m.insert("page_s".into(), Value::of(&load));
    let done = log.pages.len().max(1) as f64;
    m.insert(
        "packets_per_page".into(),
        Value::exact((log.client_packets + log.server_packets) as f64 / done),
    );
    m.insert(
        "connections_per_page".into(),
        Value::exact(log.connections as f64 / done),
    );
    m.insert(
        "completed".into(),
        Value::exact(log.pages.len() as f64 / f64::from(pages.max(1))),
    );
    m
}

/// HTTP/1.0, HTTP/1.0 with 4 connections, P-HTTP, pipelining and 6 parallel persistent
/// connections over GEO and LEO (the model's pages) and GEO with 30-object pages.
fn versions_jobs() -> Vec<Job> {
    let mut v = Vec::new();
    for (group, rtt, pages, scale) in [
        ("GEO, model pages", 600 * MS, Pages::Model, 1),
        ("LEO, model pages", 80 * MS, Pages::Model, 1),
        ("GEO, 30-object pages", 600 * MS, Pages::Objects(30), 10),
    ] {
        for version in HttpVersion::COMPARED {
            v.push(job(
                group,
                &version.label(),
                Box::new(move |n| {
                    let n = (n / scale).max(2);
                    let w = Workload {
                        version,
                        pages,
                        think: Think::Fixed(SEC),
                        max_pages: n,
                    };
                    let (log, ev) = run_http(
                        PathSpec::lab(rtt),
                        Transport::Tcp(seeds_tcp(1460)),
                        w,
                        77,
                        u64::from(n) * 600 * SEC,
                    )?;
                    Ok((page_metrics(&log, n), ev))
                }),
            ));
        }
    }
    v
}

/// The thin return channel's rates (b/s) and row groups; the last is the unconstrained
/// reference each row's `slowdown` is taken against.
const THIN_RETURNS: [(u64, &str); 5] = [
    (1000, "1 kb/s"),
    (2400, "2.4 kb/s"),
    (4800, "4.8 kb/s"),
    (9600, "9.6 kb/s"),
    (1_000_000, "1 Mb/s ref."),
];

/// Browsing over GEO (1.5 Mb/s forward, 600 ms RTT) with return channels of 1, 2.4, 4.8 and
/// 9.6 kb/s and an unconstrained 1 Mb/s reference: pages with the sizes the seeds' figures
/// imply (`Pages::SeedsImplied`), P-HTTP, over STP (thesis profile and our default) and TCP
/// SACK-NewReno; at 1 kb/s and the reference also HTTP/1.0 with 4 connections (the browsers
/// of the seeds' time). Per row: page time, return bytes and packets per page, split into the
/// requests' HTTP bytes and what the transport adds (headers, ACKs or STATs, handshakes).
fn thin_return_jobs() -> Vec<Job> {
    let stp_thesis = {
        let mut c = seeds_stp();
        stp::Profile::Thesis.apply_to(&mut c.connection);
        c
    };
    let transports = [
        (
            "STP (thesis profile)",
            Transport::Stp {
                config: stp_thesis,
                framing: Framing::Ip,
            },
        ),
        (
            "STP",
            Transport::Stp {
                config: seeds_stp(),
                framing: Framing::Ip,
            },
        ),
        ("TCP SACK-NewReno", Transport::Tcp(seeds_tcp(1460))),
    ];
    let mut cases: Vec<(String, u64, HttpVersion)> = THIN_RETURNS
        .iter()
        .map(|&(bps, g)| (g.to_string(), bps, HttpVersion::Persistent))
        .collect();
    for &(bps, g) in [THIN_RETURNS[0], THIN_RETURNS[4]].iter() {
        cases.push((
            format!("{g}, HTTP/1.0 x4"),
            bps,
            HttpVersion::Http10 { parallel: 4 },
        ));
    }
    let mut v = Vec::new();
    for (group, up_bps, version) in cases {
        for (label, transport) in &transports {
            let transport = transport.clone();
            v.push(job(
                &group,
                label,
                Box::new(move |n| {
                    let path = PathSpec {
                        down_bps: 1_500_000,
                        up_bps,
                        one_way_ns: 300 * MS,
                        down_queue_packets: 100,
                        up_queue_packets: 20,
                    };
                    let w = Workload {
                        version,
                        pages: Pages::SeedsImplied { objects: None },
                        think: Think::Fixed(SEC),
                        max_pages: n,
                    };
                    let (log, ev) =
                        run_http(path, transport.clone(), w, 1001, u64::from(n) * 300 * SEC)?;
                    Ok((thin_return_metrics(&log, n, up_bps), ev))
                }),
            ));
        }
    }
    v
}

/// Page time and what the return channel carries per page.
fn thin_return_metrics(log: &HttpLog, n: u32, up_bps: u64) -> Metrics {
    let mut m = page_metrics(log, n);
    let pages = log.pages.len().max(1) as f64;
    let load_s: f64 = log.pages.iter().map(|p| secs(p.load_ns)).sum();
    m.insert(
        "reverse_kbps_while_loading".into(),
        Value::exact(log.client_bytes as f64 * 8.0 / load_s.max(1e-9) / 1000.0),
    );
    // The part no transport can remove: the requests' own HTTP bytes at the return rate.
    let floors: Vec<f64> = log
        .pages
        .iter()
        .map(|p| p.request_bytes as f64 * 8.0 / up_bps as f64)
        .collect();
    m.insert("request_floor_s".into(), Value::of(&floors));
    let req: u64 = log.pages.iter().map(|p| p.request_bytes).sum();
    let per_page = |x: u64| Value::exact(x as f64 / pages);
    m.insert("return_bytes_per_page".into(), per_page(log.client_bytes));
    m.insert("request_bytes_per_page".into(), per_page(req));
    // Headers of the request packets, ACKs or STATs, handshake and close.
    m.insert(
        "transport_return_bytes_per_page".into(),
        per_page(log.client_bytes.saturating_sub(req)),
    );
    m.insert(
        "return_packets_per_page".into(),
        per_page(log.client_packets),
    );
    let objects: u64 = log.pages.iter().map(|p| u64::from(p.objects)).sum();
    m.insert("objects_per_page".into(), per_page(objects));
    let bytes: u64 = log.pages.iter().map(|p| p.bytes).sum();
    m.insert("reply_bytes_per_page".into(), per_page(bytes));
    m.insert(
        "return_request_share".into(),
        Value::exact(req as f64 / log.client_bytes.max(1) as f64),
    );
    m
}

/// Each thin-return row's page time over the same transport and HTTP version's page time with
/// the unconstrained reference return (`slowdown`; 1 for the reference rows themselves).
fn add_slowdowns(rows: &mut [Row]) {
    const HTTP10: &str = ", HTTP/1.0 x4";
    let reference = THIN_RETURNS[4].1;
    let base_of = |group: &str, label: &str, rows: &[Row]| -> Option<f64> {
        let want = if group.ends_with(HTTP10) {
            format!("{reference}{HTTP10}")
        } else {
            reference.to_string()
        };
        let r = rows.iter().find(|r| r.group == want && r.label == label)?;
        Some(r.metrics.get("page_s")?.mean)
    };
    let bases: Vec<Option<f64>> = rows
        .iter()
        .map(|r| base_of(&r.group, &r.label, rows))
        .collect();
    for (row, base) in rows.iter_mut().zip(bases) {
        let (Some(base), Some(p)) = (base, row.metrics.get("page_s").copied()) else {
            continue;
        };
        row.metrics.insert(
            "slowdown".into(),
            Value {
                mean: p.mean / base,
                ci95: p.ci95 / base,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_claims() {
        let v = Value::of(&[1.0, 2.0, 3.0]);
        assert_eq!(v.mean, 2.0);
        assert!((v.ci95 - 1.96 * (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
        let rows = vec![Row {
            name: "a / b".into(),
            group: "a".into(),
            label: "b".into(),
            metrics: [("x".to_string(), Value::exact(3.0))].into_iter().collect(),
        }];
        let c = WebClaim {
            text: "t".into(),
            lhs: WebOperand {
                row: Some("a / b".into()),
                metric: Some("x".into()),
                value: None,
            },
            op: ">=".into(),
            factor: 2.0,
            rhs: WebOperand {
                row: None,
                metric: None,
                value: Some(1.5),
            },
        };
        let r = check(&c, &rows).unwrap();
        assert!(r.holds);
        assert_eq!(r.shown, "a / b 3.0 ≥ 2 × 1.5");
        let bad = WebClaim {
            lhs: WebOperand {
                row: Some("nope".into()),
                metric: Some("x".into()),
                value: None,
            },
            ..c
        };
        assert!(check(&bad, &rows).unwrap_err().to_string().contains("nope"));
    }

    #[test]
    fn slowdown_is_taken_against_the_same_transport_and_version() {
        let row = |group: &str, label: &str, page: f64| Row {
            name: format!("{group} / {label}"),
            group: group.into(),
            label: label.into(),
            metrics: [("page_s".to_string(), Value::exact(page))]
                .into_iter()
                .collect(),
        };
        let mut rows = vec![
            row("1 kb/s", "STP", 12.0),
            row("1 kb/s", "TCP", 18.0),
            row("1 Mb/s ref.", "STP", 3.0),
            row("1 Mb/s ref.", "TCP", 4.0),
            row("1 kb/s, HTTP/1.0 x4", "STP", 10.0),
            row("1 Mb/s ref., HTTP/1.0 x4", "STP", 2.0),
        ];
        add_slowdowns(&mut rows);
        let s = |i: usize| rows[i].metrics["slowdown"].mean;
        assert_eq!(s(0), 4.0);
        assert_eq!(s(1), 4.5);
        assert_eq!(s(2), 1.0);
        assert_eq!(s(4), 5.0);
        assert_eq!(s(5), 1.0);
    }
}
