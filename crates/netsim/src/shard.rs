//! Sharded runs: a scenario's replications, or a reproduction's (case, replication) pairs, split
//! deterministically over N independent processes (cluster array jobs), each writing a partial
//! result; merging the N partials gives exactly the summary one unsharded run gives.
//!
//! Work item k belongs to shard `k mod N` (round robin, so every shard gets a share of every
//! case). For a scenario, k is the replication number; for a reproduction with `runs`
//! replications per case, k = case × runs + replication, cases numbered series-major as
//! [`Reproduction::run`] runs them. Replication i of a case always has seed `seed + i`, whichever
//! shard runs it, and the merge summarises replications in the order 0, 1, … as one run does,
//! so the merged figures are bit-identical to an unsharded run's.
//!
//! Partial files are JSON. Floating-point figures are written as strings holding Rust's
//! shortest round-trip decimal form (`"1234.5"`, also `"NaN"`, `"inf"`), which reads back to
//! the same bits; JSON numbers would not guarantee that, nor carry NaN. A partial carries what
//! the merge must check: the shard spec, the replication count, and a fingerprint of its input
//! (a sim partial carries the whole scenario text), so partials of different inputs or shard
//! counts are refused rather than mixed.

use crate::reproduce::{ReproResult, Reproduction};
use crate::scenario::{
    run_replications, summarise_fixed, FlowMeta, FlowRun, LinkRun,
    Replication as ScenarioReplication, RunResult, Scenario, ScenarioError, Summary,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::str::FromStr;
use thiserror::Error;

/// Errors of sharding and merging.
#[derive(Debug, Error)]
pub enum ShardError {
    /// A shard written wrong; the reason (the caller names the flag and the value).
    #[error("{0}; a shard is I/N, shard I of N counted from 0 (0 <= I < N), e.g. 0/4")]
    Spec(String),
    #[error("partial results do not fit together: {0}")]
    Mismatch(String),
    #[error("partial results are incomplete: {0}")]
    Missing(String),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// Which share of the work this process does: shard `index` of `count` (0-based, as Slurm's
/// `SLURM_ARRAY_TASK_ID` with `--array=0-(N-1)` and Kubernetes' `JOB_COMPLETION_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The whole run as one shard.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether work item `k` is this shard's.
    pub fn owns(&self, k: u64) -> bool {
        k % u64::from(self.count) == u64::from(self.index)
    }
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let bad = |why: &str| ShardError::Spec(why.to_string());
        let (i, n) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("no '/' between I and N"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| bad("I is not a whole number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| bad("N is not a whole number"))?;
        if count == 0 {
            return Err(bad("N is 0"));
        }
        if index >= count {
            return Err(bad(&format!("I = {index} is not below N = {count}")));
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// An f64 written as the string of its shortest round-trip decimal form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExactF64(pub f64);

impl Serialize for ExactF64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for ExactF64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExactF64, D::Error> {
        let text = String::deserialize(d)?;
        text.parse::<f64>()
            .map(ExactF64)
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a number")))
    }
}

/// One flow of one replication.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowRecord {
    pub name: String,
    pub protocol: String,
    pub goodput_bps: ExactF64,
    pub fwd_efficiency: ExactF64,
    pub reverse_bps: ExactF64,
    pub completion_s: Option<ExactF64>,
    pub retransmissions: ExactF64,
    pub timeouts: ExactF64,
    pub fast_recoveries: ExactF64,
}

/// One link of one replication.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkRecord {
    pub name: String,
    pub utilization: ExactF64,
    pub original_utilization: ExactF64,
    pub packets: ExactF64,
    pub drops_queue: ExactF64,
    pub drops_error: ExactF64,
    pub drops_outage: ExactF64,
}

/// Everything one replication contributes to a summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replication {
    /// Replication number i (seed = the scenario's seed + i).
    pub index: u32,
    pub events: u64,
    pub flows: Vec<FlowRecord>,
    pub links: Vec<LinkRecord>,
    /// Traced time series (kept from replication 0 only by the summary).
    pub series: BTreeMap<String, Vec<[ExactF64; 3]>>,
}

impl Replication {
    fn from_run(index: u32, r: RunResult) -> Replication {
        let x = ExactF64;
        Replication {
            index,
            events: r.events,
            flows: r
                .flows
                .iter()
                .zip(&r.figs)
                .map(|(m, f)| FlowRecord {
                    name: m.name.clone(),
                    protocol: m.protocol.clone(),
                    goodput_bps: x(f.goodput_bps),
                    fwd_efficiency: x(f.fwd_efficiency),
                    reverse_bps: x(f.reverse_bps),
                    completion_s: f.completion_s.map(x),
                    retransmissions: x(f.retransmissions),
                    timeouts: x(f.timeouts),
                    fast_recoveries: x(f.fast_recoveries),
                })
                .collect(),
            links: r
                .links
                .iter()
                .map(|l| LinkRecord {
                    name: l.name.clone(),
                    utilization: x(l.utilization),
                    original_utilization: x(l.original_utilization),
                    packets: x(l.packets),
                    drops_queue: x(l.drops_queue),
                    drops_error: x(l.drops_error),
                    drops_outage: x(l.drops_outage),
                })
                .collect(),
            series: r
                .series
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().map(|p| p.map(x)).collect()))
                .collect(),
        }
    }

    fn into_run(self) -> RunResult {
        RunResult {
            figs: self
                .flows
                .iter()
                .map(|f| FlowRun {
                    goodput_bps: f.goodput_bps.0,
                    fwd_efficiency: f.fwd_efficiency.0,
                    reverse_bps: f.reverse_bps.0,
                    completion_s: f.completion_s.map(|c| c.0),
                    retransmissions: f.retransmissions.0,
                    timeouts: f.timeouts.0,
                    fast_recoveries: f.fast_recoveries.0,
                })
                .collect(),
            events: self.events,
            flows: self
                .flows
                .iter()
                .map(|f| FlowMeta {
                    name: f.name.clone(),
                    protocol: f.protocol.clone(),
                })
                .collect(),
            links: self
                .links
                .into_iter()
                .map(|l| LinkRun {
                    name: l.name,
                    utilization: l.utilization.0,
                    original_utilization: l.original_utilization.0,
                    packets: l.packets.0,
                    drops_queue: l.drops_queue.0,
                    drops_error: l.drops_error.0,
                    drops_outage: l.drops_outage.0,
                })
                .collect(),
            series: self
                .series
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().map(|p| p.map(|e| e.0)).collect()))
                .collect(),
        }
    }
}

/// The partial result of `satstp sim --shard I/N`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimPartial {
    /// The scenario's name.
    pub scenario: String,
    /// The scenario file's text: the merge rebuilds the summary from it.
    pub scenario_toml: String,
    pub runs: u32,
    pub seed: u64,
    pub shard: Shard,
    pub replications: Vec<Replication>,
}

/// Runs this shard's replications of `scenario` (parsed from `text`): replications i of
/// 0..runs with i mod N = I, seed `seed + i`.
pub fn run_sim_shard(
    text: &str,
    runs: u32,
    seed: u64,
    shard: Shard,
    threads: usize,
    progress: &(dyn Fn(u32, u32) + Sync),
    pcap_dir: Option<&std::path::Path>,
) -> Result<SimPartial, ShardError> {
    let scenario = Scenario::from_toml(text)?;
    let indices: Vec<u32> = (0..runs).filter(|&i| shard.owns(u64::from(i))).collect();
    let results = run_replications(&scenario, &indices, seed, threads, progress, pcap_dir)?;
    Ok(SimPartial {
        scenario: scenario.name.clone(),
        scenario_toml: text.to_string(),
        runs,
        seed,
        shard,
        replications: indices
            .iter()
            .zip(results)
            .map(|(&i, r)| Replication::from_run(i, r))
            .collect(),
    })
}

/// Checks that `shards` are shards 0..N of one N, each exactly once.
fn check_shards(what: &str, shards: &[Shard]) -> Result<(), ShardError> {
    let Some(first) = shards.first() else {
        return Err(ShardError::Missing(format!("{what}: no partial results")));
    };
    let n = first.count;
    let mut seen = vec![false; n as usize];
    for s in shards {
        if s.count != n {
            return Err(ShardError::Mismatch(format!(
                "{what}: shard {s} beside shards of {n}"
            )));
        }
        let slot = seen
            .get_mut(s.index as usize)
            .ok_or_else(|| ShardError::Mismatch(format!("{what}: shard {s} out of range")))?;
        if *slot {
            return Err(ShardError::Mismatch(format!(
                "{what}: shard {s} given twice"
            )));
        }
        *slot = true;
    }
    let missing: Vec<String> = (0..n)
        .filter(|&i| !seen[i as usize])
        .map(|i| format!("{i}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(ShardError::Missing(format!(
            "{what}: shard(s) {} not found",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// Puts replications 0..runs in order, checking that each is there exactly once.
fn in_order(
    what: &str,
    runs: u32,
    reps: impl IntoIterator<Item = Replication>,
) -> Result<Vec<RunResult>, ShardError> {
    let mut slots: Vec<Option<Replication>> = (0..runs).map(|_| None).collect();
    for r in reps {
        let i = r.index;
        let slot = slots.get_mut(i as usize).ok_or_else(|| {
            ShardError::Mismatch(format!("{what}: replication {i} beyond {runs} runs"))
        })?;
        if slot.is_some() {
            return Err(ShardError::Mismatch(format!(
                "{what}: replication {i} appears twice"
            )));
        }
        *slot = Some(r);
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.map(Replication::into_run)
                .ok_or_else(|| ShardError::Missing(format!("{what}: replication {i} missing")))
        })
        .collect()
}

/// Merges the partials of one sharded `satstp sim` run into the summary one unsharded run gives.
pub fn merge_sim(parts: Vec<SimPartial>) -> Result<Summary, ShardError> {
    let first = parts
        .first()
        .ok_or_else(|| ShardError::Missing("no sim partial results".into()))?;
    let name = first.scenario.clone();
    let (text, runs, seed) = (first.scenario_toml.clone(), first.runs, first.seed);
    for p in &parts {
        if p.scenario_toml != text || p.runs != runs || p.seed != seed {
            return Err(ShardError::Mismatch(format!(
                "sim {name}: shard {} ran another scenario text, --runs or --seed",
                p.shard
            )));
        }
    }
    check_shards(
        &format!("sim {name}"),
        &parts.iter().map(|p| p.shard).collect::<Vec<_>>(),
    )?;
    let scenario = Scenario::from_toml(&text)?;
    let end = scenario.duration_ns()?;
    let results = in_order(
        &format!("sim {name}"),
        runs,
        parts.into_iter().flat_map(|p| p.replications),
    )?;
    let level = scenario.confidence()?;
    Ok(summarise_fixed(&scenario, runs, level, seed, end, results))
}

/// One case of a reproduction in a partial result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CasePartial {
    pub series: String,
    pub point: String,
    pub replications: Vec<Replication>,
}

/// The partial result of `satstp reproduce NAME --shard I/N`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReproPartial {
    pub name: String,
    pub quick: bool,
    /// Fingerprint of the reproduction and its template (FNV-1a 64, hex).
    pub fingerprint: String,
    pub runs: u32,
    pub shard: Shard,
    /// Wall time this shard took, s (informational).
    pub wall_time_s: f64,
    pub cases: Vec<CasePartial>,
}

/// FNV-1a 64 of some bytes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Reproduction {
    /// The fixed replication count a sharded run splits: `quick_runs`, or `runs` when it is a
    /// count (a replicate-until rule decides from the results as it goes and cannot be split).
    fn fixed_runs(&self, quick: bool) -> Result<u32, ShardError> {
        match self.rule(quick)? {
            ScenarioReplication::Fixed { runs } => Ok(runs),
            ScenarioReplication::Until { .. } => Err(ShardError::Mismatch(format!(
                "reproduction {}: its runs follow a replicate-until rule, which cannot be split \
                 into shards (run it unsharded, or with --quick)",
                self.name
            ))),
        }
    }

    /// A fingerprint of this reproduction with `template`: partials of different inputs have
    /// different fingerprints.
    pub fn fingerprint(&self, template: &str) -> String {
        format!("{:016x}", fnv1a(format!("{self:?}\n{template}").as_bytes()))
    }

    /// Runs this shard's (case, replication) pairs; `progress` is told each case it runs.
    pub fn run_shard(
        &self,
        template: &str,
        quick: bool,
        shard: Shard,
        threads: usize,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<ReproPartial, ShardError> {
        let started = std::time::Instant::now();
        let runs = self.fixed_runs(quick)?;
        let mut cases = Vec::new();
        let mut case_no = 0u64;
        for s in &self.series {
            for p in &self.points {
                let first = case_no * u64::from(runs);
                case_no += 1;
                let indices: Vec<u32> = (0..runs)
                    .filter(|&i| shard.owns(first + u64::from(i)))
                    .collect();
                if indices.is_empty() {
                    continue;
                }
                let sc = self.scenario(template, s, p, quick)?;
                progress(&format!(
                    "{} @ {} (replications {})",
                    s.name,
                    p.label,
                    indices
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ));
                let results = run_replications(&sc, &indices, sc.seed, threads, &|_, _| {}, None)?;
                cases.push(CasePartial {
                    series: s.name.clone(),
                    point: p.label.clone(),
                    replications: indices
                        .iter()
                        .zip(results)
                        .map(|(&i, r)| Replication::from_run(i, r))
                        .collect(),
                });
            }
        }
        Ok(ReproPartial {
            name: self.name.clone(),
            quick,
            fingerprint: self.fingerprint(template),
            runs,
            shard,
            wall_time_s: started.elapsed().as_secs_f64(),
            cases,
        })
    }

    /// Merges the partials of one sharded run of this reproduction into the result one
    /// unsharded run ([`Reproduction::run`]) gives.
    pub fn merge(
        &self,
        template: &str,
        parts: Vec<ReproPartial>,
    ) -> Result<ReproResult, ShardError> {
        let what = format!("reproduction {}", self.name);
        let first = parts
            .first()
            .ok_or_else(|| ShardError::Missing(format!("{what}: no partial results")))?;
        let (quick, runs) = (first.quick, first.runs);
        let level = self.level()?;
        let fingerprint = self.fingerprint(template);
        for p in &parts {
            if p.name != self.name {
                return Err(ShardError::Mismatch(format!(
                    "{what}: a partial of {}",
                    p.name
                )));
            }
            if p.fingerprint != fingerprint {
                return Err(ShardError::Mismatch(format!(
                    "{what}: shard {} was made from another version of the reproduction",
                    p.shard
                )));
            }
            if p.quick != quick || p.runs != runs {
                return Err(ShardError::Mismatch(format!(
                    "{what}: shard {} ran with other --quick or runs",
                    p.shard
                )));
            }
        }
        check_shards(&what, &parts.iter().map(|p| p.shard).collect::<Vec<_>>())?;
        let mut by_case: BTreeMap<(String, String), Vec<Replication>> = BTreeMap::new();
        for c in parts.into_iter().flat_map(|p| p.cases) {
            by_case
                .entry((c.series, c.point))
                .or_default()
                .extend(c.replications);
        }
        let mut cases = Vec::new();
        let mut events = 0;
        for s in &self.series {
            for p in &self.points {
                let case = format!("{what}, case {} @ {}", s.name, p.label);
                let reps = by_case
                    .remove(&(s.name.clone(), p.label.clone()))
                    .unwrap_or_default();
                let results = in_order(&case, runs, reps)?;
                let sc = self.scenario(template, s, p, quick)?;
                let end = sc.duration_ns()?;
                let summary = summarise_fixed(&sc, runs, level, sc.seed, end, results);
                events += summary.events;
                let case = self
                    .case_result(&s.name, p, summary)
                    .map_err(|e| ShardError::Mismatch(format!("{what}: {e}")))?;
                cases.push(case);
            }
        }
        if let Some((series, point)) = by_case.keys().next() {
            return Err(ShardError::Mismatch(format!(
                "{what}: a partial holds case {series} @ {point}, which the reproduction does not have"
            )));
        }
        Ok(self.finish(
            runs,
            ScenarioReplication::Fixed { runs },
            level,
            cases,
            events,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs_parse_and_bad_ones_are_named() {
        assert_eq!(
            "2/5".parse::<Shard>().unwrap(),
            Shard { index: 2, count: 5 }
        );
        for bad in ["5/5", "1/0", "x/3", "3", "-1/3", ""] {
            let e = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(e.contains("I/N"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_item_has_exactly_one_shard() {
        for n in 1..6u32 {
            for k in 0..40u64 {
                let owners = (0..n)
                    .filter(|&i| Shard { index: i, count: n }.owns(k))
                    .count();
                assert_eq!(owners, 1);
            }
        }
    }

    #[test]
    fn floats_survive_the_partial_file_bit_for_bit() {
        for v in [
            0.1 + 0.2,
            1.0 / 3.0,
            5e-324,
            1.7976931348623157e308,
            -0.0,
            f64::INFINITY,
        ] {
            let text = serde_json::to_string(&ExactF64(v)).unwrap();
            let back: ExactF64 = serde_json::from_str(&text).unwrap();
            assert_eq!(back.0.to_bits(), v.to_bits(), "{text}");
        }
        let nan: ExactF64 =
            serde_json::from_str(&serde_json::to_string(&ExactF64(f64::NAN)).unwrap()).unwrap();
        assert!(nan.0.is_nan());
        assert!(serde_json::from_str::<ExactF64>("\"fast\"").is_err());
    }

    #[test]
    fn missing_and_doubled_shards_are_refused() {
        let s = |index, count| Shard { index, count };
        assert!(check_shards("t", &[s(0, 2), s(1, 2)]).is_ok());
        let e = check_shards("t", &[s(0, 3), s(2, 3)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("1/3"), "{e}");
        let e = check_shards("t", &[s(0, 2), s(0, 2)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
        let e = check_shards("t", &[s(0, 2), s(1, 3)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("beside"), "{e}");
    }
}
