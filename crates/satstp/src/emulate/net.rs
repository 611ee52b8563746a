//! `satstp emulate net`: the IP-level emulator (`linkem::NetEmulator`) from the command line.
//! Brings up the terminal-side and gateway-side namespaces joined through the emulated link,
//! optionally starts `--gateway-cmd` on the gateway side, runs the command after `--` on the
//! terminal side (or waits for Ctrl-C / `--duration`), tears everything down, prints the
//! counters and writes them as JSON with `--stats`. The exit status is the terminal command's.

use super::{link_configs, LinkFlags};
use anyhow::{bail, Context, Result};
use clap::Args;
use linkem::net;
use linkem::{NetConfig, NetDirectionStats, NetEmulator, NetStats, Profile, Side};
use linkmodel::DeliveryTrace;
use linkmodel::{Delay, LinkConfig, Loss, Outage, QueueLimit};
use netsim::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

fn probability(v: f64, flag: &str) -> Result<f64> {
    if !(0.0..=1.0).contains(&v) {
        bail!("{flag} must be between 0 and 1, got {v}");
    }
    Ok(v)
}

fn parse_gilbert_elliott(text: &str) -> Result<Loss> {
    let values: Vec<f64> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            anyhow::anyhow!("--gilbert-elliott '{text}': expected four numbers separated by commas")
        })?;
    let [p_good_to_bad, p_bad_to_good, loss_good, loss_bad] = values[..] else {
        bail!("--gilbert-elliott '{text}': expected four numbers P_GOOD_TO_BAD,P_BAD_TO_GOOD,LOSS_GOOD,LOSS_BAD");
    };
    for v in [p_good_to_bad, p_bad_to_good, loss_good, loss_bad] {
        probability(v, "--gilbert-elliott values")?;
    }
    Ok(Loss::GilbertElliott {
        p_good_to_bad,
        p_bad_to_good,
        loss_good,
        loss_bad,
    })
}

fn parse_outage(text: &str) -> Result<Outage> {
    let Some((start, duration)) = text.split_once(',') else {
        bail!("--outage '{text}': expected START,DURATION (e.g. 10s,2s)");
    };
    let start_ns = parse_duration_ns(start.trim())
        .map_err(|e| anyhow::anyhow!("--outage '{text}': start: {e}"))?;
    let duration_ns = parse_duration_ns(duration.trim())
        .map_err(|e| anyhow::anyhow!("--outage '{text}': duration: {e}"))?;
    if duration_ns == 0 {
        bail!("--outage '{text}': the duration must be positive");
    }
    Ok(Outage {
        start_ns,
        duration_ns,
    })
}

/// The emulator's configuration from the flags; every file is read and checked here, before
/// anything is created.
pub fn config(args: &NetArgs) -> Result<NetConfig> {
    let leo = super::leo_path(args.leo.as_deref(), args.duration)?;
    let gsl = leo.as_ref().map(|l| l.gsl_rate_bps);
    let delay_trace = match &leo {
        Some(l) => Some(l.delay.clone()),
        None => args
            .delay_trace
            .as_deref()
            .map(linkmodel::trace::read_delay_trace)
            .transpose()
            .context("--delay-trace")?,
    };
    let down_trace = super::read_rate_trace(args.down_rate_trace.as_deref(), "--down-rate-trace")?;
    let up_trace = super::read_rate_trace(args.up_rate_trace.as_deref(), "--up-rate-trace")?;
    if args.queue_packets == Some(0) {
        bail!("--queue-packets must be at least 1");
    }
    let flags = LinkFlags {
        profile: args.profile,
        // A rate trace stands in for the rate (its mean sizes the default queue).
        down_rate: args
            .down_rate
            .or(down_trace.as_ref().map(DeliveryTrace::mean_rate_bps))
            .or(gsl),
        up_rate: args
            .up_rate
            .or(up_trace.as_ref().map(DeliveryTrace::mean_rate_bps))
            .or(gsl),
        delay: args.delay,
        delay_trace,
        queue: args.queue,
        loss: args.loss,
        ber: args.ber,
    };
    let (mut up, mut down) = link_configs(&flags, true)?;
    if let Some(n) = args.queue_packets {
        up.queue = QueueLimit::Packets(n);
        down.queue = QueueLimit::Packets(n);
    }
    if let Some(text) = &args.gilbert_elliott {
        let ge = parse_gilbert_elliott(text)?;
        up.loss = ge;
        down.loss = ge;
    }
    let mut outages = args
        .outage
        .iter()
        .map(|o| parse_outage(o))
        .collect::<Result<Vec<_>>>()?;
    if let Some(l) = leo {
        outages.extend(l.outages);
    }
    up.outages = outages.clone();
    down.outages = outages;
    up.rate_trace = up_trace;
    down.rate_trace = down_trace;
    for (name, l) in [("up", &up), ("down", &down)] {
        l.validate()
            .with_context(|| format!("the {name} link's configuration"))?;
    }
    Ok(NetConfig {
        up,
        down,
        seed: args.seed,
        tag: None,
        realtime: true,
    })
}

fn describe(l: &LinkConfig, trace: Option<&DeliveryTrace>) -> String {
    let rate = match trace {
        Some(t) => format!(
            "rate trace (mean {:.3} Mb/s)",
            t.mean_rate_bps() as f64 / 1e6
        ),
        None => format!("{:.3} Mb/s", l.rate_bps as f64 / 1e6),
    };
    let delay = match &l.delay {
        Delay::Fixed(d) => format!("one-way {:.1} ms", *d as f64 / 1e6),
        Delay::Trace { points, period_ns } => format!(
            "one-way delay traced ({} steps{})",
            points.len(),
            period_ns.map_or(String::new(), |p| format!(
                ", repeating every {:.1} s",
                p as f64 / 1e9
            ))
        ),
    };
    let queue = match l.queue {
        QueueLimit::Bytes(b) => format!("{b} B"),
        QueueLimit::Packets(p) => format!("{p} packets"),
    };
    format!("{rate}, {delay}, queue {queue}")
}

/// Asks a child to stop (SIGTERM), then kills it if it has not exited within two seconds.
fn stop_child(child: &mut Child) -> Option<ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: sends SIGTERM to our own child, which has not been reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait().ok()
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
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
    let outcome = supervise(&emu, args, &stop, &tns);
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
            "up": direction_json(&stats.up, &up_cfg),
            "down": direction_json(&stats.down, &down_cfg),
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

/// Runs the commands (if any) until the terminal command ends, a signal, or `--duration`;
/// returns the terminal command's status.
fn supervise(
    emu: &NetEmulator,
    args: &NetArgs,
    stop: &AtomicBool,
    tns: &str,
) -> Result<Option<ExitStatus>> {
    let mut gateway = match &args.gateway_cmd {
        Some(cmd) => Some(
            emu.command(Side::Gateway, "sh")
                .args(["-c", cmd])
                .spawn()
                .with_context(|| format!("cannot start --gateway-cmd '{cmd}'"))?,
        ),
        None => None,
    };
    let mut terminal = match args.cmd.split_first() {
        Some((program, rest)) => match emu.command(Side::Terminal, program).args(rest).spawn() {
            Ok(child) => Some(child),
            Err(e) => {
                if let Some(child) = &mut gateway {
                    stop_child(child);
                }
                return Err(e)
                    .with_context(|| format!("cannot start '{program}' on the terminal side"));
            }
        },
        None => {
            eprintln!(
                "running until Ctrl-C; e.g. `ip netns exec {tns} ping {}`",
                Side::Gateway.ipv4()
            );
            None
        }
    };
    let deadline = args
        .duration
        .map(|ns| Instant::now() + Duration::from_nanos(ns));
    let mut status = None;
    loop {
        if let Some(child) = &mut terminal {
            if let Some(s) = child.try_wait().context("waiting for the command")? {
                status = Some(s);
                break;
            }
        }
        if stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if status.is_none() {
        if let Some(child) = &mut terminal {
            status = stop_child(child);
        }
    }
    if let Some(child) = &mut gateway {
        stop_child(child);
    }
    Ok(status)
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

fn direction_json(s: &NetDirectionStats, link: &LinkConfig) -> Value {
    let (queue_bytes, queue_packets) = match link.queue {
        QueueLimit::Bytes(b) => (Some(b), None),
        QueueLimit::Packets(p) => (None, Some(p)),
    };
    let own = json!({
        "queue_bytes": queue_bytes,
        "queue_packets": queue_packets,
        "read_packets": s.read_packets,
        "read_bytes": s.read_bytes,
        "written_packets": s.written_packets,
        "written_bytes": s.written_bytes,
        "dropped_packets": s.dropped(),
        "dropped_schedule": s.dropped_schedule,
        "read_errors": s.read_errors,
        "write_errors": s.write_errors,
        "in_flight": s.in_flight,
        "late_mean_ns": s.late_mean_ns(),
        "late_max_ns": s.late_max_ns,
    });
    super::with_fields(super::link_json(link, &s.link), own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gilbert_elliott_and_outage_flags() {
        assert_eq!(
            parse_gilbert_elliott("0.01, 0.3,0,0.5").unwrap(),
            Loss::GilbertElliott {
                p_good_to_bad: 0.01,
                p_bad_to_good: 0.3,
                loss_good: 0.0,
                loss_bad: 0.5
            }
        );
        for bad in ["0.1,0.2,0.3", "a,b,c,d", "0.1,0.2,0.3,2"] {
            let e = parse_gilbert_elliott(bad).unwrap_err().to_string();
            assert!(e.contains("--gilbert-elliott"), "{bad}: {e}");
        }
        assert_eq!(
            parse_outage("10s,2s").unwrap(),
            Outage {
                start_ns: 10_000_000_000,
                duration_ns: 2_000_000_000
            }
        );
        for bad in ["10s", "x,2s", "1s,0s"] {
            let e = parse_outage(bad).unwrap_err().to_string();
            assert!(e.contains("--outage"), "{bad}: {e}");
        }
    }
}
