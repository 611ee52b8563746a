//! The Grafana dashboard `deploy/grafana/satstp-dashboard.json` queries only metrics the
//! daemons export: every `satstp_*` name in its PromQL expressions is a family of the
//! Prometheus exposition of both sides, every label value it selects on occurs in that family's
//! samples, and every label it groups by is one of the family's labels (or one Prometheus adds
//! when scraping). It also covers what the operators asked for (throughput per direction,
//! connections, refusals by reason, POLL/STAT/USTAT rates, retransmissions, srtt, cwnd, auth
//! failures).

use crate::metrics::{Metrics, Side};
use std::collections::{BTreeMap, BTreeSet};

const DASHBOARD: &str = include_str!("../../../../deploy/grafana/satstp-dashboard.json");
/// Labels Prometheus attaches to every scraped series.
const SCRAPE_LABELS: [&str; 2] = ["instance", "job"];

/// Every PromQL expression of the dashboard: panel targets (rows included) and variable queries.
fn expressions(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if s.contains("satstp_") => {
                        out.push(s.clone())
                    }
                    _ => expressions(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| expressions(x, out)),
        _ => {}
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Families of an exposition: name -> the label sets of its samples.
fn families(text: &str) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or_default();
            out.entry(name.to_string()).or_default();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, rest) = line.split_once('{').expect("samples have labels");
        let labels = rest.rsplit_once('}').expect("closed label set").0;
        let set = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        out.entry(name.to_string()).or_default().push(set);
    }
    out
}

/// A metric used in an expression and the label matchers right after it.
struct Use {
    metric: String,
    matchers: Vec<(String, String, String)>, // label, operator, value
}

/// The metric selectors of an expression, and the labels of its `by (...)` clauses.
fn parse(expr: &str) -> (Vec<Use>, Vec<String>) {
    let mut uses = Vec::new();
    let mut by = Vec::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !is_name_char(chars[i]) || (i > 0 && is_name_char(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_name_char(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if word == "by" && chars.get(j) == Some(&'(') {
            let end = expr[j..].find(')').map_or(expr.len(), |e| j + e);
            by.extend(
                expr[j + 1..end]
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty()),
            );
            i = end;
        } else if word.starts_with("satstp_") {
            let mut matchers = Vec::new();
            if chars.get(i) == Some(&'{') {
                let end = expr[i..].find('}').map_or(expr.len(), |e| i + e);
                for m in expr[i + 1..end].split(',') {
                    let m = m.trim();
                    let op_at = m.find(['=', '!']).expect("a matcher has an operator");
                    let label = m[..op_at].trim().to_string();
                    let rest = &m[op_at..];
                    let op_len = if rest.starts_with("=~")
                        || rest.starts_with("!=")
                        || rest.starts_with("!~")
                    {
                        2
                    } else {
                        1
                    };
                    let value = rest[op_len..].trim().trim_matches('"').to_string();
                    matchers.push((label, rest[..op_len].to_string(), value));
                }
                i = end;
            }
            uses.push(Use {
                metric: word,
                matchers,
            });
        }
    }
    (uses, by)
}

#[test]
fn every_metric_the_dashboard_queries_is_exported_under_that_name() {
    let dash: serde_json::Value = serde_json::from_str(DASHBOARD).expect("dashboard is JSON");
    let mut exprs = Vec::new();
    expressions(&dash, &mut exprs);
    assert!(exprs.len() >= 20, "expressions found: {exprs:?}");

    for side in [Side::Terminal, Side::Gateway] {
        let fams = families(&Metrics::new(side).prometheus_text());
        let mut used = BTreeSet::new();
        for e in &exprs {
            let (uses, by) = parse(e);
            assert!(!uses.is_empty(), "no satstp metric in {e}");
            for u in &uses {
                let samples = fams.get(&u.metric).unwrap_or_else(|| {
                    panic!(
                        "{}: the dashboard queries {} in {e}",
                        side.as_str(),
                        u.metric
                    )
                });
                used.insert(u.metric.clone());
                for (label, op, value) in &u.matchers {
                    if SCRAPE_LABELS.contains(&label.as_str()) || value.starts_with('$') {
                        continue;
                    }
                    if label == "side" {
                        continue; // every sample carries it; checked by the "$side" variable
                    }
                    assert!(op == "=" || op == "=~", "{e}: matcher {label}{op}");
                    for v in value.split('|') {
                        assert!(
                            samples
                                .iter()
                                .any(|s| s.get(label).map(String::as_str) == Some(v)),
                            "{}: {} has no sample with {label}=\"{v}\" (in {e})",
                            side.as_str(),
                            u.metric
                        );
                    }
                }
                for label in &by {
                    if SCRAPE_LABELS.contains(&label.as_str()) {
                        continue;
                    }
                    assert!(
                        samples.iter().all(|s| s.contains_key(label)),
                        "{}: {e} groups by {label}, which {} does not carry",
                        side.as_str(),
                        u.metric
                    );
                }
            }
        }
        // What the dashboard is for.
        for m in [
            "satstp_tcp_bytes_total",
            "satstp_hop_bytes_total",
            "satstp_connections_active",
            "satstp_connections_refused_total",
            "satstp_stp_packets_sent_total",
            "satstp_stp_retransmissions_total",
            "satstp_stp_srtt_seconds",
            "satstp_stp_cwnd_bytes",
            "satstp_auth_failures_total",
        ] {
            assert!(used.contains(m), "the dashboard does not show {m}");
        }
    }
    assert!(
        exprs
            .iter()
            .any(|e| e.contains("type=~\"poll|stat|ustat\"")),
        "POLL/STAT/USTAT rates"
    );
}

#[test]
fn the_checker_catches_a_misspelt_metric() {
    let fams = families(&Metrics::new(Side::Gateway).prometheus_text());
    let (uses, _) = parse("rate(satstp_tcp_byte_total{direction=\"up\"}[5m])");
    assert_eq!(uses.len(), 1);
    assert!(!fams.contains_key(&uses[0].metric));
    let (uses, by) = parse("sum by (side, reason) (rate(satstp_connections_refused_total{reason=~\"policy|memory\"}[1m]))");
    assert_eq!(uses[0].metric, "satstp_connections_refused_total");
    assert_eq!(
        uses[0].matchers[0],
        ("reason".into(), "=~".into(), "policy|memory".into())
    );
    assert_eq!(by, vec!["side", "reason"]);
}
