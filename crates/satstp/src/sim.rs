//! `satstp sim FILE.toml`: runs a scenario and prints mean ± confidence interval per flow and
//! per link.

use anyhow::{bail, Context, Result};
use clap::Args;
use netsim::metrics::Confidence;
use netsim::scenario::{run_replicated, Replication, Scenario, Summary, DEFAULT_MAX_RUNS};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file (TOML; see docs/scenarios.md).
    file: PathBuf,
    /// Replications: a count, or a rule like "until-5%" (default: the scenario's `runs`).
    #[arg(long)]
    runs: Option<String>,
    /// Cap of an "until-…%" rule (default: the scenario's `max_runs`, else 200).
    #[arg(long)]
    max_runs: Option<u32>,
    /// Confidence level of the intervals: 0.95 or 0.99 (default: the scenario's, else 0.95).
    #[arg(long)]
    confidence: Option<f64>,
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

fn replication(args: &SimArgs, scenario: &Scenario) -> Result<Replication> {
    let Some(r) = &args.runs else {
        let mut rule = scenario.replication()?;
        if let (Some(cap), Replication::Until { max_runs, .. }) = (args.max_runs, &mut rule) {
            *max_runs = cap;
        }
        return Ok(rule);
    };
    if let Ok(n) = r.parse::<u32>() {
        if n == 0 || n > 10_000 {
            bail!("--runs must be between 1 and 10000, got {n}");
        }
        return Ok(Replication::Fixed { runs: n });
    }
    let cap = args
        .max_runs
        .or(scenario.max_runs)
        .unwrap_or(DEFAULT_MAX_RUNS);
    Replication::parse_rule(r, cap.min(10_000)).map_err(|e| anyhow::anyhow!("--runs: {e}"))
}

pub fn run_sim(args: &SimArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read scenario {}", args.file.display()))?;
    let scenario = Scenario::from_toml(&text)
        .with_context(|| format!("invalid scenario {}", args.file.display()))?;
    let rule = replication(args, &scenario)?;
    let level = match args.confidence {
        Some(c) => Confidence::from_level(c)
            .with_context(|| format!("--confidence must be 0.95 or 0.99, got {c}"))?,
        None => scenario.confidence()?,
    };
    let seed = args.seed.unwrap_or(scenario.seed);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let progress = |done: u32, total: u32| {
        if total > 1 {
            eprint!("\r  replication {done} done (at most {total})");
            let _ = std::io::stderr().flush();
        }
    };
    if let Some(dir) = &args.pcap {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if let Some(shard) = args.shard {
        // A shard runs its share of a fixed count; a rule decides as it goes and cannot be split.
        let Replication::Fixed { runs } = rule else {
            anyhow::bail!(
                "--shard needs a fixed number of runs (--runs N); a replicate-until rule decides \
                 how many to run from the results and cannot be split across shards"
            );
        };
        return crate::shard::run_sim_shard(
            &text,
            runs,
            seed,
            shard,
            &args.shard_out,
            args.pcap.as_deref(),
        );
    }
    let summary = run_replicated(
        &scenario,
        rule,
        level,
        seed,
        threads,
        &progress,
        args.pcap.as_deref(),
    )?;
    eprintln!();
    print_table(&summary);
    let rule_text = match (summary.replication.rule, summary.replication.converged) {
        (Replication::Until { percent, .. }, Some(true)) => {
            format!(" (until every flow's standard error ≤ {percent} % of its mean: met)")
        }
        (
            Replication::Until {
                percent, max_runs, ..
            },
            _,
        ) => format!(
            " (until every flow's standard error ≤ {percent} % of its mean: NOT met within \
             {max_runs}; worst {:.1} %)",
            summary.replication.worst_relative_se * 100.0
        ),
        _ => String::new(),
    };
    println!(
        "  {} replications{rule_text}, seed {}..{}, {:.1} s simulated each; {} events in {:.2} s wall time",
        summary.runs,
        seed,
        seed + u64::from(summary.runs.max(1)) - 1,
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
    let pct = s.confidence * 100.0;
    println!(
        "scenario {} ({} runs, mean ± {pct:.0}% CI)",
        s.scenario, s.runs
    );
    println!(
        "  {:<18} {:<10} {:>22} {:>17} {:>20} {:>16} {:>9} {:>9}",
        "flow",
        "protocol",
        "goodput (kb/s)",
        "fwd efficiency",
        "reverse (kb/s)",
        "completion (s)",
        "timeouts",
        "recovers"
    );
    for f in &s.flows {
        let completion = f
            .completion_s
            .map_or("-".to_string(), |c| format!("{:.2} ± {:.2}", c.mean, c.ci));
        println!(
            "  {:<18} {:<10} {:>22} {:>17} {:>20} {:>16} {:>9.1} {:>9.1}",
            f.name,
            f.protocol,
            format!(
                "{:.1} ± {:.1}",
                f.goodput_bps.mean / 1e3,
                f.goodput_bps.ci / 1e3
            ),
            format!("{:.3} ± {:.3}", f.fwd_efficiency.mean, f.fwd_efficiency.ci),
            format!(
                "{:.2} ± {:.2}",
                f.reverse_bps.mean / 1e3,
                f.reverse_bps.ci / 1e3
            ),
            completion,
            f.timeouts.mean,
            f.fast_recoveries.mean
        );
    }
    if let Some(j) = s.fairness {
        println!(
            "  Jain's fairness index over the flows: {:.3} ± {:.3}",
            j.mean, j.ci
        );
    }
    println!(
        "  {:<24} {:>18} {:>22} {:>12} {:>12} {:>12} {:>12}",
        "link",
        "utilization",
        "original-bit util.",
        "packets",
        "queue drops",
        "error drops",
        "outage drops"
    );
    for l in &s.links {
        println!(
            "  {:<24} {:>18} {:>22} {:>12.0} {:>12.1} {:>12.1} {:>12.1}",
            l.name,
            format!("{:.3} ± {:.3}", l.utilization.mean, l.utilization.ci),
            format!(
                "{:.3} ± {:.3}",
                l.original_utilization.mean, l.original_utilization.ci
            ),
            l.packets.mean,
            l.drops_queue.mean,
            l.drops_error.mean,
            l.drops_outage.mean
        );
    }
}
