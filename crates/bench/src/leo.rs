//! The LEO logic behind `satstp bench leo` and the emulators' `--leo` flag, out of the binary:
//! min-delay routes between every pair of ground terminals and the full forwarding state over a
//! stretch of orbit time ([`routes`]), the constellation as a packet network in the simulator
//! ([`network`]), and the link a `--leo CONSTELLATION:FROM:TO[:ROUTING]` flag describes
//! ([`path`]). The binary parses the flags, calls these and prints.

use crate::emulate::LeoPath;
use crate::error::{Context, Result};
use constellation::experiments::all_pairs;
use constellation::fstate;
use constellation::geo::{stations, Place};
use constellation::trace::compute;
use constellation::{AttachPolicy, Constellation, PathSpec, TraceSpec};
use linkmodel::{Delay, Outage};
use netsim::leo_net::{bulk_study, BulkStudy, LeoNetConfig, StudyTransport};
use netsim::Variant;
use serde_json::{json, Value};

/// What `bench leo` measures (without `--network`).
#[derive(Debug, Clone)]
pub struct RoutesOptions {
    /// A preset with optional changes (`starlink-550,phasing=17`).
    pub constellation: String,
    /// Attachment of the pair delays (`highest`, `first`, `joint`); `None`: the
    /// constellation's own.
    pub attach: Option<String>,
    /// Ground terminals: the built-in cities first, then seeded random points.
    pub terminals: usize,
    /// Orbit time covered and the time between instants, seconds.
    pub duration_s: f64,
    pub step_s: f64,
    pub threads: usize,
}

/// The sizes both `bench leo` runs need, checked before any work.
pub fn check(terminals: usize, duration_s: f64, step_s: f64) -> Result<()> {
    if terminals < 2 {
        bail!("--terminals must be at least 2");
    }
    if step_s <= 0.0 || duration_s <= 0.0 {
        bail!("--step and --duration must be positive");
    }
    Ok(())
}

/// The figures of a [`routes`] run.
#[derive(Debug, Clone)]
pub struct Routes {
    pub constellation: String,
    pub satellites: usize,
    pub terminals: usize,
    pub threads: usize,
    pub attach: AttachPolicy,
    /// Instants computed by the pair-delay run.
    pub snapshots: u64,
    pub paths: u64,
    pub unreachable: u64,
    pub wall_s: f64,
    pub paths_per_s: f64,
    pub mean_delay_ms: f64,
    pub fstate_wall_s: f64,
    pub fstate_steps: u64,
    pub fstate_lines: u64,
    /// Bytes of the forwarding state's CSV (counted, not kept).
    pub fstate_bytes: u64,
    /// Forwarding entries per instant: every satellite's and terminal's towards every terminal.
    pub fstate_entries_per_step: usize,
    /// Terminals with no satellite above the mask at any instant.
    pub never_covered: Vec<String>,
    /// Terminals covered at some instants only, with the share of instants uncovered.
    pub partly_covered: Vec<String>,
}

/// (1) Min-delay routes between every ordered pair of terminals at every instant with the
/// attachment asked for, on `threads` threads, then (2) the full forwarding state (joint
/// attachment) serialised as `leo fstate` writes it, each timed.
pub fn routes(o: &RoutesOptions) -> Result<Routes> {
    check(o.terminals, o.duration_s, o.step_s)?;
    let c = Constellation::preset(&o.constellation)?;
    let policy = match &o.attach {
        Some(x) => x.parse::<AttachPolicy>().context("--attach")?,
        None => c.default_attachment().0,
    };
    let t = stations(o.terminals);
    let steps = (o.duration_s / o.step_s).round() as u64;
    let started = std::time::Instant::now();
    let r = all_pairs(&c, &t, steps, o.step_s, o.threads.max(1), policy);
    let wall_s = started.elapsed().as_secs_f64();
    let positions: Vec<_> = t.iter().map(Place::position).collect();
    let mut sink = CountingSink::default();
    let started = std::time::Instant::now();
    let f = fstate::run(&c, &positions, 0.0, steps, o.step_s, &mut sink)
        .context("the forwarding state")?;
    let fstate_wall_s = started.elapsed().as_secs_f64();
    let (never_covered, partly_covered) = coverage(&t, &f.uncovered_steps, f.steps);
    Ok(Routes {
        constellation: c.name().to_string(),
        satellites: c.count(),
        terminals: o.terminals,
        threads: o.threads,
        attach: policy,
        snapshots: r.snapshots,
        paths: r.paths,
        unreachable: r.unreachable,
        wall_s,
        paths_per_s: r.paths as f64 / wall_s,
        mean_delay_ms: r.sum_delay_s / r.paths.max(1) as f64 * 1e3,
        fstate_wall_s,
        fstate_steps: f.steps,
        fstate_lines: f.lines,
        fstate_bytes: sink.bytes,
        fstate_entries_per_step: (c.count() + t.len()) * t.len(),
        never_covered,
        partly_covered,
    })
}

/// The terminals never covered and those covered part of the time (with the share of instants
/// without a satellite), from each one's uncovered steps out of `steps`.
fn coverage(t: &[Place], uncovered: &[u64], steps: u64) -> (Vec<String>, Vec<String>) {
    let never = t
        .iter()
        .zip(uncovered)
        .filter(|(_, &u)| u == steps)
        .map(|(p, _)| p.name.clone())
        .collect();
    let partly = t
        .iter()
        .zip(uncovered)
        .filter(|(_, &u)| u > 0 && u < steps)
        .map(|(p, &u)| {
            format!(
                "{} ({:.0}% of instants)",
                p.name,
                100.0 * u as f64 / steps as f64
            )
        })
        .collect();
    (never, partly)
}

impl Routes {
    /// The report as `bench leo --json` writes it.
    pub fn json(&self) -> Value {
        json!({
            "constellation": self.constellation, "satellites": self.satellites,
            "terminals": self.terminals, "snapshots": self.snapshots, "threads": self.threads,
            "attach": self.attach.name(), "paths": self.paths, "unreachable": self.unreachable,
            "wall_s": self.wall_s, "paths_per_s": self.paths_per_s,
            "mean_delay_ms": self.mean_delay_ms, "fstate_wall_s": self.fstate_wall_s,
            "fstate_steps": self.fstate_steps, "fstate_lines": self.fstate_lines,
            "fstate_bytes": self.fstate_bytes,
            "fstate_entries_per_step": self.fstate_entries_per_step,
            "never_covered": self.never_covered, "partly_covered": self.partly_covered,
        })
    }
}

/// Counts the bytes written to it.
#[derive(Default)]
struct CountingSink {
    bytes: u64,
}

impl std::io::Write for CountingSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.bytes += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `bench leo --network` runs.
#[derive(Debug, Clone)]
pub struct NetworkOptions {
    pub constellation: String,
    pub terminals: usize,
    /// Flows: terminal i sends to terminal i + terminals/2 (mod terminals).
    pub flows: usize,
    pub duration_s: f64,
    /// Forwarding state swapped every this long, seconds.
    pub step_s: f64,
    pub gsl_rate_bps: u64,
    pub isl_rate_bps: u64,
    /// The flows' transport ([`parse_variant`]) and its name as given (for the report).
    pub transport: StudyTransport,
    pub variant: String,
}

/// A `--variant` of `bench leo --network`.
pub fn parse_variant(v: &str) -> Result<StudyTransport> {
    Ok(match v.to_ascii_lowercase().as_str() {
        "newreno" => StudyTransport::Tcp(Variant::NewReno),
        "sack" | "sack-newreno" => StudyTransport::Tcp(Variant::SackNewReno),
        "reno" => StudyTransport::Tcp(Variant::Reno),
        "cubic" => StudyTransport::Cubic,
        "stp" => StudyTransport::Stp,
        v => bail!("--variant '{v}': expected newreno, sack, cubic, reno or stp"),
    })
}

/// A [`network`] run: the study and the figures drawn from it.
pub struct Network {
    pub constellation: String,
    pub satellites: usize,
    /// The ground stations' names, in station order (the study's CSV names them).
    pub stations: Vec<String>,
    pub study: BulkStudy,
    /// Simulated events per second of wall time.
    pub events_per_s: f64,
    /// The busiest ISL direction's utilisation over the run (0 to 1).
    pub busiest_isl: f64,
    /// The longest queueing delay of an ISL at a step, ms.
    pub longest_isl_queue_ms: f64,
    /// Goodput of each flow, b/s, sorted.
    pub goodput_sorted_bps: Vec<f64>,
}

/// The constellation as a packet network in the simulator (`netsim::leo_net`): `flows` bulk
/// flows between the terminals for the duration, the forwarding state swapped every step.
pub fn network(o: &NetworkOptions) -> Result<Network> {
    check(o.terminals, o.duration_s, o.step_s)?;
    let c = Constellation::preset(&o.constellation)?;
    let t = stations(o.terminals);
    let cfg = LeoNetConfig {
        step: (o.step_s * 1e9).round() as u64,
        isl_rate_bps: o.isl_rate_bps,
        gsl_rate_bps: o.gsl_rate_bps,
        ..LeoNetConfig::study(c.clone(), t.clone(), (o.duration_s * 1e9).round() as u64)
    };
    let study = bulk_study(&cfg, o.flows, o.transport).context("the constellation network")?;
    let busiest_isl = study.busiest_isl_utilisation();
    let longest_isl_queue_ms = study.longest_isl_queue_ms();
    let mut goodput_sorted_bps = study.goodput_bps.clone();
    goodput_sorted_bps.sort_by(f64::total_cmp);
    Ok(Network {
        constellation: c.name().to_string(),
        satellites: c.count(),
        stations: t.into_iter().map(|p| p.name).collect(),
        events_per_s: study.events as f64 / study.run_s.max(1e-9),
        busiest_isl,
        longest_isl_queue_ms,
        goodput_sorted_bps,
        study,
    })
}

impl Network {
    /// The report as `bench leo --network --json` writes it.
    pub fn json(&self, o: &NetworkOptions) -> Value {
        let r = &self.study;
        json!({
            "constellation": self.constellation, "satellites": self.satellites,
            "stations": self.stations.len(), "flows": o.flows, "variant": o.variant,
            "duration_s": o.duration_s, "events": r.events, "build_s": r.build_s,
            "run_s": r.run_s, "events_per_s": self.events_per_s,
            "route_changes": r.route_changes, "received_packets": r.received_packets,
            "reordered_packets": r.reordered_packets, "goodput_bps": r.goodput_bps,
            "undeliverable": r.undeliverable, "reordered_per_flow": r.reordered_per_flow,
            "isl_links_used": r.isl_links.len(), "busiest_isl_utilisation": self.busiest_isl,
            "longest_isl_queue_ms": self.longest_isl_queue_ms,
        })
    }
}

/// The link of a `--leo CONSTELLATION:FROM:TO[:ROUTING]` flag over `duration_s` (one hour if not
/// given, at least 1 s), sampled every 50 ms: its delay trace, its outages and the preset's GSL
/// rate (the default rate of both directions), with a one-line summary of it.
pub fn path(text: &str, duration_s: Option<f64>) -> Result<(LeoPath, String)> {
    let p: PathSpec = text.parse().with_context(|| format!("--leo '{text}'"))?;
    let c = Constellation::preset(&p.constellation)?;
    let duration = duration_s.unwrap_or(3600.0).max(1.0);
    let spec = TraceSpec::new(p.from.clone(), p.to.clone(), p.routing, duration, 0.05);
    let tr = compute(&c, &spec)?;
    let (lo, hi) = (tr.delays().reduce(f64::min), tr.delays().reduce(f64::max));
    let (Some(lo), Some(hi)) = (lo, hi) else {
        bail!(
            "--leo '{text}': no path between {} and {} in {duration} s",
            p.from.name,
            p.to.name
        );
    };
    let outages = tr.outages();
    let summary = format!(
        "{} -> {} over {} ({}): one-way {:.1}..{:.1} ms over {duration} s, {} outages",
        p.from.name,
        p.to.name,
        p.constellation,
        p.routing.name(),
        lo * 1e3,
        hi * 1e3,
        outages.len()
    );
    let path = LeoPath {
        delay: Delay::Trace {
            points: tr.delay_points_ns(1e-5),
            period_ns: None,
        },
        outages: outages
            .into_iter()
            .map(|(b, d)| Outage {
                start_ns: (b * 1e9) as u64,
                duration_ns: (d * 1e9).max(1.0) as u64,
            })
            .collect(),
        gsl_rate_bps: c.shell().map_or(1_500_000, |s| s.gsl_rate_bps),
    };
    Ok((path, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leo_flag_gives_a_valid_trace_at_the_presets_rate() {
        let (l, summary) = path("iridium:New York:San Francisco", Some(60.0)).unwrap();
        let Delay::Trace { points, .. } = &l.delay else {
            panic!("not a trace")
        };
        assert_eq!(points[0].0, 0);
        assert!(points.windows(2).all(|w| w[1].0 > w[0].0));
        // Iridium's path between the two cities is some 20 to 80 ms one way.
        assert!(points
            .iter()
            .all(|&(_, d)| (15e6..80e6).contains(&(d as f64))));
        assert_eq!(l.gsl_rate_bps, 1_500_000);
        assert!(
            summary.starts_with("New York -> San Francisco over iridium (min-delay): one-way "),
            "{summary}"
        );
        assert!(summary.ends_with("over 60 s, 0 outages"), "{summary}");
    }

    #[test]
    fn bad_leo_flags_name_the_flag() {
        let e = path("iridium:NY", None).unwrap_err();
        assert!(crate::chain(&e).starts_with("--leo 'iridium:NY': expected "));
        let e = path("iridium:New York:Atlantis", Some(1.0)).unwrap_err();
        assert!(crate::chain(&e).contains("unknown place 'Atlantis'"));
    }

    #[test]
    fn routes_cover_every_pair_and_the_forwarding_state_is_written() {
        let o = RoutesOptions {
            constellation: "iridium".into(),
            attach: Some("highest".into()),
            terminals: 4,
            duration_s: 10.0,
            step_s: 5.0,
            threads: 2,
        };
        let r = routes(&o).unwrap();
        assert_eq!((r.satellites, r.snapshots, r.fstate_steps), (66, 2, 2));
        // Every ordered pair at every instant has a path or is counted without one.
        assert_eq!(r.paths + r.unreachable, 2 * 4 * 3);
        assert!(r.paths > 0 && r.mean_delay_ms > 1.0 && r.mean_delay_ms < 200.0);
        assert_eq!(r.fstate_entries_per_step, (66 + 4) * 4);
        // The header and at least every entry of the first step.
        assert!(r.fstate_lines >= r.fstate_entries_per_step as u64);
        assert!(r.fstate_bytes > r.fstate_lines * 8);
        let j = r.json();
        assert_eq!(j["attach"], "highest");
        assert_eq!(j["paths"], r.paths);
    }

    #[test]
    fn bad_sizes_and_attachments_are_refused_before_any_work() {
        let mut o = RoutesOptions {
            constellation: "iridium".into(),
            attach: None,
            terminals: 1,
            duration_s: 10.0,
            step_s: 5.0,
            threads: 1,
        };
        assert_eq!(
            routes(&o).unwrap_err().to_string(),
            "--terminals must be at least 2"
        );
        o.terminals = 2;
        o.step_s = 0.0;
        assert!(routes(&o).unwrap_err().to_string().contains("--step"));
        o.step_s = 1.0;
        o.attach = Some("xyz".into());
        assert!(crate::chain(&routes(&o).unwrap_err()).starts_with("--attach: "));
    }

    #[test]
    fn coverage_splits_never_and_partly_covered_terminals() {
        let t = stations(3);
        let (never, partly) = coverage(&t, &[4, 1, 0], 4);
        assert_eq!(never, vec![t[0].name.clone()]);
        assert_eq!(partly, vec![format!("{} (25% of instants)", t[1].name)]);
    }

    #[test]
    fn variants_are_parsed_or_refused_with_the_list() {
        assert_eq!(
            parse_variant("SACK").unwrap(),
            StudyTransport::Tcp(Variant::SackNewReno)
        );
        assert_eq!(parse_variant("stp").unwrap(), StudyTransport::Stp);
        assert_eq!(
            parse_variant("bogus").unwrap_err().to_string(),
            "--variant 'bogus': expected newreno, sack, cubic, reno or stp"
        );
    }

    #[test]
    fn a_small_network_carries_its_flows() {
        let o = NetworkOptions {
            constellation: "iridium".into(),
            terminals: 4,
            flows: 2,
            duration_s: 2.0,
            step_s: 1.0,
            gsl_rate_bps: 1_500_000,
            isl_rate_bps: 10_000_000,
            transport: StudyTransport::Tcp(Variant::NewReno),
            variant: "newreno".into(),
        };
        let n = network(&o).unwrap();
        assert_eq!(n.stations.len(), 4);
        assert_eq!(n.goodput_sorted_bps.len(), 2);
        assert!(n.goodput_sorted_bps.windows(2).all(|w| w[0] <= w[1]));
        assert!(n.study.events > 0 && n.events_per_s > 0.0);
        assert!((0.0..=1.0).contains(&n.busiest_isl));
        assert_eq!(n.json(&o)["flows"], 2);
    }
}
