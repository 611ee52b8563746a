//! The split-TCP satellite hop (the seeds' "split TCP"): each relayed connection crosses the hop
//! as its own kernel TCP connection from the terminal to the gateway, tuned from the
//! configuration (congestion control, buffers, `TCP_NODELAY`), behind the same [`Hop`] and
//! [`HopStream`] interface as the STP hop, so the relays cannot tell the two apart. It exists to
//! compare STP with tuned TCP on the same path. The wire format and its reasoning are in
//! `docs/gateway.md` ("Split TCP hop").
//!
//! # Security
//!
//! As on the UDP hop, all of it is `snow`'s `Noise_IK_25519_ChaChaPoly_BLAKE2s`, with the same
//! static keys and allow-list, and the prologue [`PROLOGUE`] (so a TCP handshake can never be
//! mistaken for a UDP one). Every TCP connection runs its own handshake:
//!
//! ```text
//! frame:            length u16 (big-endian, 1..=65535) | body
//! terminal → gw:    frame(Noise IK message 1: e, es, s, ss + payload counter u64 | first bytes)
//! gw → terminal:    frame(Noise IK message 2: e, ee, se, empty payload)
//! then both ways:   frame(ChaCha20-Poly1305(kind u8 | body) + tag 16), nonce = frame number
//!   kind 0 DATA  body = stream bytes (1..=65518)
//!   kind 1 FIN   no body: the sender sends no more data
//!   kind 2 ABORT body = code u16: the sender reset the stream
//! ```
//!
//! The terminal's stream header rides encrypted in message 1, so the gateway starts connecting
//! to the destination after the TCP handshake and one more half round trip: a new connection
//! costs the TCP handshake plus one round trip before the server's first byte is on its way,
//! not two. The gateway learns the terminal's static key from message 1 and serves only keys on
//! its allow-list; any other connection is closed with nothing remembered (counted as
//! `unknown_key`, or `auth_failures` when message 1 does not even verify).
//!
//! Message 1 is not yet bound to a fresh exchange, so a recorded one could be replayed; its
//! payload therefore starts with a per-terminal counter (nanoseconds since the epoch at hop
//! start, plus one per stream) that the gateway accepts once per key through the same sliding
//! window as the UDP tunnel's nonces ([`crate::tunnel::replay`]), tolerating
//! [`crate::tunnel::replay::WINDOW`] streams opened out of order. The window lives only in
//! memory: right after a gateway restart a replayed message 1 would be accepted once (the
//! attacker still learns nothing and cannot continue the stream).
//!
//! Transport frames use explicit, implicit-on-the-wire nonces: frame *n* of a direction is
//! sealed with nonce *n*, so any changed, dropped, reordered or replayed frame fails
//! authentication. A failure kills that TCP connection only (both its streams' halves fail);
//! other connections are unaffected. End of stream is authenticated too: a TCP FIN or reset
//! without a preceding FIN frame ends the stream as failed, never as finished.
//!
//! # Backpressure
//!
//! A stream's writer budget is returned only once its bytes were written into the hop socket,
//! so a slow hop (full kernel send buffer) stops the relay reading the client. From the hop,
//! decrypted frames go into the reader's bounded channel; while it is full this side stops
//! reading the hop socket and TCP's receive window closes.

use super::error::{AbortCode, HopError, StreamError, TcpHopFailure};
use super::handle::{
    detached_stream, Command, Hop, HopStatus, HopStream, OtherTransportStatus, StreamCmd,
    StreamEnds, StreamEvent,
};
use crate::config::TcpOptions;
use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::replay::ReplayWindow;
use crate::tunnel::Counters;
use crate::tunnel::REVOKED_LINGER;
use bytes::Bytes;
use snow::StatelessTransportState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

/// Mixed into every handshake of the TCP hop.
pub(crate) const PROLOGUE: &[u8] = b"satstp-tcp-hop-v1";
/// Largest frame body, bytes (Noise's message limit).
pub(crate) const MAX_FRAME: usize = 65535;
/// AEAD tag length.
const TAG_LEN: usize = 16;
/// Noise IK message 1 without payload: ephemeral key, encrypted static key, payload tag.
const MSG1_OVERHEAD: usize = 32 + 32 + TAG_LEN + TAG_LEN;
/// The replay counter at the start of message 1's payload.
const COUNTER_LEN: usize = 8;
/// Most stream bytes message 1 carries; the rest follows in DATA frames.
pub(crate) const MAX_FIRST_BYTES: usize = MAX_FRAME - MSG1_OVERHEAD - COUNTER_LEN;
/// Most stream bytes in one DATA frame.
pub(crate) const MAX_DATA: usize = MAX_FRAME - TAG_LEN - 1;
const KIND_DATA: u8 = 0;
const KIND_FIN: u8 = 1;
const KIND_ABORT: u8 = 2;
/// Gateway: how long a new connection may take to deliver message 1.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Gateway: connections that have not completed their handshake, at most; more are closed at
/// once (counted as `rate_limited`).
pub(crate) const MAX_PENDING_HANDSHAKES: usize = 256;
/// Gateway: TCP Fast Open handshakes pending at once, at most (beyond, SYNs carry no data).
const FAST_OPEN_QUEUE: u32 = 256;
/// Streams accepted by the gateway and not yet taken by the relay, at most.
const INCOMING: usize = 256;
/// The writer gathers up to this many bytes of frames per socket write.
const WRITE_BATCH: usize = 256 << 10;
/// Read buffer on the hop socket.
const READ_BUFFER: usize = 128 << 10;

/// Parameters of a TCP hop.
#[derive(Debug, Clone)]
pub(crate) struct TcpHopConfig {
    /// Bytes a stream's writer may have handed over and not yet seen written to the hop socket.
    pub relay_buffer_bytes: u32,
    pub tuning: TcpOptions,
    /// Terminal: how long connecting and the handshake may take.
    pub handshake_timeout: Duration,
}

// ---------------------------------------------------------------------------------------------
// Shared state and status

#[derive(Default)]
struct StreamBytes {
    sent: AtomicU64,
    received: AtomicU64,
}

struct StreamInfo {
    peer: SocketAddr,
    key: Option<PublicKey>,
    bytes: Arc<StreamBytes>,
}

/// What every task of one hop counts.
struct Shared {
    local: SocketAddr,
    relay_buffer: u32,
    tuning: TcpOptions,
    counters: Mutex<Counters>,
    frames_sent: AtomicU64,
    bytes_sent: AtomicU64,
    frames_received: AtomicU64,
    bytes_received: AtomicU64,
    handshakes_started: AtomicU64,
    next_id: AtomicU64,
    streams: Mutex<BTreeMap<u64, StreamInfo>>,
    /// What the chunks handed to readers are charged to ([`Hop::charge_to`]).
    memory: std::sync::OnceLock<Arc<crate::ops::MemoryBudget>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn new(local: SocketAddr, config: &TcpHopConfig) -> Shared {
        Shared {
            local,
            relay_buffer: config.relay_buffer_bytes,
            tuning: config.tuning.clone(),
            counters: Mutex::new(Counters::default()),
            frames_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            frames_received: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            handshakes_started: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            streams: Mutex::new(BTreeMap::new()),
            memory: std::sync::OnceLock::new(),
        }
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut lock(&self.counters));
    }

    fn sent(&self, frames: u64, bytes: usize) {
        self.frames_sent.fetch_add(frames, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn received(&self, bytes: usize) {
        self.frames_received.fetch_add(1, Ordering::Relaxed);
        self.bytes_received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A new stream, registered for the status.
    fn new_stream(
        &self,
        peer: SocketAddr,
        key: Option<PublicKey>,
    ) -> (HopStream, StreamEnds, Arc<StreamBytes>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (stream, ends) = detached_stream(id, peer, key, self.relay_buffer);
        let bytes = Arc::new(StreamBytes::default());
        lock(&self.streams).insert(
            id,
            StreamInfo {
                peer,
                key,
                bytes: Arc::clone(&bytes),
            },
        );
        (stream, ends, bytes)
    }

    fn status(&self) -> HopStatus {
        let streams = lock(&self.streams)
            .iter()
            .map(|(&id, s)| {
                (
                    id,
                    s.peer,
                    s.key,
                    s.bytes.sent.load(Ordering::Relaxed),
                    s.bytes.received.load(Ordering::Relaxed),
                )
            })
            .collect();
        HopStatus::other_transport(OtherTransportStatus {
            local: self.local,
            handshakes_started: self.handshakes_started.load(Ordering::Relaxed),
            frames_sent: self.frames_sent.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            frames_received: self.frames_received.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            tunnel: *lock(&self.counters),
            streams,
        })
    }
}

/// Unregisters a stream when its task ends, however it ends.
struct Registered<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.shared.streams).remove(&self.id);
    }
}

fn noise_builder(local: &PrivateKey) -> Result<snow::Builder<'_>, snow::Error> {
    let params = crate::tunnel::NOISE_PATTERN.parse()?;
    snow::Builder::new(params)
        .local_private_key(local.as_bytes())
        .and_then(|b| b.prologue(PROLOGUE))
}

// ---------------------------------------------------------------------------------------------
// Terminal

struct TerminalSide {
    local: PrivateKey,
    gateway_key: PublicKey,
    gateway: SocketAddr,
    handshake_timeout: Duration,
    /// The next replay counter.
    counter: AtomicU64,
}

/// Starts a terminal's TCP hop to `gateway`, whose static key is `gateway_key`. The tuning is
/// checked here, so a kernel lacking the congestion control fails the start, not each stream.
pub(crate) fn start_terminal(
    local: PrivateKey,
    gateway_key: PublicKey,
    gateway: SocketAddr,
    config: TcpHopConfig,
) -> Result<Hop, HopError> {
    crate::sockopt::check_tcp_options(&config.tuning)?;
    noise_builder(&local)?;
    if let Some((false, _)) = crate::sockopt::fast_open_sysctl() {
        tracing::warn!(
            "TCP hop: net.ipv4.tcp_fastopen does not allow clients (bit 1), so each stream costs \
             one more satellite round trip; set it to 3 (docs/gateway.md, \"Split TCP hop\")"
        );
    }
    let unspecified: SocketAddr = if gateway.is_ipv6() {
        ([0u16; 8], 0).into()
    } else {
        ([0u8; 4], 0).into()
    };
    let shared = Arc::new(Shared::new(unspecified, &config));
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let side = Arc::new(TerminalSide {
        local,
        gateway_key,
        gateway,
        handshake_timeout: config.handshake_timeout,
        counter: AtomicU64::new(start_ns),
    });
    let (tx, rx) = mpsc::channel(1024);
    // A terminal accepts no streams; the sender is dropped so `incoming` ends at once.
    let (_, incoming) = mpsc::channel(1);
    tokio::spawn(terminal_control(rx, shared, side));
    Ok(Hop::from_parts(tx, incoming, unspecified))
}

async fn terminal_control(
    mut rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    side: Arc<TerminalSide>,
) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Open { first, reply, .. } => {
                let (stream, ends, bytes) = shared.new_stream(side.gateway, Some(side.gateway_key));
                let id = stream.id();
                let _ = reply.send(Ok(stream));
                tokio::spawn(terminal_stream(
                    Arc::clone(&shared),
                    Arc::clone(&side),
                    id,
                    first,
                    ends,
                    bytes,
                ));
            }
            Command::Status(reply) => {
                let _ = reply.send(shared.status());
            }
            // Stream commands go to each stream's own task.
            Command::Stream(_) => {}
            Command::ChargeTo(memory) => {
                let _ = shared.memory.set(memory);
            }
            // The kernel's socket buffers bound what a relay reads ahead on this hop.
            Command::ReadAhead(_) => {}
            Command::SetAllowed(_, reply) => {
                let _ = reply.send(Default::default());
            }
            Command::SetKeys(_, _, reply) => {
                let _ = reply.send(None);
            }
            // The handle is gone: no more streams are opened; open ones run to their end.
            Command::Close => break,
        }
    }
}

async fn terminal_stream(
    shared: Arc<Shared>,
    side: Arc<TerminalSide>,
    id: u64,
    first: Vec<u8>,
    ends: StreamEnds,
    bytes: Arc<StreamBytes>,
) {
    let _registered = Registered {
        shared: &shared,
        id,
    };
    shared.handshakes_started.fetch_add(1, Ordering::Relaxed);
    let counter = side.counter.fetch_add(1, Ordering::Relaxed);
    let split = first.len().min(MAX_FIRST_BYTES);
    let (in_msg1, rest) = first.split_at(split);
    let handshake = tokio::time::timeout(
        side.handshake_timeout,
        terminal_handshake(&shared, &side, counter, in_msg1),
    )
    .await
    .unwrap_or_else(|_| Err("connecting to the gateway timed out".into()));
    match handshake {
        Ok((tcp, transport)) => {
            run_stream(&shared, tcp, &transport, ends, rest.to_vec(), &bytes).await;
        }
        Err(e) => {
            let _ = ends
                .events
                .send(StreamEvent::Failed(StreamError::TcpHop(
                    TcpHopFailure::Handshake(e),
                )))
                .await;
        }
    }
}

/// Connects, sends message 1 carrying `counter` and `first`, and reads message 2.
async fn terminal_handshake(
    shared: &Shared,
    side: &TerminalSide,
    counter: u64,
    first: &[u8],
) -> Result<(TcpStream, StatelessTransportState), String> {
    let mut hs = noise_builder(&side.local)
        .and_then(|b| b.remote_public_key(side.gateway_key.as_bytes()))
        .and_then(|b| b.build_initiator())
        .map_err(|e| e.to_string())?;
    let mut payload = Vec::with_capacity(COUNTER_LEN + first.len());
    payload.extend_from_slice(&counter.to_be_bytes());
    payload.extend_from_slice(first);
    let mut frame = vec![0u8; 2 + MAX_FRAME];
    let n = hs
        .write_message(&payload, &mut frame[2..])
        .map_err(|e| e.to_string())?;
    let len = u16::try_from(n).map_err(|_| "handshake message too long".to_string())?;
    frame[..2].copy_from_slice(&len.to_be_bytes());
    frame.truncate(2 + n);

    let sock = if side.gateway.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| e.to_string())?;
    crate::sockopt::apply_tcp_options(&socket2::SockRef::from(&sock), &shared.tuning)
        .map_err(|e| e.to_string())?;
    // Message 1 rides in the SYN where the gateway allows it (a plain handshake otherwise).
    let _ = crate::sockopt::set_fast_open(&socket2::SockRef::from(&sock), None);
    let mut tcp = sock
        .connect(side.gateway)
        .await
        .map_err(|e| format!("cannot connect to the gateway {}: {e}", side.gateway))?;
    // With fast open the connection is made by this first write: its errors are the connect's.
    tcp.write_all(&frame)
        .await
        .map_err(|e| format!("cannot connect to the gateway {}: {e}", side.gateway))?;
    shared.sent(1, frame.len());

    let mut msg2 = Vec::new();
    match read_frame(&mut tcp, &mut msg2).await {
        Ok(Some(n)) => shared.received(n + 2),
        Ok(None) => return Err("the gateway closed the connection during the handshake".into()),
        Err(e) => return Err(format!("handshake: {e}")),
    }
    let mut none = vec![0u8; MAX_FRAME];
    if hs.read_message(&msg2, &mut none).is_err() {
        shared.count(|c| c.auth_failures += 1);
        return Err("the gateway's handshake reply failed authentication".into());
    }
    let transport = hs
        .into_stateless_transport_mode()
        .map_err(|e| e.to_string())?;
    shared.count(|c| c.handshakes += 1);
    Ok((tcp, transport))
}

// ---------------------------------------------------------------------------------------------
// Gateway

struct GatewaySide {
    /// The static keys handshakes may be addressed to: the current one, then the next one during
    /// a changeover (`next_private_key_file`); replaced on reload, live connections carry on.
    keys: std::sync::RwLock<Vec<PrivateKey>>,
    /// Replaced when the allow-list is reloaded; the connections of a key no longer on it are
    /// reset at once (each stream task watches it).
    allowed: watch::Sender<HashSet<PublicKey>>,
    /// Per allowed key, the replay window over message-1 counters (only allowed keys get one).
    replay: Mutex<HashMap<PublicKey, ReplayWindow>>,
    pending: Arc<Semaphore>,
}

/// Starts a gateway's TCP hop listening on `listen`, serving the terminals whose keys are in
/// `allowed`. Streams the terminals open arrive on the returned hop's `incoming`.
pub(crate) fn start_gateway(
    listen: SocketAddr,
    local: PrivateKey,
    next: Option<PrivateKey>,
    allowed: impl IntoIterator<Item = PublicKey>,
    config: TcpHopConfig,
) -> Result<Hop, HopError> {
    noise_builder(&local)?;
    if let Some(next) = &next {
        noise_builder(next)?;
    }
    let listen_err = |source| HopError::Listen {
        addr: listen,
        source,
    };
    let sock = if listen.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(listen_err)?;
    sock.set_reuseaddr(true).map_err(listen_err)?;
    crate::sockopt::apply_tcp_options(&socket2::SockRef::from(&sock), &config.tuning)?;
    // Terminals' message 1 may ride in their SYN (where net.ipv4.tcp_fastopen allows it).
    if let Err(e) =
        crate::sockopt::set_fast_open(&socket2::SockRef::from(&sock), Some(FAST_OPEN_QUEUE))
    {
        tracing::warn!(
            "TCP hop: TCP Fast Open is off ({e}); each stream costs one more round trip"
        );
    }
    if let Some((_, false)) = crate::sockopt::fast_open_sysctl() {
        tracing::warn!(
            "TCP hop: net.ipv4.tcp_fastopen does not allow servers (bit 2), so each stream costs \
             one more satellite round trip; set it to 3 (docs/gateway.md, \"Split TCP hop\")"
        );
    }
    sock.bind(listen).map_err(listen_err)?;
    let listener = sock.listen(1024).map_err(listen_err)?;
    let local_addr = listener.local_addr().map_err(listen_err)?;
    let shared = Arc::new(Shared::new(local_addr, &config));
    let side = Arc::new(GatewaySide {
        keys: std::sync::RwLock::new(std::iter::once(local).chain(next).collect()),
        allowed: watch::Sender::new(allowed.into_iter().collect()),
        replay: Mutex::new(HashMap::new()),
        pending: Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES)),
    });
    let (tx, rx) = mpsc::channel(64);
    let (in_tx, in_rx) = mpsc::channel(INCOMING);
    tokio::spawn(gateway_control(rx, Arc::clone(&shared), Arc::clone(&side)));
    tokio::spawn(gateway_accept(listener, shared, side, in_tx));
    Ok(Hop::from_parts(tx, in_rx, local_addr))
}

async fn gateway_control(
    mut rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    side: Arc<GatewaySide>,
) {
    while let Some(cmd) = rx.recv().await {
        match cmd {
            Command::Open { reply, .. } => {
                let _ = reply.send(Err(HopError::NotTerminal));
            }
            Command::Status(reply) => {
                let _ = reply.send(shared.status());
            }
            Command::SetAllowed(keys, reply) => {
                let new: HashSet<PublicKey> = keys.into_iter().collect();
                let old = side.allowed.send_replace(new.clone());
                let change = super::handle::AllowedChange {
                    added: new.difference(&old).copied().collect(),
                    removed: old.difference(&new).copied().collect(),
                };
                let _ = reply.send(change);
            }
            Command::SetKeys(key, next, reply) => {
                let keys: Vec<PrivateKey> = std::iter::once(key).chain(next).collect();
                // A key snow cannot use is refused whole; the running keys stay.
                if keys.iter().any(|k| noise_builder(k).is_err()) {
                    let _ = reply.send(None);
                    continue;
                }
                let public = keys.iter().filter_map(|k| k.public_key().ok()).collect();
                *side.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
                let _ = reply.send(Some(public));
            }
            Command::Stream(_) => {}
            Command::ChargeTo(memory) => {
                let _ = shared.memory.set(memory);
            }
            // The kernel's socket buffers bound what a relay reads ahead on this hop.
            Command::ReadAhead(_) => {}
            Command::Close => break,
        }
    }
}

async fn gateway_accept(
    listener: TcpListener,
    shared: Arc<Shared>,
    side: Arc<GatewaySide>,
    incoming: mpsc::Sender<HopStream>,
) {
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                // Out of descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            // Nobody takes the streams any more: the hop is gone.
            _ = incoming.closed() => return,
        };
        let Ok(permit) = Arc::clone(&side.pending).try_acquire_owned() else {
            shared.count(|c| c.rate_limited += 1);
            continue;
        };
        // Congestion control and buffers were set on the listener, which accepted sockets
        // inherit; nodelay and the pacing cap are set again to be sure.
        let _ = tcp.set_nodelay(shared.tuning.nodelay);
        if let Some(bps) = shared.tuning.max_pacing_rate_bps {
            let _ = crate::sockopt::set_max_pacing_rate(&socket2::SockRef::from(&tcp), bps);
        }
        let shared = Arc::clone(&shared);
        let side = Arc::clone(&side);
        let incoming = incoming.clone();
        tokio::spawn(async move {
            let r = tokio::time::timeout(HANDSHAKE_TIMEOUT, gateway_handshake(&shared, &side, tcp))
                .await;
            drop(permit);
            let Ok(Some((tcp, transport, key, first))) = r else {
                return;
            };
            let (stream, ends, bytes) = shared.new_stream(peer, Some(key));
            let id = stream.id();
            let _registered = Registered {
                shared: &shared,
                id,
            };
            // Weak, so that the stream's own ends still close its channels when dropped.
            let abort = stream.writer.tx.downgrade();
            let failed = ends.events.downgrade();
            if !first.is_empty() {
                bytes
                    .received
                    .fetch_add(first.len() as u64, Ordering::Relaxed);
                let _ = ends.events.try_send(StreamEvent::Data(first));
            }
            if incoming.try_send(stream).is_err() {
                return;
            }
            let run = run_stream(&shared, tcp, &transport, ends, Vec::new(), &bytes);
            tokio::pin!(run);
            let mut allowed = side.allowed.subscribe();
            let revoked = async move { allowed.wait_for(|a| !a.contains(&key)).await.is_ok() };
            tokio::select! {
                () = &mut run => return,
                revoked = revoked => {
                    if !revoked {
                        run.await;
                        return;
                    }
                }
            }
            // Revoked: the terminal gets an ABORT (code 9, "terminal key revoked"), the reader
            // here the revocation; the connection then closes.
            if let Some(tx) = abort.upgrade() {
                let _ = tx.try_send(Command::Stream(StreamCmd::Abort(id, AbortCode::Revoked)));
            }
            if let Some(tx) = failed.upgrade() {
                let _ = tx.try_send(StreamEvent::Failed(StreamError::Revoked));
            }
            let _ = tokio::time::timeout(REVOKED_LINGER, run).await;
        });
    }
}

/// Reads and checks message 1 and answers it. `None` (connection to be closed, nothing kept)
/// when anything is wrong; the reason is counted.
async fn gateway_handshake(
    shared: &Shared,
    side: &GatewaySide,
    mut tcp: TcpStream,
) -> Option<(TcpStream, StatelessTransportState, PublicKey, Bytes)> {
    let mut msg1 = Vec::new();
    match read_frame(&mut tcp, &mut msg1).await {
        Ok(Some(n)) if n >= MSG1_OVERHEAD + COUNTER_LEN => shared.received(n + 2),
        Ok(Some(n)) => {
            shared.received(n + 2);
            shared.count(|c| c.malformed += 1);
            return None;
        }
        Ok(None) | Err(_) => {
            shared.count(|c| c.malformed += 1);
            return None;
        }
    }
    // The current key first, then the next one during a changeover (a second DH try).
    let keys = side.keys.read().unwrap_or_else(|e| e.into_inner()).clone();
    let mut payload = vec![0u8; MAX_FRAME];
    let mut read = None;
    for local in &keys {
        let Ok(mut hs) = noise_builder(local).and_then(|b| b.build_responder()) else {
            continue;
        };
        if let Ok(n) = hs.read_message(&msg1, &mut payload) {
            read = Some((hs, n));
            break;
        }
    }
    let Some((mut hs, n)) = read else {
        shared.count(|c| c.auth_failures += 1);
        return None;
    };
    payload.truncate(n);
    let key = hs
        .get_remote_static()
        .and_then(|k| PublicKey::from_slice(k).ok())?;
    let allowed = side.allowed.borrow().contains(&key);
    if !allowed {
        shared.count(|c| c.unknown_key += 1);
        return None;
    }
    let counter = payload
        .get(..COUNTER_LEN)
        .and_then(|b| <[u8; COUNTER_LEN]>::try_from(b).ok())
        .map(u64::from_be_bytes)?;
    let fresh = lock(&side.replay).entry(key).or_default().update(counter);
    if !fresh {
        shared.count(|c| c.replays += 1);
        return None;
    }
    let mut frame = vec![0u8; 2 + MAX_FRAME];
    let n = hs.write_message(&[], &mut frame[2..]).ok()?;
    let len = u16::try_from(n).ok()?;
    frame[..2].copy_from_slice(&len.to_be_bytes());
    frame.truncate(2 + n);
    let transport = hs.into_stateless_transport_mode().ok()?;
    tcp.write_all(&frame).await.ok()?;
    shared.sent(1, frame.len());
    shared.count(|c| c.handshakes += 1);
    let first = Bytes::from(payload).slice(COUNTER_LEN..);
    Some((tcp, transport, key, first))
}

// ---------------------------------------------------------------------------------------------
// One established connection, both sides

/// Reads one frame into `buf`: `Ok(None)` on a clean end of stream before its first byte.
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<Option<usize>> {
    let mut len = [0u8; 2];
    match rd.read(&mut len[..1]).await? {
        0 => return Ok(None),
        _ => rd.read_exact(&mut len[1..]).await?,
    };
    let n = usize::from(u16::from_be_bytes(len));
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "empty frame"));
    }
    buf.clear();
    buf.resize(n, 0);
    rd.read_exact(buf).await?;
    Ok(Some(n))
}

/// Seals one transport frame (`kind` and `body`) onto `out`.
fn seal_frame(
    transport: &StatelessTransportState,
    nonce: &mut u64,
    kind: u8,
    body: &[u8],
    plain: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    plain.clear();
    plain.push(kind);
    plain.extend_from_slice(body);
    let len = plain.len() + TAG_LEN;
    let len16 = u16::try_from(len).map_err(|_| "frame too long".to_string())?;
    let start = out.len();
    out.extend_from_slice(&len16.to_be_bytes());
    out.resize(start + 2 + len, 0);
    let sealed = out.get_mut(start + 2..).ok_or("frame buffer")?;
    match transport.write_message(*nonce, plain, sealed) {
        Ok(n) if n == len => {
            *nonce += 1;
            Ok(())
        }
        Ok(_) => Err("sealing a frame: wrong length".into()),
        Err(e) => Err(format!("sealing a frame: {e}")),
    }
}

fn seal_data(
    transport: &StatelessTransportState,
    nonce: &mut u64,
    data: &[u8],
    plain: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<u64, String> {
    let mut frames = 0;
    for piece in data.chunks(MAX_DATA) {
        seal_frame(transport, nonce, KIND_DATA, piece, plain, out)?;
        frames += 1;
    }
    Ok(frames)
}

/// Carries one stream over its TCP connection until both directions have ended (or either
/// failed), then closes the connection. A failure reaches the stream's reader after the
/// connection is closed, so the peer learns of it at once.
async fn run_stream(
    shared: &Shared,
    mut tcp: TcpStream,
    transport: &StatelessTransportState,
    ends: StreamEnds,
    initial: Vec<u8>,
    bytes: &StreamBytes,
) {
    let StreamEnds { commands, events } = ends;
    let (dead, _) = watch::channel(false);
    let failure = {
        let (rd, wr) = tcp.split();
        let (failure, ()) = tokio::join!(
            read_side(shared, rd, transport, &events, &dead, bytes),
            write_side(shared, wr, transport, commands, initial, &dead, bytes),
        );
        failure
    };
    drop(tcp);
    if let Some(reason) = failure {
        let _ = events.send(StreamEvent::Failed(reason)).await;
    }
}

/// Hop → stream reader. Returns the reason when the stream failed on the peer's side (reset,
/// bad frame, connection lost); `None` after the peer's FIN, or when this side ended it.
async fn read_side<R: AsyncRead + Unpin>(
    shared: &Shared,
    rd: R,
    transport: &StatelessTransportState,
    events: &mpsc::Sender<StreamEvent>,
    dead: &watch::Sender<bool>,
    bytes: &StreamBytes,
) -> Option<StreamError> {
    let mut dead_rx = dead.subscribe();
    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    let mut frame = Vec::with_capacity(MAX_FRAME);
    let mut nonce = 0u64;
    let failure = loop {
        let r = tokio::select! {
            r = read_frame(&mut rd, &mut frame) => r,
            _ = dead_rx.wait_for(|d| *d) => return None,
        };
        let n = match r {
            Ok(Some(n)) => n,
            Ok(None) => break TcpHopFailure::ClosedEarly,
            Err(e) => break TcpHopFailure::Connection(e.to_string()),
        };
        shared.received(n + 2);
        let Some(plain_len) = n.checked_sub(TAG_LEN).filter(|&l| l >= 1) else {
            shared.count(|c| c.malformed += 1);
            break TcpHopFailure::Malformed;
        };
        let mut plain = vec![0u8; plain_len];
        match transport.read_message(nonce, &frame, &mut plain) {
            Ok(m) if m == plain_len => nonce += 1,
            _ => {
                shared.count(|c| c.auth_failures += 1);
                break TcpHopFailure::Authentication;
            }
        }
        shared.count(|c| c.data_opened += 1);
        match (plain.first().copied(), plain.get(1..)) {
            (Some(KIND_DATA), Some(body)) if !body.is_empty() => {
                bytes
                    .received
                    .fetch_add(body.len() as u64, Ordering::Relaxed);
                let data = Bytes::from(plain).slice(1..);
                // Charged to the side's memory from here until the reader drops the chunk;
                // without room, the connection is not read (its TCP window closes).
                let charged = async {
                    match shared.memory.get() {
                        Some(m) => m.charge(data.len() as u64).await.attach(data),
                        None => data,
                    }
                };
                let data = tokio::select! {
                    d = charged => d,
                    _ = dead_rx.wait_for(|d| *d) => return None,
                };
                let sent = tokio::select! {
                    r = events.send(StreamEvent::Data(data)) => r,
                    _ = dead_rx.wait_for(|d| *d) => return None,
                };
                if sent.is_err() {
                    // The reader is gone: nobody wants the rest.
                    return None;
                }
            }
            (Some(KIND_FIN), Some([])) => {
                tokio::select! {
                    _ = events.send(StreamEvent::Finished) => {}
                    _ = dead_rx.wait_for(|d| *d) => {}
                }
                return None;
            }
            (Some(KIND_ABORT), Some(&[a, b])) => {
                dead.send_replace(true);
                return Some(StreamError::Reset {
                    code: u16::from_be_bytes([a, b]),
                });
            }
            _ => {
                shared.count(|c| c.malformed += 1);
                break TcpHopFailure::Malformed;
            }
        }
    };
    dead.send_replace(true);
    Some(StreamError::TcpHop(failure))
}

/// Stream writer → hop. Frames what the writer queued, a batch per socket write, and returns
/// the writer's budget once a batch is in the socket. Ends after FIN once the writer is gone,
/// or after a reset (an ABORT command, or a writer dropped without FIN), which also ends the
/// reading side.
async fn write_side<W: AsyncWrite + Unpin>(
    shared: &Shared,
    mut wr: W,
    transport: &StatelessTransportState,
    mut commands: mpsc::Receiver<Command>,
    initial: Vec<u8>,
    dead: &watch::Sender<bool>,
    bytes: &StreamBytes,
) {
    let mut dead_rx = dead.subscribe();
    let mut nonce = 0u64;
    let mut plain = Vec::with_capacity(MAX_FRAME);
    let mut out = Vec::with_capacity(WRITE_BATCH + 2 * MAX_FRAME);
    let mut permits = Vec::new();
    let mut fin_sent = false;
    let mut frames = match seal_data(transport, &mut nonce, &initial, &mut plain, &mut out) {
        Ok(f) => f,
        Err(_) => {
            dead.send_replace(true);
            return;
        }
    };
    let mut payload = initial.len() as u64;
    let mut ending = false;
    let mut reset = false;
    loop {
        if !out.is_empty() {
            let r = tokio::select! {
                r = wr.write_all(&out) => r,
                _ = dead_rx.wait_for(|d| *d) => return,
            };
            if r.is_err() {
                dead.send_replace(true);
                return;
            }
            shared.sent(frames, out.len());
            shared.count(|c| c.data_sealed += frames);
            bytes.sent.fetch_add(payload, Ordering::Relaxed);
            out.clear();
            // The bytes are in the socket: give the writer its budget back.
            permits.clear();
            frames = 0;
            payload = 0;
        }
        if ending {
            if reset {
                dead.send_replace(true);
            }
            return;
        }
        // Wait for a command, then take whatever else is already queued.
        let mut cmd = tokio::select! {
            c = commands.recv() => c,
            _ = dead_rx.wait_for(|d| *d) => return,
        };
        loop {
            let sealed = match cmd {
                None => {
                    ending = true;
                    if fin_sent {
                        Ok(())
                    } else {
                        // The writer is gone without a FIN: that is a reset.
                        reset = true;
                        frames += 1;
                        let code = 0u16.to_be_bytes();
                        seal_frame(
                            transport, &mut nonce, KIND_ABORT, &code, &mut plain, &mut out,
                        )
                    }
                }
                Some(Command::Stream(StreamCmd::Data(_, data, permit))) if !fin_sent => {
                    permits.push(permit);
                    payload += data.len() as u64;
                    seal_data(transport, &mut nonce, &data, &mut plain, &mut out)
                        .map(|f| frames += f)
                }
                Some(Command::Stream(StreamCmd::Shutdown(_))) if !fin_sent => {
                    fin_sent = true;
                    frames += 1;
                    seal_frame(transport, &mut nonce, KIND_FIN, &[], &mut plain, &mut out)
                }
                Some(Command::Stream(StreamCmd::Abort(_, code))) => {
                    ending = true;
                    reset = true;
                    frames += 1;
                    let code = code.code().to_be_bytes();
                    seal_frame(
                        transport, &mut nonce, KIND_ABORT, &code, &mut plain, &mut out,
                    )
                }
                // Data or FIN after FIN, or a command that is not for a stream: ignored.
                Some(_) => Ok(()),
            };
            if sealed.is_err() {
                dead.send_replace(true);
                return;
            }
            if ending || out.len() >= WRITE_BATCH {
                break;
            }
            cmd = match commands.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_limits_fit_noise() {
        assert_eq!(MAX_FIRST_BYTES + COUNTER_LEN + MSG1_OVERHEAD, 65535);
        assert_eq!(MAX_DATA + 1 + TAG_LEN, 65535);
    }

    #[tokio::test]
    async fn frames_round_trip_and_tampering_fails() {
        let (ik, _) = crate::keys::generate_keypair().unwrap();
        let (rk, rp) = crate::keys::generate_keypair().unwrap();
        let mut init = noise_builder(&ik)
            .unwrap()
            .remote_public_key(rp.as_bytes())
            .unwrap()
            .build_initiator()
            .unwrap();
        let mut resp = noise_builder(&rk).unwrap().build_responder().unwrap();
        let mut m1 = vec![0u8; MAX_FRAME];
        let n = init.write_message(b"hello", &mut m1).unwrap();
        let mut p = vec![0u8; MAX_FRAME];
        let k = resp.read_message(&m1[..n], &mut p).unwrap();
        assert_eq!(&p[..k], b"hello");
        let n = resp.write_message(&[], &mut m1).unwrap();
        init.read_message(&m1[..n], &mut p).unwrap();
        let ti = init.into_stateless_transport_mode().unwrap();
        let tr = resp.into_stateless_transport_mode().unwrap();

        let data = vec![7u8; MAX_DATA + 10];
        let (mut nonce, mut plain, mut out) = (0u64, Vec::new(), Vec::new());
        assert_eq!(
            seal_data(&ti, &mut nonce, &data, &mut plain, &mut out).unwrap(),
            2
        );
        let mut rd = &out[..];
        let mut frame = Vec::new();
        let mut got = Vec::new();
        for rn in 0..2u64 {
            let n = read_frame(&mut rd, &mut frame).await.unwrap().unwrap();
            let mut pl = vec![0u8; n - TAG_LEN];
            tr.read_message(rn, &frame, &mut pl).unwrap();
            assert_eq!(pl[0], KIND_DATA);
            got.extend_from_slice(&pl[1..]);
        }
        assert_eq!(got, data);
        assert_eq!(read_frame(&mut rd, &mut frame).await.unwrap(), None);
        // One flipped bit fails; so does the right frame under the wrong nonce.
        let mut bad = out.clone();
        bad[100] ^= 1;
        let mut rd = &bad[..];
        let n = read_frame(&mut rd, &mut frame).await.unwrap().unwrap();
        let mut pl = vec![0u8; n - TAG_LEN];
        assert!(tr.read_message(0, &frame, &mut pl).is_err());
        let mut rd = &out[..];
        let _ = read_frame(&mut rd, &mut frame).await.unwrap().unwrap();
        assert!(tr.read_message(1, &frame, &mut pl).is_err());
    }

    #[tokio::test]
    async fn truncated_and_empty_frames_are_errors() {
        let mut rd: &[u8] = &[0, 5, 1, 2];
        let mut f = Vec::new();
        assert!(read_frame(&mut rd, &mut f).await.is_err());
        let mut rd: &[u8] = &[0, 0];
        assert!(read_frame(&mut rd, &mut f).await.is_err());
        let mut rd: &[u8] = &[0];
        assert!(read_frame(&mut rd, &mut f).await.is_err());
    }
}
