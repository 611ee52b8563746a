//! What `satstp bench link` reports: the settings, the table's lines, the JSON results and the
//! browser waterfalls (the binary prints them and draws the charts).

use super::system::{namespace_sysctls, HostSysctls};
use super::{
    spread, BrowserSample, Contender, LinkOptions, Outcome, Plan, Sample, BROWSER_CONNECTIONS,
    METRICS, MTU, TCP_MSS,
};
use linkem::Profile;
use serde_json::{json, Value};

/// The run's settings as the JSON report gives them.
pub(super) fn settings_json(
    args: &LinkOptions,
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
        "browser_http": plan.http.to_string(),
        "tls": plan.tls.as_ref().map(|_| json!({
            "version": "TLS 1.3 (rustls, ring)",
            "origin": "198.18.0.2:443 in the gateway namespace, certificate from a CA generated for this run",
            "browser_trust": "--ignore-certificate-errors-spki-list with the leaf key's SHA-256 (no trust store changed)",
            "resumption": args.tls_resumption,
            "early_data": args.tls_early_data,
        })),
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
pub fn payload_capacity(down_bps: u64) -> f64 {
    down_bps as f64 * TCP_MSS as f64 / MTU as f64
}

/// One contender's results: median, min and max of every metric, and every sample.
pub fn result_json(c: Contender, samples: &[Sample], errors: &[String], plan: &Plan) -> Value {
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
                if let Some(b) = &s.browser {
                    o.insert("browser".into(), browser_json(b));
                }
                o.insert(
                    "not_found_requests".into(),
                    json!({"count": s.not_found.count, "first": s.not_found.first}),
                );
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
        "download_bps" | "upload_bps" => format!("{v:.2}"),
        k if k.ends_with("_s") => format!("{v:.2}"),
        _ => format!("{v:.0}"),
    };
    match spread(&values) {
        None => "-".into(),
        Some((m, lo, hi)) if samples.len() == 1 || lo == hi => fmt(m),
        Some((m, lo, hi)) => format!("{} ({}–{})", fmt(m), fmt(lo), fmt(hi)),
    }
}

/// The table of the contenders' medians as printed, a line each (the first one empty), with
/// its legend and the runs' errors.
pub fn table_lines(plan: &Plan, outcomes: &[Outcome]) -> Vec<String> {
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
    let mut lines = vec![String::new()];
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
        lines.push(format!("  {}", line.join("  ").trim_end()));
    }
    lines.push(format!(
        "\n  median (min–max) over runs; uplink B/MB and pkt/MB: IP bytes and packets on the emulated uplink during the download per MB downloaded;\n  retrans B: bytes retransmitted by the download's sender; br. TLS / rounds / queue s: the browser load's critical path's TLS handshakes,\n  request round trips (request → first byte) and queueing for a connection; br. up B: IP bytes on the uplink during the browser load; payload capacity {:.2} Mb/s (downlink × {TCP_MSS}/{MTU})",
        payload_capacity(down_bps) / 1e6
    ));
    for (c, _, errors) in outcomes {
        for e in errors {
            lines.push(format!("  {c}: {e}"));
        }
    }
    lines
}

/// The head of the `--browser-waterfall` file.
pub fn waterfall_head(profile: Profile) -> String {
    let (_, _, rtt_ns) = profile.parameters();
    format!(
        "satstp bench link: browser waterfalls, profile {} (RTT {} ms); times in ms since the navigation started; * on the critical path\n\n",
        profile,
        rtt_ns / 1_000_000
    )
}

/// One browser load in the `--browser-waterfall` file: its figures, then the waterfall.
pub fn waterfall(contender: Contender, run: u32, b: &BrowserSample, profile: Profile) -> String {
    let (_, _, rtt_ns) = profile.parameters();
    let caught = b.quic_caught.map_or(String::new(), |n| {
        format!(
            " ({} over TCP after {n} QUIC packet(s) caught by the terminal's rule; a repeat visit)",
            b.load.protocol
        )
    });
    format!(
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
    )
}

/// One browser load: its figures, the critical path's parts (seconds) and the load average.
fn browser_json(b: &BrowserSample) -> Value {
    let path = b.critical_path.as_ref().map(|p| {
        json!({
            "requests": p.requests(),
            "fetches": p.steps.iter().map(|s| b.load.fetches[s.fetch].path.clone()).collect::<Vec<_>>(),
            "gap_s": p.gap_ms / 1e3,
            "queue_s": p.queue_ms / 1e3,
            "connect_s": p.connect_ms / 1e3,
            "tls_s": p.tls_ms / 1e3,
            "wait_s": p.wait_ms / 1e3,
            "receive_s": p.receive_ms / 1e3,
            "tail_s": p.tail_ms / 1e3,
        })
    });
    json!({
        "load_s": b.load.load.as_secs_f64(),
        "dom_content_loaded_s": b.load.dom_content_loaded.as_secs_f64(),
        "first_byte_s": b.load.first_byte.as_secs_f64(),
        "protocol": b.load.protocol,
        "loadavg": b.loadavg,
        "quic_packets_caught": b.quic_caught,
        "critical_path": path,
    })
}
