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
    /// A constellation scenario's per-flow, per-second and ISL tables (CSV) and charts, written
    /// to DIR as NAME-flows.csv, NAME-rtt.csv, NAME-isl.csv, NAME-isl-links.csv (docs/leo.md);
    /// for a scenario of nodes and links, the traced flows' (trace = true) time-sequence plots
    /// NAME-FLOW-seq.svg/.png and their congestion windows NAME-cwnd.svg/.png (first
    /// replication).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// A scenario with a `[constellation]`: one run on the constellation as a packet network, the
/// flows' goodput and RTT printed, the study's tables written with --out.
fn run_constellation(args: &SimArgs, scenario: &Scenario) -> Result<()> {
    let file = args.file.display();
    for (flag, given) in [
        ("--runs", args.runs.as_deref().is_some_and(|r| r != "1")),
        ("--max-runs", args.max_runs.is_some()),
        ("--confidence", args.confidence.is_some()),
        ("--pcap", args.pcap.is_some()),
        ("--shard", args.shard.is_some()),
    ] {
        if given {
            bail!(
                "{flag}: {file} names a constellation, and a constellation scenario runs once per seed (give --seed for another run)"
            );
        }
    }
    let mut plan = scenario
        .leo_plan()
        .with_context(|| format!("invalid scenario {file}"))?;
    if let Some(seed) = args.seed {
        plan.config.seed = seed;
    }
    crate::outpath::json_start(&args.json)?;
    if let Some(dir) = &args.out {
        crate::outpath::dir("--out", dir)?;
    }
    let c = &plan.config;
    crate::progress::show(&format!(
        "  {}: {} satellites, {} ground stations, {} flows, {:.0} s simulated",
        c.constellation.name(),
        c.constellation.count(),
        c.stations.len(),
        plan.flows.len(),
        c.duration as f64 / 1e9
    ));
    let r = plan.run().with_context(|| format!("running {file}"))?;
    crate::progress::clear();
    let flows = plan.flow_results(&r);
    outln!(
        "{}: {} over {} ({} satellites), {:.0} s",
        scenario.name,
        plan.stations.join(", "),
        c.constellation.name(),
        c.constellation.count(),
        c.duration as f64 / 1e9
    );
    outln!(
        "  {:<16} {:<24} {:<8} {:>10} {:>11} {:>10} {:>9} {:>10}",
        "flow",
        "from -> to",
        "protocol",
        "delivered",
        "goodput",
        "done at",
        "RTT mean",
        "reordered"
    );
    let opt = |x: Option<f64>, unit: &str| x.map_or("-".to_string(), |v| format!("{v:.1} {unit}"));
    for f in &flows {
        outln!(
            "  {:<16} {:<24} {:<8} {:>7.2} MB {:>6.2} Mb/s {:>10} {:>9} {:>10}",
            f.name,
            format!("{} -> {}", f.from, f.to),
            f.protocol,
            f.delivered_bytes as f64 / 1e6,
            f.goodput_bps / 1e6,
            opt(f.completion_s, "s"),
            opt(f.rtt_mean_ms, "ms"),
            f.reordered_packets
        );
    }
    outln!(
        "  route entries changed after the first step {}; packets dropped at ISL / GSL queues {} / {}; {} events in {:.2} s wall time",
        r.route_changes,
        r.isl_queue_drops,
        r.gsl_queue_drops,
        r.events,
        r.build_s + r.run_s
    );
    if let Some(dir) = &args.out {
        let runs = [(scenario.name.as_str(), &r)];
        repro::leo::write_study_csv(dir, &scenario.name, &runs, &plan.stations)?;
        repro::leo::study_charts(dir, &scenario.name, &runs)?;
        outln!("  tables and charts in {}", dir.display());
    }
    crate::outpath::write_json(
        &args.json,
        &serde_json::json!({
            "scenario": scenario.name,
            "constellation": c.constellation.name(),
            "satellites": c.constellation.count(),
            "duration_s": c.duration as f64 / 1e9,
            "seed": c.seed,
            "flows": flows,
            "route_changes": r.route_changes,
            "isl_queue_drops": r.isl_queue_drops,
            "gsl_queue_drops": r.gsl_queue_drops,
            "events": r.events,
        }),
    )?;
    Ok(())
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
    if scenario.is_constellation() {
        return run_constellation(args, &scenario);
    }
    if let Some(dir) = &args.out {
        if !scenario.flows.iter().any(|f| f.trace) {
            bail!(
                "--out: {} traces no flow; set trace = true on a [[flow]] to write its \
                 time-sequence and cwnd plots (a scenario with a [constellation] writes its tables)",
                args.file.display()
            );
        }
        crate::outpath::dir("--out", dir)?;
    }
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
    if let Some(dir) = &args.out {
        write_traces(dir, &scenario.name, &summary.series)?;
    }
    Ok(())
}

/// Most points drawn per trace: longer series are thinned to every k-th sample (the last kept).
const TRACE_POINTS: usize = 4000;

/// Every k-th of `v` (k chosen so that at most `TRACE_POINTS` remain), the last one included.
fn thin(v: &[[f64; 3]], col: usize, scale: f64) -> Vec<(f64, f64, f64)> {
    let k = v.len().div_ceil(TRACE_POINTS).max(1);
    let mut pts: Vec<(f64, f64, f64)> = v
        .iter()
        .step_by(k)
        .map(|p| (p[0], p[col] / scale, 0.0))
        .collect();
    if let Some(last) = v.last() {
        if !(v.len() - 1).is_multiple_of(k) {
            pts.push((last[0], last[col] / scale, 0.0));
        }
    }
    pts
}

/// The first replication's traces as plots in `dir`: per traced flow a time-sequence plot
/// (`NAME-FLOW-seq`: highest sequence sent, KB, vs time) and one plot of every traced flow's
/// congestion window (`NAME-cwnd`).
fn write_traces(
    dir: &std::path::Path,
    name: &str,
    series: &std::collections::BTreeMap<String, Vec<[f64; 3]>>,
) -> Result<()> {
    use crate::plot::{Chart, Series};
    for (flow, v) in series {
        let chart = Chart {
            title: format!("{name}: time-sequence plot of {flow} (first replication)"),
            x_label: "time (s)".into(),
            y_label: "highest sequence sent (KB)".into(),
            series: vec![Series {
                name: flow.clone(),
                points: thin(v, 2, 1e3),
            }],
            ..Chart::default()
        };
        chart.write(dir, &format!("{name}-{flow}-seq"))?;
    }
    let chart = Chart {
        title: format!("{name}: congestion window (first replication)"),
        x_label: "time (s)".into(),
        y_label: "congestion window (KB)".into(),
        series: series
            .iter()
            .map(|(flow, v)| Series {
                name: flow.clone(),
                points: thin(v, 1, 1e3),
            })
            .collect(),
        ..Chart::default()
    };
    chart.write(dir, &format!("{name}-cwnd"))?;
    outln!(
        "  time-sequence and cwnd plots of {} traced flow(s) in {}",
        series.len(),
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_at_most_the_bound_and_the_last_sample() {
        let v: Vec<[f64; 3]> = (0..10_001).map(|i| [f64::from(i), 2.0, 3000.0]).collect();
        let p = thin(&v, 2, 1e3);
        assert!(p.len() <= TRACE_POINTS + 1, "{}", p.len());
        assert_eq!(p.first(), Some(&(0.0, 3.0, 0.0)));
        assert_eq!(p.last(), Some(&(10_000.0, 3.0, 0.0)));
        let short: Vec<[f64; 3]> = v[..10].to_vec();
        assert_eq!(thin(&short, 1, 1.0).len(), 10);
        assert!(thin(&[], 1, 1.0).is_empty());
    }
}
