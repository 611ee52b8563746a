//! Congestion control behind a small trait; one file per controller.
//!
//! A controller is told what STAT/USTAT processing learned (bytes newly acknowledged, packets
//! found lost, an unresponsive peer) and answers with a window (bytes allowed in flight) and a
//! pacing rate. Loss episodes are delimited with the sender's 32-bit send stamps (see
//! `connection`), so a controller reduces at most once per window of data.

mod allocation;
mod rate;
mod window;

pub use allocation::AllocationController;
pub use rate::RateController;
pub use window::WindowController;

use crate::config::{Config, CongestionMode};
use std::time::Duration;

/// The controller `config` asks for, for SDs of `mss` payload bytes: the factory every
/// connection uses (and uses again when the peer's smaller datagram limit shrinks the MSS
/// before any acknowledgement arrived).
pub(crate) fn new_controller(config: &Config, mss: u64) -> AnyController {
    match config.congestion {
        CongestionMode::Window => AnyController::Window(WindowController::from_config(config, mss)),
        CongestionMode::Rate { rate_bps } => AnyController::Rate(RateController::new(rate_bps)),
        CongestionMode::Allocated {
            rate_bps,
            max_queue_delay_ms,
        } => AnyController::Allocated(Box::new(AllocationController::new(
            mss,
            rate_bps,
            Config::ms(config.initial_rtt_ms),
            Config::ms(max_queue_delay_ms),
        ))),
    }
}

/// One of the controllers, held in the connection itself (no heap allocation and no indirect
/// call for the default window controller; the allocation controller, the largest, is boxed).
#[derive(Debug, Clone)]
pub(crate) enum AnyController {
    Window(WindowController),
    Rate(RateController),
    Allocated(Box<AllocationController>),
}

impl AnyController {
    fn get(&self) -> &dyn Controller {
        match self {
            AnyController::Window(c) => c,
            AnyController::Rate(c) => c,
            AnyController::Allocated(c) => c.as_ref(),
        }
    }

    fn get_mut(&mut self) -> &mut dyn Controller {
        match self {
            AnyController::Window(c) => c,
            AnyController::Rate(c) => c,
            AnyController::Allocated(c) => c.as_mut(),
        }
    }
}

impl Controller for AnyController {
    fn on_ack(&mut self, acked: u64, app_limited: bool) {
        match self {
            AnyController::Window(c) => c.on_ack(acked, app_limited),
            c => c.get_mut().on_ack(acked, app_limited),
        }
    }
    fn on_loss(&mut self, sent_stamp: u32, next_stamp: u32) {
        self.get_mut().on_loss(sent_stamp, next_stamp);
    }
    fn on_rtt_sample(&mut self, sample: Duration, min_rtt: Duration, sent: u32, next: u32) {
        self.get_mut().on_rtt_sample(sample, min_rtt, sent, next);
    }
    fn on_unresponsive(&mut self, next_stamp: u32) {
        self.get_mut().on_unresponsive(next_stamp);
    }
    fn window(&self) -> u64 {
        match self {
            AnyController::Window(c) => c.window(),
            c => c.get().window(),
        }
    }
    fn pacing_rate(&self, srtt: Duration) -> f64 {
        self.get().pacing_rate(srtt)
    }
    fn in_slow_start(&self) -> bool {
        self.get().in_slow_start()
    }
    fn ssthresh(&self) -> u64 {
        self.get().ssthresh()
    }
}

/// Interface between the sender and a congestion controller.
pub trait Controller: Send + std::fmt::Debug {
    /// `acked` bytes were newly acknowledged. `app_limited` is true when the sender had neither
    /// filled the window nor had data waiting, in which case the window should not grow.
    fn on_ack(&mut self, acked: u64, app_limited: bool);
    /// A packet last sent with stamp `sent_stamp` was reported lost; `next_stamp` is the stamp the
    /// next transmission will carry (losses of packets stamped at or before the reduction belong
    /// to the same episode).
    fn on_loss(&mut self, sent_stamp: u32, next_stamp: u32);
    /// An RTT sample measured on a POLL sent with `sent_stamp`, beside the smallest RTT seen;
    /// `next_stamp` as for `on_loss`. Loss-based controllers ignore it.
    fn on_rtt_sample(
        &mut self,
        sample: Duration,
        min_rtt: Duration,
        sent_stamp: u32,
        next_stamp: u32,
    ) {
        let _ = (sample, min_rtt, sent_stamp, next_stamp);
    }
    /// Several POLLs in a row went unanswered: collapse to the initial window.
    fn on_unresponsive(&mut self, next_stamp: u32);
    /// Bytes allowed in flight (`u64::MAX` when the controller does not limit by window).
    fn window(&self) -> u64;
    /// Pacing rate in bytes per second for the given smoothed RTT, before min/max bounds.
    /// `f64::INFINITY` means "do not pace".
    fn pacing_rate(&self, srtt: Duration) -> f64;
    /// Whether the controller is in slow start (window growth by the bytes acknowledged).
    fn in_slow_start(&self) -> bool;
    /// The slow-start threshold in bytes (`u64::MAX` before the first loss).
    fn ssthresh(&self) -> u64;
}

/// Serial comparison of 32-bit send stamps: `a` at or before `b`.
pub(crate) fn stamp_at_or_before(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < (1 << 31)
}
