//! Scenarios as data: a TOML description of topology, flows, protocols and their options,
//! duration and replications (`docs/scenarios.md` documents the format), turned into a `Sim`,
//! run (replications in parallel, each deterministic per seed) and summarised per flow.

use crate::gateway::{GatewayEnd, GatewayEndSpec, GatewaySpec, Hop, SplitGateway};
use crate::metrics::{mean_ci, sample_sd, Confidence, Metrics};
use crate::packet::{Addr, Direction, FlowId, LinkId, NodeId};
use crate::sim::{Sim, SimError, Time, SEC};
use crate::stp_agent::{Framing, StpAgent, StpRole};
use crate::tcp::{IncreasePolicy, InitialWindow as TcpInitialWindow, TcpAgent, TcpConfig, Variant};
use crate::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use crate::web::{WebClient, WebServer};
use linkmodel::{Delay, Discipline, LinkConfig, Loss, Outage, QueueLimit, RedParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stp::EndpointConfig;

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Simulated time per run, e.g. "60s".
    pub duration: String,
    /// Replications (each with its own seed): a count, or `"until-5%"` (replicate until every
    /// flow's throughput has a standard error within 5 % of its mean, up to `max_runs`).
    #[serde(default)]
    pub runs: RunsSpec,
    /// Cap of a `runs = "until-…%"` rule (default 200).
    pub max_runs: Option<u32>,
    /// Confidence level of the reported intervals: 0.95 (default) or 0.99.
    pub confidence: Option<f64>,
    /// Seed of the first replication; replication i uses seed + i.
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(rename = "node", default)]
    pub nodes: Vec<NodeSpec>,
    #[serde(rename = "link", default)]
    pub links: Vec<LinkSpec>,
    #[serde(rename = "flow", default)]
    pub flows: Vec<FlowSpec>,
    #[serde(rename = "web", default)]
    pub web: Vec<WebSpec>,
    /// Static routes that override the shortest paths (e.g. a different return path).
    #[serde(rename = "route", default)]
    pub routes: Vec<RouteSpec>,
    /// A constellation as the network (`crate::leo_scenario`): with it, the scenario has
    /// `[[ground_station]]`s and flows between them instead of nodes and links.
    #[serde(default)]
    pub constellation: Option<crate::leo_scenario::ConstellationSpec>,
    #[serde(rename = "ground_station", default)]
    pub ground_stations: Vec<crate::leo_scenario::GroundStationSpec>,
}

/// A static route: at node `at`, packets for `to` leave on link `via` ("at->next").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub at: String,
    pub to: String,
    pub via: String,
}

/// Web-like background traffic between a server and a client (`web` module).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSpec {
    pub name: String,
    pub server: String,
    pub client: String,
    /// Mean offered load of responses, e.g. "150kbps".
    pub load: String,
    pub start: Option<String>,
    #[serde(default)]
    pub tcp: Option<TcpSpec>,
}

/// `runs` as written: a count or a rule such as `"until-5%"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "CountOrText")]
pub enum RunsSpec {
    Count(u32),
    Rule(String),
}

impl From<CountOrText> for RunsSpec {
    fn from(v: CountOrText) -> RunsSpec {
        match v {
            CountOrText::Count(n) => RunsSpec::Count(n),
            CountOrText::Text(t) => RunsSpec::Rule(t),
        }
    }
}

impl Default for RunsSpec {
    fn default() -> Self {
        RunsSpec::Count(1)
    }
}

/// How many replications to run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum Replication {
    /// Exactly `runs` replications.
    Fixed { runs: u32 },
    /// Replicate until every flow's throughput (web sources excluded) has a standard error of
    /// the mean, σ/√n, at most `percent` % of its mean; at least `min_runs`, at most `max_runs`.
    /// The seeds (thesis §4.1.2) state the rule as the sample standard deviation within 5 % of
    /// the mean, "generally around fifty runs": a sample standard deviation does not shrink
    /// with more runs, so only its standard-error reading is a stopping rule.
    Until {
        percent: f64,
        min_runs: u32,
        max_runs: u32,
    },
}

/// Fewest replications of an `until` rule (a standard deviation needs a few samples).
pub const MIN_ADAPTIVE_RUNS: u32 = 5;
/// Default cap of an `until` rule.
pub const DEFAULT_MAX_RUNS: u32 = 200;

impl Replication {
    /// Parses `"until-5%"` (any positive percentage) with the cap `max_runs`.
    pub fn parse_rule(rule: &str, max_runs: u32) -> Result<Replication, String> {
        let pct = rule
            .strip_prefix("until-")
            .and_then(|r| r.strip_suffix('%'))
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p > 0.0 && *p < 100.0)
            .ok_or_else(|| {
                format!("'{rule}' is not a replication count or a rule like \"until-5%\"")
            })?;
        if max_runs < MIN_ADAPTIVE_RUNS {
            return Err(format!("max_runs must be at least {MIN_ADAPTIVE_RUNS}"));
        }
        Ok(Replication::Until {
            percent: pct,
            min_runs: MIN_ADAPTIVE_RUNS,
            max_runs,
        })
    }
}
fn default_seed() -> u64 {
    1
}

/// A node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
}

/// Parameters of one direction of a link; every field optional in `reverse`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkParams {
    /// e.g. "1.5Mbps".
    pub rate: Option<String>,
    /// One-way propagation delay, e.g. "260ms".
    pub delay: Option<String>,
    /// Piecewise-constant delay: [["0s", "250ms"], ["15s", "270ms"], ...].
    pub delay_trace: Option<Vec<[String; 2]>>,
    /// Period after which `delay_trace` repeats, e.g. "15s".
    pub delay_trace_period: Option<String>,
    /// Delay over time from a file in the emulators' delay-trace format (`TIME_MS DELAY_MS`
    /// lines, e.g. written by `satstp leo trace`); a relative path is taken from the working
    /// directory.
    pub delay_trace_file: Option<String>,
    /// The rate over time from a mahimahi packet-delivery trace file (one time in ms per line,
    /// each a 1500-byte delivery opportunity; the format the IP-level emulator's
    /// `--up-rate-trace` reads): the queue releases packets at the trace's opportunities instead
    /// of at `rate`, which may then be left out (it defaults to the trace's mean rate). A
    /// relative path is taken from the working directory. Not with a RED queue.
    pub rate_trace_file: Option<String>,
    /// Delay and outages of a LEO path computed when the scenario is built:
    /// "CONSTELLATION:FROM:TO[:ROUTING]" (docs/leo.md), sampled every 10 ms.
    pub leo: Option<String>,
    /// Orbit time at which the `leo` path starts, e.g. "57600s" (default 0s).
    pub leo_start: Option<String>,
    /// Drop-tail limit in packets. By default the packet being serialized counts as queued
    /// (a 19-packet queue holds 18 waiting packets while one is sent).
    pub queue_packets: Option<u32>,
    /// Count only waiting packets against `queue_packets`, as ns-2's DropTail does (the limit
    /// becomes `queue_packets + 1` in this model's convention).
    pub queue_waiting_only: Option<bool>,
    /// Drop-tail limit in bytes, e.g. "64KB".
    pub queue_bytes: Option<String>,
    /// Random packet loss probability.
    pub loss: Option<f64>,
    /// Bit-error rate.
    pub ber: Option<f64>,
    /// Gilbert–Elliott loss: p_good_to_bad, p_bad_to_good, loss_good, loss_bad.
    pub gilbert_elliott: Option<[f64; 4]>,
    /// Outages: [["10s", "2s"], ...] as (start, duration).
    pub outages: Option<Vec<[String; 2]>>,
    /// Random Early Detection instead of drop-tail (the queue limit stays the hard limit).
    pub red: Option<RedSpec>,
    // ACK management of this direction's queue (`crate::ackmgmt`; not inherited by `reverse`).
    /// ACK filtering: a queued cumulative ACK replaces the older ones of its connection.
    pub ack_filter: Option<bool>,
    /// ACK pacing at a forward gateway: `{ watch = "gw->sat", threshold_packets = 10 }`.
    pub ack_pacing: Option<AckPacingSpec>,
    /// Window overwriting: ACKs crossing the link advertise at most this window, e.g. "64KB".
    pub window_overwrite: Option<String>,
    /// Drop from front: a pure ACK finding the queue full pushes out the oldest waiting ACK.
    pub ack_drop_front: Option<bool>,
}

/// ACK pacing on a link carrying ACKs back to the senders (`crate::ackmgmt`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckPacingSpec {
    /// The forward link whose queue is watched, "x->y".
    pub watch: String,
    /// ACKs wait while that queue holds at least this many packets.
    pub threshold_packets: u32,
}

/// RED parameters; any omitted take the link model's defaults (min_th 5, max_th 15 packets,
/// max_p 0.1, w_q 0.002, gentle).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedSpec {
    pub min_th: Option<f64>,
    pub max_th: Option<f64>,
    pub max_p: Option<f64>,
    pub w_q: Option<f64>,
    pub gentle: Option<bool>,
    pub mean_packet_bytes: Option<u32>,
}

/// A duplex link between `a` and `b`: `a→b` uses the top-level parameters, `b→a` the same
/// unless overridden in `reverse`. With `simplex = true` only `a→b` exists.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub a: String,
    pub b: String,
    /// One-way link `a→b` only (e.g. a broadcast satellite downlink).
    #[serde(default)]
    pub simplex: bool,
    #[serde(flatten)]
    pub forward: LinkParams,
    #[serde(default)]
    pub reverse: Option<LinkParams>,
}

/// STP options of a flow: the engine's TOML schema ([`stp::ConfigOptions`]: the same keys,
/// units in the names, as a gateway file's `[terminal.stp]`), plus the simulator's `framing`.
/// Every key is optional; defaults are the engine's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct StpSpec {
    /// "udp" (default: STP/UDP/IP, 28 bytes below STP) or "ip" (STP directly over IP, 20 bytes,
    /// as in the seeds' simulations and kernel implementation).
    pub framing: Option<String>,
    /// Every other key: overrides of the engine's configuration.
    pub options: stp::ConfigOptions,
}

impl TryFrom<toml::Table> for StpSpec {
    type Error = String;

    fn try_from(mut table: toml::Table) -> Result<Self, String> {
        let framing = match table.remove("framing") {
            None => None,
            Some(toml::Value::String(s)) => Some(s),
            Some(other) => {
                return Err(format!(
                    "framing: expected \"udp\" or \"ip\", found a {}",
                    other.type_str()
                ))
            }
        };
        let options = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_string())?;
        Ok(StpSpec { framing, options })
    }
}

/// TCP options of a flow (all optional; defaults are the model's).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSpec {
    /// "reno", "newreno", "sack-reno" or "sack-newreno".
    pub variant: Option<String>,
    /// Data bytes per segment.
    pub mss: Option<u32>,
    /// Segments (`1`, `"2"`, `10` ...) or "4kss".
    pub initial_window: Option<CountOrText>,
    pub delayed_ack: Option<bool>,
    /// Longest delay of an ACK, e.g. "200ms".
    pub delayed_ack_timeout: Option<String>,
    /// Duplicate ACKs that trigger fast retransmit (default 3).
    pub dupack_threshold: Option<u32>,
    /// Send buffer (written, unacknowledged bytes), e.g. "64KB" (default unlimited).
    pub send_buffer: Option<String>,
    /// Initial slow-start threshold, e.g. "64KB" (default unlimited).
    pub initial_ssthresh: Option<String>,
    /// Retransmission timeout before the first RTT sample, e.g. "3s" (default 1 s).
    pub initial_rto: Option<String>,
    /// Upper bound of the retransmission timeout (default 64 s).
    pub max_rto: Option<String>,
    /// Modern TCP: an RTT sample from every ACK (timestamps, RFC 7323) instead of one per RTT.
    pub timestamps: Option<bool>,
    /// Modern TCP: RFC 3042 limited transmit.
    pub limited_transmit: Option<bool>,
    /// SACK loss marking: "appendix-a" (default, the seeds') or "rfc6675".
    pub loss_marking: Option<String>,
    /// Fast recovery: "inflation" (default, the seeds' window inflation) or "prr" (RFC 6937).
    pub recovery: Option<String>,
    /// Acknowledge every k-th full segment.
    pub ack_every: Option<u32>,
    /// Receive buffer (offered window), e.g. "240KB".
    pub rcv_window: Option<String>,
    pub window_scaling: Option<bool>,
    pub sack: Option<bool>,
    /// RTO clock granularity, e.g. "500ms".
    pub rto_granularity: Option<String>,
    /// The seeds' coarse timer (`TcpConfig::coarse_timer`).
    pub coarse_timer: Option<bool>,
    pub min_rto: Option<String>,
    /// "standard", "constant-rate" (with `increase_param` c) or "increase-by-k" (with K).
    pub increase: Option<String>,
    pub increase_param: Option<f64>,
    pub byte_counting: Option<bool>,
    /// Send data on the SYN (T/TCP style).
    pub syn_data: Option<bool>,
}

/// A value written as a number or as text (`initial_window = 1` or `"4kss"`).
pub use linkmodel::units::serde::CountOrText;

/// A flow between two nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    pub name: String,
    /// This many identical flows, named NAME-1 … NAME-N (default 1: one flow named NAME).
    pub count: Option<u32>,
    /// "stp".
    pub protocol: String,
    /// Data source node.
    pub from: String,
    /// Data sink node.
    pub to: String,
    /// Bytes to transfer; absent for a persistent flow.
    pub bytes: Option<String>,
    /// Start time, e.g. "1s" (default 0).
    pub start: Option<String>,
    /// How long the sender sends (constellation scenarios only; default: to the end).
    pub duration: Option<String>,
    /// Constellation scenarios only: the sender runs on an origin host behind its `from`
    /// station, over a terrestrial link of this one-way delay and rate (defaults "5ms",
    /// "1Gbps" when either is given or the flow is split).
    pub origin_delay: Option<String>,
    pub origin_rate: Option<String>,
    /// Link whose forward bytes define efficiency and whose reverse direction defines the
    /// reverse-channel use, as "x->y"; default: the slowest link on the path.
    pub bottleneck: Option<String>,
    /// Link where reverse-channel use is counted, as "x->y"; default: the bottleneck's reverse
    /// direction, or (when the bottleneck is simplex) the slowest link of the return path.
    pub reverse_channel: Option<String>,
    /// Record cwnd/sequence time series.
    #[serde(default)]
    pub trace: bool,
    #[serde(default)]
    pub stp: Option<StpSpec>,
    /// TCP options (protocol "tcp", and the source side of a "split" flow).
    #[serde(default)]
    pub tcp: Option<TcpSpec>,
    /// Node where a "split" flow is terminated and relayed.
    pub split_at: Option<String>,
    /// Transport between `split_at` and `to`: "stp" or "tcp".
    pub hop: Option<String>,
    /// TCP options of a TCP hop (default: as `tcp`).
    #[serde(default)]
    pub hop_tcp: Option<TcpSpec>,
    /// Relay buffer at the gateway, e.g. "300KB" (default 256 KB).
    pub relay_buffer: Option<String>,
    /// Striping (protocol "tcp"): carry the transfer over this many parallel TCP connections
    /// sharing its byte stream (`crate::striping`; default 1).
    #[serde(default)]
    pub stripes: Option<u32>,
    /// Striping: the block of the byte stream handed to a connection at a time, e.g. "8KB"
    /// (default 64 KB).
    #[serde(default)]
    pub stripe_block: Option<String>,
}

/// A scenario error, naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario file is not valid TOML or has unknown/missing fields: {0}")]
    Parse(String),
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
    #[error(transparent)]
    Sim(#[from] SimError),
}

fn field(field: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

fn unit<T, E: std::fmt::Display>(name: &str, r: Result<T, E>) -> Result<T, ScenarioError> {
    r.map_err(|e| field(name, e.to_string()))
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| {
            ScenarioError::Parse(stp::options::toml_error_in_words(
                text,
                &e.to_string(),
                e.message(),
                e.span(),
            ))
        })?;
        if !s.is_constellation() {
            s.replication()?;
        }
        if s.duration_ns()? == 0 {
            return Err(field(
                "duration",
                format!(
                    "\"{}\" is zero; a run must last (e.g. duration = \"120s\")",
                    s.duration
                ),
            ));
        }
        if s.is_constellation() {
            s.leo_plan()?;
            return Ok(s);
        }
        if !s.ground_stations.is_empty() {
            return Err(field(
                "ground_station",
                "needs a [constellation] table naming the satellites the stations use",
            ));
        }
        if s.nodes.is_empty() {
            return Err(field(
                "node",
                "missing: a scenario needs [[node]] and [[link]] tables (or a [constellation] with [[ground_station]]s)",
            ));
        }
        s.replication()?;
        s.confidence()?;
        // Building once checks names, units, routes and options.
        s.build(s.seed)?;
        Ok(s)
    }

    /// The replication rule of `runs` (and `max_runs`).
    pub fn replication(&self) -> Result<Replication, ScenarioError> {
        let max = self.max_runs.unwrap_or(DEFAULT_MAX_RUNS);
        match &self.runs {
            RunsSpec::Count(0) => Err(field("runs", "must be at least 1")),
            RunsSpec::Count(n) => {
                if self.max_runs.is_some() {
                    return Err(field(
                        "max_runs",
                        "only applies to a rule such as runs = \"until-5%\"",
                    ));
                }
                Ok(Replication::Fixed { runs: *n })
            }
            RunsSpec::Rule(r) => Replication::parse_rule(r, max).map_err(|e| field("runs", e)),
        }
    }

    /// The confidence level of `confidence` (0.95 unless given).
    pub fn confidence(&self) -> Result<Confidence, ScenarioError> {
        match self.confidence {
            None => Ok(Confidence::P95),
            Some(c) => Confidence::from_level(c)
                .ok_or_else(|| field("confidence", format!("{c} is not 0.95 or 0.99"))),
        }
    }

    /// Simulated duration in nanoseconds.
    pub fn duration_ns(&self) -> Result<Time, ScenarioError> {
        unit("duration", parse_duration_ns(&self.duration))
    }

    /// Applies `delay_trace_file` and `leo` of a link's parameters.
    fn leo_delay(
        &self,
        name: &str,
        p: &LinkParams,
        c: &mut LinkConfig,
    ) -> Result<(), ScenarioError> {
        if p.delay_trace_file.is_some() && p.leo.is_some() {
            return Err(field(
                format!("{name}.leo"),
                "give delay_trace_file or leo, not both",
            ));
        }
        if let Some(path) = &p.delay_trace_file {
            let f = format!("{name}.delay_trace_file");
            let text = std::fs::read_to_string(path)
                .map_err(|e| field(&f, format!("cannot read {path}: {e}")))?;
            c.delay = linkmodel::trace::parse_delay_trace(&text, path)
                .map_err(|e| field(&f, e.to_string()))?;
        }
        if let Some(spec) = &p.leo {
            let f = format!("{name}.leo");
            let path: constellation::PathSpec = spec
                .parse()
                .map_err(|e: constellation::ConstellationError| field(&f, e.to_string()))?;
            let start = match &p.leo_start {
                Some(x) => unit(&format!("{name}.leo_start"), parse_duration_ns(x))? as f64 / 1e9,
                None => 0.0,
            };
            let c0 = constellation::Constellation::preset(&path.constellation)
                .map_err(|e| field(&f, e.to_string()))?;
            let mut spec = constellation::TraceSpec::new(
                path.from,
                path.to,
                path.routing,
                self.duration_ns()? as f64 / 1e9,
                0.01,
            );
            spec.start_s = start;
            let tr =
                constellation::trace::compute(&c0, &spec).map_err(|e| field(&f, e.to_string()))?;
            if tr.delays().next().is_none() {
                return Err(field(
                    &f,
                    "no path between the two places at any time of the run",
                ));
            }
            c.delay = Delay::Trace {
                points: tr.delay_points_ns(1e-6),
                period_ns: None,
            };
            for (b, d) in tr.outages() {
                c.outages.push(Outage {
                    start_ns: (b * 1e9) as u64,
                    duration_ns: (d * 1e9).max(1.0) as u64,
                });
            }
        }
        Ok(())
    }

    fn link_config(
        &self,
        name: &str,
        p: &LinkParams,
        base: Option<&LinkConfig>,
    ) -> Result<LinkConfig, ScenarioError> {
        let rate_trace = match &p.rate_trace_file {
            Some(path) => {
                let f = format!("{name}.rate_trace_file");
                let text = std::fs::read_to_string(path)
                    .map_err(|e| field(&f, format!("cannot read {path}: {e}")))?;
                Some(
                    linkmodel::DeliveryTrace::parse(&text, path)
                        .map_err(|e| field(&f, e.to_string()))?,
                )
            }
            None => None,
        };
        let mut c = match base {
            Some(b) => b.clone(),
            None => {
                let rate = match (&p.rate, &rate_trace) {
                    (Some(r), _) => unit(&format!("{name}.rate"), parse_rate_bps(r))?,
                    (None, Some(t)) => t.mean_rate_bps().max(1),
                    (None, None) => return Err(field(format!("{name}.rate"), "missing")),
                };
                let delay = p.delay.as_deref().unwrap_or("0ms");
                LinkConfig::simple(
                    rate,
                    unit(&format!("{name}.delay"), parse_duration_ns(delay))?,
                    100,
                )
            }
        };
        if let Some(t) = rate_trace {
            c.rate_trace = Some(t);
        }
        if let Some(r) = &p.rate {
            c.rate_bps = unit(&format!("{name}.rate"), parse_rate_bps(r))?;
        }
        if let Some(d) = &p.delay {
            c.delay = Delay::Fixed(unit(&format!("{name}.delay"), parse_duration_ns(d))?);
        }
        if let Some(points) = &p.delay_trace {
            let mut v = Vec::new();
            for [t, d] in points {
                v.push((
                    unit(&format!("{name}.delay_trace"), parse_duration_ns(t))?,
                    unit(&format!("{name}.delay_trace"), parse_duration_ns(d))?,
                ));
            }
            let period = match &p.delay_trace_period {
                Some(x) => Some(unit(
                    &format!("{name}.delay_trace_period"),
                    parse_duration_ns(x),
                )?),
                None => None,
            };
            c.delay = Delay::Trace {
                points: v,
                period_ns: period,
            };
        }
        if p.queue_waiting_only == Some(true) && p.queue_packets.is_none() {
            return Err(field(
                format!("{name}.queue_waiting_only"),
                "applies to queue_packets (give queue_packets in the same table)",
            ));
        }
        self.leo_delay(name, p, &mut c)?;
        match (p.queue_packets, &p.queue_bytes) {
            (Some(_), Some(_)) => {
                return Err(field(
                    format!("{name}.queue_bytes"),
                    "give queue_packets or queue_bytes, not both",
                ))
            }
            (Some(n), None) => {
                let extra = u32::from(p.queue_waiting_only == Some(true));
                c.queue = QueueLimit::Packets(n.saturating_add(extra));
            }
            (None, Some(b)) => {
                c.queue = QueueLimit::Bytes(unit(&format!("{name}.queue_bytes"), parse_bytes(b))?)
            }
            (None, None) => {}
        }
        let losses = [
            p.loss.is_some(),
            p.ber.is_some(),
            p.gilbert_elliott.is_some(),
        ];
        if losses.iter().filter(|x| **x).count() > 1 {
            return Err(field(
                format!("{name}.loss"),
                "give at most one of loss, ber, gilbert_elliott",
            ));
        }
        if let Some(x) = p.loss {
            c.loss = Loss::Random { p: x };
        }
        if let Some(x) = p.ber {
            c.loss = Loss::Ber { ber: x };
        }
        if let Some([a, b, g, h]) = p.gilbert_elliott {
            c.loss = Loss::GilbertElliott {
                p_good_to_bad: a,
                p_bad_to_good: b,
                loss_good: g,
                loss_bad: h,
            };
        }
        if let Some(outs) = &p.outages {
            c.outages = Vec::new();
            for [start, len] in outs {
                c.outages.push(Outage {
                    start_ns: unit(&format!("{name}.outages"), parse_duration_ns(start))?,
                    duration_ns: unit(&format!("{name}.outages"), parse_duration_ns(len))?,
                });
            }
        }
        if let Some(r) = &p.red {
            let mut params = match c.queue {
                QueueLimit::Bytes(_) => RedParams::bytes_mode(r.mean_packet_bytes.unwrap_or(500)),
                QueueLimit::Packets(_) => RedParams::default(),
            };
            if let Some(v) = r.min_th {
                params.min_th = v;
            }
            if let Some(v) = r.max_th {
                params.max_th = v;
            }
            if let Some(v) = r.max_p {
                params.max_p = v;
            }
            if let Some(v) = r.w_q {
                params.w_q = v;
            }
            if let Some(v) = r.gentle {
                params.gentle = v;
            }
            if let Some(v) = r.mean_packet_bytes {
                params.mean_packet_bytes = v;
            }
            c.discipline = Discipline::Red(params);
        }
        c.validate()
            .map_err(|e| field(format!("{name}.{}", e.field), e.reason))?;
        Ok(c)
    }

    fn stp_framing(&self, flow: &FlowSpec) -> Result<Framing, ScenarioError> {
        match flow.stp.as_ref().and_then(|s| s.framing.as_deref()) {
            None | Some("udp") => Ok(Framing::Udp),
            Some("ip") => Ok(Framing::Ip),
            Some(other) => Err(field(
                format!("flow {}.stp.framing", flow.name),
                format!("'{other}' is not \"udp\" or \"ip\""),
            )),
        }
    }

    fn stp_config(&self, flow: &FlowSpec) -> Result<EndpointConfig, ScenarioError> {
        let mut cfg = EndpointConfig::default();
        let Some(s) = &flow.stp else { return Ok(cfg) };
        cfg.connection = s
            .options
            .apply(cfg.connection)
            .map_err(|e| field(format!("flow {}.stp.{}", flow.name, e.field), e.reason))?;
        Ok(cfg)
    }

    fn tcp_config(
        &self,
        flow: &FlowSpec,
        spec: Option<&TcpSpec>,
        what: &str,
    ) -> Result<TcpConfig, ScenarioError> {
        let mut c = TcpConfig::default();
        let Some(t) = spec else { return Ok(c) };
        let f = |k: &str| format!("flow {}.{what}.{k}", flow.name);
        if let Some(v) = &t.variant {
            c.variant = match v.to_ascii_lowercase().as_str() {
                "reno" => Variant::Reno,
                "newreno" => Variant::NewReno,
                "sack-reno" => Variant::SackReno,
                "sack-newreno" | "sack" => Variant::SackNewReno,
                other => {
                    return Err(field(
                        f("variant"),
                        format!("'{other}' is not reno, newreno, sack-reno or sack-newreno"),
                    ))
                }
            };
        }
        if let Some(v) = t.mss {
            c.mss_bytes = v;
        }
        if let Some(v) = &t.initial_window {
            let v = v.text().to_ascii_lowercase();
            c.initial_window = match v.as_str() {
                "1" => TcpInitialWindow::One,
                "2" => TcpInitialWindow::Two,
                "4kss" => TcpInitialWindow::FourKss,
                "10" => TcpInitialWindow::Ten,
                other => match other.parse::<u32>() {
                    Ok(n @ 1..=1000) => TcpInitialWindow::Segments(n),
                    _ => {
                        return Err(field(
                            f("initial_window"),
                            format!("'{other}' is not a segment count (1 to 1000) or \"4kss\""),
                        ))
                    }
                },
            };
        }
        if let Some(v) = &t.delayed_ack_timeout {
            c.delayed_ack_timeout_ns = unit(&f("delayed_ack_timeout"), parse_duration_ns(v))?;
        }
        if let Some(v) = t.dupack_threshold {
            c.dupack_threshold = v;
        }
        if let Some(v) = &t.send_buffer {
            c.send_buffer_bytes = unit(&f("send_buffer"), parse_bytes(v))?;
        }
        if let Some(v) = &t.initial_ssthresh {
            c.initial_ssthresh_bytes = unit(&f("initial_ssthresh"), parse_bytes(v))?;
        }
        if let Some(v) = &t.initial_rto {
            c.initial_rto_ns = unit(&f("initial_rto"), parse_duration_ns(v))?;
        }
        if let Some(v) = &t.max_rto {
            c.max_rto_ns = unit(&f("max_rto"), parse_duration_ns(v))?;
        }
        if let Some(v) = t.timestamps {
            c.rtt_per_ack = v;
        }
        if let Some(v) = t.limited_transmit {
            c.limited_transmit = v;
        }
        if let Some(v) = &t.loss_marking {
            c.rfc6675_loss_marking = match v.as_str() {
                "appendix-a" => false,
                "rfc6675" => true,
                other => {
                    return Err(field(
                        f("loss_marking"),
                        format!("'{other}' is not \"appendix-a\" or \"rfc6675\""),
                    ))
                }
            };
        }
        if let Some(v) = &t.recovery {
            c.prr = match v.as_str() {
                "inflation" => false,
                "prr" => true,
                other => {
                    return Err(field(
                        f("recovery"),
                        format!("'{other}' is not \"inflation\" or \"prr\""),
                    ))
                }
            };
        }
        if let Some(v) = t.delayed_ack {
            c.delayed_ack = v;
        }
        if let Some(v) = t.ack_every {
            c.ack_every_segments = v;
        }
        if let Some(v) = &t.rcv_window {
            c.recv_buffer_bytes = unit(&f("rcv_window"), parse_bytes(v))?;
        }
        if let Some(v) = t.window_scaling {
            c.window_scaling = v;
        }
        if let Some(v) = t.sack {
            c.sack_permitted = v;
        }
        if let Some(v) = &t.rto_granularity {
            c.clock_granularity_ns = unit(&f("rto_granularity"), parse_duration_ns(v))?;
        }
        if let Some(v) = t.coarse_timer {
            c.coarse_timer = v;
        }
        if let Some(v) = &t.min_rto {
            c.min_rto_ns = unit(&f("min_rto"), parse_duration_ns(v))?;
        }
        if let Some(v) = &t.increase {
            let p = t.increase_param;
            c.increase = match v.to_ascii_lowercase().as_str() {
                "standard" => IncreasePolicy::Standard,
                "cubic" => IncreasePolicy::Cubic,
                "constant-rate" => IncreasePolicy::ConstantRate {
                    c: p.ok_or_else(|| field(f("increase_param"), "required with constant-rate"))?,
                },
                "increase-by-k" => IncreasePolicy::IncreaseByK {
                    k: p.ok_or_else(|| field(f("increase_param"), "required with increase-by-k"))?,
                },
                other => {
                    return Err(field(
                        f("increase"),
                        format!("'{other}' is not standard, cubic, constant-rate or increase-by-k"),
                    ))
                }
            };
        }
        if let Some(v) = t.byte_counting {
            c.byte_counting = v;
        }
        if let Some(v) = t.syn_data {
            c.data_on_syn = v;
        }
        c.validate().map_err(|e| {
            let (key, reason) = tcp_key(e.field, &e.reason);
            field(f(key), reason)
        })?;
        Ok(c)
    }

    /// The flows with every `count` expanded into identical flows NAME-1 … NAME-N.
    pub fn expanded_flows(&self) -> Result<Vec<FlowSpec>, ScenarioError> {
        let mut v = Vec::new();
        for f in &self.flows {
            match f.count {
                None => v.push(f.clone()),
                Some(0) => {
                    return Err(field(
                        format!("flow {}.count", f.name),
                        "must be at least 1",
                    ))
                }
                Some(n) if n > 1000 => {
                    return Err(field(format!("flow {}.count", f.name), "at most 1000"))
                }
                Some(n) => {
                    for i in 1..=n {
                        v.push(FlowSpec {
                            name: format!("{}-{i}", f.name),
                            count: None,
                            ..f.clone()
                        });
                    }
                }
            }
        }
        Ok(v)
    }

    /// Sets up the ACK management (`crate::ackmgmt`) the links ask for.
    fn manage_links(&self, sim: &mut Sim) -> Result<(), ScenarioError> {
        for l in &self.links {
            let dirs = [
                (format!("{}->{}", l.a, l.b), Some(&l.forward)),
                (format!("{}->{}", l.b, l.a), l.reverse.as_ref()),
            ];
            for (name, p) in dirs {
                let Some(p) = p else { continue };
                let f = |k: &str| format!("link {name}.{k}");
                let filter = p.ack_filter.unwrap_or(false);
                let drop_front = p.ack_drop_front.unwrap_or(false);
                if !filter && !drop_front && p.ack_pacing.is_none() && p.window_overwrite.is_none()
                {
                    continue;
                }
                let Some(id) = sim.link_by_name(&name) else {
                    continue;
                };
                let model = sim.links()[id.0 as usize].model.config().clone();
                if matches!(model.discipline, linkmodel::Discipline::Red(_)) {
                    return Err(field(
                        f("red"),
                        "ACK management (ack_filter, ack_pacing, window_overwrite, ack_drop_front) needs a drop-tail queue",
                    ));
                }
                let (capacity_packets, capacity_bytes) = match model.queue {
                    QueueLimit::Packets(n) => (n as usize, None),
                    QueueLimit::Bytes(b) => (usize::MAX, Some(b)),
                };
                let pacing = match &p.ack_pacing {
                    None => None,
                    Some(a) => {
                        let watch = sim.link_by_name(&a.watch).ok_or_else(|| {
                            field(
                                f("ack_pacing.watch"),
                                format!("no link named '{}'", a.watch),
                            )
                        })?;
                        if a.threshold_packets == 0 {
                            return Err(field(
                                f("ack_pacing.threshold_packets"),
                                "must be at least 1",
                            ));
                        }
                        Some(crate::ackmgmt::AckPacing {
                            watch,
                            rate_bps: sim.links()[watch.0 as usize].model.config().rate_bps,
                            threshold_packets: a.threshold_packets as usize,
                        })
                    }
                };
                let window_cap = match &p.window_overwrite {
                    Some(w) => Some(unit(&f("window_overwrite"), parse_bytes(w))?),
                    None => None,
                };
                sim.manage_link(
                    id,
                    crate::ackmgmt::AckQueueConfig {
                        capacity_packets,
                        capacity_bytes,
                        filter,
                        pacing,
                        window_cap,
                        drop_front,
                    },
                );
            }
        }
        Ok(())
    }

    /// Builds the simulation for one replication.
    pub fn build(&self, seed: u64) -> Result<Built, ScenarioError> {
        if self.is_constellation() {
            return Err(field(
                "constellation",
                "this scenario runs on the constellation network (Scenario::leo_plan, `satstp sim`), not as nodes and links",
            ));
        }
        let mut sim = Sim::new(seed);
        let mut seen = BTreeMap::new();
        for n in &self.nodes {
            if seen.insert(n.name.clone(), ()).is_some() {
                return Err(field(format!("node {}", n.name), "defined twice"));
            }
            sim.add_node(&n.name);
        }
        let node = |sim: &Sim, name: &str, what: &str| {
            sim.node(name)
                .ok_or_else(|| field(what.to_string(), format!("unknown node '{name}'")))
        };
        for l in &self.links {
            let a = node(&sim, &l.a, "link.a")?;
            let b = node(&sim, &l.b, "link.b")?;
            let name = format!("link {}->{}", l.a, l.b);
            let fwd = self.link_config(&name, &l.forward, None)?;
            if l.simplex && l.reverse.is_some() {
                return Err(field(
                    format!("{name}.reverse"),
                    "a simplex link has no reverse direction",
                ));
            }
            let rev = match &l.reverse {
                Some(r) => {
                    Some(self.link_config(&format!("link {}->{}", l.b, l.a), r, Some(&fwd))?)
                }
                None => (!l.simplex).then(|| fwd.clone()),
            };
            sim.add_link(&format!("{}->{}", l.a, l.b), a, b, fwd)?;
            if let Some(rev) = rev {
                sim.add_link(&format!("{}->{}", l.b, l.a), b, a, rev)?;
            }
        }
        self.manage_links(&mut sim)?;
        sim.compute_routes();
        for r in &self.routes {
            let what = format!("route at {} to {}", r.at, r.to);
            let at = node(&sim, &r.at, &format!("{what}.at"))?;
            let to = node(&sim, &r.to, &format!("{what}.to"))?;
            let via = sim.link_by_name(&r.via).ok_or_else(|| {
                field(format!("{what}.via"), format!("no link named '{}'", r.via))
            })?;
            if !sim.set_route(at, to, via) {
                return Err(field(
                    format!("{what}.via"),
                    format!("link '{}' does not leave node '{}'", r.via, r.at),
                ));
            }
        }
        if !self.routes.is_empty() {
            for (i, a) in self.nodes.iter().enumerate() {
                for (j, b) in self.nodes.iter().enumerate() {
                    let (x, y) = (NodeId(i as u32), NodeId(j as u32));
                    if sim.reachable(x, y) && !sim.route_arrives(x, y) {
                        return Err(field(
                            "route",
                            format!(
                                "the routes from '{}' to '{}' loop or end before arriving",
                                a.name, b.name
                            ),
                        ));
                    }
                }
            }
        }
        let mut flows = Vec::new();
        let mut names = BTreeMap::new();
        let flow_specs = self.expanded_flows()?;
        for (i, f) in flow_specs.iter().enumerate() {
            if names.insert(f.name.clone(), ()).is_some() {
                return Err(field(format!("flow {}", f.name), "defined twice"));
            }
            let id = FlowId(i as u32 + 1);
            let from = node(&sim, &f.from, &format!("flow {}.from", f.name))?;
            let to = node(&sim, &f.to, &format!("flow {}.to", f.name))?;
            sim.check_route(from, to)?;
            sim.check_route(to, from)?;
            let bytes = match &f.bytes {
                Some(b) => Some(unit(&format!("flow {}.bytes", f.name), parse_bytes(b))?),
                None => None,
            };
            let start = match &f.start {
                Some(s) => unit(&format!("flow {}.start", f.name), parse_duration_ns(s))?,
                None => 0,
            };
            let bottleneck = match &f.bottleneck {
                Some(b) => sim.link_by_name(b).ok_or_else(|| {
                    field(
                        format!("flow {}.bottleneck", f.name),
                        format!("no link named '{b}'"),
                    )
                })?,
                None => slowest_on_path(&sim, from, to).ok_or_else(|| {
                    field(
                        format!("flow {}", f.name),
                        "source and sink are the same node",
                    )
                })?,
            };
            let reverse_channel = match &f.reverse_channel {
                Some(r) => Some(sim.link_by_name(r).ok_or_else(|| {
                    field(
                        format!("flow {}.reverse_channel", f.name),
                        format!("no link named '{r}'"),
                    )
                })?),
                None => sim
                    .reverse_link(bottleneck)
                    .or_else(|| slowest_on_path(&sim, to, from)),
            };
            if f.trace {
                sim.metrics.enable_trace(id);
            }
            let (src_port, dst_port) = (10_000 + i as u16 * 2, 10_001 + i as u16 * 2);
            if f.duration.is_some() {
                return Err(field(
                    format!("flow {}.duration", f.name),
                    "is for a constellation scenario's flows; here give bytes, or let the flow run to the end",
                ));
            }
            for (k, given) in [
                ("origin_delay", f.origin_delay.is_some()),
                ("origin_rate", f.origin_rate.is_some()),
            ] {
                if given {
                    return Err(field(
                        format!("flow {}.{k}", f.name),
                        "is for a constellation scenario's flows; here the flow's from node is its host",
                    ));
                }
            }
            if f.stripes.is_some() && f.protocol != "tcp" {
                return Err(field(
                    format!("flow {}.stripes", f.name),
                    "striping is for protocol \"tcp\"",
                ));
            }
            if f.stripe_block.is_some() && f.stripes.is_none_or(|n| n == 1) {
                return Err(field(
                    format!("flow {}.stripe_block", f.name),
                    "is for a striped transfer: set stripes to 2 or more",
                ));
            }
            match f.protocol.as_str() {
                "stp" => {
                    let cfg = self.stp_config(f)?;
                    let peer = Addr {
                        node: to,
                        port: dst_port,
                    };
                    let sender = StpAgent::new(
                        src_port,
                        id,
                        StpRole::Sender { peer, bytes },
                        cfg.clone(),
                        seed ^ (u64::from(id.0) << 20),
                    )
                    .map_err(|e| field(format!("flow {}.stp", f.name), e.to_string()))?;
                    let sink = StpAgent::new(
                        dst_port,
                        id,
                        StpRole::Sink,
                        cfg,
                        seed ^ (u64::from(id.0) << 21) ^ 0x5a5a,
                    )
                    .map_err(|e| field(format!("flow {}.stp", f.name), e.to_string()))?;
                    let framing = self.stp_framing(f)?;
                    sim.add_agent(
                        from,
                        src_port,
                        start,
                        Box::new(sender.with_framing(framing)),
                    )?;
                    sim.add_agent(to, dst_port, start, Box::new(sink.with_framing(framing)))?;
                }
                "tcp" if f.stripes.is_some_and(|n| n != 1) => {
                    let n = f.stripes.unwrap_or(1);
                    let fname = |k: &str| format!("flow {}.{k}", f.name);
                    if n == 0 || n > crate::striping::MAX_STRIPES {
                        return Err(field(
                            fname("stripes"),
                            format!("must be 1 to {}", crate::striping::MAX_STRIPES),
                        ));
                    }
                    // Connection 0 uses the flow's port; the others 50000 + 64·i + k.
                    let base = 50_000 + 64 * i;
                    if base + 64 > usize::from(u16::MAX) {
                        return Err(field(fname("stripes"), "too many flows for striping ports"));
                    }
                    let ports: Vec<u16> = std::iter::once(src_port)
                        .chain((1..n as usize).map(|k| (base + k) as u16))
                        .collect();
                    let cfg = self.tcp_config(f, f.tcp.as_ref(), "tcp")?;
                    let peer = Addr {
                        node: to,
                        port: dst_port,
                    };
                    let tcp_err = |e: crate::tcp::TcpConfigError| {
                        field(format!("flow {}.tcp.{}", f.name, e.field), e.reason)
                    };
                    let mut sender =
                        crate::striping::StripedSender::new(id, ports, peer, bytes, cfg.clone())
                            .map_err(tcp_err)?;
                    if let Some(b) = &f.stripe_block {
                        let b = unit(&fname("stripe_block"), parse_bytes(b))?;
                        if b == 0 {
                            return Err(field(fname("stripe_block"), "must be at least 1 byte"));
                        }
                        sender = sender.with_block(b);
                    }
                    let sink =
                        crate::striping::StripedSink::new(dst_port, id, n, cfg).map_err(tcp_err)?;
                    sim.add_agent(from, src_port, start, Box::new(sender))?;
                    sim.add_agent(to, dst_port, start, Box::new(sink))?;
                }
                "tcp" => {
                    let cfg = self.tcp_config(f, f.tcp.as_ref(), "tcp")?;
                    let peer = Addr {
                        node: to,
                        port: dst_port,
                    };
                    let sender = TcpAgent::bulk_sender(id, src_port, peer, bytes, cfg.clone())
                        .map_err(|e| field(format!("flow {}.tcp.{}", f.name, e.field), e.reason))?;
                    let sink = TcpAgent::sink(dst_port, cfg)
                        .map_err(|e| field(format!("flow {}.tcp.{}", f.name, e.field), e.reason))?;
                    sim.add_agent(from, src_port, start, Box::new(sender))?;
                    sim.add_agent(to, dst_port, start, Box::new(sink))?;
                }
                "split" => {
                    let name = |k: &str| format!("flow {}.{k}", f.name);
                    let at_name = f.split_at.as_deref().ok_or_else(|| {
                        field(name("split_at"), "required for protocol \"split\"")
                    })?;
                    let at = node(&sim, at_name, &name("split_at"))?;
                    if at == from || at == to {
                        return Err(field(
                            name("split_at"),
                            "must be a node between from and to",
                        ));
                    }
                    sim.check_route(from, at)?;
                    sim.check_route(at, to)?;
                    let relay = match &f.relay_buffer {
                        Some(b) => unit(&name("relay_buffer"), parse_bytes(b))?,
                        None => 256 * 1024,
                    };
                    let in_cfg = self.tcp_config(f, f.tcp.as_ref(), "tcp")?;
                    let (gw_in, gw_out) = (20_000 + i as u16 * 2, 20_001 + i as u16 * 2);
                    let sink_addr = Addr {
                        node: to,
                        port: dst_port,
                    };
                    let gw_seed = seed ^ (u64::from(id.0) << 22) ^ 0xa5a5;
                    let hop = match f.hop.as_deref() {
                        Some("stp") => {
                            let cfg = self.stp_config(f)?;
                            // Checked as the sink's endpoint would be.
                            cfg.validate()
                                .map_err(|e| field(name("stp"), e.to_string()))?;
                            // The gateway side of the hop: header, verdict, the origin's
                            // reader (at once, as the seeds' sinks read).
                            let sink = GatewayEnd::new(GatewayEndSpec {
                                flow: id,
                                port: dst_port,
                                origin: sink_addr,
                                config: cfg.clone(),
                                seed: seed ^ (u64::from(id.0) << 21) ^ 0x5a5a,
                                framing: self.stp_framing(f)?,
                                read_rate_bps: None,
                                reader_buffer: u64::MAX,
                            });
                            sim.add_agent(to, dst_port, start, Box::new(sink))?;
                            Hop::Stp(cfg)
                        }
                        Some("tcp") => {
                            let spec = f.hop_tcp.as_ref().or(f.tcp.as_ref());
                            let cfg = self.tcp_config(f, spec, "hop_tcp")?;
                            let sink = TcpAgent::sink(dst_port, cfg.clone()).map_err(|e| {
                                field(name(&format!("hop_tcp.{}", e.field)), e.reason)
                            })?;
                            sim.add_agent(to, dst_port, start, Box::new(sink))?;
                            Hop::Tcp(cfg)
                        }
                        other => {
                            return Err(field(
                                name("hop"),
                                format!("{other:?} is not \"stp\" or \"tcp\""),
                            ))
                        }
                    };
                    let gw = SplitGateway::new(GatewaySpec {
                        flow: id,
                        in_port: gw_in,
                        out_port: gw_out,
                        sink: sink_addr,
                        in_config: in_cfg.clone(),
                        hop,
                        relay_buffer: relay,
                        seed: gw_seed,
                        framing: self.stp_framing(f)?,
                    });
                    sim.add_agent(at, gw_in, start, Box::new(gw))?;
                    let sender = TcpAgent::bulk_sender(
                        id,
                        src_port,
                        Addr {
                            node: at,
                            port: gw_in,
                        },
                        bytes,
                        in_cfg,
                    )
                    .map_err(|e| field(name(&format!("tcp.{}", e.field)), e.reason))?;
                    sim.add_agent(from, src_port, start, Box::new(sender))?;
                }
                other => {
                    return Err(field(
                        format!("flow {}.protocol", f.name),
                        format!("unknown protocol '{other}' (use stp, tcp or split)"),
                    ))
                }
            }
            flows.push(BuiltFlow {
                id,
                name: f.name.clone(),
                protocol: f.protocol.clone(),
                start,
                bytes,
                bottleneck,
                reverse_channel,
            });
        }
        for (j, w) in self.web.iter().enumerate() {
            let wname = |k: &str| format!("web {}.{k}", w.name);
            if names.insert(w.name.clone(), ()).is_some() {
                return Err(field(
                    format!("web {}", w.name),
                    "a flow or web source of that name exists",
                ));
            }
            let id = FlowId(10_000 + j as u32);
            let server = node(&sim, &w.server, &wname("server"))?;
            let client = node(&sim, &w.client, &wname("client"))?;
            sim.check_route(server, client)?;
            sim.check_route(client, server)?;
            let load = unit(&wname("load"), parse_rate_bps(&w.load))?;
            let start = match &w.start {
                Some(s) => unit(&wname("start"), parse_duration_ns(s))?,
                None => 0,
            };
            let spec = FlowSpec {
                name: w.name.clone(),
                count: None,
                protocol: "web".into(),
                from: w.server.clone(),
                to: w.client.clone(),
                bytes: None,
                start: None,
                duration: None,
                origin_delay: None,
                origin_rate: None,
                bottleneck: None,
                reverse_channel: None,
                trace: false,
                stp: None,
                tcp: w.tcp.clone(),
                split_at: None,
                hop: None,
                hop_tcp: None,
                relay_buffer: None,
                stripes: None,
                stripe_block: None,
            };
            let cfg = self.tcp_config(&spec, w.tcp.as_ref(), "tcp")?;
            let port = 30_000 + j as u16;
            let first_client_port = 40_000 + j as u16 * 1000;
            sim.add_agent(
                server,
                port,
                start,
                Box::new(WebServer::new(port, id, cfg.clone())),
            )?;
            let client_agent = WebClient::new(
                Addr { node: server, port },
                id,
                cfg,
                load,
                first_client_port,
                1000,
            );
            sim.add_agent(
                client,
                first_client_port.wrapping_sub(1).max(1),
                start,
                Box::new(client_agent),
            )?;
            let bottleneck = slowest_on_path(&sim, server, client).ok_or_else(|| {
                field(
                    format!("web {}", w.name),
                    "server and client are the same node",
                )
            })?;
            flows.push(BuiltFlow {
                id,
                name: w.name.clone(),
                protocol: "web".into(),
                start,
                bytes: None,
                bottleneck,
                reverse_channel: sim.reverse_link(bottleneck),
            });
        }
        Ok(Built { sim, flows })
    }
}

/// The scenario key (and reason text) of a `TcpConfig` field named in a validation error.
fn tcp_key(internal: &str, reason: &str) -> (&'static str, String) {
    const KEYS: [(&str, &str); 11] = [
        ("recv_buffer_bytes", "rcv_window"),
        ("mss_bytes", "mss"),
        ("initial_ssthresh_bytes", "initial_ssthresh"),
        ("send_buffer_bytes", "send_buffer"),
        ("delayed_ack_timeout_ns", "delayed_ack_timeout"),
        ("initial_rto_ns", "initial_rto"),
        ("min_rto_ns", "min_rto"),
        ("max_rto_ns", "max_rto"),
        ("clock_granularity_ns", "rto_granularity"),
        ("ack_every_segments", "ack_every"),
        ("dupack_threshold", "dupack_threshold"),
    ];
    let mut text = reason.to_string();
    for (from, to) in KEYS {
        text = text.replace(from, to);
    }
    let key = KEYS
        .iter()
        .find(|(from, _)| *from == internal)
        .map_or("tcp", |(_, to)| to);
    let key = if key == "tcp" {
        match internal {
            "increase" => "increase",
            "byte_counting_limit_segments" => "byte_counting",
            "max_sack_blocks" => "sack",
            _ => "tcp",
        }
    } else {
        key
    };
    (key, text)
}

/// The slowest link on the path from `from` to `to` (the first such, on ties).
fn slowest_on_path(
    sim: &Sim,
    from: crate::packet::NodeId,
    to: crate::packet::NodeId,
) -> Option<LinkId> {
    let mut at = from;
    let mut best: Option<(u64, LinkId)> = None;
    for _ in 0..sim.links().len() {
        if at == to {
            return best.map(|b| b.1);
        }
        let (id, link) = sim.next_hop(at, to)?;
        let rate = link.model.config().rate_bps;
        if best.is_none_or(|(r, _)| rate < r) {
            best = Some((rate, id));
        }
        at = link.to;
    }
    None
}

/// A scenario turned into a simulation, with what is needed to summarise it.
pub struct Built {
    pub sim: Sim,
    pub flows: Vec<BuiltFlow>,
}

/// A flow's identity in a built simulation.
#[derive(Debug, Clone)]
pub struct BuiltFlow {
    pub id: FlowId,
    pub name: String,
    pub protocol: String,
    pub start: Time,
    pub bytes: Option<u64>,
    pub bottleneck: LinkId,
    /// Where reverse-channel use is counted.
    pub reverse_channel: Option<LinkId>,
}

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
    let total = indices.len() as u32;
    let done = std::sync::atomic::AtomicU32::new(0);
    let tick = |_k: u32| {
        let d = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        progress(d, total);
    };
    run_indexed(scenario, indices, seed, end, threads, &tick, pcap_dir)
        .into_iter()
        .collect()
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

/// Largest σ/√n ÷ mean of the flows' throughputs (web sources excluded) over `results`.
fn worst_relative_se(results: &[RunResult]) -> f64 {
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
    let done = std::sync::atomic::AtomicU32::new(0);
    let (total, mut converged) = match rule {
        Replication::Fixed { runs } => (runs.max(1), None),
        Replication::Until { max_runs, .. } => (max_runs.max(1), Some(false)),
    };
    let tick = |_k: u32| {
        let d = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        progress(d, total);
    };
    let mut results: Vec<RunResult> = Vec::new();
    match rule {
        Replication::Fixed { runs } => {
            for r in run_batch(
                scenario,
                0..runs.max(1),
                seed,
                end,
                threads,
                &tick,
                pcap_dir,
            ) {
                results.push(r?);
            }
        }
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
                for r in run_batch(
                    scenario,
                    have..have + want,
                    seed,
                    end,
                    threads,
                    &tick,
                    pcap_dir,
                ) {
                    results.push(r?);
                }
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
