//! One STP connection: the state machine from BGN to END/ENDAK (or RST), the byte-stream API,
//! events and statistics. The connection is driven by its endpoint: `handle_packet` for each
//! datagram that demultiplexed to it, `poll_transmit` until it returns `None`,
//! `poll_timeout`/`handle_timeout` for time.
//!
//! The work is split by job, as quinn-proto splits its connection:
//! - `input`: processing a received datagram (reports for the sender; SDs, POLL and END for the
//!   receiver);
//! - `builder`: assembling the next datagram in the steps of spec §6.10 (handshake, feedback,
//!   SD, POLL/END);
//! - `pending`: the control items owed to the peer (RST, BGN, BGNAK, STAT, window update,
//!   ENDAK), in one struct;
//! - `sending`: which SD the windows let go next (cwnd with the report allowance, the peer's
//!   receive window, the sequence span);
//! - `polling`: when POLLs fall due, their backoff and the silence that collapses the window;
//! - `timers`: the deadlines in one table, `poll_timeout` and `handle_timeout`.
//!
//! The controller comes from `congestion::new_controller`. `check_invariants` asserts (in debug
//! builds) what the spec promises: flight within cwnd plus the report allowance at every send,
//! cumulative points that never move back, buffers within their bounds.

mod builder;
mod events;
mod input;
mod pending;
mod polling;
mod sending;
mod timers;

use crate::config::{Config, CongestionMode};
use crate::congestion::{new_controller, AnyController, Controller};
use crate::pacing::Pacer;
use crate::recv::RecvBuffer;
use crate::rtt::RttEstimator;
use crate::send::SendBuffer;
use crate::seq::to_wire;
use crate::stats::{ConnectionStats, Counters};
use crate::time::{wire_at_or_before, Instant};
use crate::wire::{Bgn, Header, Packet, Rst, RstReason, Types, HEADER_LEN, SD_RESERVE, VERSION};
use bytes::Bytes;
use events::{EventKind, EventQueue};
use pending::PendingControl;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use timers::{Timer, TimerTable};

pub(crate) use builder::Quiet;

/// Which side opened the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sent the BGN.
    Initiator,
    /// Accepted the BGN.
    Responder,
}

/// Why a connection failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnectionError {
    #[error("connection reset by peer ({reason:?}, detail {detail})")]
    Reset { reason: RstReason, detail: u16 },
    #[error("connection refused by peer")]
    Refused,
    #[error("peer supports none of our protocol versions (peer offers bitmap {0:#06x})")]
    VersionMismatch(u16),
    #[error("no BGNAK within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("peer silent for {0:?}: considered dead")]
    TimedOut(Duration),
    #[error("aborted locally with code {0}")]
    LocallyAborted(u16),
    #[error("replaced by a new instance of the same connection")]
    Superseded,
}

/// Something the application should know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed (initiator: BGNAK received; responder: connection accepted).
    Connected,
    /// New bytes can be read.
    Readable,
    /// Send-buffer space became available after a short write.
    Writable,
    /// The peer finished sending and every byte it sent has arrived; reads drain then see the end.
    PeerFinished,
    /// Both directions finished cleanly; the connection is over.
    Closed,
    /// The connection failed; its state is freed once the event is taken.
    Failed(ConnectionError),
}

/// Why `Connection::handle_datagram` did not process a datagram.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DatagramError {
    #[error("malformed datagram: {0}")]
    Malformed(crate::wire::WireError),
    #[error("datagram belongs to another connection or instance")]
    NotThisConnection,
}

/// Errors of `write`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WriteError {
    #[error("the send side was shut down")]
    Finished,
    #[error("connection is over: {0}")]
    Failed(ConnectionError),
    #[error("connection is closed")]
    Closed,
}

/// Errors of `read`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReadError {
    #[error("no data available yet")]
    Blocked,
    #[error("connection is over: {0}")]
    Failed(ConnectionError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Initiator waiting for BGNAK (data may already flow: fast start).
    Handshake,
    Established,
    Closed,
    /// Boxed: a live connection then keeps 8 bytes for it, not 24.
    Failed(Box<ConnectionError>),
}

/// Progress of our sending half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendEnd {
    Open,
    /// `shutdown` was called; END goes out once every written byte is packetized.
    Requested,
    /// END sent with this final (extended) sequence number.
    Sent(u64),
    Acked,
}

/// A single STP connection.
#[derive(Debug)]
pub struct Connection {
    /// Shared by every connection of the endpoint.
    config: Arc<Config>,
    role: Role,
    conn_id: u32,
    instance: u8,
    phase: Phase,
    /// Initiator: BGNAK seen. Responder: a datagram without BGN seen.
    confirmed: bool,
    /// Events waiting for the application (`events`).
    events: EventQueue,
    /// Counters; `stats()` adds what it reads from the connection's state.
    stats: Counters,

    // ----- sending half -----
    local_isn: u64,
    send: SendBuffer,
    send_end: SendEnd,
    controller: AnyController,
    pacer: Pacer,
    rtt: RttEstimator,
    /// srtt / polls_per_rtt within the POLL interval bounds (see `refresh_regular_poll`), in
    /// nanoseconds.
    regular_poll_ns: u64,
    peer_rwnd: u64,
    peer_max_datagram: u16,
    /// Largest SD payload, fixed at setup (room is kept for POLL and END, and for BGN/BGNAK).
    mss: u16,
    /// Last send stamp handed out (a 32-bit µs clock that never runs backwards and separates every
    /// POLL from the SDs sent after it).
    last_stamp: u32,
    last_poll_stamp: Option<u32>,
    poll_anchor: Instant,
    /// Send times of POLLs not yet answered by any STAT (boxed, and only while there are any: a
    /// connection with nothing outstanding holds none).
    // Boxed on purpose: 8 bytes in every connection where the record takes 40.
    unanswered_polls: Option<Box<polling::UnansweredPolls>>,
    collapsed_this_silence: bool,
    polled_since_report: bool,
    zero_window_probes: u32,
    sds_since_poll: u32,
    bgn_retries: u32,
    end_sent_once: bool,
    write_blocked: bool,
    was_cwnd_limited: bool,

    // ----- receiving half -----
    recv: Option<RecvBuffer>,
    /// Paces feedback sent without data when `reverse_rate_bps` is set (`None`: no limit).
    feedback_pacer: Option<Box<Pacer>>,
    endak_sent: bool,
    /// The receive buffer's window when feedback last carried it (before the endpoint's
    /// ceiling): `after_read` asks for a window update when reading reopened it.
    last_advertised_window: u64,
    read_closed: bool,
    readable_signalled: bool,
    peer_finished_signalled: bool,
    bgn_echo: u32,

    // ----- liveness -----
    created: Instant,
    last_heard: Instant,
    /// Control items owed to the peer.
    pending: PendingControl,
    /// Deadlines: the dead-peer and BGN timers, and those `poll_timeout` computes.
    timers: TimerTable,
}

impl Connection {
    /// A new initiator-side connection. The first `poll_transmit` sends the BGN.
    pub(crate) fn new_initiator(
        now: Instant,
        config: Arc<Config>,
        conn_id: u32,
        instance: u8,
        isn: u32,
    ) -> Connection {
        let mut c = Connection::new(now, config, Role::Initiator, conn_id, instance, isn);
        c.phase = Phase::Handshake;
        c.pending.bgn = true;
        c.timers.set(
            Timer::Handshake,
            now + Config::ms(c.config.handshake_timeout_ms),
        );
        c
    }

    /// A new responder-side connection for a received BGN.
    pub(crate) fn new_responder(
        now: Instant,
        config: Arc<Config>,
        conn_id: u32,
        instance: u8,
        isn: u32,
        bgn: &Bgn,
    ) -> Connection {
        let mut c = Connection::new(now, config, Role::Responder, conn_id, instance, isn);
        c.phase = Phase::Established;
        c.apply_peer_params(bgn.rwnd, bgn.max_datagram);
        let rb = c.new_recv(u64::from(bgn.isn));
        c.recv = Some(rb);
        c.pending.bgnak = true;
        c.bgn_echo = bgn.timestamp;
        c.events.push(EventKind::Connected);
        c
    }

    fn new(
        now: Instant,
        config: Arc<Config>,
        role: Role,
        conn_id: u32,
        instance: u8,
        isn: u32,
    ) -> Connection {
        let mss = config.max_payload();
        let mss64 = mss as u64;
        let iw = config.initial_window.bytes(mss64);
        let controller = new_controller(&config, mss64);
        let granularity = Duration::from_micros(u64::from(config.pacing_granularity_us));
        let initial_burst = match config.congestion {
            CongestionMode::Window => iw + iw / mss64 * HEADER_LEN as u64 + 64,
            CongestionMode::Rate { .. } | CongestionMode::Allocated { .. } => {
                2 * (mss64 + HEADER_LEN as u64)
            }
        };
        let pacer = Pacer::new(
            now,
            granularity,
            initial_burst,
            2 * (mss64 + HEADER_LEN as u64),
        );
        let rtt = RttEstimator::new(Config::ms(config.initial_rtt_ms));
        let isn = u64::from(isn & crate::seq::SEQ_MASK);
        let mut c = Connection {
            send: SendBuffer::new(isn, u64::from(config.send_buffer_bytes)),
            local_isn: isn,
            role,
            conn_id,
            instance: instance & 0x7f,
            phase: Phase::Established,
            confirmed: false,
            events: EventQueue::default(),
            stats: Counters::default(),
            send_end: SendEnd::Open,
            controller,
            pacer,
            rtt,
            regular_poll_ns: 0,
            peer_rwnd: iw + iw / mss64 * 64,
            peer_max_datagram: config.max_datagram_bytes,
            // max_datagram_bytes (a u16) less the reserve.
            mss: u16::try_from(mss).unwrap_or(u16::MAX),
            last_stamp: now.wire_timestamp(),
            last_poll_stamp: None,
            poll_anchor: now,
            unanswered_polls: None,
            collapsed_this_silence: false,
            polled_since_report: false,
            zero_window_probes: 0,
            sds_since_poll: 0,
            bgn_retries: 0,
            end_sent_once: false,
            write_blocked: false,
            was_cwnd_limited: false,
            recv: None,
            feedback_pacer: config.reverse_rate_bps.map(|r| {
                let dg = u64::from(config.max_datagram_bytes);
                let mut p = Pacer::new(now, granularity, 2 * dg, 2 * dg);
                p.set_rate(now, r as f64 / 8.0);
                Box::new(p)
            }),
            endak_sent: false,
            last_advertised_window: u64::from(config.recv_buffer_bytes),
            read_closed: false,
            readable_signalled: false,
            peer_finished_signalled: false,
            bgn_echo: 0,
            created: now,
            last_heard: now,
            pending: PendingControl::default(),
            timers: TimerTable::default(),
            config,
        };
        c.refresh_regular_poll();
        c.heard(now);
        c.update_pacing(now);
        c
    }

    fn new_recv(&self, isn: u64) -> RecvBuffer {
        RecvBuffer::new(
            isn,
            u64::from(self.config.recv_buffer_bytes),
            self.config.reorder_threshold,
            self.config.max_pending_gaps,
        )
    }

    fn apply_peer_params(&mut self, rwnd: u32, max_datagram: u16) {
        self.peer_rwnd = u64::from(rwnd);
        let peer = usize::from(max_datagram).max(crate::wire::MIN_DATAGRAM);
        let own = usize::from(self.config.max_datagram_bytes);
        // Within our own limit, so within a u16.
        self.peer_max_datagram = u16::try_from(peer.min(own)).unwrap_or(u16::MAX);
        // Never grow the MSS (SDs already packetized keep their size); shrink it to the peer's.
        let peer_mss = usize::from(self.peer_max_datagram)
            .saturating_sub(SD_RESERVE)
            .max(1);
        if peer_mss < usize::from(self.mss) {
            self.mss = u16::try_from(peer_mss).unwrap_or(u16::MAX);
            // No acknowledgement has reached the controller yet: start it afresh for this MSS.
            self.controller = new_controller(&self.config, u64::from(self.mss));
            self.update_pacing(self.created);
        }
    }

    // ------------------------------------------------------------------ application API

    /// Which side this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The connection identifier (chosen by the initiator).
    pub fn id(&self) -> u32 {
        self.conn_id
    }

    /// The instance number.
    pub fn instance(&self) -> u8 {
        self.instance
    }

    /// Queues bytes for sending; returns how many were taken (0 when the buffer is full; a
    /// `Writable` event follows when space frees).
    pub fn write(&mut self, data: &[u8]) -> Result<usize, WriteError> {
        self.check_writable()?;
        let n = self.send.write(data);
        if n < data.len() {
            self.write_blocked = true;
        }
        Ok(n)
    }

    /// [`Connection::write`] without copying: the send buffer keeps a slice of `data` (sharing
    /// its allocation) until the bytes are acknowledged.
    pub fn write_bytes(&mut self, data: &Bytes) -> Result<usize, WriteError> {
        self.check_writable()?;
        let n = self.send.write_bytes(data);
        if n < data.len() {
            self.write_blocked = true;
        }
        Ok(n)
    }

    fn check_writable(&self) -> Result<(), WriteError> {
        match &self.phase {
            Phase::Failed(e) => return Err(WriteError::Failed((**e).clone())),
            Phase::Closed => return Err(WriteError::Closed),
            _ => {}
        }
        if self.send_end != SendEnd::Open {
            return Err(WriteError::Finished);
        }
        Ok(())
    }

    /// Bytes `write` would accept now.
    pub fn send_space(&self) -> u64 {
        if self.send_end == SendEnd::Open && self.is_live() {
            self.send.free_space()
        } else {
            0
        }
    }

    /// Bytes written that have not left yet: not yet in any packet (their first transmission).
    /// Bytes in flight (sent, awaiting acknowledgement) are not counted.
    pub fn unsent(&self) -> u64 {
        self.send.unsent() as u64
    }

    /// Copies received bytes into `buf`. `Ok(0)` with a non-empty `buf` means end of stream.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, ReadError> {
        let Some(recv) = self.recv.as_mut() else {
            return self.read_blocked_or_failed();
        };
        let n = recv.read(buf);
        if n > 0 || buf.is_empty() {
            self.after_read();
            return Ok(n);
        }
        if recv.is_complete() {
            return Ok(0);
        }
        self.read_blocked_or_failed()
    }

    /// Takes up to `max` received bytes without copying. `Ok(None)` means end of stream.
    pub fn read_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ReadError> {
        let Some(recv) = self.recv.as_mut() else {
            return self.read_blocked_or_failed().map(|_| None);
        };
        if let Some(b) = recv.read_chunk(max) {
            self.after_read();
            return Ok(Some(b));
        }
        if recv.is_complete() {
            return Ok(None);
        }
        self.read_blocked_or_failed().map(|_| None)
    }

    fn read_blocked_or_failed(&self) -> Result<usize, ReadError> {
        match &self.phase {
            Phase::Failed(e) => Err(ReadError::Failed((**e).clone())),
            _ => Err(ReadError::Blocked),
        }
    }

    fn after_read(&mut self) {
        self.readable_signalled = false;
        let Some(recv) = self.recv.as_ref() else {
            return;
        };
        let cap = u64::from(self.config.recv_buffer_bytes);
        if self.last_advertised_window < cap / 4 && recv.window() >= cap / 2 {
            self.pending.window_update = true;
        }
    }

    /// Bytes ready to read.
    pub fn readable(&self) -> usize {
        self.recv.as_ref().map_or(0, RecvBuffer::readable)
    }

    /// Half-close: no more writes; the peer sees end-of-stream after every byte written so far.
    pub fn shutdown(&mut self) {
        if self.send_end == SendEnd::Open && self.is_live() {
            self.send_end = SendEnd::Requested;
        }
    }

    /// Closes both directions: shuts down sending and discards anything received from now on.
    /// The connection still completes the END exchange so the peer learns all data arrived.
    pub fn close(&mut self) {
        self.shutdown();
        self.read_closed = true;
        if let Some(r) = self.recv.as_mut() {
            r.discard_readable();
        }
    }

    /// Aborts: the peer is sent RST with `code` and the connection fails at once.
    pub fn abort(&mut self, code: u16) {
        if !self.is_live() {
            return;
        }
        self.pending.rst = Some(Rst {
            reason: RstReason::Aborted,
            detail: code,
        });
        self.fail(ConnectionError::LocallyAborted(code));
    }

    /// An initiator whose BGN is not yet answered sends it again with the next transmit, and
    /// its handshake back-off starts over from `now`: the path it was lost on has just come
    /// back (a driver saw its peer again), so waiting out the back-off would only add delay.
    /// Does nothing once the handshake completed.
    pub fn retry_handshake(&mut self, now: Instant) {
        if self.role != Role::Initiator || self.confirmed || !self.is_live() {
            return;
        }
        self.pending.bgn = true;
        self.bgn_retries = 0;
        self.timers.set(
            Timer::Handshake,
            now + Config::ms(self.config.handshake_timeout_ms),
        );
    }

    /// The next event, if any. Events come out in the order they happened, except that a
    /// `Readable` or `Writable` is not queued again while one is already waiting.
    pub fn poll_event(&mut self) -> Option<Event> {
        let kind = self.events.pop()?;
        Some(match kind {
            EventKind::Connected => Event::Connected,
            EventKind::Readable => Event::Readable,
            EventKind::Writable => Event::Writable,
            EventKind::PeerFinished => Event::PeerFinished,
            EventKind::Closed => Event::Closed,
            // Queued only once the phase holds the error (`fail`); nothing to report otherwise.
            EventKind::Failed => match self.error() {
                Some(e) => Event::Failed(e.clone()),
                None => return self.poll_event(),
            },
        })
    }

    /// Whether events are waiting to be taken.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Packets retransmitted so far: the count in [`Self::stats`], read without building the
    /// whole statistics (the simulator reads it after every datagram).
    pub fn retransmitted_packets(&self) -> u64 {
        self.stats.get(crate::stats::Counter::RetransmittedPackets)
    }

    /// Statistics so far.
    pub fn stats(&self) -> ConnectionStats {
        let mut s = self.stats.to_stats();
        s.srtt = self.rtt.srtt();
        s.min_rtt = self.rtt.min();
        s.cwnd_bytes = self.controller.window();
        s.ssthresh_bytes = self.controller.ssthresh();
        s.pacing_rate_bps = self.pacer.rate() * 8.0;
        s.bytes_in_flight = self.send.in_flight();
        s.peer_window_bytes = self.peer_rwnd;
        s
    }

    /// Whether the connection still exchanges packets.
    pub fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Handshake | Phase::Established)
    }

    /// Whether the connection is over (closed or failed).
    pub fn is_terminal(&self) -> bool {
        !self.is_live()
    }

    /// Whether the handshake has completed.
    pub fn is_established(&self) -> bool {
        !matches!(self.phase, Phase::Handshake)
    }

    /// The failure, if the connection failed.
    pub fn error(&self) -> Option<&ConnectionError> {
        match &self.phase {
            Phase::Failed(e) => Some(e.as_ref()),
            _ => None,
        }
    }

    /// Whether the endpoint may drop this connection's state: over, events taken, nothing left to
    /// read, nothing left to send.
    pub(crate) fn is_drained(&self) -> bool {
        self.is_terminal()
            && self.events.is_empty()
            && self.pending.rst.is_none()
            && (self.readable() == 0 || matches!(self.phase, Phase::Failed(_)))
    }

    /// Final sequence number of the peer's END (wire form), for answering late ENDs after release.
    pub(crate) fn peer_final_wire(&self) -> Option<u32> {
        self.recv.as_ref().and_then(|r| r.final_seq()).map(to_wire)
    }

    // ------------------------------------------------------------------ state changes

    fn fail(&mut self, e: ConnectionError) {
        if !self.is_live() {
            return;
        }
        self.phase = Phase::Failed(Box::new(e));
        self.events.push(EventKind::Failed);
    }

    /// Fails the connection because the endpoint replaced it (a new instance arrived).
    pub(crate) fn supersede(&mut self) {
        self.fail(ConnectionError::Superseded);
    }

    fn check_closed(&mut self) {
        if self.phase != Phase::Established {
            return;
        }
        let recv_done = self.endak_sent && self.recv.as_ref().is_some_and(RecvBuffer::is_complete);
        if self.send_end == SendEnd::Acked && recv_done {
            self.phase = Phase::Closed;
            self.events.push(EventKind::Closed);
        }
    }

    fn next_stamp(&mut self, now: Instant) -> u32 {
        let t = now.wire_timestamp();
        if !wire_at_or_before(t, self.last_stamp) {
            self.last_stamp = t;
        }
        self.last_stamp
    }

    /// The stamp for an SD: like `next_stamp`, but strictly after the last POLL's stamp, so a
    /// STAT echoing that POLL never counts this SD as sent before it.
    fn next_sd_stamp(&mut self, now: Instant) -> u32 {
        let t = self.next_stamp(now);
        if self.last_poll_stamp == Some(t) {
            self.last_stamp = t.wrapping_add(1);
        }
        self.last_stamp
    }

    fn peek_stamp(&self, now: Instant) -> u32 {
        let t = now.wire_timestamp();
        if wire_at_or_before(t, self.last_stamp) {
            self.last_stamp
        } else {
            t
        }
    }

    /// The RTT the pacer spreads a window over: the smoothed RTT, but never more than twice the
    /// smallest RTT seen. Queueing on a thin return channel inflates srtt without making the
    /// forward path any slower; the window, not the pacer, bounds what is in flight. Without
    /// `pacing_rtt_cap` (the seeds' rule), srtt itself.
    fn pacing_rtt(&self) -> Duration {
        let srtt = self.rtt.srtt();
        if !self.config.pacing_rtt_cap {
            return srtt;
        }
        match self.rtt.min() {
            Some(min) => srtt.min(2 * min),
            None => srtt,
        }
    }

    fn update_pacing(&mut self, now: Instant) {
        let mut rate = self.controller.pacing_rate(self.pacing_rtt());
        if let Some(max) = self.config.max_rate_bps {
            rate = rate.min(max as f64 / 8.0);
        }
        if let Some(min) = self.config.min_rate_bps {
            rate = rate.max(min as f64 / 8.0);
        }
        self.pacer.set_rate(now, rate);
    }

    // ------------------------------------------------------------------ invariants

    /// The cumulative points: the sender's (lowest unacknowledged SD) and the receiver's N(R).
    fn cumulative_points(&self) -> (u64, Option<u64>) {
        (
            self.send.una(),
            self.recv.as_ref().map(RecvBuffer::cumulative),
        )
    }

    /// Asserts (debug builds only) what the spec promises after every datagram handled or
    /// built: cumulative points never move back (given their values `before`), the sequence
    /// span and both buffers stay within their bounds, and the send window is never exceeded
    /// by the SD just sent (checked where it is sent, `builder`). The property tests and the
    /// seed sweep run with these checks.
    fn check_invariants(&self, before: Option<(u64, Option<u64>)>) {
        if !cfg!(debug_assertions) {
            return;
        }
        let (una, cum) = self.cumulative_points();
        if let Some((una0, cum0)) = before {
            debug_assert!(una >= una0, "sender's cumulative point moved back");
            if let (Some(c0), Some(c)) = (cum0, cum) {
                debug_assert!(c >= c0, "receiver's cumulative point moved back");
            }
        }
        debug_assert!(
            una <= self.send.next_seq(),
            "acknowledged beyond what was sent"
        );
        debug_assert!(
            self.send.outstanding_count() <= crate::recv::MAX_SEQ_SPAN,
            "more SDs outstanding than the sequence span"
        );
        self.send.check_bounds();
        if let Some(r) = &self.recv {
            r.check_bounds();
        }
    }

    fn advertised_window(&self) -> u64 {
        self.recv
            .as_ref()
            .map_or(u64::from(self.config.recv_buffer_bytes), RecvBuffer::window)
            .min(u64::from(u32::MAX))
    }

    fn header(&self) -> Header {
        Header {
            version: VERSION,
            types: Types::empty(),
            from_initiator: self.role == Role::Initiator,
            instance: self.instance,
            conn_id: self.conn_id,
            seq: 0,
        }
    }

    fn emit(&mut self, p: &Packet<'_>, buf: &mut Vec<u8>) -> usize {
        let n = p.emit_with(buf, self.config.emit_checksum);
        self.stats.record_sent(p.types(), n, p.payload.len());
        n
    }
}
