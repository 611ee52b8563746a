//! The STP hop's logic without I/O: streams over one `stp::Endpoint`, backpressure, the send
//! allocation (shaper), open / half-close / abort, the gateway's per-terminal open budget, the
//! terminal's handshakes, re-handshakes and failover, and the tunnel sealing every datagram.
//!
//! Like `stp::Endpoint` it owns no socket, task or clock: a driver passes datagrams and `now`
//! in ([`HopCore::handle_datagram`], [`HopCore::handle_timeout`]), lets it work
//! ([`HopCore::pump`]), takes sealed datagrams out ([`HopCore::poll_transmit`]) and sleeps until
//! [`HopCore::poll_timeout`]. The tokio driver is [`super::stp`]; netsim's split gateway and the
//! deterministic tests over `memnet` drive the same code in virtual time.
//!
//! A stream's reader is an [`EventSink`]: the core offers it events and holds what it has no
//! room for (then the STP connection's receive window closes). A stream's writer hands bytes in
//! with a token of the driver's choice (the tokio driver's semaphore permit) that the core
//! drops once STP's send buffer took the bytes.
//!
//! On the terminal side, STP datagrams stay inside the engine until the tunnel handshake
//! completes (the initiation is resent every [`HANDSHAKE_RETRY`]), so nothing leaves
//! unencrypted and nothing is lost to the handshake. A terminal that keeps sending but hears
//! nothing authenticated from the gateway for [`REHANDSHAKE_AFTER`] starts a new handshake:
//! after a gateway restart the new gateway knows none of the old STP connections and resets them
//! (they fail cleanly), while new connections work as soon as the new session is up. After a
//! mere outage the new session simply carries the old connections on.

use super::error::{AbortCode, HopError, StreamError};
use super::open_budget::OpenBudgets;
use super::shaper::Shaper;
use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::{Initiator, Opened, Responder};
use bytes::Bytes;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;
use stp::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};

/// Largest chunk read from STP for a reader at once.
pub const CHUNK: usize = 64 * 1024;
/// How often a handshake initiation is resent until answered.
pub const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// Terminal: sending without hearing anything authenticated for this long starts a new handshake.
pub const REHANDSHAKE_AFTER: Duration = Duration::from_secs(5);
/// Terminal with several gateways: handshake initiations a gateway may leave unanswered before
/// the terminal moves on to the next one (one every [`HANDSHAKE_RETRY`]).
pub const FAILOVER_AFTER_HANDSHAKES: u32 = 3;
pub use crate::sizing::{IPV4_UDP_OVERHEAD, IPV6_UDP_OVERHEAD};

/// A stream's id within its hop.
pub type StreamId = u64;

/// What the hop tells a stream's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Data(Bytes),
    /// The peer finished sending; no more data follows.
    Finished,
    /// The connection failed (reset, timeout, ...).
    Failed(StreamError),
}

/// What became of an event offered to a reader.
#[derive(Debug)]
pub enum Offer {
    Taken,
    /// No room now: the event comes back, to be offered again when the reader made room.
    Full(StreamEvent),
    /// The reader is gone.
    Gone,
}

/// A stream's reader, as the core sees it.
pub trait EventSink {
    fn offer(&mut self, ev: StreamEvent) -> Offer;
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
    /// than [`super::OPENS_PER_S`].
    pub opens_rate_limited: u64,
    pub send_rate_bps: Option<u64>,
    /// The tunnel's counters (authentication failures, replays, unknown keys, ...).
    pub tunnel: crate::tunnel::Counters,
    pub endpoint: stp::EndpointStats,
    /// Sums over every connection, closed ones included.
    pub totals: StpTotals,
    pub streams: Vec<StreamStatus>,
}

/// How the core authenticates, sans-IO.
pub enum CoreSecurity {
    /// Terminal: the gateways (address and key) in order of preference; it uses the first that
    /// answers and fails over as [`super::Security::TerminalFailover`] describes.
    Terminal {
        local: PrivateKey,
        gateways: Vec<(SocketAddr, PublicKey)>,
    },
    /// Gateway: serves the terminals of the responder's allow-list.
    Gateway { responder: Box<Responder> },
    /// No tunnel: STP datagrams travel in clear, streams open to `peer`. For simulation only
    /// (netsim's split gateway models an unencrypted hop); no configuration file reaches it.
    Clear { peer: SocketAddr },
}

/// Parameters of a hop core.
pub struct CoreConfig {
    pub endpoint: EndpointConfig,
    /// Seeds the endpoint's random stream (connection ids, initial sequence numbers) unless
    /// `rng` is given, and the terminal's tunnel session index.
    pub seed: u64,
    /// The endpoint's random stream, when the driver brings its own (netsim's, to keep its
    /// runs as they were).
    pub rng: Option<Box<dyn rand_core::RngCore + Send>>,
    /// This side's allocation on the satellite link, bit/s of link bytes (datagrams with their
    /// IP and UDP headers); `None` sends as fast as the connections' controllers allow.
    pub send_rate_bps: Option<u64>,
    /// The hop's own address (the source of captured sent datagrams; its family chooses the
    /// per-datagram header overhead charged to the allocation).
    pub local: SocketAddr,
    /// Wall-clock time at `now` = 0, ns since the Unix epoch: tunnel initiations are stamped
    /// with it plus `now` (a responder rejects initiations older than the last it accepted).
    pub wall_clock_at_zero_ns: u64,
}

/// A datagram for the driver to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub destination: SocketAddr,
    pub size: usize,
    /// Counted in the hop's `datagrams_sent` once sent (a terminal's handshake initiations are
    /// not).
    pub counted: bool,
}

/// Where a stream came from and whom it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    pub id: StreamId,
    pub peer: SocketAddr,
    pub peer_key: Option<PublicKey>,
}

/// Sees every STP datagram in clear: (source, destination, datagram).
pub type Tap = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) + Send>;

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
    Clear {
        peer: SocketAddr,
    },
}

struct StreamState<S, P> {
    handle: ConnectionHandle,
    peer: SocketAddr,
    peer_key: Option<PublicKey>,
    events: S,
    /// Bytes accepted from the writer that STP's send buffer has not taken yet, in order, with
    /// their tokens (dropped once STP has the bytes); the first piece of a stream opened by this
    /// side (stream header and early data) has none.
    pending: VecDeque<(Bytes, Option<P>)>,
    shutdown_requested: bool,
    finished_sent: bool,
    /// A chunk read from STP that the reader had no room for yet.
    held: Option<Bytes>,
}

/// The STP hop's logic; `S` is a stream's reader, `P` the token that comes with written bytes.
pub struct HopCore<S, P> {
    endpoint: Endpoint,
    security: Sec,
    streams: HashMap<StreamId, StreamState<S, P>>,
    by_handle: HashMap<ConnectionHandle, StreamId>,
    /// Streams to pump at the next turn: a command or a connection event touched them.
    /// Pumping visits only these (and `blocked` and `closing`), never every stream.
    dirty: HashSet<StreamId>,
    /// Streams whose reader had no room for an event: pumped again on every turn.
    blocked: HashSet<StreamId>,
    /// Streams whose connection closed: pumped on every turn until the connection is freed.
    closing: HashSet<StreamId>,
    next_id: StreamId,
    shaper: Option<Shaper>,
    counts: Counts,
    /// Gateway: how fast each terminal session may open connections.
    open_budgets: OpenBudgets,
    /// Terminal: the first send since the gateway was last heard.
    sent_since_heard: Option<Instant>,
    /// Terminal: when the next handshake initiation leaves while the session is not up.
    next_handshake: Instant,
    /// Handshake datagrams (initiations, responses) waiting to leave, outside the allocation.
    control: VecDeque<(SocketAddr, Vec<u8>, bool)>,
    plain: Vec<u8>,
    tap: Option<Tap>,
    local: SocketAddr,
    wall_clock_at_zero_ns: u64,
}

/// A tunnel initiator stamped with `stamp_ns`.
fn new_initiator(
    local: &PrivateKey,
    gateway_key: &PublicKey,
    index: u32,
    stamp_ns: u64,
) -> Result<Initiator, HopError> {
    Initiator::new(local, gateway_key, index, stamp_ns).map_err(|e| HopError::Tunnel(e.to_string()))
}

impl<S: EventSink, P> HopCore<S, P> {
    /// A core at time `now`.
    pub fn new(
        config: CoreConfig,
        security: CoreSecurity,
        now: Instant,
    ) -> Result<HopCore<S, P>, HopError> {
        use rand_core::SeedableRng;
        let rng = config
            .rng
            .unwrap_or_else(|| Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(config.seed)));
        let endpoint =
            Endpoint::new(config.endpoint, rng).map_err(|e| HopError::Stp(e.to_string()))?;
        if config.send_rate_bps == Some(0) {
            return Err(HopError::ZeroRate);
        }
        let stamp = config.wall_clock_at_zero_ns.wrapping_add(now.as_nanos());
        let security = match security {
            CoreSecurity::Terminal { local, gateways } => {
                let &(gateway, gateway_key) = gateways.first().ok_or(HopError::NoGateway)?;
                let index = config.seed as u32 | 1;
                let init = new_initiator(&local, &gateway_key, index, stamp)?;
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
            CoreSecurity::Gateway { responder } => Sec::Gateway { responder },
            CoreSecurity::Clear { peer } => Sec::Clear { peer },
        };
        let overhead = if config.local.is_ipv6() {
            IPV6_UDP_OVERHEAD
        } else {
            IPV4_UDP_OVERHEAD
        };
        Ok(HopCore {
            endpoint,
            security,
            streams: HashMap::new(),
            by_handle: HashMap::new(),
            dirty: HashSet::new(),
            blocked: HashSet::new(),
            closing: HashSet::new(),
            next_id: 1,
            shaper: config.send_rate_bps.map(|r| Shaper::new(r, overhead, now)),
            counts: Counts::default(),
            open_budgets: OpenBudgets::default(),
            sent_since_heard: None,
            next_handshake: now,
            control: VecDeque::new(),
            plain: Vec::with_capacity(65_536),
            tap: None,
            local: config.local,
            wall_clock_at_zero_ns: config.wall_clock_at_zero_ns,
        })
    }

    /// Shows every STP datagram sent and received, in clear, to `tap` (`--capture`).
    pub fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Terminal: whether the tunnel session is up (always true on a gateway or a clear hop).
    pub fn established(&self) -> bool {
        match &self.security {
            Sec::Terminal { init, .. } => init.is_established(),
            Sec::Gateway { .. } | Sec::Clear { .. } => true,
        }
    }

    /// The live streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Gateway: serves the terminal keys in `allowed` from now on ([`Responder::set_allowed`]);
    /// the keys added and removed. A terminal hop has no allow-list: `None`.
    pub fn set_allowed_terminals(
        &mut self,
        allowed: Vec<PublicKey>,
    ) -> Option<(Vec<PublicKey>, Vec<PublicKey>)> {
        match &mut self.security {
            Sec::Gateway { responder } => Some(responder.set_allowed(allowed)),
            _ => None,
        }
    }

    /// Whether a reader had no room for an event (the driver should pump again once one makes
    /// room, or soon).
    pub fn holding(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// The STP counters of a stream's connection.
    pub fn stream_stats(&mut self, id: StreamId) -> Option<stp::ConnectionStats> {
        let h = self.streams.get(&id)?.handle;
        self.endpoint.connection(h).map(|c| c.stats())
    }

    /// Bytes a stream's writer may hand in now without queueing beyond STP's send buffer.
    pub fn send_space(&mut self, id: StreamId) -> u64 {
        let Some(s) = self.streams.get(&id) else {
            return 0;
        };
        if !s.pending.is_empty() {
            return 0;
        }
        let h = s.handle;
        self.endpoint.connection(h).map_or(0, |c| c.send_space())
    }

    fn add_stream(&mut self, handle: ConnectionHandle, info: StreamInfo, events: S) {
        self.streams.insert(
            info.id,
            StreamState {
                handle,
                peer: info.peer,
                peer_key: info.peer_key,
                events,
                pending: VecDeque::new(),
                shutdown_requested: false,
                finished_sent: false,
                held: None,
            },
        );
        self.by_handle.insert(handle, info.id);
        self.dirty.insert(info.id);
    }

    fn info_for(&mut self, handle: ConnectionHandle) -> StreamInfo {
        let id = self.next_id;
        self.next_id += 1;
        let peer = self.endpoint.remote(handle).unwrap_or(self.local);
        let peer_key = match &self.security {
            Sec::Gateway { responder } => responder
                .session_for_addr(peer)
                .and_then(|s| responder.session_peer(s))
                .copied(),
            Sec::Terminal { gateway_key, .. } => Some(*gateway_key),
            Sec::Clear { .. } => None,
        };
        StreamInfo { id, peer, peer_key }
    }

    /// Forgets a stream (its connection's counters reach the endpoint's totals when the
    /// connection is freed).
    fn remove_stream(&mut self, id: StreamId) -> Option<StreamState<S, P>> {
        let s = self.streams.remove(&id)?;
        self.by_handle.remove(&s.handle);
        self.dirty.remove(&id);
        self.blocked.remove(&id);
        self.closing.remove(&id);
        Some(s)
    }

    /// Terminal (or clear hop): opens a stream whose first bytes (`first`) ride on the STP BGN;
    /// its events go to `events`.
    pub fn open(&mut self, now: Instant, first: Bytes, events: S) -> Result<StreamInfo, HopError> {
        let to = match &self.security {
            // The endpoint knows every gateway by the first one's address (see
            // `Sec::Terminal::gateways`), so connections not yet sent survive a failover.
            Sec::Terminal { gateways, .. } => {
                gateways.first().map(|g| g.0).ok_or(HopError::NoGateway)?
            }
            Sec::Clear { peer } => *peer,
            Sec::Gateway { .. } => return Err(HopError::NotTerminal),
        };
        let h = self
            .endpoint
            .connect(now, to)
            .map_err(|e| HopError::Stp(e.to_string()))?;
        // As much of the first piece as the send buffer takes rides in the BGN's flight; the
        // rest waits in the stream's queue like any later write, so no byte is cut whatever the
        // buffer size.
        let mut first = first;
        if let Some(c) = self.endpoint.connection(h) {
            let n = c.write_bytes(&first).unwrap_or(0);
            first = first.slice(n..);
        }
        let info = self.info_for(h);
        self.add_stream(h, info, events);
        if !first.is_empty() {
            if let Some(st) = self.streams.get_mut(&info.id) {
                st.pending.push_back((first, None));
            }
        }
        Ok(info)
    }

    /// Queues bytes from a stream's writer; `token` is dropped once STP has taken them.
    pub fn write(&mut self, id: StreamId, bytes: Bytes, token: Option<P>) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.pending.push_back((bytes, token));
            self.dirty.insert(id);
        }
    }

    /// Half-close: the peer sees the end after every byte written so far.
    pub fn shutdown(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.shutdown_requested = true;
            self.dirty.insert(id);
        }
    }

    /// Resets a stream's connection with `code`; its reader hears nothing more.
    pub fn abort(&mut self, id: StreamId, code: AbortCode) {
        if let Some(s) = self.remove_stream(id) {
            if let Some(c) = self.endpoint.connection(s.handle) {
                c.abort(code.code());
            }
        }
    }

    /// Resets every connection with `code` (their RSTs leave with the next transmits) and fails
    /// every stream with `error`.
    pub fn abort_all(&mut self, code: AbortCode, error: StreamError) {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(mut s) = self.remove_stream(id) {
                if let Some(c) = self.endpoint.connection(s.handle) {
                    c.abort(code.code());
                }
                let _ = s.events.offer(StreamEvent::Failed(error.clone()));
            }
        }
    }

    fn now_stamp(&self, now: Instant) -> u64 {
        self.wall_clock_at_zero_ns.wrapping_add(now.as_nanos())
    }

    /// A datagram from the hop's socket.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.counts.datagrams_received += 1;
        self.counts.bytes_received += data.len() as u64;
        let plain = &mut self.plain;
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
                    self.sent_since_heard = None;
                }
                if let Ok(Opened::Data { .. }) = opened {
                    if let Some(t) = &mut self.tap {
                        t(from, self.local, plain);
                    }
                    self.endpoint.handle_datagram(now, endpoint_from, plain);
                }
            }
            Sec::Gateway { responder } => match responder.open(now, data, from, plain) {
                Ok(Opened::Reply { .. }) => {
                    self.control.push_back((from, plain.clone(), true));
                }
                Ok(Opened::Data { session }) => {
                    if let Some(t) = &mut self.tap {
                        t(from, self.local, plain);
                    }
                    let opens = stp::wire::peek_types(plain)
                        .is_some_and(|t| t.contains(stp::wire::Types::BGN));
                    if opens && !self.open_budgets.allow(session, now) {
                        self.counts.opens_rate_limited += 1;
                        return;
                    }
                    self.endpoint.handle_datagram(now, from, plain)
                }
                _ => {}
            },
            Sec::Clear { .. } => {
                if let Some(t) = &mut self.tap {
                    t(from, self.local, data);
                }
                self.endpoint.handle_datagram(now, from, data);
            }
        }
    }

    /// The deadline from [`Self::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
    }

    /// When the core wants [`Self::handle_timeout`] and [`Self::pump`] next (`None`: nothing
    /// is due until something arrives).
    pub fn poll_timeout(&mut self, now: Instant) -> Option<Instant> {
        let mut wake = self.endpoint.poll_timeout(now);
        if let Some(sh) = &self.shaper {
            // Nothing can leave before the bucket refills; timers wait for it too (at most
            // one datagram's time on the link).
            wake = wake.map(|w| w.max(sh.ready_at()));
        }
        if !self.established() {
            // Nothing leaves before the session is up: a connection that could send now would
            // otherwise wake the driver at once, again and again (a busy loop for a handshake's
            // round trip); its timers are looked at with the next initiation.
            let hs = self.next_handshake;
            wake = Some(wake.filter(|&w| w > now).map_or(hs, |w| w.min(hs)));
        }
        if let (Some(since), true) = (self.sent_since_heard, self.established()) {
            let at = since + REHANDSHAKE_AFTER;
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        wake
    }

    /// Works after any input: the terminal's handshakes (re-handshake after silence, retries,
    /// failover), then streams: accepts (each offered to `accept`, which returns the new
    /// stream's reader or refuses it), connection events, writers' bytes into STP and STP's
    /// bytes to the readers.
    pub fn pump(&mut self, now: Instant, accept: &mut dyn FnMut(StreamInfo) -> Option<S>) {
        self.check_gateway_silence(now);
        if !self.established() && now >= self.next_handshake {
            self.fail_over_if_unanswered(now);
            if let Sec::Terminal { init, gateway, .. } = &self.security {
                self.control
                    .push_back((*gateway, init.initiation().to_vec(), false));
            }
            self.next_handshake = now + HANDSHAKE_RETRY;
        }
        self.pump_streams(accept);
    }

    /// Terminal: a gateway silent while we send has probably restarted and lost our session;
    /// start a new handshake.
    fn check_gateway_silence(&mut self, now: Instant) {
        let Some(since) = self.sent_since_heard else {
            return;
        };
        if now.saturating_duration_since(since) < REHANDSHAKE_AFTER || !self.established() {
            return;
        }
        let stamp = self.now_stamp(now);
        if let Sec::Terminal {
            init,
            local_key,
            gateway_key,
            handshakes,
            ..
        } = &mut self.security
        {
            let index = init.index().wrapping_add(2) | 1;
            if let Ok(fresh) = new_initiator(local_key, gateway_key, index, stamp) {
                **init = fresh;
                *handshakes += 1;
                self.next_handshake = now;
                self.sent_since_heard = None;
            }
        }
    }

    /// Terminal with several gateways: counts the initiation about to be sent to the current
    /// gateway; when it has left [`FAILOVER_AFTER_HANDSHAKES`] unanswered, resets the
    /// connections through it and moves to the next gateway with a fresh handshake.
    fn fail_over_if_unanswered(&mut self, now: Instant) {
        let stamp = self.now_stamp(now);
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
        let Some(&(addr, key)) = gateways.get(next) else {
            return;
        };
        let index = init.index().wrapping_add(2) | 1;
        let Ok(fresh) = new_initiator(local_key, &key, index, stamp) else {
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
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            let handle = self.streams.get(&id).map(|st| st.handle);
            let sent = handle
                .and_then(|h| self.endpoint.connection(h))
                .is_some_and(|c| c.stats().datagrams_sent > 0);
            if !sent {
                continue;
            }
            if let Some(mut st) = self.remove_stream(id) {
                if let Some(c) = self.endpoint.connection(st.handle) {
                    c.abort(AbortCode::HopClosed.code());
                }
                let _ = st
                    .events
                    .offer(StreamEvent::Failed(StreamError::FailedOver));
            }
        }
    }

    /// Moves data between streams and STP connections, and passes events on.
    fn pump_streams(&mut self, accept: &mut dyn FnMut(StreamInfo) -> Option<S>) {
        // Accept (gateway side).
        while let Some(h) = self.endpoint.accept() {
            let info = self.info_for(h);
            match accept(info) {
                Some(events) => self.add_stream(h, info, events),
                None => {
                    if let Some(c) = self.endpoint.connection(h) {
                        c.abort(AbortCode::Overloaded.code());
                    }
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
                    if let Some(mut s) = self.remove_stream(id) {
                        let _ = s.events.offer(StreamEvent::Failed(e.into()));
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
        let mut ids: Vec<StreamId> = self.dirty.drain().collect();
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
                if let Some(b) = s.held.take() {
                    if let Offer::Full(StreamEvent::Data(b)) = s.events.offer(StreamEvent::Data(b))
                    {
                        s.held = Some(b);
                        self.blocked.insert(id);
                        continue;
                    }
                }
                if !s.finished_sent
                    && matches!(s.events.offer(StreamEvent::Finished), Offer::Full(_))
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
                                match s.events.offer(StreamEvent::Finished) {
                                    Offer::Taken => s.finished_sent = true,
                                    Offer::Full(_) => {
                                        self.blocked.insert(id);
                                    }
                                    Offer::Gone => {}
                                }
                            }
                            break;
                        }
                        Err(_) => break,
                    },
                };
                match s.events.offer(StreamEvent::Data(chunk)) {
                    Offer::Taken => {}
                    Offer::Full(StreamEvent::Data(b)) => {
                        s.held = Some(b);
                        self.blocked.insert(id);
                        break;
                    }
                    _ => break,
                }
            }
        }
    }

    /// The next datagram to send, sealed, in `out`: handshake datagrams first, then what the
    /// endpoint has to send as far as the send allocation allows (`None`: nothing more now).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((destination, d, counted)) = self.control.pop_front() {
            out.clear();
            out.extend_from_slice(&d);
            return Some(Transmit {
                destination,
                size: out.len(),
                counted,
            });
        }
        if !self.established() {
            return None;
        }
        loop {
            if let Some(sh) = &mut self.shaper {
                if !sh.ready(now) {
                    self.counts.shaped += 1;
                    return None;
                }
            }
            let t = self.endpoint.poll_transmit(now, &mut self.plain)?;
            let Some(datagram) = self.plain.get(..t.size) else {
                continue;
            };
            // A terminal sends everything to the gateway in use (its endpoint names it by the
            // first gateway's address).
            let destination = match &self.security {
                Sec::Terminal { gateway, .. } => *gateway,
                Sec::Gateway { .. } | Sec::Clear { .. } => t.destination,
            };
            if let Some(tap) = &mut self.tap {
                tap(self.local, destination, datagram);
            }
            out.clear();
            let ok = match &mut self.security {
                Sec::Terminal { init, .. } => init.seal(datagram, out).is_ok(),
                Sec::Gateway { responder } => {
                    responder.seal_to(t.destination, datagram, out).is_ok()
                }
                Sec::Clear { .. } => {
                    out.extend_from_slice(datagram);
                    true
                }
            };
            if !ok {
                continue;
            }
            if let Some(sh) = &mut self.shaper {
                sh.charge(out.len());
            }
            return Some(Transmit {
                destination,
                size: out.len(),
                counted: true,
            });
        }
    }

    /// The driver sent `datagrams` counted datagrams of `bytes` in all.
    pub fn note_sent(&mut self, now: Instant, datagrams: u64, bytes: u64) {
        self.counts.datagrams_sent += datagrams;
        self.counts.bytes_sent += bytes;
        if matches!(self.security, Sec::Terminal { .. }) && self.sent_since_heard.is_none() {
            self.sent_since_heard = Some(now);
        }
    }

    /// A snapshot of the counters and connections.
    pub fn status(&mut self) -> HopStatus {
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
            Sec::Clear { .. } => (crate::tunnel::Counters::default(), 0),
        };
        HopStatus {
            local: self.local,
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
}
