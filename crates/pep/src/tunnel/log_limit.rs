//! Rate limits for log lines about peers: at most one line per key (a source address, a terminal
//! key) per interval, in bounded memory, so a flood of bad handshakes cannot flood the log.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;
use stp::Instant;

/// Keys remembered at most; beyond it, keys not logged within the interval are forgotten, and
/// if none are, lines about new keys are suppressed (and counted) until some are.
const MAX_KEYS: usize = 4096;

/// At most one log line per key per `interval`.
pub(crate) struct LogLimiter<K> {
    interval: Duration,
    last: HashMap<K, Instant>,
    suppressed: u64,
}

impl<K: Hash + Eq + Copy> LogLimiter<K> {
    pub(crate) fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            last: HashMap::new(),
            suppressed: 0,
        }
    }

    /// Whether a line about `key` may be logged at `now` (and if so, records it).
    pub(crate) fn allow(&mut self, key: K, now: Instant) -> bool {
        if let Some(&t) = self.last.get(&key) {
            if now.saturating_duration_since(t) < self.interval {
                self.suppressed += 1;
                return false;
            }
        }
        if self.last.len() >= MAX_KEYS && !self.last.contains_key(&key) {
            let interval = self.interval;
            self.last
                .retain(|_, t| now.saturating_duration_since(*t) < interval);
            if self.last.len() >= MAX_KEYS {
                self.suppressed += 1;
                return false;
            }
        }
        self.last.insert(key, now);
        true
    }

    /// Lines suppressed so far.
    #[cfg(test)]
    pub(crate) fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_interval() {
        let mut l = LogLimiter::new(Duration::from_secs(60));
        let t0 = Instant::ZERO;
        assert!(l.allow(1, t0));
        assert!(!l.allow(1, t0 + Duration::from_secs(59)));
        assert!(l.allow(2, t0 + Duration::from_secs(1)));
        assert!(l.allow(1, t0 + Duration::from_secs(60)));
        assert_eq!(l.suppressed(), 1);
    }

    #[test]
    fn memory_is_bounded() {
        let mut l = LogLimiter::new(Duration::from_secs(60));
        for k in 0..MAX_KEYS as u32 {
            assert!(l.allow(k, Instant::ZERO));
        }
        assert!(!l.allow(u32::MAX, Instant::ZERO));
        assert!(l.last.len() <= MAX_KEYS);
        // Once the old entries are stale, new keys are logged again.
        assert!(l.allow(u32::MAX, Instant::ZERO + Duration::from_secs(61)));
        assert!(l.last.len() <= MAX_KEYS);
    }
}
