//! The thesis' LEO results (ch. 6) as reproductions (family `Leo`): each writes `NAME.json`,
//! `NAME.csv`, plots, and a section of `report.md` with the seeds' figures beside ours and the
//! seeds' qualitative claims checked. Names start with `leo-`; the quick variant uses fewer
//! pings and coarser time steps (seconds in all). `plots` draws the scatter plots and maps the
//! line/bar charts of `crate::plot` do not cover; `write_study_csv`/`study_charts` write a
//! `netsim::leo_net` study's outputs (also for `satstp sim` and `satstp bench leo`).

#[path = "repro_ch6.rs"]
mod ch6;
#[path = "repro_day.rs"]
mod day;
#[path = "repro_figs.rs"]
mod figs;
#[path = "repro_modern.rs"]
mod modern;
pub mod plots;

pub use modern::{study_charts, write_study_csv};

use crate::{write_file, Result, Verdict};
use constellation::experiments::{random_pings, PingSet};
use constellation::{Constellation, Shell};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// (name, title, source) of each LEO reproduction.
pub const LIST: [(&str, &str, &str); 11] = [
    ("leo-pings", "One-way delay of random pings: Teledesic min-delay and min-hop, Iridium with cross-seam ISLs", "thesis §6.3.1, figs. 6.2-6.7"),
    ("leo-nysf-day", "New York - San Francisco over a day: Teledesic, and Iridium without cross-seam ISLs", "thesis §6.3.1, figs. 6.8-6.10"),
    ("leo-hop-penalty", "Delay penalty of min-hop over min-delay routing by distance", "thesis §6.3.2, figs. 6.11, 6.12"),
    ("leo-geographic", "Geographic forwarding against min-hop and min-delay shortest paths (Teledesic)", "thesis §6.5.3, figs. 6.21, 6.22"),
    ("leo-seam-transfer", "STP and TCP SACK across the Iridium New York - San Francisco seam step", "thesis §6.3.1 and its footnote on reordering"),
    ("leo-central", "Centralized routing: persistence of forwarding entries and aggregated table size (Teledesic)", "thesis §6.6.2-6.6.3, figs. 6.24, 6.26"),
    ("leo-joint-attachment", "Joint attachment against the highest-elevation rule on modern shells", "issue 26 and its independent reference"),
    ("leo-network", "starlink-550 as a packet network: TCP and STP flows between ground stations", "issue 26; thesis ch. 5 for STP against TCP"),
    ("leo-table5.2", "STP vs TCP SACK vs TCP Reno one-way, on the Iridium and Teledesic constellations themselves", "thesis Table 5.2 (ns, a fixed 4-hop LEO path)"),
    ("leo-ch6-statements", "Ch. 6 statements: seam-crossing latitude, polar-region sizes, the 64 states and dips of fig. 6.24, Iridium's geographic consistency, update bandwidth", "thesis §6.5.3 (figs. 6.18-6.20) and §6.6.3 (fig. 6.24)"),
    ("leo-split", "Split STP at the gateway ground station against end-to-end NewReno and CUBIC over starlink-550", "journal §VI.A and fig. 9, thesis §4.3 and ch. 5; issue 26"),
];

/// A report section being built.
pub(super) struct Section {
    pub(super) name: &'static str,
    pub(super) rows: Vec<[String; 3]>,
    claims: Vec<(String, bool, String)>,
    plots: Vec<String>,
    notes: Vec<String>,
    json: Value,
}

impl Section {
    pub(super) fn new(name: &'static str) -> Section {
        Section {
            name,
            rows: Vec::new(),
            claims: Vec::new(),
            plots: Vec::new(),
            notes: Vec::new(),
            json: json!({}),
        }
    }
    pub(super) fn row(&mut self, what: &str, seed: &str, ours: String) {
        self.rows.push([what.to_string(), seed.to_string(), ours]);
    }
    pub(super) fn claim(&mut self, text: &str, holds: bool, ours: String) {
        self.claims.push((text.to_string(), holds, ours));
    }
}

/// Pings shared by several reproductions (computed once).
#[derive(Default)]
pub(crate) struct Data {
    teledesic: Option<PingSet>,
    iridium_xs: Option<PingSet>,
}

fn n_pings(quick: bool) -> usize {
    if quick {
        2000
    } else {
        10_000
    }
}

impl Data {
    pub(super) fn teledesic(&mut self, quick: bool) -> Result<&PingSet> {
        if self.teledesic.is_none() {
            let c = Constellation::preset("teledesic")?;
            self.teledesic = Some(random_pings(&c, n_pings(quick), 2.0, 1, true));
        }
        Ok(self.teledesic.as_ref().expect("just set"))
    }
    pub(super) fn iridium_xs(&mut self, quick: bool) -> Result<&PingSet> {
        if self.iridium_xs.is_none() {
            let mut s = Shell::preset("iridium")?;
            s.cross_seam = true;
            self.iridium_xs = Some(random_pings(
                &Constellation::Walker(s),
                n_pings(quick),
                2.0,
                1,
                false,
            ));
        }
        Ok(self.iridium_xs.as_ref().expect("just set"))
    }
}

/// Runs the LEO reproduction `name` and writes its outputs to `out`.
pub(crate) fn run(name: &str, data: &mut Data, quick: bool, out: &Path) -> Result<Verdict> {
    let Some(&(name, title, source)) = LIST.iter().find(|l| l.0 == name) else {
        return Err(crate::Error::Unknown(name.to_string()));
    };
    let t0 = std::time::Instant::now();
    let sec = match name {
        "leo-pings" => figs::pings(data, quick, out)?,
        "leo-nysf-day" => day::nysf_day(quick, out)?,
        "leo-hop-penalty" => figs::hop_penalty(data, quick, out)?,
        "leo-geographic" => figs::geographic(data, quick, out)?,
        "leo-seam-transfer" => day::seam_transfer(quick, out)?,
        "leo-joint-attachment" => modern::joint(quick, out)?,
        "leo-network" => modern::network(quick, out)?,
        "leo-table5.2" => modern::table52(quick, out)?,
        "leo-ch6-statements" => ch6::statements(quick, out)?,
        "leo-split" => modern::split(out)?,
        _ => day::central(quick, out)?,
    };
    let wall = t0.elapsed().as_secs_f64();
    write_section(out, &sec, title, source, wall, quick)?;
    Ok(Verdict {
        name: name.to_string(),
        conclusion_holds: sec.claims.iter().all(|c| c.1),
        claims: sec.claims.iter().map(|c| c.1).collect(),
    })
}

fn write_section(
    dir: &Path,
    s: &Section,
    title: &str,
    source: &str,
    wall: f64,
    quick: bool,
) -> Result<()> {
    let holds = s.claims.iter().all(|c| c.1);
    let value = json!({
        "name": s.name, "title": title, "source": source, "quick": quick, "wall_time_s": wall,
        "figures": s.rows.iter().map(|r| json!({"quantity": r[0], "seed": r[1], "ours": r[2]})).collect::<Vec<_>>(),
        "claims": s.claims.iter().map(|c| json!({"text": c.0, "holds": c.1, "ours": c.2})).collect::<Vec<_>>(),
        "conclusion_holds": holds, "data": s.json,
    });
    let mut csv = String::from("quantity,seed,ours\n");
    for r in &s.rows {
        let q = |x: &str| format!("\"{}\"", x.replace('"', "\"\""));
        let _ = writeln!(csv, "{},{},{}", q(&r[0]), q(&r[1]), q(&r[2]));
    }
    write_file(&dir.join(format!("{}.csv", s.name)), csv)?;
    let p = dir.join(format!("{}.json", s.name));
    write_file(&p, serde_json::to_string_pretty(&value)?)?;
    let mut md = String::new();
    let _ = writeln!(md, "## {} — {title}\n", s.name);
    let _ = writeln!(md, "Source: {source}. Geometry computed by the `constellation` crate{}; wall time {wall:.1} s.\n", if quick { " (--quick: fewer pings, coarser steps)" } else { "" });
    for p in &s.plots {
        let _ = writeln!(md, "![{p}]({p}.png)\n");
    }
    let _ = writeln!(md, "| quantity | seed | ours |\n|---|---|---|");
    for r in &s.rows {
        let _ = writeln!(md, "| {} | {} | {} |", r[0], r[1], r[2]);
    }
    let _ = writeln!(md);
    for c in &s.claims {
        let _ = writeln!(
            md,
            "- [{}] {} — ours: {}",
            if c.1 { "x" } else { " " },
            c.0,
            c.2
        );
    }
    for n in &s.notes {
        let _ = writeln!(md, "\n{n}");
    }
    let _ = writeln!(
        md,
        "\n**{}**\n",
        if holds {
            "The seeds' qualitative conclusion holds in our reproduction."
        } else {
            "The seeds' qualitative conclusion does NOT hold in our reproduction (see the unchecked claims)."
        }
    );
    crate::report::update_report(&dir.join("report.md"), s.name, &md)
}

pub(super) fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[cfg(test)]
mod tests {
    use crate::{Registry, Session};
    use std::path::{Path, PathBuf};

    fn fresh(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("repro-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn full_verdict(name: &str) -> serde_json::Value {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scenarios/reproduce/full-verdicts.json");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v[name].clone()
    }

    /// A LEO reproduction's quick variant run in-process: its claims reach the full run's
    /// recorded verdicts, and its CSV, JSON, plot, report section and verdict line agree.
    fn quick_run_writes_consistent_outputs(name: &str) {
        let reg = Registry::load().unwrap();
        let e = reg.get(name).unwrap();
        assert_eq!(e.family(), crate::Family::Leo);
        let out = fresh(name);
        let mut s = Session::new(true, 2, &|_| {});
        let v = e.run(&mut s, &out).unwrap();
        assert_eq!(v.name, name);
        let full = full_verdict(name);
        assert_eq!(
            serde_json::json!({"conclusion_holds": v.conclusion_holds, "claims": v.claims}),
            full,
            "{name}: quick verdicts differ from the full run's"
        );
        // CSV: a header and one quoted (quantity, seed, ours) row per figure of the JSON.
        let csv = std::fs::read_to_string(out.join(format!("{name}.csv"))).unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some("quantity,seed,ours"));
        let rows: Vec<&str> = lines.collect();
        assert!(!rows.is_empty(), "{name}: no figures");
        for r in &rows {
            assert!(r.starts_with('"') && r.ends_with('"'), "{r}");
            assert_eq!(r.matches("\",\"").count(), 2, "{r}");
        }
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(json["figures"].as_array().unwrap().len(), rows.len());
        assert_eq!(json["quick"], true);
        let claims: Vec<bool> = json["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["holds"].as_bool().unwrap())
            .collect();
        assert_eq!(claims, v.claims);
        assert_eq!(json["conclusion_holds"], v.conclusion_holds);
        // The report section, its checked claims and the verdicts file.
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        let sec = crate::report::section(&report, name).unwrap();
        assert!(sec.starts_with(&format!("## {name} — ")), "{sec}");
        assert_eq!(
            sec.matches("- [x] ").count(),
            v.claims.iter().filter(|c| **c).count()
        );
        let verdicts: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("verdicts.json")).unwrap())
                .unwrap();
        assert_eq!(verdicts[name], full);
        // Every plot the section shows exists as SVG and PNG.
        for line in sec.lines().filter(|l| l.starts_with("![")) {
            let png = line
                .split('(')
                .nth(1)
                .and_then(|t| t.strip_suffix(')'))
                .unwrap();
            assert!(out.join(png).is_file(), "{png}");
            assert!(out.join(png.replace(".png", ".svg")).is_file(), "{png}");
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn leo_table52_quick_in_process() {
        quick_run_writes_consistent_outputs("leo-table5.2");
    }

    #[test]
    fn leo_joint_attachment_quick_in_process() {
        quick_run_writes_consistent_outputs("leo-joint-attachment");
    }
}
