//! `satstp bench …`: benchmarks that print figures.
//!
//! `bench engine` moves data between two STP endpoints in memory (no delay, no loss, 1400-byte
//! payloads) on one thread, with the real clock as the driver's `now`, and reports payload
//! throughput and packets per second: the cost of the protocol engine itself.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use netsim::units::parse_bytes;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Throughput of the STP engine between two in-memory endpoints (one core).
    Engine(EngineArgs),
    /// Speed of the packet simulator: simulated events per second on one core.
    Sim(SimBenchArgs),
    /// Terminal and gateway on loopback, encrypted hop: throughput, CPU per GB, memory per idle connection.
    Gateway(crate::bench_gateway::GatewayBenchArgs),
    /// Kernel TCP (cubic, bbr, reno), split TCP and split STP over the same emulated link
    /// (root): download, upload, page load, uplink cost, retransmissions.
    Link(Box<crate::bench_link::LinkBenchArgs>),
    /// A download through the gateway over the emulated geo link while its hop port is flooded
    /// (random bytes, replays, unknown-key handshakes, opens beyond a terminal's limit): goodput
    /// kept, memory, drops by cause. Loopback only.
    Flood(crate::bench_flood::FloodBenchArgs),
    /// Many concurrent end-to-end connections through the terminal and gateway daemons (each
    /// process separate): resident memory per connection of each daemon.
    Soak(crate::bench_soak::SoakBenchArgs),
    /// The soak's origin process (used by `bench soak`).
    #[command(hide = true)]
    SoakOrigin(crate::bench_soak::SoakOriginArgs),
    /// The soak's client process (used by `bench soak`).
    #[command(hide = true)]
    SoakClients(crate::bench_soak::SoakClientsArgs),
    /// Deterministic fault sweep of the STP engine over the in-memory network: one random
    /// scenario per seed; prints the seeds whose transfer was not byte-exact or did not end cleanly.
    Sweep(crate::bench_sweep::SweepArgs),
    /// Min-delay routes between all pairs of ground terminals over a LEO shell, every step.
    Leo(crate::leo::bench::LeoBenchArgs),
}

#[derive(Debug, Args)]
pub struct SimBenchArgs {
    /// Simulated seconds per case.
    #[arg(long, default_value_t = 600)]
    seconds: u32,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct EngineArgs {
    /// Payload bytes to move (units such as 2GB accepted).
    #[arg(long, default_value = "2GB", value_parser = parse_bytes)]
    bytes: u64,
    /// SD payload size in bytes.
    #[arg(long, default_value_t = 1400)]
    payload: u16,
    /// Idle, established connections held by the same endpoints during the run (to show that
    /// the cost per datagram does not grow with the number of connections).
    #[arg(long, default_value_t = 0)]
    idle: u32,
    /// Results as JSON: --json (or --json -) prints them on standard output instead of the
    /// text; --json FILE writes them to FILE.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    json: Option<PathBuf>,
}

pub fn run(cmd: &BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Engine(a) => engine(a),
        BenchCommand::Sim(a) => sim_bench(a),
        BenchCommand::Gateway(a) => crate::bench_gateway::run(a),
        BenchCommand::Link(a) => crate::bench_link::run(a),
        BenchCommand::Flood(a) => crate::bench_flood::run(a),
        BenchCommand::Soak(a) => crate::bench_soak::run(a),
        BenchCommand::SoakOrigin(a) => crate::bench_soak::origin(a),
        BenchCommand::SoakClients(a) => crate::bench_soak::clients(a),
        BenchCommand::Sweep(a) => crate::bench_sweep::run(a),
        BenchCommand::Leo(a) => crate::leo::bench::run(a),
    }
}

fn engine(args: &EngineArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    bench::engine::check(args.payload, args.bytes, args.idle)?;
    let r = bench::engine::run(args.bytes, args.payload, args.idle)?;
    let gbps = r.bytes as f64 * 8.0 / r.seconds / 1e9;
    let pps = r.datagrams as f64 / r.seconds;
    if args.json.is_some() {
        let v = serde_json::json!({
            "benchmark": "engine",
            "payload_bytes": args.payload,
            "idle_connections": args.idle,
            "bytes": r.bytes,
            "seconds": r.seconds,
            "payload_gbps": gbps,
            "packets_per_second": pps,
            "datagrams": r.datagrams,
            "control_datagrams": r.control_datagrams,
            "idle_rss_kib": r.idle_rss_kib,
            "idle_bytes_per_connection": r.idle_per_conn(args.idle),
            "idle_bytes_per_end": r.idle_per_end(args.idle),
        });
        crate::outpath::write_json(&args.json, &v)?;
    }
    {
        outln!("satstp bench engine: two STP endpoints in memory, one thread, no delay, no loss");
        outln!("  payload per SD     {} bytes", args.payload);
        outln!("  idle connections   {}", args.idle);
        outln!(
            "  moved              {} bytes in {:.3} s",
            r.bytes,
            r.seconds
        );
        outln!("  payload throughput {gbps:.2} Gbit/s");
        outln!(
            "  packets per second {:.0} (all datagrams, both directions)",
            pps
        );
        outln!(
            "  control datagrams  {} of {}",
            r.control_datagrams,
            r.datagrams
        );
        if let (Some(b), Some(e)) = (r.idle_per_conn(args.idle), r.idle_per_end(args.idle)) {
            outln!(
                "  idle connections' memory {} KiB resident: {b:.0} bytes per connection (its two ends, initiator and responder), {e:.0} bytes per end",
                r.idle_rss_kib
            );
        }
    }
    Ok(())
}

/// Runs the GEO experiment of table5.1 (one-way, with web background) for each protocol on one
/// thread and reports simulated events per second.
fn sim_bench(args: &SimBenchArgs) -> Result<()> {
    crate::outpath::json_start(&args.json)?;
    if !(1..=86_400).contains(&args.seconds) {
        bail!(
            "--seconds must be between 1 and 86400, got {}",
            args.seconds
        );
    }
    let all = crate::reproduce::all()?;
    let Some((repro, template)) = all.iter().find(|(r, _)| r.name == "table5.1-geo") else {
        bail!("the table5.1-geo reproduction is missing from this build");
    };
    let cases = bench::sim::run(repro, template, "one-way", args.seconds)?;
    let (events, wall) = bench::sim::totals(&cases);
    let rate = events as f64 / wall;
    if args.json.is_some() {
        crate::outpath::write_json(&args.json, &bench::sim::json(&cases, args.seconds))?;
    }
    {
        outln!("satstp bench sim: table5.1-geo one-way (with web background), {} s simulated per case, one thread", args.seconds);
        for c in &cases {
            outln!(
                "  {:<10} {:>10} events in {:>6.3} s = {:>10.0} events/s",
                c.case,
                c.events,
                c.wall_seconds,
                c.events as f64 / c.wall_seconds
            );
        }
        outln!("  total      {events:>10} events in {wall:>6.3} s = {rate:>10.0} events/s");
    }
    Ok(())
}
