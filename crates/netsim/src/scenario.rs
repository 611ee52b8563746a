//! Scenarios as data: a TOML description of topology, flows, protocols and their options,
//! duration and replications (`docs/scenarios.md` documents the format), turned into a `Sim`,
//! run (replications in parallel, each deterministic per seed) and summarised per flow.

use crate::gateway::{GatewaySpec, Hop, SplitGateway};
use crate::metrics::{mean_ci95, Metrics};
use crate::packet::{Addr, Direction, FlowId, LinkId};
use crate::sim::{Sim, SimError, Time, SEC};
use crate::stp_agent::{StpAgent, StpRole};
use crate::tcp::{IncreasePolicy, InitialWindow as TcpInitialWindow, TcpAgent, TcpConfig, Variant};
use crate::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use crate::web::{WebClient, WebServer};
use linkmodel::{Delay, Discipline, LinkConfig, Loss, Outage, QueueLimit, RedParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stp::{CongestionMode, EndpointConfig, InitialWindow};

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Simulated time per run, e.g. "60s".
    pub duration: String,
    /// Replications (each with its own seed).
    #[serde(default = "default_runs")]
    pub runs: u32,
    /// Seed of the first replication; replication i uses seed + i.
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSpec>,
    #[serde(rename = "link")]
    pub links: Vec<LinkSpec>,
    #[serde(rename = "flow", default)]
    pub flows: Vec<FlowSpec>,
    #[serde(rename = "web", default)]
    pub web: Vec<WebSpec>,
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

fn default_runs() -> u32 {
    1
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
    /// Delay and outages of a LEO path computed when the scenario is built:
    /// "CONSTELLATION:FROM:TO[:ROUTING]" (docs/leo.md), sampled every 10 ms.
    pub leo: Option<String>,
    /// Orbit time at which the `leo` path starts, e.g. "57600s" (default 0s).
    pub leo_start: Option<String>,
    /// Drop-tail limit in packets.
    pub queue_packets: Option<u32>,
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
/// unless overridden in `reverse`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub a: String,
    pub b: String,
    #[serde(flatten)]
    pub forward: LinkParams,
    #[serde(default)]
    pub reverse: Option<LinkParams>,
}

/// STP options of a flow (all optional; defaults are the engine's).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StpSpec {
    /// "window" (default) or "rate".
    pub congestion: Option<String>,
    /// Sending rate of the rate controller, e.g. "1Mbps".
    pub rate: Option<String>,
    /// "1", "4kss", "10" (packets) ...
    pub initial_window: Option<String>,
    pub polls_per_rtt: Option<u32>,
    pub poll_every_sds: Option<u32>,
    /// Largest datagram, STP header included (bytes).
    pub max_datagram: Option<u16>,
    pub recv_buffer: Option<String>,
    pub send_buffer: Option<String>,
    /// Feedback budget of the receiver, e.g. "800bps".
    pub reverse_rate: Option<String>,
    pub min_rate: Option<String>,
    pub max_rate: Option<String>,
    pub reorder_threshold: Option<u32>,
    pub pacing_granularity: Option<String>,
}

/// TCP options of a flow (all optional; defaults are the model's).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSpec {
    /// "reno", "newreno", "sack-reno" or "sack-newreno".
    pub variant: Option<String>,
    /// Data bytes per segment.
    pub mss: Option<u32>,
    /// "1", "2", "4kss" or "10".
    pub initial_window: Option<String>,
    pub delayed_ack: Option<bool>,
    /// Acknowledge every k-th full segment.
    pub ack_every: Option<u32>,
    /// Receive buffer (offered window), e.g. "240KB".
    pub rcv_window: Option<String>,
    pub window_scaling: Option<bool>,
    pub sack: Option<bool>,
    /// RTO clock granularity, e.g. "500ms".
    pub rto_granularity: Option<String>,
    pub min_rto: Option<String>,
    /// "standard", "constant-rate" (with `increase_param` c) or "increase-by-k" (with K).
    pub increase: Option<String>,
    pub increase_param: Option<f64>,
    pub byte_counting: Option<bool>,
    /// Send data on the SYN (T/TCP style).
    pub syn_data: Option<bool>,
}

/// A flow between two nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    pub name: String,
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
    /// Link whose forward bytes define efficiency and whose reverse direction defines the
    /// reverse-channel use, as "x->y"; default: the slowest link on the path.
    pub bottleneck: Option<String>,
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

fn unit<T>(name: &str, r: Result<T, String>) -> Result<T, ScenarioError> {
    r.map_err(|e| field(name, e))
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        // Building once checks names, units, routes and options.
        s.build(s.seed)?;
        Ok(s)
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
            let (points, period_ns) = constellation::trace::parse_delay_points(&text, path)
                .map_err(|e| field(&f, e.to_string()))?;
            c.delay = Delay::Trace { points, period_ns };
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
        let mut c = match base {
            Some(b) => b.clone(),
            None => {
                let rate = p
                    .rate
                    .as_deref()
                    .ok_or_else(|| field(format!("{name}.rate"), "missing"))?;
                let delay = p.delay.as_deref().unwrap_or("0ms");
                LinkConfig::simple(
                    unit(&format!("{name}.rate"), parse_rate_bps(rate))?,
                    unit(&format!("{name}.delay"), parse_duration_ns(delay))?,
                    100,
                )
            }
        };
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
        self.leo_delay(name, p, &mut c)?;
        match (p.queue_packets, &p.queue_bytes) {
            (Some(_), Some(_)) => {
                return Err(field(
                    format!("{name}.queue_bytes"),
                    "give queue_packets or queue_bytes, not both",
                ))
            }
            (Some(n), None) => c.queue = QueueLimit::Packets(n),
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

    fn stp_config(&self, flow: &FlowSpec) -> Result<EndpointConfig, ScenarioError> {
        let mut cfg = EndpointConfig::default();
        let Some(s) = &flow.stp else { return Ok(cfg) };
        let c = &mut cfg.connection;
        let f = |k: &str| format!("flow {}.stp.{k}", flow.name);
        match s.congestion.as_deref() {
            None | Some("window") => {}
            Some("rate") => {
                let r = s
                    .rate
                    .as_deref()
                    .ok_or_else(|| field(f("rate"), "required with congestion = \"rate\""))?;
                c.congestion = CongestionMode::Rate {
                    rate_bps: unit(&f("rate"), parse_rate_bps(r))?,
                };
            }
            Some(other) => {
                return Err(field(
                    f("congestion"),
                    format!("'{other}' is not \"window\" or \"rate\""),
                ))
            }
        }
        if let Some(iw) = &s.initial_window {
            c.initial_window = match iw.to_ascii_lowercase().as_str() {
                "4kss" => InitialWindow::FourKss,
                n => InitialWindow::Packets(n.parse().map_err(|_| {
                    field(
                        f("initial_window"),
                        format!("'{iw}' is not a packet count or \"4kss\""),
                    )
                })?),
            };
        }
        if let Some(v) = s.polls_per_rtt {
            c.polls_per_rtt = v;
        }
        if let Some(v) = s.poll_every_sds {
            c.poll_every_sds = v;
        }
        if let Some(v) = s.max_datagram {
            c.max_datagram_bytes = v;
        }
        if let Some(v) = s.reorder_threshold {
            c.reorder_threshold = v;
        }
        let bytes32 = |k: &str, v: &str| -> Result<u32, ScenarioError> {
            let b = unit(&f(k), parse_bytes(v))?;
            u32::try_from(b).map_err(|_| field(f(k), "too large"))
        };
        if let Some(v) = &s.recv_buffer {
            c.recv_buffer_bytes = bytes32("recv_buffer", v)?;
        }
        if let Some(v) = &s.send_buffer {
            c.send_buffer_bytes = bytes32("send_buffer", v)?;
        }
        if let Some(v) = &s.reverse_rate {
            c.reverse_rate_bps = Some(unit(&f("reverse_rate"), parse_rate_bps(v))?);
        }
        if let Some(v) = &s.min_rate {
            c.min_rate_bps = Some(unit(&f("min_rate"), parse_rate_bps(v))?);
        }
        if let Some(v) = &s.max_rate {
            c.max_rate_bps = Some(unit(&f("max_rate"), parse_rate_bps(v))?);
        }
        if let Some(v) = &s.pacing_granularity {
            let ns = unit(&f("pacing_granularity"), parse_duration_ns(v))?;
            c.pacing_granularity_us = u32::try_from(ns / 1000)
                .map_err(|_| field(f("pacing_granularity"), "too large"))?;
        }
        cfg.validate().map_err(|e| field(f(e.field), e.reason))?;
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
            c.initial_window = match v.to_ascii_lowercase().as_str() {
                "1" => TcpInitialWindow::One,
                "2" => TcpInitialWindow::Two,
                "4kss" => TcpInitialWindow::FourKss,
                "10" => TcpInitialWindow::Ten,
                other => {
                    return Err(field(
                        f("initial_window"),
                        format!("'{other}' is not 1, 2, 4kss or 10"),
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
        if let Some(v) = &t.min_rto {
            c.min_rto_ns = unit(&f("min_rto"), parse_duration_ns(v))?;
        }
        if let Some(v) = &t.increase {
            let p = t.increase_param;
            c.increase = match v.to_ascii_lowercase().as_str() {
                "standard" => IncreasePolicy::Standard,
                "constant-rate" => IncreasePolicy::ConstantRate {
                    c: p.ok_or_else(|| field(f("increase_param"), "required with constant-rate"))?,
                },
                "increase-by-k" => IncreasePolicy::IncreaseByK {
                    k: p.ok_or_else(|| field(f("increase_param"), "required with increase-by-k"))?,
                },
                other => {
                    return Err(field(
                        f("increase"),
                        format!("'{other}' is not standard, constant-rate or increase-by-k"),
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
        c.validate().map_err(|e| field(f(e.field), e.reason))?;
        Ok(c)
    }

    /// Builds the simulation for one replication.
    pub fn build(&self, seed: u64) -> Result<Built, ScenarioError> {
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
            let rev = match &l.reverse {
                Some(r) => self.link_config(&format!("link {}->{}", l.b, l.a), r, Some(&fwd))?,
                None => fwd.clone(),
            };
            sim.add_link(&format!("{}->{}", l.a, l.b), a, b, fwd)?;
            sim.add_link(&format!("{}->{}", l.b, l.a), b, a, rev)?;
        }
        sim.compute_routes();
        let mut flows = Vec::new();
        let mut names = BTreeMap::new();
        for (i, f) in self.flows.iter().enumerate() {
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
            if f.trace {
                sim.metrics.enable_trace(id);
            }
            let (src_port, dst_port) = (10_000 + i as u16 * 2, 10_001 + i as u16 * 2);
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
                            let sink = StpAgent::new(
                                dst_port,
                                id,
                                StpRole::Sink,
                                cfg.clone(),
                                seed ^ (u64::from(id.0) << 21) ^ 0x5a5a,
                            )
                            .map_err(|e| field(name("stp"), e.to_string()))?;
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
                protocol: "web".into(),
                from: w.server.clone(),
                to: w.client.clone(),
                bytes: None,
                start: None,
                bottleneck: None,
                trace: false,
                stp: None,
                tcp: w.tcp.clone(),
                split_at: None,
                hop: None,
                hop_tcp: None,
                relay_buffer: None,
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
            });
        }
        Ok(Built { sim, flows })
    }
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
}

/// One flow's figures in one run.
#[derive(Debug, Clone, Serialize)]
pub struct FlowRun {
    pub goodput_bps: f64,
    pub fwd_efficiency: f64,
    pub reverse_bps: f64,
    pub completion_s: Option<f64>,
    pub retransmissions: f64,
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
    let reverse_link = sim.reverse_link(f.bottleneck);
    let rev = reverse_link
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
    }
}

/// Mean and 95 % confidence half-width.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Stat {
    pub mean: f64,
    pub ci95: f64,
}

impl Stat {
    fn of(values: &[f64]) -> Stat {
        let (mean, ci95) = mean_ci95(values);
        Stat { mean, ci95 }
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
}

/// A scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub runs: u32,
    pub seed: u64,
    pub duration_s: f64,
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
    /// Transmitted bits ÷ (rate × duration).
    pub utilization: Stat,
    pub drops_queue: Stat,
    pub drops_error: Stat,
    pub drops_outage: Stat,
}

/// One link in one replication.
#[derive(Debug, Clone)]
struct LinkRun {
    name: String,
    utilization: f64,
    drops_queue: f64,
    drops_error: f64,
    drops_outage: f64,
}

/// One replication's results.
struct RunResult {
    figs: Vec<FlowRun>,
    events: u64,
    flows: Vec<BuiltFlow>,
    links: Vec<LinkRun>,
    series: BTreeMap<String, Vec<[f64; 3]>>,
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
    let end = scenario.duration_ns()?;
    let runs = runs.max(1);
    let results: Vec<RunOutcome> = {
        let next = std::sync::atomic::AtomicU32::new(0);
        let done = std::sync::atomic::AtomicU32::new(0);
        let slots: Vec<std::sync::Mutex<Option<RunOutcome>>> =
            (0..runs).map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads.clamp(1, runs as usize) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= runs {
                        break;
                    }
                    let pcap = if i == 0 { pcap_dir } else { None };
                    let r = run_one(scenario, seed.wrapping_add(u64::from(i)), end, pcap);
                    if let Ok(mut slot) = slots[i as usize].lock() {
                        *slot = Some(r);
                    }
                    let d = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    progress(d, runs);
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
    };
    let mut per_flow: Vec<Vec<FlowRun>> = Vec::new();
    let mut per_link: Vec<Vec<LinkRun>> = Vec::new();
    let mut fairness = Vec::new();
    let mut flows_meta = Vec::new();
    let mut series = BTreeMap::new();
    let mut events = 0;
    for (k, r) in results.into_iter().enumerate() {
        let r = r?;
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
            let pick = |g: fn(&FlowRun) -> f64| Stat::of(&v.iter().map(g).collect::<Vec<_>>());
            let completions: Vec<f64> = v.iter().filter_map(|r| r.completion_s).collect();
            FlowSummary {
                name: m.name.clone(),
                protocol: m.protocol.clone(),
                goodput_bps: pick(|r| r.goodput_bps),
                fwd_efficiency: pick(|r| r.fwd_efficiency),
                reverse_bps: pick(|r| r.reverse_bps),
                completion_s: (completions.len() == v.len() && !v.is_empty())
                    .then(|| Stat::of(&completions)),
                retransmissions: pick(|r| r.retransmissions),
            }
        })
        .collect();
    let links = per_link
        .iter()
        .filter(|v| !v.is_empty())
        .map(|v| {
            let col = |g: fn(&LinkRun) -> f64| Stat::of(&v.iter().map(g).collect::<Vec<_>>());
            LinkSummary {
                name: v[0].name.clone(),
                utilization: col(|l| l.utilization),
                drops_queue: col(|l| l.drops_queue),
                drops_error: col(|l| l.drops_error),
                drops_outage: col(|l| l.drops_outage),
            }
        })
        .collect();
    Ok(Summary {
        scenario: scenario.name.clone(),
        runs,
        seed,
        duration_s: end as f64 / SEC as f64,
        flows,
        fairness: (!fairness.is_empty()).then(|| Stat::of(&fairness)),
        links,
        series,
        events,
    })
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
            let util = m.transmitted.bytes as f64 * 8.0 / (l.model.config().rate_bps as f64 * secs);
            LinkRun {
                name: l.name.clone(),
                utilization: util,
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
        flows,
        links,
        series,
    })
}
