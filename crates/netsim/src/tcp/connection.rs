//! One TCP connection in the sans-IO style: segments and the current time go in
//! (`on_segment`, `on_timeout`), segments and the next deadline come out (`poll_segment`,
//! `poll_timeout`), application bytes are counted through `write`/`close`/`read`. It holds the
//! handshake, the sender (slow start, congestion avoidance policies, byte counting, Reno /
//! NewReno / SACK-Reno / SACK-NewReno loss recovery, RFC 6298 timer) and the receiver (reassembly,
//! delayed ACKs, SACK blocks, offered window).
//!
//! Sequence numbers are 64-bit and never wrap; both ends use an initial sequence number of 0, so
//! data byte `i` of a stream has sequence number `i + 1`.

use super::config::{
    IncreasePolicy, TcpConfig, CUBIC_BETA, CUBIC_C, MAX_WINDOW_BYTES, UNSCALED_WINDOW_BYTES,
};
use super::ranges::RangeSet;
use super::receiver::Receiver;
use super::rto::RtoEstimator;
use super::TcpSegment;
use crate::sim::{Time, SEC};
use std::collections::VecDeque;

/// Most SACKed ranges the sender remembers (more would need a window of > 1024 holes).
const MAX_SCOREBOARD_RANGES: usize = 1024;
/// Most retransmissions waiting to be sent; at most one is queued per ACK and `poll_segment`
/// drains them, so this is never reached in practice.
const MAX_PENDING_RETRANSMISSIONS: usize = 64;
/// New segments ns-2's NewReno of 1997 sends at most on one ACK in fast recovery
/// (`tcp-newreno.cc` v1.7: `send(0, 0, 2)`).
const NS2_RECOVERY_BURST: u32 = 2;

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpState {
    /// Passive, waiting for a SYN.
    Listen,
    /// Active, SYN sent, waiting for the SYN-ACK.
    SynSent,
    /// Passive, SYN-ACK sent, waiting for its acknowledgement.
    SynReceived,
    /// Data may flow both ways (FINs are tracked separately).
    Established,
    /// Reset by the peer or the handshake failed after `max_syn_retries` retransmissions.
    Closed,
}

/// The sender's loss-recovery phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryState {
    /// No loss being repaired.
    #[default]
    Open,
    /// Fast retransmit / fast recovery after duplicate ACKs.
    FastRecovery,
    /// After a retransmission timeout, until everything outstanding at the timeout is acked.
    Loss,
}

/// Counters and the current congestion state of one connection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TcpStats {
    /// Segments sent, of any kind.
    pub segments_sent: u64,
    /// Bytes on the wire: IP and TCP headers, options and data.
    pub wire_bytes_sent: u64,
    /// Segments carrying data.
    pub data_segments_sent: u64,
    /// Data bytes sent, retransmissions included.
    pub data_bytes_sent: u64,
    /// ACKs without data, SYN or FIN.
    pub pure_acks_sent: u64,
    /// Segments sent again (data, SYN or FIN), whatever the reason.
    pub retransmitted_segments: u64,
    /// Data bytes sent again.
    pub retransmitted_bytes: u64,
    /// Retransmission timeouts of data or FIN (not SYN, not zero-window probes).
    pub timeouts: u64,
    /// SYN or SYN-ACK retransmissions.
    pub syn_retransmissions: u64,
    /// Fast retransmits (entries into fast recovery).
    pub fast_retransmits: u64,
    pub segments_received: u64,
    pub dupacks_received: u64,
    /// Data bytes of this side acknowledged by the peer.
    pub data_bytes_acked: u64,
    /// Data bytes received in order from the peer.
    pub data_bytes_received: u64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Slow-start threshold, bytes.
    pub ssthresh_bytes: u64,
    /// Smoothed RTT as the (coarse) retransmission clock measures it.
    pub srtt_ns: Option<Time>,
    /// Smoothed RTT from exact clock readings (what a timestamp option would give).
    pub exact_srtt_ns: Option<Time>,
    /// Current retransmission timeout, backoff included.
    pub rto_ns: Time,
    pub recovery: RecoveryState,
}

/// Delayed-ACK bookkeeping of the receiving side.
#[derive(Debug, Clone, Default)]
struct AckState {
    /// An ACK must go out with the next segment, or alone.
    now: bool,
    /// In-order data segments not yet acknowledged.
    unacked_segments: u32,
    /// When the delayed ACK is due.
    deadline: Option<Time>,
}

/// One end of a TCP connection.
#[derive(Debug, Clone)]
pub struct TcpConnection {
    config: TcpConfig,
    mss: u64,
    state: TcpState,
    iss: u64,

    // Handshake.
    /// A SYN (active) or SYN-ACK (passive) must be sent.
    syn_pending: bool,
    syn_retries: u32,
    peer_sack: bool,
    peer_window_scaling: bool,
    /// T/TCP (passive side): the peer's SYN carried data (or a FIN), both ends run T/TCP and
    /// the TAO test passed, so the data is delivered at once and the reply may leave with the
    /// SYN-ACK, before the handshake completes.
    tao_accepted: bool,
    /// T/TCP (passive side): whether this host's TAO cache holds a connection count of the peer
    /// (RFC 1644 §3.2: the test passes for a SYN whose CC exceeds the cached one, and a
    /// client's counts only grow, so it passes exactly when the peer is cached). Default true.
    tao_cached: bool,
    /// T/TCP after a failed TAO test: the SYN's data and FIN, held (unacknowledged) until the
    /// three-way handshake completes (RFC 1644 §3.3).
    held_syn: Option<TcpSegment>,
    /// T/TCP: the SYN-ACK waits (up to the delayed-ACK timer) to ride on the reply, as BSD's
    /// T/TCP delays it after a SYN that carried a FIN.
    syn_ack_delayed: bool,

    // Send sequence space.
    snd_una: u64,
    snd_nxt: u64,
    snd_max: u64,
    snd_wnd: u64,
    max_sndwnd: u64,
    /// Sequence number one past the last byte the application wrote.
    write_end: u64,
    /// `close` was called: a FIN follows the data, at `write_end`.
    closing: bool,

    // Congestion control and loss recovery.
    cwnd: u64,
    cwnd_frac: f64,
    ssthresh: u64,
    dupacks: u32,
    recovery: RecoveryState,
    /// Appendix A rule 1: `snd_max` when the current recovery began.
    snd_recover: u64,
    /// `snd_max` at the last timeout (end of the Loss phase).
    loss_recover: u64,
    /// `snd_una` at the last timeout, to hold ssthresh on repeated timeouts of one segment.
    timeout_una: Option<u64>,
    /// Everything below this was already retransmitted (SACK recovery).
    rexmit_hwm: u64,
    /// Sender's SACK scoreboard.
    scoreboard: RangeSet,
    /// Starts of retransmissions decided at ACK time, sent by `poll_segment`.
    rexmit_queue: VecDeque<u64>,
    rto: RtoEstimator,
    /// The segment being timed: (sequence number, time sent).
    timing: Option<(u64, Time)>,
    rtx_deadline: Option<Time>,
    /// The next data segment is a one-byte zero-window probe.
    force_probe: bool,
    /// A zero-window probe is outstanding.
    probing: bool,
    /// TS.Recent (RFC 7323): the TSval to echo, 0 for none.
    ts_recent: u64,
    /// The acknowledgement number last sent (RFC 7323 Last.ACK.sent).
    last_ack_sent: u64,
    /// TSecr of the ACK being processed.
    echoed: u64,
    /// CUBIC: window at the last reduction (segments), start of the current growth epoch, K
    /// (seconds), and the Reno-friendly estimate (segments).
    cubic_w_max: f64,
    cubic_epoch: Option<Time>,
    cubic_k: f64,
    cubic_w_est: f64,
    /// The window when ssthresh was last set (RFC 9438 `cwnd_prior`).
    cubic_prior: f64,
    /// PRR (RFC 6937) state of the current recovery: flight at entry, bytes reported delivered,
    /// bytes sent, and how many bytes may be sent now.
    prr_recover_fs: u64,
    prr_delivered: u64,
    prr_out: u64,
    prr_allow: u64,
    /// ns-2's Sack1 (`TcpConfig::ns2_recovery` with SACK): its estimate of the segments in
    /// the network during fast recovery (`pipe_`), bytes; it may go below zero.
    pipe: i64,
    /// ns-2's Sack1 `timeout_`: a timeout happened and no ACK of new data came since, so
    /// duplicate ACKs are ignored.
    sack1_timed_out: bool,
    /// ns-2's NewReno (`TcpConfig::ns2_recovery` without SACK): `cwnd_` after the fast
    /// retransmit halved it (`closecwnd(1)`: ⌊window()⌋ / 2 whole segments, which may be
    /// below ssthresh's floor of two), what a partial ACK and the end of recovery return to.
    ns2_halved: u64,
    /// ns-2's `rtt_active_` / `rtt_seq_` (`TcpConfig::ns2_timer`): the first new segment sent
    /// since the last timeout or fast retransmit, recovery or not; the ACK beyond it ends the
    /// backoff (`t_backoff_ = 1`) after the timer was set. Separate from `timing`, which gives
    /// the samples and is cleared by any retransmission (Karn).
    ns2_rtt_seq: Option<u64>,
    /// ns-2's Sack1 after a timeout (`recover_cause_` RECOVER_TIMEOUT): `snd_max` at the
    /// timeout; no fast retransmit until an ACK goes beyond it.
    sack1_timeout_recover: Option<u64>,
    /// ns-2's NewReno (`TcpConfig::ns2_recovery` without SACK): how many new segments the
    /// ACK being answered may still send (`send(0, 0, 2)` in fast recovery, none on the first
    /// duplicate ACKs), `None` for no limit (`maxburst_ 0`).
    ns2_burst: Option<u32>,
    /// ns-2's timer (`TcpConfig::ns2_timer`): each segment in flight (its first sequence
    /// number) and when it was last sent, the time stamp ns-2's sink echoes in the ACK the
    /// segment's arrival triggers.
    ns2_sent: VecDeque<(u64, Time)>,

    // Receive side.
    rcv: Option<Receiver>,
    ack: AckState,
    last_window_sent: u64,

    stats: TcpStats,
}

impl TcpConnection {
    fn new(config: TcpConfig, state: TcpState) -> Self {
        let mss = config.mss();
        let rto = RtoEstimator::new(
            config.clock_granularity_ns,
            config.min_rto_ns.max(1),
            config.max_rto_ns,
            config.initial_rto_ns.max(1),
        )
        .with_coarse_timer(config.coarse_timer)
        .with_ns2_timer(config.ns2_timer);
        let iss = 0;
        TcpConnection {
            mss,
            state,
            iss,
            syn_pending: state == TcpState::SynSent,
            tao_accepted: false,
            tao_cached: true,
            held_syn: None,
            syn_ack_delayed: false,
            syn_retries: 0,
            peer_sack: false,
            peer_window_scaling: false,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_sndwnd: 0,
            write_end: iss + 1,
            closing: false,
            cwnd: config.initial_window.bytes(mss),
            cwnd_frac: 0.0,
            ssthresh: config.initial_ssthresh_bytes.max(2 * mss),
            dupacks: 0,
            recovery: RecoveryState::Open,
            snd_recover: iss,
            loss_recover: iss,
            timeout_una: None,
            rexmit_hwm: iss,
            scoreboard: RangeSet::new(MAX_SCOREBOARD_RANGES),
            rexmit_queue: VecDeque::new(),
            rto,
            timing: None,
            rtx_deadline: None,
            force_probe: false,
            probing: false,
            ts_recent: 0,
            last_ack_sent: 0,
            echoed: 0,
            cubic_w_max: 0.0,
            cubic_epoch: None,
            cubic_k: 0.0,
            cubic_w_est: 0.0,
            cubic_prior: 0.0,
            prr_recover_fs: 0,
            prr_delivered: 0,
            prr_out: 0,
            prr_allow: 0,
            pipe: 0,
            sack1_timed_out: false,
            ns2_halved: 0,
            ns2_rtt_seq: None,
            sack1_timeout_recover: None,
            ns2_burst: None,
            ns2_sent: VecDeque::new(),
            rcv: None,
            ack: AckState::default(),
            last_window_sent: 0,
            stats: TcpStats::default(),
            config,
        }
    }

    /// An active opener: the first `poll_segment` returns its SYN. The configuration should have
    /// passed `validate` (out-of-range values are clamped, never a panic).
    pub fn new_active(_now: Time, config: TcpConfig) -> Self {
        TcpConnection::new(config, TcpState::SynSent)
    }

    /// A passive opener waiting for a SYN.
    pub fn new_passive(_now: Time, config: TcpConfig) -> Self {
        TcpConnection::new(config, TcpState::Listen)
    }

    /// T/TCP, passive side, before the SYN arrives: whether this host's TAO cache holds a
    /// connection count of the peer (default true). Without one the TAO test fails (RFC 1644
    /// §3.3): the SYN's data and FIN wait, unacknowledged, for the three-way handshake, and
    /// the reply for them. The driver keeps the cache (a host caches a peer once a connection
    /// with it completes its handshake or passes the test).
    pub fn set_tao_cached(&mut self, cached: bool) {
        self.tao_cached = cached;
    }

    // ----- application interface -----

    /// Offers `bytes` more application bytes; returns how many the send buffer accepted (none
    /// after `close`).
    pub fn write(&mut self, bytes: u64) -> u64 {
        if self.closing || self.state == TcpState::Closed {
            return 0;
        }
        let unacked = self.write_end - self.snd_una.max(self.iss + 1);
        let space = self.config.send_buffer_bytes.saturating_sub(unacked);
        // Keep sequence numbers far from overflow whatever the caller asks for.
        let room = (u64::MAX / 4).saturating_sub(self.write_end);
        let n = bytes.min(space).min(room);
        self.write_end += n;
        // ns-2's advanceby sends with maxburst_ (no limit).
        self.ns2_burst = None;
        n
    }

    /// Sends a FIN after all data written so far; later writes are refused.
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Takes up to `max` bytes delivered in order; returns how many.
    pub fn read(&mut self, max: u64) -> u64 {
        let Some(rcv) = self.rcv.as_mut() else {
            return 0;
        };
        let n = rcv.read(max);
        // Tell the peer when the window opened a lot since it last heard.
        let w = rcv.window();
        let threshold = (2 * self.mss).min(self.config.recv_buffer_bytes / 2).max(1);
        if n > 0 && w >= self.last_window_sent.saturating_add(threshold) {
            self.ack.now = true;
        }
        n
    }

    /// In-order bytes waiting to be read.
    pub fn readable(&self) -> u64 {
        self.rcv.as_ref().map_or(0, Receiver::readable)
    }

    /// The peer's FIN arrived (in order), whether or not everything before it was read.
    pub fn peer_fin_received(&self) -> bool {
        self.rcv.as_ref().is_some_and(Receiver::fin_received)
    }

    /// The peer's FIN arrived and everything before it was read.
    pub fn peer_finished(&self) -> bool {
        self.rcv.as_ref().is_some_and(Receiver::finished)
    }

    /// The handshake completed (and the connection was not reset).
    pub fn is_established(&self) -> bool {
        self.state == TcpState::Established
    }

    /// `close` was called and the peer acknowledged every byte and the FIN.
    pub fn is_send_complete(&self) -> bool {
        self.closing && self.snd_una > self.write_end
    }

    pub fn state(&self) -> TcpState {
        self.state
    }

    /// Bytes written but not yet acknowledged by the peer.
    pub fn unacked_bytes(&self) -> u64 {
        self.write_end - self.snd_una.max(self.iss + 1).min(self.write_end)
    }

    // ----- inspection -----

    /// Counters and current congestion state.
    pub fn stats(&self) -> TcpStats {
        TcpStats {
            cwnd_bytes: self.cwnd,
            ssthresh_bytes: self.ssthresh,
            srtt_ns: self.rto.srtt(),
            exact_srtt_ns: self.rto.exact_srtt(),
            rto_ns: self.rto.rto(),
            recovery: self.recovery,
            data_bytes_acked: self.data_acked(),
            data_bytes_received: self.rcv.as_ref().map_or(0, Receiver::data_received),
            ..self.stats.clone()
        }
    }

    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    /// Segments sent again so far (cheaper than `stats().retransmitted_segments`).
    pub fn retransmissions(&self) -> u64 {
        self.stats.retransmitted_segments
    }

    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    pub fn recovery(&self) -> RecoveryState {
        self.recovery
    }

    pub fn config(&self) -> &TcpConfig {
        &self.config
    }

    /// Data bytes of this side the peer acknowledged.
    pub fn data_acked(&self) -> u64 {
        self.snd_una
            .saturating_sub(self.iss + 1)
            .min(self.write_end - (self.iss + 1))
    }

    /// Highest data offset sent so far (one past the last byte).
    pub fn highest_data_sent(&self) -> u64 {
        self.snd_max
            .saturating_sub(self.iss + 1)
            .min(self.write_end - (self.iss + 1))
    }

    /// Sequence numbers sent and not yet acknowledged.
    pub fn flight_size(&self) -> u64 {
        self.snd_max - self.snd_una
    }

    /// The receive window this side offers now.
    pub fn offered_window(&self) -> u64 {
        self.local_window()
    }

    /// How many times the retransmission timeout is doubled now (tests of ns-2's backoff).
    #[cfg(test)]
    pub(crate) fn rto_backoff(&self) -> u32 {
        self.rto.backoff()
    }

    // ----- driver interface -----

    /// When `on_timeout` must next be called, if a timer runs.
    pub fn poll_timeout(&self) -> Option<Time> {
        match (self.rtx_deadline, self.ack.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires the timers due at `now`.
    pub fn on_timeout(&mut self, now: Time) {
        if self.ack.deadline.is_some_and(|d| d <= now) {
            self.ack.deadline = None;
            self.ack.now = true;
        }
        if self.rtx_deadline.is_some_and(|d| d <= now) {
            self.rtx_deadline = None;
            self.retransmission_timeout(now);
        }
    }

    /// The next segment to send now, or `None`. Call until `None` after every input.
    pub fn poll_segment(&mut self, now: Time) -> Option<TcpSegment> {
        match self.state {
            TcpState::Listen | TcpState::Closed => return None,
            TcpState::SynSent => {
                if self.syn_pending {
                    return Some(self.emit_syn(now));
                }
                if self.config.data_on_syn {
                    return self.next_data(now);
                }
                return None;
            }
            TcpState::SynReceived => {
                if self.syn_pending {
                    // A delayed T/TCP SYN-ACK goes with the reply, once the application has
                    // written (or closed), or alone when the delayed-ACK timer fires.
                    let wait = self.syn_ack_delayed
                        && self.write_end == self.iss + 1
                        && !self.closing
                        && !self.ack.now;
                    if wait {
                        return None;
                    }
                    self.syn_ack_delayed = false;
                    return Some(self.emit_syn(now));
                }
                if self.tao_accepted {
                    // T/TCP: the rest of the reply's initial window without waiting for the
                    // handshake's ACK.
                    if let Some(seg) = self.next_data(now) {
                        return Some(seg);
                    }
                }
            }
            TcpState::Established => {}
        }
        while !self.prr_blocks_sending() {
            let Some(start) = self.rexmit_queue.pop_front() else {
                break;
            };
            if let Some(seg) = self.retransmit(now, start) {
                return Some(seg);
            }
        }
        if self.sack1() && self.recovery == RecoveryState::FastRecovery {
            if let Some(seg) = self.sack1_send(now) {
                return Some(seg);
            }
        } else if self.state == TcpState::Established {
            if let Some(seg) = self.next_data(now) {
                return Some(seg);
            }
            self.arm_persist(now);
        }
        if self.ack.now || self.ack.deadline.is_some_and(|d| d <= now) {
            let seq = self.snd_nxt.max(self.iss + 1);
            return Some(self.emit(now, seq, 0, false, false, false));
        }
        None
    }

    /// Processes an arriving segment.
    pub fn on_segment(&mut self, now: Time, seg: &TcpSegment) {
        self.stats.segments_received += 1;
        if seg.rst {
            if self.state != TcpState::Listen {
                self.state = TcpState::Closed;
                self.rtx_deadline = None;
                self.ack.deadline = None;
            }
            return;
        }
        match self.state {
            TcpState::Closed => {}
            TcpState::Listen => {
                if seg.syn && !seg.ack_flag {
                    self.accept_syn(seg);
                    self.state = TcpState::SynReceived;
                    self.syn_pending = true;
                    let carries = seg.len > 0 || seg.fin;
                    self.tao_accepted = self.config.data_on_syn && carries && self.tao_cached;
                    self.snd_wnd = seg.window;
                    self.max_sndwnd = seg.window;
                    if self.tao_accepted || !self.config.data_on_syn {
                        self.receive(now, seg.seq.saturating_add(1), seg);
                    } else if carries {
                        // TAO test failed: the data waits for the handshake, unacknowledged.
                        self.held_syn = Some(seg.clone());
                    }
                    // The SYN-ACK acknowledges whatever came with the SYN.
                    self.ack = AckState::default();
                    if self.tao_accepted && seg.fin && self.config.delayed_ack {
                        // BSD T/TCP: after a SYN with a FIN (a whole request), hold the SYN-ACK
                        // for the delayed-ACK timer in the hope of sending it with the reply.
                        // Otherwise it goes at once, in case the peer is slow-starting (BSD
                        // also holds it for data alone from a host on a local network; our
                        // paths are not local).
                        self.syn_ack_delayed = true;
                        self.ack.deadline = Some(self.delayed_ack_deadline(now));
                    }
                }
            }
            TcpState::SynSent => {
                let acceptable = seg.ack > self.iss && seg.ack <= self.snd_max;
                if seg.syn && seg.ack_flag && acceptable {
                    self.accept_syn(seg);
                    self.state = TcpState::Established;
                    if self.syn_retries > 0 {
                        // RFC 3390: after a lost SYN the initial window is one segment.
                        self.cwnd = self.cwnd.min(self.mss);
                    }
                    self.process_ack(now, seg, false);
                    self.receive(now, seg.seq.saturating_add(1), seg);
                    if seg.len == 0 && !seg.fin {
                        // A bare SYN-ACK is acknowledged at once. One carrying T/TCP reply data
                        // is acknowledged as data is (BSD's T/TCP delays it, unless a FIN
                        // came too).
                        self.ack.now = true;
                    }
                }
            }
            TcpState::SynReceived => {
                if seg.syn && !seg.ack_flag {
                    // Our SYN-ACK was lost: the peer sent its SYN again.
                    self.syn_pending = true;
                    return;
                }
                if seg.ack_flag {
                    if seg.ack <= self.iss || seg.ack > self.snd_max {
                        return;
                    }
                    self.state = TcpState::Established;
                    // T/TCP: an ACK of reply data sent with the SYN-ACK opens the window as
                    // any ACK of data does.
                    let grow = self.tao_accepted && seg.ack > self.iss + 1;
                    self.process_ack(now, seg, grow);
                    if let Some(held) = self.held_syn.take() {
                        // After a failed TAO test: the SYN's data and FIN, now acceptable.
                        self.receive(now, held.seq.saturating_add(1), &held);
                    }
                }
                // T/TCP data may come before the handshake completes.
                self.receive(now, seg.seq, seg);
            }
            TcpState::Established => {
                if seg.syn {
                    // A retransmitted SYN or SYN-ACK: our acknowledgement was lost.
                    self.ack.now = true;
                    return;
                }
                if seg.ack_flag {
                    self.process_ack(now, seg, true);
                }
                self.receive(now, seg.seq, seg);
            }
        }
    }

    // ----- handshake -----

    fn accept_syn(&mut self, seg: &TcpSegment) {
        self.peer_sack = seg.sack_permitted;
        self.peer_window_scaling = seg.window_scaling;
        let cap = if self.config.window_scaling && seg.window_scaling {
            MAX_WINDOW_BYTES
        } else {
            UNSCALED_WINDOW_BYTES
        };
        self.rcv = Some(Receiver::new(
            seg.seq.saturating_add(1),
            self.config.recv_buffer_bytes,
            cap,
        ));
        // From here the peer reckons with the whole (scaled) window, not a SYN's 16-bit one:
        // no window update is owed for the difference (BSD sets rcv_adv here).
        self.last_window_sent = self.local_window();
    }

    fn emit_syn(&mut self, now: Time) -> TcpSegment {
        self.syn_pending = false;
        let mut len = 0;
        let mut fin = false;
        let carries_data = (self.state == TcpState::SynSent && self.config.data_on_syn)
            || (self.state == TcpState::SynReceived && self.tao_accepted);
        if carries_data {
            let start = self.iss + 1;
            len = self
                .mss
                .min(self.write_end - start)
                .min(self.cwnd.max(self.mss));
            fin = self.closing && start + len == self.write_end;
        }
        self.emit(now, self.iss, len, true, fin, true)
    }

    // ----- receiving -----

    fn sack_ok(&self) -> bool {
        self.config.sack_permitted && self.peer_sack
    }

    fn sack_in_use(&self) -> bool {
        self.sack_ok() && self.config.variant.uses_sack()
    }

    /// Data and FIN of `seg`, whose data starts at `data_seq`.
    fn receive(&mut self, now: Time, data_seq: u64, seg: &TcpSegment) {
        if seg.len == 0 && !seg.fin {
            return;
        }
        let Some(rcv) = self.rcv.as_mut() else {
            return;
        };
        // RFC 7323: remember TSval of a segment at or below the last acknowledgement sent.
        if seg.ts_val > 0 && data_seq <= self.last_ack_sent {
            self.ts_recent = seg.ts_val;
        }
        let a = rcv.on_data(data_seq, u64::from(seg.len), seg.fin);
        let immediate =
            a.out_of_order || a.filled_hole || a.duplicate || a.fin || !self.config.delayed_ack;
        if immediate {
            self.ack.now = true;
            return;
        }
        if a.in_order_bytes > 0 {
            self.ack.unacked_segments += 1;
            if self.ack.unacked_segments >= self.config.ack_every_segments {
                self.ack.now = true;
            } else if self.ack.deadline.is_none() {
                self.ack.deadline = Some(self.delayed_ack_deadline(now));
            }
        }
    }

    /// When an ACK delayed at `now` is due: the timeout after `now`, or BSD's next fast-timer
    /// tick.
    fn delayed_ack_deadline(&self, now: Time) -> Time {
        let t = self.config.delayed_ack_timeout_ns.max(1);
        if self.config.delayed_ack_on_ticks {
            (now / t + 1).saturating_mul(t)
        } else {
            now.saturating_add(t)
        }
    }

    fn local_window(&self) -> u64 {
        match &self.rcv {
            Some(r) => r.window(),
            // SYN windows are never scaled.
            None => self.config.recv_buffer_bytes.min(UNSCALED_WINDOW_BYTES),
        }
    }

    // ----- acknowledgements -----

    fn process_ack(&mut self, now: Time, seg: &TcpSegment, grow: bool) {
        self.process_ack_rules(now, seg, grow);
        if self.ns2_recovery() {
            // ns-2's NewReno answers an ACK with send(0, 0, 2) while dupacks_ is at the
            // threshold or above (fast recovery: duplicate and partial ACKs), with nothing on
            // the duplicate ACKs below it, and with send(0, 0, maxburst_) (no limit) once
            // newack() zeroed dupacks_.
            self.ns2_burst = if self.recovery == RecoveryState::FastRecovery {
                Some(NS2_RECOVERY_BURST)
            } else if self.dupacks > 0 {
                Some(0)
            } else {
                None
            };
        }
    }

    fn process_ack_rules(&mut self, now: Time, seg: &TcpSegment, grow: bool) {
        let ack = seg.ack;
        if ack > self.snd_max {
            // Acknowledges something never sent.
            self.ack.now = true;
            return;
        }
        if ack < self.snd_una {
            return;
        }
        self.echoed = seg.ts_ecr;
        let sacked_before = self.scoreboard.bytes_above(self.snd_una);
        // ns-2's Sack1 reads SACK blocks only in fast recovery and on duplicate ACKs outside a
        // timeout's aftermath; an ACK of new data outside recovery clears its scoreboard.
        let record = !self.sack1()
            || self.recovery == RecoveryState::FastRecovery
            || (ack == self.snd_una && !self.sack1_timed_out);
        if self.sack_in_use() && record {
            for &(s, e) in seg.sack.iter().take(4) {
                let s = s.max(ack);
                if s < e && e <= self.snd_max {
                    self.scoreboard.insert(s, e);
                }
            }
        }
        // RFC 6937 DeliveredData: the change in snd_una plus the change in SACKed bytes above it.
        let delivered =
            ((ack - self.snd_una) + self.scoreboard.bytes_above(ack)).saturating_sub(sacked_before);
        let window_changed = seg.window != self.snd_wnd;
        self.snd_wnd = seg.window;
        self.max_sndwnd = self.max_sndwnd.max(seg.window);
        if self.probing && seg.window > 0 {
            // The window opened: resend from the first unacknowledged byte (the probe).
            self.probing = false;
            self.snd_nxt = self.snd_una;
        }
        if ack == self.snd_una {
            let dup = seg.len == 0
                && !seg.fin
                && !seg.syn
                && self.snd_max > self.snd_una
                && !window_changed
                && seg.window > 0;
            if dup {
                self.on_dupack(now);
                self.prr_on_ack(delivered);
            }
            return;
        }
        self.on_new_ack(now, ack, grow);
        self.prr_on_ack(delivered);
    }

    /// PRR is steering the current fast recovery.
    fn prr_active(&self) -> bool {
        self.config.prr && self.recovery == RecoveryState::FastRecovery
    }

    /// PRR holds back retransmissions and new data until ACKs allow more.
    fn prr_blocks_sending(&self) -> bool {
        self.prr_active() && self.prr_allow == 0
    }

    /// RFC 6937 on an ACK in recovery: how much may be sent now.
    fn prr_on_ack(&mut self, delivered: u64) {
        if !self.prr_active() {
            return;
        }
        self.prr_delivered += delivered;
        let pipe =
            (self.snd_max - self.snd_una).saturating_sub(self.scoreboard.bytes_above(self.snd_una));
        let sndcnt = if pipe > self.ssthresh {
            // Proportional part: ssthresh / RecoverFS of what was delivered.
            (self.prr_delivered * self.ssthresh)
                .div_ceil(self.prr_recover_fs.max(1))
                .saturating_sub(self.prr_out)
        } else {
            // Slow-start reduction bound back up to ssthresh.
            let limit = self
                .prr_delivered
                .saturating_sub(self.prr_out)
                .max(delivered)
                + self.mss;
            (self.ssthresh - pipe).min(limit)
        };
        self.prr_allow = sndcnt;
    }

    fn on_dupack(&mut self, now: Time) {
        self.stats.dupacks_received += 1;
        if self.sack1() {
            self.sack1_on_dupack(now);
            return;
        }
        self.dupacks = self.dupacks.saturating_add(1);
        match self.recovery {
            RecoveryState::FastRecovery => {
                // Rule 6: an eligible retransmission, else inflate by one segment.
                let eligible = if self.sack_in_use() {
                    self.next_eligible()
                } else {
                    None
                };
                match eligible {
                    Some(s) => self.queue_retransmission(s),
                    None if self.config.prr => {}
                    None => self.cwnd = (self.cwnd + self.mss).min(MAX_WINDOW_BYTES),
                }
            }
            RecoveryState::Open | RecoveryState::Loss => {
                let lost = self.config.rfc6675_loss_marking
                    && self.sack_in_use()
                    && self.is_lost(self.snd_una);
                if self.dupacks == self.config.dupack_threshold.max(1)
                    || (lost && self.dupacks < self.config.dupack_threshold.max(1))
                {
                    // Rule 2: no new recovery for data sent before the last one (or timeout).
                    if self.config.variant.newreno_recovery() && self.snd_una < self.snd_recover {
                        return;
                    }
                    self.enter_fast_recovery(now);
                }
            }
        }
    }

    fn enter_fast_recovery(&mut self, now: Time) {
        let flight = self.snd_max - self.snd_una;
        if self.ns2_recovery() {
            // closecwnd(1): cwnd = window() / 2 in whole segments, with ns-2's window() the
            // smaller of cwnd and the peer's window (not the data in flight), ssthresh = cwnd
            // at least two segments; then dupwnd_ = 3 inflates it.
            self.ns2_halved = self.ns2_window() / self.mss / 2 * self.mss;
            self.ssthresh = self.ns2_halved.max(2 * self.mss);
            self.cwnd = self.ns2_halved + u64::from(self.config.dupack_threshold) * self.mss;
        } else {
            self.ssthresh = self.reduced_window(flight);
            self.cwnd = self.ssthresh + u64::from(self.config.dupack_threshold) * self.mss;
        }
        if self.config.prr {
            // No inflation: PRR meters sending; the fast retransmit goes at once.
            self.cwnd = self.ssthresh;
            self.prr_recover_fs = flight;
            self.prr_delivered = 0;
            self.prr_out = 0;
            self.prr_allow = self.mss;
        }
        self.fast_retransmit(now);
        if self.ns2_recovery() {
            // ns-2's NewReno calls reset_rtx_timer(1): the timer restarts with the current
            // timeout, then the backoff doubles (until a segment timed after it is acked).
            self.rto.back_off();
        }
    }

    /// Enters fast recovery with the window already set: the lost segment goes again at once
    /// (outside Sack1's pipe count) and, as BSD does, the retransmission restarts the timer.
    fn fast_retransmit(&mut self, now: Time) {
        self.cwnd_frac = 0.0;
        self.snd_recover = self.snd_max;
        self.recovery = RecoveryState::FastRecovery;
        self.stats.fast_retransmits += 1;
        self.timing = None;
        self.ns2_rtt_seq = None;
        self.queue_retransmission(self.snd_una);
        self.rtx_deadline = Some(self.rto.deadline(now));
    }

    fn on_new_ack(&mut self, now: Time, ack: u64, grow: bool) {
        let acked = ack - self.snd_una;
        // ns-2's sink echoes the time stamp of the segment whose arrival it acknowledges:
        // with an ACK per segment, the one at the old snd_una (in order, or the retransmission
        // that fills the hole), as last sent.
        let ns2_echo = self.ns2_acked(ack);
        let partial = self.recovery == RecoveryState::FastRecovery
            && (self.config.variant.newreno_recovery() || self.sack1())
            && ack < self.snd_recover;
        self.snd_una = ack;
        self.snd_nxt = self.snd_nxt.max(ack);
        self.rexmit_hwm = self.rexmit_hwm.max(ack);
        self.scoreboard.remove_below(ack);
        // ns-2's newack sets the timer (newtimer) before it takes the sample (rtt_update).
        let ns2_deadline = self.config.ns2_timer.then(|| self.rto.deadline(now));
        if self.config.ns2_timer {
            // ns-2's newack() takes a sample from the echoed time stamp on every ACK of new
            // data; a partial ACK in fast recovery goes through partialnewack() (NewReno) or
            // only newtimer() (Sack1), which take none.
            if let Some(sent) = ns2_echo.filter(|_| !partial) {
                self.rto.sample(sent, now);
            }
        } else if self.config.rtt_per_ack {
            // The echoed timestamp of an ACK of new data gives a sample (RFC 7323).
            if self.echoed > 0 {
                self.rto.sample(self.echoed - 1, now);
            }
        } else if let Some((seq, sent)) = self.timing {
            if ack > seq {
                self.rto.sample(sent, now);
                self.timing = None;
            }
        }
        self.rtx_deadline = if self.snd_una >= self.snd_max {
            None
        } else {
            Some(ns2_deadline.unwrap_or_else(|| self.rto.deadline(now)))
        };
        if self.ns2_rtt_seq.is_some_and(|seq| ack > seq) {
            // ns-2's newack: newtimer() first, then t_backoff_ = 1 once rtt_seq_ is acked.
            self.ns2_rtt_seq = None;
            self.rto.reset_backoff();
        }
        if self.sack1() {
            self.sack1_on_new_ack(now, ack, acked, grow);
            return;
        }
        match self.recovery {
            RecoveryState::FastRecovery => {
                if !self.config.variant.newreno_recovery() || ack >= self.snd_recover {
                    // Reno: the first new ACK ends recovery. NewReno rule 3: so does one that
                    // covers snd_recover, with cwnd no larger than the flight plus one segment.
                    self.cwnd = if self.ns2_recovery() {
                        // dupwnd_ = 0: back to the halved cwnd_, whatever is in flight.
                        self.ns2_halved
                    } else if self.config.prr {
                        self.ssthresh
                    } else if self.config.variant.newreno_recovery() {
                        self.ssthresh.min(self.snd_max - self.snd_una + self.mss)
                    } else {
                        self.ssthresh
                    };
                    self.recovery = RecoveryState::Open;
                    self.dupacks = 0;
                    if self.ns2_recovery() && grow {
                        // ns-2's NewReno calls opencwnd() after newack() on this ACK too.
                        self.grow_cwnd(now, acked);
                    }
                } else {
                    // Rule 4: partial ACK. Without SACK retransmit the next unacknowledged
                    // segment; always deflate by the data acknowledged and add one segment.
                    self.dupacks = 0;
                    if self.ns2_recovery() {
                        // ns-2 zeroes its inflation (`dupwnd_`): cwnd is the halved cwnd_.
                        self.cwnd = self.ns2_halved;
                    } else if !self.config.prr {
                        self.cwnd = self.cwnd.saturating_sub(acked) + self.mss;
                    }
                    if self.sack_in_use() {
                        if let Some(s) = self.next_eligible() {
                            self.queue_retransmission(s);
                        }
                    } else {
                        self.queue_retransmission(self.snd_una);
                    }
                }
            }
            RecoveryState::Loss | RecoveryState::Open => {
                if self.recovery == RecoveryState::Loss && ack >= self.loss_recover {
                    self.recovery = RecoveryState::Open;
                }
                self.dupacks = 0;
                if grow {
                    self.grow_cwnd(now, acked);
                }
            }
        }
    }

    /// Whether fast recovery follows ns-2's NewReno of 1997 (`TcpConfig::ns2_recovery`; SACK
    /// senders keep the default rules).
    fn ns2_recovery(&self) -> bool {
        self.config.ns2_recovery && !self.config.prr && !self.sack_in_use()
    }

    /// Whether the SACK sender follows ns-2's `Agent/TCP/Sack1` of 1997 (`tcp-sack1.cc` v1.13
    /// with `tcp.cc` v1.26, `maxburst_ 0`; `TcpConfig::ns2_recovery` on a SACK variant).
    fn sack1(&self) -> bool {
        self.config.ns2_recovery && !self.config.prr && self.sack_in_use()
    }

    /// ns-2's `window()`: the smaller of cwnd and the peer's window, in whole segments.
    fn sack1_window(&self) -> u64 {
        self.ns2_window()
    }

    /// ns-2's `window()` (`tcp.cc`; NewReno's adds `dupwnd_`, zero outside recovery): the
    /// smaller of cwnd and the peer's window, in whole segments.
    fn ns2_window(&self) -> u64 {
        self.cwnd.min(self.snd_wnd) / self.mss * self.mss
    }

    /// ns-2's timer: notes that the segment starting at `seq` left at `now`.
    fn ns2_note_sent(&mut self, seq: u64, now: Time) {
        match self.ns2_sent.binary_search_by_key(&seq, |&(s, _)| s) {
            Ok(i) => {
                if let Some(e) = self.ns2_sent.get_mut(i) {
                    e.1 = now;
                }
            }
            Err(i) => self.ns2_sent.insert(i, (seq, now)),
        }
    }

    /// ns-2's timer, on an ACK of everything below `ack`: forgets those segments and returns
    /// when the one at `snd_una` (the arrival this ACK answers) was last sent.
    fn ns2_acked(&mut self, ack: u64) -> Option<Time> {
        if !self.config.ns2_timer {
            return None;
        }
        let una = self.snd_una;
        let mut sent = None;
        while let Some(&(s, t)) = self.ns2_sent.front() {
            if s >= ack {
                break;
            }
            if s <= una {
                sent = Some(t);
            }
            self.ns2_sent.pop_front();
        }
        sent
    }

    /// Sack1 on a duplicate ACK (its scoreboard already holds the ACK's SACK blocks).
    fn sack1_on_dupack(&mut self, now: Time) {
        if self.recovery == RecoveryState::FastRecovery {
            // One segment left the network; `sack1_send` may fill the pipe again.
            self.pipe -= self.mss as i64;
            self.dupacks = self.dupacks.saturating_add(1);
            return;
        }
        if self.sack1_timed_out {
            // No ACK of new data since the timeout: not counted.
            return;
        }
        self.dupacks = self.dupacks.saturating_add(1);
        if self.dupacks != self.config.dupack_threshold.max(1) {
            return;
        }
        if self
            .sack1_timeout_recover
            .is_some_and(|recover| self.snd_una <= recover)
        {
            // Data sent before the last timeout: no fast retransmit.
            return;
        }
        self.sack1_timeout_recover = None;
        let mss = self.mss;
        // pipe_ = int(cwnd) − NUMDUPACKS, then closecwnd(1): cwnd = window()/2 in whole
        // segments (integer division), ssthresh = cwnd, at least two segments.
        let thresh = u64::from(self.config.dupack_threshold.max(1));
        self.pipe = (self.cwnd / mss * mss) as i64 - (thresh * mss) as i64;
        self.cwnd = (self.sack1_window() / mss / 2 * mss).max(mss);
        self.ssthresh = self.cwnd.max(2 * mss);
        self.fast_retransmit(now);
        // reset_rtx_timer(1): the timer restarts with the current timeout, then backs off.
        self.rto.back_off();
    }

    /// Sack1 on an ACK of new data (snd_una, the timer and the scoreboard already moved).
    fn sack1_on_new_ack(&mut self, now: Time, ack: u64, acked: u64, grow: bool) {
        if self.recovery != RecoveryState::FastRecovery {
            if self.recovery == RecoveryState::Loss && ack >= self.loss_recover {
                self.recovery = RecoveryState::Open;
            }
            self.dupacks = 0;
            self.sack1_timed_out = false;
            self.scoreboard.clear();
            if grow {
                self.grow_cwnd(now, acked);
            }
            return;
        }
        self.pipe -= self.mss as i64;
        if ack >= self.snd_recover {
            // Recovery over: cwnd stays at the halved window, whatever is in flight.
            self.recovery = RecoveryState::Open;
            self.dupacks = 0;
            self.sack1_timed_out = false;
            self.scoreboard.clear();
            self.rexmit_queue.clear();
            return;
        }
        // Partial ACK: a second segment left the network; the timer restarts without backoff.
        self.pipe -= self.mss as i64;
        self.rto.reset_backoff();
        self.rtx_deadline = Some(self.rto.deadline(now));
    }

    /// Sack1 after a retransmission timeout: ssthresh from ns-2's `window()` at every timeout,
    /// cwnd one segment, the scoreboard forgotten, go back N.
    fn sack1_timeout(&mut self) {
        let mss = self.mss;
        self.ssthresh = (self.sack1_window() / mss / 2 * mss).max(2 * mss);
        self.sack1_timeout_recover = Some(self.snd_max);
        self.sack1_timed_out = true;
        self.go_back_n();
    }

    /// After a retransmission timeout (ssthresh already set): one segment of window, loss
    /// recovery up to what was sent, the scoreboard forgotten (appendix A's rule 7 uses only
    /// SACK information that arrives after the timeout), resending from `snd_una`, nothing
    /// timed, the timer backed off.
    fn go_back_n(&mut self) {
        self.cwnd = self.mss;
        self.cwnd_frac = 0.0;
        self.recovery = RecoveryState::Loss;
        self.loss_recover = self.snd_max;
        self.dupacks = 0;
        self.snd_nxt = self.snd_una;
        self.scoreboard.clear();
        self.rexmit_hwm = self.snd_una;
        self.rexmit_queue.clear();
        self.timing = None;
        self.ns2_rtt_seq = None;
        self.rto.back_off();
    }

    /// Sack1's `send_much` in fast recovery: while the pipe is below cwnd, the lowest hole below
    /// the highest SACK block not yet retransmitted, else new data; each adds a segment to the
    /// pipe.
    fn sack1_send(&mut self, now: Time) -> Option<TcpSegment> {
        if self.pipe >= self.cwnd as i64 {
            return None;
        }
        let mut s = self.snd_una.max(self.rexmit_hwm);
        while let Some((_, e)) = self.scoreboard.containing(s) {
            s = e;
        }
        if self.scoreboard.max_end().is_some_and(|high| s < high) {
            self.rexmit_hwm = self.rexmit_hwm.max(self.retransmission_end(s));
            let seg = self.retransmit(now, s)?;
            self.pipe += self.mss as i64;
            return Some(seg);
        }
        let start = self.snd_max;
        let limit = self.snd_una.saturating_add(self.snd_wnd);
        let data_end = self.write_end;
        let len = self
            .mss
            .min(data_end.saturating_sub(start))
            .min(limit.saturating_sub(start));
        let fin = self.closing && start + len == data_end && start <= data_end;
        if (len == 0 && !fin) || (len < self.mss && start + len < data_end) {
            return None;
        }
        let seg = self.emit(now, start, len, false, fin, true);
        self.pipe += self.mss as i64;
        Some(seg)
    }

    /// Window growth on an ACK of `acked` new bytes outside fast recovery.
    fn grow_cwnd(&mut self, now: Time, acked: u64) {
        let mss = self.mss;
        let units = if self.config.byte_counting {
            acked.min(u64::from(self.config.byte_counting_limit_segments) * mss)
        } else {
            acked.min(mss)
        };
        if self.cwnd < self.ssthresh {
            self.cwnd += units;
        } else if self.config.increase == IncreasePolicy::Cubic {
            self.cubic_grow(now, units);
        } else {
            let factor = match self.config.increase {
                IncreasePolicy::Standard | IncreasePolicy::Cubic => 1.0,
                IncreasePolicy::IncreaseByK { k } => k,
                IncreasePolicy::ConstantRate { c } => match self.window_rtt() {
                    Some(rtt) => {
                        let rtt = rtt as f64 / SEC as f64;
                        c * rtt * rtt
                    }
                    None => 1.0,
                },
            };
            let (mss_f, units_f) = (mss as f64, units as f64);
            let inc = (factor * mss_f * units_f / self.cwnd.max(1) as f64).min(units_f);
            self.cwnd_frac += inc;
            let whole = self.cwnd_frac.floor();
            self.cwnd_frac -= whole;
            self.cwnd += whole as u64;
        }
        self.cwnd = self.cwnd.min(MAX_WINDOW_BYTES);
    }

    /// The RTT a window policy reads: the retransmission clock's smoothed RTT in whole ticks
    /// with the seeds' coarse timer, otherwise an exact one (as timestamps give it).
    fn window_rtt(&self) -> Option<Time> {
        if self.config.coarse_timer {
            self.rto.srtt_whole_ticks()
        } else {
            self.rto.exact_srtt()
        }
    }

    /// RFC 9438 §4.2–4.3 on an ACK of `units` bytes in congestion avoidance.
    fn cubic_grow(&mut self, now: Time, units: u64) {
        let mss = self.mss as f64;
        let cwnd = self.cwnd as f64 / mss;
        let epoch = match self.cubic_epoch {
            Some(e) => e,
            None => {
                // A new epoch: aim back at W_max (or, above it already, probe from here).
                if self.cubic_w_max < cwnd {
                    self.cubic_w_max = cwnd;
                }
                self.cubic_k = ((self.cubic_w_max - cwnd) / CUBIC_C).cbrt();
                self.cubic_w_est = cwnd;
                self.cubic_epoch = Some(now);
                now
            }
        };
        let rtt = self.rto.exact_srtt().unwrap_or(0) as f64 / SEC as f64;
        let t = (now - epoch) as f64 / SEC as f64;
        let target =
            (CUBIC_C * (t + rtt - self.cubic_k).powi(3) + self.cubic_w_max).clamp(cwnd, 1.5 * cwnd);
        // §4.3: Reno-friendly at α = 3(1 − β)/(1 + β) until W_est reaches cwnd_prior, then 1.
        let alpha = if self.cubic_w_est >= self.cubic_prior {
            1.0
        } else {
            3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
        };
        self.cubic_w_est += alpha * (units as f64 / mss) / cwnd.max(1.0);
        let goal = target.max(self.cubic_w_est);
        let inc = ((goal - cwnd) / cwnd.max(1.0) * mss)
            .min(units as f64)
            .max(0.0);
        self.cwnd_frac += inc;
        let whole = self.cwnd_frac.floor();
        self.cwnd_frac -= whole;
        self.cwnd += whole as u64;
    }

    /// The window after a congestion event with `flight` bytes outstanding: half of it, or
    /// β = 0.7 of it with CUBIC (which also notes W_max and ends the growth epoch).
    fn reduced_window(&mut self, flight: u64) -> u64 {
        if self.config.increase != IncreasePolicy::Cubic {
            return (flight / 2).max(2 * self.mss);
        }
        let cwnd = self.cwnd as f64 / self.mss as f64;
        self.cubic_prior = cwnd;
        // Fast convergence: below the last W_max, release more.
        self.cubic_w_max = if cwnd < self.cubic_w_max {
            cwnd * (1.0 + CUBIC_BETA) / 2.0
        } else {
            cwnd
        };
        self.cubic_epoch = None;
        ((flight as f64 * CUBIC_BETA) as u64).max(2 * self.mss)
    }

    // ----- retransmission -----

    /// End of the retransmission starting at `s`: one segment, not into SACKed data, not past
    /// what was sent.
    fn retransmission_end(&self, s: u64) -> u64 {
        let mut end = s.saturating_add(self.mss).min(self.snd_max);
        if let Some(n) = self.scoreboard.next_start_after(s) {
            end = end.min(n);
        }
        end
    }

    /// Appendix A rule 5: the lowest segment not yet retransmitted that is eligible — three
    /// duplicate ACKs for the segment before it, or SACKed data at least three segments beyond.
    fn next_eligible(&self) -> Option<u64> {
        let mut s = self.snd_una.max(self.rexmit_hwm);
        while let Some((_, e)) = self.scoreboard.containing(s) {
            s = e;
        }
        if s >= self.snd_max {
            return None;
        }
        let end = self.retransmission_end(s);
        let thresh = u64::from(self.config.dupack_threshold.max(1));
        let by_dupacks = s == self.snd_una && u64::from(self.dupacks) >= thresh;
        let by_sack = if self.config.rfc6675_loss_marking {
            self.is_lost(s)
        } else {
            self.scoreboard
                .max_end()
                .is_some_and(|fack| fack >= end.saturating_add(thresh * self.mss))
        };
        (by_dupacks || by_sack).then_some(s)
    }

    /// RFC 6675 IsLost: more than (DupThresh − 1)·MSS bytes above the segment at `s` are SACKed.
    fn is_lost(&self, s: u64) -> bool {
        let thresh = u64::from(self.config.dupack_threshold.max(1));
        let end = self.retransmission_end(s);
        self.scoreboard.bytes_above(end) > (thresh - 1) * self.mss
    }

    fn queue_retransmission(&mut self, s: u64) {
        if self.rexmit_queue.len() < MAX_PENDING_RETRANSMISSIONS && !self.rexmit_queue.contains(&s)
        {
            self.rexmit_queue.push_back(s);
        }
        self.rexmit_hwm = self.rexmit_hwm.max(self.retransmission_end(s));
    }

    /// Builds the queued retransmission starting at `start`, unless it became unnecessary.
    fn retransmit(&mut self, now: Time, start: u64) -> Option<TcpSegment> {
        let start = start.max(self.snd_una);
        if start >= self.snd_max || self.scoreboard.containing(start).is_some() {
            return None;
        }
        let end = self.retransmission_end(start);
        let len = end.min(self.write_end).saturating_sub(start);
        let fin = self.closing && end > self.write_end;
        if len == 0 && !fin {
            return None;
        }
        Some(self.emit(now, start, len, false, fin, false))
    }

    fn retransmission_timeout(&mut self, now: Time) {
        match self.state {
            TcpState::SynSent | TcpState::SynReceived => {
                self.syn_retries += 1;
                if self.syn_retries > self.config.max_syn_retries {
                    self.state = TcpState::Closed;
                    self.ack.deadline = None;
                    return;
                }
                self.rto.back_off();
                self.syn_pending = true;
                self.timing = None;
                if self.state == TcpState::SynSent {
                    self.snd_nxt = self.iss;
                    self.cwnd = self.cwnd.min(self.mss);
                }
            }
            TcpState::Established => {
                if self.snd_wnd == 0 && self.write_end > self.snd_una {
                    // Zero-window probe.
                    self.snd_nxt = self.snd_una;
                    self.force_probe = true;
                    self.rto.back_off();
                    return;
                }
                if self.snd_una >= self.snd_max {
                    return;
                }
                self.stats.timeouts += 1;
                // ns-2's timeout() sends with maxburst_ (no limit).
                self.ns2_burst = None;
                if self.config.ns2_timer {
                    // ns-2's timeout() calls reset_rtx_timer(0, 1): set_rtx_timer() with the
                    // current backoff, then rtt_backoff(); the retransmission leaves with the
                    // timer already running, so it waits one RTO more, not two.
                    self.rtx_deadline = Some(self.rto.deadline(now));
                }
                if self.sack1() {
                    self.sack1_timeout();
                    return;
                }
                if self.ns2_recovery() {
                    // closecwnd(0) at every timeout: ssthresh = ⌊window()⌋ / 2 (dupwnd_ zeroed
                    // first), at least two segments; not RFC 5681's once per segment.
                    self.ssthresh = (self.ns2_window() / self.mss / 2 * self.mss).max(2 * self.mss);
                } else if self.timeout_una != Some(self.snd_una) {
                    // RFC 5681: ssthresh is not lowered again for the same segment.
                    self.ssthresh = self.reduced_window(self.snd_max - self.snd_una);
                    self.timeout_una = Some(self.snd_una);
                }
                if self.config.variant.newreno_recovery() {
                    self.snd_recover = self.snd_max;
                }
                self.go_back_n();
            }
            TcpState::Listen | TcpState::Closed => {}
        }
    }

    /// Starts the persist timer when a zero window blocks waiting data and nothing is in flight.
    fn arm_persist(&mut self, now: Time) {
        if self.snd_wnd == 0
            && self.snd_una == self.snd_max
            && self.write_end > self.snd_max
            && self.rtx_deadline.is_none()
        {
            self.rtx_deadline = Some(self.rto.deadline(now));
        }
    }

    // ----- sending -----

    /// The next new (or, after a timeout, go-back-N) data segment the windows allow.
    fn next_data(&mut self, now: Time) -> Option<TcpSegment> {
        let data_end = self.write_end;
        let limit = if matches!(self.state, TcpState::SynSent | TcpState::SynReceived) {
            (self.iss + 1).saturating_add(self.cwnd)
        } else if self.prr_active() {
            // PRR: the receiver's window bounds new data; `prr_allow` meters it below.
            if self.prr_allow == 0 {
                return None;
            }
            self.snd_una.saturating_add(self.snd_wnd)
        } else {
            // RFC 3042: one segment beyond cwnd per duplicate ACK below the threshold.
            let extra = if self.config.limited_transmit
                && self.recovery == RecoveryState::Open
                && self.dupacks < self.config.dupack_threshold
            {
                u64::from(self.dupacks) * self.mss
            } else {
                0
            };
            self.snd_una
                .saturating_add((self.cwnd + extra).min(self.snd_wnd))
        };
        let mut start = self.snd_nxt.max(self.snd_una);
        // ns-2's Sack1 goes back N outside fast recovery, SACK information or not.
        if self.sack_in_use() && !self.sack1() {
            // Rule 7: do not resend what the receiver reports holding.
            while start < self.snd_max {
                match self.scoreboard.containing(start) {
                    Some((_, e)) => start = e,
                    None => break,
                }
            }
            self.snd_nxt = start;
        }
        let rexmit = start < self.snd_max;
        let mut len = self
            .mss
            .min(data_end.saturating_sub(start))
            .min(limit.saturating_sub(start));
        if self.force_probe && len == 0 && start < data_end {
            len = 1;
        }
        if rexmit {
            if let Some(n) = self.scoreboard.next_start_after(start) {
                len = len.min(n - start);
            }
        }
        let fin = self.closing && start + len == data_end && self.snd_una <= data_end;
        if len == 0 && !fin {
            return None;
        }
        if !rexmit && self.ns2_burst == Some(0) {
            // ns-2's NewReno: this ACK has sent all it may.
            return None;
        }
        if len > 0 && len < self.mss {
            let ends_data = start + len == data_end;
            if !ends_data {
                // Sender silly-window avoidance.
                if !(rexmit || self.force_probe || len >= self.max_sndwnd / 2) {
                    return None;
                }
            } else if self.config.nagle && !self.closing && !rexmit && self.snd_max > self.snd_una {
                return None;
            }
        }
        if self.force_probe {
            self.force_probe = false;
            self.probing = true;
        }
        if !rexmit {
            if let Some(left) = self.ns2_burst.as_mut() {
                *left -= 1;
            }
        }
        Some(self.emit(now, start, len, false, fin, true))
    }

    /// Builds a segment `[seq, seq + len)` (plus SYN/FIN) with the current ACK, window and SACK
    /// information, and does the bookkeeping of sending it.
    fn emit(
        &mut self,
        now: Time,
        seq: u64,
        len: u64,
        syn: bool,
        fin: bool,
        advance: bool,
    ) -> TcpSegment {
        let end = seq + len + u64::from(syn) + u64::from(fin);
        let occupies = len > 0 || syn || fin;
        let retransmission = seq < self.snd_max;
        if advance {
            self.snd_nxt = end;
        }
        self.snd_max = self.snd_max.max(end);
        if len > 0 && self.prr_active() {
            self.prr_out += len;
            self.prr_allow = self.prr_allow.saturating_sub(len);
        }
        if occupies {
            if retransmission {
                self.stats.retransmitted_segments += 1;
                self.stats.retransmitted_bytes += len;
                if syn {
                    self.stats.syn_retransmissions += 1;
                }
                self.timing = None;
            } else if self.timing.is_none()
                && self.recovery != RecoveryState::FastRecovery
                && !self.config.rtt_per_ack
                && !self.config.ns2_timer
            {
                self.timing = Some((seq, now));
            }
            if self.config.ns2_timer {
                self.ns2_note_sent(seq, now);
            }
            if !retransmission && self.config.ns2_timer && self.ns2_rtt_seq.is_none() {
                // ns-2's output(): new data with no rtt_active_ starts it, recovery or not.
                self.ns2_rtt_seq = Some(seq);
            }
            if self.rtx_deadline.is_none() {
                self.rtx_deadline = Some(self.rto.deadline(now));
            }
        }
        let mut seg = TcpSegment {
            seq,
            len: u32::try_from(len).unwrap_or(u32::MAX),
            syn,
            fin,
            window: self.local_window(),
            ..TcpSegment::default()
        };
        if self.config.rtt_per_ack {
            seg.ts_val = now.saturating_add(1);
            seg.ts_ecr = self.ts_recent;
        }
        if let Some(rcv) = &self.rcv {
            seg.ack_flag = true;
            seg.ack = rcv.rcv_nxt();
            self.last_ack_sent = seg.ack;
            if self.sack_ok() && rcv.has_out_of_order() {
                seg.sack = rcv.sack_blocks(usize::from(self.config.max_sack_blocks));
            }
            self.ack = AckState::default();
        }
        if syn {
            let passive = self.state == TcpState::SynReceived;
            seg.sack_permitted = self.config.sack_permitted && (!passive || self.peer_sack);
            seg.window_scaling =
                self.config.window_scaling && (!passive || self.peer_window_scaling);
        }
        self.last_window_sent = seg.window;
        self.stats.segments_sent += 1;
        self.stats.wire_bytes_sent += u64::from(seg.wire_size());
        if len > 0 {
            self.stats.data_segments_sent += 1;
            self.stats.data_bytes_sent += len;
        } else if !occupies {
            self.stats.pure_acks_sent += 1;
        }
        seg
    }
}
