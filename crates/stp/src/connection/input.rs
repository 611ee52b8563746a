//! Processing a received datagram: the handshake bodies, the sender's side of the reports
//! (STAT, USTAT, ENDAK: acknowledgements, losses, RTT samples) and the receiver's side of data
//! (SDs, POLL, END), then the events they raise (spec §6.7–§6.12).

use super::events::EventKind;
use super::{Connection, ConnectionError, DatagramError, Phase, Role, SendEnd, Timer};
use crate::congestion::Controller;
use crate::recv::{Arrival, MAX_SEQ_SPAN};
use crate::send::SentSd;
use crate::seq::{expand, to_wire};
use crate::stats::Counter;
use crate::time::{wire_at_or_before, wire_elapsed, Instant};
use crate::wire::{
    Bgnak, End, EndAck, Packet, Poll, Rst, RstReason, Stat, Types, Ustat, SUPPORTED_VERSIONS,
    VERSION,
};

impl Connection {
    /// Parses one datagram and processes it if it belongs to this connection (same connection id,
    /// instance and the peer's role). A driver that owns an `Endpoint` lets it demultiplex instead.
    pub fn handle_datagram(&mut self, now: Instant, data: &[u8]) -> Result<(), DatagramError> {
        let p = Packet::parse(data).map_err(DatagramError::Malformed)?;
        let h = &p.header;
        let from_peer = h.from_initiator == (self.role == Role::Responder);
        if h.conn_id != self.conn_id || h.instance != self.instance || !from_peer {
            return Err(DatagramError::NotThisConnection);
        }
        self.handle_packet(now, &p, data.len());
        Ok(())
    }

    /// Processes one parsed datagram addressed to this connection.
    pub fn handle_packet(&mut self, now: Instant, p: &Packet<'_>, datagram_len: usize) {
        let before = self.cumulative_points();
        self.process_packet(now, p, datagram_len);
        self.check_invariants(Some(before));
    }

    fn process_packet(&mut self, now: Instant, p: &Packet<'_>, datagram_len: usize) {
        self.stats
            .record_received(p.header.types, datagram_len, p.payload.len());
        if !self.is_live() {
            // Closed but not yet released: a repeated END means our ENDAK was lost.
            if self.phase == Phase::Closed && p.end.is_some() {
                self.pending.endak = true;
            }
            return;
        }
        self.heard(now);
        if let Some(rst) = p.rst {
            let e = match rst.reason {
                RstReason::Refused => ConnectionError::Refused,
                RstReason::UnsupportedVersion => ConnectionError::VersionMismatch(rst.detail),
                reason => ConnectionError::Reset {
                    reason,
                    detail: rst.detail,
                },
            };
            self.fail(e);
            return;
        }
        match self.role {
            Role::Initiator => {
                if let Some(ack) = p.bgnak {
                    self.on_bgnak(now, &ack);
                }
                if !self.confirmed {
                    // Nothing else can be interpreted before the responder's ISN is known.
                    return;
                }
            }
            Role::Responder => {
                if let Some(bgn) = p.bgn {
                    let bare = p.header.types == Types::BGN;
                    if bare || p.poll.is_some() {
                        self.pending.bgnak = !self.confirmed;
                    }
                    self.bgn_echo = bgn.timestamp;
                } else {
                    self.confirmed = true;
                    self.pending.bgnak = false;
                }
            }
        }
        if let Some(stat) = &p.stat {
            self.on_stat(now, stat);
        }
        if let Some(u) = &p.ustat {
            self.on_ustat(now, u);
        }
        if !p.payload.is_empty() {
            self.on_sd(p.header.seq, p.payload);
        }
        if let Some(poll) = &p.poll {
            self.on_poll(poll);
        }
        if let Some(end) = &p.end {
            self.on_end(end);
        }
        if let Some(ack) = &p.endak {
            self.on_endak(ack);
        }
        self.signal_writable();
        self.check_closed();
    }

    fn on_bgnak(&mut self, now: Instant, ack: &Bgnak) {
        if self.confirmed {
            return;
        }
        if ack.version != VERSION {
            self.pending.rst = Some(Rst {
                reason: RstReason::UnsupportedVersion,
                detail: SUPPORTED_VERSIONS,
            });
            self.fail(ConnectionError::VersionMismatch(u16::from(ack.version)));
            return;
        }
        self.confirmed = true;
        self.phase = Phase::Established;
        self.timers.stop(Timer::Handshake);
        self.pending.bgn = false;
        self.apply_peer_params(ack.rwnd, ack.max_datagram);
        if let Some(sample) = wire_elapsed(now.wire_timestamp(), ack.echo_timestamp) {
            self.rtt.update(sample);
            self.refresh_regular_poll();
        }
        let rb = self.new_recv(u64::from(ack.isn));
        self.recv = Some(rb);
        self.update_pacing(now);
        self.events.push(EventKind::Connected);
    }

    /// Expands a cumulative point reported by the peer; `None` if it is stale or impossible.
    fn reported_cum(&mut self, wire: u32) -> Option<u64> {
        let cum = expand(wire, self.send.una())?;
        if cum > self.send.next_seq() {
            self.stats.count(Counter::ProtocolErrors, 1);
            return None;
        }
        if cum < self.send.una() {
            return None;
        }
        Some(cum)
    }

    fn on_report_common(&mut self, cum: u64, rwnd: u32) -> u64 {
        let marked = self.send.ack_cumulative(cum);
        self.peer_rwnd = u64::from(rwnd);
        marked.acked_bytes
    }

    fn on_stat(&mut self, now: Instant, stat: &Stat<'_>) {
        if let Some(sample) = wire_elapsed(self.peek_stamp(now), stat.echo_timestamp) {
            self.rtt.update(sample);
            self.refresh_regular_poll();
            if let Some(min) = self.rtt.min() {
                let next = self.peek_stamp(now);
                self.controller
                    .on_rtt_sample(sample, min, stat.echo_timestamp, next);
            }
        }
        self.peer_reporting();
        let Some(cum) = self.reported_cum(stat.cum) else {
            return;
        };
        let mut acked = self.on_report_common(cum, stat.rwnd);
        if self
            .last_poll_stamp
            .is_none_or(|p| wire_at_or_before(p, stat.echo_timestamp))
        {
            // The answer to our latest POLL: a window-blocked sender may probe again.
            self.polled_since_report = false;
        }
        let mut malformed = false;
        let mut covered = match expand(stat.covered_to, cum) {
            Some(c) if c >= cum => c.min(self.send.next_seq()),
            _ => {
                self.stats.count(Counter::ProtocolErrors, 1);
                malformed = true;
                cum
            }
        };
        let echo = stat.echo_timestamp;
        let next_stamp = self.peek_stamp(now);
        let mut cursor = cum;
        for (ws, we) in stat.gaps.iter() {
            let (Some(s), Some(e)) = (expand(ws, cursor), expand(we, cursor)) else {
                self.stats.count(Counter::ProtocolErrors, 1);
                covered = cursor;
                malformed = true;
                break;
            };
            if s < cursor || e <= s || e > covered {
                // A malformed list: trust nothing beyond the last valid gap.
                self.stats.count(Counter::ProtocolErrors, 1);
                covered = cursor;
                malformed = true;
                break;
            }
            acked += self.send.mark_received(cursor, s).acked_bytes;
            for seq in s..e {
                let lost = self
                    .send
                    .mark_lost(seq, |sd: &SentSd| wire_at_or_before(sd.last_stamp, echo));
                if let Some(stamp) = lost {
                    self.controller.on_loss(stamp, next_stamp);
                    self.stats.count(Counter::LossesDetected, 1);
                }
            }
            cursor = e;
        }
        acked += self.send.mark_received(cursor, covered).acked_bytes;
        // What was sent before the echoed POLL and lies beyond `covered` (a partial STAT) has
        // left the network: arrived or lost, it no longer holds the window (spec §6.11).
        if !malformed {
            self.send.mark_unreported(covered, echo, wire_at_or_before);
        }
        self.after_ack(now, acked);
    }

    fn on_ustat(&mut self, now: Instant, u: &Ustat) {
        let Some(cum) = self.reported_cum(u.cum) else {
            return;
        };
        let acked = self.on_report_common(cum, u.rwnd);
        self.polled_since_report = false;
        // A USTAT answers no POLL, but proves the peer alive and its reports getting through:
        // unanswered POLLs were lost on the way out (random loss), which backing off would only
        // make worse.
        self.peer_reporting();
        let gap = expand(u.gap_start, cum).zip(expand(u.gap_end, cum));
        let Some((s, e)) = gap else {
            self.stats.count(Counter::ProtocolErrors, 1);
            self.after_ack(now, acked);
            return;
        };
        if s < cum || e < s || e > self.send.next_seq() {
            self.stats.count(Counter::ProtocolErrors, 1);
        } else if e > s {
            // A USTAT carries no timestamp: resend only an SD sent once, or whose last copy has
            // had a smoothed RTT to arrive.
            let now_stamp = self.peek_stamp(now);
            let srtt = self.rtt.srtt();
            for seq in s..e {
                let lost = self.send.mark_lost(seq, |sd: &SentSd| {
                    sd.transmissions == 1
                        || wire_elapsed(now_stamp, sd.last_stamp).is_some_and(|d| d >= srtt)
                });
                if let Some(stamp) = lost {
                    self.controller.on_loss(stamp, now_stamp);
                    self.stats.count(Counter::LossesDetected, 1);
                }
            }
        }
        self.after_ack(now, acked);
    }

    /// A report (STAT or USTAT) arrived: the peer is alive and the return path carries reports.
    fn peer_reporting(&mut self) {
        self.unanswered_polls = None;
        self.collapsed_this_silence = false;
    }

    fn after_ack(&mut self, now: Instant, acked: u64) {
        // With data waiting, the sender was held back by the window or the pacer, not by the
        // application (after a loss shrinks the window, no SD may have left since the last ack).
        // Data held back only by the peer's receive window does not count: the window, not cwnd,
        // limits the sender then, and growing cwnd would only build a burst.
        let data_waiting = (self.send.unsent() > 0 && !self.rwnd_blocked()) || self.send.has_retx();
        let app_limited = !(self.was_cwnd_limited || data_waiting);
        self.controller.on_ack(acked, app_limited);
        if acked > 0 {
            self.was_cwnd_limited = false;
        }
        self.update_pacing(now);
    }

    fn on_sd(&mut self, wire_seq: u32, payload: &[u8]) {
        let Some(recv) = self.recv.as_mut() else {
            return;
        };
        let Some(seq) = expand(wire_seq, recv.cumulative()) else {
            self.stats.count(Counter::SdDiscarded, 1);
            return;
        };
        let before = recv.readable();
        match recv.on_sd(seq, payload) {
            Arrival::New => {}
            Arrival::Duplicate => {
                self.stats.count(Counter::SdDuplicates, 1);
                return;
            }
            Arrival::NoRoom | Arrival::OutOfRange => {
                self.stats.count(Counter::SdDiscarded, 1);
                return;
            }
        }
        if self.read_closed {
            recv.discard_readable();
        } else if recv.readable() > before && !self.readable_signalled {
            self.readable_signalled = true;
            self.events.push(EventKind::Readable);
        }
        if recv.is_complete() {
            self.pending.endak = true;
            self.signal_peer_finished();
        }
    }

    fn signal_peer_finished(&mut self) {
        if !self.peer_finished_signalled {
            self.peer_finished_signalled = true;
            self.events.push(EventKind::PeerFinished);
        }
    }

    fn on_poll(&mut self, poll: &Poll) {
        let Some(recv) = self.recv.as_ref() else {
            return;
        };
        let cum = recv.cumulative();
        match expand(poll.next_seq, cum) {
            Some(ns) if ns >= cum && ns < cum + MAX_SEQ_SPAN => {
                self.pending.stat = Some((poll.timestamp, ns));
                if recv.is_complete() {
                    self.pending.endak = true;
                }
            }
            // An older POLL overtaken by a newer report: nothing to answer.
            Some(ns) if ns < cum => {}
            _ => self.stats.count(Counter::ProtocolErrors, 1),
        }
    }

    fn on_end(&mut self, end: &End) {
        let Some(recv) = self.recv.as_mut() else {
            return;
        };
        let Some(f) = expand(end.final_seq, recv.cumulative()) else {
            self.stats.count(Counter::ProtocolErrors, 1);
            return;
        };
        if !recv.set_final(f) {
            self.stats.count(Counter::ProtocolErrors, 1);
            return;
        }
        if recv.is_complete() {
            self.pending.endak = true;
            self.signal_peer_finished();
        }
    }

    fn on_endak(&mut self, ack: &EndAck) {
        if let SendEnd::Sent(f) = self.send_end {
            if to_wire(f) == ack.final_seq {
                let acked = self.send.ack_cumulative(f).acked_bytes;
                self.controller.on_ack(acked, true);
                self.send_end = SendEnd::Acked;
            }
        }
    }

    fn signal_writable(&mut self) {
        if self.write_blocked && self.send.free_space() > 0 && self.send_end == SendEnd::Open {
            self.write_blocked = false;
            self.events.push(EventKind::Writable);
        }
    }
}
