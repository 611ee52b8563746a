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

use super::{Controller, WindowController};
use std::time::Duration;

/// The initial window, in allocation bandwidth-delay products.
const INITIAL_BDPS: u64 = 2;
/// The largest window, in allocation bandwidth-delay products.
const CEILING_BDPS: u64 = 3;

/// Allocation-started window controller: the window controller's growth and episode rules,
/// started in congestion avoidance, capped, paced no faster than the allocation, and also
/// answering RTT rises.
#[derive(Debug, Clone)]
pub struct AllocationController {
    window: WindowController,
    bytes_per_s: f64,
    /// The allocation's bandwidth-delay product.
    bdp: u64,
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
            // Start in congestion avoidance: the allocation is the estimate slow start would
            // seek. A silent peer collapses the window to two SDs, regrown by slow start.
            window: WindowController::in_avoidance(mss, INITIAL_BDPS * bdp, 2 * mss),
            bytes_per_s,
            bdp,
            max_queue_delay,
            delay_reductions: 0,
        }
    }

    /// Window reductions caused by RTT samples above the floor.
    #[cfg(test)]
    pub fn delay_reductions(&self) -> u64 {
        self.delay_reductions
    }
}

impl Controller for AllocationController {
    fn on_ack(&mut self, acked: u64, app_limited: bool) {
        self.window.on_ack(acked, app_limited);
        self.window.cap(CEILING_BDPS * self.bdp);
    }

    fn on_loss(&mut self, sent_stamp: u32, next_stamp: u32) {
        self.window.congestion_signal(sent_stamp, next_stamp);
    }

    fn on_rtt_sample(&mut self, sample: Duration, min_rtt: Duration, sent_stamp: u32, next: u32) {
        if sample > min_rtt + self.max_queue_delay
            && self.window.congestion_signal(sent_stamp, next)
        {
            self.delay_reductions += 1;
        }
    }

    fn on_unresponsive(&mut self, next_stamp: u32) {
        self.window.on_unresponsive(next_stamp);
    }

    fn window(&self) -> u64 {
        self.window.window()
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        // The window controller's gains (2.0 in slow start, 1.25 otherwise), never above the
        // allocation (an RTT of zero paces at the allocation).
        self.window.pacing_rate(srtt).min(self.bytes_per_s)
    }

    fn in_slow_start(&self) -> bool {
        self.window.in_slow_start()
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh()
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
