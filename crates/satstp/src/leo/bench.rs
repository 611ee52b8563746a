//! `satstp bench leo`: over a stretch of orbit time (default: starlink-550, 100 terminals, every
//! 1 s for 600 s), (1) min-delay routes between every pair of ground terminals with the
//! constellation's attachment, on one core or several, and (2) the full forwarding state (every
//! satellite's and terminal's next hop towards every terminal, as `satstp leo fstate` writes
//! it); prints wall times, paths per second, and the terminals the shell does not always cover.

use super::parse_seconds;
use anyhow::{bail, Context, Result};
use clap::Args;
use constellation::experiments::all_pairs;
use constellation::fstate;
use constellation::geo::{stations, Place};
use constellation::{AttachPolicy, Constellation};

#[derive(Debug, Args)]
pub struct LeoBenchArgs {
    /// Constellation preset (with optional changes, e.g. starlink-550,phasing=17).
    #[arg(long, default_value = "starlink-550")]
    constellation: String,
    /// Attachment of the pair delays: highest, first or joint (default: the constellation's,
    /// joint for the modern shells).
    #[arg(long)]
    attach: Option<String>,
    /// Ground terminals: the built-in cities first, then random points (seeded).
    #[arg(long, default_value_t = 100)]
    terminals: usize,
    /// Orbit time covered.
    #[arg(long, default_value = "600s", value_parser = parse_seconds, allow_negative_numbers = true)]
    duration: f64,
    /// Recompute every this long.
    #[arg(long, default_value = "1s", value_parser = parse_seconds, allow_negative_numbers = true)]
    step: f64,
    /// Threads (the instants are split between them).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<std::path::PathBuf>,
    /// Instead: the constellation as a packet network in the simulator (netsim::leo_net):
    /// --flows TCP bulk flows between the terminals for --duration, forwarding state swapped
    /// every --step; prints events per second and wall time.
    #[arg(long)]
    network: bool,
    /// Flows of --network: terminal i sends to terminal i + terminals/2 (mod terminals).
    #[arg(long, default_value_t = 100)]
    flows: usize,
    /// GSL rate of --network (each direction of each ground-satellite link).
    #[arg(long, default_value = "10Mbps")]
    gsl_rate: String,
    /// ISL rate of --network.
    #[arg(long, default_value = "100Mbps")]
    isl_rate: String,
    /// Transport of --network's flows: newreno, sack (SACK-NewReno), cubic (SACK-NewReno
    /// recovery with CUBIC's window, RFC 9438), reno or stp.
    #[arg(long, default_value = "newreno")]
    variant: String,
    /// With --network: write the study's outputs into this directory (created if missing):
    /// leo-network-flows.csv, -rtt.csv, -isl.csv, -isl-links.csv and the charts
    /// leo-network-rtt, -isl-utilisation, -isl-queue (.png and .svg).
    #[arg(long, value_name = "DIR")]
    out: Option<std::path::PathBuf>,
}

pub fn run(a: &LeoBenchArgs) -> Result<()> {
    crate::outpath::json_start(&a.json)?;
    if a.terminals < 2 {
        bail!("--terminals must be at least 2");
    }
    if a.step <= 0.0 || a.duration <= 0.0 {
        bail!("--step and --duration must be positive");
    }
    if a.network {
        return network(a);
    }
    let c = Constellation::preset(&a.constellation)?;
    let policy = match &a.attach {
        Some(x) => x.parse::<AttachPolicy>().context("--attach")?,
        None => c.default_attachment().0,
    };
    let t = stations(a.terminals);
    let steps = (a.duration / a.step).round() as u64;
    let started = std::time::Instant::now();
    let r = all_pairs(&c, &t, steps, a.step, a.threads.max(1), policy);
    let wall = started.elapsed().as_secs_f64();
    let pps = r.paths as f64 / wall;
    let mean_ms = r.sum_delay_s / r.paths.max(1) as f64 * 1e3;
    // The full forwarding state, serialised as `leo fstate` writes it (bytes counted, not kept).
    let positions: Vec<_> = t.iter().map(Place::position).collect();
    let mut sink = CountingSink::default();
    let started = std::time::Instant::now();
    let f = fstate::run(&c, &positions, 0.0, steps, a.step, &mut sink)?;
    let fwall = started.elapsed().as_secs_f64();
    let never: Vec<&str> = t
        .iter()
        .zip(&f.uncovered_steps)
        .filter(|(_, &u)| u == f.steps)
        .map(|(p, _)| p.name.as_str())
        .collect();
    let partly: Vec<String> = t
        .iter()
        .zip(&f.uncovered_steps)
        .filter(|(_, &u)| u > 0 && u < f.steps)
        .map(|(p, &u)| {
            format!(
                "{} ({:.0}% of instants)",
                p.name,
                100.0 * u as f64 / f.steps as f64
            )
        })
        .collect();
    crate::outpath::write_json(
        &a.json,
        &serde_json::json!({
                "constellation": c.name(), "satellites": c.count(), "terminals": a.terminals,
                "snapshots": r.snapshots, "threads": a.threads, "attach": policy.name(),
                "paths": r.paths, "unreachable": r.unreachable, "wall_s": wall,
                "paths_per_s": pps, "mean_delay_ms": mean_ms,
                "fstate_wall_s": fwall, "fstate_steps": f.steps, "fstate_lines": f.lines,
                "fstate_bytes": sink.bytes,
                "fstate_entries_per_step": (c.count() + t.len()) * t.len(),
                "never_covered": never, "partly_covered": partly,
        }),
    )?;
    {
        outln!(
            "{} ({} satellites), {} terminals, {} instants every {} s, {} thread(s)",
            c.name(),
            c.count(),
            a.terminals,
            r.snapshots,
            a.step,
            a.threads
        );
        outln!(
            "  pair delays ({} attachment): {} paths ({} pairs without a path), mean one-way {:.2} ms",
            policy.name(),
            r.paths,
            r.unreachable,
            mean_ms
        );
        outln!("    wall time {wall:.2} s, {pps:.0} paths/s");
        outln!(
            "  forwarding state (joint, min-delay; {} entries per instant): wall time {fwall:.2} s \
             ({:.1} ms per instant), {} CSV lines of changes, {:.1} MB",
            (c.count() + t.len()) * t.len(),
            fwall * 1e3 / f.steps.max(1) as f64,
            f.lines,
            sink.bytes as f64 / 1e6
        );
        if !never.is_empty() {
            outln!(
                "  never covered (no satellite above the mask): {}",
                never.join(", ")
            );
        }
        if !partly.is_empty() {
            outln!("  covered part of the time: {}", partly.join(", "));
        }
    }
    Ok(())
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

/// `bench leo --network`: the constellation as a packet network, `--flows` TCP bulk flows.
fn network(a: &LeoBenchArgs) -> Result<()> {
    use netsim::leo_net::{bulk_study, LeoNetConfig, StudyTransport};
    use netsim::Variant;
    let rate = |flag: &str, v: &str| {
        netsim::units::parse_rate_bps(v).map_err(|e| anyhow::anyhow!("{flag} '{v}': {e}"))
    };
    let variant = match a.variant.to_ascii_lowercase().as_str() {
        "newreno" => StudyTransport::Tcp(Variant::NewReno),
        "sack" | "sack-newreno" => StudyTransport::Tcp(Variant::SackNewReno),
        "reno" => StudyTransport::Tcp(Variant::Reno),
        "cubic" => StudyTransport::Cubic,
        "stp" => StudyTransport::Stp,
        v => bail!("--variant '{v}': expected newreno, sack, cubic, reno or stp"),
    };
    let c = Constellation::preset(&a.constellation)?;
    let t = stations(a.terminals);
    let cfg = LeoNetConfig {
        step: (a.step * 1e9).round() as u64,
        isl_rate_bps: rate("--isl-rate", &a.isl_rate)?,
        gsl_rate_bps: rate("--gsl-rate", &a.gsl_rate)?,
        ..LeoNetConfig::study(c.clone(), t.clone(), (a.duration * 1e9).round() as u64)
    };
    let r = bulk_study(&cfg, a.flows, variant)?;
    if let Some(dir) = &a.out {
        crate::outpath::dir("--out", dir)?;
        let names: Vec<String> = t.iter().map(|p| p.name.clone()).collect();
        let runs = [(a.variant.as_str(), &r)];
        repro::leo::write_study_csv(dir, "leo-network", &runs, &names)?;
        repro::leo::study_charts(dir, "leo-network", &runs)?;
    }
    let busiest = r.busiest_isl_utilisation();
    let longest = r.longest_isl_queue_ms();
    let mut g = r.goodput_bps.clone();
    g.sort_by(f64::total_cmp);
    let eps = r.events as f64 / r.run_s.max(1e-9);
    crate::outpath::write_json(
        &a.json,
        &serde_json::json!({
                "constellation": c.name(), "satellites": c.count(), "stations": t.len(),
                "flows": a.flows, "variant": a.variant, "duration_s": a.duration,
                "events": r.events, "build_s": r.build_s, "run_s": r.run_s,
                "events_per_s": eps, "route_changes": r.route_changes,
                "received_packets": r.received_packets, "reordered_packets": r.reordered_packets,
                "goodput_bps": r.goodput_bps, "undeliverable": r.undeliverable,
                "reordered_per_flow": r.reordered_per_flow, "isl_links_used": r.isl_links.len(),
                "busiest_isl_utilisation": busiest, "longest_isl_queue_ms": longest,
        }),
    )?;
    outln!(
        "{} ({} satellites) as a packet network: {} ground stations, {} {} flows, {} s, routes every {} s",
        c.name(),
        c.count(),
        t.len(),
        a.flows,
        a.variant,
        a.duration,
        a.step
    );
    outln!(
        "  wall time {:.1} s (building {:.1} s, run {:.1} s): {} events, {eps:.0} events/s; {} route entries changed after the first step; {} of {} packets received out of sending order",
        r.build_s + r.run_s,
        r.build_s,
        r.run_s,
        r.events,
        r.route_changes,
        r.reordered_packets,
        r.received_packets
    );
    outln!(
        "  ISLs: {} directions used, the busiest at {:.1} % of its rate over the run, longest queueing delay at a step {longest:.1} ms",
        r.isl_links.len(),
        busiest * 100.0
    );
    if let (Some(lo), Some(hi)) = (g.first(), g.last()) {
        outln!(
            "  goodput per flow: min {:.2}, median {:.2}, max {:.2} Mb/s; total {:.1} Mb/s; {} packets without a route",
            lo / 1e6,
            g[g.len() / 2] / 1e6,
            hi / 1e6,
            g.iter().sum::<f64>() / 1e6,
            r.undeliverable
        );
    }
    Ok(())
}
