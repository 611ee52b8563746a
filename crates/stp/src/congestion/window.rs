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

/// RTT samples whose smallest is tested against the smallest RTT seen (HyStart's round, counted
/// in samples: about one RTT at three POLLs per RTT, longer where the minimum POLL interval binds).
const DELAY_EXIT_SAMPLES: u32 = 3;
/// No delay exit below this window, in full SDs (Linux's `hystart_low_window`): small windows
/// leave slow start quickly enough on a loss.
const DELAY_EXIT_LOW_WINDOW: u64 = 16;
/// Bounds of the delay threshold, min RTT / 8 (RFC 9406 §4.2, `MIN_RTT_THRESH`/`MAX_RTT_THRESH`).
const DELAY_EXIT_MIN: Duration = Duration::from_millis(4);
const DELAY_EXIT_MAX: Duration = Duration::from_millis(16);

/// The delay test of slow start (spec §7.2c): a group of [`DELAY_EXIT_SAMPLES`] consecutive RTT
/// samples all at least the smallest RTT seen plus clamp(min / 8, 4 ms, 16 ms) (the group's
/// smallest sample above the threshold). One sample may be delayed by anything (a scheduler, a
/// POLL queued behind data); a whole group above it is the queue growing. One byte (an idle
/// connection's budget is 1 KiB): bit 7 enabled, bit 6 a sample of this group was below the
/// threshold, bits 0-5 the samples of this group so far.
#[derive(Debug, Clone, Copy, Default)]
struct DelayExit(u8);

impl DelayExit {
    const ENABLED: u8 = 0x80;
    const BELOW: u8 = 0x40;
    const COUNT: u8 = 0x3f;

    fn new(enabled: bool) -> Self {
        DelayExit(if enabled { Self::ENABLED } else { 0 })
    }

    fn enabled(self) -> bool {
        self.0 & Self::ENABLED != 0
    }

    /// Adds a sample; true when a full group stayed above the threshold.
    fn sample(&mut self, sample: Duration, min_rtt: Duration) -> bool {
        let threshold = (min_rtt / 8).clamp(DELAY_EXIT_MIN, DELAY_EXIT_MAX);
        if sample < min_rtt + threshold {
            self.0 |= Self::BELOW;
        }
        let count = (self.0 & Self::COUNT) + 1;
        if u32::from(count) < DELAY_EXIT_SAMPLES {
            self.0 = (self.0 & !Self::COUNT) | count;
            return false;
        }
        let above = self.0 & Self::BELOW == 0;
        self.0 &= Self::ENABLED;
        above
    }
}

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
    /// The delay test of slow start (off unless the configuration enables it).
    delay_exit: DelayExit,
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
            delay_exit: DelayExit::default(),
        }
    }

    /// The controller a connection with `config` and SDs of `mss` payload bytes uses: the
    /// initial window and the two options of the configuration.
    pub fn from_config(config: &Config, mss: u64) -> Self {
        WindowController {
            rtt_backoff_ms: config.window_rtt_backoff_ms,
            unpaced_first_flight: config.unpaced_first_flight,
            pacing_gain: config.pacing_gain,
            delay_exit: DelayExit::new(config.slow_start_delay_exit),
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
        if self.delay_exit.enabled()
            && self.cwnd < self.ssthresh
            && self.delay_exit.sample(sample, min_rtt)
            && self.cwnd >= DELAY_EXIT_LOW_WINDOW * self.mss
        {
            // Leave slow start where it stands: the queue already holds the excess.
            self.ssthresh = self.cwnd;
            self.avoidance_credit = 0;
        }
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

    fn with_delay_exit(initial_packets: u32) -> WindowController {
        let cfg = Config {
            slow_start_delay_exit: true,
            initial_window: crate::config::InitialWindow::Packets(initial_packets),
            ..Config::default()
        };
        WindowController::from_config(&cfg, 1000)
    }

    #[test]
    fn delay_exit_leaves_slow_start_when_a_group_of_samples_rises() {
        let ms = Duration::from_millis;
        let min = ms(100);
        let mut c = with_delay_exit(20);
        for s in [100, 103, 101] {
            c.on_rtt_sample(ms(s), min, 1, 2);
        }
        assert!(c.in_slow_start(), "within min + 12.5 ms");
        c.on_ack(20_000, false);
        assert_eq!(c.window(), 40_000);
        // One late sample (a POLL delayed by anything) in a group is not a queue.
        for s in [100, 400, 100] {
            c.on_rtt_sample(ms(s), min, 2, 3);
        }
        assert!(c.in_slow_start(), "the group's smallest sample decides");
        for s in [115, 120, 113] {
            c.on_rtt_sample(ms(s), min, 3, 4);
        }
        assert!(!c.in_slow_start(), "113 ms ≥ 100 + 12.5 ms");
        assert_eq!(c.window(), 40_000, "the window is kept, not reduced");
        assert_eq!(c.ssthresh(), 40_000);
        c.on_ack(40_000, false);
        assert_eq!(c.window(), 41_000, "congestion avoidance from here");
    }

    #[test]
    fn delay_exit_is_off_by_default_and_in_the_thesis_profile() {
        let ms = Duration::from_millis;
        for cfg in [Config::default(), crate::config::Profile::Thesis.config()] {
            let mut c = WindowController::from_config(&cfg, 1000);
            c.on_ack(100_000, false);
            for _ in 0..9 {
                c.on_rtt_sample(ms(900), ms(100), 1, 2);
            }
            assert!(c.in_slow_start());
        }
    }

    #[test]
    fn delay_exit_waits_for_sixteen_segments_and_clamps_its_threshold() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let mut small = with_delay_exit(10);
        for _ in 0..3 {
            small.on_rtt_sample(ms(900), ms(100), 1, 2);
        }
        assert!(small.in_slow_start(), "10 segments: below the low window");
        // A 1 ms path: the threshold is 4 ms, not 125 µs.
        let mut lan = with_delay_exit(16);
        for _ in 0..3 {
            lan.on_rtt_sample(us(4_900), ms(1), 1, 2);
        }
        assert!(lan.in_slow_start(), "4.9 ms < 1 + 4 ms");
        for _ in 0..3 {
            lan.on_rtt_sample(ms(5), ms(1), 2, 3);
        }
        assert!(!lan.in_slow_start());
        // A GEO path: 16 ms, not 75.
        let mut geo = with_delay_exit(16);
        for _ in 0..3 {
            geo.on_rtt_sample(ms(615), ms(600), 1, 2);
        }
        assert!(geo.in_slow_start(), "615 < 600 + 16 ms");
        for _ in 0..3 {
            geo.on_rtt_sample(ms(616), ms(600), 2, 3);
        }
        assert!(!geo.in_slow_start());
    }

    #[test]
    fn never_below_two_segments_threshold() {
        let mut c = WindowController::new(1000, 1000);
        c.on_loss(1, 2);
        assert_eq!(c.ssthresh(), 2000);
    }
}
