//! `satstp bench leo`: over a stretch of orbit time (default: starlink-550, 100 terminals, every
//! 1 s for 600 s), (1) min-delay routes between every pair of ground terminals with the
//! constellation's attachment, on one core or several, and (2) the full forwarding state (every
//! satellite's and terminal's next hop towards every terminal, as `satstp leo fstate` writes
//! it); prints wall times, paths per second, and the terminals the shell does not always cover.
//! `--network`: the constellation as a packet network. The logic is `bench::leo`'s; here the
//! flags and the printing.

use super::parse_seconds;
use anyhow::Result;
use bench::leo::{NetworkOptions, RoutesOptions};
use clap::Args;

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
    bench::leo::check(a.terminals, a.duration, a.step)?;
    if a.network {
        return network(a);
    }
    let r = bench::leo::routes(&RoutesOptions {
        constellation: a.constellation.clone(),
        attach: a.attach.clone(),
        terminals: a.terminals,
        duration_s: a.duration,
        step_s: a.step,
        threads: a.threads,
    })?;
    crate::outpath::write_json(&a.json, &r.json())?;
    outln!(
        "{} ({} satellites), {} terminals, {} instants every {} s, {} thread(s)",
        r.constellation,
        r.satellites,
        a.terminals,
        r.snapshots,
        a.step,
        a.threads
    );
    outln!(
        "  pair delays ({} attachment): {} paths ({} pairs without a path), mean one-way {:.2} ms",
        r.attach.name(),
        r.paths,
        r.unreachable,
        r.mean_delay_ms
    );
    outln!(
        "    wall time {:.2} s, {:.0} paths/s",
        r.wall_s,
        r.paths_per_s
    );
    outln!(
        "  forwarding state (joint, min-delay; {} entries per instant): wall time {:.2} s \
         ({:.1} ms per instant), {} CSV lines of changes, {:.1} MB",
        r.fstate_entries_per_step,
        r.fstate_wall_s,
        r.fstate_wall_s * 1e3 / r.fstate_steps.max(1) as f64,
        r.fstate_lines,
        r.fstate_bytes as f64 / 1e6
    );
    if !r.never_covered.is_empty() {
        outln!(
            "  never covered (no satellite above the mask): {}",
            r.never_covered.join(", ")
        );
    }
    if !r.partly_covered.is_empty() {
        outln!(
            "  covered part of the time: {}",
            r.partly_covered.join(", ")
        );
    }
    Ok(())
}

/// `bench leo --network`: the constellation as a packet network, `--flows` TCP bulk flows.
fn network(a: &LeoBenchArgs) -> Result<()> {
    let rate = |flag: &str, v: &str| {
        netsim::units::parse_rate_bps(v).map_err(|e| anyhow::anyhow!("{flag} '{v}': {e}"))
    };
    let o = NetworkOptions {
        constellation: a.constellation.clone(),
        terminals: a.terminals,
        flows: a.flows,
        duration_s: a.duration,
        step_s: a.step,
        transport: bench::leo::parse_variant(&a.variant)?,
        variant: a.variant.clone(),
        isl_rate_bps: rate("--isl-rate", &a.isl_rate)?,
        gsl_rate_bps: rate("--gsl-rate", &a.gsl_rate)?,
    };
    let n = bench::leo::network(&o)?;
    let r = &n.study;
    if let Some(dir) = &a.out {
        crate::outpath::dir("--out", dir)?;
        let runs = [(a.variant.as_str(), r)];
        repro::leo::write_study_csv(dir, "leo-network", &runs, &n.stations)?;
        repro::leo::study_charts(dir, "leo-network", &runs)?;
    }
    crate::outpath::write_json(&a.json, &n.json(&o))?;
    outln!(
        "{} ({} satellites) as a packet network: {} ground stations, {} {} flows, {} s, routes every {} s",
        n.constellation,
        n.satellites,
        n.stations.len(),
        a.flows,
        a.variant,
        a.duration,
        a.step
    );
    outln!(
        "  wall time {:.1} s (building {:.1} s, run {:.1} s): {} events, {:.0} events/s; {} route entries changed after the first step; {} of {} packets received out of sending order",
        r.build_s + r.run_s,
        r.build_s,
        r.run_s,
        r.events,
        n.events_per_s,
        r.route_changes,
        r.reordered_packets,
        r.received_packets
    );
    outln!(
        "  ISLs: {} directions used, the busiest at {:.1} % of its rate over the run, longest queueing delay at a step {:.1} ms",
        r.isl_links.len(),
        n.busiest_isl * 100.0,
        n.longest_isl_queue_ms
    );
    let g = &n.goodput_sorted_bps;
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
