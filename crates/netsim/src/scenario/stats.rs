//! What a run reports: one flow's and one link's figures per replication, and their summary over
//! replications (mean and confidence interval).

use super::*;
use crate::metrics::{mean_ci, sample_sd, Confidence, Metrics};
use crate::packet::Direction;
use crate::sim::{Sim, Time, SEC};
use serde::Serialize;
use std::collections::BTreeMap;

/// One flow's figures in one run.
#[derive(Debug, Clone, Serialize)]
pub struct FlowRun {
    pub goodput_bps: f64,
    pub fwd_efficiency: f64,
    pub reverse_bps: f64,
    pub completion_s: Option<f64>,
    pub retransmissions: f64,
    pub timeouts: f64,
    pub fast_recoveries: f64,
}

/// Computes one flow's figures from a finished run.
pub fn flow_figures(sim: &Sim, metrics: &Metrics, f: &BuiltFlow, end: Time) -> FlowRun {
    let m = metrics.flows.get(&f.id).cloned().unwrap_or_default();
    let stop = m.completed_ns.unwrap_or(end);
    let active = (stop.saturating_sub(f.start)).max(1) as f64 / 1e9;
    let goodput_bps = m.delivered_bytes as f64 * 8.0 / active;
    let links = &metrics.links;
    let fwd = links
        .get(&f.bottleneck)
        .map_or(0, |l| l.flow_bytes(f.id, Direction::Forward));
    let _ = sim;
    let rev = f
        .reverse_channel
        .and_then(|r| links.get(&r))
        .map_or(0, |l| l.flow_bytes(f.id, Direction::Reverse));
    FlowRun {
        goodput_bps,
        fwd_efficiency: if fwd == 0 {
            0.0
        } else {
            m.delivered_bytes as f64 / fwd as f64
        },
        reverse_bps: rev as f64 * 8.0 / active,
        completion_s: m
            .completed_ns
            .map(|c| (c.saturating_sub(f.start)) as f64 / 1e9),
        retransmissions: m.retransmitted_packets as f64,
        timeouts: m.timeouts as f64,
        fast_recoveries: m.fast_recoveries as f64,
    }
}

/// Mean, sample standard deviation and confidence half-widths over the replications.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Stat {
    pub mean: f64,
    /// Half-width of the 95 % confidence interval.
    pub ci95: f64,
    /// Half-width of the interval at the summary's `confidence` level.
    pub ci: f64,
    /// Sample standard deviation of one replication's value.
    pub sd: f64,
}

impl Stat {
    fn of(values: &[f64], level: Confidence) -> Stat {
        let (mean, ci95) = mean_ci(values, Confidence::P95);
        let (_, ci) = mean_ci(values, level);
        Stat {
            mean,
            ci95,
            ci,
            sd: sample_sd(values),
        }
    }
}

/// One flow over all replications.
#[derive(Debug, Clone, Serialize)]
pub struct FlowSummary {
    pub name: String,
    pub protocol: String,
    pub goodput_bps: Stat,
    pub fwd_efficiency: Stat,
    pub reverse_bps: Stat,
    /// Present when every replication completed the transfer.
    pub completion_s: Option<Stat>,
    pub retransmissions: Stat,
    /// Retransmission timeouts (TCP senders; STP has none).
    pub timeouts: Stat,
    /// Entries into fast recovery (TCP senders).
    pub fast_recoveries: Stat,
}

/// How the replications were decided.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicationReport {
    #[serde(flatten)]
    pub rule: Replication,
    /// For an `until` rule: whether every flow met it (false: the cap was reached first).
    pub converged: Option<bool>,
    /// Largest standard error of a flow's mean throughput, as a fraction of the mean.
    pub worst_relative_se: f64,
}

/// A scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub runs: u32,
    pub seed: u64,
    pub duration_s: f64,
    /// Confidence level of every `ci` (0.95 or 0.99); `ci95` is always at 95 %.
    pub confidence: f64,
    pub replication: ReplicationReport,
    pub flows: Vec<FlowSummary>,
    /// Jain's fairness index of the flows' goodputs (web sources excluded), when there are at
    /// least two flows.
    pub fairness: Option<Stat>,
    pub links: Vec<LinkSummary>,
    /// Time series of traced flows (first replication): flow name → [[t_s, cwnd_bytes, seq]].
    pub series: BTreeMap<String, Vec<[f64; 3]>>,
    /// Simulated events processed over all replications.
    pub events: u64,
}

/// One simplex link over all replications.
#[derive(Debug, Clone, Serialize)]
pub struct LinkSummary {
    pub name: String,
    /// Link utilization: every transmitted bit (retransmissions, headers and feedback included)
    /// ÷ (rate × duration).
    pub utilization: Stat,
    /// Utilization in original bits: as `utilization` without retransmitted packets.
    pub original_utilization: Stat,
    /// Packets transmitted (crossed the link, or lost to bit errors on it).
    pub packets: Stat,
    pub drops_queue: Stat,
    pub drops_error: Stat,
    pub drops_outage: Stat,
}

/// One link in one replication.
#[derive(Debug, Clone)]
pub(crate) struct LinkRun {
    pub(crate) name: String,
    pub(crate) utilization: f64,
    pub(crate) original_utilization: f64,
    pub(crate) packets: f64,
    pub(crate) drops_queue: f64,
    pub(crate) drops_error: f64,
    pub(crate) drops_outage: f64,
}

/// A flow's name and protocol, as a replication reports them.
#[derive(Debug, Clone)]
pub(crate) struct FlowMeta {
    pub(crate) name: String,
    pub(crate) protocol: String,
}

/// One replication's results (what `crate::shard` writes to partial files).
pub(crate) struct RunResult {
    pub(crate) figs: Vec<FlowRun>,
    pub(crate) events: u64,
    pub(crate) flows: Vec<FlowMeta>,
    pub(crate) links: Vec<LinkRun>,
    pub(crate) series: BTreeMap<String, Vec<[f64; 3]>>,
}

/// Summarises replications 0..runs of a fixed count, in that order, with the scenario's
/// confidence level (what a sharded run's merge needs).
pub(crate) fn summarise_fixed(
    scenario: &Scenario,
    runs: u32,
    level: Confidence,
    seed: u64,
    end: Time,
    results: Vec<RunResult>,
) -> Summary {
    summarise(
        scenario,
        Replication::Fixed { runs },
        None,
        level,
        seed,
        end,
        results,
    )
}

/// Largest σ/√n ÷ mean of the flows' throughputs (web sources excluded) over `results`.
pub(super) fn worst_relative_se(results: &[RunResult]) -> f64 {
    let Some(first) = results.first() else {
        return f64::INFINITY;
    };
    let mut worst: f64 = 0.0;
    for (i, meta) in first.flows.iter().enumerate() {
        if meta.protocol == "web" {
            continue;
        }
        let v: Vec<f64> = results
            .iter()
            .filter_map(|r| r.figs.get(i).map(|f| f.goodput_bps))
            .collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let se = sample_sd(&v) / (v.len().max(1) as f64).sqrt();
        let rel = if se == 0.0 {
            0.0
        } else if mean > 0.0 {
            se / mean
        } else {
            f64::INFINITY
        };
        worst = worst.max(rel);
    }
    if results.len() < 2 {
        f64::INFINITY
    } else {
        worst
    }
}

pub(crate) fn summarise(
    scenario: &Scenario,
    rule: Replication,
    converged: Option<bool>,
    level: Confidence,
    seed: u64,
    end: Time,
    results: Vec<RunResult>,
) -> Summary {
    let runs = results.len() as u32;
    let worst = worst_relative_se(&results);
    let mut per_flow: Vec<Vec<FlowRun>> = Vec::new();
    let mut per_link: Vec<Vec<LinkRun>> = Vec::new();
    let mut fairness = Vec::new();
    let mut flows_meta = Vec::new();
    let mut series = BTreeMap::new();
    let mut events = 0;
    for (k, r) in results.into_iter().enumerate() {
        events += r.events;
        if k == 0 {
            per_flow = vec![Vec::new(); r.figs.len()];
            per_link = vec![Vec::new(); r.links.len()];
            flows_meta = r.flows.clone();
            series = r.series;
        }
        let goodputs: Vec<f64> = r
            .figs
            .iter()
            .zip(&r.flows)
            .filter(|(_, m)| m.protocol != "web")
            .map(|(f, _)| f.goodput_bps)
            .collect();
        if goodputs.len() >= 2 {
            fairness.push(crate::metrics::jain_index(&goodputs));
        }
        for (i, f) in r.figs.into_iter().enumerate() {
            if let Some(v) = per_flow.get_mut(i) {
                v.push(f);
            }
        }
        for (i, l) in r.links.into_iter().enumerate() {
            if let Some(v) = per_link.get_mut(i) {
                v.push(l);
            }
        }
    }
    let flows = flows_meta
        .iter()
        .zip(per_flow.iter())
        .map(|(m, v)| {
            let pick =
                |g: fn(&FlowRun) -> f64| Stat::of(&v.iter().map(g).collect::<Vec<_>>(), level);
            let completions: Vec<f64> = v.iter().filter_map(|r| r.completion_s).collect();
            FlowSummary {
                name: m.name.clone(),
                protocol: m.protocol.clone(),
                goodput_bps: pick(|r| r.goodput_bps),
                fwd_efficiency: pick(|r| r.fwd_efficiency),
                reverse_bps: pick(|r| r.reverse_bps),
                completion_s: (completions.len() == v.len() && !v.is_empty())
                    .then(|| Stat::of(&completions, level)),
                retransmissions: pick(|r| r.retransmissions),
                timeouts: pick(|r| r.timeouts),
                fast_recoveries: pick(|r| r.fast_recoveries),
            }
        })
        .collect();
    let links = per_link
        .iter()
        .filter(|v| !v.is_empty())
        .map(|v| {
            let col =
                |g: fn(&LinkRun) -> f64| Stat::of(&v.iter().map(g).collect::<Vec<_>>(), level);
            LinkSummary {
                name: v[0].name.clone(),
                utilization: col(|l| l.utilization),
                original_utilization: col(|l| l.original_utilization),
                packets: col(|l| l.packets),
                drops_queue: col(|l| l.drops_queue),
                drops_error: col(|l| l.drops_error),
                drops_outage: col(|l| l.drops_outage),
            }
        })
        .collect();
    Summary {
        scenario: scenario.name.clone(),
        runs,
        seed,
        duration_s: end as f64 / SEC as f64,
        confidence: level.level(),
        replication: ReplicationReport {
            rule,
            converged,
            worst_relative_se: worst,
        },
        flows,
        fairness: (!fairness.is_empty()).then(|| Stat::of(&fairness, level)),
        links,
        series,
        events,
    }
}
