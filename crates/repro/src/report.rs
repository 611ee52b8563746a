//! The report-writing side of the reproductions, shared by the families (`web`, `leo`, the
//! simulator's here) and the merge of shards (`shard`): the embedded simulator reproductions,
//! each one's `NAME.json`/`NAME.csv`/plots, its section of `report.md` and its line of
//! `verdicts.json`. It calls none of those modules back.

use crate::plot::{ci_label, Chart, SeedPoint, Series, XAxis};
use crate::{write_file, Error, Result, Verdict};
use netsim::reproduce::{format_metric as fmt_metric, ReproResult, Reproduction};
use netsim::scenario::Replication;
use std::fmt::Write as _;
use std::path::Path;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/reproductions.rs"));
}

fn file(name: &str) -> Option<&'static str> {
    embedded::FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

/// Every reproduction, parsed, with its template text.
pub(crate) fn all() -> Result<Vec<(Reproduction, &'static str)>> {
    let mut v = Vec::new();
    for (fname, text) in embedded::FILES {
        if fname.ends_with(".template.toml") {
            continue;
        }
        let r = Reproduction::from_toml(text).map_err(|e| Error::Definition {
            file: fname.to_string(),
            reason: e.to_string(),
        })?;
        let t = file(&r.template).ok_or_else(|| Error::Definition {
            file: fname.to_string(),
            reason: format!("no template {}", r.template),
        })?;
        v.push((r, t));
    }
    Ok(v)
}

fn seed_value(r: &Reproduction, series: &str, point: &str, m: &str) -> Option<(f64, String)> {
    r.seeds
        .iter()
        .find(|s| s.series == series && s.point == point && s.metric == m && s.flow.is_none())
        .map(|s| (s.value, s.source.clone()))
}

const METRICS: [&str; 6] = [
    "goodput_bps",
    "fwd_efficiency",
    "reverse_bps",
    "completion_s",
    "fairness",
    "utilization",
];

pub(crate) fn write_outputs(
    dir: &Path,
    r: &Reproduction,
    res: &ReproResult,
    wall_s: f64,
    quick: bool,
) -> Result<()> {
    // JSON: the flows of every case, with the seeds' values beside ours.
    let flows: Vec<serde_json::Value> = res
        .cases
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(&c.flow).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("name".into(), format!("{} @ {}", c.series, c.point).into());
                o.insert("series".into(), c.series.clone().into());
                o.insert("point".into(), c.point.clone().into());
                o.insert("x".into(), c.x.into());
                o.insert("runs".into(), c.runs.into());
                if c.flows.len() > 1 {
                    let all: serde_json::Map<String, serde_json::Value> = c
                        .flows
                        .iter()
                        .map(|f| (f.name.clone(), f.goodput_bps.mean.into()))
                        .collect();
                    o.insert("goodput_bps_of_flows".into(), all.into());
                }
                for (k, st) in [
                    ("fairness", c.fairness),
                    ("utilization", c.utilization),
                    ("fair_share_deviation", c.fair_share_deviation),
                ] {
                    if let Some(st) = st {
                        o.insert(k.into(), serde_json::to_value(st).unwrap_or_default());
                    }
                }
                let mut seed = serde_json::Map::new();
                for m in METRICS {
                    if let Some((val, _)) = seed_value(r, &c.series, &c.point, m) {
                        seed.insert(m.into(), val.into());
                    }
                }
                if !seed.is_empty() {
                    o.insert("seed".into(), seed.into());
                }
            }
            v
        })
        .collect();
    let json = serde_json::json!({
        "name": r.name, "title": r.title, "source": r.source, "runs": res.runs, "quick": quick,
        "wall_time_s": wall_s, "events": res.events, "conclusion": r.conclusion,
        "conclusion_holds": res.conclusion_holds, "claims": res.claims, "flows": flows,
        "confidence": res.confidence, "note": r.note, "replication": res.replication,
    });
    let p = dir.join(format!("{}.json", r.name));
    write_file(&p, serde_json::to_string_pretty(&json)?)?;

    // CSV.
    let mut csv = String::from("series,point,x,goodput_bps,goodput_ci95,fwd_efficiency,fwd_efficiency_ci95,reverse_bps,reverse_ci95,completion_s,completion_ci95\n");
    for c in &res.cases {
        let f = &c.flow;
        let (cm, cc) = f.completion_s.map_or((String::new(), String::new()), |s| {
            (s.mean.to_string(), s.ci95.to_string())
        });
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{}",
            c.series,
            c.point,
            c.x,
            f.goodput_bps.mean,
            f.goodput_bps.ci95,
            f.fwd_efficiency.mean,
            f.fwd_efficiency.ci95,
            f.reverse_bps.mean,
            f.reverse_bps.ci95,
            cm,
            cc
        );
    }
    let p = dir.join(format!("{}.csv", r.name));
    write_file(&p, csv)?;

    // Plots: ours with error bars, the seeds' figures as their own markers.
    let axis = match r.x_axis.as_str() {
        "log" => XAxis::Log,
        "categories" => XAxis::Categories(r.points.iter().map(|p| p.label.clone()).collect()),
        _ => XAxis::Linear,
    };
    // Where a point (by label) sits on the x axis: its category's index, or its x.
    let point_x = |label: &str| -> Option<f64> {
        let k = r.points.iter().position(|p| p.label == label)?;
        if matches!(axis, XAxis::Categories(_)) {
            Some(k as f64)
        } else {
            r.points.get(k).map(|p| p.x)
        }
    };
    let least = res.cases.iter().map(|c| c.runs).min().unwrap_or(0);
    let bars = ci_label(res.confidence, least, res.runs, "runs");
    let chart = |m: &str, title: &str, y_label: &str, scale: f64| Chart {
        title: title.to_string(),
        x_label: r.x_label.clone(),
        y_label: y_label.to_string(),
        x_axis: axis.clone(),
        series: r
            .series
            .iter()
            .map(|s| Series {
                name: s.name.clone(),
                points: res
                    .cases
                    .iter()
                    .filter(|c| c.series == s.name)
                    .enumerate()
                    .map(|(i, c)| {
                        let x = if matches!(axis, XAxis::Categories(_)) {
                            i as f64
                        } else {
                            c.x
                        };
                        let st = c.metric(m);
                        (
                            x,
                            st.map_or(f64::NAN, |v| v.mean / scale),
                            st.map_or(0.0, |v| v.ci / scale),
                        )
                    })
                    .collect(),
            })
            .collect(),
        seeds: r
            .seeds
            .iter()
            .filter(|f| f.metric == m && f.flow.is_none())
            .filter_map(|f| {
                Some(SeedPoint {
                    series: r.series.iter().position(|s| s.name == f.series)?,
                    x: point_x(&f.point)?,
                    y: f.value / scale,
                })
            })
            .collect(),
        seed_levels: Vec::new(),
        error_bars: Some(bars.clone()),
        y_bounds: bounds(m, scale),
    };
    chart(
        &r.plot_metric,
        r.plot_title.as_deref().unwrap_or(&r.title),
        &r.y_label,
        r.plot_scale,
    )
    .write(dir, &r.name)?;
    if let Some(m2) = &r.plot2_metric {
        let scale = if m2.ends_with("_bps") { 1000.0 } else { 1.0 };
        let y2 = r.y2_label.as_deref().unwrap_or(m2);
        let title = r
            .plot2_title
            .clone()
            .unwrap_or_else(|| format!("{}: {y2}", r.name));
        chart(m2, &title, y2, scale).write(dir, &format!("{}-2", r.name))?;
    }

    // Report section.
    let mut sec = String::new();
    let _ = writeln!(sec, "## {} — {}\n", r.name, r.title);
    let replications = match res.replication {
        Replication::Fixed { runs } => format!("{runs} replications"),
        Replication::Until {
            percent, max_runs, ..
        } => {
            let least = res.cases.iter().map(|c| c.runs).min().unwrap_or(0);
            format!(
                "replicated until every flow's standard error was ≤ {percent} % of its mean \
                 (cap {max_runs}): {least}–{} replications per case",
                res.runs
            )
        }
    };
    let _ = writeln!(
        sec,
        "Source: {}. {replications}{}; wall time {wall_s:.1} s.\n",
        r.source,
        if quick { " (--quick)" } else { "" }
    );
    let _ = writeln!(sec, "![{}]({}.png)\n", r.name, r.name);
    if r.plot2_metric.is_some() {
        let _ = writeln!(sec, "![{}-2]({}-2.png)\n", r.name, r.name);
    }
    let _ = writeln!(
        sec,
        "| series | point | metric | seed | ours (mean ± {:.0}% CI) | ratio |\n|---|---|---|---|---|---|",
        res.confidence * 100.0
    );
    for c in &res.cases {
        for m in METRICS {
            let Some(ours) = c.metric(m) else {
                continue;
            };
            let seed = seed_value(r, &c.series, &c.point, m);
            if seed.is_none() && m != r.plot_metric.as_str() && Some(m) != r.plot2_metric.as_deref()
            {
                continue;
            }
            let (sv, ratio) = match &seed {
                Some((v, _)) => (fmt_metric(m, *v), format!("{:.2}", ours.mean / v)),
                None => ("—".into(), "—".into()),
            };
            let _ = writeln!(
                sec,
                "| {} | {} | {m} | {sv} | {} ± {} | {ratio} |",
                c.series,
                c.point,
                fmt_metric(m, ours.mean),
                fmt_metric(m, ours.ci)
            );
        }
    }
    // The seeds' figures for other flows of a case (e.g. every flow of thesis Table 4.1).
    for sf in r.seeds.iter().filter(|s| s.flow.is_some()) {
        let flow = sf.flow.as_deref().unwrap_or_default();
        let Some(c) = res
            .cases
            .iter()
            .find(|c| c.series == sf.series && c.point == sf.point)
        else {
            continue;
        };
        let Some(ours) = c.flow_metric(Some(flow), &sf.metric) else {
            continue;
        };
        let _ = writeln!(
            sec,
            "| {} | {} | {} of {flow} | {} | {} ± {} | {:.2} |",
            c.series,
            c.point,
            sf.metric,
            fmt_metric(&sf.metric, sf.value),
            fmt_metric(&sf.metric, ours.mean),
            fmt_metric(&sf.metric, ours.ci),
            ours.mean / sf.value
        );
    }
    write_verdict(
        &mut sec,
        &r.conclusion,
        &res.claims,
        res.conclusion_holds,
        r.note.as_deref(),
    );
    update_report(&dir.join("report.md"), &r.name, &sec)
}

/// Adds (or replaces) a reproduction's verdicts in `path`: name → {conclusion_holds, claims:
/// [bool per claim]}, the file a quick run is compared with (`full-verdicts.json`).
pub(crate) fn record_verdict(path: &Path, v: &Verdict) -> Result<()> {
    let mut all: serde_json::Map<String, serde_json::Value> = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    all.insert(
        v.name.clone(),
        serde_json::json!({ "conclusion_holds": v.conclusion_holds, "claims": v.claims }),
    );
    write_file(path, serde_json::to_string_pretty(&all)? + "\n")
}

/// The values `metric` (plotted divided by `scale`) can physically take: fractions lie in
/// [0, 1], everything else the reports plot (rates, times, counts) is at least 0.
fn bounds(metric: &str, scale: f64) -> (f64, f64) {
    match metric {
        "fwd_efficiency" | "fairness" | "utilization" => (0.0, 1.0 / scale),
        _ => (0.0, f64::INFINITY),
    }
}

/// Replaces (or appends) the section of `name` in the report, keeping the others.
pub(crate) fn update_report(path: &Path, name: &str, section: &str) -> Result<()> {
    let begin = format!("<!-- begin {name} -->");
    let end = format!("<!-- end {name} -->");
    let mut text = std::fs::read_to_string(path).unwrap_or_else(|_| {
        "# satstp reproductions\n\nEach section sets the seeds' figures beside ours. Generated by `satstp reproduce`.\n\n".to_string()
    });
    let block = format!("{begin}\n{section}{end}\n");
    if let (Some(a), Some(b)) = (text.find(&begin), text.find(&end)) {
        if a < b {
            text.replace_range(a..b + end.len() + 1.min(text.len() - b - end.len()), &block);
        } else {
            text.push_str(&block);
        }
    } else {
        text.push_str(&block);
    }
    write_file(path, text)
}

/// The section of `name` in a report's text, as `update_report` was given it.
pub(crate) fn section(text: &str, name: &str) -> Option<String> {
    let begin = format!("<!-- begin {name} -->\n");
    let end = format!("<!-- end {name} -->");
    let a = text.find(&begin)? + begin.len();
    let b = a + text.get(a..)?.find(&end)?;
    text.get(a..b).map(str::to_string)
}

/// Appended to a claim that holds by less than its difference's 95 % interval
/// ([`netsim::reproduce::ClaimResult::close`]); [`summarize`] counts these.
pub(crate) const CLOSE: &str = " (a tie: the difference is within its 95 % interval)";

/// The counts over every section of a report: reproductions, whose conclusion holds, claims
/// checked, holding, and holding only as ties ([`CLOSE`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub reproductions: usize,
    pub conclusions_hold: usize,
    pub claims: usize,
    pub claims_hold: usize,
    pub claims_tie: usize,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = |n: usize| 100.0 * n as f64 / self.claims.max(1) as f64;
        write!(
            f,
            "{} reproductions, the seeds' conclusion holds in {}; {} of {} checked claims hold \
             ({:.1} %), {} of them by less than the difference's 95 % interval (ties); {} hold clearly \
             ({:.1} %)",
            self.reproductions,
            self.conclusions_hold,
            self.claims_hold,
            self.claims,
            pct(self.claims_hold),
            self.claims_tie,
            self.claims_hold - self.claims_tie,
            pct(self.claims_hold - self.claims_tie),
        )
    }
}

/// Counts the report's sections and claims (as `write_verdict` and the LEO sections write them)
/// and writes the tally at the report's top, replacing an earlier one: it always describes the
/// sections the file holds, whichever runs wrote them.
pub fn summarize(path: &Path) -> Result<Tally> {
    const BEGIN: &str = "<!-- begin summary -->\n";
    const END: &str = "<!-- end summary -->\n";
    let mut text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) {
        if a < b {
            text.replace_range(a..b + END.len(), "");
        }
    }
    let mut t = Tally::default();
    for line in text.lines() {
        if line.starts_with("<!-- begin ") {
            t.reproductions += 1;
        } else if line == "**The seeds' qualitative conclusion holds in our reproduction.**" {
            t.conclusions_hold += 1;
        } else if line.starts_with("- [x] ") {
            t.claims += 1;
            t.claims_hold += 1;
            t.claims_tie += usize::from(line.ends_with(CLOSE));
        } else if line.starts_with("- [ ] ") {
            t.claims += 1;
        }
    }
    let block = format!("{BEGIN}**Summary:** {t}.\n{END}\n");
    let at = text.find("<!-- begin ").unwrap_or(text.len());
    text.insert_str(at, &block);
    write_file(path, text)?;
    Ok(t)
}

/// The report's closing lines of one reproduction: the seeds' conclusion, each claim checked or
/// not with both sides' values, the verdict, and the note on why ours differs.
pub(crate) fn write_verdict(
    sec: &mut String,
    conclusion: &str,
    claims: &[netsim::reproduce::ClaimResult],
    holds: bool,
    note: Option<&str>,
) {
    let _ = writeln!(sec, "\nSeeds' conclusion: {conclusion}\n");
    for c in claims {
        let _ = writeln!(
            sec,
            "- [{}] {} — ours: {}{}",
            if c.holds { "x" } else { " " },
            c.text,
            c.shown,
            if c.close { CLOSE } else { "" }
        );
    }
    let _ = writeln!(
        sec,
        "\n**{}**\n",
        if holds {
            "The seeds' qualitative conclusion holds in our reproduction."
        } else {
            "The seeds' qualitative conclusion does NOT hold in our reproduction (see the unchecked claims)."
        }
    );
    if let Some(note) = note {
        let _ = writeln!(sec, "Why ours differs from the seeds: {}\n", note.trim());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Why ours differs" stays a short account of current causes (issue 21); the history of
    /// each reproduction lives in docs/reproductions-history.md.
    #[test]
    fn every_note_is_at_most_120_words() {
        let mut notes: Vec<(String, String)> = all()
            .unwrap()
            .into_iter()
            .filter_map(|(r, _)| Some((r.name, r.note?)))
            .collect();
        notes.extend(
            crate::web::all()
                .unwrap()
                .into_iter()
                .filter_map(|r| Some((r.name, r.note?))),
        );
        assert!(notes.len() >= 15, "{}", notes.len());
        for (name, note) in notes {
            let words = note.split_whitespace().count();
            assert!(words <= 120, "{name}: {words} words");
        }
    }

    /// The summary counts every section and claim the report holds, marks ties, and replaces
    /// itself when run again (a later run adding a section).
    #[test]
    fn the_summary_counts_every_section_and_replaces_itself() {
        let dir = std::env::temp_dir().join(format!("repro-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("report.md");
        let _ = std::fs::remove_file(&path);
        let side = |v: f64, ci95: f64| netsim::reproduce::Side {
            label: "s".into(),
            metric: Some("goodput_bps".into()),
            value: v,
            ci95,
        };
        let claim = |l, r| netsim::reproduce::compare("c", &side(l, 2.0), ">", 1.0, &side(r, 2.0));
        let mut a = String::new();
        let claims = [claim(10.0, 1.0), claim(10.0, 9.0)].map(Option::unwrap);
        write_verdict(&mut a, "a", &claims, true, None);
        update_report(&path, "a", &a).unwrap();
        let t = summarize(&path).unwrap();
        assert_eq!(
            t,
            Tally {
                reproductions: 1,
                conclusions_hold: 1,
                claims: 2,
                claims_hold: 2,
                claims_tie: 1
            }
        );
        let mut b = String::new();
        write_verdict(&mut b, "b", &[claim(1.0, 9.0).unwrap()], false, None);
        update_report(&path, "b", &b).unwrap();
        let t = summarize(&path).unwrap();
        assert_eq!((t.reproductions, t.conclusions_hold), (2, 1));
        assert_eq!((t.claims, t.claims_hold, t.claims_tie), (3, 2, 1));
        assert_eq!(summarize(&path).unwrap(), t);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.matches("**Summary:**").count(), 1, "{text}");
        assert!(
            text.contains("2 of 3 checked claims hold (66.7 %), 1 of them"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_claim_is_printed_with_both_sides_units_and_threshold() {
        let claim = netsim::reproduce::compare(
            "at 300 ms split STP's throughput is ≥ 90 % of split TCP's",
            &netsim::reproduce::Side {
                label: "split STP @ 300 ms".into(),
                metric: Some("goodput_bps".into()),
                value: 1_228_294.6,
                ci95: 0.0,
            },
            ">=",
            0.9,
            &netsim::reproduce::Side {
                label: "split TCP @ 300 ms".into(),
                metric: Some("goodput_bps".into()),
                value: 1_366_000.0,
                ci95: 0.0,
            },
        )
        .unwrap();
        let mut sec = String::new();
        write_verdict(&mut sec, "c", &[claim], false, Some("why"));
        assert!(
            sec.contains(
                "- [ ] at 300 ms split STP's throughput is ≥ 90 % of split TCP's — ours: \
                 split STP @ 300 ms 1228.3 kb/s ≥ 0.9 × split TCP @ 300 ms 1366.0 kb/s"
            ),
            "{sec}"
        );
        assert!(!sec.contains("1228294"), "{sec}");
    }
}
