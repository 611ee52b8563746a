//! One STP connection: the state machine from BGN to END/ENDAK (or RST), the byte-stream API, the
//! sender (window, pacing, POLL scheduling, retransmission on STAT/USTAT) and the receiver
//! (reassembly, STAT answers, USTAT on holes), events and statistics.
//!
//! The connection is driven by its endpoint: `handle_packet` for each datagram that demultiplexed
//! to it, `poll_transmit` until it returns `None`, `poll_timeout`/`handle_timeout` for time.

use crate::config::{Config, CongestionMode};
use crate::congestion::{AllocationController, Controller, RateController, WindowController};
use crate::pacing::Pacer;
use crate::recv::{Arrival, RecvBuffer, MAX_SEQ_SPAN};
use crate::rtt::RttEstimator;
use crate::send::{sd_charge, SendBuffer, SentSd};
use crate::seq::{expand, to_wire};
use crate::stats::ConnectionStats;
use crate::time::{wire_at_or_before, wire_elapsed, Instant};
use crate::wire::{
    Bgn, Bgnak, End, EndAck, Gaps, Header, Packet, Poll, Rst, RstReason, Stat, Types, Ustat,
    BGNAK_LEN, BGN_LEN, ENDAK_LEN, END_LEN, GAP_LEN, HEADER_LEN, POLL_LEN, SD_RESERVE,
    STAT_FIXED_LEN, SUPPORTED_VERSIONS, USTAT_LEN, VERSION,
};
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Duration;
use thiserror::Error;

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
    Failed(ConnectionError),
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

/// Why a POLL goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollKind {
    Regular,
    Keepalive,
}

/// Bytes the reverse budget must hold before feedback is sent (a STAT with a few gaps).
const FEEDBACK_ESTIMATE: usize = 64;

/// Upper bound on POLL send times remembered while waiting for a STAT.
const MAX_TRACKED_POLLS: usize = 64;

fn make_controller(config: &Config, mss: u64) -> Box<dyn Controller> {
    match config.congestion {
        CongestionMode::Window => Box::new(WindowController::from_config(config, mss)),
        CongestionMode::Rate { rate_bps } => Box::new(RateController::new(rate_bps)),
        CongestionMode::Allocated {
            rate_bps,
            max_queue_delay_ms,
        } => Box::new(AllocationController::new(
            mss,
            rate_bps,
            Config::ms(config.initial_rtt_ms),
            Config::ms(max_queue_delay_ms),
        )),
    }
}

/// A single STP connection.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    role: Role,
    conn_id: u32,
    instance: u8,
    phase: Phase,
    /// Initiator: BGNAK seen. Responder: a datagram without BGN seen.
    confirmed: bool,
    events: VecDeque<Event>,
    stats: ConnectionStats,

    // ----- sending half -----
    local_isn: u64,
    send: SendBuffer,
    send_end: SendEnd,
    controller: Box<dyn Controller>,
    pacer: Pacer,
    rtt: RttEstimator,
    peer_rwnd: u64,
    peer_max_datagram: usize,
    /// Largest SD payload, fixed at setup (room is kept for POLL and END, and for BGN/BGNAK).
    mss: usize,
    /// Last send stamp handed out (a 32-bit µs clock that never runs backwards and separates every
    /// POLL from the SDs sent after it).
    last_stamp: u32,
    last_poll_stamp: Option<u32>,
    poll_anchor: Instant,
    /// Send times of POLLs not yet answered by any STAT.
    unanswered_polls: VecDeque<Instant>,
    collapsed_this_silence: bool,
    polled_since_report: bool,
    zero_window_probes: u32,
    sds_since_poll: u32,
    bgn_deadline: Option<Instant>,
    bgn_retries: u32,
    bgn_due: bool,
    end_sent_once: bool,
    write_blocked: bool,
    was_cwnd_limited: bool,

    // ----- receiving half -----
    recv: Option<RecvBuffer>,
    /// Paces feedback sent without data when `reverse_rate_bps` is set.
    feedback_pacer: Pacer,
    stat_due: Option<(u32, u64)>,
    bgnak_due: bool,
    endak_due: bool,
    endak_sent: bool,
    window_update_due: bool,
    last_advertised_window: u64,
    read_closed: bool,
    readable_signalled: bool,
    peer_finished_signalled: bool,
    bgn_echo: u32,

    // ----- liveness -----
    created: Instant,
    last_heard: Instant,
    rst_out: Option<Rst>,
}

impl Connection {
    /// A new initiator-side connection. The first `poll_transmit` sends the BGN.
    pub(crate) fn new_initiator(
        now: Instant,
        config: Config,
        conn_id: u32,
        instance: u8,
        isn: u32,
    ) -> Connection {
        let mut c = Connection::new(now, config, Role::Initiator, conn_id, instance, isn);
        c.phase = Phase::Handshake;
        c.bgn_due = true;
        c.bgn_deadline = Some(now + Config::ms(c.config.handshake_timeout_ms));
        c
    }

    /// A new responder-side connection for a received BGN.
    pub(crate) fn new_responder(
        now: Instant,
        config: Config,
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
        c.bgnak_due = true;
        c.bgn_echo = bgn.timestamp;
        c.events.push_back(Event::Connected);
        c
    }

    fn new(
        now: Instant,
        config: Config,
        role: Role,
        conn_id: u32,
        instance: u8,
        isn: u32,
    ) -> Connection {
        let mss = config.max_payload();
        let mss64 = mss as u64;
        let iw = config.initial_window.bytes(mss64);
        let controller = make_controller(&config, mss64);
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
            events: VecDeque::new(),
            stats: ConnectionStats::default(),
            send_end: SendEnd::Open,
            controller,
            pacer,
            rtt,
            peer_rwnd: iw + iw / mss64 * 64,
            peer_max_datagram: usize::from(config.max_datagram_bytes),
            mss,
            last_stamp: now.wire_timestamp(),
            last_poll_stamp: None,
            poll_anchor: now,
            unanswered_polls: VecDeque::new(),
            collapsed_this_silence: false,
            polled_since_report: false,
            zero_window_probes: 0,
            sds_since_poll: 0,
            bgn_deadline: None,
            bgn_retries: 0,
            bgn_due: false,
            end_sent_once: false,
            write_blocked: false,
            was_cwnd_limited: false,
            recv: None,
            feedback_pacer: {
                let dg = u64::from(config.max_datagram_bytes);
                let mut p = Pacer::new(now, granularity, 2 * dg, 2 * dg);
                if let Some(r) = config.reverse_rate_bps {
                    p.set_rate(now, r as f64 / 8.0);
                }
                p
            },
            stat_due: None,
            bgnak_due: false,
            endak_due: false,
            endak_sent: false,
            window_update_due: false,
            last_advertised_window: u64::from(config.recv_buffer_bytes),
            read_closed: false,
            readable_signalled: false,
            peer_finished_signalled: false,
            bgn_echo: 0,
            created: now,
            last_heard: now,
            rst_out: None,
            config,
        };
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
        self.peer_max_datagram = peer.min(usize::from(self.config.max_datagram_bytes));
        // Never grow the MSS (SDs already packetized keep their size); shrink it to the peer's.
        let peer_mss = self.peer_max_datagram.saturating_sub(SD_RESERVE).max(1);
        if peer_mss < self.mss {
            self.mss = peer_mss;
            // No acknowledgement has reached the controller yet: start it afresh for this MSS.
            self.controller = make_controller(&self.config, self.mss as u64);
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
            Phase::Failed(e) => return Err(WriteError::Failed(e.clone())),
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
            Phase::Failed(e) => Err(ReadError::Failed(e.clone())),
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
            self.window_update_due = true;
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
        self.rst_out = Some(Rst {
            reason: RstReason::Aborted,
            detail: code,
        });
        self.fail(ConnectionError::LocallyAborted(code));
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether events are waiting to be taken.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Statistics so far.
    pub fn stats(&self) -> ConnectionStats {
        let mut s = self.stats.clone();
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
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the endpoint may drop this connection's state: over, events taken, nothing left to
    /// read, nothing left to send.
    pub(crate) fn is_drained(&self) -> bool {
        self.is_terminal()
            && self.events.is_empty()
            && self.rst_out.is_none()
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
        self.phase = Phase::Failed(e.clone());
        self.events.push_back(Event::Failed(e));
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
            self.events.push_back(Event::Closed);
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
    /// forward path any slower; the window, not the pacer, bounds what is in flight.
    fn pacing_rtt(&self) -> Duration {
        let srtt = self.rtt.srtt();
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

    // ------------------------------------------------------------------ receiving packets

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
        self.stats
            .record_received(p.header.types, datagram_len, p.payload.len());
        if !self.is_live() {
            // Closed but not yet released: a repeated END means our ENDAK was lost.
            if self.phase == Phase::Closed && p.end.is_some() {
                self.endak_due = true;
            }
            return;
        }
        self.last_heard = now;
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
                        self.bgnak_due = !self.confirmed;
                    }
                    self.bgn_echo = bgn.timestamp;
                } else {
                    self.confirmed = true;
                    self.bgnak_due = false;
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
            self.rst_out = Some(Rst {
                reason: RstReason::UnsupportedVersion,
                detail: SUPPORTED_VERSIONS,
            });
            self.fail(ConnectionError::VersionMismatch(u16::from(ack.version)));
            return;
        }
        self.confirmed = true;
        self.phase = Phase::Established;
        self.bgn_deadline = None;
        self.bgn_due = false;
        self.apply_peer_params(ack.rwnd, ack.max_datagram);
        if let Some(sample) = wire_elapsed(now.wire_timestamp(), ack.echo_timestamp) {
            self.rtt.update(sample);
        }
        let rb = self.new_recv(u64::from(ack.isn));
        self.recv = Some(rb);
        self.update_pacing(now);
        self.events.push_back(Event::Connected);
    }

    /// Expands a cumulative point reported by the peer; `None` if it is stale or impossible.
    fn reported_cum(&mut self, wire: u32) -> Option<u64> {
        let cum = expand(wire, self.send.una())?;
        if cum > self.send.next_seq() {
            self.stats.protocol_errors += 1;
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
                self.stats.protocol_errors += 1;
                malformed = true;
                cum
            }
        };
        let echo = stat.echo_timestamp;
        let next_stamp = self.peek_stamp(now);
        let mut cursor = cum;
        for (ws, we) in stat.gaps.iter() {
            let (Some(s), Some(e)) = (expand(ws, cursor), expand(we, cursor)) else {
                self.stats.protocol_errors += 1;
                covered = cursor;
                malformed = true;
                break;
            };
            if s < cursor || e <= s || e > covered {
                // A malformed list: trust nothing beyond the last valid gap.
                self.stats.protocol_errors += 1;
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
                    self.stats.losses_detected += 1;
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
            self.stats.protocol_errors += 1;
            self.after_ack(now, acked);
            return;
        };
        if s < cum || e < s || e > self.send.next_seq() {
            self.stats.protocol_errors += 1;
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
                    self.stats.losses_detected += 1;
                }
            }
        }
        self.after_ack(now, acked);
    }

    /// A report (STAT or USTAT) arrived: the peer is alive and the return path carries reports.
    fn peer_reporting(&mut self) {
        self.unanswered_polls.clear();
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
            self.stats.sd_discarded += 1;
            return;
        };
        let before = recv.readable();
        match recv.on_sd(seq, payload) {
            Arrival::New => {}
            Arrival::Duplicate => {
                self.stats.sd_duplicates += 1;
                return;
            }
            Arrival::NoRoom | Arrival::OutOfRange => {
                self.stats.sd_discarded += 1;
                return;
            }
        }
        if self.read_closed {
            recv.discard_readable();
        } else if recv.readable() > before && !self.readable_signalled {
            self.readable_signalled = true;
            self.events.push_back(Event::Readable);
        }
        if recv.is_complete() {
            self.endak_due = true;
            self.signal_peer_finished();
        }
    }

    fn signal_peer_finished(&mut self) {
        if !self.peer_finished_signalled {
            self.peer_finished_signalled = true;
            self.events.push_back(Event::PeerFinished);
        }
    }

    fn on_poll(&mut self, poll: &Poll) {
        let Some(recv) = self.recv.as_ref() else {
            return;
        };
        let cum = recv.cumulative();
        match expand(poll.next_seq, cum) {
            Some(ns) if ns >= cum && ns < cum + MAX_SEQ_SPAN => {
                self.stat_due = Some((poll.timestamp, ns));
                if recv.is_complete() {
                    self.endak_due = true;
                }
            }
            // An older POLL overtaken by a newer report: nothing to answer.
            Some(ns) if ns < cum => {}
            _ => self.stats.protocol_errors += 1,
        }
    }

    fn on_end(&mut self, end: &End) {
        let Some(recv) = self.recv.as_mut() else {
            return;
        };
        let Some(f) = expand(end.final_seq, recv.cumulative()) else {
            self.stats.protocol_errors += 1;
            return;
        };
        if !recv.set_final(f) {
            self.stats.protocol_errors += 1;
            return;
        }
        if recv.is_complete() {
            self.endak_due = true;
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
            self.events.push_back(Event::Writable);
        }
    }

    // ------------------------------------------------------------------ timers

    fn poll_interval(&self, now: Instant) -> Duration {
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
    /// clamped to the configured bounds.
    fn regular_poll_interval(&self) -> Duration {
        (self.rtt.srtt() / self.config.polls_per_rtt).clamp(
            Config::ms(self.config.min_poll_interval_ms),
            Config::ms(self.config.max_poll_interval_ms),
        )
    }

    /// How long a STAT may take to answer a POLL: srtt + 4·rttvar (at least the minimum POLL
    /// interval).
    fn answer_time(&self) -> Duration {
        (self.rtt.srtt() + 4 * self.rtt.rttvar()).max(Config::ms(self.config.min_poll_interval_ms))
    }

    /// POLLs sent more than an answer time ago with no STAT since.
    fn missed_polls(&self, now: Instant) -> u32 {
        let answer_time = self.answer_time();
        self.unanswered_polls
            .iter()
            .filter(|&&t| now.saturating_duration_since(t) >= answer_time)
            .count() as u32
    }

    /// Bytes the sender may have in flight: cwnd, plus, for the window controller outside
    /// small-window mode, the report allowance `cwnd · T / srtt` (at most cwnd), where T is the
    /// POLL interval (spec §7.2a). A STAT reports only what was sent before its POLL, so just
    /// before a report arrives the sender still counts a whole POLL interval of data that has
    /// reached the receiver; without the allowance the sending rate would be cwnd / (srtt + T)
    /// instead of TCP's cwnd / srtt.
    fn send_window(&self) -> u64 {
        let cwnd = self.controller.window();
        // Before the first RTT sample no report has come back: the first flight is the initial
        // window exactly.
        if !matches!(self.config.congestion, CongestionMode::Window)
            || self.small_window()
            || self.rtt.min().is_none()
        {
            return cwnd;
        }
        let srtt = self.rtt.srtt().as_micros().max(1);
        let interval = self.regular_poll_interval().as_micros().min(srtt);
        let allowance = (u128::from(cwnd) * interval / srtt) as u64;
        cwnd.saturating_add(allowance)
    }

    fn small_window(&self) -> bool {
        matches!(self.config.congestion, CongestionMode::Window)
            && self.controller.window()
                < u64::from(self.config.small_window_packets) * self.mss as u64
    }

    /// Whether the timer-driven POLL machinery is running (something is waiting for a report).
    fn poll_active(&self) -> bool {
        self.send.has_outstanding()
            || matches!(self.send_end, SendEnd::Sent(_))
            || (self.send.unsent() > 0 && self.rwnd_blocked())
    }

    fn rwnd_blocked(&self) -> bool {
        let len = self.send.next_new_len(self.mss);
        len > 0 && self.send.outstanding_charge() + sd_charge(len) > self.peer_rwnd
    }

    /// When the next POLL falls due, and what kind.
    fn next_poll(&self, now: Instant) -> Option<(Instant, PollKind)> {
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
        if !self.unanswered_polls.is_empty() {
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

    fn feedback_pending(&self) -> bool {
        self.stat_due.is_some()
            || self.window_update_due
            || self.recv.as_ref().is_some_and(RecvBuffer::has_ustat)
    }

    /// When a timer POLL will actually leave: a POLL that falls due while an SD is about to be
    /// released by the pacer (within one timer tick) waits for that SD and rides on it.
    fn effective_poll_time(&mut self, now: Instant) -> Option<Instant> {
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

    /// The earliest time at which this connection needs `handle_timeout` or `poll_transmit`.
    pub fn poll_timeout(&mut self, now: Instant) -> Option<Instant> {
        if !self.is_live() {
            return None;
        }
        let mut t = self.last_heard + Config::ms(self.config.dead_timeout_ms);
        if let Some(d) = self.bgn_deadline {
            t = t.min(d);
        }
        if let Some(p) = self.effective_poll_time(now) {
            t = t.min(p);
        }
        if let Some(next) = self.next_sd_time(now) {
            t = t.min(next);
        }
        if self.feedback_pending() {
            t = t.min(self.feedback_pacer.next_send_time(now, FEEDBACK_ESTIMATE));
        }
        Some(t)
    }

    /// Handles expired timers: dead-peer detection and BGN retransmission scheduling. Everything
    /// else time-driven happens in `poll_transmit`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.is_live() {
            return;
        }
        let dead = Config::ms(self.config.dead_timeout_ms);
        if now.saturating_duration_since(self.last_heard) >= dead {
            if self.role == Role::Initiator && !self.confirmed {
                self.fail(ConnectionError::HandshakeTimeout(now - self.created));
            } else {
                self.rst_out = Some(Rst {
                    reason: RstReason::Timeout,
                    detail: 0,
                });
                self.fail(ConnectionError::TimedOut(dead));
            }
            return;
        }
        if let Some(d) = self.bgn_deadline {
            if now >= d {
                self.bgn_due = true;
                self.bgn_retries += 1;
                let backoff = Config::ms(self.config.handshake_timeout_ms)
                    * (1u32 << self.bgn_retries.min(6));
                self.bgn_deadline = Some(now + backoff);
            }
        }
    }

    // ------------------------------------------------------------------ transmitting

    /// The next SD the windows let go, as (the sequence number of a retransmission, or None for new
    /// data; payload length).
    fn sd_candidate(&mut self) -> Option<(Option<u64>, usize)> {
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
        let len = self.send.next_new_len(self.mss);
        if len == 0 {
            return None;
        }
        let window_ok = self.send.in_flight() == 0 || self.send.in_flight() + len as u64 <= cwnd;
        let rwnd_ok = self.send.outstanding_charge() + sd_charge(len) <= self.peer_rwnd;
        let span_ok = self.send.outstanding_count() < MAX_SEQ_SPAN;
        (window_ok && rwnd_ok && span_ok).then_some((None, len))
    }

    /// When the next SD may leave if the window allows one now (pacing), else `None`.
    fn next_sd_time(&mut self, now: Instant) -> Option<Instant> {
        let (_, len) = self.sd_candidate()?;
        Some(self.pacer.next_send_time(now, len + HEADER_LEN))
    }

    /// Writes the next datagram into `buf` (appending) and returns its length, or `None` when
    /// nothing is due now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        if let Some(rst) = self.rst_out.take() {
            let mut p = Packet::new(self.header());
            p.rst = Some(rst);
            return Some(self.emit(&p, buf));
        }
        if !self.is_live() {
            let fin = self.recv.as_ref().and_then(RecvBuffer::final_seq);
            if let (Phase::Closed, true, Some(f)) = (&self.phase, self.endak_due, fin) {
                self.endak_due = false;
                let mut p = Packet::new(self.header());
                p.endak = Some(EndAck {
                    final_seq: to_wire(f),
                });
                return Some(self.emit(&p, buf));
            }
            return None;
        }
        let max = self.peer_max_datagram;
        let mut p = Packet::new(self.header());
        let mut used = HEADER_LEN;
        let mut must_send = false;

        // Handshake: BGN on every initiator datagram and BGNAK on every responder datagram until
        // the other side is known to have the connection.
        if !self.confirmed {
            match self.role {
                Role::Initiator => {
                    p.bgn = Some(Bgn {
                        isn: to_wire(self.local_isn),
                        rwnd: self.advertised_window() as u32,
                        max_datagram: self.config.max_datagram_bytes,
                        versions: SUPPORTED_VERSIONS,
                        timestamp: self.peek_stamp(now),
                    });
                    used += BGN_LEN;
                    must_send |= self.bgn_due;
                }
                Role::Responder => {
                    p.bgnak = Some(Bgnak {
                        isn: to_wire(self.local_isn),
                        version: VERSION,
                        rwnd: self.advertised_window() as u32,
                        max_datagram: self.config.max_datagram_bytes,
                        echo_timestamp: self.bgn_echo,
                    });
                    used += BGNAK_LEN;
                    must_send |= self.bgnak_due;
                    self.bgnak_due = false;
                }
            }
        }

        // Receiver side: STAT (complete report), else USTAT or window update; ENDAK. Feedback that
        // would travel alone waits for the reverse budget (a waiting STAT answers the latest POLL).
        let mut gap_list: Vec<(u32, u32)> = Vec::new();
        let sd_ready = match self.sd_candidate() {
            Some((_, len)) => self.pacer.can_send(now, len + HEADER_LEN),
            None => false,
        };
        let feedback_ok = sd_ready || self.feedback_pacer.can_send(now, FEEDBACK_ESTIMATE);
        let stat_due = if feedback_ok {
            self.stat_due.take()
        } else {
            None
        };
        if let (Some((echo, ns)), Some(recv)) = (stat_due, self.recv.as_mut()) {
            let room = max.saturating_sub(used + STAT_FIXED_LEN + ENDAK_LEN + POLL_LEN + END_LEN);
            let (gaps, covered, partial) = recv.stat_report(ns, (room / GAP_LEN).max(1));
            gap_list = gaps
                .iter()
                .map(|&(a, b)| (to_wire(a), to_wire(b)))
                .collect();
            recv.clear_ustats();
            let window = recv.window();
            p.stat = Some(Stat {
                cum: to_wire(recv.cumulative()),
                partial,
                covered_to: to_wire(covered),
                echo_timestamp: echo,
                rwnd: window.min(u64::from(u32::MAX)) as u32,
                gaps: Gaps::List(&[]),
            });
            self.last_advertised_window = window;
            self.window_update_due = false;
            used += STAT_FIXED_LEN + gap_list.len() * GAP_LEN;
            must_send = true;
        } else if let (Some(recv), true) = (self.recv.as_mut(), feedback_ok) {
            let gap = recv.pop_ustat();
            if gap.is_some() || self.window_update_due {
                let cum = recv.cumulative();
                let (a, b) = gap.unwrap_or((cum, cum));
                let window = recv.window();
                p.ustat = Some(Ustat {
                    cum: to_wire(cum),
                    rwnd: window.min(u64::from(u32::MAX)) as u32,
                    gap_start: to_wire(a),
                    gap_end: to_wire(b),
                });
                self.last_advertised_window = window;
                self.window_update_due = false;
                used += USTAT_LEN;
                must_send = true;
            }
        }
        if self.endak_due {
            self.endak_due = false;
            if let Some(f) = self.recv.as_ref().and_then(RecvBuffer::final_seq) {
                p.endak = Some(EndAck {
                    final_seq: to_wire(f),
                });
                used += ENDAK_LEN;
                must_send = true;
                self.endak_sent = true;
            }
        }

        // Sender side: an SD if window and pacer allow, then whether a POLL (and END) rides along.
        let granularity = Duration::from_micros(u64::from(self.config.pacing_granularity_us));
        let mut sd: Option<Bytes> = None;
        if let Some((retx, len)) = self.sd_candidate() {
            // A retransmission keeps its original size: an SD cut before the peer's limit was
            // known (fast start) may exceed it, and the responder accepts datagrams up to the
            // size the initiator announced in its BGN.
            let limit = if retx.is_some() {
                max.max(len + SD_RESERVE)
            } else {
                max
            };
            if used + len + POLL_LEN + END_LEN <= limit
                && self.pacer.can_send(now, len + HEADER_LEN)
            {
                let stamp = self.next_sd_stamp(now);
                let taken = if let Some(seq) = retx {
                    self.send.pop_retx(seq, stamp)
                } else {
                    self.send.packetize(len, stamp)
                };
                if let Some((seq, payload)) = taken {
                    self.pacer.on_sent(payload.len() + HEADER_LEN);
                    if retx.is_some() {
                        self.stats.retransmitted_packets += 1;
                        self.stats.retransmitted_bytes += payload.len() as u64;
                    } else {
                        self.sds_since_poll += 1;
                    }
                    p.header.seq = to_wire(seq);
                    self.zero_window_probes = 0;
                    sd = Some(payload);
                }
            }
        }
        if self.send_end == SendEnd::Requested && self.send.unsent() == 0 {
            self.send_end = SendEnd::Sent(self.send.next_seq());
        }
        let end_final = match self.send_end {
            SendEnd::Sent(f) => Some(f),
            _ => None,
        };

        let poll = self.next_poll(now);
        let timer_due = self.effective_poll_time(now).is_some_and(|t| t <= now);
        let mut forced = false;
        let mut early_timer = false;
        if sd.is_some() {
            // Held back by the window or the pacer (not by the application, nor by the peer's
            // receive window alone).
            if (self.send.unsent() > 0 && !self.rwnd_blocked()) || self.send.has_retx() {
                self.was_cwnd_limited = true;
            }
            let window_end = self.sd_candidate().is_none();
            forced |= window_end && self.small_window();
            // A POLL due "around the same time" rides on this SD: within half a POLL interval
            // (at least one timer tick). Timer POLLs tend to fall due just as the window fills,
            // when no SD could carry them.
            let tolerance = (self.poll_interval(now) / 2).max(granularity);
            early_timer = poll.is_some_and(|(t, _)| t <= now + tolerance);
            forced |=
                self.config.poll_every_sds > 0 && self.sds_since_poll >= self.config.poll_every_sds;
            forced |= end_final.is_some();
        }
        forced |= self.bgn_due && (sd.is_some() || self.send.has_outstanding());
        forced |= end_final.is_some() && !self.end_sent_once;
        let forced_by_other = forced;
        forced |= early_timer;
        if forced || timer_due {
            let keepalive = sd.is_none()
                && !self.send.has_outstanding()
                && matches!(poll, Some((_, PollKind::Keepalive)));
            let stamp = self.next_stamp(now);
            p.poll = Some(Poll {
                next_seq: to_wire(self.send.next_seq()),
                keepalive,
                timestamp: stamp,
            });
            if keepalive {
                self.stats.keepalives_sent += 1;
            }
            if sd.is_some() {
                self.stats.polls_piggybacked += 1;
            }
            // A timer POLL sent early (piggybacked) keeps its scheduled slot, so piggybacking
            // never raises the POLL rate.
            let slot = poll.map_or(
                now,
                |(t, _)| if t > now && !forced_by_other { t } else { now },
            );
            self.note_poll_sent(now, stamp);
            self.poll_anchor = slot.max(now);
            if let Some(f) = end_final {
                p.end = Some(End {
                    final_seq: to_wire(f),
                });
                self.end_sent_once = true;
            }
            must_send = true;
        }
        if self.role == Role::Initiator {
            self.bgn_due = false;
        }
        if !must_send && sd.is_none() {
            return None;
        }
        if let Some(payload) = &sd {
            p.payload = payload;
        }
        if let Some(stat) = p.stat.as_mut() {
            stat.gaps = Gaps::List(&gap_list);
        }
        let n = self.emit(&p, buf);
        if sd.is_none() && (p.stat.is_some() || p.ustat.is_some()) {
            self.feedback_pacer.on_sent(n);
        }
        self.check_closed();
        Some(n)
    }

    fn note_poll_sent(&mut self, now: Instant, stamp: u32) {
        if self.rwnd_blocked() && !self.send.has_outstanding() {
            self.zero_window_probes += 1;
        }
        self.last_poll_stamp = Some(stamp);
        self.poll_anchor = now;
        self.polled_since_report = true;
        self.sds_since_poll = 0;
        if self.unanswered_polls.len() >= MAX_TRACKED_POLLS {
            self.unanswered_polls.pop_front();
        }
        self.unanswered_polls.push_back(now);
        if self.missed_polls(now) >= self.config.poll_miss_threshold && !self.collapsed_this_silence
        {
            self.collapsed_this_silence = true;
            self.controller.on_unresponsive(stamp);
            self.stats.window_collapses += 1;
            self.update_pacing(now);
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
        let n = p.emit(buf);
        self.stats.record_sent(p.types(), n, p.payload.len());
        n
    }
}
