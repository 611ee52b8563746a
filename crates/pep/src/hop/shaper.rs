//! The send allocation: a token bucket in link bytes (sealed datagram plus IP and UDP headers)
//! that every datagram leaving the hop passes. The workers of one hop share one bucket (a clone
//! of a [`Shaper`] draws on the same tokens), so N workers together keep to the allocation.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use stp::Instant;

/// Shaper bucket depth: this long at the allocated rate (and at least two full datagrams).
const SHAPER_BURST: Duration = Duration::from_millis(5);

/// Token bucket in link bytes for the send allocation. Clones share the bucket: their clocks
/// must be one clock (a hop's workers count from the same start).
#[derive(Clone)]
pub(crate) struct Shaper {
    pub(crate) rate_bps: u64,
    bytes_per_s: f64,
    overhead: usize,
    bucket: Arc<Mutex<Bucket>>,
}

struct Bucket {
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl Shaper {
    pub(crate) fn new(rate_bps: u64, overhead: usize, now: Instant) -> Shaper {
        let bytes_per_s = rate_bps as f64 / 8.0;
        let capacity = (bytes_per_s * SHAPER_BURST.as_secs_f64()).max(2.0 * 1500.0);
        Shaper {
            rate_bps,
            bytes_per_s,
            overhead,
            bucket: Arc::new(Mutex::new(Bucket {
                capacity,
                tokens: capacity,
                last: now,
            })),
        }
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        // A worker that panicked holding the lock left plain numbers behind: still usable.
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn refill(&mut self, now: Instant) {
        let rate = self.bytes_per_s;
        let mut b = self.bucket();
        // Another worker may have refilled up to a moment later than `now`.
        let dt = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + dt * rate).min(b.capacity);
        b.last = b.last.max(now);
    }

    /// Whether a datagram may leave now (the bucket may go negative by one datagram per
    /// worker).
    pub(crate) fn ready(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.bucket().tokens > 0.0
    }

    pub(crate) fn charge(&mut self, datagram: usize) {
        let cost = (datagram + self.overhead) as f64;
        self.bucket().tokens -= cost;
    }

    /// When the bucket is positive again.
    pub(crate) fn ready_at(&self) -> Instant {
        let b = self.bucket();
        if b.tokens > 0.0 {
            return b.last;
        }
        let wait = (1.0 - b.tokens) / self.bytes_per_s;
        b.last + Duration::from_secs_f64(wait)
    }
}
