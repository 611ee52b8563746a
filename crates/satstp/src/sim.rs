//! `satstp sim FILE.toml`: runs a scenario and prints mean ± confidence interval per flow and
//! per link.

use anyhow::{bail, Context, Result};
use clap::Args;
use netsim::metrics::Confidence;
use netsim::scenario::{run_replicated, Replication, Scenario, DEFAULT_MAX_RUNS};
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
    #[arg(long, allow_negative_numbers = true)]
    confidence: Option<f64>,
    /// Seed of the first replication (default: the scenario's `seed`).
    #[arg(long)]
    seed: Option<u64>,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
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
    if args.max_runs == Some(0) {
        bail!("--max-runs 0: the cap must be at least 1 run");
    }
    let rule = replication_rule(args, scenario)?;
    match (args.max_runs, rule) {
        (Some(_), Replication::Fixed { runs }) => {
            bail!(
            "--max-runs caps a replicate-until rule (--runs until-5%); this run has a fixed count \
             of {runs} (from {})",
            if args.runs.is_some() { "--runs" } else { "the scenario's runs" }
        )
        }
        _ => Ok(rule),
    }
}

fn replication_rule(args: &SimArgs, scenario: &Scenario) -> Result<Replication> {
    let Some(r) = &args.runs else {
        let mut rule = scenario.replication()?;
        if let (Some(cap), Replication::Until { max_runs, .. }) = (args.max_runs, &mut rule) {
            *max_runs = cap;
        }
        return Ok(rule);
    };
    if let Ok(n) = r.parse::<u32>() {
        if n == 0 || n > 10_000 {
            bail!("--runs {n}: must be from 1 to 10000");
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
    crate::outpath::json_start(&args.json)?;
    if let Some(dir) = &args.pcap {
        crate::outpath::dir("--pcap", dir)?;
    }
    if args.shard.is_some() {
        crate::outpath::dir("--shard-out", &args.shard_out)?;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let progress = |done: u32, total: u32| {
        if total > 1 {
            crate::progress::show(&format!(
                "  replication {done} done (at most {total}), {:.0} s",
                started.elapsed().as_secs_f64()
            ));
        }
    };
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
    crate::progress::clear();
    crate::summary_table::print_table(&summary);
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
    outln!(
        "  {} replications{rule_text}, seed {}..{}, {:.1} s simulated each; {} events in {:.2} s wall time",
        summary.runs,
        seed,
        seed + u64::from(summary.runs.max(1)) - 1,
        summary.duration_s,
        summary.events,
        started.elapsed().as_secs_f64()
    );
    crate::outpath::write_json(&args.json, &summary)?;
    Ok(())
}
