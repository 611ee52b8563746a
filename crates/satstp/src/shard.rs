//! Sharded sweeps from the command line: `satstp sim --shard I/N` and `satstp reproduce
//! --shard I/N` write partial results (`netsim::shard`), and `satstp merge DIR…` combines them
//! into exactly the JSON (and for reproductions the CSV, plots and report section) one
//! unsharded run writes. docs/cluster.md shows them on Slurm and Kubernetes.

use crate::repro_report::write_outputs;
use anyhow::{bail, Context, Result};
use clap::Args;
use netsim::reproduce::Reproduction;
use netsim::shard::{ReproPartial, Shard, SimPartial};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A partial result file: `{"kind": "sim" | "reproduction", "partial": {...}}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", content = "partial", rename_all = "lowercase")]
enum PartialFile {
    Sim(SimPartial),
    Reproduction(ReproPartial),
}

/// Suffix of partial result files.
const SUFFIX: &str = ".partial.json";

fn partial_name(prefix: &str, name: &str, shard: Shard) -> String {
    format!(
        "{prefix}{name}.shard-{}-of-{}{SUFFIX}",
        shard.index, shard.count
    )
}

fn write_partial(dir: &Path, file_name: &str, p: &PartialFile) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(file_name);
    std::fs::write(&path, serde_json::to_string(p)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

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
    let name = partial_name("sim-", &partial.scenario, shard);
    let path = write_partial(out, &name, &PartialFile::Sim(partial))?;
    outln!(
        "shard {shard}: {n} of {runs} replications in {:.2} s; partial result {}",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

/// `satstp reproduce NAME… --shard I/N`: runs this shard's share of each reproduction and writes
/// `DIR/NAME.shard-I-of-N.partial.json`.
pub fn run_repro_shard(
    r: &Reproduction,
    template: &str,
    quick: bool,
    shard: Shard,
    out: &Path,
) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let partial = r.run_shard(template, quick, shard, threads, &|case| {
        eprintln!("  running {case}")
    })?;
    let path = write_partial(
        out,
        &partial_name("", &r.name, shard),
        &PartialFile::Reproduction(partial),
    )?;
    eprintln!("  shard {shard}: partial result {}", path.display());
    Ok(())
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Directories (or files) holding the partial results (`*.partial.json`) of every shard.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output directory: SCENARIO.json for a sim; NAME.json, NAME.csv, plots and report.md for a
    /// reproduction, as the unsharded commands write them.
    #[arg(long, default_value = "merged")]
    out: PathBuf,
}

fn partial_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let entries = std::fs::read_dir(input)
                .with_context(|| format!("cannot read directory {}", input.display()))?;
            for e in entries {
                let p = e?.path();
                if p.to_string_lossy().ends_with(SUFFIX) {
                    files.push(p);
                }
            }
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            bail!("{}: no such file or directory", input.display());
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("no partial results (*{SUFFIX}) in the inputs");
    }
    Ok(files)
}

pub fn merge(args: &MergeArgs) -> Result<()> {
    crate::outpath::dir("--out", &args.out)?;
    let mut sims: BTreeMap<String, Vec<SimPartial>> = BTreeMap::new();
    let mut repros: BTreeMap<String, Vec<ReproPartial>> = BTreeMap::new();
    for f in partial_files(&args.inputs)? {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
        let p: PartialFile = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a partial result of satstp", f.display()))?;
        match p {
            PartialFile::Sim(s) => sims.entry(s.scenario.clone()).or_default().push(s),
            PartialFile::Reproduction(r) => repros.entry(r.name.clone()).or_default().push(r),
        }
    }
    for (name, parts) in sims {
        let n = parts.len();
        let summary = netsim::shard::merge_sim(parts)?;
        crate::summary_table::print_table(&summary);
        let path = args.out.join(format!("{name}.json"));
        // As `sim --json FILE` writes it (one document and a newline).
        std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        outln!("  merged {n} shards of sim {name}: {}", path.display());
    }
    if repros.is_empty() {
        return Ok(());
    }
    let all = crate::repro_report::all()?;
    for (name, parts) in repros {
        let Some((r, template)) = all.iter().find(|(r, _)| r.name == name) else {
            bail!("partial results of reproduction '{name}', which this satstp does not have");
        };
        let n = parts.len();
        let quick = parts.first().is_some_and(|p| p.quick);
        let wall_s: f64 = parts.iter().map(|p| p.wall_time_s).sum();
        let res = r.merge(template, parts)?;
        write_outputs(&args.out, r, &res, wall_s, quick)?;
        eprintln!(
            "merged {n} shards of {name}: seeds' conclusion {}",
            if res.conclusion_holds {
                "holds"
            } else {
                "does NOT hold"
            }
        );
    }
    eprintln!("report: {}", args.out.join("report.md").display());
    Ok(())
}
