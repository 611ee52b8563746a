//! `satstp emulate net`: the IP-level emulator (`linkem::NetEmulator`) from the command line.
//! Brings up the terminal-side and gateway-side namespaces joined through the emulated link,
//! optionally starts `--gateway-cmd` on the gateway side, runs the command after `--` on the
//! terminal side (or waits for Ctrl-C / `--duration`), tears everything down, prints the
//! counters and writes them as JSON with `--stats`. The exit status is the terminal command's.

use anyhow::{bail, Context, Result};
use bench::emulate::{
    describe, direction_net_json, exit_code, parse_gilbert_elliott, parse_outage, supervise,
    Commands, LinkArgs,
};
use clap::Args;
use linkem::net;
use linkem::{NetConfig, NetEmulator, NetStats, Profile, Side};
use linkmodel::QueueLimit;
use netsim::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct NetArgs {
    /// A named path: geo, geo-1998, direcpc or leo (leo's delay steps every 15 s). Without it,
    /// --down-rate, --up-rate and --delay (or --delay-trace) are required.
    #[arg(long)]
    profile: Option<Profile>,
    /// Gateway → terminal rate (e.g. 50Mbps).
    #[arg(long, value_parser = parse_rate_bps)]
    down_rate: Option<u64>,
    /// Terminal → gateway rate (e.g. 5Mbps).
    #[arg(long, value_parser = parse_rate_bps)]
    up_rate: Option<u64>,
    /// One-way delay of each direction (e.g. 300ms).
    #[arg(long, value_parser = parse_duration_ns, conflicts_with = "delay_trace")]
    delay: Option<u64>,
    /// One-way delay of each direction over time, from a file of 'TIME_MS DELAY_MS' lines
    /// (optional 'period MS' line to repeat; format in docs/emulate-net.md).
    #[arg(long)]
    delay_trace: Option<PathBuf>,
    /// The one-way delay (and outages) of a LEO path, computed at start:
    /// CONSTELLATION:FROM:TO[:ROUTING], e.g. "iridium:New York:San Francisco" (rates default
    /// to the preset's GSL rate; see docs/leo.md).
    #[arg(long, conflicts_with_all = ["delay", "delay_trace", "profile"])]
    leo: Option<String>,
    /// Gateway → terminal rate from a mahimahi packet-delivery trace (one line per 1500-byte
    /// delivery opportunity, in ms; repeats).
    #[arg(long)]
    down_rate_trace: Option<PathBuf>,
    /// Terminal → gateway rate from a mahimahi packet-delivery trace.
    #[arg(long)]
    up_rate_trace: Option<PathBuf>,
    /// Drop-tail queue of each direction in bytes of IP packets (default: one bandwidth-delay
    /// product of that direction, at least 24000 bytes).
    #[arg(long, value_parser = parse_bytes, conflicts_with = "queue_packets")]
    queue: Option<u64>,
    /// Drop-tail queue of each direction in packets instead of bytes.
    #[arg(long)]
    queue_packets: Option<u32>,
    /// Random packet loss of each direction, as a fraction from 0 to 1.
    #[arg(long, conflicts_with_all = ["ber", "gilbert_elliott"], allow_negative_numbers = true)]
    loss: Option<f64>,
    /// Bit-error rate of each direction, from 0 to 1.
    #[arg(
        long,
        conflicts_with = "gilbert_elliott",
        allow_negative_numbers = true
    )]
    ber: Option<f64>,
    /// Gilbert–Elliott burst loss of each direction: P_GOOD_TO_BAD,P_BAD_TO_GOOD,LOSS_GOOD,LOSS_BAD
    /// (per-packet probabilities, e.g. 0.01,0.3,0,0.5).
    #[arg(long)]
    gilbert_elliott: Option<String>,
    /// An outage of both directions: START,DURATION after the emulator starts (e.g. 10s,2s);
    /// repeat the flag for more.
    #[arg(long)]
    outage: Vec<String>,
    /// Seed of the links' random generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A shell command to start on the gateway side (e.g. a server) before CMD; stopped at exit.
    #[arg(long)]
    gateway_cmd: Option<String>,
    /// Stop after this long (e.g. 30s); with CMD, stop CMD then.
    #[arg(long, value_parser = parse_duration_ns)]
    duration: Option<u64>,
    /// Write the per-direction counters as JSON to this file at exit.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// The command to run on the terminal side; without it the emulator stays up until Ctrl-C.
    #[arg(last = true)]
    cmd: Vec<String>,
}

/// The emulator's configuration from the flags; every file is read and checked here, before
/// anything is created.
pub fn config(args: &NetArgs) -> Result<NetConfig> {
    let leo = super::leo_path(args.leo.as_deref(), args.duration)?;
    if args.queue_packets == Some(0) {
        bail!("--queue-packets must be at least 1");
    }
    let flags = LinkArgs {
        profile: args.profile,
        down_rate: args.down_rate,
        up_rate: args.up_rate,
        delay: args.delay,
        delay_trace: args.delay_trace.as_deref(),
        down_rate_trace: args.down_rate_trace.as_deref(),
        up_rate_trace: args.up_rate_trace.as_deref(),
        queue: args.queue,
        loss: args.loss,
        ber: args.ber,
    };
    let (mut up, mut down) = bench::emulate::links(&flags, leo, true)?;
    if let Some(n) = args.queue_packets {
        up.queue = QueueLimit::Packets(n);
        down.queue = QueueLimit::Packets(n);
    }
    if let Some(text) = &args.gilbert_elliott {
        let ge = parse_gilbert_elliott(text)?;
        up.loss = ge;
        down.loss = ge;
    }
    // The flags' outages, then the LEO path's.
    let mut outages = args
        .outage
        .iter()
        .map(|o| parse_outage(o))
        .collect::<bench::Result<Vec<_>>>()?;
    outages.append(&mut up.outages);
    down.outages = outages.clone();
    up.outages = outages;
    bench::emulate::validate(&up, &down)?;
    Ok(NetConfig {
        up,
        down,
        seed: args.seed,
        tag: None,
        realtime: true,
    })
}

pub fn run(args: &NetArgs) -> Result<()> {
    let config = config(args)?;
    if let Some(p) = &args.stats {
        crate::outpath::file("--stats", p)?;
    }
    net::check_support()?;
    let up_text = describe(&config.up, config.up.rate_trace.as_ref());
    let down_text = describe(&config.down, config.down.rate_trace.as_ref());
    let (up_cfg, down_cfg) = (config.up.clone(), config.down.clone());
    let stop = crate::signals::stop_flag(None)?;
    let emu = NetEmulator::start(config).context("cannot start the IP-level emulator")?;
    let (tns, gns) = (
        emu.namespace(Side::Terminal).to_string(),
        emu.namespace(Side::Gateway).to_string(),
    );
    eprintln!(
        "emulated link up: terminal side {tns} ({}, {}) <-> gateway side {gns} ({}, {})",
        Side::Terminal.ipv4(),
        Side::Terminal.ipv6(),
        Side::Gateway.ipv4(),
        Side::Gateway.ipv6()
    );
    eprintln!("  up   {up_text}");
    eprintln!("  down {down_text}");
    let started = Instant::now();
    let commands = Commands {
        gateway_cmd: args.gateway_cmd.clone(),
        cmd: args.cmd.clone(),
        duration: args.duration,
    };
    let outcome = supervise(&emu, &commands, &stop, &tns, &mut |s| eprintln!("{s}"));
    let seconds = started.elapsed().as_secs_f64();
    let stats = emu.stop().context("tearing down the emulator")?;
    let status = outcome?;
    print_stats(&stats, seconds);
    if let Some(path) = &args.stats {
        let value = json!({
            "seconds": seconds,
            "terminal_namespace": tns,
            "gateway_namespace": gns,
            "command_exit_code": status.map(exit_code),
            "up": direction_net_json(&stats.up, &up_cfg),
            "down": direction_net_json(&stats.down, &down_cfg),
        });
        let text = serde_json::to_string_pretty(&value)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match status.map(exit_code) {
        Some(0) | None => Ok(()),
        Some(code) => {
            eprintln!("the command exited with status {code}");
            std::process::exit(code)
        }
    }
}

fn print_stats(stats: &NetStats, seconds: f64) {
    eprintln!("after {seconds:.1} s:");
    for (name, s) in [("up", &stats.up), ("down", &stats.down)] {
        let l = &s.link;
        eprintln!(
            "  {name:<4} read {} pkts / {} B, written {} pkts / {} B; dropped {} (queue {}, \
             red {}, error {}, outage {}, schedule {}); still in flight {}; writes late by \
             {:.1} µs on average, {:.1} µs at worst",
            s.read_packets,
            s.read_bytes,
            s.written_packets,
            s.written_bytes,
            s.dropped(),
            l.dropped_queue,
            l.dropped_red,
            l.dropped_error,
            l.dropped_outage,
            s.dropped_schedule,
            s.in_flight,
            s.late_mean_ns() as f64 / 1e3,
            s.late_max_ns as f64 / 1e3,
        );
    }
}
