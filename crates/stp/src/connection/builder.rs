//! Assembling the next datagram (spec §6.10), in the order the spec gives: a waiting RST alone;
//! then (1) the handshake body, (2) feedback for the peer's sending half (STAT, else USTAT or
//! window update; ENDAK), (3) an SD if the windows and the pacer let one go, (4) a POLL (with
//! END) if a POLL rule holds. Each step takes room in the datagram and may force it out.

use super::polling::PollKind;
use super::{Connection, Phase, Role, SendEnd};
use crate::recv::RecvBuffer;
use crate::seq::to_wire;
use crate::stats::Counter;
use crate::time::Instant;
use crate::wire::{
    Bgn, Bgnak, End, EndAck, Gaps, Header, Packet, Poll, Stat, Ustat, BGNAK_LEN, BGN_LEN,
    ENDAK_LEN, END_LEN, GAP_LEN, HEADER_LEN, POLL_LEN, SD_RESERVE, STAT_FIXED_LEN,
    SUPPORTED_VERSIONS, USTAT_LEN, VERSION,
};

/// Bytes the reverse budget must hold before feedback is sent (a STAT with a few gaps).
pub(super) const FEEDBACK_ESTIMATE: usize = 64;

/// What a `poll_transmit` at `at` that found nothing to send asked on the way: the SD the
/// windows let go ([`Connection::sd_candidate`]) and the next timer POLL
/// ([`Connection::next_poll`]). Valid for [`Connection::poll_timeout_quiet`] at the same instant
/// as long as nothing else reached the connection in between (the endpoint forgets it whenever
/// it hands the connection to anything else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quiet {
    at: Instant,
    candidate: Option<(Option<u64>, usize)>,
    poll: Option<(Instant, PollKind)>,
}

impl Quiet {
    /// The instant of the poll.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// The SD candidate and the next POLL.
    #[allow(clippy::type_complexity)]
    pub(super) fn parts(&self) -> (Option<(Option<u64>, usize)>, Option<(Instant, PollKind)>) {
        (self.candidate, self.poll)
    }
}

/// A datagram being assembled: its bodies, the STAT's gap list, the SD's sequence number (its
/// payload stays in the send buffer, which the packet borrows only when emitted), and the room
/// taken.
struct PacketBuilder {
    packet: Packet<'static>,
    gaps: Vec<(u32, u32)>,
    sd: Option<u64>,
    /// Bytes the datagram holds so far, header included.
    used: usize,
    /// The peer's datagram limit.
    max: usize,
    /// Whether a body other than an SD forces the datagram out.
    must_send: bool,
}

impl PacketBuilder {
    fn new(header: Header, max: usize) -> Self {
        PacketBuilder {
            packet: Packet::new(header),
            gaps: Vec::new(),
            sd: None,
            used: HEADER_LEN,
            max,
            must_send: false,
        }
    }
}

impl Connection {
    /// Writes the next datagram into `buf` (appending) and returns its length, or `None` when
    /// nothing is due now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        self.poll_transmit_noting(now, buf, &mut None, u64::MAX)
    }

    /// As [`Self::poll_transmit`]; when nothing is due, `quiet` is set to what the poll found
    /// (see [`Quiet`]), else cleared.
    pub(crate) fn poll_transmit_noting(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        quiet: &mut Option<Quiet>,
        window_ceiling: u64,
    ) -> Option<usize> {
        *quiet = None;
        if let Some(rst) = self.pending.rst.take() {
            let mut p = Packet::new(self.header());
            p.rst = Some(rst);
            return Some(self.emit(&p, buf));
        }
        if !self.is_live() {
            return self.held_endak(buf);
        }
        let mut b = PacketBuilder::new(self.header(), usize::from(self.peer_max_datagram));
        self.build_handshake(now, &mut b, window_ceiling);
        // What the windows let go, asked once: assembling the feedback changes nothing it
        // depends on (only the receiving half and the feedback flags).
        let candidate = self.sd_candidate();
        self.build_feedback(now, &mut b, candidate, window_ceiling);
        self.build_sd(now, &mut b, candidate);
        let poll = self.build_poll_end(now, &mut b);
        if self.role == Role::Initiator {
            self.pending.bgn = false;
        }
        if !b.must_send && b.sd.is_none() {
            self.check_invariants(None);
            // Nothing went out, so nothing the window or the POLL timer reads changed since
            // they were asked.
            *quiet = Some(Quiet {
                at: now,
                candidate,
                poll,
            });
            return None;
        }
        let mut p: Packet<'_> = b.packet;
        if let Some(seq) = b.sd {
            let sd = self.send.get(seq);
            debug_assert!(sd.is_some(), "SD {seq} packetized but no longer kept");
            if let Some(sd) = sd {
                p.payload = &sd.payload;
            }
        }
        if let Some(stat) = p.stat.as_mut() {
            stat.gaps = Gaps::List(&b.gaps);
        }
        // `self.emit` inlined: the payload borrows the send buffer.
        let n = p.emit_with(buf, self.config.emit_checksum);
        self.stats.record_sent(p.types(), n, p.payload.len());
        if b.sd.is_none() && (p.stat.is_some() || p.ustat.is_some()) {
            if let Some(fp) = self.feedback_pacer.as_mut() {
                fp.on_sent(n);
            }
        }
        self.check_closed();
        self.check_invariants(None);
        Some(n)
    }

    /// A closed connection not yet released answers a repeated END with its ENDAK (§5.7).
    fn held_endak(&mut self, buf: &mut Vec<u8>) -> Option<usize> {
        let fin = self.recv.as_ref().and_then(RecvBuffer::final_seq);
        if let (Phase::Closed, true, Some(f)) = (&self.phase, self.pending.endak, fin) {
            self.pending.endak = false;
            let mut p = Packet::new(self.header());
            p.endak = Some(EndAck {
                final_seq: to_wire(f),
            });
            return Some(self.emit(&p, buf));
        }
        None
    }

    /// Step 1: BGN on every initiator datagram and BGNAK on every responder datagram until the
    /// other side is known to have the connection.
    fn build_handshake(&mut self, now: Instant, b: &mut PacketBuilder, window_ceiling: u64) {
        if self.confirmed {
            return;
        }
        match self.role {
            Role::Initiator => {
                b.packet.bgn = Some(Bgn {
                    isn: to_wire(self.local_isn),
                    rwnd: self.advertised_window().min(window_ceiling) as u32,
                    max_datagram: self.config.max_datagram_bytes,
                    versions: SUPPORTED_VERSIONS,
                    timestamp: self.peek_stamp(now),
                });
                b.used += BGN_LEN;
                b.must_send |= self.pending.bgn;
            }
            Role::Responder => {
                b.packet.bgnak = Some(Bgnak {
                    isn: to_wire(self.local_isn),
                    version: VERSION,
                    rwnd: self.advertised_window().min(window_ceiling) as u32,
                    max_datagram: self.config.max_datagram_bytes,
                    echo_timestamp: self.bgn_echo,
                });
                b.used += BGNAK_LEN;
                b.must_send |= self.pending.bgnak;
                self.pending.bgnak = false;
            }
        }
    }

    /// Step 2, the receiver's side: STAT (complete report), else USTAT or window update; ENDAK.
    /// Feedback that would travel alone waits for the reverse budget (a waiting STAT answers the
    /// latest POLL). The window advertised is the buffer's, at most `window_ceiling` (the
    /// endpoint's, [`crate::Endpoint::set_window_ceiling`]); `last_advertised_window` keeps the
    /// buffer's own, so a reader freeing room asks for a window update only as it would without
    /// a ceiling.
    fn build_feedback(
        &mut self,
        now: Instant,
        b: &mut PacketBuilder,
        candidate: Option<(Option<u64>, usize)>,
        window_ceiling: u64,
    ) {
        let sd_ready = match candidate {
            Some((_, len)) => self.pacer.can_send(now, len + HEADER_LEN),
            None => false,
        };
        let feedback_ok = sd_ready
            || self
                .feedback_pacer
                .as_mut()
                .is_none_or(|fp| fp.can_send(now, FEEDBACK_ESTIMATE));
        let stat_due = if feedback_ok {
            self.pending.stat.take()
        } else {
            None
        };
        if let (Some((echo, ns)), Some(recv)) = (stat_due, self.recv.as_mut()) {
            let room = b
                .max
                .saturating_sub(b.used + STAT_FIXED_LEN + ENDAK_LEN + POLL_LEN + END_LEN);
            let (gaps, covered, partial) = recv.stat_report(ns, (room / GAP_LEN).max(1));
            b.gaps = gaps
                .iter()
                .map(|&(a, b)| (to_wire(a), to_wire(b)))
                .collect();
            recv.clear_ustats();
            let window = recv.window();
            b.packet.stat = Some(Stat {
                cum: to_wire(recv.cumulative()),
                partial,
                covered_to: to_wire(covered),
                echo_timestamp: echo,
                rwnd: window.min(window_ceiling).min(u64::from(u32::MAX)) as u32,
                gaps: Gaps::List(&[]),
            });
            self.last_advertised_window = window;
            self.pending.window_update = false;
            b.used += STAT_FIXED_LEN + b.gaps.len() * GAP_LEN;
            b.must_send = true;
        } else if let (Some(recv), true) = (self.recv.as_mut(), feedback_ok) {
            let gap = recv.pop_ustat();
            if gap.is_some() || self.pending.window_update {
                let cum = recv.cumulative();
                let (a, z) = gap.unwrap_or((cum, cum));
                let window = recv.window();
                b.packet.ustat = Some(Ustat {
                    cum: to_wire(cum),
                    rwnd: window.min(window_ceiling).min(u64::from(u32::MAX)) as u32,
                    gap_start: to_wire(a),
                    gap_end: to_wire(z),
                });
                self.last_advertised_window = window;
                self.pending.window_update = false;
                b.used += USTAT_LEN;
                b.must_send = true;
            }
        }
        if self.pending.endak {
            self.pending.endak = false;
            if let Some(f) = self.recv.as_ref().and_then(RecvBuffer::final_seq) {
                b.packet.endak = Some(EndAck {
                    final_seq: to_wire(f),
                });
                b.used += ENDAK_LEN;
                b.must_send = true;
                self.endak_sent = true;
            }
        }
    }

    /// Step 3, the sender's side: an SD if the windows and the pacer allow and it fits beside
    /// what the datagram already holds (with room kept for POLL and END). `candidate` is
    /// [`Self::sd_candidate`] as it stands.
    fn build_sd(
        &mut self,
        now: Instant,
        b: &mut PacketBuilder,
        candidate: Option<(Option<u64>, usize)>,
    ) {
        let Some((retx, len)) = candidate else {
            return;
        };
        // A retransmission keeps its original size: an SD cut before the peer's limit was known
        // (fast start) may exceed it, and the responder accepts datagrams up to the size the
        // initiator announced in its BGN.
        let limit = if retx.is_some() {
            b.max.max(len + SD_RESERVE)
        } else {
            b.max
        };
        if b.used + len + POLL_LEN + END_LEN > limit || !self.pacer.can_send(now, len + HEADER_LEN)
        {
            return;
        }
        let flight_before = self.send.in_flight();
        let stamp = self.next_sd_stamp(now);
        let taken = if let Some(seq) = retx {
            self.send.pop_retx(seq, stamp)
        } else {
            self.send.packetize(len, stamp)
        };
        let Some((seq, payload_len)) = taken else {
            return;
        };
        // Spec §6.5/§7.2a: an SD leaves only into an empty pipe or within cwnd plus the report
        // allowance.
        debug_assert!(
            flight_before == 0 || self.send.in_flight() <= self.send_window(),
            "flight {} above the send window {} after SD {seq}",
            self.send.in_flight(),
            self.send_window()
        );
        self.pacer.on_sent(payload_len + HEADER_LEN);
        if retx.is_some() {
            self.stats.count(Counter::RetransmittedPackets, 1);
            self.stats
                .count(Counter::RetransmittedBytes, payload_len as u64);
        } else {
            self.sds_since_poll += 1;
        }
        b.packet.header.seq = to_wire(seq);
        self.zero_window_probes = 0;
        b.sd = Some(seq);
    }

    /// Step 4: END becomes due once every written byte is packetized; a POLL (carrying the END
    /// when it is due) goes out when a POLL rule of §6.6 holds.
    /// Returns [`Self::next_poll`] as it stood at `now` before any POLL was added.
    fn build_poll_end(
        &mut self,
        now: Instant,
        b: &mut PacketBuilder,
    ) -> Option<(Instant, PollKind)> {
        if self.send_end == SendEnd::Requested && self.send.unsent() == 0 {
            self.send_end = SendEnd::Sent(self.send.next_seq());
        }
        let end_final = match self.send_end {
            SendEnd::Sent(f) => Some(f),
            _ => None,
        };
        let granularity_ns = u64::from(self.config.pacing_granularity_us) * 1_000;
        let poll = self.next_poll(now);
        let timer_due = self
            .effective_poll_time(now, poll, None)
            .is_some_and(|t| t <= now);
        let mut forced = false;
        let mut early_timer = false;
        if b.sd.is_some() {
            // Held back by the window or the pacer (not by the application, nor by the peer's
            // receive window alone).
            if (self.send.unsent() > 0 && !self.rwnd_blocked()) || self.send.has_retx() {
                self.was_cwnd_limited = true;
            }
            // In small-window mode the SD that ends the window carries a POLL. The window is
            // asked only then (it is asked once per datagram already, in `sd_candidate`).
            forced |= self.small_window() && self.sd_candidate().is_none();
            // A POLL due "around the same time" rides on this SD: within half a POLL interval
            // (at least one timer tick). Timer POLLs tend to fall due just as the window fills,
            // when no SD could carry them. The interval is computed only for a POLL not yet due.
            early_timer = poll.is_some_and(|(t, _)| {
                t <= now || {
                    let tolerance = (self.poll_interval_ns(now) / 2).max(granularity_ns);
                    t.as_nanos() <= now.as_nanos().saturating_add(tolerance)
                }
            });
            forced |=
                self.config.poll_every_sds > 0 && self.sds_since_poll >= self.config.poll_every_sds;
            // No rule forces a POLL on every SD once END is due (spec §5.7, §6.6): after the
            // last new SD, which carries the first END, only retransmissions remain, and they
            // are polled like any other (timer, burst end), the END riding on those POLLs.
        }
        forced |= self.pending.bgn && (b.sd.is_some() || self.send.has_outstanding());
        forced |= end_final.is_some() && !self.end_sent_once;
        let forced_by_other = forced;
        forced |= early_timer;
        if !(forced || timer_due) {
            return poll;
        }
        let keepalive = b.sd.is_none()
            && !self.send.has_outstanding()
            && matches!(poll, Some((_, PollKind::Keepalive)));
        let stamp = self.next_stamp(now);
        b.packet.poll = Some(Poll {
            next_seq: to_wire(self.send.next_seq()),
            keepalive,
            timestamp: stamp,
        });
        if keepalive {
            self.stats.count(Counter::KeepalivesSent, 1);
        }
        if b.sd.is_some() {
            self.stats.count(Counter::PollsPiggybacked, 1);
        }
        // A timer POLL sent early (piggybacked) keeps its scheduled slot, so piggybacking never
        // raises the POLL rate.
        let slot = poll.map_or(
            now,
            |(t, _)| if t > now && !forced_by_other { t } else { now },
        );
        self.note_poll_sent(now, stamp);
        self.poll_anchor = slot.max(now);
        if let Some(f) = end_final {
            b.packet.end = Some(End {
                final_seq: to_wire(f),
            });
            self.end_sent_once = true;
        }
        b.must_send = true;
        poll
    }
}
