//! Time as a value: the driver passes `now` in; the engine never reads a clock.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an epoch chosen by the driver.
///
/// The simulator passes virtual nanoseconds; a real driver passes nanoseconds since it started.
/// Only differences between instants are meaningful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The instant expressed as the 32-bit microsecond timestamp carried in POLL and BGN.
    pub fn wire_timestamp(self) -> u32 {
        (self.0 / 1_000) as u32
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(rhs)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(rhs)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

/// Elapsed time between two 32-bit microsecond wire timestamps (`later - earlier`, wrapping).
///
/// Valid while the true difference is below 2^31 µs (about 35 minutes); a larger or negative
/// difference yields `None`.
pub fn wire_elapsed(later: u32, earlier: u32) -> Option<Duration> {
    let d = later.wrapping_sub(earlier);
    if d < (1 << 31) {
        Some(Duration::from_micros(u64::from(d)))
    } else {
        None
    }
}

/// Whether wire timestamp `a` is at or before wire timestamp `b` (serial arithmetic on 32 bits).
pub fn wire_at_or_before(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < (1 << 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_nanos(5);
        assert_eq!(t - Duration::from_nanos(10), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!((t + Duration::from_nanos(3)).as_nanos(), 8);
    }

    #[test]
    fn wire_timestamps_wrap() {
        assert_eq!(
            wire_elapsed(5, u32::MAX - 4),
            Some(Duration::from_micros(10))
        );
        assert_eq!(wire_elapsed(0, 10), None);
        assert!(wire_at_or_before(u32::MAX, 3));
        assert!(!wire_at_or_before(3, u32::MAX));
        assert!(wire_at_or_before(7, 7));
    }
}
