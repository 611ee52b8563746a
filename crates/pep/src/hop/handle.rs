//! The hop's handle API: [`Hop`] (open streams, accept them, status, close) and [`HopStream`]s,
//! byte streams with backpressure both ways, whichever transport carries them (STP in
//! [`super::stp`], split TCP in [`super::tcp`]).

pub(crate) use super::core::{HopStatus, StpTotals, StreamEvent, StreamStatus};
use super::error::{AbortCode, HopError};
use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::Responder;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::EndpointConfig;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use super::core::CHUNK;
/// Chunks buffered from the hop towards one stream's reader.
pub(crate) const READ_CHUNKS: usize = 16;
/// How often [`Hop::wait_quiet`] looks again.
const QUIET_POLL: Duration = Duration::from_millis(20);

pub(crate) enum StreamCmd {
    Data(u64, Bytes, OwnedSemaphorePermit),
    Shutdown(u64),
    Abort(u64, AbortCode),
}

pub(crate) enum Command {
    Open {
        first: Vec<u8>,
        /// When the opener gives up on the gateway's verdict (stamped into the stream header).
        deadline: Option<tokio::time::Instant>,
        reply: oneshot::Sender<Result<HopStream, HopError>>,
    },
    Stream(StreamCmd),
    Status(oneshot::Sender<HopStatus>),
    /// Charge the chunks handed to readers from now on to this budget ([`Hop::charge_to`]).
    ChargeTo(Arc<crate::ops::MemoryBudget>),
    /// Give each stream opened or accepted from now on a share of this read-ahead bound
    /// ([`Hop::bound_read_ahead`]).
    ReadAhead(Arc<super::read_ahead::ReadAhead>),
    /// Gateway: serve these terminal keys from now on ([`Hop::set_allowed_terminals`]).
    SetAllowed(Vec<PublicKey>, oneshot::Sender<AllowedChange>),
    /// Gateway: answer handshakes with this static key and, during a changeover, the next one
    /// ([`Hop::set_gateway_keys`]); the public keys now accepted, `None` where unsupported.
    SetKeys(
        PrivateKey,
        Option<PrivateKey>,
        oneshot::Sender<Option<Vec<PublicKey>>>,
    ),
    /// The `Hop` handle was dropped: reset every connection and stop.
    Close,
}

/// What [`Hop::set_allowed_terminals`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedChange {
    pub added: Vec<PublicKey>,
    pub removed: Vec<PublicKey>,
}

/// One connection across the hop.
pub struct HopStream {
    pub(super) writer: HopWriter,
    pub(super) reader: HopReader,
    pub(super) peer: SocketAddr,
    pub(super) peer_key: Option<PublicKey>,
    /// Where the hop worker that carries the stream runs (STP hop), if on a thread of its own:
    /// the stream's relay runs best there.
    pub(super) home: Option<WorkerHome>,
}

/// A hop worker's one-thread runtime ([`Hop::start_workers`]).
#[derive(Clone, Debug)]
pub(crate) struct WorkerHome {
    handle: tokio::runtime::Handle,
}

impl WorkerHome {
    /// The calling thread's, which must be running a runtime (a hop worker's task).
    pub(super) fn here() -> WorkerHome {
        WorkerHome {
            handle: tokio::runtime::Handle::current(),
        }
    }

    /// Runs `task` on `home`'s thread, or on the current runtime without one.
    pub(crate) fn spawn_at<F>(
        home: Option<WorkerHome>,
        task: F,
    ) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match home {
            Some(h) => h.handle.spawn(task),
            None => tokio::spawn(task),
        }
    }
}

/// See [`Hop::monitor`].
#[derive(Clone)]
pub struct HopMonitor {
    workers: Vec<mpsc::WeakSender<Command>>,
}

impl HopMonitor {
    /// A snapshot of the hop's counters and connections, its workers' merged (`None` once the
    /// hop is gone).
    pub async fn status(&self) -> Option<HopStatus> {
        let mut all = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let Some(tx) = w.upgrade() else { continue };
            if let Some(s) = worker_status(&tx).await {
                all.push(s);
            }
        }
        HopStatus::merge(all)
    }
}

/// One worker's status (`None` once it is gone).
async fn worker_status(tx: &mpsc::Sender<Command>) -> Option<HopStatus> {
    let (reply, rx) = oneshot::channel();
    tx.send(Command::Status(reply)).await.ok()?;
    rx.await.ok()
}

impl HopStream {
    /// The stream's id within its hop.
    pub(crate) fn id(&self) -> u64 {
        self.writer.id
    }

    /// The other side's hop address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Where the hop worker carrying this stream runs, when on a thread of its own: a relay
    /// running there hands its bytes to the worker without waking another thread.
    pub(crate) fn home(&self) -> Option<WorkerHome> {
        self.home.clone()
    }

    /// Gateway side: the public key of the terminal that opened the stream.
    pub(crate) fn peer_key(&self) -> Option<PublicKey> {
        self.peer_key
    }

    /// Sends bytes; waits while the relay buffer is full.
    pub async fn write(&self, data: &[u8]) -> Result<(), HopError> {
        self.writer.write(data).await
    }

    /// Half-close: the peer sees end-of-stream after every byte written so far.
    pub async fn shutdown(&self) {
        self.writer.shutdown().await
    }

    /// Resets the connection.
    pub async fn abort(&self, code: AbortCode) {
        self.writer.abort(code).await
    }

    /// The next event from the peer (`None` once the hop is gone).
    pub async fn recv(&mut self) -> Option<StreamEvent> {
        self.reader.recv().await
    }

    /// Splits into a writer and a reader that can be used from different tasks.
    pub(crate) fn split(self) -> (HopWriter, HopReader) {
        (self.writer, self.reader)
    }
}

/// The sending half of a [`HopStream`].
pub(crate) struct HopWriter {
    pub(super) id: u64,
    pub(super) budget: Arc<Semaphore>,
    pub(super) budget_bytes: u32,
    pub(super) tx: mpsc::Sender<Command>,
    /// Set by `shutdown` and `abort`; a writer dropped without either aborts its stream, so a
    /// forgotten stream cannot keep its connection (and the peer's) alive.
    pub(super) ended: std::sync::atomic::AtomicBool,
    /// The stream's share of the hop's read-ahead bound (STP hop with a bound set): the relay
    /// takes from it before it reads its TCP socket, the hop returns what STP has sent.
    pub(super) read_ahead: Option<Arc<super::read_ahead::Slot>>,
}

impl Drop for HopWriter {
    fn drop(&mut self) {
        if self.ended.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let cmd = Command::Stream(StreamCmd::Abort(self.id, AbortCode::WriterDropped));
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
    /// The stream's share of the hop's read-ahead bound, when the hop has one.
    pub(crate) fn read_ahead(&self) -> Option<&Arc<super::read_ahead::Slot>> {
        self.read_ahead.as_ref()
    }

    /// Sends bytes; waits while the relay buffer is full.
    pub(crate) async fn write(&self, data: &[u8]) -> Result<(), HopError> {
        for piece in data.chunks(self.piece_len()) {
            self.send_piece(Bytes::copy_from_slice(piece)).await?;
        }
        Ok(())
    }

    /// [`HopWriter::write`] without copying: the hop keeps slices of `data` until STP has taken
    /// them.
    pub(crate) async fn write_bytes(&self, data: Bytes) -> Result<(), HopError> {
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

    async fn send_piece(&self, piece: Bytes) -> Result<(), HopError> {
        let permit = Arc::clone(&self.budget)
            .acquire_many_owned(piece.len() as u32)
            .await
            .map_err(|_| HopError::Closed)?;
        self.tx
            .send(Command::Stream(StreamCmd::Data(self.id, piece, permit)))
            .await
            .map_err(|_| HopError::Closed)
    }
    /// Half-close: the peer sees end-of-stream after every byte written so far.
    pub(crate) async fn shutdown(&self) {
        self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self
            .tx
            .send(Command::Stream(StreamCmd::Shutdown(self.id)))
            .await;
    }
    /// Resets the connection.
    pub(crate) async fn abort(&self, code: AbortCode) {
        self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self
            .tx
            .send(Command::Stream(StreamCmd::Abort(self.id, code)))
            .await;
    }
}

/// The receiving half of a [`HopStream`].
pub(crate) struct HopReader {
    pub(super) rx: mpsc::Receiver<StreamEvent>,
    /// Wakes the hop task when this reader makes room (it may be holding data for us).
    pub(super) room: Arc<Notify>,
}

impl HopReader {
    /// The next event from the peer (`None` once the hop is gone).
    pub(crate) async fn recv(&mut self) -> Option<StreamEvent> {
        let ev = self.rx.recv().await;
        self.room.notify_one();
        ev
    }

    /// The next event if one is waiting (`None` otherwise, or once the hop is gone).
    pub(crate) fn try_recv(&mut self) -> Option<StreamEvent> {
        let ev = self.rx.try_recv().ok()?;
        self.room.notify_one();
        Some(ev)
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
    /// for [`FAILOVER_AFTER_HANDSHAKES`](super::core::FAILOVER_AFTER_HANDSHAKES) tries), the connections that reached it are reset and
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
    /// Terminal: when the tunnel session is rekeyed.
    pub rekey: super::RekeyConfig,
    /// The tunnel suites offered (terminal) or accepted (gateway): `tunnel_cipher`.
    pub cipher: crate::tunnel::CipherChoice,
}

/// A running hop: one worker (a task with its own socket and hop core) or several
/// ([`Hop::start_workers`]), behind one handle. Opens go to the workers in turn; status,
/// key changes and the stop reach every worker; streams every worker accepts arrive on one
/// `incoming`.
pub struct Hop {
    /// The workers' command channels (at least one).
    pub(super) workers: Vec<mpsc::Sender<Command>>,
    /// The worker the next open goes to (modulo their number).
    pub(super) next: std::sync::atomic::AtomicUsize,
    /// Gateway side: streams opened by terminals ([`Hop::accept`], [`Hop::take_incoming`]).
    pub(super) incoming: mpsc::Receiver<HopStream>,
    pub(super) local: SocketAddr,
}

impl Drop for Hop {
    /// Dropping the handle stops the hop: its connections are reset (their streams fail) and
    /// its sockets close. Keep the `Hop` for as long as its streams should live.
    fn drop(&mut self) {
        for tx in &self.workers {
            let _ = tx.try_send(Command::Close);
        }
    }
}

impl Hop {
    /// Gateway side: the next stream a terminal opened (`None` once the hop has stopped, or
    /// after [`Hop::take_incoming`]). A terminal's hop accepts none.
    pub async fn accept(&mut self) -> Option<HopStream> {
        self.incoming.recv().await
    }

    /// Takes the stream of incoming streams, so the `Hop` itself can be shared (for
    /// [`Hop::status`]) while another task serves them; [`Hop::accept`] yields nothing after.
    pub fn take_incoming(&mut self) -> mpsc::Receiver<HopStream> {
        std::mem::replace(&mut self.incoming, mpsc::channel(1).1)
    }

    /// The hop's UDP address (every worker's: they share it at a gateway; a terminal's
    /// workers have their own ports, this is the first's).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// How many workers carry the hop's connections.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// A snapshot of the hop's counters and connections, its workers' merged ([`HopStatus::merge`];
    /// `None` once the hop is gone).
    pub async fn status(&self) -> Option<HopStatus> {
        HopStatus::merge(self.worker_statuses().await)
    }

    /// Each live worker's own status, in worker order.
    pub(crate) async fn worker_statuses(&self) -> Vec<HopStatus> {
        let mut all = Vec::with_capacity(self.workers.len());
        for tx in &self.workers {
            if let Some(s) = worker_status(tx).await {
                all.push(s);
            }
        }
        all
    }

    /// The worker the next open goes to: each in turn.
    fn pick(&self) -> &mpsc::Sender<Command> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.workers[n % self.workers.len()]
    }

    /// Waits until the hop carries no stream any more — every stream's bytes and end were
    /// delivered and acknowledged, or it failed — or `deadline` passes; true if none is left.
    /// A graceful shutdown waits for this after its relays finished, so a clean close that is
    /// still crossing the hop arrives as one.
    pub(crate) async fn wait_quiet(&self, deadline: tokio::time::Instant) -> bool {
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
    pub(crate) async fn close(&self) {
        for tx in &self.workers {
            let _ = tx.send(Command::Close).await;
        }
        for tx in &self.workers {
            tx.closed().await;
        }
    }

    /// Charges the chunks this hop hands to its streams' readers to `memory` (a side's
    /// [`crate::ops::Ops::memory`]), from the moment the hop hands one over until the reader
    /// drops it; when the budget has no room, the hop holds the stream's bytes in STP (its
    /// receive window closes; on the TCP hop, that connection is not read) until it has. Call it
    /// before streams are opened or accepted.
    /// One budget serves every worker: a side's memory cap is not multiplied by them.
    pub(crate) async fn charge_to(&self, memory: Arc<crate::ops::MemoryBudget>) {
        for tx in &self.workers {
            let _ = tx.send(Command::ChargeTo(Arc::clone(&memory))).await;
        }
    }

    /// Bounds the bytes this hop's relays may have read from their TCP connections and STP has
    /// not yet sent, all workers and streams together, shared fairly among the streams with
    /// bytes to send ([`super::read_ahead`]). Call it before streams are opened or accepted.
    /// The split-TCP hop ignores it (its kernel socket buffers bound what a relay reads ahead).
    pub(crate) async fn bound_read_ahead(&self, bound: Arc<super::read_ahead::ReadAhead>) {
        for tx in &self.workers {
            let _ = tx.send(Command::ReadAhead(Arc::clone(&bound))).await;
        }
    }

    /// Gateway: serves the terminal keys in `allowed` from now on (a reloaded allow-list):
    /// sessions of kept keys carry on; those of removed keys end, and their connections fail.
    /// Returns the keys added and removed (none on a terminal's hop).
    pub(crate) async fn set_allowed_terminals(&self, allowed: Vec<PublicKey>) -> AllowedChange {
        // Every worker holds the same list, so the first one's change is every one's.
        let mut change = None;
        for tx in &self.workers {
            let (reply, rx) = oneshot::channel();
            if tx
                .send(Command::SetAllowed(allowed.clone(), reply))
                .await
                .is_err()
            {
                continue;
            }
            let c = rx.await.unwrap_or_default();
            change.get_or_insert(c);
        }
        change.unwrap_or_default()
    }

    /// Gateway: answers tunnel handshakes with `key` from now on, and with `next` too during a
    /// key changeover (a reload of `private_key_file` / `next_private_key_file`); the sessions
    /// made under the keys before carry on. The public keys now accepted; `None` on a hop that
    /// cannot change its key while running (a terminal's, or the split-TCP hop).
    pub(crate) async fn set_gateway_keys(
        &self,
        key: PrivateKey,
        next: Option<PrivateKey>,
    ) -> Option<Vec<PublicKey>> {
        let mut accepted = None;
        for tx in &self.workers {
            let (reply, rx) = oneshot::channel();
            tx.send(Command::SetKeys(key.clone(), next.clone(), reply))
                .await
                .ok()?;
            let keys = rx.await.ok().flatten()?;
            accepted.get_or_insert(keys);
        }
        accepted
    }

    /// A handle that asks this hop for its status after the `Hop` itself was handed on (to
    /// `gateway::serve::serve_gateway`, say). It does not keep the hop alive.
    pub fn monitor(&self) -> HopMonitor {
        HopMonitor {
            workers: self.workers.iter().map(|tx| tx.downgrade()).collect(),
        }
    }

    /// Terminal side: opens a stream whose first bytes (`first`) ride on the STP BGN.
    pub async fn open(&self, first: Vec<u8>) -> Result<HopStream, HopError> {
        self.open_by(first, None).await
    }

    /// [`Hop::open`] for an opener that gives up on the gateway's verdict at `deadline`: a
    /// stream header with a deadline field (`pep::stream`, version `0x03`) at the start of
    /// `first` gets it in the gateway's clock, so the gateway never runs the stream after it.
    pub(crate) async fn open_by(
        &self,
        first: Vec<u8>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<HopStream, HopError> {
        let (reply, rx) = oneshot::channel();
        self.pick()
            .send(Command::Open {
                first,
                deadline,
                reply,
            })
            .await
            .map_err(|_| HopError::Closed)?;
        rx.await.map_err(|_| HopError::Closed)?
    }
}

// Streams carried by other transports
//
// Another transport of the hop (the split-TCP hop, `crate::hop::tcp`) runs its own tasks but hands
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
            read_ahead: None,
        },
        // The transport waits on `events` for room; nobody listens to this.
        reader: HopReader {
            rx,
            room: Arc::new(Notify::new()),
        },
        peer,
        peer_key,
        home: None,
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
            workers: vec![tx],
            next: Default::default(),
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
                payload_bytes_sent: sent,
                payload_bytes_received: received,
                stp: None,
            })
            .collect();
        HopStatus {
            local: o.local,
            established: true,
            handshakes_started: o.handshakes_started,
            rekeys: 0,
            rekey_failures: 0,
            datagrams_sent: o.frames_sent,
            bytes_sent: o.bytes_sent,
            datagrams_received: o.frames_received,
            bytes_received: o.bytes_received,
            shaped: 0,
            opens_rate_limited: 0,
            socket_overflows: 0,
            backpressure_episodes: 0,
            window_ceiling_bytes: None,
            send_rate_bps: None,
            tunnel: o.tunnel,
            tunnel_report: Default::default(),
            stp: None,
            streams,
        }
    }
}

impl HopStatus {
    /// The status of a hop of several workers from theirs (`None` for none): counters summed,
    /// streams of all, the tunnel as its least ready worker's (a terminal's tunnel is up when
    /// every worker's session is), its last handshake and last error the most recent of any.
    /// The first worker's address and allocation stand for the hop's.
    pub(crate) fn merge(all: Vec<HopStatus>) -> Option<HopStatus> {
        let mut it = all.into_iter();
        let mut m = it.next()?;
        for s in it {
            m.established &= s.established;
            m.handshakes_started += s.handshakes_started;
            m.rekeys += s.rekeys;
            m.rekey_failures += s.rekey_failures;
            m.datagrams_sent += s.datagrams_sent;
            m.bytes_sent += s.bytes_sent;
            m.datagrams_received += s.datagrams_received;
            m.bytes_received += s.bytes_received;
            m.shaped += s.shaped;
            m.opens_rate_limited += s.opens_rate_limited;
            m.socket_overflows += s.socket_overflows;
            m.backpressure_episodes += s.backpressure_episodes;
            m.window_ceiling_bytes = m.window_ceiling_bytes.max(s.window_ceiling_bytes);
            add_tunnel_counters(&mut m.tunnel, &s.tunnel);
            merge_report(&mut m.tunnel_report, s.tunnel_report);
            match (&mut m.stp, s.stp) {
                (Some(a), Some(b)) => {
                    add_endpoint_stats(&mut a.endpoint, &b.endpoint);
                    add_totals(&mut a.totals, &b.totals);
                }
                (a @ None, b) => *a = b,
                (Some(_), None) => {}
            }
            m.streams.extend(s.streams);
        }
        Some(m)
    }
}

fn add_tunnel_counters(a: &mut crate::tunnel::Counters, b: &crate::tunnel::Counters) {
    a.auth_failures += b.auth_failures;
    a.replays += b.replays;
    a.unknown_session += b.unknown_session;
    a.malformed += b.malformed;
    a.unknown_key += b.unknown_key;
    a.rate_limited += b.rate_limited;
    a.session_limit += b.session_limit;
    a.handshakes += b.handshakes;
    a.duplicate_initiations += b.duplicate_initiations;
    a.data_sealed += b.data_sealed;
    a.data_opened += b.data_opened;
    a.stp_checksums_filled += b.stp_checksums_filled;
    a.rekeys += b.rekeys;
}

fn merge_report(a: &mut super::TunnelReport, b: super::TunnelReport) {
    use super::TunnelState::{Down, Handshaking, Up};
    a.state = match (a.state, b.state) {
        (Down, _) | (_, Down) => Down,
        (Handshaking, _) | (_, Handshaking) => Handshaking,
        (Up, Up) => Up,
    };
    a.last_handshake_ago = match (a.last_handshake_ago, b.last_handshake_ago) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    let b_newer = match (a.last_error_ago, b.last_error_ago) {
        (Some(x), Some(y)) => y < x,
        (None, Some(_)) => true,
        _ => false,
    };
    for (x, y) in a.sessions_by_cipher.iter_mut().zip(b.sessions_by_cipher) {
        *x += y;
    }
    if b_newer {
        a.last_error = b.last_error;
        a.last_error_ago = b.last_error_ago;
    }
}

fn add_endpoint_stats(a: &mut stp::EndpointStats, b: &stp::EndpointStats) {
    a.datagrams_received += b.datagrams_received;
    a.malformed += b.malformed;
    a.unknown_connection += b.unknown_connection;
    a.late += b.late;
    a.wrong_instance += b.wrong_instance;
    a.accepted += b.accepted;
    a.refused += b.refused;
    a.stateless_sent += b.stateless_sent;
    a.stateless_suppressed += b.stateless_suppressed;
    add_totals(&mut a.closed, &b.closed);
}

fn add_totals(a: &mut StpTotals, b: &StpTotals) {
    a.connections += b.connections;
    a.datagrams_sent += b.datagrams_sent;
    a.datagrams_received += b.datagrams_received;
    a.bytes_sent += b.bytes_sent;
    a.bytes_received += b.bytes_received;
    a.payload_bytes_sent += b.payload_bytes_sent;
    a.payload_bytes_received += b.payload_bytes_received;
    for (x, y) in a.packets_sent.0.iter_mut().zip(b.packets_sent.0) {
        *x += y;
    }
    for (x, y) in a.packets_received.0.iter_mut().zip(b.packets_received.0) {
        *x += y;
    }
    a.retransmitted_packets += b.retransmitted_packets;
    a.retransmitted_bytes += b.retransmitted_bytes;
    a.losses_detected += b.losses_detected;
}
