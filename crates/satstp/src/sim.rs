//! `satstp sim FILE.toml`: runs a scenario and prints mean ± 95 % CI per flow.

use anyhow::{Context, Result};
use clap::Args;
use netsim::scenario::{run_with_pcap, Scenario, Summary};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file (TOML; see docs/scenarios.md).
    file: PathBuf,
    /// Replications (default: the scenario's `runs`).
    #[arg(long)]
    runs: Option<u32>,
    /// Seed of the first replication (default: the scenario's `seed`).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the results as JSON to this path.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write every link's packets of the first replication to DIR/LINK.pcap (Wireshark, tshark).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Run only shard I of N (0-based): replications i with i mod N = I, written as a partial
    /// result to --shard-out for `satstp merge` (docs/cluster.md).
    #[arg(long, value_name = "I/N", conflicts_with = "json")]
    shard: Option<netsim::shard::Shard>,
    /// Directory of the partial results of --shard.
    #[arg(long, value_name = "DIR", default_value = "shards", requires = "shard")]
    shard_out: PathBuf,
}

pub fn run_sim(args: &SimArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read scenario {}", args.file.display()))?;
    let scenario = Scenario::from_toml(&text)
        .with_context(|| format!("invalid scenario {}", args.file.display()))?;
    let runs = args.runs.unwrap_or(scenario.runs);
    if runs == 0 || runs > 10_000 {
        anyhow::bail!("--runs must be between 1 and 10000, got {runs}");
    }
    let seed = args.seed.unwrap_or(scenario.seed);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let progress = |done: u32, total: u32| {
        if total > 1 {
            eprint!("\r  replication {done}/{total} done");
            let _ = std::io::stderr().flush();
            if done == total {
                eprintln!();
            }
        }
    };
    if let Some(dir) = &args.pcap {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if let Some(shard) = args.shard {
        return crate::shard::run_sim_shard(
            &text,
            runs,
            seed,
            shard,
            &args.shard_out,
            args.pcap.as_deref(),
        );
    }
    let summary = run_with_pcap(
        &scenario,
        runs,
        seed,
        threads,
        &progress,
        args.pcap.as_deref(),
    )?;
    print_table(&summary);
    println!(
        "  {} replications, seed {}..{}, {:.1} s simulated each; {} events in {:.2} s wall time",
        summary.runs,
        seed,
        seed + u64::from(runs) - 1,
        summary.duration_s,
        summary.events,
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn print_table(s: &Summary) {
    println!("scenario {} ({} runs, mean ± 95% CI)", s.scenario, s.runs);
    println!(
        "  {:<18} {:<10} {:>22} {:>17} {:>20} {:>16}",
        "flow", "protocol", "goodput (kb/s)", "fwd efficiency", "reverse (kb/s)", "completion (s)"
    );
    for f in &s.flows {
        let completion = f.completion_s.map_or("-".to_string(), |c| {
            format!("{:.2} ± {:.2}", c.mean, c.ci95)
        });
        println!(
            "  {:<18} {:<10} {:>22} {:>17} {:>20} {:>16}",
            f.name,
            f.protocol,
            format!(
                "{:.1} ± {:.1}",
                f.goodput_bps.mean / 1e3,
                f.goodput_bps.ci95 / 1e3
            ),
            format!(
                "{:.3} ± {:.3}",
                f.fwd_efficiency.mean, f.fwd_efficiency.ci95
            ),
            format!(
                "{:.2} ± {:.2}",
                f.reverse_bps.mean / 1e3,
                f.reverse_bps.ci95 / 1e3
            ),
            completion
        );
    }
    if let Some(j) = s.fairness {
        println!(
            "  Jain's fairness index over the flows: {:.3} ± {:.3}",
            j.mean, j.ci95
        );
    }
    println!(
        "  {:<24} {:>18} {:>14} {:>14} {:>14}",
        "link", "utilization", "queue drops", "error drops", "outage drops"
    );
    for l in &s.links {
        println!(
            "  {:<24} {:>18} {:>14.1} {:>14.1} {:>14.1}",
            l.name,
            format!("{:.3} ± {:.3}", l.utilization.mean, l.utilization.ci95),
            l.drops_queue.mean,
            l.drops_error.mean,
            l.drops_outage.mean
        );
    }
}
