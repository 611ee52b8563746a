//! The short-transfer and web reproductions of `satstp reproduce` (names `web-*`): each is a
//! data file under `scenarios/reproduce/web/` run by `netsim::web_repro`; this writes its
//! `NAME.json`, `NAME.csv`, a plot and a section of `report.md` with the seeds' figures beside
//! ours and the claims checked.

use crate::plot::{Chart, Series, XAxis};
use anyhow::{Context, Result};
use netsim::web_repro::{WebRepro, WebResult};
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
pub fn all() -> Result<Vec<WebRepro>> {
    FILES
        .iter()
        .map(|(f, t)| WebRepro::from_toml(t).with_context(|| format!("reproduction {f}")))
        .collect()
}

pub fn list() -> Result<()> {
    for r in all()? {
        outln!("{:<20} {}  [{}]", r.name, r.title, r.source);
    }
    Ok(())
}

/// Runs the web reproductions among `selected` (all when empty).
pub fn run(selected: &[String], quick: bool, out: &Path) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for r in all()? {
        if !selected.is_empty() && !selected.contains(&r.name) {
            continue;
        }
        crate::progress::note(&format!("{}: {}", r.name, r.title));
        let t0 = std::time::Instant::now();
        let res = r
            .run(quick, threads)
            .with_context(|| format!("reproduction {}", r.name))?;
        let wall = t0.elapsed().as_secs_f64();
        write_outputs(out, &r, &res, wall, quick)?;
        crate::repro_report::record_web_verdict(
            &out.join("verdicts.json"),
            &res.name,
            res.conclusion_holds,
            res.claims.iter().map(|c| c.holds).collect(),
        )?;
        crate::progress::note(&format!(
            "  done in {wall:.1} s: seeds' conclusion {}",
            if res.conclusion_holds {
                "holds"
            } else {
                "does NOT hold"
            }
        ));
    }
    Ok(())
}

fn fmt(metric: &str, v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    if metric.ends_with("_s") {
        format!("{v:.2} s")
    } else if metric.ends_with("_kbps") {
        format!("{v:.1} kb/s")
    } else if metric == "completed" || metric == "model_left_out" || metric.ends_with("_share") {
        format!("{:.0} %", v * 100.0)
    } else {
        format!("{v:.1}")
    }
}

/// The metric plotted for each experiment.
fn plot_metric(r: &WebRepro) -> (&'static str, &'static str) {
    match r.experiment.as_str() {
        "table5.4" => ("fwd_kbps", "forward throughput (kb/s)"),
        "http-versions" | "thin-return" => ("page_s", "mean page load time (s)"),
        _ => ("latency_s", "mean latency per transfer (s)"),
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
    std::fs::write(&p, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("cannot write {}", p.display()))?;

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
    std::fs::write(&p, csv).with_context(|| format!("cannot write {}", p.display()))?;

    // One bar group per row group, one series per row label.
    let (pm, y_label) = plot_metric(r);
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
    let chart = Chart {
        title: r.title.clone(),
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
                        let x = groups.iter().position(|g| g == &row.group)? as f64;
                        let v = row.metrics.get(pm)?;
                        Some((x, v.mean, v.ci95))
                    })
                    .collect(),
            })
            .collect(),
    };
    chart.write(dir, &r.name)?;

    let mut sec = String::new();
    let _ = writeln!(sec, "## {} — {}\n", r.name, r.title);
    let _ = writeln!(
        sec,
        "Source: {}. {} per row{}; wall time {wall:.1} s.\n",
        r.source,
        res.samples,
        if quick { " (--quick)" } else { "" }
    );
    let _ = writeln!(sec, "![{}]({}.png)\n", r.name, r.name);
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
    crate::repro_report::write_verdict(
        &mut sec,
        &r.conclusion,
        &res.claims,
        res.conclusion_holds,
        r.note.as_deref(),
    );
    crate::repro_report::update_report(&dir.join("report.md"), &r.name, &sec)
}
