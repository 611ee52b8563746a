//! The thesis' LEO results (ch. 6) as reproductions of `satstp reproduce`: each writes
//! `NAME.json`, plots, and a section of `report.md` with the seeds' figures beside ours and the
//! seeds' qualitative claims checked. Names start with `leo-`; `--quick` uses fewer pings and
//! coarser time steps (seconds in all).

#[path = "repro_ch6.rs"]
mod ch6;
#[path = "repro_day.rs"]
mod day;
#[path = "repro_figs.rs"]
mod figs;
#[path = "repro_modern.rs"]
pub(crate) mod modern;

use anyhow::Result;
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
pub(super) struct Data {
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

/// Names of the LEO reproductions.
pub fn names() -> impl Iterator<Item = &'static str> {
    LIST.iter().map(|l| l.0)
}

pub fn list() {
    for (n, t, s) in LIST {
        outln!("{n:<20} {t}  [{s}]");
    }
}

/// Runs the LEO reproductions among `selected` (all when `selected` is empty).
pub fn run(selected: &[String], quick: bool, out: &Path) -> Result<()> {
    let mut data = Data::default();
    for (name, title, source) in LIST {
        if !selected.is_empty() && !selected.iter().any(|s| s == name) {
            continue;
        }
        crate::progress::note(&format!("{name}: {title}"));
        let t0 = std::time::Instant::now();
        let sec = match name {
            "leo-pings" => figs::pings(&mut data, quick, out)?,
            "leo-nysf-day" => day::nysf_day(quick, out)?,
            "leo-hop-penalty" => figs::hop_penalty(&mut data, quick, out)?,
            "leo-geographic" => figs::geographic(&mut data, quick, out)?,
            "leo-seam-transfer" => day::seam_transfer(quick, out)?,
            "leo-joint-attachment" => modern::joint(quick, out)?,
            "leo-network" => modern::network(quick, out)?,
            "leo-table5.2" => modern::table52(quick, out)?,
            "leo-ch6-statements" => ch6::statements(quick, out)?,
            "leo-split" => modern::split(out)?,
            _ => day::central(quick, out)?,
        };
        let wall = t0.elapsed().as_secs_f64();
        let holds = sec.claims.iter().all(|c| c.1);
        write_section(out, &sec, title, source, wall, quick)?;
        // Beside the other reproductions' verdicts (the file a quick run is compared with).
        crate::repro_report::record_web_verdict(
            &out.join("verdicts.json"),
            name,
            holds,
            sec.claims.iter().map(|c| c.1).collect(),
        )?;
        crate::progress::note(&format!(
            "  done in {wall:.1} s: seeds' conclusion {}",
            if holds { "holds" } else { "does NOT hold" }
        ));
    }
    Ok(())
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
    std::fs::write(dir.join(format!("{}.csv", s.name)), csv)?;
    let p = dir.join(format!("{}.json", s.name));
    std::fs::write(&p, serde_json::to_string_pretty(&value)?)?;
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
    crate::repro_report::update_report(&dir.join("report.md"), s.name, &md)
}

pub(super) fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}
