//! Receive backpressure: a hop worker whose socket's receive queue fills (the daemon is not
//! keeping up with what arrives: its CPU is starved, or it serves more than it can) holds every
//! connection's advertised STP receive window to a share of the socket's buffer until the queue
//! drains ([`stp::Endpoint::set_window_ceiling`]). The peers then wait for room instead of
//! sending into a full buffer, where the kernel drops whole runs of datagrams and every one of
//! them is sent again.
//!
//! Without pressure nothing is capped: on a long path the windows in flight may add up to far
//! more than the buffer (they are in the link, not in the queue), and a receiver that keeps up
//! never queues much of them. The ceiling applies only once the queue shows the daemon falling
//! behind:
//!
//! - **On** when the queue holds a quarter of the buffer ([`ON_FRACTION`]); **off** when it is
//!   back under a sixteenth ([`OFF_FRACTION`]): the gap keeps it from flapping.
//! - **The ceiling** is an eighth of the buffer (a quarter of its usable half: the kernel counts
//!   twice the size set) shared by the worker's streams, at least [`FLOOR`] each, so the sum of
//!   the windows stays well within the buffer while every stream keeps moving.
//! - **Cost.** The worker reads the queue's fill (`SO_MEMINFO`, one system call) only after a
//!   receive that took a full batch (the sign of a backlog) and while the pressure is on.

/// The queue's share of the buffer that turns the pressure on: 1 / this.
pub(crate) const ON_FRACTION: u64 = 4;
/// The queue's share of the buffer under which the pressure goes off: 1 / this.
pub(crate) const OFF_FRACTION: u64 = 16;
/// The windows add up to at most the buffer / this (plus the floors).
pub(crate) const BUDGET_FRACTION: u64 = 8;
/// The least window a stream is held to: a few datagrams, so none stops.
pub(crate) const FLOOR: u64 = 64 * 1024;

/// One worker's receive backpressure.
#[derive(Debug, Default)]
pub(crate) struct Backpressure {
    on: bool,
    /// Times the pressure went on.
    pub(crate) episodes: u64,
    ceiling: Option<u64>,
}

impl Backpressure {
    /// Whether the pressure is on (the worker then reads the queue after every receive).
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// The ceiling in force (`None`: no pressure).
    pub(crate) fn ceiling(&self) -> Option<u64> {
        self.ceiling
    }

    /// Takes the queue's fill: `queued` bytes waiting in a buffer of `capacity` (both as the
    /// kernel counts them), with `streams` live streams on the worker. Returns the window
    /// ceiling now in force, and whether the pressure just went on.
    pub(crate) fn update(
        &mut self,
        queued: u64,
        capacity: u64,
        streams: usize,
    ) -> (Option<u64>, bool) {
        let mut started = false;
        if capacity == 0 {
            self.on = false;
        } else if !self.on && queued.saturating_mul(ON_FRACTION) >= capacity {
            self.on = true;
            self.episodes += 1;
            started = true;
        } else if self.on && queued.saturating_mul(OFF_FRACTION) <= capacity {
            self.on = false;
        }
        self.ceiling = self.on.then(|| {
            let n = u64::try_from(streams.max(1)).unwrap_or(u64::MAX);
            (capacity / BUDGET_FRACTION / n).max(FLOOR)
        });
        (self.ceiling, started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUF: u64 = 64 << 20;

    #[test]
    fn the_ceiling_comes_at_a_quarter_and_goes_under_a_sixteenth() {
        let mut b = Backpressure::default();
        assert_eq!(b.update(BUF / 4 - 1, BUF, 100), (None, false));
        assert_eq!(b.update(BUF / 4, BUF, 100), (Some(BUF / 8 / 100), true));
        assert!(b.is_on());
        // Between the marks it stays on, and follows the streams.
        assert_eq!(b.update(BUF / 8, BUF, 50), (Some(BUF / 8 / 50), false));
        assert_eq!(b.update(BUF / 16 + 1, BUF, 50).0, Some(BUF / 8 / 50));
        assert_eq!(b.update(BUF / 16, BUF, 50), (None, false));
        assert!(!b.is_on());
        // Between the marks again: off stays off.
        assert_eq!(b.update(BUF / 8, BUF, 50), (None, false));
        assert_eq!(b.update(BUF, BUF, 50), (Some(BUF / 8 / 50), true));
        assert_eq!(b.episodes, 2);
    }

    #[test]
    fn each_stream_keeps_a_floor_and_one_stream_gets_the_whole_budget() {
        let mut b = Backpressure::default();
        assert_eq!(b.update(BUF, BUF, 100_000).0, Some(FLOOR));
        assert_eq!(b.update(BUF, BUF, 0).0, Some(BUF / 8));
        assert_eq!(b.update(BUF, BUF, 1).0, Some(BUF / 8));
    }

    #[test]
    fn an_unknown_buffer_caps_nothing() {
        let mut b = Backpressure::default();
        assert_eq!(b.update(1 << 30, 0, 10), (None, false));
        assert!(!b.is_on());
    }
}
