//! A fixed sending rate allocated by the network (the seeds' rate-controlled mode): no window,
//! pacing at the allocation; retransmissions take the next free slot ahead of new data.

use super::Controller;
use std::time::Duration;

/// Sends at a constant rate regardless of loss.
#[derive(Debug, Clone)]
pub struct RateController {
    bytes_per_s: f64,
}

impl RateController {
    /// A controller sending `rate_bps` bits per second of datagram bytes.
    pub fn new(rate_bps: u64) -> Self {
        RateController {
            bytes_per_s: rate_bps as f64 / 8.0,
        }
    }
}

impl Controller for RateController {
    fn on_ack(&mut self, _acked: u64, _app_limited: bool) {}
    fn on_loss(&mut self, _sent_stamp: u32, _next_stamp: u32) {}
    fn on_unresponsive(&mut self, _next_stamp: u32) {}
    fn window(&self) -> u64 {
        u64::MAX
    }
    fn pacing_rate(&self, _srtt: Duration) -> f64 {
        self.bytes_per_s
    }
    fn in_slow_start(&self) -> bool {
        false
    }
    fn ssthresh(&self) -> u64 {
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_rate_ignores_loss() {
        let mut c = RateController::new(1_000_000);
        c.on_loss(1, 2);
        c.on_unresponsive(3);
        assert_eq!(c.pacing_rate(Duration::from_millis(5)), 125_000.0);
        assert_eq!(c.window(), u64::MAX);
    }
}
