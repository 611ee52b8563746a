//! Window control started from a capacity allocation known in advance: the satellite hop of a
//! gateway whose up/down rates are configured. The connection starts paced at the allocation
//! with a window of two allocation bandwidth-delay products, so a transfer does not slow-start
//! across a 600 ms round trip. Two, not one: STAT reports come once per POLL interval (a third of
//! an RTT by default) and arrive a round trip after the data they cover, so keeping the pipe full
//! at the allocated rate needs about 1.5 BDP in flight; the pacer, not the window, sets the rate.
//! It still backs off, by halving its window once per episode, when the hop shows congestion: a
//! reported loss, or an RTT sample more than `max_queue_delay` above the smallest RTT seen (queue
//! building because the link is slower than the allocation, or shared). Between episodes the
//! window grows by one SD per window acknowledged, up to three allocation bandwidth-delay
//! products; the pacer never exceeds the allocation.

use super::{stamp_at_or_before, Controller};
use std::time::Duration;

/// Pacing gain over the window's own rate (below the allocation after a reduction).
const GAIN: f64 = 1.25;
/// Pacing gain while regrowing in slow start after a collapse.
const SLOW_START_GAIN: f64 = 2.0;
/// The initial window, in allocation bandwidth-delay products.
const INITIAL_BDPS: u64 = 2;
/// The largest window, in allocation bandwidth-delay products.
const CEILING_BDPS: u64 = 3;

/// Allocation-started window controller.
#[derive(Debug, Clone)]
pub struct AllocationController {
    mss: u64,
    bytes_per_s: f64,
    /// The allocation's bandwidth-delay product.
    bdp: u64,
    cwnd: u64,
    ssthresh: u64,
    avoidance_credit: u64,
    recovery_stamp: Option<u32>,
    max_queue_delay: Duration,
    /// Reductions caused by RTT samples (the rest were losses or silences).
    delay_reductions: u64,
}

impl AllocationController {
    /// A controller for SDs of `mss` payload bytes, an allocation of `rate_bps` bits per second
    /// of datagram bytes over a path of `base_rtt`, reducing when an RTT sample exceeds the
    /// smallest RTT by more than `max_queue_delay`.
    pub fn new(mss: u64, rate_bps: u64, base_rtt: Duration, max_queue_delay: Duration) -> Self {
        let bytes_per_s = rate_bps as f64 / 8.0;
        let bdp = ((bytes_per_s * base_rtt.as_secs_f64()) as u64).max(2 * mss);
        AllocationController {
            mss,
            bytes_per_s,
            bdp,
            cwnd: INITIAL_BDPS * bdp,
            // Start in congestion avoidance: the allocation is the estimate slow start would seek.
            ssthresh: INITIAL_BDPS * bdp,
            avoidance_credit: 0,
            recovery_stamp: None,
            max_queue_delay,
            delay_reductions: 0,
        }
    }

    /// Window reductions caused by RTT samples above the floor.
    pub fn delay_reductions(&self) -> u64 {
        self.delay_reductions
    }

    fn ceiling(&self) -> u64 {
        CEILING_BDPS * self.bdp
    }

    /// Halves the window unless `sent_stamp` belongs to the episode already reacted to.
    fn reduce(&mut self, sent_stamp: u32, next_stamp: u32) -> bool {
        if let Some(r) = self.recovery_stamp {
            if stamp_at_or_before(sent_stamp, r) {
                return false;
            }
        }
        self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        self.cwnd = self.ssthresh;
        self.avoidance_credit = 0;
        self.recovery_stamp = Some(next_stamp);
        true
    }
}

impl Controller for AllocationController {
    fn on_ack(&mut self, acked: u64, app_limited: bool) {
        if app_limited || acked == 0 {
            return;
        }
        if self.cwnd < self.ssthresh {
            let grow = acked.min(self.ssthresh - self.cwnd);
            self.cwnd += grow;
            self.avoidance_credit += acked - grow;
        } else {
            self.avoidance_credit += acked;
        }
        while self.cwnd >= self.ssthresh && self.avoidance_credit >= self.cwnd {
            self.avoidance_credit -= self.cwnd;
            self.cwnd += self.mss;
        }
        if self.cwnd >= self.ceiling() {
            self.cwnd = self.ceiling();
            self.avoidance_credit = 0;
        }
    }

    fn on_loss(&mut self, sent_stamp: u32, next_stamp: u32) {
        self.reduce(sent_stamp, next_stamp);
    }

    fn on_rtt_sample(&mut self, sample: Duration, min_rtt: Duration, sent_stamp: u32, next: u32) {
        if sample > min_rtt + self.max_queue_delay && self.reduce(sent_stamp, next) {
            self.delay_reductions += 1;
        }
    }

    fn on_unresponsive(&mut self, next_stamp: u32) {
        // The peer stopped answering: regrow by slow start towards half the window we had.
        self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        self.cwnd = 2 * self.mss;
        self.avoidance_credit = 0;
        self.recovery_stamp = Some(next_stamp);
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        let secs = srtt.as_secs_f64();
        if secs <= 0.0 {
            return self.bytes_per_s;
        }
        let gain = if self.in_slow_start() {
            SLOW_START_GAIN
        } else {
            GAIN
        };
        (gain * self.cwnd as f64 / secs).min(self.bytes_per_s)
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn geo() -> AllocationController {
        // 50 Mb/s over 600 ms: 3.75 MB in flight from the start.
        AllocationController::new(1400, 50_000_000, 600 * MS, 150 * MS)
    }

    #[test]
    fn starts_at_two_allocation_bdps_paced_at_the_allocation() {
        let c = geo();
        assert_eq!(c.window(), 7_500_000);
        assert!(!c.in_slow_start());
        assert_eq!(c.pacing_rate(600 * MS), 6_250_000.0);
        // A shorter RTT than configured must not pace above the allocation.
        assert_eq!(c.pacing_rate(100 * MS), 6_250_000.0);
    }

    #[test]
    fn loss_halves_once_per_episode_and_pacing_follows_the_window() {
        let mut c = geo();
        c.on_loss(10, 20);
        assert_eq!(c.window(), 3_750_000);
        c.on_loss(15, 21);
        assert_eq!(c.window(), 3_750_000, "same episode");
        c.on_loss(25, 30);
        assert_eq!(c.window(), 1_875_000);
        let r = c.pacing_rate(600 * MS);
        assert!((r - 1.25 * 1_875_000.0 / 0.6).abs() < 1.0, "{r}");
    }

    #[test]
    fn rtt_above_the_floor_reduces_and_below_does_not() {
        let mut c = geo();
        c.on_rtt_sample(700 * MS, 600 * MS, 5, 6);
        assert_eq!(c.window(), 7_500_000, "100 ms of queue is tolerated");
        c.on_rtt_sample(800 * MS, 600 * MS, 7, 8);
        assert_eq!(c.window(), 3_750_000);
        assert_eq!(c.delay_reductions(), 1);
        c.on_rtt_sample(900 * MS, 600 * MS, 8, 9);
        assert_eq!(c.window(), 3_750_000, "same episode");
    }

    #[test]
    fn growth_is_additive_and_capped_at_three_bdp() {
        let mut c = AllocationController::new(1000, 8_000_000, 100 * MS, 50 * MS);
        assert_eq!(c.window(), 200_000);
        c.on_ack(200_000, false);
        assert_eq!(c.window(), 201_000);
        c.on_ack(50_000, true);
        assert_eq!(c.window(), 201_000, "application-limited: no growth");
        for _ in 0..1000 {
            c.on_ack(1_000_000, false);
        }
        assert_eq!(c.window(), 300_000);
    }

    #[test]
    fn silence_collapses_then_slow_start_regrows() {
        let mut c = geo();
        c.on_unresponsive(3);
        assert_eq!(c.window(), 2800);
        assert!(c.in_slow_start());
        c.on_ack(2800, false);
        assert_eq!(c.window(), 5600);
    }
}
