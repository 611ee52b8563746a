//! Checking a scenario and turning its keys into the models' configurations (links, TCP, STP),
//! each error naming the key.

use super::*;
use crate::metrics::Confidence;
use crate::sim::Time;
use crate::stp_agent::Framing;
use crate::tcp::{IncreasePolicy, InitialWindow as TcpInitialWindow, TcpConfig, Variant};
use crate::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use linkmodel::{Delay, Discipline, LinkConfig, Loss, Outage, QueueLimit, RedParams, RedRule};
use stp::EndpointConfig;

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
    pub(super) fn leo_delay(
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

    pub(super) fn link_config(
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
            params.rule = match r.rule.as_deref() {
                None | Some("paper") => RedRule::Paper,
                Some("ns2") => RedRule::Ns2,
                Some(other) => {
                    return Err(field(
                        format!("{name}.red.rule"),
                        format!("unknown rule \"{other}\" (accepted: \"paper\", \"ns2\")"),
                    ))
                }
            };
            c.discipline = Discipline::Red(params);
        }
        c.validate()
            .map_err(|e| field(format!("{name}.{}", e.field), e.reason))?;
        Ok(c)
    }

    pub(super) fn stp_framing(&self, flow: &FlowSpec) -> Result<Framing, ScenarioError> {
        match flow.stp.as_ref().and_then(|s| s.framing.as_deref()) {
            None | Some("udp") => Ok(Framing::Udp),
            Some("ip") => Ok(Framing::Ip),
            Some(other) => Err(field(
                format!("flow {}.stp.framing", flow.name),
                format!("'{other}' is not \"udp\" or \"ip\""),
            )),
        }
    }

    pub(super) fn stp_config(&self, flow: &FlowSpec) -> Result<EndpointConfig, ScenarioError> {
        let mut cfg = EndpointConfig::default();
        let Some(s) = &flow.stp else { return Ok(cfg) };
        cfg.connection = s
            .options
            .apply(cfg.connection)
            .map_err(|e| field(format!("flow {}.stp.{}", flow.name, e.field), e.reason))?;
        Ok(cfg)
    }

    pub(super) fn tcp_config(
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
            (c.prr, c.ns2_recovery) = match v.as_str() {
                "inflation" => (false, false),
                "prr" => (true, false),
                "ns2" => (false, true),
                other => {
                    return Err(field(
                        f("recovery"),
                        format!("'{other}' is not \"inflation\", \"prr\" or \"ns2\""),
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
        if let Some(v) = &t.timer {
            c.ns2_timer = match v.as_str() {
                "bsd" => false,
                "ns2" => true,
                other => {
                    return Err(field(
                        f("timer"),
                        format!("'{other}' is not \"bsd\" or \"ns2\""),
                    ))
                }
            };
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
