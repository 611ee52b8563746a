//! When POLLs fall due (spec §6.6): the regular interval (srtt / polls_per_rtt), small-window
//! mode, backoff after unanswered POLLs, zero-window probes and keepalives, and what sending a
//! POLL records (the window collapses once per silence when POLLs go unanswered).

use super::{Connection, Role, SendEnd};
use crate::config::Config;
use crate::congestion::Controller;
use crate::stats::Counter;
use crate::time::Instant;
use std::time::Duration;

/// Why a POLL goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PollKind {
    Regular,
    Keepalive,
}

/// Upper bound on POLL send times remembered while waiting for a STAT.
const MAX_TRACKED_POLLS: usize = 64;

impl Connection {
    /// The current POLL interval: regular, or small-window mode's, backed off after misses.
    pub(super) fn poll_interval(&self, now: Instant) -> Duration {
        let max = Config::ms(self.config.max_poll_interval_ms);
        let base = if self.small_window() {
            // Burst-end POLLs do the work; the timer only recovers a lost POLL or STAT.
            (2 * self.rtt.srtt() + 4 * self.rtt.rttvar())
                .clamp(Config::ms(self.config.min_poll_interval_ms), max)
        } else {
            self.regular_poll_interval()
        };
        let misses = self.missed_polls(now);
        if misses >= self.config.poll_miss_threshold {
            let shift = (misses - self.config.poll_miss_threshold + 1).min(16);
            (base * (1u32 << shift)).min(max)
        } else {
            base
        }
    }

    /// The POLL interval outside small-window mode and before any backoff: srtt / polls_per_rtt,
    /// clamped to the configured bounds. Kept in `regular_poll_ns` (the engine asks for it several
    /// times per datagram; it changes only with srtt).
    pub(super) fn regular_poll_interval(&self) -> Duration {
        Duration::from_nanos(self.regular_poll_ns)
    }

    /// Recomputes `regular_poll_ns`; called whenever srtt changes.
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
        (self.rtt.srtt() + 4 * self.rtt.rttvar()).max(Config::ms(self.config.min_poll_interval_ms))
    }

    /// POLLs sent more than an answer time ago with no STAT since.
    pub(super) fn missed_polls(&self, now: Instant) -> u32 {
        let Some(polls) = self.unanswered_polls.as_deref() else {
            return 0;
        };
        let answer_time = self.answer_time();
        polls
            .iter()
            .filter(|&&t| now.saturating_duration_since(t) >= answer_time)
            .count() as u32
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
                self.poll_anchor + self.poll_interval(now),
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
    /// released by the pacer (within one timer tick) waits for that SD and rides on it.
    pub(super) fn effective_poll_time(&mut self, now: Instant) -> Option<Instant> {
        let (t, _) = self.next_poll(now)?;
        if t > now {
            return Some(t);
        }
        let granularity = Duration::from_micros(u64::from(self.config.pacing_granularity_us));
        match self.next_sd_time(now) {
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
        let polls = self.unanswered_polls.get_or_insert_with(Box::default);
        if polls.len() >= MAX_TRACKED_POLLS {
            polls.pop_front();
        }
        polls.push_back(now);
        if self.missed_polls(now) >= self.config.poll_miss_threshold && !self.collapsed_this_silence
        {
            self.collapsed_this_silence = true;
            self.controller.on_unresponsive(stamp);
            self.stats.count(Counter::WindowCollapses, 1);
            self.update_pacing(now);
        }
    }
}
