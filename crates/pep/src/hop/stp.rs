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

use super::batch::Batch;
use super::handle::*;
use super::open_budget::OpenBudgets;
use super::shaper::Shaper;
use super::udp_batch::UdpBatch;
use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::{Initiator, Opened, Responder};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::{ConnectionHandle, Endpoint, Event, Instant};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

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
/// IPv4 + UDP header bytes, charged to the send allocation per datagram.
pub const IPV4_UDP_OVERHEAD: usize = 28;
/// IPv6 + UDP header bytes.
pub const IPV6_UDP_OVERHEAD: usize = 48;

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
}

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

#[derive(Default)]
struct Counts {
    datagrams_sent: u64,
    bytes_sent: u64,
    datagrams_received: u64,
    bytes_received: u64,
    shaped: u64,
    opens_rate_limited: u64,
}

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
