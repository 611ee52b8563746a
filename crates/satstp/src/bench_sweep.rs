//! `satstp bench sweep`: runs the STP engine's deterministic fault sweep (`memnet::sweep`) over a
//! range of seeds and prints every seed whose checks failed, with a one-line description of its
//! scenario; `--seed S` reruns one seed and prints its scenario and outcome in full.

use anyhow::{bail, Result};
use clap::Args;
use memnet::sweep;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Rerun this one seed verbosely (ignores --seeds and --start).
    #[arg(long)]
    seed: Option<u64>,
}

pub fn run(args: &SweepArgs) -> Result<()> {
    if let Some(seed) = args.seed {
        return one(seed);
    }
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    // A panic inside a seed is caught and reported as that seed's failure; keep its message off
    // the terminal so the summary stays readable.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let last = args.start.saturating_add(args.seeds - 1);
    outln!("sweeping seeds {}..={}", args.start, last);
    let step = (args.seeds / 10).max(1);
    let mut next_report = step;
    let sum = sweep::sweep(args.start, args.seeds, |r| {
        if let Some(f) = &r.failure {
            outln!("FAIL seed {}: {f}\n     scenario: {}", r.seed, r.summary);
        }
        let done = r.seed - args.start + 1;
        if done >= next_report {
            next_report += step;
            eprintln!(
                "  {done} seeds done, {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
    });
    std::panic::set_hook(hook);
    outln!(
        "{} seeds in {:.1} s: {} byte-exact and closed, {} failed cleanly ({} without an outage \
         beyond the dead-peer timeout), {} broke a check",
        sum.seeds,
        started.elapsed().as_secs_f64(),
        sum.clean,
        sum.failed_cleanly,
        sum.failed_without_long_outage,
        sum.failures.len()
    );
    if !sum.failures.is_empty() {
        let seeds: Vec<String> = sum.failures.iter().map(|r| r.seed.to_string()).collect();
        bail!(
            "{} seed(s) failed: {} (rerun one with `satstp bench sweep --seed S`)",
            seeds.len(),
            seeds.join(", ")
        );
    }
    Ok(())
}

fn one(seed: u64) -> Result<()> {
    let sc = sweep::scenario(seed);
    outln!("seed {seed}: {}", sc.summary());
    outln!("{sc:#?}");
    let started = Instant::now();
    let r = sweep::run_seed(seed);
    outln!("{}", r.detail);
    outln!(
        "virtual {:.3} s, wall {:.3} s",
        r.end_ns as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );
    match r.failure {
        Some(f) => bail!("seed {seed} failed: {f}"),
        None if r.clean => outln!("seed {seed}: byte-exact, both sides closed"),
        None => outln!("seed {seed}: failed cleanly (no byte lost behind a clean end)"),
    }
    Ok(())
}
