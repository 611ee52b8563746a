//! The seeds' TCP-equivalent window controller: slow start and congestion avoidance by byte
//! counting on STAT/USTAT, one halving per loss episode, collapse to the initial window when the
//! peer stops answering POLLs. Two options, off by default (spec §7.2b): halving also when an RTT
//! sample rises far above the smallest RTT (the thesis' Ricochet lesson: a deep queue on the
//! path never drops, so a loss-driven window grows it without bound), and sending the first
//! flight unpaced (the thesis' suggested tuning for short transfers).

use super::{stamp_at_or_before, Controller};
use crate::config::Config;
use std::time::Duration;

/// Pacing gain while in slow start (the window doubles per RTT, so pace ahead of it).
const SLOW_START_GAIN: f64 = 2.0;
/// Pacing gain in congestion avoidance (keeps the pipe full despite the pacing lag).
const AVOIDANCE_GAIN: f64 = 1.25;

/// TCP-equivalent window control with byte counting.
#[derive(Debug, Clone)]
pub struct WindowController {
    mss: u64,
    initial: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Bytes acknowledged in congestion avoidance not yet turned into window growth.
    avoidance_credit: u64,
    /// Stamp of the last reduction; losses of packets sent at or before it are the same episode.
    recovery_stamp: Option<u32>,
    /// Halve when an RTT sample exceeds the smallest RTT by more than this many milliseconds
    /// (None: never).
    rtt_backoff_ms: Option<u32>,
    /// Do not pace until the first acknowledgement arrives.
    unpaced_first_flight: bool,
    /// One pacing gain for every phase (None: SLOW_START_GAIN and AVOIDANCE_GAIN).
    pacing_gain: Option<f64>,
    /// An acknowledgement arrived (the first flight is over).
    acked_any: bool,
    /// Reductions caused by RTT samples.
    delay_reductions: u32,
}

impl WindowController {
    /// A controller for SDs of `mss` payload bytes starting at `initial` bytes.
    pub fn new(mss: u64, initial: u64) -> Self {
        WindowController {
            mss,
            initial: initial.max(mss),
            cwnd: initial.max(mss),
            ssthresh: u64::MAX,
            avoidance_credit: 0,
            recovery_stamp: None,
            rtt_backoff_ms: None,
            unpaced_first_flight: false,
            pacing_gain: None,
            acked_any: false,
            delay_reductions: 0,
        }
    }

    /// The controller a connection with `config` and SDs of `mss` payload bytes uses: the
    /// initial window and the two options of the configuration.
    pub fn from_config(config: &Config, mss: u64) -> Self {
        WindowController {
            rtt_backoff_ms: config.window_rtt_backoff_ms,
            unpaced_first_flight: config.unpaced_first_flight,
            pacing_gain: config.pacing_gain,
            ..WindowController::new(mss, config.initial_window.bytes(mss))
        }
    }

    /// Window reductions caused by RTT samples above the floor.
    #[cfg(test)]
    pub fn delay_reductions(&self) -> u32 {
        self.delay_reductions
    }

    /// A controller already in congestion avoidance at `cwnd` bytes, collapsing to `collapse`
    /// bytes when the peer stops answering (the allocation controller's start).
    pub(crate) fn in_avoidance(mss: u64, cwnd: u64, collapse: u64) -> Self {
        let cwnd = cwnd.max(mss);
        WindowController {
            cwnd,
            ssthresh: cwnd,
            ..WindowController::new(mss, collapse)
        }
    }

    /// Never lets the window exceed `max` bytes (credit is dropped at the cap).
    pub(crate) fn cap(&mut self, max: u64) {
        if self.cwnd >= max {
            self.cwnd = max;
            self.avoidance_credit = 0;
        }
    }

    /// Halves the window for a congestion signal about a packet sent with `sent_stamp`, unless
    /// that packet belongs to the episode already answered; true if it reduced.
    pub(crate) fn congestion_signal(&mut self, sent_stamp: u32, next_stamp: u32) -> bool {
        if let Some(r) = self.recovery_stamp {
            if stamp_at_or_before(sent_stamp, r) {
                return false;
            }
        }
        self.reduce(next_stamp);
        self.cwnd = self.ssthresh;
        true
    }

    fn reduce(&mut self, next_stamp: u32) {
        self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        self.avoidance_credit = 0;
        self.recovery_stamp = Some(next_stamp);
    }
}

impl Controller for WindowController {
    fn on_ack(&mut self, acked: u64, app_limited: bool) {
        if acked > 0 {
            self.acked_any = true;
        }
        if app_limited || acked == 0 {
            return;
        }
        if self.cwnd < self.ssthresh {
            let room = self.ssthresh - self.cwnd;
            let grow = acked.min(room);
            self.cwnd += grow;
            self.avoidance_credit += acked - grow;
        } else {
            self.avoidance_credit += acked;
        }
        while self.cwnd >= self.ssthresh && self.avoidance_credit >= self.cwnd {
            self.avoidance_credit -= self.cwnd;
            self.cwnd += self.mss;
        }
        if self.cwnd >= self.ssthresh && self.avoidance_credit > 0 {
            // Partial credit is kept for the next acknowledgement.
        }
    }

    fn on_loss(&mut self, sent_stamp: u32, next_stamp: u32) {
        self.congestion_signal(sent_stamp, next_stamp);
    }

    fn on_rtt_sample(&mut self, sample: Duration, min_rtt: Duration, sent_stamp: u32, next: u32) {
        if let Some(ms) = self.rtt_backoff_ms {
            let limit = Duration::from_millis(u64::from(ms));
            if sample > min_rtt + limit && self.congestion_signal(sent_stamp, next) {
                self.delay_reductions += 1;
            }
        }
    }

    fn on_unresponsive(&mut self, next_stamp: u32) {
        self.reduce(next_stamp);
        self.cwnd = self.initial;
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn pacing_rate(&self, srtt: Duration) -> f64 {
        let secs = srtt.as_secs_f64();
        if secs <= 0.0 || (self.unpaced_first_flight && !self.acked_any) {
            return f64::INFINITY;
        }
        let gain = match self.pacing_gain {
            Some(g) => g,
            None if self.in_slow_start() => SLOW_START_GAIN,
            None => AVOIDANCE_GAIN,
        };
        gain * self.cwnd as f64 / secs
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_avoidance_by_byte_counting() {
        let mut c = WindowController::new(1000, 10_000);
        c.on_ack(10_000, false);
        assert_eq!(
            c.window(),
            20_000,
            "slow start grows by the bytes acknowledged"
        );
        c.on_loss(5, 6);
        assert_eq!(c.window(), 10_000);
        assert!(!c.in_slow_start());
        c.on_ack(9_999, false);
        assert_eq!(c.window(), 10_000);
        c.on_ack(1, false);
        assert_eq!(
            c.window(),
            11_000,
            "one MSS per window of bytes acknowledged"
        );
    }

    #[test]
    fn one_reduction_per_episode() {
        let mut c = WindowController::new(1000, 40_000);
        c.on_loss(10, 11);
        c.on_loss(9, 12);
        c.on_loss(11, 12);
        assert_eq!(c.window(), 20_000);
        c.on_loss(12, 13);
        assert_eq!(
            c.window(),
            10_000,
            "a packet sent after the reduction starts a new episode"
        );
    }

    #[test]
    fn app_limited_does_not_grow_and_collapse_returns_to_initial() {
        let mut c = WindowController::new(1000, 4000);
        c.on_ack(50_000, true);
        assert_eq!(c.window(), 4000);
        c.on_ack(50_000, false);
        c.on_unresponsive(1);
        assert_eq!(c.window(), 4000);
        assert_eq!(c.ssthresh(), 27_000);
    }

    #[test]
    fn rtt_backoff_halves_once_per_episode_and_only_when_enabled() {
        let ms = Duration::from_millis;
        let mut off = WindowController::new(1000, 40_000);
        off.on_rtt_sample(ms(5000), ms(350), 10, 11);
        assert_eq!(off.window(), 40_000, "off by default");
        let cfg = Config {
            window_rtt_backoff_ms: Some(1000),
            initial_window: crate::config::InitialWindow::Packets(40),
            ..Config::default()
        };
        let mut c = WindowController::from_config(&cfg, 1000);
        c.on_rtt_sample(ms(1300), ms(350), 10, 11);
        assert_eq!(c.window(), 40_000, "within the allowance");
        c.on_rtt_sample(ms(1400), ms(350), 10, 11);
        assert_eq!(c.window(), 20_000);
        c.on_rtt_sample(ms(3000), ms(350), 11, 12);
        assert_eq!(c.window(), 20_000, "same episode");
        c.on_rtt_sample(ms(3000), ms(350), 12, 13);
        assert_eq!(c.window(), 10_000);
        assert_eq!(c.delay_reductions(), 2);
    }

    #[test]
    fn first_flight_unpaced_only_with_the_option() {
        let srtt = Duration::from_millis(600);
        let paced = WindowController::new(1000, 4000);
        assert!(paced.pacing_rate(srtt).is_finite());
        let cfg = Config {
            unpaced_first_flight: true,
            ..Config::default()
        };
        let mut c = WindowController::from_config(&cfg, 1000);
        assert!(c.pacing_rate(srtt).is_infinite());
        c.on_ack(1000, false);
        assert!(
            c.pacing_rate(srtt).is_finite(),
            "paced after the first report"
        );
    }

    #[test]
    fn one_pacing_gain_for_every_phase_only_with_the_option() {
        let srtt = Duration::from_secs(1);
        let mut default = WindowController::new(1000, 4000);
        assert_eq!(
            default.pacing_rate(srtt),
            2.0 * 4000.0,
            "slow start: gain 2"
        );
        let cfg = Config {
            pacing_gain: Some(1.0),
            ..Config::default()
        };
        let mut one = WindowController::from_config(&cfg, 1000);
        let iw = one.cwnd as f64;
        assert_eq!(one.pacing_rate(srtt), iw, "the window over one RTT");
        default.on_loss(1, 2);
        one.on_loss(1, 2);
        assert_eq!(default.pacing_rate(srtt), 1.25 * default.cwnd as f64);
        assert_eq!(one.pacing_rate(srtt), one.cwnd as f64);
    }

    #[test]
    fn never_below_two_segments_threshold() {
        let mut c = WindowController::new(1000, 1000);
        c.on_loss(1, 2);
        assert_eq!(c.ssthresh(), 2000);
    }
}
