//! The process's clock for times that cross the hop (a tunnel response's clock, a stream
//! header's deadline): ns since the Unix epoch, read from the wall clock once and advanced by
//! the monotonic clock, so the hop's driver and the gateway's streams read the same clock and a
//! step of the wall clock while running moves neither.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

static BASE: OnceLock<(Instant, u64)> = OnceLock::new();

fn base() -> (Instant, u64) {
    *BASE.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        (Instant::now(), wall)
    })
}

/// The clock at `t`, ns since the Unix epoch.
pub(crate) fn unix_ns_at(t: Instant) -> u64 {
    let (i0, w0) = base();
    if t >= i0 {
        w0.saturating_add(u64::try_from(t.duration_since(i0).as_nanos()).unwrap_or(u64::MAX))
    } else {
        w0.saturating_sub(u64::try_from(i0.duration_since(t).as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The clock now, ns since the Unix epoch.
pub(crate) fn unix_ns_now() -> u64 {
    unix_ns_at(Instant::now())
}

/// The clock now, ms since the Unix epoch.
pub(crate) fn unix_ms_now() -> u64 {
    unix_ns_now() / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_monotonic_clock_from_the_wall_clock() {
        let t = Instant::now();
        let a = unix_ns_at(t);
        let b = unix_ns_at(t + std::time::Duration::from_millis(1500));
        assert_eq!(b - a, 1_500_000_000);
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let diff = (i128::from(unix_ns_now()) - wall.as_nanos() as i128).abs();
        assert!(diff < 1_000_000_000, "{diff} ns from the wall clock");
    }
}
