//! `satstp reproduce [NAME…] [--quick] [--out DIR] [--list]`: runs the seeds' experiments and
//! writes, per reproduction, `NAME.json`, `NAME.csv`, plots (`NAME.svg`/`.png`, and
//! `NAME-2.svg`/`.png` for a second metric) and a section of `report.md` that sets the seeds'
//! figures beside ours and says whether the seeds' conclusion holds.

use crate::repro_report::{record_verdict, write_outputs};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

/// Every reproduction, parsed, with its template text (kept here for `satstp bench`).
pub(crate) use crate::repro_report::all;

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
    /// Run only shard I of N (0-based) of each reproduction's (case, replication) pairs and
    /// write partial results to --out for `satstp merge` (docs/cluster.md).
    #[arg(long, value_name = "I/N")]
    shard: Option<netsim::shard::Shard>,
}

pub fn run(args: &ReproduceArgs) -> Result<()> {
    let all = all()?;
    if args.list {
        for (r, _) in &all {
            outln!("{:<20} {}  [{}]", r.name, r.title, r.source);
        }
        crate::leo::reproduce::list();
        crate::web_reproduce::list()?;
        return Ok(());
    }
    let web = crate::web_reproduce::all()?;
    for n in &args.names {
        if !all.iter().any(|(r, _)| &r.name == n)
            && !crate::leo::reproduce::names().any(|l| l == n)
            && !web.iter().any(|w| &w.name == n)
        {
            bail!("unknown reproduction '{n}' (see --list)");
        }
    }
    crate::outpath::dir("--out", &args.out)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    for (r, template) in all
        .iter()
        .filter(|(r, _)| args.names.is_empty() || args.names.contains(&r.name))
    {
        let t0 = std::time::Instant::now();
        crate::progress::note(&format!("{}: {}", r.name, r.title));
        if let Some(shard) = args.shard {
            crate::shard::run_repro_shard(r, template, args.quick, shard, &args.out)?;
            continue;
        }
        let res = r.run(template, args.quick, threads, &|case| {
            crate::progress::show(&format!(
                "  running {case} ({:.0} s)",
                t0.elapsed().as_secs_f64()
            ))
        })?;
        write_outputs(&args.out, r, &res, t0.elapsed().as_secs_f64(), args.quick)?;
        record_verdict(&args.out.join("verdicts.json"), &res)?;
        crate::progress::note(&format!(
            "  done in {:.1} s: seeds' conclusion {}",
            t0.elapsed().as_secs_f64(),
            if res.conclusion_holds {
                "holds"
            } else {
                "does NOT hold"
            }
        ));
    }
    crate::leo::reproduce::run(&args.names, args.quick, &args.out)?;
    // The web reproductions (short transfers, issue 15) have no sharded form: run them whole.
    if args.shard.is_none() {
        crate::web_reproduce::run(&args.names, args.quick, &args.out)?;
    }
    eprintln!(
        "all done in {:.1} s; report: {}",
        started.elapsed().as_secs_f64(),
        args.out.join("report.md").display()
    );
    Ok(())
}
