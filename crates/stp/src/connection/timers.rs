//! A connection's deadlines in one table, and the two entry points for time: `poll_timeout`
//! (the earliest deadline) and `handle_timeout` (what expired).
//!
//! Two timers are armed by events and act when they expire: `Idle` (the peer is declared dead
//! `dead_timeout_ms` after it was last heard) and `Handshake` (the BGN is repeated with
//! exponential backoff until the BGNAK arrives). Three are derived from the sender's and
//! receiver's state each time `poll_timeout` runs, and only make the driver call
//! `poll_transmit`: `Poll` (the next timer POLL, §6.6), `Pacing` (when the pacer releases the
//! next SD the windows allow) and `Feedback` (when the reverse budget lets waiting feedback go).

use super::builder::{Quiet, FEEDBACK_ESTIMATE};
use super::polling::PollKind;
use super::{Connection, ConnectionError, Role};
use crate::config::Config;
use crate::recv::RecvBuffer;
use crate::time::Instant;
use crate::wire::{Rst, RstReason, HEADER_LEN};

/// The deadlines of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Dead-peer detection: `dead_timeout_ms` after the peer was last heard.
    Idle,
    /// Initiator before the BGNAK: the next BGN retransmission.
    Handshake,
    /// The next timer POLL (as it will actually leave, riding on an imminent SD).
    Poll,
    /// When the pacer releases the next SD the windows let go.
    Pacing,
    /// When the reverse budget lets feedback that travels without data go.
    Feedback,
}

impl Timer {
    const COUNT: usize = 5;
}

/// One instant per [`Timer`], each armed or not.
#[derive(Debug, Clone, Default)]
pub(super) struct TimerTable {
    at: [Instant; Timer::COUNT],
    /// Bit `t as usize` set when timer `t` is armed.
    armed: u8,
}

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer as usize] = at;
        self.armed |= 1 << timer as usize;
    }

    pub fn stop(&mut self, timer: Timer) {
        self.armed &= !(1 << timer as usize);
    }

    /// Arms `timer` at `at`, or stops it for `None`.
    pub fn set_opt(&mut self, timer: Timer, at: Option<Instant>) {
        match at {
            Some(t) => self.set(timer, t),
            None => self.stop(timer),
        }
    }

    pub fn get(&self, timer: Timer) -> Option<Instant> {
        (self.armed & (1 << timer as usize) != 0).then(|| self.at[timer as usize])
    }

    /// Whether `timer` is armed and due at `now`.
    pub fn expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        (0..Timer::COUNT)
            .filter(|&i| self.armed & (1 << i) != 0)
            .map(|i| self.at[i])
            .min()
    }
}

impl Connection {
    /// The peer was heard from at `now`: dead-peer detection starts over.
    pub(super) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.timers
            .set(Timer::Idle, now + Config::ms(self.config.dead_timeout_ms));
    }

    fn feedback_pending(&self) -> bool {
        self.pending.feedback() || self.recv.as_ref().is_some_and(RecvBuffer::has_ustat)
    }

    /// The earliest time at which this connection needs `handle_timeout` or `poll_transmit`.
    pub fn poll_timeout(&mut self, now: Instant) -> Option<Instant> {
        if !self.is_live() {
            return None;
        }
        // The pacer's answer once for both timers (it only brings the bucket up to `now`, which
        // the POLL's time does not read).
        let sd = self.next_sd_time(now);
        let next_poll = self.next_poll(now);
        self.deadline_from(now, sd, next_poll)
    }

    /// [`Self::poll_timeout`] right after a `poll_transmit` at `quiet.at() == now` that sent
    /// nothing, with nothing else done to the connection in between: the window's SD candidate
    /// and the next POLL are taken from what that poll asked instead of asked again (the same
    /// answers; debug builds check).
    pub(crate) fn poll_timeout_quiet(&mut self, now: Instant, quiet: Quiet) -> Option<Instant> {
        if !self.is_live() {
            return None;
        }
        let (candidate, next_poll) = quiet.parts();
        debug_assert_eq!(quiet.at(), now);
        debug_assert_eq!(self.sd_candidate(), candidate);
        let sd = candidate.map(|(_, len)| self.pacer.next_send_time(now, len + HEADER_LEN));
        debug_assert_eq!(self.next_poll(now), next_poll);
        self.deadline_from(now, sd, next_poll)
    }

    /// The earliest deadline, given when the pacer lets the next SD go (`None`: the windows let
    /// none go) and the next POLL, at `now`.
    fn deadline_from(
        &mut self,
        now: Instant,
        sd: Option<Instant>,
        next_poll: Option<(Instant, PollKind)>,
    ) -> Option<Instant> {
        let poll = self.effective_poll_time(now, next_poll, Some(sd));
        self.timers.set_opt(Timer::Poll, poll);
        self.timers.set_opt(Timer::Pacing, sd);
        let feedback = self
            .feedback_pending()
            .then(|| match self.feedback_pacer.as_mut() {
                Some(fp) => fp.next_send_time(now, FEEDBACK_ESTIMATE),
                None => now,
            });
        self.timers.set_opt(Timer::Feedback, feedback);
        self.timers.next()
    }

    /// Handles expired timers: dead-peer detection and BGN retransmission scheduling. Everything
    /// else time-driven happens in `poll_transmit`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.is_live() {
            return;
        }
        if self.timers.expired(Timer::Idle, now) {
            if self.role == Role::Initiator && !self.confirmed {
                self.fail(ConnectionError::HandshakeTimeout(now - self.created));
            } else {
                self.pending.rst = Some(Rst {
                    reason: RstReason::Timeout,
                    detail: 0,
                });
                self.fail(ConnectionError::TimedOut(Config::ms(
                    self.config.dead_timeout_ms,
                )));
            }
            return;
        }
        if self.timers.expired(Timer::Handshake, now) {
            self.pending.bgn = true;
            self.bgn_retries += 1;
            let backoff =
                Config::ms(self.config.handshake_timeout_ms) * (1u32 << self.bgn_retries.min(6));
            self.timers.set(Timer::Handshake, now + backoff);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_yields_the_earliest_armed_deadline() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Idle, Instant::from_nanos(50));
        t.set(Timer::Pacing, Instant::from_nanos(20));
        assert_eq!(t.next(), Some(Instant::from_nanos(20)));
        t.stop(Timer::Pacing);
        assert_eq!(t.next(), Some(Instant::from_nanos(50)));
        assert!(t.expired(Timer::Idle, Instant::from_nanos(50)));
        assert!(!t.expired(Timer::Handshake, Instant::from_nanos(50)));
        t.set_opt(Timer::Idle, None);
        assert_eq!(t.get(Timer::Idle), None);
    }
}
