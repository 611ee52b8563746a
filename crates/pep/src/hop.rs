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
//! is lost to the handshake.

use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::{Initiator, Opened, Responder};
use bytes::Bytes;
use std::collections::HashMap;
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

/// What the hop tells a stream's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Data(Bytes),
    /// The peer finished sending; no more data follows.
    Finished,
    /// The connection failed (reset, timeout, ...).
    Failed(String),
}

enum StreamCmd {
    Data(u64, Bytes, OwnedSemaphorePermit),
    Shutdown(u64),
    Abort(u64, u16),
}

enum Command {
    Open {
        first: Vec<u8>,
        reply: oneshot::Sender<Result<HopStream, String>>,
    },
    Stream(StreamCmd),
}

/// One connection across the hop.
pub struct HopStream {
    writer: HopWriter,
    reader: HopReader,
}

impl HopStream {
    /// The stream's id within its hop.
    pub fn id(&self) -> u64 {
        self.writer.id
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
}

impl HopWriter {
    /// Sends bytes; waits while the relay buffer is full.
    pub async fn write(&self, data: &[u8]) -> Result<(), String> {
        for piece in data.chunks(CHUNK.min(self.budget_bytes as usize).max(1)) {
            let permit = Arc::clone(&self.budget)
                .acquire_many_owned(piece.len() as u32)
                .await
                .map_err(|_| "hop closed".to_string())?;
            self.tx
                .send(Command::Stream(StreamCmd::Data(
                    self.id,
                    Bytes::copy_from_slice(piece),
                    permit,
                )))
                .await
                .map_err(|_| "hop closed".to_string())?;
        }
        Ok(())
    }
    /// Half-close: the peer sees end-of-stream after every byte written so far.
    pub async fn shutdown(&self) {
        let _ = self
            .tx
            .send(Command::Stream(StreamCmd::Shutdown(self.id)))
            .await;
    }
    /// Resets the connection.
    pub async fn abort(&self, code: u16) {
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
}

/// Parameters of a hop.
pub struct HopConfig {
    pub endpoint: EndpointConfig,
    /// Bytes a stream may have handed to the hop and not yet seen accepted by STP.
    pub relay_buffer_bytes: u32,
    pub seed: u64,
}

/// A running hop.
pub struct Hop {
    tx: mpsc::Sender<Command>,
    /// Gateway side: streams opened by terminals.
    pub incoming: mpsc::Receiver<HopStream>,
    local: SocketAddr,
}

impl Hop {
    /// Starts the hop task on `socket`.
    pub fn start(socket: UdpSocket, security: Security, config: HopConfig) -> Result<Hop, String> {
        use rand_core::SeedableRng;
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        // Room for bursts of a large window; the kernel may cap it (net.core.rmem_max).
        let sref = socket2::SockRef::from(&socket);
        let _ = sref.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sref.set_send_buffer_size(SOCKET_BUFFER);
        let rng = Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(config.seed));
        let endpoint = Endpoint::new(config.endpoint.clone(), rng).map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel(1024);
        let (in_tx, in_rx) = mpsc::channel(256);
        let security = match security {
            Security::Terminal {
                local,
                gateway_key,
                gateway,
            } => {
                let index = config.seed as u32 | 1;
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                let init =
                    Initiator::new(&local, &gateway_key, index, ts).map_err(|e| e.to_string())?;
                Sec::Terminal {
                    init: Box::new(init),
                    gateway,
                }
            }
            Security::Gateway { responder } => Sec::Gateway { responder },
        };
        let task = HopTask {
            socket,
            endpoint,
            security,
            streams: HashMap::new(),
            by_handle: HashMap::new(),
            next_id: 1,
            commands: rx,
            incoming: in_tx,
            self_tx: tx.clone(),
            relay_buffer: config.relay_buffer_bytes.max(CHUNK as u32),
            start: tokio::time::Instant::now(),
            room: Arc::new(Notify::new()),
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

enum Sec {
    Terminal {
        init: Box<Initiator>,
        gateway: SocketAddr,
    },
    Gateway {
        responder: Box<Responder>,
    },
}

struct StreamState {
    handle: ConnectionHandle,
    events: mpsc::Sender<StreamEvent>,
    /// Bytes received from the stream's writer not yet taken by STP, with their permits.
    pending: std::collections::VecDeque<(Bytes, OwnedSemaphorePermit)>,
    shutdown_requested: bool,
    finished_sent: bool,
    /// A chunk read from STP that the reader had no room for yet.
    held: Option<Bytes>,
}

struct HopTask {
    socket: UdpSocket,
    endpoint: Endpoint,
    security: Sec,
    streams: HashMap<u64, StreamState>,
    by_handle: HashMap<ConnectionHandle, u64>,
    next_id: u64,
    commands: mpsc::Receiver<Command>,
    incoming: mpsc::Sender<HopStream>,
    self_tx: mpsc::Sender<Command>,
    relay_buffer: u32,
    start: tokio::time::Instant,
    /// Notified by readers as they take events.
    room: Arc<Notify>,
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
        let (ev_tx, ev_rx) = mpsc::channel(READ_CHUNKS);
        self.streams.insert(
            id,
            StreamState {
                handle,
                events: ev_tx,
                pending: Default::default(),
                shutdown_requested: false,
                finished_sent: false,
                held: None,
            },
        );
        self.by_handle.insert(handle, id);
        HopStream {
            writer: HopWriter {
                id,
                budget: Arc::new(Semaphore::new(self.relay_buffer as usize)),
                budget_bytes: self.relay_buffer,
                tx: self.self_tx.clone(),
            },
            reader: HopReader {
                rx: ev_rx,
                room: Arc::clone(&self.room),
            },
        }
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
            if !self.established() {
                wake = wake.min(next_handshake);
            }
            let holding = self.streams.values().any(|s| s.held.is_some());
            if holding {
                // A backstop: readers notify as they make room.
                wake = wake.min(tokio::time::Instant::now() + READ_RETRY);
            }
            let room = Arc::clone(&self.room);
            tokio::select! {
                                r = self.socket.recv_from(&mut buf) => {
                    if let Ok((n, from)) = r {
                        self.on_datagram(&buf[..n], from, &mut plain).await;
                        // Take everything already queued before pumping, so a burst cannot
                        // overflow the socket's receive buffer while we work per datagram.
                        for _ in 0..MAX_BATCH {
                            match self.socket.try_recv_from(&mut buf) {
                                Ok((n, from)) => self.on_datagram(&buf[..n], from, &mut plain).await,
                                Err(_) => break,
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
            if !self.established() && tokio::time::Instant::now() >= next_handshake {
                if let Sec::Terminal { init, gateway } = &self.security {
                    let _ = self.socket.send_to(init.initiation(), *gateway).await;
                }
                next_handshake = tokio::time::Instant::now() + HANDSHAKE_RETRY;
            }
            self.pump_streams().await;
            self.flush(&mut plain).await;
        }
    }

    async fn on_datagram(&mut self, data: &[u8], from: SocketAddr, plain: &mut Vec<u8>) {
        let now = self.now();
        match &mut self.security {
            Sec::Terminal { init, gateway } => {
                if from != *gateway {
                    return;
                }
                if let Ok(Opened::Data { .. }) = init.open(data, plain) {
                    self.endpoint.handle_datagram(now, from, plain);
                }
            }
            Sec::Gateway { responder } => match responder.open(now, data, from, plain) {
                Ok(Opened::Reply { .. }) => {
                    let _ = self.socket.send_to(plain, from).await;
                }
                Ok(Opened::Data { .. }) => self.endpoint.handle_datagram(now, from, plain),
                _ => {}
            },
        }
    }

    fn on_command(&mut self, c: Command) {
        match c {
            Command::Open { first, reply } => {
                let Sec::Terminal { gateway, .. } = &self.security else {
                    let _ = reply.send(Err("only a terminal opens streams".into()));
                    return;
                };
                let gateway = *gateway;
                let now = self.now();
                match self.endpoint.connect(now, gateway) {
                    Ok(h) => {
                        if let Some(c) = self.endpoint.connection(h) {
                            let _ = c.write(&first);
                        }
                        let s = self.new_stream(h);
                        let _ = reply.send(Ok(s));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.to_string()));
                    }
                }
            }
            Command::Stream(StreamCmd::Data(id, bytes, permit)) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.pending.push_back((bytes, permit));
                }
            }
            Command::Stream(StreamCmd::Shutdown(id)) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.shutdown_requested = true;
                }
            }
            Command::Stream(StreamCmd::Abort(id, code)) => {
                if let Some(s) = self.streams.remove(&id) {
                    self.by_handle.remove(&s.handle);
                    if let Some(c) = self.endpoint.connection(s.handle) {
                        c.abort(code);
                    }
                }
            }
        }
    }

    /// Moves data between streams and STP connections, and passes events on.
    async fn pump_streams(&mut self) {
        // Accept (gateway side).
        while let Some(h) = self.endpoint.accept() {
            let s = self.new_stream(h);
            if self.incoming.try_send(s).is_err() {
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
            if let Event::Failed(e) = ev {
                if let Some(s) = self.streams.remove(&id) {
                    let _ = s.events.try_send(StreamEvent::Failed(e.to_string()));
                }
                self.by_handle.remove(&h);
            }
        }
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let Some(c) = self.endpoint.connection(s.handle) else {
                if !s.finished_sent {
                    let _ = s
                        .events
                        .try_send(StreamEvent::Failed("connection closed".into()));
                }
                self.by_handle.remove(&s.handle);
                self.streams.remove(&id);
                continue;
            };
            // Writer → STP, as far as STP's send buffer takes it.
            while let Some((bytes, _)) = s.pending.front_mut() {
                match c.write(bytes) {
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
                            if !s.finished_sent && s.events.try_send(StreamEvent::Finished).is_ok()
                            {
                                s.finished_sent = true;
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
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
    }

    async fn flush(&mut self, plain: &mut Vec<u8>) {
        if !self.established() {
            return;
        }
        let now = self.now();
        let mut sealed = Vec::with_capacity(2048);
        while let Some(t) = self.endpoint.poll_transmit(now, plain) {
            let ok = match &mut self.security {
                Sec::Terminal { init, .. } => init.seal(&plain[..t.size], &mut sealed).is_ok(),
                Sec::Gateway { responder } => responder
                    .seal_to(t.destination, &plain[..t.size], &mut sealed)
                    .is_ok(),
            };
            if ok {
                let _ = self.socket.send_to(&sealed, t.destination).await;
            }
        }
    }
}
