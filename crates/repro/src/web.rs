//! The short-transfer and web reproductions (family `Web`, names `web-*`): each is a data file
//! under `scenarios/reproduce/web/` run by `netsim::web::repro`; this writes its
//! `NAME.json`, `NAME.csv`, a plot and a section of `report.md` with the seeds' figures beside
//! ours and the claims checked.

use crate::plot::{ci_label, Chart, SeedPoint, Series, XAxis};
use crate::{write_file, Error, Result, Verdict};
use netsim::reproduce::format_metric as fmt;
use netsim::web::repro::{WebRepro, WebResult};
use std::fmt::Write as _;
use std::path::Path;

/// (file name, contents) of every web reproduction.
const FILES: [(&str, &str); 5] = [
    (
        "web-table4.2.toml",
        include_str!("../../../scenarios/reproduce/web/web-table4.2.toml"),
    ),
    (
        "web-table5.3.toml",
        include_str!("../../../scenarios/reproduce/web/web-table5.3.toml"),
    ),
    (
        "web-table5.4.toml",
        include_str!("../../../scenarios/reproduce/web/web-table5.4.toml"),
    ),
    (
        "web-http-versions.toml",
        include_str!("../../../scenarios/reproduce/web/web-http-versions.toml"),
    ),
    (
        "web-thin-return.toml",
        include_str!("../../../scenarios/reproduce/web/web-thin-return.toml"),
    ),
];

/// Every web reproduction, parsed.
pub(crate) fn all() -> Result<Vec<WebRepro>> {
    FILES
        .iter()
        .map(|(f, t)| {
            WebRepro::from_toml(t).map_err(|e| Error::Definition {
                file: f.to_string(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// Runs one web reproduction and writes its outputs to `out`.
pub(crate) fn run(r: &WebRepro, quick: bool, threads: usize, out: &Path) -> Result<Verdict> {
    let t0 = std::time::Instant::now();
    let res = r.run(quick, threads)?;
    write_outputs(out, r, &res, t0.elapsed().as_secs_f64(), quick)?;
    Ok(Verdict::of(&res.name, res.conclusion_holds, &res.claims))
}

/// The metrics plotted for each experiment: (metric, y label, title; None: the reproduction's).
fn plots(r: &WebRepro) -> Vec<(&'static str, &'static str, Option<&'static str>)> {
    match r.experiment.as_str() {
        "table5.4" => vec![
            ("fwd_kbps", "forward throughput (kb/s)", None),
            (
                "rev_kbps",
                "reverse channel (kb/s)",
                Some("Reverse-channel use of the file transfers over DirecPC and Ricochet"),
            ),
        ],
        "table5.3" => vec![
            ("latency_s", "mean latency per transfer (s)", None),
            (
                "packets",
                "packets per transfer (both directions)",
                Some("Packets per HTTP transfer at 600 ms RTT: TCP, T/TCP and STP"),
            ),
        ],
        "thin-return" => vec![
            ("page_s", "mean page load time (s)", None),
            (
                "return_bytes_per_page",
                "return-channel bytes per page (B)",
                Some("Return-channel bytes per page over GEO by return rate: STP and TCP"),
            ),
        ],
        "http-versions" => vec![("page_s", "mean page load time (s)", None)],
        _ => vec![("latency_s", "mean latency per transfer (s)", None)],
    }
}

/// What a row's error bar is the mean of: "95 % CI of the mean over N transfers" (the rows'
/// own counts where they record them).
fn bars_label(r: &WebRepro, res: &WebResult) -> String {
    let counts: Vec<u32> = res
        .rows
        .iter()
        .filter_map(|row| row.metrics.get("transfers"))
        .map(|v| v.mean.round() as u32)
        .collect();
    match r.experiment.as_str() {
        "table5.4" => ci_label(0.95, res.samples, res.samples, "files"),
        "http-versions" | "thin-return" => {
            format!("95 % CI of the mean over up to {} pages", res.samples)
        }
        _ if !counts.is_empty() => ci_label(
            0.95,
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
            "transfers",
        ),
        _ => format!("95 % CI of the mean over up to {} samples", res.samples),
    }
}

fn write_outputs(dir: &Path, r: &WebRepro, res: &WebResult, wall: f64, quick: bool) -> Result<()> {
    let rows: Vec<serde_json::Value> = res
        .rows
        .iter()
        .map(|row| {
            let seed: serde_json::Map<String, serde_json::Value> = row
                .metrics
                .keys()
                .filter_map(|m| r.seed(&row.name, m).map(|s| (m.clone(), s.value.into())))
                .collect();
            serde_json::json!({"name": row.name, "group": row.group, "label": row.label,
                "metrics": row.metrics, "seed": seed})
        })
        .collect();
    let json = serde_json::json!({
        "name": r.name, "title": r.title, "source": r.source, "quick": quick, "samples": res.samples,
        "wall_time_s": wall, "events": res.events, "conclusion": r.conclusion,
        "conclusion_holds": res.conclusion_holds, "claims": res.claims, "rows": rows, "note": r.note,
    });
    let p = dir.join(format!("{}.json", r.name));
    write_file(&p, serde_json::to_string_pretty(&json)?)?;

    let mut csv = String::from("row,metric,mean,ci95,seed\n");
    for row in &res.rows {
        for (m, v) in &row.metrics {
            let seed = r
                .seed(&row.name, m)
                .map_or(String::new(), |s| s.value.to_string());
            let _ = writeln!(csv, "\"{}\",{m},{},{},{seed}", row.name, v.mean, v.ci95);
        }
    }
    let p = dir.join(format!("{}.csv", r.name));
    write_file(&p, csv)?;

    // One bar group per row group, one series per row label; the seeds' figures as markers.
    let mut groups: Vec<String> = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    for row in &res.rows {
        if !groups.contains(&row.group) {
            groups.push(row.group.clone());
        }
        if !labels.contains(&row.label) {
            labels.push(row.label.clone());
        }
    }
    let bars = bars_label(r, res);
    let mut images = Vec::new();
    for (k, (pm, y_label, title)) in plots(r).into_iter().enumerate() {
        let at = |row: &netsim::web::repro::Row| -> Option<(usize, f64)> {
            Some((
                labels.iter().position(|l| l == &row.label)?,
                groups.iter().position(|g| g == &row.group)? as f64,
            ))
        };
        let chart = Chart {
            title: title.map_or_else(|| r.title.clone(), str::to_string),
            x_label: String::new(),
            y_label: y_label.into(),
            x_axis: XAxis::Categories(groups.clone()),
            series: labels
                .iter()
                .map(|l| Series {
                    name: l.clone(),
                    points: res
                        .rows
                        .iter()
                        .filter(|row| &row.label == l)
                        .filter_map(|row| {
                            let (_, x) = at(row)?;
                            let v = row.metrics.get(pm)?;
                            Some((x, v.mean, v.ci95))
                        })
                        .collect(),
                })
                .collect(),
            seeds: res
                .rows
                .iter()
                .filter_map(|row| {
                    let (series, x) = at(row)?;
                    let y = r.seed(&row.name, pm)?.value;
                    Some(SeedPoint { series, x, y })
                })
                .collect(),
            error_bars: Some(bars.clone()),
            ..Chart::default()
        };
        let name = if k == 0 {
            r.name.clone()
        } else {
            format!("{}-{}", r.name, k + 1)
        };
        chart.write(dir, &name)?;
        images.push(name);
    }

    let mut sec = String::new();
    let _ = writeln!(sec, "## {} — {}\n", r.name, r.title);
    let _ = writeln!(
        sec,
        "Source: {}. {} per row{}; wall time {wall:.1} s.\n",
        r.source,
        res.samples,
        if quick { " (--quick)" } else { "" }
    );
    for name in &images {
        let _ = writeln!(sec, "![{name}]({name}.png)\n");
    }
    let _ = writeln!(
        sec,
        "| row | metric | seed | ours (mean ± 95% CI) | ratio |\n|---|---|---|---|---|"
    );
    for row in &res.rows {
        for (m, v) in &row.metrics {
            if m == "transfers" {
                continue;
            }
            let seed = r.seed(&row.name, m);
            let (sv, ratio) = match seed {
                Some(s) => (fmt(m, s.value), format!("{:.2}", v.mean / s.value)),
                None => ("—".into(), "—".into()),
            };
            let ours = if v.ci95 > 0.0 {
                format!("{} ± {}", fmt(m, v.mean), fmt(m, v.ci95))
            } else {
                fmt(m, v.mean)
            };
            let _ = writeln!(sec, "| {} | {m} | {sv} | {ours} | {ratio} |", row.name);
        }
    }
    crate::report::write_verdict(
        &mut sec,
        &r.conclusion,
        &res.claims,
        res.conclusion_holds,
        r.note.as_deref(),
    );
    crate::report::update_report(&dir.join("report.md"), &r.name, &sec)
}
