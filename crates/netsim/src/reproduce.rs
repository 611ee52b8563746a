//! Reproductions of the seeds' experiments, as data: a reproduction file names a scenario
//! template (a scenario TOML with `{VAR}` placeholders), the series and points that fill it, the
//! flow to measure, the seeds' figures, and the seeds' conclusion as checkable claims.
//! `docs/scenarios.md` documents the format.

use crate::metrics::Confidence;
use crate::scenario::{
    run_replicated, FlowSummary, Replication, RunsSpec, Scenario, ScenarioError, Stat,
    DEFAULT_MAX_RUNS,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A reproduction file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reproduction {
    pub name: String,
    pub title: String,
    /// Where in the seeds the experiment comes from.
    pub source: String,
    /// The scenario template, with `{VAR}` placeholders.
    pub template: String,
    /// Flow of the scenario whose figures are reported.
    pub flow: String,
    /// A link (e.g. "r1->r2") whose utilization in original bits is the metric `utilization`
    /// (thesis §4.1.2: original bits carried ÷ rate × time).
    pub link: Option<String>,
    /// The flows the metric `fairness` covers (those of them a case has); default: every flow
    /// but web sources.
    pub fairness_flows: Option<Vec<String>>,
    pub x_label: String,
    /// "linear", "log" or "categories".
    pub x_axis: String,
    /// Metric plotted: goodput_bps, fwd_efficiency, reverse_bps or completion_s.
    pub plot_metric: String,
    pub y_label: String,
    /// Divide plotted values by this (e.g. 1000 for kb/s).
    #[serde(default = "one")]
    pub plot_scale: f64,
    /// Title of the plot (default: `title`).
    pub plot_title: Option<String>,
    /// Optional second plot of another metric (e.g. reverse_bps).
    pub plot2_metric: Option<String>,
    pub y2_label: Option<String>,
    /// Title of the second plot (default: `title`, then the second plot's y label).
    pub plot2_title: Option<String>,
    /// Replications of the full run (a count, or a rule such as "until-5%", capped by
    /// `max_runs`) and of `--quick`.
    pub runs: RunsSpec,
    pub max_runs: Option<u32>,
    pub quick_runs: u32,
    /// Variables for every case; `quick_vars` override them with `--quick`.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    #[serde(default)]
    pub quick_vars: BTreeMap<String, String>,
    #[serde(rename = "series")]
    pub series: Vec<Case>,
    #[serde(rename = "point")]
    pub points: Vec<Point>,
    #[serde(rename = "seed", default)]
    pub seeds: Vec<SeedFigure>,
    #[serde(rename = "claim", default)]
    pub claims: Vec<Claim>,
    /// The seeds' qualitative conclusion, in one line.
    pub conclusion: String,
    /// Why our set-up or figures differ from the seeds' (modelling causes found), for the
    /// report.
    pub note: Option<String>,
    /// Confidence level of the reported intervals: 0.95 (default) or 0.99.
    pub confidence: Option<f64>,
}

fn one() -> f64 {
    1.0
}

/// A series: a name and the variables that select it (protocol, options).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

/// A point on the x axis.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub x: f64,
    pub label: String,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

/// A figure the seeds report for one (series, point, metric).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFigure {
    pub series: String,
    /// Another flow of the case than the reproduction's `flow` (per-flow figures).
    pub flow: Option<String>,
    pub point: String,
    pub metric: String,
    pub value: f64,
    /// Where the figure is in the seeds.
    pub source: String,
}

/// One side of a claim.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operand {
    pub series: Option<String>,
    /// Another flow of the case than the reproduction's `flow`.
    pub flow: Option<String>,
    pub point: Option<String>,
    pub metric: Option<String>,
    /// A constant instead of a measured value.
    pub value: Option<f64>,
}

/// A checkable statement: `lhs op factor × rhs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub text: String,
    pub lhs: Operand,
    /// "<", "<=", ">" or ">=".
    pub op: String,
    #[serde(default = "one")]
    pub factor: f64,
    pub rhs: Operand,
}

/// Result of one (series, point) case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub series: String,
    pub point: String,
    pub x: f64,
    /// Replications of this case.
    pub runs: u32,
    pub flow: FlowSummary,
    /// Every flow of the case (web sources included), for claims and seeds naming another.
    pub flows: Vec<FlowSummary>,
    /// Jain's fairness index of the flows' mean throughputs, as the thesis computes it
    /// (§4.1.2: enough runs, then fairness of the sample means); it has no interval (NaN).
    pub fairness: Option<Stat>,
    /// Utilization in original bits of the reproduction's `link`.
    pub utilization: Option<Stat>,
    /// Mean deviation of the flows' mean throughputs from the ideal fair share, as a fraction
    /// of it (seed 003's fig. 8: "average throughput deviation from ideal 15 Mb/s fair share").
    /// The ideal share is what each would carry with the `link` fully used and shared equally:
    /// Σ goodput ÷ (n × utilization). Needs `link` and two flows; no interval (NaN).
    pub fair_share_deviation: Option<Stat>,
}

/// The mean goodputs of `flows`, web sources excluded (only those named in `only`, if given).
fn mean_goodputs(flows: &[FlowSummary], only: Option<&[String]>) -> Vec<f64> {
    flows
        .iter()
        .filter(|f| f.protocol != "web")
        .filter(|f| only.is_none_or(|o| o.contains(&f.name)))
        .map(|f| f.goodput_bps.mean)
        .collect()
}

/// Jain's index of the mean throughputs of `flows` (web sources excluded; only those named in
/// `only`, if given); None with fewer than two.
fn jain_of_means(flows: &[FlowSummary], only: Option<&[String]>) -> Option<Stat> {
    let means = mean_goodputs(flows, only);
    (means.len() >= 2).then(|| Stat {
        mean: crate::metrics::jain_index(&means),
        ci95: f64::NAN,
        ci: f64::NAN,
        sd: f64::NAN,
    })
}

/// [`CaseResult::fair_share_deviation`] of `flows` (selected as [`jain_of_means`] does) at
/// `utilization` of the link.
fn fair_share_deviation(
    flows: &[FlowSummary],
    only: Option<&[String]>,
    utilization: Option<Stat>,
) -> Option<Stat> {
    let means = mean_goodputs(flows, only);
    let u = utilization?.mean;
    if means.len() < 2 || u.is_nan() || u <= 0.0 {
        return None;
    }
    let ideal = means.iter().sum::<f64>() / (means.len() as f64 * u);
    let dev = means.iter().map(|g| (g - ideal).abs()).sum::<f64>() / (means.len() as f64 * ideal);
    Some(Stat {
        mean: dev,
        ci95: f64::NAN,
        ci: f64::NAN,
        sd: f64::NAN,
    })
}

impl CaseResult {
    /// The case's figures from a scenario's summary: `flow` is the measured flow, `link` the
    /// link whose utilization is reported.
    pub fn from_summary(
        series: &str,
        point: &str,
        x: f64,
        summary: crate::scenario::Summary,
        flow: &str,
        link: Option<&str>,
        fairness_flows: Option<&[String]>,
    ) -> Result<CaseResult, ScenarioError> {
        let main = summary
            .flows
            .iter()
            .find(|f| f.name == flow)
            .cloned()
            .ok_or_else(|| bad(format!("scenario has no flow named '{flow}'")))?;
        let utilization = match link {
            None => None,
            Some(l) => Some(
                summary
                    .links
                    .iter()
                    .find(|s| s.name == l)
                    .map(|s| s.original_utilization)
                    .ok_or_else(|| bad(format!("scenario has no link named '{l}'")))?,
            ),
        };
        Ok(CaseResult {
            series: series.to_string(),
            point: point.to_string(),
            x,
            runs: summary.runs,
            flow: main,
            fairness: jain_of_means(&summary.flows, fairness_flows),
            fair_share_deviation: fair_share_deviation(&summary.flows, fairness_flows, utilization),
            flows: summary.flows,
            utilization,
        })
    }

    /// A metric of the measured flow, or of the case (`fairness`, `utilization`).
    pub fn metric(&self, name: &str) -> Option<Stat> {
        match name {
            "fairness" => self.fairness,
            "utilization" => self.utilization,
            "fair_share_deviation" => self.fair_share_deviation,
            _ => metric(&self.flow, name),
        }
    }

    /// A metric of the flow named `flow` (None: the measured flow) or of the case.
    pub fn flow_metric(&self, flow: Option<&str>, name: &str) -> Option<Stat> {
        match flow {
            None => self.metric(name),
            Some(f) => self
                .flows
                .iter()
                .find(|s| s.name == f)
                .and_then(|s| metric(s, name)),
        }
    }
}

/// A claim and whether it held.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimResult {
    pub text: String,
    pub lhs: f64,
    /// The right side with the claim's factor applied.
    pub rhs: f64,
    pub holds: bool,
    /// It holds, but the difference of the sides is within its 95 % interval (the sides'
    /// half-widths added in quadrature, as for independent samples): the runs cannot tell
    /// the two apart, so the agreement is a tie, not the clear ordering the seeds report. False
    /// where a side has no interval (fairness indices, a single run).
    pub close: bool,
    /// The comparison as checked, with labels, units and the threshold: "split STP @ 300 ms
    /// 1228.3 kb/s ≥ 0.9 × split TCP @ 300 ms 1366.0 kb/s".
    pub shown: String,
}

/// One side of a claim as measured: what it is (e.g. "split TCP @ 300 ms"; empty for a
/// constant), its metric (None: a constant, shown in the other side's unit) and its value.
#[derive(Debug, Clone)]
pub struct Side {
    pub label: String,
    pub metric: Option<String>,
    pub value: f64,
    /// Half-width of the value's 95 % confidence interval over the runs: 0 for a constant, NaN
    /// where there is none (a fairness index, a single run).
    pub ci95: f64,
}

/// A metric's value in the reports' units: `*_bps` and `*_kbps` in kb/s, `*_s` in seconds,
/// shares in percent, efficiencies, fairness and utilization as fractions, counts with one
/// decimal. The one formatter of the scenario and web reproductions' tables and claims.
pub fn format_metric(metric: &str, v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    if metric.ends_with("_kbps") {
        format!("{v:.1} kb/s")
    } else if metric.ends_with("_bps") {
        format!("{:.1} kb/s", v / 1e3)
    } else if metric.ends_with("_s") {
        format!("{v:.2} s")
    } else if metric == "completed"
        || metric == "model_left_out"
        || metric.ends_with("_share")
        || metric == "fair_share_deviation"
    {
        format!("{:.0} %", v * 100.0)
    } else if matches!(metric, "fwd_efficiency" | "fairness" | "utilization") {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}

/// Checks `lhs op factor × rhs` and says it in words; None for an unknown operator.
pub fn compare(text: &str, lhs: &Side, op: &str, factor: f64, rhs: &Side) -> Option<ClaimResult> {
    let r = rhs.value * factor;
    // The difference's 95 % interval, the sides taken as independent.
    let margin = lhs.ci95.hypot(factor * rhs.ci95);
    let (holds, sym) = match op {
        "<" => (lhs.value < r, "<"),
        "<=" => (lhs.value <= r, "≤"),
        ">" => (lhs.value > r, ">"),
        ">=" => (lhs.value >= r, "≥"),
        _ => return None,
    };
    let unit_of = |s: &Side, other: &Side| {
        s.metric
            .clone()
            .or_else(|| other.metric.clone())
            .unwrap_or_default()
    };
    let side = |s: &Side, other: &Side| {
        let v = format_metric(&unit_of(s, other), s.value);
        if s.label.is_empty() {
            v
        } else {
            format!("{} {v}", s.label)
        }
    };
    let times = if factor == 1.0 {
        String::new()
    } else {
        format!("{factor} × ")
    };
    Some(ClaimResult {
        text: text.to_string(),
        lhs: lhs.value,
        rhs: r,
        holds,
        close: holds && margin.is_finite() && (lhs.value - r).abs() <= margin,
        shown: format!("{} {sym} {times}{}", side(lhs, rhs), side(rhs, lhs)),
    })
}

/// Everything a reproduction produced.
#[derive(Debug, Clone, Serialize)]
pub struct ReproResult {
    pub name: String,
    pub title: String,
    /// Most replications of a case.
    pub runs: u32,
    /// How the replications were decided.
    pub replication: Replication,
    /// Confidence level of every `ci`.
    pub confidence: f64,
    pub cases: Vec<CaseResult>,
    pub claims: Vec<ClaimResult>,
    pub conclusion_holds: bool,
    pub events: u64,
}

/// Reads a metric of a flow summary.
pub fn metric(f: &FlowSummary, name: &str) -> Option<Stat> {
    match name {
        "goodput_bps" => Some(f.goodput_bps),
        "fwd_efficiency" => Some(f.fwd_efficiency),
        "reverse_bps" => Some(f.reverse_bps),
        "completion_s" => f.completion_s,
        "retransmissions" => Some(f.retransmissions),
        _ => None,
    }
}

fn bad(what: String) -> ScenarioError {
    ScenarioError::Field {
        field: "reproduction".into(),
        reason: what,
    }
}

fn substitute(template: &str, vars: &BTreeMap<String, String>) -> Result<String, ScenarioError> {
    // Values may themselves contain placeholders: substitute until nothing changes (bounded).
    let mut s = template.to_string();
    for _ in 0..8 {
        let before = s.clone();
        for (k, v) in vars {
            s = s.replace(&format!("{{{k}}}"), v);
        }
        if s == before {
            break;
        }
    }
    if let Some(i) = s.find('{') {
        let rest = &s[i..];
        if let Some(j) = rest.find('}') {
            let name = &rest[1..j];
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                return Err(bad(format!("template variable {{{name}}} has no value")));
            }
        }
    }
    Ok(s)
}

impl Reproduction {
    /// Parses a reproduction file; `template_text` is the scenario template it names.
    pub fn from_toml(text: &str) -> Result<Reproduction, ScenarioError> {
        toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))
    }

    /// The scenario of one case.
    pub fn scenario(
        &self,
        template: &str,
        series: &Case,
        point: &Point,
        quick: bool,
    ) -> Result<Scenario, ScenarioError> {
        let mut vars = self.vars.clone();
        if quick {
            vars.extend(self.quick_vars.clone());
        }
        vars.extend(series.vars.clone());
        vars.extend(point.vars.clone());
        vars.insert("SERIES".into(), series.name.clone());
        Scenario::from_toml(&substitute(template, &vars)?)
            .map_err(|e| bad(format!("case {} @ {}: {e}", series.name, point.label)))
    }

    /// How many replications a case gets: `quick_runs` with `--quick`, else `runs` (a count or a
    /// rule).
    pub(crate) fn rule(&self, quick: bool) -> Result<Replication, ScenarioError> {
        Ok(if quick {
            Replication::Fixed {
                runs: self.quick_runs.max(1),
            }
        } else {
            match &self.runs {
                RunsSpec::Count(n) => Replication::Fixed { runs: (*n).max(1) },
                RunsSpec::Rule(r) => {
                    Replication::parse_rule(r, self.max_runs.unwrap_or(DEFAULT_MAX_RUNS))
                        .map_err(|e| bad(format!("runs: {e}")))?
                }
            }
        })
    }

    /// The confidence level of the reproduction's intervals (95 % unless it says 99 %).
    pub(crate) fn level(&self) -> Result<Confidence, ScenarioError> {
        match self.confidence {
            None => Ok(Confidence::P95),
            Some(c) => Confidence::from_level(c)
                .ok_or_else(|| bad(format!("confidence {c} is not 0.95 or 0.99"))),
        }
    }

    /// Runs every case and checks the claims.
    pub fn run(
        &self,
        template: &str,
        quick: bool,
        threads: usize,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<ReproResult, ScenarioError> {
        let rule = self.rule(quick)?;
        let level = self.level()?;
        let mut runs = 0;
        let mut cases = Vec::new();
        let mut events = 0;
        for s in &self.series {
            for p in &self.points {
                let sc = self.scenario(template, s, p, quick)?;
                progress(&format!("{} @ {}", s.name, p.label));
                let summary = run_replicated(&sc, rule, level, sc.seed, threads, &|_, _| {}, None)?;
                runs = runs.max(summary.runs);
                events += summary.events;
                cases.push(self.case_result(&s.name, p, summary)?);
            }
        }
        self.finish(runs, rule, level, cases, events)
    }

    /// One case's result from its replications' summary, with this reproduction's main flow,
    /// link and fairness flows (the one place a run's and a merged shard's cases are made).
    pub(crate) fn case_result(
        &self,
        series: &str,
        p: &Point,
        summary: crate::scenario::Summary,
    ) -> Result<CaseResult, ScenarioError> {
        CaseResult::from_summary(
            series,
            &p.label,
            p.x,
            summary,
            &self.flow,
            self.link.as_deref(),
            self.fairness_flows.as_deref(),
        )
    }

    /// Checks the claims against the cases' results and assembles the reproduction's result.
    pub(crate) fn finish(
        &self,
        runs: u32,
        rule: Replication,
        level: Confidence,
        cases: Vec<CaseResult>,
        events: u64,
    ) -> Result<ReproResult, ScenarioError> {
        let claims = self
            .claims
            .iter()
            .map(|c| self.check(c, &cases))
            .collect::<Result<Vec<_>, _>>()?;
        let conclusion_holds = claims.iter().all(|c| c.holds);
        Ok(ReproResult {
            name: self.name.clone(),
            title: self.title.clone(),
            runs,
            replication: rule,
            confidence: level.level(),
            cases,
            claims,
            conclusion_holds,
            events,
        })
    }

    fn value(&self, o: &Operand, cases: &[CaseResult]) -> Result<Side, ScenarioError> {
        if let Some(v) = o.value {
            return Ok(Side {
                label: String::new(),
                metric: o.metric.clone(),
                value: v,
                ci95: 0.0,
            });
        }
        let (Some(s), Some(p), Some(m)) = (&o.series, &o.point, &o.metric) else {
            return Err(bad(
                "a claim operand needs value, or series + point + metric".into(),
            ));
        };
        let case = cases
            .iter()
            .find(|c| &c.series == s && &c.point == p)
            .ok_or_else(|| bad(format!("claim names unknown case {s} @ {p}")))?;
        let label = match &o.flow {
            Some(f) => format!("{s} @ {p} ({f})"),
            None => format!("{s} @ {p}"),
        };
        case.flow_metric(o.flow.as_deref(), m)
            .map(|st| Side {
                label,
                metric: Some(m.clone()),
                value: st.mean,
                ci95: st.ci95,
            })
            .ok_or_else(|| {
                bad(format!(
                    "claim names unknown or missing metric '{m}'{}",
                    o.flow
                        .as_ref()
                        .map_or(String::new(), |f| format!(" of flow '{f}'"))
                ))
            })
    }

    fn check(&self, c: &Claim, cases: &[CaseResult]) -> Result<ClaimResult, ScenarioError> {
        let lhs = self.value(&c.lhs, cases)?;
        let rhs = self.value(&c.rhs, cases)?;
        compare(&c.text, &lhs, &c.op, c.factor, &rhs).ok_or_else(|| {
            bad(format!(
                "unknown claim operator '{}' (accepted: <, <=, >, >=)",
                c.op
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
name = "t-{SERIES}"
duration = "10s"
[[node]]
name = "a"
[[node]]
name = "b"
[[link]]
a = "a"
b = "b"
rate = "2Mbps"
delay = "50ms"
queue_packets = 40
loss = {LOSS}
[[flow]]
name = "main"
protocol = "tcp"
from = "a"
to = "b"
"#;

    const REPRO: &str = r#"
name = "t"
title = "t"
source = "s"
template = "t.template.toml"
flow = "main"
x_label = "x"
x_axis = "linear"
plot_metric = "goodput_bps"
y_label = "y"
runs = "until-5%"
max_runs = 40
quick_runs = 2
confidence = 0.99
conclusion = "c"
[[series]]
name = "tcp"
[[point]]
x = 1
label = "1%"
vars = { LOSS = "0.01" }
[[claim]]
text = "positive"
lhs = { series = "tcp", point = "1%", metric = "goodput_bps" }
op = ">"
rhs = { value = 0.0 }
"#;

    #[test]
    fn until_rule_and_99_percent_in_reproductions() {
        let r = Reproduction::from_toml(REPRO).unwrap();
        let res = r.run(TEMPLATE, false, 2, &|_| {}).unwrap();
        assert!(matches!(
            res.replication,
            Replication::Until { max_runs: 40, .. }
        ));
        assert_eq!(res.confidence, 0.99);
        let c = &res.cases[0];
        assert!(c.runs >= 5 && c.runs <= 40, "{}", c.runs);
        let g = c.flow.goodput_bps;
        assert!(g.ci > g.ci95);
        assert!(g.sd / f64::from(c.runs).sqrt() <= 0.05 * g.mean || c.runs == 40);
        let quick = r.run(TEMPLATE, true, 2, &|_| {}).unwrap();
        assert_eq!(quick.runs, 2);
        let bad = REPRO.replace("until-5%", "until-never");
        let e = Reproduction::from_toml(&bad)
            .unwrap()
            .run(TEMPLATE, false, 1, &|_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("until-never"), "{e}");
    }

    #[test]
    fn claims_are_shown_with_labels_units_and_threshold() {
        let side = |label: &str, metric: Option<&str>, value| Side {
            label: label.into(),
            metric: metric.map(str::to_string),
            value,
            ci95: 0.0,
        };
        let c = compare(
            "t",
            &side("split STP @ 300 ms", Some("goodput_bps"), 1_228_294.645_9),
            ">=",
            0.9,
            &side("split TCP @ 300 ms", Some("goodput_bps"), 1_366_000.0),
        )
        .unwrap();
        assert!(!c.holds);
        assert_eq!(
            c.shown,
            "split STP @ 300 ms 1228.3 kb/s ≥ 0.9 × split TCP @ 300 ms 1366.0 kb/s"
        );
        assert!((c.rhs - 0.9 * 1_366_000.0).abs() < 1e-6);
        // A constant takes the measured side's unit.
        let c = compare(
            "t",
            &side("web / STP", Some("page_s"), 15.62),
            "<",
            1.0,
            &side("", None, 10.0),
        )
        .unwrap();
        assert_eq!(c.shown, "web / STP 15.62 s < 10.00 s");
        assert!(compare("t", &c_side(), "=~", 1.0, &c_side()).is_none());
        assert_eq!(format_metric("fwd_efficiency", 0.93812), "0.938");
        assert_eq!(format_metric("completed", 0.5), "50 %");
        assert_eq!(format_metric("rev_kbps", 6.84), "6.8 kb/s");
    }

    /// A claim that holds by less than the runs' intervals is marked close (a tie); one that
    /// holds by more, fails, or has a side without an interval is not.
    #[test]
    fn a_claim_holding_within_the_intervals_is_close() {
        let side = |value, ci95| Side {
            label: "s".into(),
            metric: Some("goodput_bps".into()),
            value,
            ci95,
        };
        let check = |l: Side, op, r: Side| compare("t", &l, op, 1.0, &r).unwrap();
        let tie = check(side(176.6, 3.0), ">", side(176.4, 2.0));
        assert!(tie.holds && tie.close);
        let clear = check(side(190.0, 3.0), ">", side(176.4, 2.0));
        assert!(clear.holds && !clear.close);
        let fails = check(side(176.4, 3.0), ">", side(176.6, 2.0));
        assert!(!fails.holds && !fails.close);
        let no_interval = check(side(0.578, f64::NAN), ">", side(0.577, f64::NAN));
        assert!(no_interval.holds && !no_interval.close);
        // The factor scales the right side's interval with its value.
        let scaled = compare("t", &side(95.0, 1.0), "<=", 0.5, &side(200.0, 11.0)).unwrap();
        assert!(scaled.holds && scaled.close, "{scaled:?}");
    }

    fn c_side() -> Side {
        Side {
            label: String::new(),
            metric: None,
            value: 1.0,
            ci95: 0.0,
        }
    }

    #[test]
    fn substitution_reports_missing_variables() {
        let mut v = BTreeMap::new();
        v.insert("RATE".to_string(), "1Mbps".to_string());
        assert_eq!(
            substitute("rate = \"{RATE}\"", &v).unwrap(),
            "rate = \"1Mbps\""
        );
        let e = substitute("delay = \"{DELAY}\"", &v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("{DELAY}"), "{e}");
    }
}
