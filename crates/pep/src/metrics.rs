//! The metrics registry of one side (terminal or gateway): lock-free counters and gauges that
//! many tasks update through an `Arc<Metrics>`, a bounded table of the connections open now
//! ([`ConnTrack`], updated by the relay with atomics), and their two renderings — Prometheus
//! text exposition format 0.0.4 ([`Metrics::prometheus_text`]) and a JSON document for
//! `/status` ([`Metrics::status_json`]). The hop's own counters (datagrams, STP packets by type,
//! retransmissions, tunnel authentication failures, each connection's srtt and cwnd) are copied
//! in from a [`HopStatus`] snapshot by [`Metrics::observe_hop`], which the HTTP endpoint calls
//! before it answers.
//!
//! Directions are named after the satellite hop: `up` is terminal → gateway (client to
//! server), `down` is gateway → terminal, on both sides. "TCP" bytes are payload bytes read
//! from or written to the TCP sockets; "hop" bytes are the UDP payloads of the tunnel (STP and
//! tunnel headers included, IP/UDP headers not).

use crate::hop::HopStatus;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Default bound on the per-connection status table.
pub(crate) const DEFAULT_MAX_STATUS_ENTRIES: usize = 4096;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.add(1);
    }
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Sets a count kept elsewhere (the hop's totals); it only ever moves up.
    pub(crate) fn set(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub(crate) struct Gauge(AtomicI64);

impl Gauge {
    pub(crate) fn inc(&self) {
        self.add(1);
    }
    pub(crate) fn dec(&self) {
        self.add(-1);
    }
    pub(crate) fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub(crate) fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Which side this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Side {
    Terminal,
    Gateway,
}

impl Side {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Side::Terminal => "terminal",
            Side::Gateway => "gateway",
        }
    }
}

/// Direction across the hop: `Up` is terminal → gateway, `Down` gateway → terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Up,
    Down,
}

impl Direction {
    pub(crate) const ALL: [Direction; 2] = [Direction::Up, Direction::Down];
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// `limits.max_connections` reached.
    ConnectionLimit,
    /// `limits.max_connections_per_terminal` reached.
    TerminalLimit,
    /// `limits.memory_cap_bytes` reached.
    Memory,
    /// The destination policy said no.
    Policy,
    /// Client authentication (SOCKS5 user/password) failed.
    ClientAuth,
    /// The destination could not be resolved or connected to.
    ConnectFailed,
    /// `connect_timeout_s` passed.
    Timeout,
    /// The client or the peer broke the protocol (SOCKS5, HTTP, STP).
    Protocol,
    /// The process's open-file limit (`RLIMIT_NOFILE`) was reached: no socket for the client
    /// or for the connection to the destination.
    Descriptors,
}

impl RefusalReason {
    /// The reason a terminal counts a connection refused under, for the gateway's failure
    /// verdict.
    pub(crate) fn for_verdict(v: crate::stream::Verdict) -> RefusalReason {
        match v {
            crate::stream::Verdict::PolicyDenied => RefusalReason::Policy,
            _ => RefusalReason::ConnectFailed,
        }
    }
}

impl RefusalReason {
    pub(crate) const ALL: [RefusalReason; 9] = [
        RefusalReason::ConnectionLimit,
        RefusalReason::TerminalLimit,
        RefusalReason::Memory,
        RefusalReason::Policy,
        RefusalReason::ClientAuth,
        RefusalReason::ConnectFailed,
        RefusalReason::Timeout,
        RefusalReason::Protocol,
        RefusalReason::Descriptors,
    ];
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RefusalReason::ConnectionLimit => "connection_limit",
            RefusalReason::TerminalLimit => "terminal_limit",
            RefusalReason::Memory => "memory",
            RefusalReason::Policy => "policy",
            RefusalReason::ClientAuth => "client_auth",
            RefusalReason::ConnectFailed => "connect_failed",
            RefusalReason::Timeout => "timeout",
            RefusalReason::Protocol => "protocol",
            RefusalReason::Descriptors => "descriptors",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a relayed connection ended. Only `Done` is a clean close (a FIN each way after every
/// byte); every other reason ended the connection with a reset on the TCP side(s) still open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// Both directions finished (FIN each way).
    Done,
    /// Idle in both directions for `idle_timeout_s`; both sides were reset.
    IdleTimeout,
    /// Ended before the relay began (a client protocol error or a failure while opening).
    Error,
    /// Refused after admission (policy, failed connect, client handshake); also counted in
    /// `connections_refused` under its reason.
    Refused,
    /// This side's TCP connection failed (reset by its peer, or a read or write error): the
    /// stream was aborted, so the far side resets its TCP connection too.
    TcpReset,
    /// The stream failed (the far side reset or aborted it, STP timed out, or the hop is gone):
    /// this side's TCP connection was reset.
    HopReset,
    /// A graceful shutdown's `shutdown_timeout_s` passed with the connection still open: both
    /// sides were reset.
    DrainTimeout,
}

impl CloseReason {
    pub(crate) const ALL: [CloseReason; 7] = [
        CloseReason::Done,
        CloseReason::IdleTimeout,
        CloseReason::Error,
        CloseReason::Refused,
        CloseReason::TcpReset,
        CloseReason::HopReset,
        CloseReason::DrainTimeout,
    ];
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Error => "error",
            CloseReason::Refused => "refused",
            CloseReason::TcpReset => "tcp_reset",
            CloseReason::HopReset => "hop_reset",
            CloseReason::DrainTimeout => "drain_timeout",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Reasons the hop drops a datagram before its STP endpoint (`satstp_hop_dropped_total`).
pub(crate) const HOP_DROP_REASONS: [&str; 5] = [
    "malformed",
    "unknown_session",
    "handshake_rate",
    "session_limit",
    "open_budget",
];

/// Kinds of authentication failure counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// Tunnel datagrams or handshakes that failed authentication (bad MAC, bad handshake).
    Tunnel,
    /// Tunnel handshakes from a static key not in the allow-list.
    UnknownKey,
    /// Tunnel datagrams replayed (outside or already seen in the replay window).
    Replay,
    /// SOCKS5 username/password logins refused.
    Client,
}

impl AuthFailure {
    pub(crate) const ALL: [AuthFailure; 4] = [
        AuthFailure::Tunnel,
        AuthFailure::UnknownKey,
        AuthFailure::Replay,
        AuthFailure::Client,
    ];
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AuthFailure::Tunnel => "tunnel",
            AuthFailure::UnknownKey => "unknown_key",
            AuthFailure::Replay => "replay",
            AuthFailure::Client => "client",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// STP packet types counted, in the order of `stp::stats::TYPE_NAMES`.
pub(crate) const STP_TYPES: usize = stp::stats::TYPE_NAMES.len();

/// Life stage of a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ConnectionState {
    /// Being opened (handshake with the client, STP BGN, or TCP connect at the gateway).
    Connecting,
    /// Relaying in both directions.
    Open,
    /// One direction has finished.
    HalfClosed,
    /// Being torn down.
    Closing,
}

impl ConnectionState {
    fn from_u8(v: u8) -> ConnectionState {
        match v {
            0 => ConnectionState::Connecting,
            1 => ConnectionState::Open,
            2 => ConnectionState::HalfClosed,
            _ => ConnectionState::Closing,
        }
    }
}

/// One connection's row in `/status`: a snapshot of its [`ConnTrack`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ConnectionStatus {
    pub id: u64,
    /// The client's address as seen by the terminal (`ip:port`); on the gateway, the client
    /// address the terminal sent, when it sent one.
    pub client: Option<String>,
    /// Gateway side: the public key (hex) of the terminal the connection came from.
    pub terminal: Option<String>,
    /// The destination as asked for (`host:port` or `ip:port`), once known.
    pub destination: Option<String>,
    pub state: ConnectionState,
    /// Seconds since the connection was accepted.
    pub age_s: f64,
    /// Seconds since a byte last moved either way.
    pub idle_s: f64,
    /// Payload bytes relayed terminal → gateway.
    pub bytes_up: u64,
    /// Payload bytes relayed gateway → terminal.
    pub bytes_down: u64,
    /// The STP stream's id within its hop, once opened.
    pub stream_id: Option<u64>,
    /// The STP connection's smoothed RTT, ms (µs precision), once measured.
    pub srtt_ms: Option<f64>,
    /// The STP connection's congestion window, bytes.
    pub cwnd_bytes: Option<u64>,
}

const NONE: u64 = u64::MAX;

/// The live record of one relayed connection, shared by its relay task (which counts bytes
/// and sets its state) and the status table. Every field is an atomic or set once.
#[derive(Debug)]
pub(crate) struct ConnTrack {
    id: u64,
    opened: Instant,
    client: OnceLock<String>,
    terminal: Option<String>,
    destination: OnceLock<String>,
    state: AtomicU8,
    bytes: [AtomicU64; 2],
    /// Milliseconds after `opened` of the last byte relayed either way.
    last_active_ms: AtomicU64,
    stream_id: AtomicU64,
    srtt_us: AtomicU64,
    cwnd_bytes: AtomicU64,
}

impl ConnTrack {
    fn new(id: u64, client: Option<String>, terminal: Option<String>) -> ConnTrack {
        let c = OnceLock::new();
        if let Some(client) = client {
            let _ = c.set(client);
        }
        ConnTrack {
            id,
            opened: Instant::now(),
            client: c,
            terminal,
            destination: OnceLock::new(),
            state: AtomicU8::new(0),
            bytes: Default::default(),
            last_active_ms: AtomicU64::new(0),
            stream_id: AtomicU64::new(NONE),
            srtt_us: AtomicU64::new(NONE),
            cwnd_bytes: AtomicU64::new(NONE),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    /// Records the client's address (the first value set stays).
    pub(crate) fn set_client(&self, client: impl Into<String>) {
        let _ = self.client.set(client.into());
    }
    /// Records the destination (the first value set stays).
    pub(crate) fn set_destination(&self, destination: impl Into<String>) {
        let _ = self.destination.set(destination.into());
    }
    pub(crate) fn destination(&self) -> Option<&str> {
        self.destination.get().map(String::as_str)
    }
    pub(crate) fn client(&self) -> Option<&str> {
        self.client.get().map(String::as_str)
    }
    pub(crate) fn set_state(&self, state: ConnectionState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }
    pub(crate) fn state(&self) -> ConnectionState {
        ConnectionState::from_u8(self.state.load(Ordering::Relaxed))
    }
    /// Records the STP stream carrying the connection (to join the hop's srtt and cwnd).
    pub(crate) fn set_stream(&self, id: u64) {
        self.stream_id.store(id, Ordering::Relaxed);
    }
    /// Counts `n` payload bytes moving in `dir` and marks the connection active.
    pub(crate) fn add_bytes(&self, dir: Direction, n: u64) {
        if let Some(b) = self.bytes.get(dir.index()) {
            b.fetch_add(n, Ordering::Relaxed);
        }
        self.touch();
    }
    pub(crate) fn bytes(&self, dir: Direction) -> u64 {
        self.bytes
            .get(dir.index())
            .map_or(0, |b| b.load(Ordering::Relaxed))
    }
    /// Marks the connection active now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_active_ms.fetch_max(ms, Ordering::Relaxed);
    }
    /// How long since a byte last moved either way (or since the connection opened).
    pub(crate) fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_active_ms.load(Ordering::Relaxed));
        self.opened.elapsed().saturating_sub(last)
    }
    pub(crate) fn age(&self) -> Duration {
        self.opened.elapsed()
    }

    fn opt(v: &AtomicU64) -> Option<u64> {
        Some(v.load(Ordering::Relaxed)).filter(|v| *v != NONE)
    }

    pub(crate) fn snapshot(&self) -> ConnectionStatus {
        ConnectionStatus {
            id: self.id,
            client: self.client.get().cloned(),
            terminal: self.terminal.clone(),
            destination: self.destination.get().cloned(),
            state: self.state(),
            age_s: self.age().as_secs_f64(),
            idle_s: self.idle_for().as_secs_f64(),
            bytes_up: self.bytes(Direction::Up),
            bytes_down: self.bytes(Direction::Down),
            stream_id: Self::opt(&self.stream_id),
            srtt_ms: Self::opt(&self.srtt_us).map(|us| us as f64 / 1000.0),
            cwnd_bytes: Self::opt(&self.cwnd_bytes),
        }
    }
}

/// The registry. Share it as `Arc<Metrics>`; every update is one relaxed atomic operation,
/// except registering and removing a connection, which take a short mutex.
#[derive(Debug)]
pub struct Metrics {
    side: Side,
    started: Instant,
    /// Relayed connections open now (admitted and not yet ended).
    pub(crate) connections_active: Gauge,
    /// Relayed connections admitted since start.
    pub(crate) connections_total: Counter,
    connections_refused: [Counter; RefusalReason::ALL.len()],
    connections_closed: [Counter; CloseReason::ALL.len()],
    tcp_bytes: [Counter; 2],
    hop_bytes: [Counter; 2],
    hop_datagrams: [Counter; 2],
    stp_sent: [Counter; STP_TYPES],
    stp_received: [Counter; STP_TYPES],
    /// STP SDs retransmitted by this side (live and closed connections).
    pub(crate) stp_retransmissions: Counter,
    /// SD payload bytes retransmitted by this side.
    pub(crate) stp_retransmitted_bytes: Counter,
    auth_failures: [Counter; 4],
    /// Datagrams the hop dropped before its STP endpoint, by [`HOP_DROP_REASONS`].
    hop_dropped: [Counter; HOP_DROP_REASONS.len()],
    /// Receives the kernel dropped at the hop's UDP sockets, their receive buffers full.
    hop_socket_overflows: Counter,
    /// Receive backpressure: episodes, and the window ceiling in force (0: none).
    hop_backpressure_episodes: Counter,
    hop_window_ceiling_bytes: Gauge,
    /// Mean and largest smoothed RTT of the STP connections open at the last hop snapshot, µs.
    pub(crate) stp_srtt_mean_us: Gauge,
    pub(crate) stp_srtt_max_us: Gauge,
    /// Sum and mean of the congestion windows of the STP connections open, bytes.
    pub(crate) stp_cwnd_sum_bytes: Gauge,
    pub(crate) stp_cwnd_mean_bytes: Gauge,
    /// STP connections open at the last hop snapshot.
    pub(crate) stp_connections: Gauge,
    /// Terminal: whether the tunnel session to the gateway is up (1) or not (0).
    pub(crate) hop_established: Gauge,
    /// Tunnel handshakes completed (terminal: its own; gateway: all terminals').
    pub(crate) tunnel_handshakes: Counter,
    /// Tunnel rekeys completed, and rekeys left unanswered (terminal: the session was torn down
    /// for a new handshake; always 0 on a gateway).
    pub(crate) tunnel_rekeys: Counter,
    pub(crate) tunnel_rekey_failures: Counter,
    pub(crate) tunnel_stp_checksums_filled: Counter,
    /// The tunnel's state, last handshake and last error at the last hop snapshot.
    tunnel: Mutex<crate::hop::TunnelReport>,
    /// Bytes of relay buffers reserved by open connections (see `limits.memory_cap_bytes`).
    pub(crate) memory_reserved_bytes: Gauge,
    /// The STP hop's read-ahead bound (`limits.read_ahead_bytes`), the bytes held against it,
    /// and how often a relay waited for room ([`crate::hop::read_ahead`]).
    pub(crate) read_ahead_bound_bytes: Gauge,
    pub(crate) read_ahead_bytes: Gauge,
    pub(crate) read_ahead_waits: Counter,
    /// Status entries not recorded because the table was full.
    pub(crate) status_entries_dropped: Counter,
    /// Terminal in transparent mode: its QUIC policy ([`Metrics::set_quic_policy`]).
    quic_policy: Mutex<Option<crate::quic_policy::QuicPolicy>>,
    /// UDP 443 packets the QUIC policy's nftables rule dropped or rejected (its counter, as last
    /// read).
    pub(crate) quic_packets: Counter,
    status: Mutex<BTreeMap<u64, Arc<ConnTrack>>>,
    next_id: AtomicU64,
    max_status_entries: usize,
}

impl Metrics {
    pub(crate) fn new(side: Side) -> Self {
        Self::with_status_capacity(side, DEFAULT_MAX_STATUS_ENTRIES)
    }

    /// A registry whose status table holds at most `max_status_entries` connections.
    pub(crate) fn with_status_capacity(side: Side, max_status_entries: usize) -> Self {
        Metrics {
            side,
            started: Instant::now(),
            connections_active: Gauge::default(),
            connections_total: Counter::default(),
            connections_refused: Default::default(),
            connections_closed: Default::default(),
            tcp_bytes: Default::default(),
            hop_bytes: Default::default(),
            hop_datagrams: Default::default(),
            stp_sent: Default::default(),
            stp_received: Default::default(),
            stp_retransmissions: Counter::default(),
            stp_retransmitted_bytes: Counter::default(),
            auth_failures: Default::default(),
            hop_dropped: Default::default(),
            hop_socket_overflows: Counter::default(),
            hop_backpressure_episodes: Counter::default(),
            hop_window_ceiling_bytes: Gauge::default(),
            stp_srtt_mean_us: Gauge::default(),
            stp_srtt_max_us: Gauge::default(),
            stp_cwnd_sum_bytes: Gauge::default(),
            stp_cwnd_mean_bytes: Gauge::default(),
            stp_connections: Gauge::default(),
            hop_established: Gauge::default(),
            tunnel_handshakes: Counter::default(),
            tunnel_rekeys: Counter::default(),
            tunnel_rekey_failures: Counter::default(),
            tunnel_stp_checksums_filled: Counter::default(),
            tunnel: Mutex::new(Default::default()),
            memory_reserved_bytes: Gauge::default(),
            read_ahead_bound_bytes: Gauge::default(),
            read_ahead_bytes: Gauge::default(),
            read_ahead_waits: Counter::default(),
            status_entries_dropped: Counter::default(),
            quic_policy: Mutex::new(None),
            quic_packets: Counter::default(),
            status: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            max_status_entries,
        }
    }

    pub(crate) fn side(&self) -> Side {
        self.side
    }

    /// Connections refused for `reason`.
    pub fn refused(&self, reason: RefusalReason) -> &Counter {
        &self.connections_refused[reason.index()]
    }
    /// Connections that ended for `reason`.
    pub(crate) fn closed(&self, reason: CloseReason) -> &Counter {
        &self.connections_closed[reason.index()]
    }
    /// Payload bytes at the TCP side moving in `dir`.
    pub(crate) fn tcp_bytes(&self, dir: Direction) -> &Counter {
        &self.tcp_bytes[dir.index()]
    }
    /// Tunnel datagram bytes on the satellite hop moving in `dir`, headers included.
    pub(crate) fn hop_bytes(&self, dir: Direction) -> &Counter {
        &self.hop_bytes[dir.index()]
    }
    /// Tunnel datagrams on the satellite hop moving in `dir`.
    pub(crate) fn hop_datagrams(&self, dir: Direction) -> &Counter {
        &self.hop_datagrams[dir.index()]
    }
    /// STP packets of type `stp::stats::TYPE_NAMES[i]` this side sent.
    #[cfg(test)]
    pub(crate) fn stp_sent(&self, i: usize) -> Option<&Counter> {
        self.stp_sent.get(i)
    }
    /// STP packets of type `stp::stats::TYPE_NAMES[i]` this side received.
    #[cfg(test)]
    pub(crate) fn stp_received(&self, i: usize) -> Option<&Counter> {
        self.stp_received.get(i)
    }
    /// Records the terminal's QUIC policy: `/metrics` then shows it, and for block and reject
    /// [`Metrics::quic_packets`].
    pub(crate) fn set_quic_policy(&self, policy: crate::quic_policy::QuicPolicy) {
        if let Ok(mut p) = self.quic_policy.lock() {
            *p = Some(policy);
        }
    }

    fn quic_policy(&self) -> Option<crate::quic_policy::QuicPolicy> {
        self.quic_policy.lock().ok().and_then(|p| *p)
    }

    /// Authentication failures of `kind`.
    pub(crate) fn auth_failures(&self, kind: AuthFailure) -> &Counter {
        &self.auth_failures[kind.index()]
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ConnTrack>>> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep serving it.
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection's record, entered in the status table when there is room (otherwise
    /// counted in `status_entries_dropped`; the record still works for its relay).
    pub(crate) fn track(&self, client: Option<String>, terminal: Option<String>) -> Arc<ConnTrack> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let t = Arc::new(ConnTrack::new(id, client, terminal));
        let mut table = self.table();
        if table.len() < self.max_status_entries {
            table.insert(id, Arc::clone(&t));
        } else {
            drop(table);
            self.status_entries_dropped.inc();
        }
        t
    }

    /// Removes a connection's record from the status table.
    pub(crate) fn untrack(&self, id: u64) -> Option<Arc<ConnTrack>> {
        self.table().remove(&id)
    }

    /// Entries in the status table now.
    pub(crate) fn status_len(&self) -> usize {
        self.table().len()
    }

    /// The records in the status table, by id.
    pub(crate) fn tracked(&self) -> Vec<Arc<ConnTrack>> {
        self.table().values().cloned().collect()
    }

    /// Copies a hop snapshot in: datagrams and bytes per direction, STP packets per type,
    /// retransmissions, tunnel authentication failures, and each tracked connection's srtt and
    /// cwnd (joined by stream id).
    pub(crate) fn observe_hop(&self, st: &HopStatus) {
        let (sent, received) = match self.side {
            Side::Terminal => (Direction::Up, Direction::Down),
            Side::Gateway => (Direction::Down, Direction::Up),
        };
        self.hop_bytes(sent).set(st.bytes_sent);
        self.hop_bytes(received).set(st.bytes_received);
        self.hop_datagrams(sent).set(st.datagrams_sent);
        self.hop_datagrams(received).set(st.datagrams_received);
        if let Some(stp) = &st.stp {
            for (c, v) in self.stp_sent.iter().zip(stp.totals.packets_sent.0) {
                c.set(v);
            }
            for (c, v) in self.stp_received.iter().zip(stp.totals.packets_received.0) {
                c.set(v);
            }
            self.stp_retransmissions
                .set(stp.totals.retransmitted_packets);
            self.stp_retransmitted_bytes
                .set(stp.totals.retransmitted_bytes);
        }
        self.auth_failures(AuthFailure::Tunnel)
            .set(st.tunnel.auth_failures);
        self.auth_failures(AuthFailure::UnknownKey)
            .set(st.tunnel.unknown_key);
        self.auth_failures(AuthFailure::Replay)
            .set(st.tunnel.replays);
        self.hop_established.set(i64::from(st.established));
        self.tunnel_handshakes.set(st.tunnel.handshakes);
        self.tunnel_rekeys.set(st.rekeys);
        self.tunnel_rekey_failures.set(st.rekey_failures);
        self.tunnel_stp_checksums_filled
            .set(st.tunnel.stp_checksums_filled);
        if let Ok(mut t) = self.tunnel.lock() {
            *t = st.tunnel_report.clone();
        }
        for (c, v) in self.hop_dropped.iter().zip([
            st.tunnel.malformed,
            st.tunnel.unknown_session,
            st.tunnel.rate_limited,
            st.tunnel.session_limit,
            st.opens_rate_limited,
        ]) {
            c.set(v);
        }
        self.hop_socket_overflows.set(st.socket_overflows);
        self.hop_backpressure_episodes.set(st.backpressure_episodes);
        self.hop_window_ceiling_bytes
            .set(i64::try_from(st.window_ceiling_bytes.unwrap_or(0)).unwrap_or(i64::MAX));

        // The STP connections' figures (the split-TCP hop's streams have none).
        let conns: Vec<&stp::ConnectionStats> =
            st.streams.iter().filter_map(|s| s.stp.as_ref()).collect();
        let n = conns.len() as u64;
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1);
        let srtt_sum: u64 = conns.iter().map(|c| us(c.srtt)).sum();
        let srtt_max = conns.iter().map(|c| us(c.srtt)).max().unwrap_or(0);
        let cwnd_sum: u64 = conns.iter().map(|c| c.cwnd_bytes).sum();
        let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.stp_connections.set(g(n));
        self.stp_srtt_mean_us
            .set(g(srtt_sum.checked_div(n).unwrap_or(0)));
        self.stp_srtt_max_us.set(g(srtt_max));
        self.stp_cwnd_sum_bytes.set(g(cwnd_sum));
        self.stp_cwnd_mean_bytes
            .set(g(cwnd_sum.checked_div(n).unwrap_or(0)));

        let by_stream: HashMap<u64, &crate::hop::StreamStatus> =
            st.streams.iter().map(|s| (s.id, s)).collect();
        for t in self.tracked() {
            let Some(sid) = ConnTrack::opt(&t.stream_id) else {
                continue;
            };
            if let Some(c) = by_stream.get(&sid).and_then(|s| s.stp.as_ref()) {
                // An srtt of zero means "not measured yet".
                if !c.srtt.is_zero() {
                    t.srtt_us.store(us(c.srtt), Ordering::Relaxed);
                }
                t.cwnd_bytes.store(c.cwnd_bytes, Ordering::Relaxed);
            }
        }
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub(crate) fn prometheus_text(&self) -> String {
        let side = self.side.as_str();
        let mut out = String::with_capacity(8192);
        let mut family =
            |name: &str, kind: &str, help: &str, samples: &[(Vec<(&str, &str)>, String)]| {
                // Writing to a String cannot fail.
                let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
                let _ = writeln!(out, "# TYPE {name} {kind}");
                for (labels, value) in samples {
                    out.push_str(name);
                    out.push('{');
                    let _ = write!(out, "side=\"{side}\"");
                    for (k, v) in labels {
                        let _ = write!(out, ",{k}=\"{}\"", escape_label(v));
                    }
                    let _ = writeln!(out, "}} {value}");
                }
            };
        let one = |v: String| vec![(Vec::<(&str, &str)>::new(), v)];
        family(
            "satstp_connections_active",
            "gauge",
            "Relayed connections open now.",
            &one(self.connections_active.get().to_string()),
        );
        family(
            "satstp_connections_total",
            "counter",
            "Relayed connections admitted since start.",
            &one(self.connections_total.get().to_string()),
        );
        let refused: Vec<_> = RefusalReason::ALL
            .iter()
            .map(|r| {
                (
                    vec![("reason", r.as_str())],
                    self.refused(*r).get().to_string(),
                )
            })
            .collect();
        family(
            "satstp_connections_refused_total",
            "counter",
            "Connections refused, by reason.",
            &refused,
        );
        let closed: Vec<_> = CloseReason::ALL
            .iter()
            .map(|r| {
                (
                    vec![("reason", r.as_str())],
                    self.closed(*r).get().to_string(),
                )
            })
            .collect();
        // The HELP names every reason, from the one list of them.
        let reasons: Vec<&str> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
        family(
            "satstp_connections_closed_total",
            "counter",
            &format!(
                "Admitted connections ended, by reason ({}).",
                reasons.join(", ")
            ),
            &closed,
        );
        let by_dir = |f: &dyn Fn(Direction) -> u64| -> Vec<(Vec<(&str, &str)>, String)> {
            Direction::ALL
                .iter()
                .map(|d| (vec![("direction", d.as_str())], f(*d).to_string()))
                .collect()
        };
        family(
            "satstp_tcp_bytes_total",
            "counter",
            "Payload bytes relayed at the TCP side; up is terminal to gateway.",
            &by_dir(&|d| self.tcp_bytes(d).get()),
        );
        family(
            "satstp_hop_bytes_total",
            "counter",
            "Tunnel datagram bytes on the satellite hop, STP and tunnel headers included (IP and UDP headers not); up is terminal to gateway.",
            &by_dir(&|d| self.hop_bytes(d).get()),
        );
        family(
            "satstp_hop_datagrams_total",
            "counter",
            "Tunnel datagrams on the satellite hop; up is terminal to gateway.",
            &by_dir(&|d| self.hop_datagrams(d).get()),
        );
        let names: Vec<String> = stp::stats::TYPE_NAMES
            .iter()
            .map(|(n, _)| n.to_ascii_lowercase())
            .collect();
        let by_type = |counters: &[Counter; STP_TYPES]| -> Vec<(Vec<(&str, &str)>, String)> {
            names
                .iter()
                .zip(counters.iter())
                .map(|(n, c)| (vec![("type", n.as_str())], c.get().to_string()))
                .collect()
        };
        family(
            "satstp_stp_packets_sent_total",
            "counter",
            "STP packets sent by this side, by type (a datagram carrying several types counts once for each).",
            &by_type(&self.stp_sent),
        );
        family(
            "satstp_stp_packets_received_total",
            "counter",
            "STP packets received by this side, by type.",
            &by_type(&self.stp_received),
        );
        family(
            "satstp_stp_retransmissions_total",
            "counter",
            "STP SDs retransmitted by this side.",
            &one(self.stp_retransmissions.get().to_string()),
        );
        family(
            "satstp_stp_retransmitted_bytes_total",
            "counter",
            "STP SD payload bytes retransmitted by this side.",
            &one(self.stp_retransmitted_bytes.get().to_string()),
        );
        family(
            "satstp_stp_connections",
            "gauge",
            "STP connections open on the hop.",
            &one(self.stp_connections.get().to_string()),
        );
        let secs = |us: i64| format!("{:.6}", us as f64 / 1e6);
        family(
            "satstp_stp_srtt_seconds",
            "gauge",
            "Smoothed RTT of the open STP connections: their mean and the largest.",
            &[
                (vec![("stat", "mean")], secs(self.stp_srtt_mean_us.get())),
                (vec![("stat", "max")], secs(self.stp_srtt_max_us.get())),
            ],
        );
        family(
            "satstp_stp_cwnd_bytes",
            "gauge",
            "Congestion windows of the open STP connections: their mean and their sum.",
            &[
                (
                    vec![("stat", "mean")],
                    self.stp_cwnd_mean_bytes.get().to_string(),
                ),
                (
                    vec![("stat", "sum")],
                    self.stp_cwnd_sum_bytes.get().to_string(),
                ),
            ],
        );
        let auth: Vec<_> = AuthFailure::ALL
            .iter()
            .map(|k| {
                (
                    vec![("kind", k.as_str())],
                    self.auth_failures(*k).get().to_string(),
                )
            })
            .collect();
        family(
            "satstp_auth_failures_total",
            "counter",
            "Authentication failures: tunnel datagrams or handshakes failing authentication, handshakes from unknown keys, replayed datagrams, refused SOCKS5 logins.",
            &auth,
        );
        let dropped: Vec<_> = HOP_DROP_REASONS
            .iter()
            .zip(&self.hop_dropped)
            .map(|(r, c)| (vec![("reason", *r)], c.get().to_string()))
            .collect();
        family(
            "satstp_hop_dropped_total",
            "counter",
            "Datagrams dropped by the hop before its STP endpoint, by reason: malformed tunnel datagrams, unknown sessions, handshakes over the handshake rate, handshakes over the session limit, connection-opening datagrams over a terminal's budget (authentication failures and replays are in satstp_auth_failures_total).",
            &dropped,
        );
        family(
            "satstp_hop_socket_overflows_total",
            "counter",
            "Receives the kernel dropped at the hop's UDP sockets because their receive buffers were full (SO_RXQ_OVFL; a receive is a datagram, or a run of datagrams the peer sent in one segmented call): the hop's workers did not read fast enough for the peer's bursts. The peer's STP retransmits what was lost; each rise is also logged with its likely cause.",
            &one(self.hop_socket_overflows.get().to_string()),
        );
        family(
            "satstp_hop_backpressure_episodes_total",
            "counter",
            "Times a hop socket's receive queue filled to a quarter of its buffer (the workers were not keeping up with what arrived) and every stream's advertised STP receive window was held to a share of the buffer until the queue drained below a sixteenth, so the peer waited instead of losing datagrams (receive backpressure).",
            &one(self.hop_backpressure_episodes.get().to_string()),
        );
        family(
            "satstp_hop_window_ceiling_bytes",
            "gauge",
            "The receive window each stream advertises at most while receive backpressure is on (the largest of the workers'); 0 when it is off.",
            &one(self.hop_window_ceiling_bytes.get().to_string()),
        );
        family(
            "satstp_hop_established",
            "gauge",
            "Whether the tunnel session is up (always 1 on a gateway).",
            &one(self.hop_established.get().to_string()),
        );
        family(
            "satstp_tunnel_handshakes_total",
            "counter",
            "Tunnel handshakes completed (on a terminal its own, on a gateway those of all terminals).",
            &one(self.tunnel_handshakes.get().to_string()),
        );
        let by_cipher = self
            .tunnel
            .lock()
            .map(|t| t.sessions_by_cipher)
            .unwrap_or_default();
        let sessions: Vec<_> = crate::tunnel::Cipher::ALL
            .iter()
            .zip(by_cipher)
            .map(|(c, n)| (vec![("cipher", c.name())], n.to_string()))
            .collect();
        family(
            "satstp_tunnel_sessions",
            "gauge",
            "Live tunnel sessions by cipher suite (on a terminal its own, one per worker; on a gateway the current session of every terminal tunnel).",
            &sessions,
        );
        family(
            "satstp_tunnel_rekeys_total",
            "counter",
            "Tunnel sessions rekeyed: a new handshake on a live session (on a terminal its own, on a gateway those of all terminals).",
            &one(self.tunnel_rekeys.get().to_string()),
        );
        family(
            "satstp_tunnel_rekey_failures_total",
            "counter",
            "Terminal: rekeys left unanswered, after which the session was torn down for a new handshake.",
            &one(self.tunnel_rekey_failures.get().to_string()),
        );
        family(
            "satstp_tunnel_stp_checksums_filled_total",
            "counter",
            "STP checksums the tunnel computed as it sealed, for a peer that verifies them (an older version, or a session whose capabilities had not arrived yet); near zero between two ends of this version.",
            &one(self.tunnel_stp_checksums_filled.get().to_string()),
        );
        family(
            "satstp_memory_reserved_bytes",
            "gauge",
            "Relay buffer bytes reserved by open connections, counted against limits.memory_cap_bytes.",
            &one(self.memory_reserved_bytes.get().to_string()),
        );
        family(
            "satstp_read_ahead_bound_bytes",
            "gauge",
            "The STP hop's read-ahead bound: bytes read from TCP connections and not yet sent by STP, all connections together (limits.read_ahead_bytes).",
            &one(self.read_ahead_bound_bytes.get().to_string()),
        );
        family(
            "satstp_read_ahead_bytes",
            "gauge",
            "Bytes read from TCP connections that STP has not sent yet (first transmission), counted against the read-ahead bound.",
            &one(self.read_ahead_bytes.get().to_string()),
        );
        family(
            "satstp_read_ahead_waits_total",
            "counter",
            "Times a relay waited for room in the read-ahead bound before reading its TCP connection.",
            &one(self.read_ahead_waits.get().to_string()),
        );
        family(
            "satstp_status_entries",
            "gauge",
            "Connections in the /status table.",
            &one(self.status_len().to_string()),
        );
        family(
            "satstp_status_entries_dropped_total",
            "counter",
            "Connections left out of the /status table because it was full.",
            &one(self.status_entries_dropped.get().to_string()),
        );
        family(
            "satstp_uptime_seconds",
            "gauge",
            "Seconds since the process started serving.",
            &one(self.started.elapsed().as_secs().to_string()),
        );
        if let Some(policy) = self.quic_policy() {
            let policies: Vec<_> = crate::quic_policy::QuicPolicy::ALL
                .iter()
                .map(|p| {
                    let on = if *p == policy { "1" } else { "0" };
                    (vec![("policy", p.as_str())], on.to_string())
                })
                .collect();
            family(
                "satstp_quic_policy",
                "gauge",
                "The terminal's QUIC (UDP 443) policy in transparent mode: 1 for the one in force.",
                &policies,
            );
            if let Some(verdict) = policy.verdict() {
                family(
                    "satstp_quic_packets_total",
                    "counter",
                    "UDP 443 packets from the LAN the QUIC policy dropped (block) or rejected \
                     (reject), from its nftables counter.",
                    &[(
                        vec![("verdict", verdict)],
                        self.quic_packets.get().to_string(),
                    )],
                );
            }
        }
        out
    }

    /// The `/status` document: side, uptime, the main counters and every connection entry
    /// (ordered by id).
    pub(crate) fn status_json(&self) -> serde_json::Value {
        let connections: Vec<serde_json::Value> = self
            .tracked()
            .iter()
            .map(|c| serde_json::to_value(c.snapshot()).unwrap_or(serde_json::Value::Null))
            .collect();
        let by = |names: &mut dyn Iterator<Item = (&'static str, u64)>| -> serde_json::Value {
            names
                .map(|(k, v)| (k.to_owned(), serde_json::Value::from(v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let refused = by(&mut RefusalReason::ALL
            .iter()
            .map(|r| (r.as_str(), self.refused(*r).get())));
        let closed = by(&mut CloseReason::ALL
            .iter()
            .map(|r| (r.as_str(), self.closed(*r).get())));
        let auth = by(&mut AuthFailure::ALL
            .iter()
            .map(|k| (k.as_str(), self.auth_failures(*k).get())));
        let types = |counters: &[Counter; STP_TYPES]| -> serde_json::Value {
            stp::stats::TYPE_NAMES
                .iter()
                .zip(counters.iter())
                .map(|((n, _), c)| (n.to_ascii_lowercase(), serde_json::Value::from(c.get())))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        serde_json::json!({
            "side": self.side.as_str(),
            "uptime_s": self.started.elapsed().as_secs(),
            "connections_active": self.connections_active.get(),
            "connections_total": self.connections_total.get(),
            "connections_refused": refused,
            "connections_closed": closed,
            "tcp_bytes": {
                "up": self.tcp_bytes(Direction::Up).get(),
                "down": self.tcp_bytes(Direction::Down).get(),
            },
            "hop_bytes": {
                "up": self.hop_bytes(Direction::Up).get(),
                "down": self.hop_bytes(Direction::Down).get(),
            },
            "hop_datagrams": {
                "up": self.hop_datagrams(Direction::Up).get(),
                "down": self.hop_datagrams(Direction::Down).get(),
            },
            "hop_socket_overflows": self.hop_socket_overflows.get(),
            "hop_backpressure_episodes": self.hop_backpressure_episodes.get(),
            "hop_window_ceiling_bytes": self.hop_window_ceiling_bytes.get(),
            "stp": {
                "packets_sent": types(&self.stp_sent),
                "packets_received": types(&self.stp_received),
                "retransmissions": self.stp_retransmissions.get(),
                "retransmitted_bytes": self.stp_retransmitted_bytes.get(),
                "connections": self.stp_connections.get(),
            },
            "hop_established": self.hop_established.get() != 0,
            "tunnel": self.tunnel_json(),
            "auth_failures": auth,
            "memory_reserved_bytes": self.memory_reserved_bytes.get(),
            "read_ahead": {
                "bound_bytes": self.read_ahead_bound_bytes.get(),
                "bytes": self.read_ahead_bytes.get(),
                "waits": self.read_ahead_waits.get(),
            },
            "status_entries_dropped": self.status_entries_dropped.get(),
            "connections": connections,
        })
    }
}

impl Metrics {
    /// `/status`'s `tunnel` object: state, seconds since the last handshake, the last error and
    /// its age (null when none).
    fn tunnel_json(&self) -> serde_json::Value {
        let t = self.tunnel.lock().map(|t| t.clone()).unwrap_or_default();
        let secs =
            |d: Option<std::time::Duration>| d.map(|d| (d.as_secs_f64() * 10.0).round() / 10.0);
        serde_json::json!({
            "state": t.state.as_str(),
            "last_handshake_s_ago": secs(t.last_handshake_ago),
            "last_error": t.last_error,
            "last_error_s_ago": secs(t.last_error_ago),
            "sessions_by_cipher": crate::tunnel::Cipher::ALL
                .iter()
                .zip(t.sessions_by_cipher)
                .map(|(c, n)| (c.name().to_string(), serde_json::json!(n)))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// HELP text escaping of the 0.0.4 format: backslash and line feed.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Label value escaping of the 0.0.4 format: backslash, double quote and line feed.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

// The exposition against the documentation and the Grafana dashboard: they need
// `prometheus_text` and the QUIC policy gauge, which are not API.
#[cfg(test)]
mod tests_docs;
#[cfg(test)]
mod tests_grafana;
#[cfg(test)]
mod tests {
    use super::*;

    /// Checks every line against the exposition format: comments are `# HELP name text` or
    /// `# TYPE name counter|gauge`, each family's TYPE precedes its samples, samples are
    /// `name{label="value",...} number`.
    fn check_exposition(text: &str) -> BTreeMap<String, String> {
        let mut types = BTreeMap::new();
        let mut helped = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(valid_name(name), "{line}");
                assert!(!help.is_empty());
                assert!(helped.insert(name.to_owned()), "duplicate HELP: {line}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(valid_name(name), "{line}");
                assert!(kind == "counter" || kind == "gauge", "{line}");
                assert!(helped.contains(name), "TYPE before HELP: {line}");
                assert!(types.insert(name.to_owned(), kind.to_owned()).is_none());
            } else {
                let (name, rest) = line.split_once('{').expect(line);
                assert!(types.contains_key(name), "sample before TYPE: {line}");
                assert!(name.starts_with("satstp_"));
                if types[name] == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                let (labels, value) = rest.rsplit_once("} ").expect(line);
                value.parse::<f64>().expect(line);
                for pair in labels.split(',') {
                    let (k, v) = pair.split_once('=').expect(line);
                    assert!(valid_name(k), "{line}");
                    assert!(
                        v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                        "{line}"
                    );
                }
                assert!(labels.starts_with("side=\""), "{line}");
            }
        }
        assert!(text.ends_with('\n'));
        types
    }

    fn valid_name(s: &str) -> bool {
        let mut b = s.bytes();
        matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
    }

    #[test]
    fn the_quic_policy_is_shown_with_its_packets() {
        use crate::quic_policy::QuicPolicy;
        let m = Metrics::new(Side::Terminal);
        assert!(!m.prometheus_text().contains("satstp_quic"));
        m.set_quic_policy(QuicPolicy::Reject);
        m.quic_packets.set(12);
        let text = m.prometheus_text();
        check_exposition(&text);
        assert!(text.contains("satstp_quic_policy{side=\"terminal\",policy=\"reject\"} 1\n"));
        assert!(text.contains("satstp_quic_policy{side=\"terminal\",policy=\"pass\"} 0\n"));
        assert!(
            text.contains("satstp_quic_packets_total{side=\"terminal\",verdict=\"rejected\"} 12\n")
        );
        m.set_quic_policy(QuicPolicy::Pass);
        let text = m.prometheus_text();
        assert!(text.contains("satstp_quic_policy{side=\"terminal\",policy=\"pass\"} 1\n"));
        assert!(
            !text.contains("satstp_quic_packets_total"),
            "pass counts nothing"
        );
    }

    #[test]
    fn prometheus_format() {
        let m = Metrics::new(Side::Gateway);
        m.connections_active.inc();
        m.connections_total.add(5);
        m.refused(RefusalReason::Policy).add(2);
        m.closed(CloseReason::IdleTimeout).inc();
        m.tcp_bytes(Direction::Down).add(1000);
        m.hop_bytes(Direction::Up).add(77);
        m.stp_sent(2).unwrap().add(3);
        m.stp_received(1).unwrap().add(4);
        m.stp_retransmissions.inc();
        m.auth_failures(AuthFailure::UnknownKey).inc();
        m.stp_srtt_max_us.set(612_000);
        let text = m.prometheus_text();
        let types = check_exposition(&text);
        assert_eq!(types["satstp_connections_active"], "gauge");
        assert_eq!(types["satstp_connections_total"], "counter");
        assert!(text.contains("satstp_connections_active{side=\"gateway\"} 1\n"));
        assert!(text.contains("satstp_connections_total{side=\"gateway\"} 5\n"));
        assert!(text
            .contains("satstp_connections_refused_total{side=\"gateway\",reason=\"policy\"} 2\n"));
        assert!(text.contains(
            "satstp_connections_closed_total{side=\"gateway\",reason=\"idle_timeout\"} 1\n"
        ));
        let help = text
            .lines()
            .find(|l| l.starts_with("# HELP satstp_connections_closed_total "))
            .unwrap();
        for r in CloseReason::ALL {
            assert!(help.contains(r.as_str()), "{help} lacks {}", r.as_str());
        }
        assert!(text.contains("satstp_tcp_bytes_total{side=\"gateway\",direction=\"down\"} 1000\n"));
        assert!(text.contains("satstp_hop_bytes_total{side=\"gateway\",direction=\"up\"} 77\n"));
        for r in HOP_DROP_REASONS {
            assert!(
                text.contains(&format!(
                    "satstp_hop_dropped_total{{side=\"gateway\",reason=\"{r}\"}} 0\n"
                )),
                "{r}"
            );
        }
        assert!(text.contains("satstp_stp_packets_sent_total{side=\"gateway\",type=\"stat\"} 3\n"));
        assert!(
            text.contains("satstp_stp_packets_received_total{side=\"gateway\",type=\"poll\"} 4\n")
        );
        assert!(text.contains("satstp_stp_retransmissions_total{side=\"gateway\"} 1\n"));
        assert!(
            text.contains("satstp_auth_failures_total{side=\"gateway\",kind=\"unknown_key\"} 1\n")
        );
        assert!(text.contains("satstp_stp_srtt_seconds{side=\"gateway\",stat=\"max\"} 0.612000\n"));
        let t = Metrics::new(Side::Terminal).prometheus_text();
        check_exposition(&t);
        assert!(t.contains("satstp_tunnel_sessions{side=\"terminal\",cipher=\"aes-256-gcm\"} 0\n"));
        assert!(t.contains("satstp_tcp_bytes_total{side=\"terminal\",direction=\"up\"} 0\n"));
    }

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x\\y\nz"), "x\\\\y\\nz");
    }

    #[test]
    fn status_json_shape() {
        let m = Metrics::new(Side::Terminal);
        m.connections_active.add(2);
        let a = m.track(Some("192.0.2.1:40000".into()), None);
        let b = m.track(None, Some("ab".repeat(32)));
        a.set_destination("example.com:443");
        a.set_state(ConnectionState::Open);
        a.set_stream(9);
        a.add_bytes(Direction::Up, 10);
        a.add_bytes(Direction::Down, 25);
        a.set_destination("ignored:1");
        let v = m.status_json();
        assert_eq!(v["side"], "terminal");
        assert_eq!(v["connections_active"], 2);
        assert!(v["uptime_s"].is_u64());
        assert_eq!(v["connections_refused"]["policy"], 0);
        assert_eq!(v["connections_closed"]["idle_timeout"], 0);
        assert_eq!(v["tcp_bytes"]["up"], 0);
        assert_eq!(v["stp"]["packets_sent"]["stat"], 0);
        assert_eq!(v["tunnel"]["state"], "up");
        assert!(v["tunnel"]["last_error"].is_null());
        assert_eq!(v["tunnel"]["sessions_by_cipher"]["aes-256-gcm"], 0);
        assert_eq!(v["tunnel"]["sessions_by_cipher"]["chacha20-poly1305"], 0);
        let conns = v["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 2);
        assert_eq!(conns[0]["id"], a.id());
        assert_eq!(conns[0]["client"], "192.0.2.1:40000");
        assert_eq!(conns[0]["destination"], "example.com:443");
        assert_eq!(conns[0]["state"], "open");
        assert_eq!(conns[0]["bytes_up"], 10);
        assert_eq!(conns[0]["bytes_down"], 25);
        assert_eq!(conns[0]["stream_id"], 9);
        assert!(conns[0]["srtt_ms"].is_null());
        assert!(conns[0]["age_s"].as_f64().unwrap() >= 0.0);
        assert_eq!(conns[1]["id"], b.id());
        assert_eq!(conns[1]["state"], "connecting");
        assert_eq!(conns[1]["terminal"], "ab".repeat(32));
        assert!(conns[1]["destination"].is_null());
        assert_eq!(m.untrack(b.id()).map(|e| e.id()), Some(b.id()));
        assert_eq!(m.status_json()["connections"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn status_table_is_bounded() {
        let m = Metrics::with_status_capacity(Side::Gateway, 2);
        let a = m.track(None, None);
        let _b = m.track(None, None);
        let c = m.track(None, None);
        assert_eq!(m.status_len(), 2);
        assert_eq!(m.status_entries_dropped.get(), 1);
        assert!(m.untrack(c.id()).is_none(), "the third was never entered");
        assert!(m.untrack(a.id()).is_some());
        let _d = m.track(None, None);
        assert_eq!(m.status_len(), 2);
    }

    #[test]
    fn idle_time_follows_activity() {
        let m = Metrics::new(Side::Terminal);
        let t = m.track(None, None);
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            t.idle_for() >= Duration::from_millis(25),
            "{:?}",
            t.idle_for()
        );
        t.add_bytes(Direction::Up, 1);
        assert!(
            t.idle_for() < Duration::from_millis(25),
            "{:?}",
            t.idle_for()
        );
    }

    #[test]
    fn counters_from_many_threads() {
        let m = Arc::new(Metrics::new(Side::Gateway));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.tcp_bytes(Direction::Up).add(3);
                        m.connections_active.inc();
                        m.connections_active.dec();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.tcp_bytes(Direction::Up).get(), 12_000);
        assert_eq!(m.connections_active.get(), 0);
        m.hop_bytes(Direction::Up).set(50);
        m.hop_bytes(Direction::Up).set(40);
        assert_eq!(m.hop_bytes(Direction::Up).get(), 50, "set never moves down");
    }
}
