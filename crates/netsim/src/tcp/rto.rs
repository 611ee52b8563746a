//! The retransmission timer of RFC 6298 on a clock of configurable granularity: RTT samples read
//! in whole ticks, `RTO = srtt + max(G, 4·rttvar)` bounded below and above, exponential backoff,
//! and Karn's rule (the backed-off value stays until a sample from a segment sent only once).

use crate::sim::{Time, SEC as SEC_NS};

/// Most doublings of the RTO (2^16 is far beyond any sensible maximum RTO anyway).
const MAX_BACKOFF: u32 = 16;

/// Round-trip estimate and retransmission timeout of one connection.
#[derive(Debug, Clone)]
pub struct RtoEstimator {
    granularity: Time,
    min_rto: Time,
    max_rto: Time,
    initial_rto: Time,
    srtt: Option<Time>,
    rttvar: Time,
    /// Smoothed RTT of exact readings, for window policies that need the true RTT.
    exact_srtt: Option<Time>,
    backoff: u32,
    /// Count samples as BSD and ns-2 did: at least one tick.
    coarse: bool,
    /// ns-2's timer of 1997 (`TcpConfig::ns2_timer`), with its fixed-point state: the smoothed
    /// RTT in eighths of a tick (0: none) and four times the mean deviation in quarters of a
    /// tick (`t_srtt_`, `t_rttvar_`).
    ns2: bool,
    ns2_srtt8: u64,
    ns2_rttvar4: u64,
}

/// ns-2's largest backoff multiplier (`rtt_backoff`: doubling stops at 64).
const NS2_MAX_BACKOFF: u32 = 6;
/// ns-2 forgets the smoothed RTT once the backoff multiplier exceeds 8 (2^3).
const NS2_CLOBBER_BACKOFF: u32 = 3;

impl RtoEstimator {
    /// An estimator with clock granularity `granularity` (0 for an exact clock).
    pub fn new(granularity: Time, min_rto: Time, max_rto: Time, initial_rto: Time) -> Self {
        RtoEstimator {
            granularity,
            min_rto,
            max_rto: max_rto.max(min_rto),
            initial_rto,
            srtt: None,
            rttvar: 0,
            exact_srtt: None,
            backoff: 0,
            coarse: false,
            ns2: false,
            ns2_srtt8: 0,
            ns2_rttvar4: 0,
        }
    }

    /// ns-2's retransmission timer of 1997 (`tcp.cc` v1.37, `Agent/TCP` with `tcpTick_` the
    /// clock granularity, which must be positive): samples rounded to the nearest tick (at
    /// least one), `RTO = (⌊srtt⌋ + 4·mdev + 1 tick) · backoff` in ns-2's fixed point, at most
    /// the maximum RTO and at least two ticks (no other floor), 3 s + 1 tick before the first
    /// sample, backoff up to 64 (past 8 the smoothed RTT is forgotten), and a timer that fires
    /// exactly one RTO after it is set, not on a clock tick.
    pub fn with_ns2_timer(mut self, ns2: bool) -> Self {
        self.ns2 = ns2 && self.granularity > 0;
        if self.ns2 {
            self.ns2_rttvar4 = 3 * SEC_NS / self.granularity;
        }
        self
    }

    /// The seeds' coarse timer (BSD's slow timer, ns-2's `tcp_tick_`): every RTT sample reads at
    /// least one tick, and [`RtoEstimator::srtt_whole_ticks`] is what a window policy reads.
    pub fn with_coarse_timer(mut self, coarse: bool) -> Self {
        self.coarse = coarse;
        self
    }

    /// The clock reading at `t`, in ns: `t` rounded down to a whole tick.
    pub fn clock(&self, t: Time) -> Time {
        t.checked_div(self.granularity)
            .map_or(t, |ticks| ticks * self.granularity)
    }

    /// The first clock tick at or after `t` (when a timer due at `t` is noticed).
    pub fn next_tick(&self, t: Time) -> Time {
        if self.granularity == 0 {
            t
        } else {
            t.div_ceil(self.granularity)
                .saturating_mul(self.granularity)
        }
    }

    /// Takes an RTT sample for a segment sent at `sent` and acknowledged at `now`, as the clock
    /// reads them, and ends any backoff (Karn: callers only pass segments sent once); ns-2's
    /// timer keeps the backoff, which its caller ends (`reset_backoff`).
    pub fn sample(&mut self, sent: Time, now: Time) {
        let exact = now.saturating_sub(sent);
        self.exact_srtt = Some(match self.exact_srtt {
            None => exact,
            Some(s) => (7 * s + exact) / 8,
        });
        if self.ns2 {
            self.ns2_sample(exact);
            return;
        }
        let mut r = self.clock(now).saturating_sub(self.clock(sent));
        if self.coarse {
            r = r.max(self.granularity);
        }
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.abs_diff(r)) / 4;
                self.srtt = Some((7 * srtt + r) / 8);
            }
        }
        self.backoff = 0;
    }

    /// ns-2's `rtt_update`: the sample in whole ticks, rounded, then Jacobson's integer filters.
    fn ns2_sample(&mut self, exact: Time) {
        let g = self.granularity;
        let ticks = ((exact + g / 2) / g).max(1);
        if self.ns2_srtt8 == 0 {
            self.ns2_srtt8 = ticks << 3;
            self.ns2_rttvar4 = ticks << 1;
        } else {
            let old = self.ns2_srtt8 >> 3;
            // srtt += (m − srtt)/8, i.e. srtt8 += m − ⌊srtt8/8⌋, at least 1.
            self.ns2_srtt8 = (self.ns2_srtt8 + ticks).saturating_sub(old).max(1);
            // rttvar4 += |m − srtt| − ⌊rttvar4/4⌋, at least 1.
            let dev = ticks.abs_diff(old);
            self.ns2_rttvar4 = (self.ns2_rttvar4 + dev)
                .saturating_sub(self.ns2_rttvar4 >> 2)
                .max(1);
        }
        self.srtt = Some(self.ns2_srtt8 * g / 8);
        self.rttvar = self.ns2_rttvar4 * g / 4;
        // rtt_update leaves t_backoff_ alone: the connection ends the backoff once the segment
        // ns-2 marked with rtt_seq_ is acknowledged (`reset_backoff`).
    }

    /// Ends any backoff without a sample (ns-2's Sack1 sets `t_backoff_ = 1` on a partial ACK).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Doubles the timeout after a retransmission timeout.
    pub fn back_off(&mut self) {
        if self.ns2 {
            self.backoff = (self.backoff + 1).min(NS2_MAX_BACKOFF);
            if self.backoff > NS2_CLOBBER_BACKOFF {
                // ns-2 keeps the deviation and restarts the mean from the next sample.
                self.ns2_srtt8 = 0;
                self.srtt = None;
            }
            return;
        }
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// The timeout before backoff.
    pub fn base_rto(&self) -> Time {
        if self.ns2 {
            let ticks = (self.ns2_srtt8 >> 3) + self.ns2_rttvar4 + 1;
            return ticks.saturating_mul(self.granularity);
        }
        match self.srtt {
            None => self.initial_rto,
            Some(srtt) => srtt
                .saturating_add(self.granularity.max(self.rttvar.saturating_mul(4)))
                .clamp(self.min_rto, self.max_rto),
        }
    }

    /// The current timeout, backoff included.
    pub fn rto(&self) -> Time {
        if self.ns2 {
            return self
                .base_rto()
                .saturating_mul(1 << self.backoff)
                .min(self.max_rto)
                .max(2 * self.granularity);
        }
        self.base_rto()
            .saturating_mul(1 << self.backoff)
            .min(self.max_rto)
    }

    /// When a timer started at `now` expires: one RTO later, on the next clock tick.
    pub fn deadline(&self, now: Time) -> Time {
        if self.ns2 {
            return now.saturating_add(self.rto());
        }
        self.next_tick(now.saturating_add(self.rto()))
    }

    /// The smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Time> {
        self.srtt
    }

    /// The smoothed RTT truncated to whole clock ticks, as BSD's and ns-2's integer `srtt` reads
    /// it (`t_srtt_ >> 3` ticks): what a window policy of the seeds' TCP saw.
    pub fn srtt_whole_ticks(&self) -> Option<Time> {
        self.srtt.map(|s| self.clock(s))
    }

    /// The smoothed RTT of exact clock readings (what RTT timestamps would measure).
    pub fn exact_srtt(&self) -> Option<Time> {
        self.exact_srtt
    }

    /// The RTT variation.
    pub fn rttvar(&self) -> Time {
        self.rttvar
    }

    /// How many times the timeout has been doubled since the last valid sample.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{MS, SEC};

    #[test]
    fn exact_clock_follows_rfc6298() {
        let mut r = RtoEstimator::new(0, SEC, 60 * SEC, SEC);
        assert_eq!(r.rto(), SEC);
        r.sample(0, 600 * MS);
        assert_eq!(r.srtt(), Some(600 * MS));
        assert_eq!(r.rttvar(), 300 * MS);
        // 600 + 4·300 ms
        assert_eq!(r.rto(), 1800 * MS);
        r.sample(SEC, SEC + 200 * MS);
        // rttvar = (3·300 + 400)/4 = 325, srtt = (7·600 + 200)/8 = 550
        assert_eq!(r.rttvar(), 325 * MS);
        assert_eq!(r.srtt(), Some(550 * MS));
        assert_eq!(r.rto(), 1850 * MS);
    }

    #[test]
    fn coarse_clock_reads_ticks() {
        let mut r = RtoEstimator::new(500 * MS, SEC, 60 * SEC, SEC);
        // 100 ms that crosses a tick reads 500 ms; the same 100 ms inside a tick reads 0.
        r.sample(450 * MS, 550 * MS);
        assert_eq!(r.srtt(), Some(500 * MS));
        let mut q = RtoEstimator::new(500 * MS, SEC, 60 * SEC, SEC);
        q.sample(100 * MS, 200 * MS);
        assert_eq!(q.srtt(), Some(0));
        // srtt 0, rttvar 0: max(G, 0) = 500 ms, raised to the 1 s minimum.
        assert_eq!(q.rto(), SEC);
        // Timers fire on tick boundaries.
        assert_eq!(q.deadline(1_100 * MS), 2_500 * MS);
        assert_eq!(q.deadline(1_000 * MS), 2_000 * MS);
    }

    #[test]
    fn coarse_timer_reads_at_least_one_tick_and_whole_ticks() {
        // 100 ms inside one 500 ms tick: 0 on the plain tick clock, one tick on the seeds' timer.
        let mut fine = RtoEstimator::new(500 * MS, SEC, 60 * SEC, SEC);
        fine.sample(100 * MS, 200 * MS);
        assert_eq!(fine.srtt_whole_ticks(), Some(0));
        let mut seeds = RtoEstimator::new(500 * MS, SEC, 60 * SEC, SEC).with_coarse_timer(true);
        seeds.sample(100 * MS, 200 * MS);
        assert_eq!(seeds.srtt_whole_ticks(), Some(500 * MS));
        // A 600 ms RTT crossing two ticks reads 1 s; the smoothed 562.5 ms reads one whole tick.
        seeds.sample(SEC + 400 * MS, 2 * SEC);
        assert_eq!(seeds.srtt(), Some(562_500_000));
        assert_eq!(seeds.srtt_whole_ticks(), Some(500 * MS));
        // Both a 100 ms and a 300 ms connection read the same 500 ms: CR cannot tell them apart.
        let mut short = RtoEstimator::new(500 * MS, SEC, 60 * SEC, SEC).with_coarse_timer(true);
        let mut long = RtoEstimator::new(500 * MS, SEC, 60 * SEC, SEC).with_coarse_timer(true);
        for i in 0..20u64 {
            let t = i * 700 * MS;
            short.sample(t, t + 100 * MS);
            long.sample(t, t + 300 * MS);
        }
        assert_eq!(short.srtt_whole_ticks(), long.srtt_whole_ticks());
        assert_ne!(short.exact_srtt(), long.exact_srtt());
    }

    #[test]
    fn backoff_doubles_until_a_sample() {
        let mut r = RtoEstimator::new(0, SEC, 10 * SEC, SEC);
        r.back_off();
        assert_eq!(r.rto(), 2 * SEC);
        r.back_off();
        r.back_off();
        assert_eq!(r.rto(), 8 * SEC);
        r.back_off();
        assert_eq!(r.rto(), 10 * SEC, "capped at max_rto");
        assert_eq!(r.backoff(), 4);
        r.sample(0, 100 * MS);
        assert_eq!(r.backoff(), 0);
        assert_eq!(r.rto(), SEC);
    }

    #[test]
    fn ns2_timer_follows_ns2_of_1997() {
        // 500 ms ticks: 3 s + 1 tick before a sample; a 600 ms sample rounds to one tick,
        // srtt 1 tick, 4·mdev 2 ticks, RTO (1 + 2 + 1) ticks = 2 s, firing exactly.
        let mut r = RtoEstimator::new(500 * MS, SEC, 64 * SEC, SEC).with_ns2_timer(true);
        assert_eq!(r.rto(), 3500 * MS);
        r.sample(0, 600 * MS);
        assert_eq!(r.srtt(), Some(500 * MS));
        assert_eq!(r.rto(), 2 * SEC);
        assert_eq!(r.deadline(1234 * MS), 3234 * MS);
        // Backoff doubles to 64 at most; past 8 the mean is forgotten and the next sample
        // starts it again.
        for _ in 0..3 {
            r.back_off();
        }
        assert_eq!(r.rto(), 16 * SEC);
        assert!(r.srtt().is_some());
        r.back_off();
        assert_eq!(r.srtt(), None);
        for _ in 0..4 {
            r.back_off();
        }
        assert_eq!(r.backoff(), 6);
        // The next sample starts the mean again; the backoff stays (rtt_update leaves
        // t_backoff_ alone) until the connection ends it.
        r.sample(0, SEC);
        assert_eq!((r.srtt(), r.backoff()), (Some(SEC), 6));
        r.reset_backoff();
        assert_eq!(r.backoff(), 0);

        // 10 ms ticks: no 1 s floor, only two ticks.
        let mut r = RtoEstimator::new(10 * MS, SEC, 64 * SEC, SEC).with_ns2_timer(true);
        assert_eq!(r.rto(), 3010 * MS);
        r.sample(0, 600 * MS);
        assert_eq!(r.rto(), 1810 * MS);
        r.sample(SEC, SEC + 600 * MS);
        // Same sample: 4·mdev decays by a quarter, from 120 to 90 ticks.
        assert_eq!(r.rto(), 1510 * MS);
        let mut r = RtoEstimator::new(10 * MS, SEC, 64 * SEC, SEC).with_ns2_timer(true);
        r.sample(0, MS);
        assert_eq!(r.rto(), 40 * MS);
        for _ in 0..20 {
            r.sample(0, MS);
        }
        // ns-2's integer filter keeps 4·mdev at 2 quarter-ticks (2 − ⌊2/4⌋ = 2): 4 ticks.
        assert_eq!(r.rto(), 40 * MS);
    }
}
