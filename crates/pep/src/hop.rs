//! The satellite hop as a tokio task: one UDP socket, one `stp::Endpoint`, and the Noise tunnel
//! (`tunnel`) around every datagram. Relays talk to it through [`HopStream`]s: byte streams with
//! backpressure both ways.
//!
//! - Towards the hop, a stream's writes take permits from a per-stream byte budget (the relay
//!   buffer) that the hop task gives back once the bytes are in STP's send buffer; a full budget
//!   blocks the writer, so a slow satellite link stops reads from the TCP socket instead of
//!   growing buffers.
//! - From the hop, received bytes go into a bounded channel; while it is full the hop stops
//!   reading that STP connection, whose receive window then closes.
//!
//! On the terminal side, STP datagrams stay inside the engine until the tunnel handshake
//! completes (the initiation is resent every second), so nothing leaves unencrypted and nothing
//! is lost to the handshake. A terminal that keeps sending but hears nothing authenticated from
//! the gateway for [`REHANDSHAKE_AFTER`] starts a new handshake: after a gateway restart the new
//! gateway knows none of the old STP connections and resets them (they fail cleanly), while new
//! connections work as soon as the new session is up. After a mere outage the new session simply
//! carries the old connections on.
//!
//! With a send allocation (`HopConfig::send_rate_bps`) every datagram leaving the hop passes a
//! token bucket at that rate, counted in link bytes (sealed datagram plus IP and UDP headers), and
//! the endpoint hands out datagrams round robin between connections, so all connections of a
//! side share its allocation fairly and never queue on the satellite link.

use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::{Initiator, Opened, Responder};
use crate::udp_batch::{UdpBatch, MAX_BATCH_BYTES, MAX_SEGMENTS};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

/// Largest chunk a stream hands over at once.
const CHUNK: usize = 64 * 1024;
/// Chunks buffered from the hop towards one stream's reader.
const READ_CHUNKS: usize = 16;
/// How often a handshake initiation is resent until answered.
const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// Most datagrams taken from the socket in one go.
const MAX_BATCH: usize = 256;
/// Socket buffer size asked of the kernel (it may grant less).
const SOCKET_BUFFER: usize = 8 << 20;
/// While a stream's reader is full, how often the hop looks again if no reader wakes it.
const READ_RETRY: Duration = Duration::from_millis(50);
/// Terminal: sending without hearing anything authenticated for this long starts a new handshake.
pub const REHANDSHAKE_AFTER: Duration = Duration::from_secs(5);
/// How often [`Hop::wait_quiet`] looks again.
const QUIET_POLL: Duration = Duration::from_millis(20);
/// Terminal with several gateways: handshake initiations a gateway may leave unanswered before
/// the terminal moves on to the next one (one every `HANDSHAKE_RETRY`).
pub const FAILOVER_AFTER_HANDSHAKES: u32 = 3;
/// IPv4 + UDP header bytes, charged to the send allocation per datagram.
pub const IPV4_UDP_OVERHEAD: usize = 28;
/// IPv6 + UDP header bytes.
pub const IPV6_UDP_OVERHEAD: usize = 48;
/// Shaper bucket depth: this long at the allocated rate (and at least two full datagrams).
const SHAPER_BURST: Duration = Duration::from_millis(5);

/// What the hop tells a stream's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Data(Bytes),
    /// The peer finished sending; no more data follows.
    Finished,
    /// The connection failed (reset, timeout, ...).
    Failed(String),
}

pub(crate) enum StreamCmd {
    Data(u64, Bytes, OwnedSemaphorePermit),
    Shutdown(u64),
    Abort(u64, u16),
}

pub(crate) enum Command {
    Open {
        first: Vec<u8>,
        reply: oneshot::Sender<Result<HopStream, String>>,
    },
    Stream(StreamCmd),
    Status(oneshot::Sender<HopStatus>),
    /// The `Hop` handle was dropped: reset every connection and stop.
    Close,
}

/// Abort code sent when a stream's writer is dropped without a half-close or an abort.
pub const ABORT_DROPPED: u16 = 5;
/// Abort code of the connections a hop resets when its `Hop` handle is dropped.
pub const ABORT_HOP_CLOSED: u16 = 6;

/// One connection across the hop.
pub struct HopStream {
    writer: HopWriter,
    reader: HopReader,
    peer: SocketAddr,
    peer_key: Option<PublicKey>,
}

/// Per-connection detail of a [`HopStatus`].
#[derive(Debug, Clone)]
pub struct StreamStatus {
    pub id: u64,
    /// The other side's hop address.
    pub peer: SocketAddr,
    /// Gateway side: the terminal's public key.
    pub peer_key: Option<PublicKey>,
    pub stats: stp::ConnectionStats,
}

/// STP counters summed over every connection the hop has had (live and closed).
pub type StpTotals = stp::ConnectionTotals;

/// See [`Hop::monitor`].
#[derive(Clone)]
pub struct HopMonitor {
    tx: mpsc::WeakSender<Command>,
}

impl HopMonitor {
    /// A snapshot of the hop's counters and connections (`None` once the hop is gone).
    pub async fn status(&self) -> Option<HopStatus> {
        let tx = self.tx.upgrade()?;
        let (reply, rx) = oneshot::channel();
        tx.send(Command::Status(reply)).await.ok()?;
        drop(tx);
        rx.await.ok()
    }
}

/// A snapshot of a hop, for metrics and `/status`.
#[derive(Debug, Clone)]
pub struct HopStatus {
    /// The hop's UDP address.
    pub local: SocketAddr,
    /// Terminal: whether the tunnel session is up (always true on a gateway).
    pub established: bool,
    /// Tunnel handshakes the terminal started (1 + re-handshakes); 0 on a gateway.
    pub handshakes_started: u64,
    /// UDP datagrams and their payload bytes (sealed: tunnel overhead included, IP/UDP headers
    /// not) sent and received by the hop's socket.
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    pub datagrams_received: u64,
    pub bytes_received: u64,
    /// Datagrams that waited for the send allocation, and the allocation in bit/s of link bytes.
    pub shaped: u64,
    /// Gateway: datagrams opening connections dropped because their terminal opened faster
    /// than [`OPENS_PER_S`].
    pub opens_rate_limited: u64,
    pub send_rate_bps: Option<u64>,
    /// The tunnel's counters (authentication failures, replays, unknown keys, ...).
    pub tunnel: crate::tunnel::Counters,
    pub endpoint: stp::EndpointStats,
    /// Sums over every connection, closed ones included.
    pub totals: StpTotals,
    pub streams: Vec<StreamStatus>,
}

impl HopStream {
    /// The stream's id within its hop.
    pub fn id(&self) -> u64 {
        self.writer.id
    }

    /// The other side's hop address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Gateway side: the public key of the terminal that opened the stream.
    pub fn peer_key(&self) -> Option<PublicKey> {
        self.peer_key
    }

    /// Sends bytes; waits while the relay buffer is full.
    pub async fn write(&self, data: &[u8]) -> Result<(), String> {
        self.writer.write(data).await
    }

    /// Half-close: the peer sees end-of-stream after every byte written so far.
    pub async fn shutdown(&self) {
        self.writer.shutdown().await
    }

    /// Resets the connection.
    pub async fn abort(&self, code: u16) {
        self.writer.abort(code).await
    }

    /// The next event from the peer (`None` once the hop is gone).
    pub async fn recv(&mut self) -> Option<StreamEvent> {
        self.reader.recv().await
    }

    /// Splits into a writer and a reader that can be used from different tasks.
    pub fn split(self) -> (HopWriter, HopReader) {
        (self.writer, self.reader)
    }
}

/// The sending half of a [`HopStream`].
pub struct HopWriter {
    id: u64,
    budget: Arc<Semaphore>,
    budget_bytes: u32,
    tx: mpsc::Sender<Command>,
    /// Set by `shutdown` and `abort`; a writer dropped without either aborts its stream, so a
    /// forgotten stream cannot keep its connection (and the peer's) alive.
    ended: std::sync::atomic::AtomicBool,
}

impl Drop for HopWriter {
    fn drop(&mut self) {
        if self.ended.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let cmd = Command::Stream(StreamCmd::Abort(self.id, ABORT_DROPPED));
        if let Err(mpsc::error::TrySendError::Full(cmd)) = self.tx.try_send(cmd) {
            // The hop is busy: deliver the abort from a task rather than lose it.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let tx = self.tx.clone();
                rt.spawn(async move {
                    let _ = tx.send(cmd).await;
                });
            }
        }
    }
}

impl HopWriter {
    /// Sends bytes; waits while the relay buffer is full.
    pub async fn write(&self, data: &[u8]) -> Result<(), String> {
        for piece in data.chunks(self.piece_len()) {
            self.send_piece(Bytes::copy_from_slice(piece)).await?;
        }
        Ok(())
    }

    /// [`HopWriter::write`] without copying: the hop keeps slices of `data` until STP has taken
    /// them.
    pub async fn write_bytes(&self, data: Bytes) -> Result<(), String> {
        let step = self.piece_len();
        let mut at = 0;
        while at < data.len() {
            let end = data.len().min(at + step);
            self.send_piece(data.slice(at..end)).await?;
            at = end;
        }
        Ok(())
    }

    fn piece_len(&self) -> usize {
        CHUNK.min(self.budget_bytes as usize).max(1)
    }

    async fn send_piece(&self, piece: Bytes) -> Result<(), String> {
        let permit = Arc::clone(&self.budget)
            .acquire_many_owned(piece.len() as u32)
            .await
            .map_err(|_| "hop closed".to_string())?;
        self.tx
            .send(Command::Stream(StreamCmd::Data(self.id, piece, permit)))
            .await
            .map_err(|_| "hop closed".to_string())
    }
    /// Half-close: the peer sees end-of-stream after every byte written so far.
    pub async fn shutdown(&self) {
        self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self
            .tx
            .send(Command::Stream(StreamCmd::Shutdown(self.id)))
            .await;
    }
    /// Resets the connection.
    pub async fn abort(&self, code: u16) {
        self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self
            .tx
            .send(Command::Stream(StreamCmd::Abort(self.id, code)))
            .await;
    }
}

/// The receiving half of a [`HopStream`].
pub struct HopReader {
    rx: mpsc::Receiver<StreamEvent>,
    /// Wakes the hop task when this reader makes room (it may be holding data for us).
    room: Arc<Notify>,
}

impl HopReader {
    /// The next event from the peer (`None` once the hop is gone).
    pub async fn recv(&mut self) -> Option<StreamEvent> {
        let ev = self.rx.recv().await;
        self.room.notify_one();
        ev
    }
}

/// How the hop authenticates.
pub enum Security {
    /// Terminal: knows the gateway's key; connects to `gateway`.
    Terminal {
        local: PrivateKey,
        gateway_key: PublicKey,
        gateway: SocketAddr,
    },
    /// Gateway: serves the terminals of the allow-list.
    Gateway { responder: Box<Responder> },
    /// Terminal with several gateways (address and key), in order of preference: it uses the
    /// first that answers; when the one in use stops answering (no answer to a new handshake
    /// for [`FAILOVER_AFTER_HANDSHAKES`] tries), the connections that reached it are reset and
    /// the terminal moves to the next, after the last back to the first; connections that had
    /// sent nothing yet open at the next one. `docs/scaling.md`.
    TerminalFailover {
        local: PrivateKey,
        gateways: Vec<(SocketAddr, PublicKey)>,
    },
}

/// Parameters of a hop.
pub struct HopConfig {
    pub endpoint: EndpointConfig,
    /// Bytes a stream may have handed to the hop and not yet seen accepted by STP.
    pub relay_buffer_bytes: u32,
    pub seed: u64,
    /// This side's allocation on the satellite link, bit/s of link bytes (datagrams with their
    /// IP and UDP headers); `None` sends as fast as the connections' controllers allow.
    pub send_rate_bps: Option<u64>,
}

/// A running hop.
pub struct Hop {
    tx: mpsc::Sender<Command>,
    /// Gateway side: streams opened by terminals.
    pub incoming: mpsc::Receiver<HopStream>,
    local: SocketAddr,
}

impl Drop for Hop {
    /// Dropping the handle stops the hop: its connections are reset (their streams fail) and
    /// its socket closes. Keep the `Hop` for as long as its streams should live.
    fn drop(&mut self) {
        let _ = self.tx.try_send(Command::Close);
    }
}

impl Hop {
    /// Starts the hop task on `socket`.
    pub fn start(socket: UdpSocket, security: Security, config: HopConfig) -> Result<Hop, String> {
        Self::start_with_capture(socket, security, config, None)
    }

    /// As [`Hop::start`], writing every STP datagram the hop sends or receives (in clear, with
    /// its UDP addresses) to `capture` ([`crate::capture`]).
    pub fn start_with_capture(
        socket: UdpSocket,
        security: Security,
        config: HopConfig,
        capture: Option<crate::capture::Capture>,
    ) -> Result<Hop, String> {
        use rand_core::SeedableRng;
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        // Room for bursts of a large window; the kernel may cap it (net.core.rmem_max).
        let sref = socket2::SockRef::from(&socket);
        let _ = sref.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sref.set_send_buffer_size(SOCKET_BUFFER);
        let rng = Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(config.seed));
        let endpoint = Endpoint::new(config.endpoint.clone(), rng).map_err(|e| e.to_string())?;
        if config.send_rate_bps == Some(0) {
            return Err("send_rate_bps must be positive".into());
        }
        let (tx, rx) = mpsc::channel(1024);
        let (in_tx, in_rx) = mpsc::channel(256);
        let terminal = match security {
            Security::Terminal {
                local,
                gateway_key,
                gateway,
            } => Ok((local, vec![(gateway, gateway_key)])),
            Security::TerminalFailover { local, gateways } => Ok((local, gateways)),
            Security::Gateway { responder } => Err(responder),
        };
        let security = match terminal {
            Ok((local, gateways)) => {
                let &(gateway, gateway_key) = gateways
                    .first()
                    .ok_or("a terminal needs at least one gateway")?;
                let index = config.seed as u32 | 1;
                let init = new_initiator(&local, &gateway_key, index)?;
                Sec::Terminal {
                    init: Box::new(init),
                    gateway,
                    local_key: local,
                    gateway_key,
                    handshakes: 1,
                    gateways,
                    current: 0,
                    unanswered: 0,
                }
            }
            Err(responder) => Sec::Gateway { responder },
        };
        let overhead = if local.is_ipv6() {
            IPV6_UDP_OVERHEAD
        } else {
            IPV4_UDP_OVERHEAD
        };
        let task = HopTask {
            udp: UdpBatch::new(&socket),
            socket,
            endpoint,
            security,
            streams: HashMap::new(),
            by_handle: HashMap::new(),
            dirty: HashSet::new(),
            blocked: HashSet::new(),
            closing: HashSet::new(),
            next_id: 1,
            commands: rx,
            incoming: in_tx,
            self_tx: tx.clone(),
            relay_buffer: config.relay_buffer_bytes.max(CHUNK as u32),
            start: tokio::time::Instant::now(),
            room: Arc::new(Notify::new()),
            shaper: config.send_rate_bps.map(|r| Shaper::new(r, overhead)),
            counts: Counts::default(),
            open_budgets: OpenBudgets::default(),
            last_heard: None,
            batch: Batch::default(),
            sealed: Vec::with_capacity(2048),
            sent_since_heard: None,
            shutting_down: false,
            capture,
            local,
        };
        tokio::spawn(task.run());
        Ok(Hop {
            tx,
            incoming: in_rx,
            local,
        })
    }

    /// The hop's UDP address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A snapshot of the hop's counters and connections (`None` once the hop is gone).
    pub async fn status(&self) -> Option<HopStatus> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Status(reply)).await.ok()?;
        rx.await.ok()
    }

    /// Waits until the hop carries no stream any more — every stream's bytes and end were
    /// delivered and acknowledged, or it failed — or `deadline` passes; true if none is left.
    /// A graceful shutdown waits for this after its relays finished, so a clean close that is
    /// still crossing the hop arrives as one.
    pub async fn wait_quiet(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            match self.status().await {
                None => return true,
                Some(s) if s.streams.is_empty() => return true,
                Some(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + QUIET_POLL)).await;
        }
    }

    /// Stops the hop now and waits for its task to end: the connections left are reset (their
    /// RSTs leave before this returns) and the socket closes.
    pub async fn close(&self) {
        let _ = self.tx.send(Command::Close).await;
        self.tx.closed().await;
    }

    /// A handle that asks this hop for its status after the `Hop` itself was handed on (to
    /// `relay::serve`, say). It does not keep the hop alive.
    pub fn monitor(&self) -> HopMonitor {
        HopMonitor {
            tx: self.tx.downgrade(),
        }
    }

    /// Terminal side: opens a stream whose first bytes (`first`) ride on the STP BGN.
    pub async fn open(&self, first: Vec<u8>) -> Result<HopStream, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Open { first, reply })
            .await
            .map_err(|_| "hop closed".to_string())?;
        rx.await.map_err(|_| "hop closed".to_string())?
    }
}

/// A tunnel initiator stamped with the wall clock (the responder rejects initiations older than
/// the last one it accepted from the same key).
fn new_initiator(
    local: &PrivateKey,
    gateway_key: &PublicKey,
    index: u32,
) -> Result<Initiator, String> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Initiator::new(local, gateway_key, index, ts).map_err(|e| e.to_string())
}

/// Token bucket in link bytes for the send allocation.
struct Shaper {
    rate_bps: u64,
    bytes_per_s: f64,
    capacity: f64,
    tokens: f64,
    last: tokio::time::Instant,
    overhead: usize,
}

impl Shaper {
    fn new(rate_bps: u64, overhead: usize) -> Shaper {
        let bytes_per_s = rate_bps as f64 / 8.0;
        let capacity = (bytes_per_s * SHAPER_BURST.as_secs_f64()).max(2.0 * 1500.0);
        Shaper {
            rate_bps,
            bytes_per_s,
            capacity,
            tokens: capacity,
            last: tokio::time::Instant::now(),
            overhead,
        }
    }

    fn refill(&mut self, now: tokio::time::Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.bytes_per_s).min(self.capacity);
        self.last = now;
    }

    /// Whether a datagram may leave now (the bucket may go negative by one datagram).
    fn ready(&mut self, now: tokio::time::Instant) -> bool {
        self.refill(now);
        self.tokens > 0.0
    }

    fn charge(&mut self, datagram: usize) {
        self.tokens -= (datagram + self.overhead) as f64;
    }

    /// When the bucket is positive again.
    fn ready_at(&self) -> tokio::time::Instant {
        if self.tokens > 0.0 {
            return self.last;
        }
        let wait = (1.0 - self.tokens) / self.bytes_per_s;
        self.last + Duration::from_secs_f64(wait)
    }
}

/// Sealed datagrams waiting to leave in one system call: all to `dest`, all `segment` bytes
/// long except possibly the last (which then closes the batch).
#[derive(Default)]
struct Batch {
    dest: Option<SocketAddr>,
    segment: usize,
    count: usize,
    bytes: Vec<u8>,
    /// The last datagram was shorter than `segment`: nothing may follow it.
    closed: bool,
}

impl Batch {
    /// Whether a datagram of `len` bytes to `dest` may join.
    fn fits(&self, dest: SocketAddr, len: usize) -> bool {
        match self.dest {
            None => true,
            Some(d) => {
                d == dest
                    && !self.closed
                    && len <= self.segment
                    && self.count < MAX_SEGMENTS
                    && self.bytes.len() + len <= MAX_BATCH_BYTES
            }
        }
    }

    fn push(&mut self, dest: SocketAddr, datagram: &[u8]) {
        if self.dest.is_none() {
            self.dest = Some(dest);
            self.segment = datagram.len();
        } else if datagram.len() < self.segment {
            self.closed = true;
        }
        self.count += 1;
        self.bytes.extend_from_slice(datagram);
    }

    /// Whether no further datagram can join.
    fn full(&self) -> bool {
        self.closed
            || self.count >= MAX_SEGMENTS
            || self.bytes.len() + self.segment > MAX_BATCH_BYTES
    }

    fn clear(&mut self) {
        self.dest = None;
        self.segment = 0;
        self.count = 0;
        self.bytes.clear();
        self.closed = false;
    }
}

#[derive(Default)]
struct Counts {
    datagrams_sent: u64,
    bytes_sent: u64,
    datagrams_received: u64,
    bytes_received: u64,
    shaped: u64,
    opens_rate_limited: u64,
}

/// Sustained rate of datagrams opening connections (carrying a BGN) a gateway takes from one
/// terminal session, per second, and the burst above it. A BGN rides on every datagram of a
/// connection's first round trip, so this admits some 170 new connections a second per
/// terminal, 500 in a burst — beyond a household's or a ship's browsing — while a terminal (or
/// a stolen key) opening connections as fast as it can costs the gateway a header check per
/// datagram, not a connection, a stream and a relay each (`satstp bench flood`: 39 % of a
/// download's goodput kept without this budget, 98 % with it).
pub const OPENS_PER_S: f64 = 500.0;
pub const OPENS_BURST: f64 = 1500.0;

/// The per-session token buckets behind [`OPENS_PER_S`].
#[derive(Default)]
struct OpenBudgets {
    buckets: HashMap<u32, (f64, tokio::time::Instant)>,
}

impl OpenBudgets {
    /// Takes one token from `session`'s bucket; false when it is empty.
    fn allow(&mut self, session: u32, now: tokio::time::Instant) -> bool {
        if self.buckets.len() > MAX_OPEN_BUDGETS && !self.buckets.contains_key(&session) {
            // Sessions come and go (restarts, failovers); start afresh rather than grow.
            self.buckets.clear();
        }
        let (tokens, at) = self.buckets.entry(session).or_insert((OPENS_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * OPENS_PER_S).min(OPENS_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Most sessions with an open budget remembered at once.
const MAX_OPEN_BUDGETS: usize = 8192;

enum Sec {
    Terminal {
        init: Box<Initiator>,
        gateway: SocketAddr,
        local_key: PrivateKey,
        gateway_key: PublicKey,
        handshakes: u64,
        /// Every gateway in order of preference; `gateway` and `gateway_key` are entry `current`.
        /// The STP endpoint knows the gateway in use by the first one's address, whichever it
        /// is: datagrams go to `gateway` and come from it under that name.
        gateways: Vec<(SocketAddr, PublicKey)>,
        current: usize,
        /// Handshake initiations sent to the current gateway since it was last heard.
        unanswered: u32,
    },
    Gateway {
        responder: Box<Responder>,
    },
}

struct StreamState {
    handle: ConnectionHandle,
    peer: SocketAddr,
    peer_key: Option<PublicKey>,
    events: mpsc::Sender<StreamEvent>,
    /// Bytes received from the stream's writer not yet taken by STP, with their permits.
    /// Bytes accepted from the writer that STP's send buffer has not taken yet, in order. The
    /// permit returns their share of the relay budget once STP has them; the first piece of a
    /// stream opened by this side (stream header and early data) has none.
    pending: std::collections::VecDeque<(Bytes, Option<OwnedSemaphorePermit>)>,
    shutdown_requested: bool,
    finished_sent: bool,
    /// A chunk read from STP that the reader had no room for yet.
    held: Option<Bytes>,
    /// The connection closed cleanly and was freed; the reader still has to take the end.
    freed: bool,
}

struct HopTask {
    socket: UdpSocket,
    /// Segmented sends and coalesced receives on `socket` where the kernel offers them.
    udp: UdpBatch,
    endpoint: Endpoint,
    security: Sec,
    streams: HashMap<u64, StreamState>,
    by_handle: HashMap<ConnectionHandle, u64>,
    /// Streams to pump at the next turn: a command or a connection event touched them.
    /// Pumping visits only these (and `blocked` and `closing`), never every stream.
    dirty: HashSet<u64>,
    /// Streams whose reader had no room for an event: pumped again on every turn.
    blocked: HashSet<u64>,
    /// Streams whose connection closed: pumped on every turn until the connection is freed.
    closing: HashSet<u64>,
    next_id: u64,
    commands: mpsc::Receiver<Command>,
    incoming: mpsc::Sender<HopStream>,
    self_tx: mpsc::Sender<Command>,
    relay_buffer: u32,
    start: tokio::time::Instant,
    /// Notified by readers as they take events.
    room: Arc<Notify>,
    shaper: Option<Shaper>,
    counts: Counts,
    /// Gateway: how fast each terminal session may open connections.
    open_budgets: OpenBudgets,
    /// Terminal: when the gateway was last heard (an authenticated datagram).
    last_heard: Option<tokio::time::Instant>,
    /// Terminal: the first send since the gateway was last heard.
    sent_since_heard: Option<tokio::time::Instant>,
    /// The `Hop` handle is gone: reset everything and stop.
    shutting_down: bool,
    /// Reused between flushes: the datagrams waiting to leave together, and one sealed datagram.
    batch: Batch,
    sealed: Vec<u8>,
    /// Where the STP datagrams are copied in clear, when capturing (`--capture`).
    capture: Option<crate::capture::Capture>,
    /// The socket's address, the source of captured sent datagrams.
    local: SocketAddr,
}

impl HopTask {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    fn established(&self) -> bool {
        match &self.security {
            Sec::Terminal { init, .. } => init.is_established(),
            Sec::Gateway { .. } => true,
        }
    }

    fn new_stream(&mut self, handle: ConnectionHandle) -> HopStream {
        let id = self.next_id;
        self.next_id += 1;
        let peer = self
            .endpoint
            .remote(handle)
            .unwrap_or_else(|| self.socket.local_addr().unwrap_or(([0, 0, 0, 0], 0).into()));
        let peer_key = match &self.security {
            Sec::Gateway { responder } => responder
                .session_for_addr(peer)
                .and_then(|s| responder.session_peer(s))
                .copied(),
            Sec::Terminal { gateway_key, .. } => Some(*gateway_key),
        };
        let (ev_tx, ev_rx) = mpsc::channel(READ_CHUNKS);
        self.streams.insert(
            id,
            StreamState {
                handle,
                peer,
                peer_key,
                events: ev_tx,
                pending: Default::default(),
                shutdown_requested: false,
                finished_sent: false,
                held: None,
                freed: false,
            },
        );
        self.by_handle.insert(handle, id);
        self.dirty.insert(id);
        HopStream {
            writer: HopWriter {
                id,
                budget: Arc::new(Semaphore::new(self.relay_buffer as usize)),
                budget_bytes: self.relay_buffer,
                tx: self.self_tx.clone(),
                ended: Default::default(),
            },
            reader: HopReader {
                rx: ev_rx,
                room: Arc::clone(&self.room),
            },
            peer,
            peer_key,
        }
    }

    /// Forgets a stream (its connection's counters reach the endpoint's totals when the
    /// connection is freed).
    fn remove_stream(&mut self, id: u64) -> Option<StreamState> {
        let s = self.streams.remove(&id)?;
        self.by_handle.remove(&s.handle);
        self.dirty.remove(&id);
        self.blocked.remove(&id);
        self.closing.remove(&id);
        Some(s)
    }

    async fn run(mut self) {
        let mut buf = vec![0u8; 65_536];
        let mut plain = Vec::with_capacity(65_536);
        let mut next_handshake = tokio::time::Instant::now();
        loop {
            let now = self.now();
            let stp_deadline = self
                .endpoint
                .poll_timeout(now)
                .map(|t| self.start + Duration::from_nanos(t.as_nanos()));
            let mut wake = stp_deadline
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1));
            if let Some(sh) = &self.shaper {
                // Nothing can leave before the bucket refills; timers wait for it too (at most
                // one datagram's time on the link).
                wake = wake.max(sh.ready_at());
            }
            if !self.established() {
                wake = wake.min(next_handshake);
            }
            let holding = !self.blocked.is_empty();
            if holding {
                // A backstop: readers notify as they make room.
                wake = wake.min(tokio::time::Instant::now() + READ_RETRY);
            }
            let room = Arc::clone(&self.room);
            tokio::select! {
                r = self.socket.readable() => {
                                        if r.is_ok() {
                        // Take everything already queued (up to MAX_BATCH datagrams) before
                        // pumping, so a burst cannot overflow the socket's receive buffer while
                        // we work per datagram.
                        let mut taken = 0;
                        while taken < MAX_BATCH {
                            let Ok(got) = self.udp.try_recv(&self.socket, &mut buf) else {
                                break;
                            };
                            let data = buf.get(..got.len).unwrap_or_default();
                            for d in data.chunks(got.segment.max(1)) {
                                taken += 1;
                                self.on_datagram(d, got.from, &mut plain).await;
                            }
                        }
                    }
                }
                cmd = self.commands.recv() => {
                                        match cmd {
                        Some(c) => self.on_command(c),
                        None => {
                            if self.streams.is_empty() { return; }
                        }
                    }
                }
                _ = room.notified(), if holding => {}
                _ = tokio::time::sleep_until(wake) => {
                                        let now = self.now();
                    self.endpoint.handle_timeout(now);
                }
            }
            self.check_gateway_silence(&mut next_handshake);
            if !self.established() && tokio::time::Instant::now() >= next_handshake {
                self.fail_over_if_unanswered();
                if let Sec::Terminal { init, gateway, .. } = &self.security {
                    let _ = self.socket.send_to(init.initiation(), *gateway).await;
                }
                next_handshake = tokio::time::Instant::now() + HANDSHAKE_RETRY;
            }
            self.pump_streams().await;
            self.flush(&mut plain).await;
            if self.shutting_down {
                self.reset_all();
                self.flush(&mut plain).await;
                return;
            }
        }
    }

    /// Resets every connection (their RSTs leave with the next flush) and fails every stream.
    fn reset_all(&mut self) {
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(s) = self.remove_stream(id) {
                if let Some(c) = self.endpoint.connection(s.handle) {
                    c.abort(ABORT_HOP_CLOSED);
                }
                let _ = s.events.try_send(StreamEvent::Failed("hop closed".into()));
            }
        }
    }

    /// Terminal with several gateways: counts the initiation about to be sent to the current
    /// gateway; when it has left [`FAILOVER_AFTER_HANDSHAKES`] unanswered, resets the
    /// connections through it and moves to the next gateway with a fresh handshake.
    fn fail_over_if_unanswered(&mut self) {
        let Sec::Terminal {
            init,
            gateway,
            local_key,
            gateway_key,
            handshakes,
            gateways,
            current,
            unanswered,
        } = &mut self.security
        else {
            return;
        };
        *unanswered += 1;
        if gateways.len() < 2 || *unanswered <= FAILOVER_AFTER_HANDSHAKES {
            return;
        }
        let next = (*current + 1) % gateways.len();
        let (addr, key) = gateways[next];
        let index = init.index().wrapping_add(2) | 1;
        let Ok(fresh) = new_initiator(local_key, &key, index) else {
            return;
        };
        tracing::warn!(
            from = %gateway,
            to = %addr,
            "gateway left {FAILOVER_AFTER_HANDSHAKES} handshakes unanswered; failing over"
        );
        **init = fresh;
        *gateway = addr;
        *gateway_key = key;
        *current = next;
        *unanswered = 1;
        *handshakes += 1;
        self.sent_since_heard = None;
        // Connections that reached the old gateway cannot move: reset them so their clients
        // see the failure at once rather than at their idle timeout. Connections that have
        // sent nothing yet (opened while no gateway answered) open at the new one.
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            let handle = self.streams.get(&id).map(|st| st.handle);
            let sent = handle
                .and_then(|h| self.endpoint.connection(h))
                .is_some_and(|c| c.stats().datagrams_sent > 0);
            if !sent {
                continue;
            }
            if let Some(st) = self.remove_stream(id) {
                if let Some(c) = self.endpoint.connection(st.handle) {
                    c.abort(ABORT_HOP_CLOSED);
                }
                let _ = st
                    .events
                    .try_send(StreamEvent::Failed("gateway failed over".into()));
            }
        }
    }

    /// Terminal: a gateway silent while we send has probably restarted and lost our session;
    /// start a new handshake.
    fn check_gateway_silence(&mut self, next_handshake: &mut tokio::time::Instant) {
        let Some(since) = self.sent_since_heard else {
            return;
        };
        if since.elapsed() < REHANDSHAKE_AFTER || !self.established() {
            return;
        }
        if let Sec::Terminal {
            init,
            local_key,
            gateway_key,
            handshakes,
            ..
        } = &mut self.security
        {
            let index = init.index().wrapping_add(2) | 1;
            if let Ok(fresh) = new_initiator(local_key, gateway_key, index) {
                **init = fresh;
                *handshakes += 1;
                *next_handshake = tokio::time::Instant::now();
                self.sent_since_heard = None;
            }
        }
    }

    async fn on_datagram(&mut self, data: &[u8], from: SocketAddr, plain: &mut Vec<u8>) {
        let now = self.now();
        self.counts.datagrams_received += 1;
        self.counts.bytes_received += data.len() as u64;
        match &mut self.security {
            Sec::Terminal {
                init,
                gateway,
                unanswered,
                gateways,
                ..
            } => {
                if from != *gateway {
                    return;
                }
                // The endpoint's name for whichever gateway is in use.
                let endpoint_from = gateways.first().map_or(from, |g| g.0);
                let opened = init.open(data, plain);
                if opened.is_ok() {
                    *unanswered = 0;
                }
                match opened {
                    Ok(Opened::Data { .. }) => {
                        self.last_heard = Some(tokio::time::Instant::now());
                        self.sent_since_heard = None;
                        if let Some(c) = &mut self.capture {
                            c.record(from, self.local, plain);
                        }
                        self.endpoint.handle_datagram(now, endpoint_from, plain);
                    }
                    Ok(_) => {
                        self.last_heard = Some(tokio::time::Instant::now());
                        self.sent_since_heard = None;
                    }
                    Err(_) => {}
                }
            }
            Sec::Gateway { responder } => match responder.open(now, data, from, plain) {
                Ok(Opened::Reply { .. }) if self.socket.send_to(plain, from).await.is_ok() => {
                    self.counts.datagrams_sent += 1;
                    self.counts.bytes_sent += plain.len() as u64;
                }
                Ok(Opened::Data { session }) => {
                    if let Some(c) = &mut self.capture {
                        c.record(from, self.local, plain);
                    }
                    let opens = stp::wire::peek_types(plain)
                        .is_some_and(|t| t.contains(stp::wire::Types::BGN));
                    if opens
                        && !self
                            .open_budgets
                            .allow(session, tokio::time::Instant::now())
                    {
                        self.counts.opens_rate_limited += 1;
                        return;
                    }
                    self.endpoint.handle_datagram(now, from, plain)
                }
                _ => {}
            },
        }
    }

    fn on_command(&mut self, c: Command) {
        match c {
            Command::Open { first, reply } => {
                let Sec::Terminal { gateways, .. } = &self.security else {
                    let _ = reply.send(Err("only a terminal opens streams".into()));
                    return;
                };
                // The endpoint knows every gateway by the first one's address (see
                // `Sec::Terminal::gateways`), so connections not yet sent survive a failover.
                let Some(&(gateway, _)) = gateways.first() else {
                    let _ = reply.send(Err("no gateway".into()));
                    return;
                };
                let now = self.now();
                match self.endpoint.connect(now, gateway) {
                    Ok(h) => {
                        // As much of the first piece as the send buffer takes rides in the BGN's
                        // flight; the rest waits in the stream's queue like any later write, so
                        // no byte is cut whatever the buffer size.
                        let mut first = Bytes::from(first);
                        if let Some(c) = self.endpoint.connection(h) {
                            let n = c.write_bytes(&first).unwrap_or(0);
                            first = first.slice(n..);
                        }
                        let s = self.new_stream(h);
                        if !first.is_empty() {
                            if let Some(st) = self.streams.get_mut(&s.id()) {
                                st.pending.push_back((first, None));
                            }
                        }
                        let _ = reply.send(Ok(s));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.to_string()));
                    }
                }
            }
            Command::Stream(StreamCmd::Data(id, bytes, permit)) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.pending.push_back((bytes, Some(permit)));
                    self.dirty.insert(id);
                }
            }
            Command::Stream(StreamCmd::Shutdown(id)) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.shutdown_requested = true;
                    self.dirty.insert(id);
                }
            }
            Command::Stream(StreamCmd::Abort(id, code)) => {
                if let Some(s) = self.remove_stream(id) {
                    if let Some(c) = self.endpoint.connection(s.handle) {
                        c.abort(code);
                    }
                }
            }
            Command::Status(reply) => {
                let _ = reply.send(self.status());
            }
            Command::Close => self.shutting_down = true,
        }
    }

    fn status(&mut self) -> HopStatus {
        let mut totals = self.endpoint.stats().closed.clone();
        for h in self.endpoint.handles() {
            if let Some(c) = self.endpoint.connection(h) {
                totals.add(&c.stats());
            }
        }
        let mut streams = Vec::with_capacity(self.streams.len());
        for (&id, s) in &self.streams {
            if let Some(c) = self.endpoint.connection(s.handle) {
                streams.push(StreamStatus {
                    id,
                    peer: s.peer,
                    peer_key: s.peer_key,
                    stats: c.stats(),
                });
            }
        }
        streams.sort_by_key(|s| s.id);
        let (tunnel, handshakes_started) = match &self.security {
            Sec::Terminal {
                init, handshakes, ..
            } => (*init.counters(), *handshakes),
            Sec::Gateway { responder } => (*responder.counters(), 0),
        };
        HopStatus {
            local: self.socket.local_addr().unwrap_or(([0, 0, 0, 0], 0).into()),
            established: self.established(),
            handshakes_started,
            datagrams_sent: self.counts.datagrams_sent,
            bytes_sent: self.counts.bytes_sent,
            datagrams_received: self.counts.datagrams_received,
            bytes_received: self.counts.bytes_received,
            shaped: self.counts.shaped,
            opens_rate_limited: self.counts.opens_rate_limited,
            send_rate_bps: self.shaper.as_ref().map(|s| s.rate_bps),
            tunnel,
            endpoint: self.endpoint.stats().clone(),
            totals,
            streams,
        }
    }

    /// Moves data between streams and STP connections, and passes events on.
    async fn pump_streams(&mut self) {
        // Accept (gateway side).
        while let Some(h) = self.endpoint.accept() {
            let s = self.new_stream(h);
            let id = s.id();
            if self.incoming.try_send(s).is_err() {
                self.remove_stream(id);
                if let Some(c) = self.endpoint.connection(h) {
                    c.abort(2);
                }
            }
        }
        // Connection events.
        while let Some((h, ev)) = self.endpoint.poll_event() {
            let Some(&id) = self.by_handle.get(&h) else {
                continue;
            };
            match ev {
                Event::Failed(e) => {
                    if let Some(s) = self.remove_stream(id) {
                        let _ = s.events.try_send(StreamEvent::Failed(e.to_string()));
                    }
                }
                Event::Closed => {
                    self.closing.insert(id);
                    self.dirty.insert(id);
                }
                _ => {
                    self.dirty.insert(id);
                }
            }
        }
        let mut ids: Vec<u64> = self.dirty.drain().collect();
        ids.extend(self.blocked.iter().filter(|id| !self.dirty.contains(id)));
        ids.extend(self.closing.iter());
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            self.blocked.remove(&id);
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let Some(c) = self.endpoint.connection(s.handle) else {
                // Freed without a failure (a failure removes the stream as its event is taken):
                // it closed cleanly with every byte read from it. Hand the reader what is held,
                // then the end, as it makes room; only then forget the stream.
                s.freed = true;
                if let Some(b) = s.held.take() {
                    if let Err(mpsc::error::TrySendError::Full(StreamEvent::Data(b))) =
                        s.events.try_send(StreamEvent::Data(b))
                    {
                        s.held = Some(b);
                        self.blocked.insert(id);
                        continue;
                    }
                }
                if !s.finished_sent
                    && matches!(
                        s.events.try_send(StreamEvent::Finished),
                        Err(mpsc::error::TrySendError::Full(_))
                    )
                {
                    self.blocked.insert(id);
                    continue;
                }
                self.remove_stream(id);
                continue;
            };
            // Writer → STP, as far as STP's send buffer takes it.
            while let Some((bytes, _)) = s.pending.front_mut() {
                match c.write_bytes(bytes) {
                    Ok(n) if n == bytes.len() => {
                        s.pending.pop_front();
                    }
                    Ok(n) => {
                        let rest = bytes.slice(n..);
                        *bytes = rest;
                        break;
                    }
                    Err(_) => {
                        s.pending.clear();
                        break;
                    }
                }
            }
            if s.pending.is_empty() && s.shutdown_requested {
                c.shutdown();
            }
            // STP → reader, while the reader has room.
            loop {
                let chunk = match s.held.take() {
                    Some(b) => b,
                    None => match c.read_chunk(CHUNK) {
                        Ok(Some(b)) => b,
                        Ok(None) => {
                            if !s.finished_sent {
                                match s.events.try_send(StreamEvent::Finished) {
                                    Ok(()) => s.finished_sent = true,
                                    Err(mpsc::error::TrySendError::Full(_)) => {
                                        self.blocked.insert(id);
                                    }
                                    Err(_) => {}
                                }
                            }
                            break;
                        }
                        Err(_) => break,
                    },
                };
                match s.events.try_send(StreamEvent::Data(chunk)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(StreamEvent::Data(b))) => {
                        s.held = Some(b);
                        self.blocked.insert(id);
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
    }

    /// Sends what the endpoint has to send (as far as the send allocation allows), sealing each
    /// datagram. Runs of equal-sized datagrams to one destination leave in one system call
    /// where the kernel segments them.
    async fn flush(&mut self, plain: &mut Vec<u8>) {
        if !self.established() {
            return;
        }
        let mut sealed = std::mem::take(&mut self.sealed);
        let mut batch = std::mem::take(&mut self.batch);
        loop {
            if let Some(sh) = &mut self.shaper {
                if !sh.ready(tokio::time::Instant::now()) {
                    self.counts.shaped += 1;
                    break;
                }
            }
            let now = self.now();
            let Some(t) = self.endpoint.poll_transmit(now, plain) else {
                break;
            };
            let Some(datagram) = plain.get(..t.size) else {
                continue;
            };
            // A terminal sends everything to the gateway in use (its endpoint names it by the
            // first gateway's address).
            let destination = match &self.security {
                Sec::Terminal { gateway, .. } => *gateway,
                Sec::Gateway { .. } => t.destination,
            };
            if let Some(c) = &mut self.capture {
                c.record(self.local, destination, datagram);
            }
            let ok = match &mut self.security {
                Sec::Terminal { init, .. } => init.seal(datagram, &mut sealed).is_ok(),
                Sec::Gateway { responder } => responder
                    .seal_to(t.destination, datagram, &mut sealed)
                    .is_ok(),
            };
            if !ok {
                continue;
            }
            if let Some(sh) = &mut self.shaper {
                sh.charge(sealed.len());
            }
            if !batch.fits(destination, sealed.len()) {
                self.send_batch(&mut batch).await;
            }
            batch.push(destination, &sealed);
            if !self.udp.segments_sends() || batch.full() {
                self.send_batch(&mut batch).await;
            }
        }
        self.send_batch(&mut batch).await;
        self.batch = batch;
        self.sealed = sealed;
    }

    /// Sends a batch of sealed datagrams and empties it.
    async fn send_batch(&mut self, batch: &mut Batch) {
        let Some(dest) = batch.dest else {
            return;
        };
        if self
            .udp
            .send(&self.socket, &batch.bytes, batch.segment, dest)
            .await
            .is_ok()
        {
            self.counts.datagrams_sent += batch.count as u64;
            self.counts.bytes_sent += batch.bytes.len() as u64;
            if matches!(self.security, Sec::Terminal { .. }) && self.sent_since_heard.is_none() {
                self.sent_since_heard = Some(tokio::time::Instant::now());
            }
        }
        batch.clear();
    }
}

// Streams carried by other transports
//
// Another transport of the hop (the split-TCP hop, `crate::tcp_hop`) runs its own tasks but hands
// out the same `HopStream`s behind the same `Hop` handle, so relays cannot tell the transports
// apart. These are the only items it needs from this file.

/// Commands queued towards one stream of another transport.
const OTHER_STREAM_COMMANDS: usize = 64;

/// The transport's ends of a stream made by [`detached_stream`].
pub(crate) struct StreamEnds {
    /// The writer's commands: only `Command::Stream` (`Data`, `Shutdown`, `Abort`) arrive here.
    /// A `Data` permit returns its bytes to the writer's budget when dropped: drop it once the
    /// bytes are on the transport's socket.
    pub(crate) commands: mpsc::Receiver<Command>,
    /// Events for the stream's reader (bounded: a full reader stops the transport reading).
    pub(crate) events: mpsc::Sender<StreamEvent>,
}

/// A stream whose bytes another transport carries, with a writer budget of `budget_bytes`.
pub(crate) fn detached_stream(
    id: u64,
    peer: SocketAddr,
    peer_key: Option<PublicKey>,
    budget_bytes: u32,
) -> (HopStream, StreamEnds) {
    let budget_bytes = budget_bytes.max(CHUNK as u32);
    let (tx, commands) = mpsc::channel(OTHER_STREAM_COMMANDS);
    let (events, rx) = mpsc::channel(READ_CHUNKS);
    let stream = HopStream {
        writer: HopWriter {
            id,
            budget: Arc::new(Semaphore::new(budget_bytes as usize)),
            budget_bytes,
            tx,
            ended: Default::default(),
        },
        // The transport waits on `events` for room; nobody listens to this.
        reader: HopReader {
            rx,
            room: Arc::new(Notify::new()),
        },
        peer,
        peer_key,
    };
    (stream, StreamEnds { commands, events })
}

impl Hop {
    /// A handle fronting another transport's task, which answers `Command::Open` and
    /// `Command::Status` sent on `tx`; `incoming` carries the streams it accepts.
    pub(crate) fn from_parts(
        tx: mpsc::Sender<Command>,
        incoming: mpsc::Receiver<HopStream>,
        local: SocketAddr,
    ) -> Hop {
        Hop {
            tx,
            incoming,
            local,
        }
    }
}

/// What another transport reports of itself; [`HopStatus::other_transport`] turns it into a
/// status with empty STP parts.
pub(crate) struct OtherTransportStatus {
    pub(crate) local: SocketAddr,
    pub(crate) handshakes_started: u64,
    /// Frames (or datagrams) and their bytes on the hop, framing and encryption included.
    pub(crate) frames_sent: u64,
    pub(crate) bytes_sent: u64,
    pub(crate) frames_received: u64,
    pub(crate) bytes_received: u64,
    pub(crate) tunnel: crate::tunnel::Counters,
    /// Live streams: id, peer, peer key, payload bytes sent and received.
    pub(crate) streams: Vec<(u64, SocketAddr, Option<PublicKey>, u64, u64)>,
}

impl HopStatus {
    pub(crate) fn other_transport(o: OtherTransportStatus) -> HopStatus {
        let streams = o
            .streams
            .into_iter()
            .map(|(id, peer, peer_key, sent, received)| StreamStatus {
                id,
                peer,
                peer_key,
                stats: stp::ConnectionStats {
                    payload_bytes_sent: sent,
                    payload_bytes_received: received,
                    ..Default::default()
                },
            })
            .collect();
        HopStatus {
            local: o.local,
            established: true,
            handshakes_started: o.handshakes_started,
            datagrams_sent: o.frames_sent,
            bytes_sent: o.bytes_sent,
            datagrams_received: o.frames_received,
            bytes_received: o.bytes_received,
            shaped: 0,
            opens_rate_limited: 0,
            send_rate_bps: None,
            tunnel: o.tunnel,
            endpoint: stp::EndpointStats::default(),
            totals: StpTotals::default(),
            streams,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_holds_equal_datagrams_to_one_destination_then_one_shorter() {
        let a: SocketAddr = ([127, 0, 0, 1], 1).into();
        let b: SocketAddr = ([127, 0, 0, 1], 2).into();
        let mut batch = Batch::default();
        assert!(batch.fits(a, 1481));
        batch.push(a, &[1; 1481]);
        assert!(batch.fits(a, 1481));
        assert!(!batch.fits(b, 1481), "another destination");
        assert!(!batch.fits(a, 1482), "longer than the segment");
        batch.push(a, &[2; 1481]);
        batch.push(a, &[3; 100]);
        assert!(batch.full(), "a shorter datagram ends the batch");
        assert!(!batch.fits(a, 100));
        assert_eq!(
            (batch.count, batch.segment, batch.bytes.len()),
            (3, 1481, 3062)
        );
        batch.clear();
        assert!(batch.fits(b, 9000));
        // Bounded by the kernel's limits on segments and bytes.
        for _ in 0..MAX_SEGMENTS {
            assert!(batch.fits(b, 10));
            batch.push(b, &[0; 10]);
        }
        assert!(batch.full() && !batch.fits(b, 10));
        batch.clear();
        while batch.fits(b, 1481) {
            batch.push(b, &[0; 1481]);
        }
        assert!(batch.bytes.len() <= MAX_BATCH_BYTES && batch.full());
    }
}
