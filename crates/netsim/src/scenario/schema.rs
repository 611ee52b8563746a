//! The scenario file's schema: the tables and keys of `docs/scenarios.md` as serde types.

use serde::{Deserialize, Serialize};

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
    /// Whose per-arrival rules: "paper" (Floyd and Jacobson 1993, the default) or "ns2"
    /// (ns-2's `Queue/RED` of 1997, which the seeds' simulations ran).
    pub rule: Option<String>,
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
        let options =
            toml::Value::Table(table.clone())
                .try_into()
                .map_err(|e: toml::de::Error| {
                    // The parser's message names the value, not the key: find the key by reading
                    // each alone (an unknown key is named by the parser already).
                    let key = table.iter().find(|(k, v)| {
                        let one = toml::Table::from_iter([((*k).clone(), (*v).clone())]);
                        toml::Value::Table(one)
                            .try_into::<stp::ConfigOptions>()
                            .is_err()
                    });
                    match key {
                        Some((k, _)) if !e.message().contains(k.as_str()) => {
                            format!("{k}: {}", e.message())
                        }
                        _ => e.message().to_string(),
                    }
                })?;
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
    /// Fast recovery: "inflation" (default, the seeds' window inflation), "prr" (RFC 6937) or
    /// "ns2" (ns-2's 1997 recovery, `TcpConfig::ns2_recovery`: its NewReno, or its Sack1 for
    /// a SACK variant).
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
    /// Retransmission timer: "bsd" (default: RFC 6298 on BSD's slow timer, firing on a tick)
    /// or "ns2" (ns-2's timer of 1997, `TcpConfig::ns2_timer`).
    pub timer: Option<String>,
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
