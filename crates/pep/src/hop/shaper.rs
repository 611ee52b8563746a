//! The send allocation: a token bucket in link bytes (sealed datagram plus IP and UDP headers)
//! that every datagram leaving the hop passes.

use std::time::Duration;
use stp::Instant;

/// Shaper bucket depth: this long at the allocated rate (and at least two full datagrams).
const SHAPER_BURST: Duration = Duration::from_millis(5);

/// Token bucket in link bytes for the send allocation.
pub(crate) struct Shaper {
    pub(crate) rate_bps: u64,
    bytes_per_s: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
    overhead: usize,
}

impl Shaper {
    pub(crate) fn new(rate_bps: u64, overhead: usize, now: Instant) -> Shaper {
        let bytes_per_s = rate_bps as f64 / 8.0;
        let capacity = (bytes_per_s * SHAPER_BURST.as_secs_f64()).max(2.0 * 1500.0);
        Shaper {
            rate_bps,
            bytes_per_s,
            capacity,
            tokens: capacity,
            last: now,
            overhead,
        }
    }

    pub(crate) fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.bytes_per_s).min(self.capacity);
        self.last = now;
    }

    /// Whether a datagram may leave now (the bucket may go negative by one datagram).
    pub(crate) fn ready(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens > 0.0
    }

    pub(crate) fn charge(&mut self, datagram: usize) {
        self.tokens -= (datagram + self.overhead) as f64;
    }

    /// When the bucket is positive again.
    pub(crate) fn ready_at(&self) -> Instant {
        if self.tokens > 0.0 {
            return self.last;
        }
        let wait = (1.0 - self.tokens) / self.bytes_per_s;
        self.last + Duration::from_secs_f64(wait)
    }
}
