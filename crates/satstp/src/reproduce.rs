//! `satstp reproduce [NAME…] [--quick] [--out DIR] [--list] [--shard I/N]`: runs the seeds'
//! experiments through the one reproduction interface of the `repro` crate (simulator, LEO and
//! web reproductions alike), which writes, per reproduction, `NAME.json`, `NAME.csv`, plots
//! and a section of `report.md` that sets the seeds' figures beside ours and says whether the
//! seeds' conclusion holds. This parses, orchestrates and prints.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Every simulator reproduction, parsed, with its template text (for `satstp bench`).
pub(crate) fn all() -> Result<Vec<(netsim::reproduce::Reproduction, &'static str)>> {
    Ok(repro::sim_reproductions()?)
}

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Reproductions to run (default: all).
    names: Vec<String>,
    /// Fewer replications and shorter runs (all of them in a few minutes).
    #[arg(long)]
    quick: bool,
    /// Output directory.
    #[arg(long, default_value = "reproduce-out")]
    out: PathBuf,
    /// List the reproductions and exit.
    #[arg(long)]
    list: bool,
    /// Run only shard I of N (0-based): its share of each simulator reproduction's (case,
    /// replication) pairs and the LEO and web reproductions dealt to it whole, writing partial
    /// results to --out for `satstp merge` (docs/cluster.md).
    #[arg(long, value_name = "I/N")]
    shard: Option<netsim::shard::Shard>,
}

fn conclusion(holds: bool) -> &'static str {
    if holds {
        "holds"
    } else {
        "does NOT hold"
    }
}

pub fn run(args: &ReproduceArgs) -> Result<()> {
    let registry = repro::Registry::load()?;
    if args.list {
        for e in registry.entries() {
            outln!("{:<20} {}  [{}]", e.name(), e.title(), e.source());
        }
        return Ok(());
    }
    let selected = registry.select(&args.names)?;
    crate::outpath::dir("--out", &args.out)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    // When the current reproduction started (the progress line counts from it).
    let t0 = std::sync::Mutex::new(std::time::Instant::now());
    let restart = || {
        if let Ok(mut t) = t0.lock() {
            *t = std::time::Instant::now();
        }
    };
    let elapsed = || t0.lock().map_or(0.0, |t| t.elapsed().as_secs_f64());
    let progress =
        |case: &str| crate::progress::show(&format!("  running {case} ({:.0} s)", elapsed()));
    let mut session = repro::Session::new(args.quick, threads, &progress);
    if let Some(shard) = args.shard {
        let work = repro::plan(&selected, shard);
        let planned: Vec<String> = selected
            .iter()
            .filter(|e| !e.family().splits_items())
            .map(|e| e.name().to_string())
            .collect();
        for w in work {
            let e = w.entry();
            crate::progress::note(&format!("{}: {}", e.name(), e.title()));
            restart();
            let path = repro::shard::run_work(w, &planned, &mut session, shard, &args.out)
                .with_context(|| format!("reproduction {}", e.name()))?;
            crate::progress::note(&format!(
                "  shard {shard}: partial result {}",
                path.display()
            ));
        }
        eprintln!(
            "shard {shard} done in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    for e in selected {
        crate::progress::note(&format!("{}: {}", e.name(), e.title()));
        restart();
        let v = e
            .run(&mut session, &args.out)
            .with_context(|| format!("reproduction {}", e.name()))?;
        crate::progress::note(&format!(
            "  done in {:.1} s: seeds' conclusion {}",
            elapsed(),
            conclusion(v.conclusion_holds)
        ));
    }
    let report = args.out.join("report.md");
    let tally = repro::summarize(&report)?;
    eprintln!(
        "all done in {:.1} s; report: {}\n{tally} (every section of the report, runs before this one included)",
        started.elapsed().as_secs_f64(),
        report.display()
    );
    Ok(())
}
