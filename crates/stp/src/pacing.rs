//! The delayed-send timer: a token bucket that releases transmissions at the pacing rate, woken at
//! a configurable granularity, so a window opened by a STAT is spread over the RTT instead of
//! leaving at line rate.

use crate::time::Instant;
use std::time::Duration;

/// Token-bucket pacer in bytes.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: f64,
    tokens: f64,
    capacity: f64,
    min_capacity: f64,
    last: Instant,
    /// The timer granularity in nanoseconds (8 bytes where a `Duration` takes 16).
    granularity_ns: u64,
}

impl Pacer {
    /// A pacer that may first send `initial_burst` bytes at once (the initial window), with the
    /// bucket never holding less than `min_capacity` bytes of credit.
    pub fn new(now: Instant, granularity: Duration, initial_burst: u64, min_capacity: u64) -> Self {
        Pacer {
            rate: f64::INFINITY,
            tokens: initial_burst as f64,
            capacity: initial_burst.max(min_capacity) as f64,
            min_capacity: min_capacity as f64,
            last: now,
            granularity_ns: u64::try_from(granularity.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Sets the rate in bytes per second (`f64::INFINITY` disables pacing).
    pub fn set_rate(&mut self, now: Instant, rate: f64) {
        self.refill(now);
        self.rate = rate;
        // Two ticks of credit: a wake-up scheduled on a tick boundary that a busy driver serves
        // late (by up to a tick) then loses nothing, while a burst stays within two ticks.
        let per_tick = rate * Duration::from_nanos(self.granularity_ns).as_secs_f64();
        self.capacity = (2.0 * per_tick).max(self.min_capacity);
    }

    /// Current rate in bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, now: Instant) {
        if now > self.last {
            let dt = (now - self.last).as_secs_f64();
            // Credit above the bucket size only exists from the initial burst; it is kept until
            // spent but never topped up.
            if self.tokens < self.capacity {
                self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
            }
            self.last = now;
        }
    }

    /// Whether `bytes` may be sent at `now`.
    pub fn can_send(&mut self, now: Instant, bytes: usize) -> bool {
        if !self.rate.is_finite() {
            return true;
        }
        self.refill(now);
        // Tolerate float rounding in the refill arithmetic (a millionth of a byte).
        self.tokens + 1e-6 >= bytes as f64
    }

    /// Records a transmission of `bytes`.
    pub fn on_sent(&mut self, bytes: usize) {
        if self.rate.is_finite() {
            self.tokens -= bytes as f64;
        }
    }

    /// When `bytes` may next be sent, rounded up to the timer granularity.
    pub fn next_send_time(&mut self, now: Instant, bytes: usize) -> Instant {
        if self.can_send(now, bytes) {
            return now;
        }
        let missing = bytes as f64 - self.tokens;
        let wait = Duration::from_secs_f64((missing / self.rate).min(3600.0));
        let g = self.granularity_ns.max(1);
        let w = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        let rounded = w.div_ceil(g).max(1).saturating_mul(g);
        now + Duration::from_nanos(rounded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_sends_at_the_rate() {
        let t0 = Instant::ZERO;
        let mut p = Pacer::new(t0, Duration::from_millis(1), 0, 1000);
        p.set_rate(t0, 100_000.0); // 100 kB/s: 1000 bytes every 10 ms
        assert!(!p.can_send(t0, 1000));
        let t1 = p.next_send_time(t0, 1000);
        assert_eq!(t1, t0 + Duration::from_millis(10));
        assert!(p.can_send(t1, 1000));
        p.on_sent(1000);
        assert!(!p.can_send(t1, 1000));
        // After a long idle, the burst is bounded by the bucket.
        let later = t1 + Duration::from_secs(10);
        assert!(p.can_send(later, 1000));
        p.on_sent(1000);
        assert!(!p.can_send(later, 1000));
    }

    #[test]
    fn initial_burst_goes_at_once() {
        let t0 = Instant::ZERO;
        let mut p = Pacer::new(t0, Duration::from_millis(1), 10_000, 2000);
        p.set_rate(t0, 1000.0);
        for _ in 0..10 {
            assert!(p.can_send(t0, 1000));
            p.on_sent(1000);
        }
        assert!(!p.can_send(t0, 1000));
    }

    #[test]
    fn infinite_rate_never_blocks() {
        let mut p = Pacer::new(Instant::ZERO, Duration::from_millis(1), 0, 0);
        assert!(p.can_send(Instant::ZERO, 1 << 30));
    }
}
