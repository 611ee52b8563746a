//! The analytic model of TCP-related latency of HTTP transfers (thesis §4.2.4, fig. 4.21,
//! Table 4.2): for a reply of n segments, the time from the client's first packet to the last
//! reply segment's arrival, counting handshake round trips, slow-start rounds and delayed-ACK
//! waits, and nothing else — no server time, no transmission time, no loss, a fixed RTT (the
//! thesis' assumptions). The per-size latencies are then weighted by the reply-size pmf
//! ([`crate::web::http_model::reply_segment_pmf`]), transfers over 100 segments left out, to give the
//! minimum, median and mean.
//!
//! The per-size latency is computed by stepping the exchange segment by segment in zero-width
//! instants (a recurrence, not a packet simulation):
//! - standard TCP: SYN and SYN-ACK take one RTT, the request rides on the handshake's ACK, and
//!   the server answers half an RTT later with its initial window; T/TCP: the request rides on
//!   the SYN and the server answers at once, its reply carrying the SYN-ACK (TAO test passed);
//! - the server's window starts at the initial window (1 segment, or 4KSS's
//!   min(4·MSS, max(2·MSS, 4380 B))) and grows by one segment per ACK (slow start, no byte
//!   counting: the seeds' BSD TCP);
//! - the client acknowledges every second segment at once and a lone segment after the mean
//!   delayed-ACK wait (100 ms: BSD's 200 ms tick, on average half a tick), or at once when the
//!   segment carries the SYN-ACK (T/TCP: an ACK of a SYN is never delayed). This is the
//!   thesis' count (2 RTT for a 3-segment T/TCP reply); the simulated BSD T/TCP client does
//!   delay its ACK of a SYN-ACK carrying data, as BSD's T/TCP code does (`crate::tcp`).
//!
//! So a 3-segment reply costs 3 RTT + 100 ms with standard TCP, 2 RTT with T/TCP or 4KSS and
//! 1 RTT with both (the thesis' worked example; tests below).

use crate::web::http_model::reply_segment_pmf;

/// The TCP options of one row of Table 4.2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelTcp {
    /// Round-trip time, seconds.
    pub rtt_s: f64,
    /// Data bytes per segment.
    pub mss_bytes: u64,
    /// T/TCP: no handshake round trip; the reply's first flight carries the SYN-ACK.
    pub ttcp: bool,
    /// 4KSS initial window instead of one segment.
    pub four_kss: bool,
    /// Mean wait of a delayed ACK, seconds (0 without delayed ACKs).
    pub delayed_ack_s: f64,
}

impl ModelTcp {
    /// The seeds' standard TCP with delayed ACKs (100 ms mean wait).
    pub fn standard(rtt_s: f64, mss_bytes: u64) -> Self {
        ModelTcp {
            rtt_s,
            mss_bytes,
            ttcp: false,
            four_kss: false,
            delayed_ack_s: 0.1,
        }
    }

    /// The initial window in segments.
    pub fn initial_window_segments(&self) -> u64 {
        if self.four_kss {
            let mss = self.mss_bytes.max(1);
            ((4 * mss).min((2 * mss).max(4380)) / mss).max(1)
        } else {
            1
        }
    }

    /// TCP-related latency of a reply of `segments` segments (at least one), seconds.
    pub fn latency_s(&self, segments: u64) -> f64 {
        let n = segments.max(1);
        let half = self.rtt_s / 2.0;
        // When the server sends its first reply segment.
        let first_send = if self.ttcp { half } else { self.rtt_s + half };
        let mut events: Vec<(f64, Ev)> = Vec::new();
        let mut cwnd = self.initial_window_segments();
        let (mut sent, mut acked) = (0u64, 0u64);
        let send = |events: &mut Vec<(f64, Ev)>, at: f64, sent: &mut u64, limit: u64| {
            while *sent < limit {
                *sent += 1;
                events.push((at + half, Ev::Segment(*sent)));
            }
        };
        send(&mut events, first_send, &mut sent, cwnd.min(n));
        // Client state: segments received and not yet acknowledged, delayed-ACK deadline.
        let mut unacked = 0u64;
        let mut received = 0u64;
        let mut timer: Option<f64> = None;
        let mut last_arrival = 0.0;
        while let Some(i) = next_event(&events) {
            let (t, ev) = events.remove(i);
            match ev {
                Ev::Segment(seq) => {
                    received = received.max(seq);
                    last_arrival = t;
                    if received >= n {
                        break;
                    }
                    unacked += 1;
                    // The T/TCP reply's first segment carries the SYN-ACK: acknowledged at once.
                    let syn = self.ttcp && seq == 1;
                    if syn || unacked >= 2 || self.delayed_ack_s <= 0.0 {
                        events.push((t + half, Ev::Ack(received)));
                        unacked = 0;
                        timer = None;
                    } else if timer.is_none() {
                        let at = t + self.delayed_ack_s;
                        timer = Some(at);
                        events.push((at, Ev::DelayedAck));
                    }
                }
                Ev::DelayedAck => {
                    if timer.is_some_and(|d| d <= t) && unacked > 0 {
                        events.push((t + half, Ev::Ack(received)));
                        unacked = 0;
                        timer = None;
                    }
                }
                Ev::Ack(upto) => {
                    if upto > acked {
                        acked = upto;
                        cwnd += 1;
                    }
                    let limit = (acked + cwnd).min(n);
                    send(&mut events, t, &mut sent, limit);
                }
            }
        }
        last_arrival
    }

    /// Minimum, median and mean latency over the reply-size pmf for this segment size,
    /// transfers over `max_segments` segments left out (the thesis: 100), seconds.
    pub fn summary(&self, max_segments: u32) -> ModelSummary {
        let (pmf, over) = reply_segment_pmf(self.mss_bytes, max_segments);
        let kept: f64 = pmf.iter().sum();
        let mut mean = 0.0;
        let mut min = f64::INFINITY;
        let mut median = f64::NAN;
        let mut cum = 0.0;
        for (i, &p) in pmf.iter().enumerate() {
            if p <= 0.0 {
                continue;
            }
            let l = self.latency_s(i as u64 + 1);
            min = min.min(l);
            mean += p * l / kept;
            cum += p / kept;
            if median.is_nan() && cum >= 0.5 {
                median = l;
            }
        }
        ModelSummary {
            min_s: min,
            median_s: median,
            mean_s: mean,
            left_out: over,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    /// Reply segment `n` (1-based) reaches the client.
    Segment(u64),
    /// The client's delayed-ACK timer.
    DelayedAck,
    /// An ACK of the first `n` segments reaches the server.
    Ack(u64),
}

/// The earliest event (ties: the one queued first).
fn next_event(events: &[(f64, Ev)]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, e) in events.iter().enumerate() {
        if best.is_none_or(|b| e.0 < events[b].0) {
            best = Some(i);
        }
    }
    best
}

/// The model's figures for one row of Table 4.2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelSummary {
    pub min_s: f64,
    pub median_s: f64,
    pub mean_s: f64,
    /// Probability mass of the transfers left out (over the segment limit).
    pub left_out: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn opts(ttcp: bool, four_kss: bool) -> ModelTcp {
        ModelTcp {
            ttcp,
            four_kss,
            ..ModelTcp::standard(0.6, 1460)
        }
    }

    #[test]
    fn the_thesis_three_segment_example() {
        // Fig. 4.21: 3 RTT + 100 ms; either option 2 RTT; both 1 RTT.
        assert!(close(opts(false, false).latency_s(3), 3.0 * 0.6 + 0.1));
        assert!(close(opts(true, false).latency_s(3), 2.0 * 0.6));
        assert!(close(opts(false, true).latency_s(3), 2.0 * 0.6));
        assert!(close(opts(true, true).latency_s(3), 0.6));
    }

    #[test]
    fn one_segment_and_longer_replies_by_hand() {
        let tcp = opts(false, false);
        // One segment: handshake + request/reply, no ACK wait.
        assert!(close(tcp.latency_s(1), 1.2));
        // Two segments: the second waits for the delayed ACK of the first.
        assert!(close(tcp.latency_s(2), 1.9));
        // Flights 1, 2, 3 (cwnd 1 → 2 → 3): 6 segments, one delayed ACK.
        assert!(close(tcp.latency_s(6), 4.0 * 0.6 + 0.1));
        // 4KSS: 4 segments in the first flight, the ACKs of two pairs open it to 6.
        let kss = opts(false, true);
        assert_eq!(kss.initial_window_segments(), 3);
        assert!(close(kss.latency_s(3), 1.2));
        assert!(close(kss.latency_s(4), 1.8));
        let kss500 = ModelTcp {
            mss_bytes: 460,
            ..kss
        };
        assert_eq!(kss500.initial_window_segments(), 4);
        assert!(close(kss500.latency_s(4), 1.2));
        // Without delayed ACKs the lone segment is acknowledged at once.
        let no_delack = ModelTcp {
            delayed_ack_s: 0.0,
            ..tcp
        };
        assert!(close(no_delack.latency_s(3), 1.8));
        // LEO (80 ms): the 100 ms wait is longer than the RTT.
        let leo = ModelTcp::standard(0.08, 1460);
        assert!(close(leo.latency_s(3), 0.34));
    }

    #[test]
    fn latency_never_falls_with_size() {
        for (t, k) in [(false, false), (true, false), (false, true), (true, true)] {
            let m = opts(t, k);
            let mut last = 0.0;
            for n in 1..=100 {
                let l = m.latency_s(n);
                assert!(l >= last, "{t} {k} {n}: {l} < {last}");
                last = l;
            }
        }
    }

    #[test]
    fn summaries_order_as_the_thesis() {
        let s = opts(false, false).summary(100);
        let both = opts(true, true).summary(100);
        assert!(close(s.min_s, 1.2));
        assert!(close(both.min_s, 0.6));
        assert!(s.mean_s > 2.0 * both.mean_s * 0.9);
        assert!(s.median_s >= s.min_s && s.mean_s > s.min_s);
        assert!(s.left_out > 0.0 && s.left_out < 0.05);
    }
}
