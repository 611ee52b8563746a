//! Running a scenario's replications (in parallel, each deterministic per seed; a fixed count or
//! until the intervals are narrow enough) and summarising them.

use super::*;
use crate::metrics::Confidence;
use crate::packet::LinkId;
use crate::sim::Time;

type RunOutcome = Result<RunResult, ScenarioError>;

/// Runs every replication (in parallel over `threads`) and summarises. `progress` is called
/// after each finished replication with (done, total).
pub fn run(
    scenario: &Scenario,
    runs: u32,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u32, u32) + Sync),
) -> Result<Summary, ScenarioError> {
    run_with_pcap(scenario, runs, seed, threads, progress, None)
}

/// As `run`, and with `pcap_dir`, writes every link's packets of the first replication to
/// `DIR/LINK.pcap` (LINK with "->" written as "_to_").
pub fn run_with_pcap(
    scenario: &Scenario,
    runs: u32,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u32, u32) + Sync),
    pcap_dir: Option<&std::path::Path>,
) -> Result<Summary, ScenarioError> {
    let rule = Replication::Fixed { runs: runs.max(1) };
    let level = scenario.confidence()?;
    run_replicated(scenario, rule, level, seed, threads, progress, pcap_dir)
}

/// The callback run after each finished replication: `progress` with (replications done so far,
/// `total`).
fn counted(progress: &(dyn Fn(u32, u32) + Sync), total: u32) -> impl Fn(u32) + Sync + '_ {
    let done = std::sync::atomic::AtomicU32::new(0);
    move |_replication| {
        let d = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        progress(d, total);
    }
}

/// Runs the replications numbered `indices` (replication i has seed `seed + i`; replication 0
/// writes the pcaps) in parallel over `threads`, and returns their results in the order of
/// `indices`. `progress` is called after each with (done, total).
pub(crate) fn run_replications(
    scenario: &Scenario,
    indices: &[u32],
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u32, u32) + Sync),
    pcap_dir: Option<&std::path::Path>,
) -> Result<Vec<RunResult>, ScenarioError> {
    let end = scenario.duration_ns()?;
    let tick = counted(progress, indices.len() as u32);
    run_indexed(scenario, indices, seed, end, threads, &tick, pcap_dir)
        .into_iter()
        .collect()
}

/// Replications `first..first + count` (seeds `seed + i`), in parallel over `threads`.
fn run_batch(
    scenario: &Scenario,
    range: std::ops::Range<u32>,
    seed: u64,
    end: Time,
    threads: usize,
    progress: &(dyn Fn(u32) + Sync),
    pcap_dir: Option<&std::path::Path>,
) -> Vec<RunOutcome> {
    let indices: Vec<u32> = range.collect();
    run_indexed(scenario, &indices, seed, end, threads, progress, pcap_dir)
}

/// The replications numbered `indices` (seeds `seed + i`; replication 0 writes the pcaps), in
/// parallel over `threads`, in the order of `indices`; `progress` gets each finished number.
fn run_indexed(
    scenario: &Scenario,
    indices: &[u32],
    seed: u64,
    end: Time,
    threads: usize,
    progress: &(dyn Fn(u32) + Sync),
    pcap_dir: Option<&std::path::Path>,
) -> Vec<RunOutcome> {
    let count = indices.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<RunOutcome>>> =
        (0..count).map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, count.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(&k) = indices.get(i) else {
                    break;
                };
                let pcap = if k == 0 { pcap_dir } else { None };
                let r = run_one(scenario, seed.wrapping_add(u64::from(k)), end, pcap);
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some(r);
                }
                progress(k);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .ok()
                .flatten()
                .unwrap_or_else(|| Err(field("run", "a replication did not finish")))
        })
        .collect()
}

/// Runs replications as `rule` says (replication i with seed `seed + i`) and summarises them
/// with intervals at `level`. An `until` rule runs batches and keeps the fewest replications
/// (at least `min_runs`) whose every flow meets it, so the result does not depend on `threads`.
/// `progress` gets (replications done, most that may run).
pub fn run_replicated(
    scenario: &Scenario,
    rule: Replication,
    level: Confidence,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u32, u32) + Sync),
    pcap_dir: Option<&std::path::Path>,
) -> Result<Summary, ScenarioError> {
    let end = scenario.duration_ns()?;
    let (total, mut converged) = match rule {
        Replication::Fixed { runs } => (runs.max(1), None),
        Replication::Until { max_runs, .. } => (max_runs.max(1), Some(false)),
    };
    let tick = counted(progress, total);
    let mut results: Vec<RunResult> = Vec::new();
    // Runs the replications `range` and appends their results (stopping at the first failure).
    let batch = |results: &mut Vec<RunResult>, range: std::ops::Range<u32>| {
        for r in run_batch(scenario, range, seed, end, threads, &tick, pcap_dir) {
            results.push(r?);
        }
        Ok::<(), ScenarioError>(())
    };
    match rule {
        Replication::Fixed { runs } => batch(&mut results, 0..runs.max(1))?,
        Replication::Until {
            percent,
            min_runs,
            max_runs,
        } => {
            // Fixed batch sizes, so which replications run never depends on `threads`.
            const BATCH: u32 = 8;
            let limit = percent / 100.0;
            let min = min_runs.clamp(2, max_runs.max(2));
            while (results.len() as u32) < max_runs {
                let have = results.len() as u32;
                let want = if have == 0 { min.max(BATCH) } else { BATCH }.min(max_runs - have);
                batch(&mut results, have..have + want)?;
                let from = (have + 1).max(min) as usize;
                if let Some(n) =
                    (from..=results.len()).find(|&n| worst_relative_se(&results[..n]) <= limit)
                {
                    results.truncate(n);
                    converged = Some(true);
                    break;
                }
            }
        }
    }
    Ok(summarise(
        scenario, rule, converged, level, seed, end, results,
    ))
}

fn run_one(
    scenario: &Scenario,
    seed: u64,
    end: Time,
    pcap_dir: Option<&std::path::Path>,
) -> RunOutcome {
    let Built { mut sim, flows } = scenario.build(seed)?;
    if let Some(dir) = pcap_dir {
        for i in 0..sim.links().len() {
            let name = sim.links()[i].name.replace("->", "_to_");
            let path = dir.join(format!("{name}.pcap"));
            crate::pcap::attach(&mut sim, LinkId(i as u32), &path)
                .map_err(|e| field("pcap", format!("cannot write {}: {e}", path.display())))?;
        }
    }
    sim.run_until(end);
    sim.finish();
    let figs = flows
        .iter()
        .map(|f| flow_figures(&sim, &sim.metrics, f, end))
        .collect();
    let secs = end.max(1) as f64 / 1e9;
    let links = sim
        .links()
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let m = sim
                .metrics
                .links
                .get(&LinkId(i as u32))
                .cloned()
                .unwrap_or_default();
            let capacity = l.model.config().rate_bps as f64 * secs;
            LinkRun {
                name: l.name.clone(),
                utilization: m.transmitted.bytes as f64 * 8.0 / capacity,
                original_utilization: m.original.bytes as f64 * 8.0 / capacity,
                packets: m.transmitted.packets as f64,
                drops_queue: m.dropped_queue as f64,
                drops_error: m.dropped_error as f64,
                drops_outage: m.dropped_outage as f64,
            }
        })
        .collect();
    let series = flows
        .iter()
        .filter_map(|f| {
            let m = sim.metrics.flows.get(&f.id)?;
            m.trace.then(|| {
                let pts = m
                    .cwnd_series
                    .iter()
                    .zip(&m.seq_series)
                    .map(|(&(t, c), &(_, q))| [t as f64 / 1e9, c as f64, q as f64])
                    .collect();
                (f.name.clone(), pts)
            })
        })
        .collect();
    Ok(RunResult {
        figs,
        events: sim.events_processed,
        flows: flows
            .iter()
            .map(|f| FlowMeta {
                name: f.name.clone(),
                protocol: f.protocol.clone(),
            })
            .collect(),
        links,
        series,
    })
}
