//! Which SD the windows let go next (spec §6.5, §7.2a): a retransmission first, else new data,
//! within cwnd plus the report allowance, the peer's receive window and the sequence span; and
//! when the pacer releases it.

use super::{Connection, SendEnd};
use crate::config::CongestionMode;
use crate::congestion::Controller;
use crate::recv::MAX_SEQ_SPAN;
use crate::send::sd_charge;
use crate::time::Instant;
use crate::wire::HEADER_LEN;

impl Connection {
    /// Bytes the sender may have in flight: cwnd, plus, for the window controller outside
    /// small-window mode, the report allowance `cwnd · T / srtt` (at most cwnd), where T is the
    /// POLL interval (spec §7.2a). A STAT reports only what was sent before its POLL, so just
    /// before a report arrives the sender still counts a whole POLL interval of data that has
    /// reached the receiver; without the allowance the sending rate would be cwnd / (srtt + T)
    /// instead of TCP's cwnd / srtt. Without `report_allowance` (the seeds' rule), cwnd alone.
    pub(super) fn send_window(&self) -> u64 {
        let cwnd = self.controller.window();
        // Before the first RTT sample no report has come back: the first flight is the initial
        // window exactly.
        if !matches!(self.config.congestion, CongestionMode::Window)
            || !self.config.report_allowance
            || self.small_window()
            || !self.rtt.has_sample()
        {
            return cwnd;
        }
        // Whole microseconds, as `Duration::as_micros` gives them, from the nanoseconds kept.
        let srtt = (self.rtt.srtt_ns() / 1_000).max(1);
        let interval = (self.regular_poll_ns / 1_000).min(srtt);
        // A 64-bit division when the product fits (always, in practice): the 128-bit one is a
        // library call that showed in the engine's profile. Same result either way.
        let allowance = match cwnd.checked_mul(interval) {
            Some(p) => p / srtt,
            None => (u128::from(cwnd) * u128::from(interval) / u128::from(srtt)) as u64,
        };
        cwnd.saturating_add(allowance)
    }

    pub(super) fn small_window(&self) -> bool {
        matches!(self.config.congestion, CongestionMode::Window)
            && self.controller.window()
                < u64::from(self.config.small_window_packets) * u64::from(self.mss)
    }

    pub(super) fn rwnd_blocked(&self) -> bool {
        let len = self.send.next_new_len(usize::from(self.mss));
        len > 0 && self.send.outstanding_charge() + sd_charge(len) > self.peer_rwnd
    }

    /// The next SD the windows let go, as (the sequence number of a retransmission, or None for new
    /// data; payload length).
    pub(super) fn sd_candidate(&mut self) -> Option<(Option<u64>, usize)> {
        let cwnd = self.send_window();
        if let (Some(len), Some(head)) = (self.send.next_retx_len(), self.send.next_retx_seq()) {
            let fits_cwnd =
                |len: usize, inflight: u64| inflight == 0 || inflight + len as u64 <= cwnd;
            if self.send.outstanding_charge() <= self.peer_rwnd {
                return fits_cwnd(len, self.send.in_flight()).then_some((Some(head), len));
            }
            // A receiver whose window shrank below what is outstanding would drop copies; only
            // the SD at its cumulative point (which it always takes if its reader has room) goes
            // then, wherever it waits in the queue.
            let una = self.send.una();
            let len = self.send.lost_len(una)?;
            return fits_cwnd(len, self.send.in_flight()).then_some((Some(una), len));
        }
        if !matches!(self.send_end, SendEnd::Open | SendEnd::Requested) {
            return None;
        }
        let len = self.send.next_new_len(usize::from(self.mss));
        if len == 0 {
            return None;
        }
        let window_ok = self.send.in_flight() == 0 || self.send.in_flight() + len as u64 <= cwnd;
        let rwnd_ok = self.send.outstanding_charge() + sd_charge(len) <= self.peer_rwnd;
        let span_ok = self.send.outstanding_count() < MAX_SEQ_SPAN;
        (window_ok && rwnd_ok && span_ok).then_some((None, len))
    }

    /// When the next SD may leave if the window allows one now (pacing), else `None`.
    pub(super) fn next_sd_time(&mut self, now: Instant) -> Option<Instant> {
        let (_, len) = self.sd_candidate()?;
        Some(self.pacer.next_send_time(now, len + HEADER_LEN))
    }
}
