//! The emulators' logic behind `satstp emulate udp` and `emulate net`: the links the flags
//! describe (a profile, explicit rates, delays, queues, losses, outages), the commands run in
//! the namespaces and stopped, and the counters as the JSON reports give them. The binary parses
//! the flags, starts the emulators of `linkem` and prints.

use crate::error::{Context, Result};
use linkem::{queue_bytes_for, DirectionStats, NetDirectionStats, NetEmulator, Profile, Side};
use linkmodel::{Delay, DeliveryTrace, LinkConfig, Loss, Outage, QueueLimit};
use netsim::units::parse_duration_ns;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The link flags both emulators share, trace files read.
pub struct LinkFlags {
    pub profile: Option<Profile>,
    pub down_rate: Option<u64>,
    pub up_rate: Option<u64>,
    pub delay: Option<u64>,
    /// A delay trace for both directions (instead of `delay`).
    pub delay_trace: Option<Delay>,
    pub queue: Option<u64>,
    pub loss: Option<f64>,
    pub ber: Option<f64>,
}

/// A delay's typical value for queue sizing: the fixed delay, or the mean of a trace's entries.
pub fn nominal_delay_ns(delay: &Delay) -> u64 {
    match delay {
        Delay::Fixed(d) => *d,
        Delay::Trace { points, .. } => {
            let n = points.len().max(1) as u64;
            points.iter().map(|&(_, d)| d / n).sum()
        }
    }
}

/// A LEO path as the emulators use it (`--leo`): its one-way delay over time, its outages and
/// the preset's ground-to-satellite rate (the default rate of both directions).
#[derive(Debug, Clone)]
pub struct LeoPath {
    pub delay: Delay,
    pub outages: Vec<Outage>,
    pub gsl_rate_bps: u64,
}

/// The link flags of both emulators as given: files not read yet.
#[derive(Debug, Clone, Default)]
pub struct LinkArgs<'a> {
    pub profile: Option<Profile>,
    pub down_rate: Option<u64>,
    pub up_rate: Option<u64>,
    pub delay: Option<u64>,
    pub delay_trace: Option<&'a std::path::Path>,
    pub down_rate_trace: Option<&'a std::path::Path>,
    pub up_rate_trace: Option<&'a std::path::Path>,
    pub queue: Option<u64>,
    pub loss: Option<f64>,
    pub ber: Option<f64>,
}

/// The `(up, down)` links of the flags and a LEO path: the trace files read (a rate trace
/// stands in for the rate, its mean sizing the default queue; a LEO path gives the delay, the
/// outages and, without a rate flag, the rate). Not validated yet: [`validate`] once every
/// flag is applied.
pub fn links(
    args: &LinkArgs,
    leo: Option<LeoPath>,
    ip_level: bool,
) -> Result<(LinkConfig, LinkConfig)> {
    let gsl = leo.as_ref().map(|l| l.gsl_rate_bps);
    let delay_trace = match &leo {
        Some(l) => Some(l.delay.clone()),
        None => read_delay_trace(args.delay_trace)?,
    };
    let down_trace = read_rate_trace(args.down_rate_trace, "--down-rate-trace")?;
    let up_trace = read_rate_trace(args.up_rate_trace, "--up-rate-trace")?;
    let (mut up, mut down) = link_configs(
        &LinkFlags {
            profile: args.profile,
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
        },
        ip_level,
    )?;
    if let Some(l) = leo {
        up.outages = l.outages.clone();
        down.outages = l.outages;
    }
    up.rate_trace = up_trace;
    down.rate_trace = down_trace;
    Ok((up, down))
}

/// Reads a `--up-rate-trace` / `--down-rate-trace` file.
fn read_rate_trace(path: Option<&std::path::Path>, flag: &str) -> Result<Option<DeliveryTrace>> {
    path.map(linkmodel::DeliveryTrace::read)
        .transpose()
        .with_context(|| flag.to_string())
}

/// Reads a `--delay-trace` file.
fn read_delay_trace(path: Option<&std::path::Path>) -> Result<Option<Delay>> {
    path.map(linkmodel::trace::read_delay_trace)
        .transpose()
        .context("--delay-trace")
}

/// Checks both links' configurations (after every flag is applied).
pub fn validate(up: &LinkConfig, down: &LinkConfig) -> Result<()> {
    for (name, l) in [("up", up), ("down", down)] {
        l.validate()
            .with_context(|| format!("the {name} link's configuration"))?;
    }
    Ok(())
}

/// The `(up, down)` links the flags describe: the profile's, with explicit flags overriding.
/// `ip_level` picks the profiles' IP-packet links ([`Profile::ip_links`], no added overhead).
pub fn link_configs(args: &LinkFlags, ip_level: bool) -> Result<(LinkConfig, LinkConfig)> {
    let (mut up, mut down) = match args.profile {
        Some(p) if ip_level => p.ip_links(),
        Some(p) => p.links(),
        None => {
            let missing: Vec<&str> = [
                ("--down-rate", args.down_rate.is_none()),
                ("--up-rate", args.up_rate.is_none()),
                (
                    "--delay",
                    args.delay.is_none() && args.delay_trace.is_none(),
                ),
            ]
            .into_iter()
            .filter_map(|(flag, absent)| absent.then_some(flag))
            .collect();
            let delay = args.delay.or(args.delay_trace.as_ref().map(|_| 0));
            match (args.up_rate, args.down_rate, delay) {
                (Some(u), Some(d), Some(delay)) => {
                    let mut pair = (linkem::direction(u, delay), linkem::direction(d, delay));
                    if ip_level {
                        pair.0.overhead_bytes = 0;
                        pair.1.overhead_bytes = 0;
                    }
                    pair
                }
                _ => bail!(
                    "without --profile, {} must be given (profiles: geo, geo-1998, direcpc, leo)",
                    missing.join(", ")
                ),
            }
        }
    };
    if let Some(r) = args.up_rate {
        up.rate_bps = r;
    }
    if let Some(r) = args.down_rate {
        down.rate_bps = r;
    }
    if let Some(d) = args.delay {
        up.delay = Delay::Fixed(d);
        down.delay = Delay::Fixed(d);
    }
    if let Some(trace) = &args.delay_trace {
        up.delay = trace.clone();
        down.delay = trace.clone();
    }
    let rtt_ns = nominal_delay_ns(&up.delay).saturating_add(nominal_delay_ns(&down.delay));
    match args.queue {
        Some(0) => bail!("--queue must be at least 1 byte"),
        Some(q) => {
            up.queue = QueueLimit::Bytes(q);
            down.queue = QueueLimit::Bytes(q);
        }
        None => {
            up.queue = QueueLimit::Bytes(queue_bytes_for(up.rate_bps, rtt_ns));
            down.queue = QueueLimit::Bytes(queue_bytes_for(down.rate_bps, rtt_ns));
        }
    }
    if let Some(p) = args.loss {
        if !(0.0..=1.0).contains(&p) {
            bail!("--loss must be between 0 and 1, got {p}");
        }
        up.loss = Loss::Random { p };
        down.loss = Loss::Random { p };
    }
    if let Some(ber) = args.ber {
        if !(0.0..=1.0).contains(&ber) {
            bail!("--ber must be between 0 and 1, got {ber}");
        }
        up.loss = Loss::Ber { ber };
        down.loss = Loss::Ber { ber };
    }
    Ok((up, down))
}

fn probability(v: f64, flag: &str) -> Result<f64> {
    if !(0.0..=1.0).contains(&v) {
        bail!("{flag} must be between 0 and 1, got {v}");
    }
    Ok(v)
}

/// A `--gilbert-elliott P_GOOD_TO_BAD,P_BAD_TO_GOOD,LOSS_GOOD,LOSS_BAD` value.
pub fn parse_gilbert_elliott(text: &str) -> Result<Loss> {
    let values: Vec<f64> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            err!("--gilbert-elliott '{text}': expected four numbers separated by commas")
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

/// An `--outage START,DURATION` value.
pub fn parse_outage(text: &str) -> Result<Outage> {
    let Some((start, duration)) = text.split_once(',') else {
        bail!("--outage '{text}': expected START,DURATION (e.g. 10s,2s)");
    };
    let start_ns =
        parse_duration_ns(start.trim()).map_err(|e| err!("--outage '{text}': start: {e}"))?;
    let duration_ns =
        parse_duration_ns(duration.trim()).map_err(|e| err!("--outage '{text}': duration: {e}"))?;
    if duration_ns == 0 {
        bail!("--outage '{text}': the duration must be positive");
    }
    Ok(Outage {
        start_ns,
        duration_ns,
    })
}

/// One direction's link in words (`emulate net` prints it at start).
pub fn describe(l: &LinkConfig, trace: Option<&DeliveryTrace>) -> String {
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
pub fn stop_child(child: &mut Child) -> Option<ExitStatus> {
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

/// A command's exit code (128 + the signal that ended it).
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The commands `emulate net` runs in its namespaces, and for how long.
#[derive(Debug, Clone, Default)]
pub struct Commands {
    /// A shell command started on the gateway side first; stopped at exit.
    pub gateway_cmd: Option<String>,
    /// The command on the terminal side (program and arguments); none: until Ctrl-C.
    pub cmd: Vec<String>,
    /// Stop after this many nanoseconds.
    pub duration: Option<u64>,
}

/// Runs the commands (if any) until the terminal command ends, a signal, or `--duration`;
/// returns the terminal command's status.
/// `say` is told what to do when there is no command.
pub fn supervise(
    emu: &NetEmulator,
    commands: &Commands,
    stop: &AtomicBool,
    tns: &str,
    say: &mut dyn FnMut(String),
) -> Result<Option<ExitStatus>> {
    let args = commands;
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
            say(format!(
                "running until Ctrl-C; e.g. `ip netns exec {tns} ping {}`",
                Side::Gateway.ipv4()
            ));
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

/// What both emulators report of one direction's link model: its configuration and the
/// model's own counters.
pub fn link_json(link: &LinkConfig, l: &linkmodel::LinkStats) -> Value {
    let delay_ns = match link.delay {
        Delay::Fixed(d) => Some(d),
        Delay::Trace { .. } => None,
    };
    json!({
        "rate_bps": link.rate_bps,
        "delay_ns": delay_ns,
        "offered_packets": l.offered_packets,
        "offered_bytes": l.offered_bytes,
        "delivered_packets": l.delivered_packets,
        "delivered_bytes": l.delivered_bytes,
        "dropped_queue": l.dropped_queue,
        "dropped_red": l.dropped_red,
        "dropped_error": l.dropped_error,
        "dropped_outage": l.dropped_outage,
        "duplicated": l.duplicated,
        "corrupted": l.corrupted,
    })
}

/// `base` with the fields of `more` added (both JSON objects).
pub fn with_fields(mut base: Value, more: Value) -> Value {
    if let (Value::Object(b), Value::Object(m)) = (&mut base, more) {
        b.extend(m);
    }
    base
}

/// One direction of `emulate udp` in its JSON report.
pub fn direction_json(s: &DirectionStats, link: &LinkConfig) -> Value {
    let queue_bytes = match link.queue {
        QueueLimit::Bytes(b) => Some(b),
        QueueLimit::Packets(_) => None,
    };
    let own = json!({
        "queue_bytes": queue_bytes,
        "received_packets": s.received_packets,
        "received_bytes": s.received_bytes,
        "sent_packets": s.sent_packets,
        "sent_bytes": s.sent_bytes,
        "dropped_packets": s.dropped(),
        "dropped_schedule": s.dropped_schedule,
        "dropped_no_terminal": s.dropped_no_peer,
        "ignored_foreign": s.ignored_foreign,
        "send_errors": s.send_errors,
        "recv_errors": s.recv_errors,
        "in_flight": s.in_flight,
    });
    with_fields(link_json(link, &s.link), own)
}

/// One direction of `emulate net` in its `--stats` file.
pub fn direction_net_json(s: &NetDirectionStats, link: &LinkConfig) -> Value {
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
    with_fields(link_json(link, &s.link), own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_take_a_rate_from_its_trace_and_the_path_from_leo() {
        let dir = std::env::temp_dir().join(format!("bench-emulate-links-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("down.trace");
        std::fs::write(&trace, "1\n2\n3\n4\n").unwrap();
        let args = LinkArgs {
            up_rate: Some(1_000_000),
            down_rate_trace: Some(&trace),
            delay: Some(10_000_000),
            ..LinkArgs::default()
        };
        let (up, down) = links(&args, None, true).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(up.rate_bps, 1_000_000);
        let mean = down.rate_trace.as_ref().map(DeliveryTrace::mean_rate_bps);
        assert_eq!(Some(down.rate_bps), mean);
        assert_eq!(up.delay, Delay::Fixed(10_000_000));
        validate(&up, &down).unwrap();

        let leo = LeoPath {
            delay: Delay::Fixed(5_000_000),
            outages: vec![Outage {
                start_ns: 1_000,
                duration_ns: 2_000,
            }],
            gsl_rate_bps: 7_000_000,
        };
        let (up, down) = links(&LinkArgs::default(), Some(leo), false).unwrap();
        assert_eq!((up.rate_bps, down.rate_bps), (7_000_000, 7_000_000));
        assert_eq!((up.outages.len(), down.outages.len()), (1, 1));
        assert_eq!(down.delay, Delay::Fixed(5_000_000));

        let e = links(&LinkArgs::default(), None, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--down-rate, --up-rate, --delay must be given"),
            "{e}"
        );
        let missing = LinkArgs {
            down_rate_trace: Some(std::path::Path::new("/nonexistent/down.trace")),
            ..LinkArgs::default()
        };
        let e = links(&missing, None, false).unwrap_err().to_string();
        assert_eq!(e, "--down-rate-trace");
    }

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
