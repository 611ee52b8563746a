//! Scenarios that name a constellation, ground stations and flows (issue 26): a `[constellation]`
//! table, `[[ground_station]]` tables and `[[flow]]`s between the stations, run on the
//! constellation as a packet network ([`crate::leo_net`]) by the same code as the network
//! study ([`flow_study`]). `docs/scenarios.md` documents the form.

use crate::leo_net::{
    flow_study, BulkStudy, LeoNetConfig, Origin, Split, StudyFlow, StudyTransport,
};
use crate::scenario::{FlowSpec, Scenario, ScenarioError};
use crate::sim::{Time, SEC};
use crate::tcp::Variant;
use crate::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use constellation::ground::AttachPolicy;
use constellation::tle::TleSet;
use constellation::{Constellation, Place};
use serde::Deserialize;

/// The `[constellation]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConstellationSpec {
    /// A preset: iridium, teledesic, starlink-550, kuiper-630, oneweb.
    pub preset: Option<String>,
    /// A TLE file (SGP4) instead of a preset.
    pub tle: Option<String>,
    /// Changes to a preset's shell (as `satstp leo --altitude/--phasing/--mask`).
    pub altitude_km: Option<f64>,
    pub phasing: Option<u32>,
    pub inclination_deg: Option<f64>,
    /// Elevation mask in degrees (preset or TLE).
    pub mask_deg: Option<f64>,
    /// Rate of every inter-satellite link (default "100Mbps") and ground-satellite link
    /// (default "10Mbps").
    pub isl_rate: Option<String>,
    pub gsl_rate: Option<String>,
    /// Drop-tail queue of every link, packets (default 100).
    pub queue_packets: Option<u32>,
    /// Forwarding state and link delays recomputed every `step` (default "1s").
    pub step: Option<String>,
    /// Which satellites a station uses (as `satstp leo trace --attach`): "joint", "highest" or
    /// "first" (default: the constellation's, joint for the modern shells and TLE files,
    /// highest for iridium and teledesic).
    pub attach: Option<String>,
    /// Cross-seam ISLs of a star preset (as `--cross-seam`; default: the preset's).
    pub cross_seam: Option<bool>,
    /// Latitude above which inter-plane ISLs are off, degrees (as `--isl-latitude`; default 70).
    pub isl_latitude_deg: Option<f64>,
}

/// A `[[ground_station]]`: a name and where it is, as a built-in city (`city`), as `lat` and
/// `lon` in degrees, or (neither given) the built-in city its name names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroundStationSpec {
    pub name: String,
    pub city: Option<String>,
    pub lat: Option<f64>,
    pub lon: Option<f64>,
}

/// A constellation scenario ready to run: the network, its flows, and their names.
#[derive(Debug, Clone)]
pub struct LeoPlan {
    pub config: LeoNetConfig,
    pub flows: Vec<StudyFlow>,
    /// Flow names (after `count` expansion), in flow order.
    pub flow_names: Vec<String>,
    /// The protocol each flow names, as written (a split flow's as `ORIGIN+HOP`, e.g.
    /// `cubic+stp`).
    pub protocols: Vec<String>,
    /// Station names, in station order.
    pub stations: Vec<String>,
}

/// One flow's figures of a constellation scenario.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LeoFlowResult {
    pub name: String,
    pub from: String,
    pub to: String,
    pub protocol: String,
    pub delivered_bytes: u64,
    /// Goodput over the flow's life: from its start to its last byte (a sized flow that
    /// completed) or to the end of the run.
    pub goodput_bps: f64,
    /// Completion time of a sized flow, seconds after its start.
    pub completion_s: Option<f64>,
    /// Mean and largest per-second RTT (ms) over the seconds with packets both ways.
    pub rtt_mean_ms: Option<f64>,
    pub rtt_max_ms: Option<f64>,
    pub received_packets: u64,
    pub reordered_packets: u64,
}

fn field(field: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The transports a constellation scenario's flow may name.
pub const PROTOCOLS: &str = "newreno, reno, sack, cubic or stp";

fn transport_named(p: &str) -> Option<StudyTransport> {
    Some(match p.to_ascii_lowercase().as_str() {
        "newreno" => StudyTransport::Tcp(Variant::NewReno),
        "reno" => StudyTransport::Tcp(Variant::Reno),
        "sack" => StudyTransport::Tcp(Variant::SackNewReno),
        "cubic" => StudyTransport::Cubic,
        "stp" => StudyTransport::Stp,
        _ => return None,
    })
}

impl ConstellationSpec {
    /// The constellation it names, errors naming the key.
    pub fn build(&self) -> Result<Constellation, ScenarioError> {
        if let Some(m) = self.mask_deg {
            if !(0.0..90.0).contains(&m) {
                return Err(field(
                    "constellation.mask_deg",
                    format!("{m}: the elevation mask must be at least 0 and below 90 degrees"),
                ));
            }
        }
        if let Some(l) = self.isl_latitude_deg {
            if !(0.0..=90.0).contains(&l) {
                return Err(field(
                    "constellation.isl_latitude_deg",
                    format!("{l}: must be from 0 to 90 degrees"),
                ));
            }
        }
        let mut c = self.build_shell()?;
        match &mut c {
            Constellation::Walker(s) => {
                if let Some(x) = self.cross_seam {
                    s.cross_seam = x;
                }
                if let Some(l) = self.isl_latitude_deg {
                    s.isl_latitude_threshold_deg = l;
                }
            }
            Constellation::Tle(t) => {
                if self.cross_seam.is_some() {
                    return Err(field(
                        "constellation.cross_seam",
                        "applies to a preset's star shell; a TLE file's ISLs are its satellites' nearest neighbours",
                    ));
                }
                if let Some(l) = self.isl_latitude_deg {
                    t.isl_latitude_threshold_deg = l;
                }
            }
        }
        Ok(c)
    }

    /// The attachment the table names, or the constellation's default.
    pub fn attachment(&self, c: &Constellation) -> Result<AttachPolicy, ScenarioError> {
        match &self.attach {
            None => Ok(c.default_attachment().0),
            Some(a) => a.parse().map_err(|_| {
                field(
                    "constellation.attach",
                    format!("'{a}' is not joint, highest or first"),
                )
            }),
        }
    }

    fn build_shell(&self) -> Result<Constellation, ScenarioError> {
        match (&self.preset, &self.tle) {
            (Some(_), Some(_)) => Err(field(
                "constellation.tle",
                "give preset or tle, not both",
            )),
            (None, None) => Err(field(
                "constellation.preset",
                "missing: name a preset (iridium, teledesic, starlink-550, kuiper-630, oneweb) or a tle file",
            )),
            (None, Some(path)) => {
                for (k, given) in [
                    ("altitude_km", self.altitude_km.is_some()),
                    ("phasing", self.phasing.is_some()),
                    ("inclination_deg", self.inclination_deg.is_some()),
                ] {
                    if given {
                        return Err(field(
                            format!("constellation.{k}"),
                            "changes a preset's shell; a TLE file's satellites are as the file gives them",
                        ));
                    }
                }
                let f = "constellation.tle";
                let text = std::fs::read_to_string(path)
                    .map_err(|e| field(f, format!("cannot read {path}: {e}")))?;
                let mut t = TleSet::parse(&text, path).map_err(|e| field(f, e.to_string()))?;
                if let Some(m) = self.mask_deg {
                    t.elevation_mask_deg = m;
                }
                Ok(Constellation::Tle(t))
            }
            (Some(name), None) => {
                // The preset's own `NAME,KEY=VALUE` changes: one rule for them (Shell::from_spec).
                let mut spec = name.clone();
                for (k, v) in [
                    ("altitude", self.altitude_km),
                    ("phasing", self.phasing.map(f64::from)),
                    ("inclination", self.inclination_deg),
                    ("mask", self.mask_deg),
                ] {
                    if let Some(v) = v {
                        spec.push_str(&format!(",{k}={v}"));
                    }
                }
                let c = Constellation::preset(&spec)
                    .map_err(|e| field("constellation.preset", e.to_string()))?;
                if let Constellation::Walker(s) = &c {
                    s.validate()
                        .map_err(|e| field("constellation", e.to_string()))?;
                }
                Ok(c)
            }
        }
    }
}

impl GroundStationSpec {
    fn place(&self) -> Result<Place, ScenarioError> {
        let key = format!("ground_station {}", self.name);
        let err = |k: &str, e: constellation::ConstellationError| {
            field(format!("{key}.{k}"), e.to_string())
        };
        let p = match (&self.city, self.lat, self.lon) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(field(
                    format!("{key}.city"),
                    "give city or lat and lon, not both",
                ))
            }
            (Some(c), None, None) => constellation::geo::place(c).map_err(|e| err("city", e))?,
            (None, Some(lat), Some(lon)) => {
                Place::new(&self.name, lat, lon).map_err(|e| err("lat", e))?
            }
            (None, Some(_), None) => return Err(field(format!("{key}.lon"), "missing (lat given)")),
            (None, None, Some(_)) => return Err(field(format!("{key}.lat"), "missing (lon given)")),
            (None, None, None) => constellation::geo::place(&self.name).map_err(|_| {
                field(
                    key.clone(),
                    format!(
                        "'{}' is not a built-in city (see `satstp leo list`); give city = \"…\" or lat and lon in degrees",
                        self.name
                    ),
                )
            })?,
        };
        Ok(Place {
            name: self.name.clone(),
            ..p
        })
    }
}

impl Scenario {
    /// Whether this scenario names a constellation (and runs on it as a packet network).
    pub fn is_constellation(&self) -> bool {
        self.constellation.is_some()
    }

    /// The constellation scenario's network and flows, checked; errors name the key.
    pub fn leo_plan(&self) -> Result<LeoPlan, ScenarioError> {
        let Some(cs) = &self.constellation else {
            return Err(field("constellation", "missing"));
        };
        for (k, given) in [
            ("node", !self.nodes.is_empty()),
            ("link", !self.links.is_empty()),
            ("route", !self.routes.is_empty()),
            ("web", !self.web.is_empty()),
        ] {
            if given {
                return Err(field(
                    k,
                    "a scenario with a [constellation] has [[ground_station]]s and [[flow]]s between them, not [[node]], [[link]], [[route]] or [[web]] tables",
                ));
            }
        }
        if !matches!(self.runs, crate::scenario::RunsSpec::Count(1)) || self.max_runs.is_some() {
            return Err(field(
                "runs",
                "a constellation scenario runs once per seed (give --seed for another run)",
            ));
        }
        let duration = self.duration_ns()?;
        let constellation = cs.build()?;
        let attach = cs.attachment(&constellation)?;
        let rate = |k: &str, v: &Option<String>, d: u64| -> Result<u64, ScenarioError> {
            match v {
                None => Ok(d),
                Some(x) => match parse_rate_bps(x) {
                    Ok(0) => Err(field(format!("constellation.{k}"), "must be above 0")),
                    Ok(r) => Ok(r),
                    Err(e) => Err(field(format!("constellation.{k}"), e.to_string())),
                },
            }
        };
        let isl_rate_bps = rate("isl_rate", &cs.isl_rate, 100_000_000)?;
        let gsl_rate_bps = rate("gsl_rate", &cs.gsl_rate, 10_000_000)?;
        let queue_packets = cs.queue_packets.unwrap_or(100);
        if queue_packets == 0 {
            return Err(field("constellation.queue_packets", "must be at least 1"));
        }
        let step = match &cs.step {
            None => SEC,
            Some(x) => {
                parse_duration_ns(x).map_err(|e| field("constellation.step", e.to_string()))?
            }
        };
        if step < 10 * crate::sim::MS || step > duration.max(SEC) {
            return Err(field(
                "constellation.step",
                "must be from 10ms up to the run's duration",
            ));
        }
        if self.ground_stations.len() < 2 {
            return Err(field(
                "ground_station",
                "a constellation scenario needs at least two [[ground_station]] tables",
            ));
        }
        let mut stations = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for g in &self.ground_stations {
            if names.contains(&g.name) {
                return Err(field(format!("ground_station {}", g.name), "named twice"));
            }
            stations.push(g.place()?);
            names.push(g.name.clone());
        }
        let expanded = self.expanded_flows()?;
        if expanded.is_empty() {
            return Err(field(
                "flow",
                "a constellation scenario needs at least one [[flow]]",
            ));
        }
        let mut flows = Vec::new();
        let mut flow_names = Vec::new();
        let mut protocols = Vec::new();
        for f in &expanded {
            let flow = study_flow(f, &names, duration)?;
            flows.push(flow);
            flow_names.push(f.name.clone());
            let proto = f.protocol.to_ascii_lowercase();
            protocols.push(match (flow.split, &f.hop) {
                // A split flow: the origin's TCP, then the hop's transport.
                (Some(_), hop) => format!(
                    "{proto}+{}",
                    hop.as_deref().unwrap_or("stp").to_ascii_lowercase()
                ),
                (None, _) => proto,
            });
        }
        Ok(LeoPlan {
            config: LeoNetConfig {
                constellation,
                stations,
                duration,
                step,
                isl_rate_bps,
                gsl_rate_bps,
                queue_packets,
                seed: self.seed,
                attach,
            },
            flows,
            flow_names,
            protocols,
            stations: names,
        })
    }
}

fn study_flow(f: &FlowSpec, names: &[String], duration: Time) -> Result<StudyFlow, ScenarioError> {
    let key = |k: &str| format!("flow {}.{k}", f.name);
    let unsupported = [
        ("bottleneck", f.bottleneck.is_some()),
        ("reverse_channel", f.reverse_channel.is_some()),
        ("trace", f.trace),
        ("stp", f.stp.is_some()),
        ("tcp", f.tcp.is_some()),
        ("hop_tcp", f.hop_tcp.is_some()),
        ("stripes", f.stripes.is_some()),
    ];
    if let Some((k, _)) = unsupported.iter().find(|(_, given)| *given) {
        return Err(field(
            key(k),
            "not available on a constellation scenario (a flow there has protocol, from, to, start, bytes, duration, count, origin_delay, origin_rate, split_at, hop and relay_buffer)",
        ));
    }
    let transport = transport_named(&f.protocol).ok_or_else(|| {
        let hint = if f.protocol.eq_ignore_ascii_case("split") {
            " (a constellation flow is split with split_at = \"STATION\", its protocol naming the origin's TCP)"
        } else {
            ""
        };
        field(
            key("protocol"),
            format!("'{}' is not one of {PROTOCOLS}{hint}", f.protocol),
        )
    })?;
    let station = |k: &str, n: &str| -> Result<usize, ScenarioError> {
        names.iter().position(|x| x == n).ok_or_else(|| {
            field(
                key(k),
                format!(
                    "'{n}' is not a ground station (the scenario's: {})",
                    names.join(", ")
                ),
            )
        })
    };
    let src = station("from", &f.from)?;
    let dst = station("to", &f.to)?;
    if src == dst {
        return Err(field(key("to"), "is the same station as from"));
    }
    let start = match &f.start {
        None => 0,
        Some(x) => parse_duration_ns(x).map_err(|e| field(key("start"), e.to_string()))?,
    };
    if start >= duration {
        return Err(field(
            key("start"),
            "is at or after the end of the run (duration)",
        ));
    }
    let bytes = match &f.bytes {
        None => None,
        Some(x) => match parse_bytes(x) {
            Ok(0) => return Err(field(key("bytes"), "must be above 0")),
            Ok(b) => Some(b),
            Err(e) => return Err(field(key("bytes"), e.to_string())),
        },
    };
    let stop = match &f.duration {
        None => None,
        Some(x) => match parse_duration_ns(x) {
            Ok(0) => return Err(field(key("duration"), "must be above 0")),
            Ok(d) => Some(start.saturating_add(d)),
            Err(e) => return Err(field(key("duration"), e.to_string())),
        },
    };
    let split = match &f.split_at {
        None => {
            for (k, given) in [
                ("hop", f.hop.is_some()),
                ("relay_buffer", f.relay_buffer.is_some()),
            ] {
                if given {
                    return Err(field(key(k), "applies to a split flow (give split_at)"));
                }
            }
            None
        }
        Some(at) => {
            station("split_at", at)?;
            if *at != f.from {
                return Err(field(
                    key("split_at"),
                    format!(
                        "'{at}' is not the flow's from station '{}': the gateway sits at the station the origin's TCP reaches, and the hop crosses the constellation from there",
                        f.from
                    ),
                ));
            }
            if transport == StudyTransport::Stp {
                return Err(field(
                    key("protocol"),
                    "a split flow's origin speaks TCP: newreno, reno, sack or cubic (the hop's transport is hop)",
                ));
            }
            let hop = match &f.hop {
                None => StudyTransport::Stp,
                Some(h) => transport_named(h)
                    .ok_or_else(|| field(key("hop"), format!("'{h}' is not one of {PROTOCOLS}")))?,
            };
            let relay_buffer = match &f.relay_buffer {
                None => 256 * 1024,
                Some(x) => match parse_bytes(x) {
                    Ok(b) if b >= 4096 => b,
                    Ok(_) => return Err(field(key("relay_buffer"), "must be at least 4KB")),
                    Err(e) => return Err(field(key("relay_buffer"), e.to_string())),
                },
            };
            Some(Split { hop, relay_buffer })
        }
    };
    let origin = if f.origin_delay.is_some() || f.origin_rate.is_some() || split.is_some() {
        let delay = match &f.origin_delay {
            None => 5 * crate::sim::MS,
            Some(x) => {
                parse_duration_ns(x).map_err(|e| field(key("origin_delay"), e.to_string()))?
            }
        };
        let rate_bps = match &f.origin_rate {
            None => 1_000_000_000,
            Some(x) => match parse_rate_bps(x) {
                Ok(0) => return Err(field(key("origin_rate"), "must be above 0")),
                Ok(r) => r,
                Err(e) => return Err(field(key("origin_rate"), e.to_string())),
            },
        };
        Some(Origin { rate_bps, delay })
    } else {
        None
    };
    Ok(StudyFlow {
        src,
        dst,
        transport,
        start,
        bytes,
        stop,
        origin,
        split,
    })
}

impl LeoPlan {
    /// Runs the plan on the constellation network.
    pub fn run(&self) -> Result<BulkStudy, ScenarioError> {
        flow_study(&self.config, &self.flows).map_err(|e| match e {
            crate::leo_net::LeoNetError::Sim(s) => ScenarioError::Sim(s),
            other => field("constellation", other.to_string()),
        })
    }

    /// Each flow's figures from a run of this plan.
    pub fn flow_results(&self, r: &BulkStudy) -> Vec<LeoFlowResult> {
        let end = self.config.duration;
        self.flows
            .iter()
            .enumerate()
            .map(|(f, spec)| {
                let delivered = r.delivered_bytes.get(f).copied().unwrap_or(0);
                let done = r.completed_at.get(f).copied().flatten();
                let until = done.or(spec.stop).unwrap_or(end).min(end);
                let life = until.saturating_sub(spec.start).max(1);
                let rtts: Vec<f64> = r
                    .seconds
                    .get(f)
                    .map(|s| s.iter().filter_map(|x| x.rtt_ms()).collect())
                    .unwrap_or_default();
                LeoFlowResult {
                    name: self.flow_names[f].clone(),
                    from: self.stations[spec.src].clone(),
                    to: self.stations[spec.dst].clone(),
                    protocol: self.protocols[f].clone(),
                    delivered_bytes: delivered,
                    goodput_bps: delivered as f64 * 8.0 / (life as f64 / 1e9),
                    completion_s: done.map(|t| t.saturating_sub(spec.start) as f64 / 1e9),
                    rtt_mean_ms: (!rtts.is_empty())
                        .then(|| rtts.iter().sum::<f64>() / rtts.len() as f64),
                    rtt_max_ms: rtts.iter().copied().reduce(f64::max),
                    received_packets: r.received_per_flow.get(f).copied().unwrap_or(0),
                    reordered_packets: r.reordered_per_flow.get(f).copied().unwrap_or(0),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
name = "small"
duration = "10s"
[constellation]
preset = "starlink-550"
gsl_rate = "10Mbps"
[[ground_station]]
name = "New York"
[[ground_station]]
name = "la"
city = "Los Angeles"
[[ground_station]]
name = "madrid"
lat = 40.4168
lon = -3.7038
[[flow]]
name = "a"
protocol = "newreno"
from = "New York"
to = "la"
[[flow]]
name = "b"
protocol = "cubic"
from = "la"
to = "madrid"
start = "1s"
duration = "4s"
[[flow]]
name = "c"
protocol = "stp"
from = "madrid"
to = "New York"
bytes = "2MB"
"#;

    /// Three flows between three cities over starlink-550 with 10 Mb/s GSLs: the persistent
    /// ones carry most of a GSL, the 2 MB STP transfer completes, and the RTTs lie between the
    /// light time through the shell and that plus the queues.
    #[test]
    fn a_small_constellation_scenario_runs_with_sensible_goodput() {
        let plan = plan_of(SMALL);
        assert_eq!(plan.stations, ["New York", "la", "madrid"]);
        assert_eq!(plan.flows[1].start, SEC);
        let r = plan.run().unwrap();
        let f = plan.flow_results(&r);
        assert_eq!(f.len(), 3);
        for x in &f[..2] {
            assert!(
                (4e6..=10e6).contains(&x.goodput_bps),
                "{}: {} b/s",
                x.name,
                x.goodput_bps
            );
            assert!(x.completion_s.is_none());
        }
        // Flow b sends for 4 s (from 1 s): what it delivers fits 4 s at the GSL rate, plus
        // what was in flight when it stopped.
        assert_eq!(plan.flows[1].stop, Some(5 * SEC));
        let b = f[1].delivered_bytes as f64;
        assert!(b > 4.0 * 4e6 / 8.0 && b < 4.3 * 10e6 / 8.0, "{b} bytes");
        assert_eq!(f[2].delivered_bytes, 2_000_000);
        let done = f[2].completion_s.expect("the 2 MB STP transfer completes");
        assert!(done > 1.6 && done < 8.0, "{done} s");
        for x in &f {
            let rtt = x.rtt_mean_ms.expect("packets both ways");
            // NY-LA light through the shell ~ 2 x 15 ms; 100-packet queues at 10 Mb/s add
            // at most ~120 ms a direction.
            assert!(rtt > 25.0 && rtt < 350.0, "{}: RTT {rtt} ms", x.name);
        }
    }

    /// The plan of a constellation scenario that is valid.
    fn plan_of(text: &str) -> LeoPlan {
        Scenario::from_toml(text).unwrap().leo_plan().unwrap()
    }

    fn error_of(text: &str) -> String {
        let e = Scenario::from_toml(text).unwrap_err().to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    }

    /// Each bad input gets one line naming the key and what is accepted.
    #[test]
    fn bad_constellation_scenarios_name_the_key() {
        let e = error_of(&SMALL.replace("to = \"la\"", "to = \"Paris\""));
        assert!(
            e.contains("flow a.to") && e.contains("'Paris' is not a ground station"),
            "{e}"
        );
        assert!(e.contains("New York, la, madrid"), "{e}");
        let e = error_of(&SMALL.replace("starlink-550", "starlink-9000"));
        assert!(e.contains("constellation.preset"), "{e}");
        assert!(e.contains("starlink-9000"), "{e}");
        let e = error_of(&SMALL.replace("40.4168", "140.4168"));
        assert!(e.contains("ground_station madrid.lat"), "{e}");
        assert!(e.contains("-90..90"), "{e}");
        let e = error_of(&SMALL.replace("lon = -3.7038", ""));
        assert!(e.contains("ground_station madrid.lon"), "{e}");
        let e = error_of(&SMALL.replace("name = \"New York\"", "name = \"Atlantis\""));
        assert!(e.contains("ground_station Atlantis"), "{e}");
        assert!(e.contains("not a built-in city"), "{e}");
        let e = error_of(&SMALL.replace("\"cubic\"", "\"bbr\""));
        assert!(
            e.contains("flow b.protocol") && e.contains("newreno"),
            "{e}"
        );
        let e = error_of(&SMALL.replace("start = \"1s\"", "start = \"10s\""));
        assert!(e.contains("flow b.start"), "{e}");
        let e = error_of(&SMALL.replace("duration = \"4s\"", "duration = \"0s\""));
        assert!(e.contains("flow b.duration"), "{e}");
        let e = error_of(&SMALL.replace("bytes = \"2MB\"", "bytes = \"2 parsecs\""));
        assert!(e.contains("flow c.bytes"), "{e}");
        let e = error_of(&SMALL.replace("gsl_rate = \"10Mbps\"", "mask_deg = 95.0"));
        assert!(e.contains("constellation.mask_deg"), "{e}");
        let e = error_of(&SMALL.replace("preset = \"starlink-550\"", ""));
        assert!(
            e.contains("constellation.preset") && e.contains("tle"),
            "{e}"
        );
        let e =
            error_of(&SMALL.replace("preset = \"starlink-550\"", "tle = \"/nonexistent/x.tle\""));
        assert!(
            e.contains("constellation.tle") && e.contains("/nonexistent/x.tle"),
            "{e}"
        );
        let e = error_of(&format!("{SMALL}\n[[node]]\nname = \"x\"\n"));
        assert!(e.starts_with("node:"), "{e}");
        let e = error_of(&SMALL.replace(
            "protocol = \"newreno\"",
            "protocol = \"newreno\"\nsplit_at = \"la\"",
        ));
        assert!(e.contains("flow a.split_at"), "{e}");
        // An unknown key: the TOML reader's located message, as for every scenario.
        let e = Scenario::from_toml(
            &SMALL.replace("[constellation]\n", "[constellation]\nradius = 3\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown field `radius`") && e.contains("altitude_km"),
            "{e}"
        );
    }

    const SPLIT: &str = r#"
name = "split"
duration = "8s"
[constellation]
preset = "starlink-550"
gsl_rate = "10Mbps"
[[ground_station]]
name = "New York"
[[ground_station]]
name = "Los Angeles"
[[ground_station]]
name = "London"
[[flow]]
name = "s"
protocol = "newreno"
from = "London"
to = "New York"
split_at = "London"
origin_delay = "10ms"
bytes = "1MB"
[[flow]]
name = "t"
protocol = "cubic"
from = "New York"
to = "Los Angeles"
split_at = "New York"
hop = "newreno"
relay_buffer = "128KB"
bytes = "700KB"
start = "1s"
[[flow]]
name = "e"
protocol = "sack"
from = "London"
to = "Los Angeles"
origin_delay = "10ms"
origin_rate = "100Mbps"
bytes = "500KB"
"#;

    /// Split flows at ground stations: an origin's TCP ends at the gateway of its station and
    /// STP (or a TCP hop) carries the bytes across the constellation; every byte arrives,
    /// exactly, and so does the end-to-end flow from an origin host.
    #[test]
    fn split_flows_at_ground_stations_deliver_every_byte() {
        let plan = plan_of(SPLIT);
        let split = plan.flows[0].split.expect("flow s is split");
        assert_eq!(split.hop, StudyTransport::Stp);
        assert_eq!(split.relay_buffer, 256 * 1024);
        assert_eq!(
            plan.flows[0].origin,
            Some(Origin {
                rate_bps: 1_000_000_000,
                delay: 10 * crate::sim::MS
            })
        );
        let t = plan.flows[1].split.expect("flow t is split");
        assert_eq!(t.hop, StudyTransport::Tcp(Variant::NewReno));
        assert_eq!(t.relay_buffer, 128_000);
        assert_eq!(plan.flows[1].transport, StudyTransport::Cubic);
        assert!(plan.flows[2].split.is_none());
        assert_eq!(plan.flows[2].origin.map(|o| o.rate_bps), Some(100_000_000));
        let r = plan.run().unwrap();
        let f = plan.flow_results(&r);
        assert_eq!(r.undeliverable, 0);
        let protocols: Vec<&str> = f.iter().map(|x| x.protocol.as_str()).collect();
        assert_eq!(protocols, ["newreno+stp", "cubic+newreno", "sack"]);
        for (x, bytes) in f.iter().zip([1_000_000, 700_000, 500_000]) {
            assert_eq!(x.delivered_bytes, bytes, "{}", x.name);
            let done = x
                .completion_s
                .unwrap_or_else(|| panic!("{} completes", x.name));
            assert!(done > 0.1 && done < 7.0, "{}: {done} s", x.name);
            // The hop's (or the path's) RTT is measured: the split flows' through their
            // gateway, the end-to-end flow's from its origin (two 10 ms terrestrial legs more).
            let rtt = x
                .rtt_mean_ms
                .unwrap_or_else(|| panic!("{}: an RTT", x.name));
            assert!(rtt > 25.0 && rtt < 400.0, "{}: {rtt} ms", x.name);
            assert!(
                x.received_packets > 300,
                "{}: {}",
                x.name,
                x.received_packets
            );
        }
        // London -> LA from an origin 10 ms away: its RTT includes both terrestrial legs.
        let light = 2.0
            * constellation::geo::place("London")
                .unwrap()
                .distance_km(&constellation::geo::place("Los Angeles").unwrap())
            / constellation::geo::C_KM_S
            * 1e3;
        let rtt = f[2].rtt_mean_ms.unwrap_or_default();
        assert!(rtt > light + 20.0, "{rtt} ms, light {light} ms");
    }

    /// The split keys' errors, one line each naming the key.
    #[test]
    fn bad_split_and_attachment_keys_name_the_key() {
        // (text replaced, by what, what the error says)
        let cases: [(&str, &str, &[&str]); 10] = [
            (
                "split_at = \"London\"",
                "split_at = \"New York\"",
                &["flow s.split_at", "not the flow's from station"],
            ),
            (
                "split_at = \"London\"",
                "split_at = \"Paris\"",
                &["flow s.split_at", "not a ground station"],
            ),
            (
                "hop = \"newreno\"",
                "hop = \"quic\"",
                &["flow t.hop", "'quic'"],
            ),
            (
                "protocol = \"cubic\"",
                "protocol = \"stp\"",
                &["flow t.protocol", "origin speaks TCP"],
            ),
            (
                "protocol = \"cubic\"",
                "protocol = \"split\"",
                &["flow t.protocol", "split_at"],
            ),
            (
                "relay_buffer = \"128KB\"",
                "relay_buffer = \"1KB\"",
                &["flow t.relay_buffer"],
            ),
            (
                "origin_rate = \"100Mbps\"",
                "origin_rate = \"fast\"",
                &["flow e.origin_rate"],
            ),
            (
                "origin_delay = \"10ms\"\norigin_rate",
                "origin_delay = \"soon\"\norigin_rate",
                &["flow e.origin_delay"],
            ),
            (
                "origin_rate = \"100Mbps\"",
                "hop = \"stp\"",
                &["flow e.hop", "split_at"],
            ),
            (
                "gsl_rate = \"10Mbps\"",
                "isl_latitude_deg = 95.0",
                &["constellation.isl_latitude_deg"],
            ),
        ];
        for (text, by, says) in cases {
            assert!(SPLIT.contains(text), "{text}");
            let e = error_of(&SPLIT.replace(text, by));
            assert!(says.iter().all(|s| e.contains(s)), "{by}: {e}");
        }
        let c = |k: &str| SPLIT.replace("gsl_rate = \"10Mbps\"", k);
        let e = error_of(&c("attach = \"nearest\""));
        assert!(
            e.contains("constellation.attach") && e.contains("joint, highest or first"),
            "{e}"
        );
        let e = Scenario::from_toml(&c("cross_seam = \"yes\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cross_seam") && e.contains("bool"), "{e}");
        // Outside a constellation scenario, the origin keys are refused by name.
        let geo = "name = \"g\"\nduration = \"1s\"\n[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n\
                   [[link]]\na = \"a\"\nb = \"b\"\nrate = \"1Mbps\"\ndelay = \"10ms\"\n\
                   [[flow]]\nname = \"f\"\nprotocol = \"tcp\"\nfrom = \"a\"\nto = \"b\"\norigin_delay = \"5ms\"\n";
        let e = Scenario::from_toml(geo)
            .and_then(|s| s.build(1).map(|_| ()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("flow f.origin_delay"), "{e}");
    }

    /// The attachment and shell keys reach the network: iridium defaults to highest (as
    /// `satstp leo`), the modern shells to joint; highest-elevation attachment lengthens
    /// NY-LA over starlink-550 (the issue's detour through the +Grid), joint does not.
    #[test]
    fn attachment_and_isl_keys_reach_the_network() {
        let base = SMALL.replace("duration = \"10s\"", "duration = \"3s\"");
        let plan = |extra: &str| {
            Scenario::from_toml(&base.replace("gsl_rate = \"10Mbps\"", extra))
                .unwrap()
                .leo_plan()
                .unwrap()
        };
        assert_eq!(plan("").config.attach, AttachPolicy::Joint);
        let iridium = Scenario::from_toml(&base.replace("starlink-550", "iridium"))
            .unwrap()
            .leo_plan()
            .unwrap();
        assert_eq!(iridium.config.attach, AttachPolicy::HighestElevation);
        let first = plan("attach = \"first\"");
        assert_eq!(first.config.attach, AttachPolicy::FirstFound);
        let p = plan("isl_latitude_deg = 50.0\ncross_seam = true");
        let Constellation::Walker(w) = &p.config.constellation else {
            unreachable!("a preset")
        };
        assert_eq!(w.isl_latitude_threshold_deg, 50.0);
        assert!(w.cross_seam);
        let rtt = |p: &LeoPlan| {
            let r = p.run().unwrap();
            p.flow_results(&r)[0].rtt_mean_ms.unwrap()
        };
        let joint = rtt(&plan(""));
        let highest = rtt(&plan("attach = \"highest\""));
        eprintln!("NY-LA RTT joint {joint:.1} ms, highest {highest:.1} ms");
        assert!(
            highest > joint + 5.0,
            "highest {highest} ms, joint {joint} ms"
        );
    }

    /// A TLE file as the constellation (the TLEs `satstp leo tle` writes for kuiper-630): the
    /// scenario runs on the SGP4 satellites and the flow delivers.
    #[test]
    fn a_tle_constellation_scenario_runs() {
        let Constellation::Walker(shell) = Constellation::preset("kuiper-630").unwrap() else {
            unreachable!("a preset is a Walker shell")
        };
        let path = std::env::temp_dir().join(format!("leo-scenario-{}.tle", std::process::id()));
        std::fs::write(&path, constellation::tle::shell_to_tles(&shell)).unwrap();
        let text = format!(
            "name = \"tle\"\nduration = \"5s\"\n[constellation]\ntle = \"{}\"\nmask_deg = 30.0\n\
             [[ground_station]]\nname = \"New York\"\n[[ground_station]]\nname = \"London\"\n\
             [[flow]]\nname = \"x\"\nprotocol = \"sack\"\nfrom = \"New York\"\nto = \"London\"\n",
            path.display()
        );
        let plan = plan_of(&text);
        let _ = std::fs::remove_file(&path);
        assert!(matches!(plan.config.constellation, Constellation::Tle(_)));
        assert_eq!(plan.config.constellation.elevation_mask_deg(), 30.0);
        let r = plan.run().unwrap();
        let f = plan.flow_results(&r);
        assert!(f[0].goodput_bps > 2e6, "{:?}", f[0]);
        // With a TLE file, the preset's shell changes are refused by name.
        let e = error_of(&text.replace("mask_deg = 30.0", "altitude_km = 600.0"));
        assert!(e.contains("constellation.altitude_km"), "{e}");
    }

    /// The study's flows run through `flow_study` unchanged: `bulk_study` is `flow_study` with
    /// its own flow list (so the reproductions' figures stay the same).
    #[test]
    fn bulk_study_is_flow_study_with_its_flow_list() {
        let stations = ["New York", "London", "Tokyo", "Sydney"]
            .iter()
            .map(|n| constellation::geo::place(n).unwrap())
            .collect();
        let starlink = Constellation::preset("starlink-550").unwrap();
        let cfg = LeoNetConfig {
            seed: 3,
            ..LeoNetConfig::study(starlink, stations, 3 * SEC)
        };
        let t = StudyTransport::Tcp(Variant::NewReno);
        let a = crate::leo_net::bulk_study(&cfg, 3, t).unwrap();
        let list: Vec<StudyFlow> = (0..3)
            .map(|f| StudyFlow {
                src: f % 4,
                dst: (f + 2) % 4,
                transport: t,
                start: SEC * f as u64 / 3,
                bytes: None,
                stop: None,
                origin: None,
                split: None,
            })
            .collect();
        let b = flow_study(&cfg, &list).unwrap();
        assert_eq!(a.goodput_bps, b.goodput_bps);
        assert_eq!(a.events, b.events);
        assert!(
            a.goodput_bps.iter().all(|&g| g > 0.0),
            "{:?}",
            a.goodput_bps
        );
    }
}
