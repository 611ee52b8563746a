//! Trace files of a link direction: one-way delay over time (our own small text format) and
//! mahimahi packet-delivery traces for a time-varying rate. The one parser of each format: the
//! simulator's scenarios (`delay_trace_file`, `rate_trace_file`), both emulators
//! (`--delay-trace`, `--up-rate-trace`, `--down-rate-trace`) and the LEO trace writer's readers
//! all call these.
//!
//! **Delay trace.** One entry per line, `TIME_MS DELAY_MS` (decimals allowed, separated by
//! spaces or tabs; each at most 10¹² ms): from `TIME_MS` after the link starts, packets leaving the link's queue
//! take `DELAY_MS` to reach the far end, until the next entry. The first entry must be at time 0
//! and times must increase. An optional line `period PERIOD_MS` (after the last entry's time)
//! makes the trace repeat; without it the last delay holds for ever. Blank lines and text after
//! `#` are ignored. Example, a delay stepping every 15 s and repeating every 30 s:
//!
//! ```text
//! # time_ms  delay_ms
//! 0      20
//! 15000  27.5
//! period 30000
//! ```
//!
//! **Rate trace** (mahimahi's packet-delivery format, as read by `mm-link`). One integer per
//! line, a time in milliseconds; each line is one opportunity to deliver [`OPPORTUNITY_BYTES`]
//! from the link's queue at that instant, so N lines with the same time give N opportunities.
//! Times must not decrease, and the last one must be positive: it is the trace's period, after
//! which the trace repeats. A packet larger than the opportunity's remaining bytes uses the
//! following opportunities too; bytes of an opportunity that finds the queue empty are lost.

use crate::{Delay, Departures, QueueLimit};
use std::path::Path;
use thiserror::Error;

/// Bytes one line of a mahimahi trace can deliver (one 1500-byte MTU).
pub const OPPORTUNITY_BYTES: u64 = 1500;

const NS_PER_MS: u64 = 1_000_000;

/// A trace file that cannot be used; the message names the file and line.
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("cannot read trace file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{source_name} line {line}: {reason}")]
    Line {
        source_name: String,
        line: usize,
        reason: String,
    },
    #[error("{source_name}: {reason}")]
    File { source_name: String, reason: String },
}

fn read(path: &Path) -> Result<String, TraceError> {
    std::fs::read_to_string(path).map_err(|error| TraceError::Read {
        path: path.display().to_string(),
        error,
    })
}

/// Meaningful lines: `(line number from 1, text without comment, trimmed)`.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.split('#').next().unwrap_or("").trim();
        (!l.is_empty()).then_some((i + 1, l))
    })
}

/// The largest time, delay or period a delay trace may give, ms (10¹²: 31 years).
pub const MAX_TRACE_MS: f64 = 1e12;

/// Milliseconds (decimal) to nanoseconds, rejecting negative, non-finite and huge values.
fn ms_to_ns(text: &str, what: &str) -> Result<u64, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("{what} '{text}' is not a number of milliseconds"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{what} '{text}' must be a non-negative number"));
    }
    let ns = (v * NS_PER_MS as f64).round();
    if v >= MAX_TRACE_MS || ns >= 1e18 {
        return Err(format!(
            "{what} '{text}' is too large (at most {MAX_TRACE_MS:e} ms)"
        ));
    }
    Ok(ns as u64)
}

/// Parses a delay trace (format in the module documentation); `source_name` labels errors.
pub fn parse_delay_trace(text: &str, source_name: &str) -> Result<Delay, TraceError> {
    let line_err = |line: usize, reason: String| TraceError::Line {
        source_name: source_name.to_string(),
        line,
        reason,
    };
    let mut points: Vec<(u64, u64)> = Vec::new();
    let mut period_ns = None;
    for (n, l) in lines(text) {
        let fields: Vec<&str> = l.split_whitespace().collect();
        if period_ns.is_some() {
            return Err(line_err(n, "nothing may follow the 'period' line".into()));
        }
        match fields.as_slice() {
            ["period", p] => {
                let p = ms_to_ns(p, "period").map_err(|r| line_err(n, r))?;
                let last = points.last().map_or(0, |&(t, _)| t);
                if points.is_empty() || p <= last {
                    return Err(line_err(
                        n,
                        "the period must come after the entries and exceed the last entry's time"
                            .into(),
                    ));
                }
                period_ns = Some(p);
            }
            [t, d] => {
                let t = ms_to_ns(t, "time").map_err(|r| line_err(n, r))?;
                let d = ms_to_ns(d, "delay").map_err(|r| line_err(n, r))?;
                match points.last() {
                    None if t != 0 => {
                        return Err(line_err(n, "the first entry must be at time 0".into()))
                    }
                    Some(&(prev, _)) if t <= prev => {
                        return Err(line_err(n, "times must increase".into()))
                    }
                    _ => points.push((t, d)),
                }
            }
            _ => {
                return Err(line_err(
                    n,
                    format!("expected 'TIME_MS DELAY_MS' or 'period PERIOD_MS', got '{l}'"),
                ))
            }
        }
    }
    if points.is_empty() {
        return Err(TraceError::File {
            source_name: source_name.to_string(),
            reason: "the delay trace has no entries".into(),
        });
    }
    Ok(Delay::Trace { points, period_ns })
}

/// Reads and parses a delay trace file.
pub fn read_delay_trace(path: &Path) -> Result<Delay, TraceError> {
    parse_delay_trace(&read(path)?, &path.display().to_string())
}

/// A mahimahi packet-delivery trace: delivery opportunities in milliseconds within one period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTrace {
    opportunities_ms: Vec<u64>,
    period_ms: u64,
}

impl DeliveryTrace {
    /// Parses a trace (format in the module documentation); `source_name` labels errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, TraceError> {
        let mut opportunities_ms: Vec<u64> = Vec::new();
        for (n, l) in lines(text) {
            let t: u64 = l.parse().map_err(|_| TraceError::Line {
                source_name: source_name.to_string(),
                line: n,
                reason: format!("expected a whole number of milliseconds, got '{l}'"),
            })?;
            if t > 1 << 40 {
                return Err(TraceError::Line {
                    source_name: source_name.to_string(),
                    line: n,
                    reason: format!("time {t} ms is too large"),
                });
            }
            if opportunities_ms.last().is_some_and(|&prev| t < prev) {
                return Err(TraceError::Line {
                    source_name: source_name.to_string(),
                    line: n,
                    reason: "times must not decrease".into(),
                });
            }
            opportunities_ms.push(t);
        }
        let Some(&period_ms) = opportunities_ms.last() else {
            return Err(TraceError::File {
                source_name: source_name.to_string(),
                reason: "the rate trace has no delivery opportunities".into(),
            });
        };
        if period_ms == 0 {
            return Err(TraceError::File {
                source_name: source_name.to_string(),
                reason: "the last time (the trace's period) must be positive".into(),
            });
        }
        Ok(DeliveryTrace {
            opportunities_ms,
            period_ms,
        })
    }

    /// Reads and parses a trace file.
    pub fn read(path: &Path) -> Result<Self, TraceError> {
        Self::parse(&read(path)?, &path.display().to_string())
    }

    /// A trace of `per_ms` opportunities every millisecond for `period_ms` (e.g. 4 per ms is
    /// 48 Mb/s).
    pub fn constant(per_ms: usize, period_ms: u64) -> Self {
        let period_ms = period_ms.max(1);
        let opportunities_ms = (1..=period_ms)
            .flat_map(|t| std::iter::repeat_n(t, per_ms.max(1)))
            .collect();
        DeliveryTrace {
            opportunities_ms,
            period_ms,
        }
    }

    /// The period after which the trace repeats, ms.
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// Delivery opportunities per period.
    pub fn opportunities(&self) -> usize {
        self.opportunities_ms.len()
    }

    /// The average rate the trace offers, bits per second.
    pub fn mean_rate_bps(&self) -> u64 {
        let bits = self.opportunities_ms.len() as u128 * u128::from(OPPORTUNITY_BYTES) * 8;
        u64::try_from(bits * 1000 / u128::from(self.period_ms)).unwrap_or(u64::MAX)
    }

    /// Time of the `k`-th opportunity counted from the start over repeated periods, ns.
    fn time_ns(&self, k: u64) -> u64 {
        let n = self.opportunities_ms.len() as u64;
        let cycle = k / n;
        let idx = usize::try_from(k % n).unwrap_or(0);
        let ms = cycle
            .saturating_mul(self.period_ms)
            .saturating_add(self.opportunities_ms.get(idx).copied().unwrap_or(0));
        ms.saturating_mul(NS_PER_MS)
    }

    /// Index of the first opportunity at or after `t_ns`.
    fn first_at_or_after(&self, t_ns: u64) -> u64 {
        let t_ms = t_ns.div_ceil(NS_PER_MS);
        let n = self.opportunities_ms.len() as u64;
        let cycle = t_ms / self.period_ms;
        let offset = t_ms % self.period_ms;
        let idx = self.opportunities_ms.partition_point(|&o| o < offset) as u64;
        cycle.saturating_mul(n).saturating_add(idx)
    }
}

/// The queue of a direction whose rate follows a [`DeliveryTrace`]: computes each packet's
/// departure time from the delivery opportunities, with a drop-tail limit in packets or bytes.
#[derive(Debug, Clone)]
pub struct TracedQueue {
    trace: DeliveryTrace,
    limit: QueueLimit,
    queue: Departures,
    /// The opportunity the next byte can use, and the bytes left in it.
    cursor: u64,
    credit: u64,
    last_departure_ns: u64,
}

impl TracedQueue {
    pub fn new(trace: DeliveryTrace, limit: QueueLimit) -> Self {
        TracedQueue {
            trace,
            limit,
            queue: Departures::default(),
            cursor: 0,
            credit: OPPORTUNITY_BYTES,
            last_departure_ns: 0,
        }
    }

    /// Packets queued at `now_ns` (after removing departed ones).
    pub fn queue_len(&mut self, now_ns: u64) -> usize {
        self.queue.drain(now_ns);
        self.queue.len()
    }

    /// When the last accepted packet departs (0 before any).
    pub fn busy_until_ns(&self) -> u64 {
        self.last_departure_ns
    }

    /// The trace the queue follows.
    pub fn trace(&self) -> &DeliveryTrace {
        &self.trace
    }

    /// Offers a packet of `bytes` at `now_ns` (non-decreasing across calls): its departure time,
    /// or `None` if the queue is full.
    pub fn offer(&mut self, now_ns: u64, bytes: u64) -> Option<u64> {
        self.queue.drain(now_ns);
        if self.queue.full(self.limit, bytes) {
            return None;
        }
        if self.trace.time_ns(self.cursor) < now_ns {
            // Opportunities that passed while the queue was empty are lost.
            self.cursor = self.trace.first_at_or_after(now_ns);
            self.credit = OPPORTUNITY_BYTES;
        }
        let mut remaining = bytes.max(1);
        let depart = loop {
            let take = remaining.min(self.credit);
            remaining -= take;
            self.credit -= take;
            let at = self.trace.time_ns(self.cursor);
            if self.credit == 0 {
                self.cursor += 1;
                self.credit = OPPORTUNITY_BYTES;
            }
            if remaining == 0 {
                break at;
            }
        };
        self.queue.push(depart, bytes);
        self.last_departure_ns = depart;
        Some(depart)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;

    #[test]
    fn delay_trace_parses_with_comments_and_period() {
        let d =
            parse_delay_trace("# leo\n0 20\n\n15000\t27.5 # step\nperiod 30000\n", "t").unwrap();
        assert_eq!(
            d,
            Delay::Trace {
                points: vec![(0, 20 * MS), (15_000 * MS, 27_500_000)],
                period_ns: Some(30_000 * MS)
            }
        );
        let d = parse_delay_trace("0 300", "t").unwrap();
        assert_eq!(
            d,
            Delay::Trace {
                points: vec![(0, 300 * MS)],
                period_ns: None
            }
        );
    }

    #[test]
    fn delay_trace_errors_name_file_and_line() {
        for (text, line, needle) in [
            ("5 20\n", 1, "time 0"),
            ("0 20\n0 30\n", 2, "increase"),
            ("0 20\n10 x\n", 2, "'x'"),
            ("0 -1\n", 1, "non-negative"),
            ("0 20\nperiod 0\n", 2, "period"),
            ("0 20 7\n", 1, "expected"),
            ("0 20\nperiod 50\n60 1\n", 3, "follow"),
            ("0 NaN\n", 1, "non-negative"),
            ("0 1e12\n", 1, "too large"),
            ("0 20\n1e13 30\n", 2, "too large"),
        ] {
            let e = parse_delay_trace(text, "f.txt").unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("f.txt line {line}:")),
                "{text:?}: {e}"
            );
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let e = parse_delay_trace("# only\n", "f.txt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no entries"), "{e}");
        let e = read_delay_trace(Path::new("/nonexistent/x")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
    }

    #[test]
    fn mahimahi_trace_parses_and_rejects() {
        let t = DeliveryTrace::parse("1\n1\n2\n4\n", "m").unwrap();
        assert_eq!(t.opportunities(), 4);
        assert_eq!(t.period_ms(), 4);
        assert_eq!(t.mean_rate_bps(), 4 * 1500 * 8 * 1000 / 4);
        for (text, needle) in [
            ("1\n3\n2\n", "line 3: times must not decrease"),
            ("1\nfoo\n", "line 2: expected a whole number"),
            ("-1\n", "line 1"),
            ("", "no delivery opportunities"),
            ("0\n0\n", "must be positive"),
        ] {
            let e = DeliveryTrace::parse(text, "m.trace")
                .unwrap_err()
                .to_string();
            assert!(e.contains("m.trace") && e.contains(needle), "{text:?}: {e}");
        }
        assert_eq!(DeliveryTrace::constant(4, 10).mean_rate_bps(), 48_000_000);
    }

    #[test]
    fn traced_queue_follows_opportunities() {
        // Opportunities at 1, 1, 2 and 4 ms, repeating every 4 ms.
        let t = DeliveryTrace::parse("1\n1\n2\n4\n", "m").unwrap();
        let mut q = TracedQueue::new(t, QueueLimit::Packets(100));
        assert_eq!(q.offer(0, 1500), Some(MS));
        assert_eq!(q.offer(0, 1500), Some(MS));
        assert_eq!(q.offer(0, 1500), Some(2 * MS));
        assert_eq!(q.offer(0, 1500), Some(4 * MS));
        assert_eq!(q.offer(0, 1500), Some(5 * MS), "next period");
        // Two small packets share one opportunity; a large one spans two.
        let t = DeliveryTrace::constant(1, 100);
        let mut q = TracedQueue::new(t, QueueLimit::Bytes(100_000));
        assert_eq!(q.offer(0, 700), Some(MS));
        assert_eq!(q.offer(0, 700), Some(MS));
        assert_eq!(
            q.offer(0, 700),
            Some(2 * MS),
            "100 bytes at 1 ms, 600 at 2 ms"
        );
        assert_eq!(q.offer(0, 2000), Some(3 * MS), "900 at 2 ms, 1100 at 3 ms");
        // Idle opportunities are lost: a packet at 10.5 ms waits for 11 ms.
        assert_eq!(q.offer(10 * MS + MS / 2, 100), Some(11 * MS));
    }

    #[test]
    fn traced_queue_drops_when_full() {
        let mut q = TracedQueue::new(DeliveryTrace::constant(1, 100), QueueLimit::Packets(2));
        assert!(q.offer(0, 1500).is_some());
        assert!(q.offer(0, 1500).is_some());
        assert_eq!(q.offer(0, 1500), None);
        assert!(q.offer(MS, 1500).is_some(), "the first left at 1 ms");
        let mut q = TracedQueue::new(DeliveryTrace::constant(1, 100), QueueLimit::Bytes(2000));
        assert!(q.offer(0, 1500).is_some());
        assert_eq!(q.offer(0, 600), None);
        assert!(q.offer(0, 500).is_some());
    }

    #[test]
    fn traced_queue_long_run_matches_mean_rate() {
        let t = DeliveryTrace::parse("1\n2\n2\n3\n5\n5\n5\n8\n", "m").unwrap();
        let rate = t.mean_rate_bps();
        let mut q = TracedQueue::new(t, QueueLimit::Packets(1_000_000));
        let n = 100_000u64;
        let mut last = 0;
        for _ in 0..n {
            last = q.offer(0, 1000).unwrap();
        }
        let got = (n * 1000 * 8) as f64 / (last as f64 / 1e9);
        assert!((got / rate as f64 - 1.0).abs() < 0.001, "{got} vs {rate}");
    }
}
