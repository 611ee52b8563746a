//! When POLLs fall due (spec §6.6): the regular interval (srtt / polls_per_rtt), small-window
//! mode, backoff after unanswered POLLs, zero-window probes and keepalives, and what sending a
//! POLL records (the window collapses once per silence when POLLs go unanswered).

use super::{Connection, Role, SendEnd};
use crate::config::Config;
use crate::congestion::Controller;
use crate::stats::Counter;
use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// Why a POLL goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PollKind {
    Regular,
    Keepalive,
}

/// `ms` milliseconds in nanoseconds (as `Config::ms` gives them as a `Duration`).
fn ms_ns(ms: u32) -> u64 {
    u64::from(ms) * 1_000_000
}

/// Upper bound on POLL send times remembered while waiting for a STAT.
const MAX_TRACKED_POLLS: usize = 64;

/// Send times of the POLLs no STAT has answered yet, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct UnansweredPolls {
    times: VecDeque<Instant>,
    /// `times`' first entry, kept beside the queue: the engine asks whether the oldest is late
    /// for every datagram of a busy connection, and with many connections served in turn the
    /// queue's own buffer is a second cache miss away.
    oldest: Instant,
    /// Whether `times` is in ascending order (always, unless the driver's clock went back): the
    /// POLLs an answer time old are then a prefix, found by binary search rather than by
    /// testing every time (the engine asks several times per datagram).
    ascending: bool,
}

impl UnansweredPolls {
    fn push(&mut self, now: Instant) {
        if self.times.len() >= MAX_TRACKED_POLLS {
            self.times.pop_front();
        }
        if self.times.is_empty() {
            self.ascending = true;
        } else if self.times.back().is_some_and(|&last| last > now) {
            self.ascending = false;
        }
        self.times.push_back(now);
        self.oldest = self.times.front().copied().unwrap_or(now);
    }

    /// How many were sent at least `answer_ns` nanoseconds before `now`.
    fn older_than(&self, now: Instant, answer_ns: u64) -> u32 {
        let now = now.as_nanos();
        let old = |t: &Instant| now.saturating_sub(t.as_nanos()) >= answer_ns;
        // `old` holds for earlier times if it holds for a later one: in ascending order the old
        // times are a prefix.
        let n = if self.ascending {
            // Mostly none is old yet: the oldest answers that.
            if self.times.is_empty() || !old(&self.oldest) {
                return 0;
            }
            self.times.partition_point(old)
        } else {
            self.times.iter().filter(|t| old(t)).count()
        };
        n as u32
    }
}

impl Connection {
    /// The current POLL interval: regular, or small-window mode's, backed off after misses.
    pub(super) fn poll_interval(&self, now: Instant) -> Duration {
        Duration::from_nanos(self.poll_interval_ns(now))
    }

    /// [`Self::poll_interval`] in nanoseconds (asked for every POLL deadline: whole numbers of
    /// nanoseconds throughout, as `Duration`'s arithmetic would give them, without its
    /// normalisation to seconds and nanoseconds at every step).
    pub(super) fn poll_interval_ns(&self, now: Instant) -> u64 {
        let max = ms_ns(self.config.max_poll_interval_ms);
        let base = if self.small_window() {
            // Burst-end POLLs do the work; the timer only recovers a lost POLL or STAT.
            (2 * self.rtt.srtt_ns() + 4 * self.rtt.rttvar_ns())
                .clamp(ms_ns(self.config.min_poll_interval_ms), max)
        } else {
            self.regular_poll_ns
        };
        let misses = self.missed_polls(now);
        if misses >= self.config.poll_miss_threshold {
            let shift = (misses - self.config.poll_miss_threshold + 1).min(16);
            base.saturating_mul(1u64 << shift).min(max)
        } else {
            base
        }
    }

    /// Recomputes `regular_poll_ns`, the POLL interval outside small-window mode and before any
    /// backoff: srtt / polls_per_rtt, clamped to the configured bounds (the engine asks for it
    /// several times per datagram; it changes only with srtt). Called whenever srtt changes.
    pub(super) fn refresh_regular_poll(&mut self) {
        let interval = (self.rtt.srtt() / self.config.polls_per_rtt).clamp(
            Config::ms(self.config.min_poll_interval_ms),
            Config::ms(self.config.max_poll_interval_ms),
        );
        self.regular_poll_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    }

    /// How long a STAT may take to answer a POLL: srtt + 4·rttvar (at least the minimum POLL
    /// interval).
    pub(super) fn answer_time(&self) -> Duration {
        Duration::from_nanos(self.answer_ns())
    }

    /// [`Self::answer_time`] in nanoseconds.
    fn answer_ns(&self) -> u64 {
        (self.rtt.srtt_ns() + 4 * self.rtt.rttvar_ns()).max(ms_ns(self.config.min_poll_interval_ms))
    }

    /// POLLs sent more than an answer time ago with no STAT since.
    pub(super) fn missed_polls(&self, now: Instant) -> u32 {
        let Some(polls) = self.unanswered_polls.as_deref() else {
            return 0;
        };
        polls.older_than(now, self.answer_ns())
    }
    /// Whether the timer-driven POLL machinery is running (something is waiting for a report).
    pub(super) fn poll_active(&self) -> bool {
        self.send.has_outstanding()
            || matches!(self.send_end, SendEnd::Sent(_))
            || (self.send.unsent() > 0 && self.rwnd_blocked())
    }

    /// When the next POLL falls due, and what kind.
    pub(super) fn next_poll(&self, now: Instant) -> Option<(Instant, PollKind)> {
        if self.role == Role::Initiator && !self.confirmed {
            return None; // the BGN timer covers the handshake
        }
        if self.poll_active() {
            if self.rwnd_blocked() && !self.send.has_outstanding() {
                // Zero window with nothing in flight: probe at once, then after 2, 4, 8 ... srtt
                // (the receiver also announces an opened window by itself).
                if self.zero_window_probes == 0 {
                    return Some((self.poll_anchor.min(now), PollKind::Regular));
                }
                let shift = self.zero_window_probes.min(10);
                let wait = (self.rtt.srtt() * (1u32 << shift)).clamp(
                    Config::ms(self.config.min_poll_interval_ms),
                    Config::ms(self.config.max_poll_interval_ms),
                );
                return Some((self.poll_anchor + wait, PollKind::Regular));
            }
            if self.rwnd_blocked() && !self.polled_since_report {
                return Some((self.poll_anchor.min(now), PollKind::Regular));
            }
            return Some((
                Instant::from_nanos(
                    self.poll_anchor
                        .as_nanos()
                        .saturating_add(self.poll_interval_ns(now)),
                ),
                PollKind::Regular,
            ));
        }
        if self.unanswered_polls.is_some() {
            // Nothing outstanding: repeat an unanswered keepalive only once its answer is late.
            let retry = self.poll_interval(now).max(self.answer_time());
            return Some((self.poll_anchor + retry, PollKind::Keepalive));
        }
        let idle_from = self.last_heard.max(self.poll_anchor);
        Some((
            idle_from + Config::ms(self.config.keepalive_interval_ms),
            PollKind::Keepalive,
        ))
    }

    /// When a timer POLL will actually leave: a POLL that falls due while an SD is about to be
    /// released by the pacer (within one timer tick) waits for that SD and rides on it. `poll` is
    /// [`Self::next_poll`] at `now`, and `sd_time` [`Self::next_sd_time`] if the caller has it
    /// (asked here otherwise, and only for a POLL already due).
    pub(super) fn effective_poll_time(
        &mut self,
        now: Instant,
        poll: Option<(Instant, PollKind)>,
        sd_time: Option<Option<Instant>>,
    ) -> Option<Instant> {
        let (t, _) = poll?;
        if t > now {
            return Some(t);
        }
        let granularity = Duration::from_micros(u64::from(self.config.pacing_granularity_us));
        let sd_time = match sd_time {
            Some(x) => x,
            None => self.next_sd_time(now),
        };
        match sd_time {
            Some(x) if now < t + granularity && x <= now + granularity => {
                Some(x.min(t + granularity))
            }
            _ => Some(t),
        }
    }

    pub(super) fn note_poll_sent(&mut self, now: Instant, stamp: u32) {
        if self.rwnd_blocked() && !self.send.has_outstanding() {
            self.zero_window_probes += 1;
        }
        self.last_poll_stamp = Some(stamp);
        self.poll_anchor = now;
        self.polled_since_report = true;
        self.sds_since_poll = 0;
        self.unanswered_polls
            .get_or_insert_with(Box::default)
            .push(now);
        if self.missed_polls(now) >= self.config.poll_miss_threshold && !self.collapsed_this_silence
        {
            self.collapsed_this_silence = true;
            self.controller.on_unresponsive(stamp);
            self.stats.count(Counter::WindowCollapses, 1);
            self.update_pacing(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count by binary search equals the count by testing every time, in order and after
    /// the clock went back (where the search cannot be used), and across the 64-entry limit.
    #[test]
    fn unanswered_polls_are_counted_as_by_testing_each() {
        let ms = |n: u64| Instant::from_nanos(n * 1_000_000);
        let brute = |p: &UnansweredPolls, now: Instant, answer: Duration| {
            p.times
                .iter()
                .filter(|&&t| now.saturating_duration_since(t) >= answer)
                .count() as u32
        };
        let answer = Duration::from_millis(25);
        let mut in_order = UnansweredPolls::default();
        for i in 0..80 {
            in_order.push(ms(10 * i));
        }
        assert!(in_order.ascending);
        assert_eq!(in_order.times.len(), MAX_TRACKED_POLLS);
        assert_eq!(
            Some(&in_order.oldest),
            in_order.times.front(),
            "kept past the limit"
        );
        let mut went_back = UnansweredPolls::default();
        for t in [100, 120, 90, 130, 60] {
            went_back.push(ms(t));
        }
        assert!(!went_back.ascending);
        for p in [&in_order, &went_back] {
            for now in (0..900).step_by(7) {
                assert_eq!(
                    p.older_than(ms(now), answer.as_nanos() as u64),
                    brute(p, ms(now), answer),
                    "at {now} ms"
                );
            }
        }
        assert_eq!(in_order.older_than(ms(800), 25_000_000), 64 - 2);
    }
}
