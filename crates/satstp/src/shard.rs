//! Sharded sweeps from the command line: `satstp sim --shard I/N` and `satstp reproduce
//! --shard I/N` write partial results, and `satstp merge DIR…` combines them (`repro::shard`)
//! into exactly the JSON (and for reproductions the CSV, plots and report section) one
//! unsharded run writes. docs/cluster.md shows them on Slurm and Kubernetes.

use anyhow::Result;
use clap::Args;
use netsim::shard::Shard;
use std::path::{Path, PathBuf};

/// `satstp sim FILE --shard I/N`: runs this shard's replications and writes
/// `DIR/sim-SCENARIO.shard-I-of-N.partial.json`.
pub fn run_sim_shard(
    text: &str,
    runs: u32,
    seed: u64,
    shard: Shard,
    out: &Path,
    pcap: Option<&Path>,
) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let partial = netsim::shard::run_sim_shard(text, runs, seed, shard, threads, &|_, _| {}, pcap)?;
    let n = partial.replications.len();
    let path = repro::shard::write_sim_partial(out, partial)?;
    outln!(
        "shard {shard}: {n} of {runs} replications in {:.2} s; partial result {}",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Directories (or files) holding the partial results (`*.partial.json`) of every shard.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output directory: SCENARIO.json for a sim; NAME.json, NAME.csv, plots, report.md and
    /// verdicts.json for reproductions, as the unsharded commands write them.
    #[arg(long, default_value = "merged")]
    out: PathBuf,
}

pub fn merge(args: &MergeArgs) -> Result<()> {
    crate::outpath::dir("--out", &args.out)?;
    let merged = repro::shard::merge(&args.inputs, &args.out)?;
    for s in &merged.sims {
        crate::summary_table::print_table(&s.summary);
        outln!(
            "  merged {} shards of sim {}: {}",
            s.shards,
            s.name,
            s.path.display()
        );
    }
    if merged.reproductions.is_empty() {
        return Ok(());
    }
    for (v, n) in &merged.reproductions {
        eprintln!(
            "merged {n} shard result(s) of {}: seeds' conclusion {}",
            v.name,
            if v.conclusion_holds {
                "holds"
            } else {
                "does NOT hold"
            }
        );
    }
    let report = args.out.join("report.md");
    let tally = repro::summarize(&report)?;
    eprintln!("report: {}\n{tally}", report.display());
    Ok(())
}
