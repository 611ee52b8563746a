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
use crate::fast_hash::{FastMap, FastSet};
use crate::keys::{PrivateKey, PublicKey};
use crate::tunnel::{CipherChoice, Initiator, Opened, Responder};
use bytes::Bytes;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};

/// Largest chunk a stream hands over at once, either way: read from STP for a reader, or
/// written by a `HopStream`'s writer.
pub(crate) const CHUNK: usize = 64 * 1024;
/// How often a handshake initiation is resent until answered.
pub(crate) const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// A terminal session that fell back from its preferred tunnel suite (its first initiation was
/// lost, or the gateway refuses the suite) is rekeyed after this much use, not `rekey_after_s`,
/// to try the preferred suite again (`docs/tunnel.md`, "Cipher").
pub(crate) const UPGRADE_AFTER: Duration = Duration::from_secs(3);
/// Terminal: sending without hearing anything authenticated for this long starts a new handshake.
pub(crate) const REHANDSHAKE_AFTER: Duration = Duration::from_secs(5);
/// Terminal with several gateways: handshake initiations a gateway may leave unanswered before
/// the terminal moves on to the next one (one every [`HANDSHAKE_RETRY`]).
pub(crate) const FAILOVER_AFTER_HANDSHAKES: u32 = 3;
/// Terminal: handshake initiations (per gateway) left unanswered before the tunnel counts as
/// down: the cause is logged, waiting opens that have sent nothing fail, new opens are refused.
pub(crate) const DOWN_AFTER_HANDSHAKES: u32 = 3;
/// Terminal with open streams: after this long without hearing the gateway it sends a probe
/// (an empty sealed datagram, at most one per this interval), so a restarted gateway, which
/// answers it with an unknown-session notice, is found within about this time.
pub(crate) const PROBE_AFTER: Duration = Duration::from_secs(1);

/// After a rekey, the least time between probes asking the gateway to use the new session
/// while its datagrams still arrive on the old one.
const SWITCH_PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Terminal: our capabilities are sent again when the gateway's datagrams keep coming this
/// long after them without its own (one of the two was lost; longer than a GEO round trip).
const CAPABILITIES_RESEND_INTERVAL: Duration = Duration::from_secs(1);
/// Terminal: the most times our capabilities are sent on one session. A gateway of the version
/// before capabilities never answers; it drops each as malformed, silently.
pub(crate) const CAPABILITIES_ATTEMPTS: u8 = 4;
/// Gateway: a tunnel session that has received nothing for this long (or for twice the hop's
/// dead timeout, if that is longer) is erased, its keys zeroized. A session with a live
/// connection is never this quiet (STP polls every `keepalive_interval_ms`), so only sessions
/// of terminals that went away or fell idle go; an idle terminal that comes back gets the
/// unknown-session notice on its first datagram and re-handshakes at once (one round trip).
pub(crate) const SESSION_IDLE_EXPIRY: Duration = Duration::from_secs(300);
/// Gateway: how often idle sessions are looked for (so one is erased at most this late).
const SESSION_SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Gateway: unknown-session notices sent per second at most (all terminals together).
pub(crate) const NOTICES_PER_SECOND: u32 = 200;
/// How often a terminal whose tunnel stays down repeats its log line, and how often a gateway
/// logs a failing handshake per source address.
pub(crate) const TUNNEL_LOG_INTERVAL: Duration = Duration::from_secs(60);
use crate::sizing::IPV4_UDP_OVERHEAD;
pub(crate) use crate::sizing::IPV6_UDP_OVERHEAD;

/// When a terminal rekeys its tunnel session: a new Noise handshake on the live session,
/// which keeps carrying the streams until the new one is up (`docs/tunnel.md`, "Rekeying").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RekeyConfig {
    /// A new handshake once a session has been in use this long (default 120 s).
    pub after: Duration,
    /// ... or once this many data datagrams were sealed and opened on it (default 2^32).
    pub after_messages: u64,
    /// How long the replaced session still opens datagrams in flight on it (default 10 s);
    /// then it is erased, its keys zeroized.
    pub overlap: Duration,
    /// A rekey left unanswered this long (initiations resent every [`HANDSHAKE_RETRY`])
    /// tears the session down for a full new handshake, logged (default 60 s).
    pub give_up_after: Duration,
}

impl Default for RekeyConfig {
    fn default() -> Self {
        RekeyConfig {
            after: Duration::from_secs(120),
            after_messages: 1 << 32,
            overlap: Duration::from_secs(10),
            give_up_after: Duration::from_secs(60),
        }
    }
}

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
    /// Payload bytes the stream sent and received.
    pub payload_bytes_sent: u64,
    pub payload_bytes_received: u64,
    /// The STP connection's statistics; `None` on the split-TCP hop, which runs no STP.
    pub stp: Option<stp::ConnectionStats>,
}

/// The STP engine's figures of a hop ([`HopStatus::stp`]).
#[derive(Debug, Clone, Default)]
pub struct StpStatus {
    pub endpoint: stp::EndpointStats,
    /// Sums over every connection, closed ones included.
    pub totals: StpTotals,
}

/// STP counters summed over every connection the hop has had (live and closed).
pub(crate) type StpTotals = stp::ConnectionTotals;

/// The tunnel's state as a terminal sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TunnelState {
    /// A session is established (always so on a gateway).
    #[default]
    Up,
    /// A handshake is under way and not yet given up on.
    Handshaking,
    /// [`DOWN_AFTER_HANDSHAKES`] initiations went unanswered: opens fail at once.
    Down,
}

impl TunnelState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TunnelState::Up => "up",
            TunnelState::Handshaking => "handshaking",
            TunnelState::Down => "down",
        }
    }
}

/// What the tunnel reports of itself for `/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TunnelReport {
    pub state: TunnelState,
    /// Time since the last completed handshake (terminal: its own; gateway: any terminal's).
    pub last_handshake_ago: Option<Duration>,
    /// The last problem and how long ago: a terminal's unanswered handshakes, a gateway's
    /// refused handshake (with the source address).
    pub last_error: Option<String>,
    pub last_error_ago: Option<Duration>,
    /// Live tunnel sessions by cipher suite, in [`crate::tunnel::Cipher`] order
    /// (ChaCha20-Poly1305, AES-256-GCM): a terminal's one session (per worker), a gateway's
    /// current session of every terminal tunnel (a rekey's previous one not counted).
    pub sessions_by_cipher: [u64; 2],
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
    /// Rekeys completed (gateway: of all terminals), and a terminal's rekeys that went
    /// unanswered (the session was then torn down for a new handshake).
    pub rekeys: u64,
    pub rekey_failures: u64,
    /// UDP datagrams and their payload bytes (sealed: tunnel overhead included, IP/UDP headers
    /// not) sent and received by the hop's socket.
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    pub datagrams_received: u64,
    pub bytes_received: u64,
    /// Datagrams that waited for the send allocation, and the allocation in bit/s of link bytes.
    pub shaped: u64,
    /// Gateway: datagrams opening connections dropped because their terminal opened faster
    /// than [`super::open_budget::OPENS_PER_S`].
    pub opens_rate_limited: u64,
    /// Receives the kernel dropped at the hop's UDP sockets because their receive buffers were
    /// full (`SO_RXQ_OVFL`: a datagram, or a run coalesced from one segmented send, counts once;
    /// 0 where the kernel does not report it).
    pub socket_overflows: u64,
    /// Times a hop socket's receive queue filled to a quarter and the streams' windows were
    /// held until it drained (receive backpressure, [`super::backpressure`]), and the window
    /// ceiling in force now (the largest of the workers'; `None`: no pressure).
    pub backpressure_episodes: u64,
    pub window_ceiling_bytes: Option<u64>,
    pub send_rate_bps: Option<u64>,
    /// The tunnel's counters (authentication failures, replays, unknown keys, ...).
    pub tunnel: crate::tunnel::Counters,
    /// The tunnel's state, last handshake and last error.
    pub tunnel_report: TunnelReport,
    /// The STP engine's figures; `None` on the split-TCP hop, which runs no STP.
    pub stp: Option<StpStatus>,
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

/// A received datagram as the driver hands it: to read only, or to decrypt in place.
enum Input<'a> {
    Shared(&'a [u8]),
    Owned(&'a mut [u8]),
}

impl Input<'_> {
    fn get(&self) -> &[u8] {
        match self {
            Input::Shared(d) => d,
            Input::Owned(d) => d,
        }
    }

    /// The datagram to open in place: a tunnel data datagram the driver lent mutably.
    fn data_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Input::Owned(d) if d.first() == Some(&crate::tunnel::wire::TYPE_DATA) => Some(d),
            _ => None,
        }
    }
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
pub(crate) type Tap = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) + Send>;

/// Shows a tunnelled STP datagram to the tap with its checksum filled: inside the tunnel it may
/// be left zero (`emit_checksum`), and a capture should read as the datagram STP means.
fn show_tunnelled(tap: &mut Tap, from: SocketAddr, to: SocketAddr, datagram: &[u8]) {
    let mut d = datagram.to_vec();
    stp::wire::fill_checksum(&mut d);
    tap(from, to, &d);
}

#[derive(Default)]
struct Counts {
    datagrams_sent: u64,
    bytes_sent: u64,
    datagrams_received: u64,
    bytes_received: u64,
    shaped: u64,
    opens_rate_limited: u64,
    rekeys: u64,
    rekey_failures: u64,
}

/// Terminal: the rekeying state of the tunnel session.
#[derive(Default)]
struct RekeyState {
    config: RekeyConfig,
    /// When the current session was established (by a handshake or a rekey).
    session_began: Option<Instant>,
    /// When the rekey under way began, and when its initiation is next (re)sent.
    began: Option<Instant>,
    next_send: Option<Instant>,
    /// When the replaced session is erased.
    previous_until: Option<Instant>,
    /// When the last probe asking the gateway to move to the new session left.
    switch_probe: Option<Instant>,
    /// Our capabilities on the current session: when they last left, how many times, and
    /// whether the gateway answered with its own ([`HopCore::resend_capabilities`]).
    capabilities_sent: Option<Instant>,
    capabilities_attempts: u8,
    capabilities_answered: bool,
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
        /// Handshake initiations sent to any gateway since one was last heard.
        unanswered_total: u32,
        /// The suites offered (`tunnel_cipher`).
        cipher: CipherChoice,
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
    /// Terminal: when the opener gives up on the gateway's verdict; written into the stream
    /// header's deadline field when the first piece goes into STP.
    deadline: Option<Instant>,
    /// Terminal: the first piece (the stream header) has not gone into STP yet; it waits for
    /// the tunnel session, whose clock offset stamps the deadline.
    unstamped: bool,
    /// Told as the writer's bytes leave for the first time (the hop's read-ahead bound).
    on_sent: Option<Arc<dyn OnSent>>,
    /// Bytes STP's send buffer took: all, and those of pieces without a token (the first
    /// piece of a stream this side opened, which no read-ahead paid for; it leaves first).
    accepted: u64,
    untokened: u64,
    /// Bytes of tokened pieces already reported to `on_sent`.
    reported_sent: u64,
}

/// Told how many of a stream's written bytes (those handed in with a token) STP has sent for
/// the first time: the hop's read-ahead bound ([`crate::hop::read_ahead`]) releases them.
pub(crate) trait OnSent: Send + Sync {
    fn on_sent(&self, bytes: u64);
}

/// What a terminal knows and tells about its tunnel (and a gateway about its handshakes).
#[derive(Default)]
struct TunnelWatch {
    /// The gateway instance of the last session (a different one means it restarted).
    instance: Option<u64>,
    /// Gateway clock minus terminal clock, ns, as a lower bound (from the last response).
    clock_offset_ns: Option<i128>,
    down: bool,
    down_logged: Option<Instant>,
    /// When the current handshake attempt began (for "tunnel up after ...").
    handshake_began: Option<Instant>,
    last_handshake: Option<Instant>,
    last_error: Option<(Instant, String)>,
    last_heard: Option<Instant>,
    last_probe: Option<Instant>,
    /// When an unknown-session notice last started a handshake.
    last_notice: Option<Instant>,
    /// Gateway: notices sent in the current second, and that second's start.
    notices: (Instant, u32),
}

/// The STP hop's logic; `S` is a stream's reader, `P` the token that comes with written bytes.
pub struct HopCore<S, P> {
    endpoint: Endpoint,
    security: Sec,
    streams: FastMap<StreamId, StreamState<S, P>>,
    by_handle: FastMap<ConnectionHandle, StreamId>,
    /// Streams to pump at the next turn: a command or a connection event touched them.
    /// Pumping visits only these (and `blocked` and `closing`), never every stream.
    dirty: FastSet<StreamId>,
    /// Streams whose reader had no room for an event: pumped again on every turn.
    blocked: FastSet<StreamId>,
    /// Streams whose connection closed: pumped on every turn until the connection is freed.
    closing: FastSet<StreamId>,
    /// Streams with an `on_sent` whose STP send buffer took bytes not yet reported sent.
    unsent: FastSet<StreamId>,
    next_id: StreamId,
    shaper: Option<Shaper>,
    counts: Counts,
    /// Gateway: how fast each terminal session may open connections.
    open_budgets: OpenBudgets,
    /// Terminal: the first send since the gateway was last heard.
    sent_since_heard: Option<Instant>,
    /// Terminal: when the next handshake initiation leaves while the session is not up.
    next_handshake: Instant,
    rekey: RekeyState,
    /// Handshake datagrams (initiations, responses) waiting to leave, outside the allocation.
    control: VecDeque<(SocketAddr, Vec<u8>, bool)>,
    plain: Vec<u8>,
    tap: Option<Tap>,
    local: SocketAddr,
    wall_clock_at_zero_ns: u64,
    watch: TunnelWatch,
    /// Gateway: handshake failures logged once a minute per source address.
    handshake_log: crate::tunnel::log_limit::LogLimiter<std::net::IpAddr>,
    /// The latest `now` seen (for ages in [`Self::status`]).
    last_now: Instant,
    /// Gateway: sessions idle this long are erased ([`SESSION_IDLE_EXPIRY`]), looked for at
    /// `next_session_sweep`.
    session_idle: Duration,
    next_session_sweep: Instant,
    /// Tests: behave as a version before tunnel capabilities (any build before 28 November
    /// 2026): announce none, drop capabilities datagrams as malformed, verify every STP
    /// checksum.
    legacy_tunnel: bool,
}

/// The age of use at which a terminal's session is rekeyed: `after`, or [`UPGRADE_AFTER`] for
/// a session that fell back from the preferred suite.
fn rekey_age(init: &Initiator, config: &RekeyConfig) -> Duration {
    if init.fell_back() {
        config.after.min(UPGRADE_AFTER)
    } else {
        config.after
    }
}

/// A tunnel initiator stamped with `stamp_ns`.
fn new_initiator(
    local: &PrivateKey,
    gateway_key: &PublicKey,
    index: u32,
    stamp_ns: u64,
    cipher: CipherChoice,
) -> Result<Initiator, HopError> {
    Ok(Initiator::with_cipher(
        local,
        gateway_key,
        index,
        stamp_ns,
        cipher,
    )?)
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
        let session_idle = SESSION_IDLE_EXPIRY
            .max(2 * Duration::from_millis(u64::from(config.endpoint.connection.dead_timeout_ms)));
        let mut endpoint_config = config.endpoint;
        // Inside the tunnel STP's checksum is left out where the peer does not verify it: the
        // AEAD tag covers every byte (`docs/tunnel.md`, "Capabilities"); the hop fills it for a
        // peer that has not said so when it seals.
        endpoint_config.connection.emit_checksum = matches!(security, CoreSecurity::Clear { .. });
        let endpoint = Endpoint::new(endpoint_config, rng)?;
        if config.send_rate_bps == Some(0) {
            return Err(HopError::ZeroRate);
        }
        let stamp = config.wall_clock_at_zero_ns.wrapping_add(now.as_nanos());
        let security = match security {
            CoreSecurity::Terminal { local, gateways } => {
                let &(gateway, gateway_key) = gateways.first().ok_or(HopError::NoGateway)?;
                let index = config.seed as u32 | 1;
                let init = new_initiator(&local, &gateway_key, index, stamp, CipherChoice::Auto)?;
                Sec::Terminal {
                    init: Box::new(init),
                    gateway,
                    local_key: local,
                    gateway_key,
                    handshakes: 1,
                    gateways,
                    current: 0,
                    unanswered: 0,
                    unanswered_total: 0,
                    cipher: CipherChoice::Auto,
                }
            }
            CoreSecurity::Gateway { mut responder } => {
                responder.set_wall_clock(config.wall_clock_at_zero_ns);
                Sec::Gateway { responder }
            }
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
            streams: FastMap::default(),
            by_handle: FastMap::default(),
            dirty: FastSet::default(),
            blocked: FastSet::default(),
            closing: FastSet::default(),
            unsent: FastSet::default(),
            next_id: 1,
            shaper: config.send_rate_bps.map(|r| Shaper::new(r, overhead, now)),
            counts: Counts::default(),
            open_budgets: OpenBudgets::default(),
            sent_since_heard: None,
            next_handshake: now,
            rekey: RekeyState::default(),
            control: VecDeque::new(),
            plain: Vec::with_capacity(65_536),
            tap: None,
            local: config.local,
            wall_clock_at_zero_ns: config.wall_clock_at_zero_ns,
            watch: TunnelWatch {
                handshake_began: Some(now),
                notices: (now, 0),
                ..TunnelWatch::default()
            },
            handshake_log: crate::tunnel::log_limit::LogLimiter::new(TUNNEL_LOG_INTERVAL),
            last_now: now,
            session_idle,
            next_session_sweep: now + SESSION_SWEEP_EVERY,
            legacy_tunnel: false,
        })
    }

    /// Makes this core send under `other`'s allocation (one token bucket for the workers of
    /// one hop, whose clocks must be one clock), so N workers together keep to it.
    pub(crate) fn share_allocation_of(&mut self, other: &Self) {
        if let Some(s) = &other.shaper {
            self.shaper = Some(s.clone());
        }
    }

    /// Terminal: when to rekey (default [`RekeyConfig::default`]).
    pub(crate) fn set_rekey(&mut self, config: RekeyConfig) {
        self.rekey.config = config;
    }

    /// The tunnel suites this side offers (terminal) or accepts (gateway): `tunnel_cipher`,
    /// default [`CipherChoice::Auto`]. Set it before the first [`Self::pump`]: a terminal's
    /// pending handshake is made again with the new offers.
    pub(crate) fn set_cipher(&mut self, choice: CipherChoice) -> Result<(), HopError> {
        let stamp = self.now_stamp(self.last_now);
        match &mut self.security {
            Sec::Terminal {
                init,
                local_key,
                gateway_key,
                cipher,
                ..
            } => {
                *cipher = choice;
                if !init.is_established() {
                    **init = new_initiator(local_key, gateway_key, init.index(), stamp, choice)?;
                }
            }
            Sec::Gateway { responder } => responder.set_cipher(choice),
            Sec::Clear { .. } => {}
        }
        Ok(())
    }

    /// The suite of the terminal's tunnel session, once established.
    pub fn tunnel_cipher(&self) -> Option<crate::tunnel::Cipher> {
        match &self.security {
            Sec::Terminal { init, .. } => init.cipher(),
            _ => None,
        }
    }

    /// Terminal: whether the session replaced by the last rekey is still kept (it is erased,
    /// keys zeroized, [`RekeyConfig::overlap`] after the rekey).
    #[cfg(test)]
    pub(crate) fn previous_session_kept(&self) -> bool {
        matches!(&self.security, Sec::Terminal { init, .. } if init.has_previous())
    }

    /// Tests: whether STP computes its checksums itself (not inside the tunnel).
    #[cfg(test)]
    pub(crate) fn stp_emits_checksums(&self) -> bool {
        self.endpoint.config().connection.emit_checksum
    }

    /// Tests: behave as a version without tunnel capabilities (see `legacy_tunnel`).
    #[cfg(test)]
    pub(crate) fn act_as_legacy_tunnel(&mut self) {
        self.legacy_tunnel = true;
    }

    /// Tests: a terminal that heard, on its current session, the gateway say it does not
    /// verify STP checksums.
    #[cfg(test)]
    pub(crate) fn terminal_peer_skips_stp_checksum(&self) -> bool {
        matches!(&self.security, Sec::Terminal { init, .. } if init.peer_skips_stp_checksum())
    }

    /// Caps the receive window every stream advertises (`None`: each its buffer's room):
    /// receive backpressure ([`super::backpressure`]).
    pub(crate) fn set_window_ceiling(&mut self, ceiling: Option<u64>) {
        self.endpoint.set_window_ceiling(ceiling);
    }

    /// Shows every STP datagram sent and received, in clear, to `tap` (`--capture`).
    pub(crate) fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Terminal: whether the tunnel session is up (always true on a gateway or a clear hop).
    pub(crate) fn established(&self) -> bool {
        match &self.security {
            Sec::Terminal { init, .. } => init.is_established(),
            Sec::Gateway { .. } | Sec::Clear { .. } => true,
        }
    }

    /// The live streams.
    pub(crate) fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Gateway: serves the terminal keys in `allowed` from now on ([`Responder::set_allowed`]);
    /// the keys added and removed. The streams of a removed key are revoked at once: each is
    /// reset ([`AbortCode::Revoked`], the resets sealed under the revoked session while it
    /// lingers) and its reader fails with [`StreamError::Revoked`]. A terminal hop has no
    /// allow-list: `None`.
    pub(crate) fn set_allowed_terminals(
        &mut self,
        allowed: Vec<PublicKey>,
    ) -> Option<(Vec<PublicKey>, Vec<PublicKey>)> {
        let now = self.last_now;
        let Sec::Gateway { responder } = &mut self.security else {
            return None;
        };
        let (added, removed) = responder.set_allowed(now, allowed);
        let revoked: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, st)| st.peer_key.is_some_and(|k| removed.contains(&k)))
            .map(|(&id, _)| id)
            .collect();
        for id in revoked {
            if let Some(mut st) = self.remove_stream(id) {
                if let Some(c) = self.endpoint.connection(st.handle) {
                    c.abort(AbortCode::Revoked.code());
                }
                let _ = st.events.offer(StreamEvent::Failed(StreamError::Revoked));
            }
        }
        Some((added, removed))
    }

    /// Gateway: answers handshakes with these static keys from now on
    /// ([`Responder::set_keys`]; live sessions kept); the public keys now accepted. A terminal
    /// hop has no such keys: `None`.
    pub(crate) fn set_gateway_keys(
        &mut self,
        local: PrivateKey,
        next: Option<PrivateKey>,
    ) -> Option<Vec<PublicKey>> {
        match &mut self.security {
            Sec::Gateway { responder } => {
                responder.set_keys(local, next);
                Some(responder.public_keys())
            }
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
                deadline: None,
                unstamped: false,
                on_sent: None,
                accepted: 0,
                untokened: 0,
                reported_sent: 0,
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
        self.unsent.remove(&id);
        Some(s)
    }

    /// Terminal (or clear hop): opens a stream whose first bytes (`first`) ride on the STP BGN;
    /// its events go to `events`.
    pub fn open(&mut self, now: Instant, first: Bytes, events: S) -> Result<StreamInfo, HopError> {
        self.open_by(now, first, events, None)
    }

    /// [`Self::open`] for an opener that gives up on the gateway's verdict at `deadline`: when
    /// `first` begins with a stream header that has a deadline field, the field gets the
    /// deadline in the gateway's clock (`docs/gateway.md`, "At-most-once opens"). A terminal
    /// whose tunnel is down refuses at once ([`HopError::TunnelDown`]).
    pub(crate) fn open_by(
        &mut self,
        now: Instant,
        first: Bytes,
        events: S,
        deadline: Option<Instant>,
    ) -> Result<StreamInfo, HopError> {
        self.last_now = now;
        let to = match &self.security {
            // The endpoint knows every gateway by the first one's address (see
            // `Sec::Terminal::gateways`), so connections not yet sent survive a failover.
            Sec::Terminal { gateways, .. } => {
                if self.watch.down {
                    return Err(HopError::TunnelDown);
                }
                gateways.first().map(|g| g.0).ok_or(HopError::NoGateway)?
            }
            Sec::Clear { peer } => *peer,
            Sec::Gateway { .. } => return Err(HopError::NotTerminal),
        };
        let h = self.endpoint.connect(now, to)?;
        let info = self.info_for(h);
        self.add_stream(h, info, events);
        if let Some(st) = self.streams.get_mut(&info.id) {
            st.deadline = deadline;
            st.unstamped = matches!(self.security, Sec::Terminal { .. });
            // The first piece goes into STP with the stream's first pump (at once when the
            // session is up), before the BGN is built, so it rides in the BGN's flight; what
            // the send buffer does not take waits like any later write.
            if !first.is_empty() || st.unstamped {
                st.pending.push_back((first, None));
            }
        }
        Ok(info)
    }

    /// The deadline field's value for `deadline`: ms since the Unix epoch in the gateway's
    /// clock, rounded down (0: none, or the clock offset is not known).
    fn gateway_deadline_ms(&self, deadline: Option<Instant>) -> u64 {
        let (Some(d), Some(offset)) = (deadline, self.watch.clock_offset_ns) else {
            return 0;
        };
        let ns = i128::from(self.now_stamp(d)) + offset;
        u64::try_from(ns / 1_000_000).unwrap_or(0).max(1)
    }

    /// Tells `on_sent` from now on how many of the bytes written to stream `id` with a token
    /// STP has sent for the first time ([`Self::report_sent`]).
    pub(crate) fn set_on_sent(&mut self, id: StreamId, on_sent: Arc<dyn OnSent>) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.on_sent = Some(on_sent);
        }
    }

    /// Reports to each stream's `on_sent` the bytes its connection sent for the first time
    /// since the last report. Call it after the transmits: it visits only streams whose send
    /// buffer took bytes not yet reported.
    pub(crate) fn report_sent(&mut self) {
        let (streams, endpoint) = (&mut self.streams, &mut self.endpoint);
        self.unsent.retain(|id| {
            let Some(s) = streams.get_mut(id) else {
                return false;
            };
            let Some(c) = endpoint.connection(s.handle) else {
                return false;
            };
            let unsent = c.unsent();
            let sent = s
                .accepted
                .saturating_sub(unsent)
                .saturating_sub(s.untokened);
            if sent > s.reported_sent {
                if let Some(o) = &s.on_sent {
                    o.on_sent(sent - s.reported_sent);
                }
                s.reported_sent = sent;
            }
            unsent > 0
        });
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
    pub(crate) fn abort_all(&mut self, code: AbortCode, error: StreamError) {
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
        self.receive(now, from, Input::Shared(data));
    }

    /// As [`Self::handle_datagram`], decrypting a tunnel's data datagram where it lies (no
    /// copy): `data`'s content is undefined afterwards.
    pub(crate) fn handle_datagram_in_place(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &mut [u8],
    ) {
        self.receive(now, from, Input::Owned(data));
    }

    fn receive(&mut self, now: Instant, from: SocketAddr, mut input: Input<'_>) {
        self.counts.datagrams_received += 1;
        self.counts.bytes_received += input.get().len() as u64;
        self.last_now = now;
        if self.legacy_tunnel
            && input.get().first() == Some(&crate::tunnel::wire::TYPE_CAPABILITIES)
        {
            return;
        }
        let verify = self.legacy_tunnel;
        let plain = &mut self.plain;
        match &mut self.security {
            Sec::Terminal {
                init,
                gateway,
                unanswered,
                unanswered_total,
                gateways,
                ..
            } => {
                if from != *gateway {
                    return;
                }
                // The endpoint's name for whichever gateway is in use.
                let endpoint_from = gateways.first().map_or(from, |g| g.0);
                // Data (nearly every datagram) is opened in place where the driver allows;
                // the rest into `plain`.
                let (opened, in_place) = match input.data_mut() {
                    Some(d) => match init.open_in_place(d) {
                        Ok((opened, range)) => (Ok(opened), Some(range)),
                        Err(e) => (Err(e), None),
                    },
                    None => (init.open(input.get(), plain), None),
                };
                let data = input.get();
                let plain: &[u8] = match in_place {
                    Some(range) => data.get(range).unwrap_or_default(),
                    None => plain,
                };
                // An unknown-session notice is not authenticated: it proves nothing about the
                // gateway being there.
                if opened.is_ok() && opened != Ok(Opened::SessionUnknown) {
                    *unanswered = 0;
                    *unanswered_total = 0;
                    self.sent_since_heard = None;
                    self.watch.last_heard = Some(now);
                }
                // The gateway still seals on the session a rekey replaced.
                let on_previous =
                    matches!(opened, Ok(Opened::Data { session }) if session != init.index());
                match opened {
                    Ok(Opened::Data { .. }) => {
                        if let Some(t) = &mut self.tap {
                            show_tunnelled(t, from, self.local, plain);
                        }
                        if verify {
                            self.endpoint.handle_datagram(now, endpoint_from, plain);
                        } else {
                            self.endpoint
                                .handle_authenticated_datagram(now, endpoint_from, plain);
                        }
                        if on_previous {
                            self.probe_new_session(now);
                        } else {
                            self.resend_capabilities(now);
                        }
                    }
                    Ok(Opened::Established) => {
                        self.on_established(now);
                        self.send_capabilities(now);
                    }
                    Ok(Opened::Rekeyed) => {
                        self.on_rekeyed(now);
                        self.send_capabilities(now);
                    }
                    // The gateway's, on the current session: ours arrived.
                    Ok(Opened::Capabilities { session }) if session == init.index() => {
                        self.rekey.capabilities_answered = true;
                    }
                    Ok(Opened::SessionUnknown) => self.on_session_unknown(now),
                    _ => {}
                }
            }
            Sec::Gateway { responder } => {
                // Data (nearly every datagram) is opened in place where the driver allows;
                // the rest into `plain`.
                let (opened, in_place) = match input.data_mut() {
                    Some(d) => match responder.open_in_place(now, d, from) {
                        Ok((opened, range)) => (Ok(opened), Some(range)),
                        Err(e) => (Err(e), None),
                    },
                    None => (responder.open(now, input.get(), from, plain), None),
                };
                let data = input.get();
                let plain: &[u8] = match in_place {
                    Some(range) => data.get(range).unwrap_or_default(),
                    None => plain,
                };
                match opened {
                    Ok(Opened::Reply { .. }) => {
                        self.watch.last_handshake = Some(now);
                        self.control.push_back((from, plain.to_vec(), true));
                    }
                    // The terminal's capabilities (noted on its session): ours in return.
                    Ok(Opened::Capabilities { session }) => {
                        if let Ok(d) = responder.capabilities_datagram(session) {
                            self.control.push_back((from, d, true));
                        }
                    }
                    // A terminal's probe: it only wanted to know whether we know its session.
                    Ok(Opened::Data { .. }) if plain.is_empty() => {}
                    Ok(Opened::Data { session }) => {
                        if let Some(t) = &mut self.tap {
                            show_tunnelled(t, from, self.local, plain);
                        }
                        let opens = stp::wire::peek_types(plain)
                            .is_some_and(|t| t.contains(stp::wire::Types::BGN));
                        if opens && !self.open_budgets.allow(session, now) {
                            self.counts.opens_rate_limited += 1;
                            return;
                        }
                        if verify {
                            self.endpoint.handle_datagram(now, from, plain);
                        } else {
                            self.endpoint
                                .handle_authenticated_datagram(now, from, plain);
                        }
                    }
                    Err(crate::tunnel::Error::UnknownSession(index))
                        if data.first() == Some(&crate::tunnel::wire::TYPE_DATA) =>
                    {
                        // Data for a session we do not have (we restarted, or expired it): say so,
                        // so the terminal re-handshakes now instead of after its silence timer.
                        self.send_notice(now, from, index);
                    }
                    Err(e)
                        if data
                            .first()
                            .is_some_and(|&t| crate::tunnel::wire::is_initiation(t)) =>
                    {
                        let key = responder.rejected_key();
                        self.log_refused_handshake(now, from, &e, key);
                    }
                    _ => {}
                }
            }
            Sec::Clear { .. } => {
                let data = input.get();
                if let Some(t) = &mut self.tap {
                    t(from, self.local, data);
                }
                self.endpoint.handle_datagram(now, from, data);
            }
        }
    }

    /// The deadline from [`Self::poll_timeout`] passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = now;
        if let Sec::Gateway { responder } = &mut self.security {
            responder.expire_revoked(now);
            if now >= self.next_session_sweep {
                self.next_session_sweep = now + SESSION_SWEEP_EVERY;
                let idle_ms = u64::try_from(self.session_idle.as_millis()).unwrap_or(u64::MAX);
                let expired = responder.expire_idle(now, idle_ms);
                if expired > 0 {
                    tracing::info!(
                        expired,
                        left = responder.session_count(),
                        "erased tunnel sessions that heard nothing for {} s (terminals gone or idle; \
                         an idle one re-handshakes on its next datagram)",
                        self.session_idle.as_secs()
                    );
                }
            }
        }
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
        if let Sec::Gateway { responder } = &self.security {
            if let Some(at) = responder.next_revoked_expiry() {
                let at = at.max(now);
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
            // Only while there are sessions to expire: a gateway without any sleeps.
            if responder.session_count() > 0 {
                let at = self.next_session_sweep.max(now);
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        }
        if let Some(at) = self.rekey_due() {
            let at = at.max(now);
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        if !self.streams.is_empty() && self.established() {
            if let Some(at) = self.probe_due() {
                let at = at.max(now);
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        }
        wake
    }

    /// Works after any input: the terminal's handshakes (re-handshake after silence, retries,
    /// failover), then streams: accepts (each offered to `accept`, which returns the new
    /// stream's reader or refuses it), connection events, writers' bytes into STP and STP's
    /// bytes to the readers.
    pub fn pump(&mut self, now: Instant, accept: &mut dyn FnMut(StreamInfo) -> Option<S>) {
        self.last_now = now;
        self.check_gateway_silence(now);
        self.check_rekey(now);
        if !self.established() && now >= self.next_handshake {
            self.fail_over_if_unanswered(now);
            self.check_down(now);
            if let Sec::Terminal { init, gateway, .. } = &mut self.security {
                self.control
                    .push_back((*gateway, init.initiation_to_send().to_vec(), false));
            }
            self.next_handshake = now + HANDSHAKE_RETRY;
        }
        self.probe_if_quiet(now);
        self.pump_streams(accept);
    }

    /// Terminal: after [`DOWN_AFTER_HANDSHAKES`] unanswered initiations (per gateway) the
    /// tunnel is down: the likely causes are logged (again once a minute while it lasts), opens
    /// that have sent nothing fail, and new opens are refused until a gateway answers. Streams
    /// whose BGN left are left to their own timeout: the gateway may have them.
    fn check_down(&mut self, now: Instant) {
        let Sec::Terminal {
            gateway,
            gateways,
            unanswered_total,
            ..
        } = &self.security
        else {
            return;
        };
        let limit = DOWN_AFTER_HANDSHAKES.saturating_mul(gateways.len().max(1) as u32);
        if *unanswered_total <= limit {
            return;
        }
        let gateway = *gateway;
        let n = *unanswered_total - 1;
        let w = &mut self.watch;
        let first = !w.down;
        w.down = true;
        let line = format!(
            "no handshake answer from {gateway}: gateway down, unreachable, or \
             gateway_public_key wrong"
        );
        w.last_error = Some((now, line.clone()));
        if first
            || w.down_logged
                .is_none_or(|t| now.saturating_duration_since(t) >= TUNNEL_LOG_INTERVAL)
        {
            w.down_logged = Some(now);
            tracing::info!(gateway = %gateway, unanswered = n, "tunnel down: {line}");
        }
        if !first {
            return;
        }
        self.fail_streams(false, StreamError::TunnelDown);
    }

    /// Resets the streams that have sent a datagram (`sent`) or that have not (`!sent`), and
    /// fails them at their reader with `error`.
    fn fail_streams(&mut self, sent: bool, error: StreamError) {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            let handle = self.streams.get(&id).map(|st| st.handle);
            let has_sent = handle
                .and_then(|h| self.endpoint.connection(h))
                .is_some_and(|c| c.stats().datagrams_sent > 0);
            if has_sent != sent {
                continue;
            }
            if let Some(mut st) = self.remove_stream(id) {
                if let Some(c) = self.endpoint.connection(st.handle) {
                    c.abort(AbortCode::HopClosed.code());
                }
                let _ = st.events.offer(StreamEvent::Failed(error.clone()));
            }
        }
    }

    /// Terminal with streams: a probe when the gateway has been quiet for [`PROBE_AFTER`] (see
    /// there). It is sent outside the counts and does not start the silence timer: a live
    /// gateway does not answer it.
    fn probe_if_quiet(&mut self, now: Instant) {
        if self.streams.is_empty() || !self.established() {
            return;
        }
        let Some(at) = self.probe_due() else {
            return;
        };
        if now < at {
            return;
        }
        if let Sec::Terminal { init, gateway, .. } = &mut self.security {
            let mut d = Vec::new();
            if init.seal(&[], &mut d).is_ok() {
                self.control.push_back((*gateway, d, false));
            }
        }
        self.watch.last_probe = Some(now);
    }

    /// When the next probe is due (terminal, session up), whether or not streams exist.
    fn probe_due(&self) -> Option<Instant> {
        if !matches!(self.security, Sec::Terminal { .. }) {
            return None;
        }
        let quiet_since = match (self.watch.last_heard, self.watch.last_probe) {
            (Some(h), Some(p)) => h.max(p),
            (h, p) => h.or(p)?,
        };
        Some(quiet_since + PROBE_AFTER)
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
        if let Sec::Terminal { gateway, .. } = &self.security {
            tracing::info!(
                gateway = %gateway,
                "tunnel: no answer from the gateway for {} s while sending; new handshake",
                REHANDSHAKE_AFTER.as_secs()
            );
        }
        self.rehandshake(now);
    }

    /// Terminal: the next moment rekeying has something to do (start, resend, give up, erase
    /// the replaced session). Message-count triggers are looked at with every `pump`.
    fn rekey_due(&self) -> Option<Instant> {
        let Sec::Terminal { init, .. } = &self.security else {
            return None;
        };
        if !init.is_established() {
            return None;
        }
        let r = &self.rekey;
        let mut due = r.previous_until;
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        };
        if init.rekeying() {
            at(r.next_send);
            at(r.began.map(|b| b + r.config.give_up_after));
        } else if !self.streams.is_empty() {
            // Renewed by age only while in use (as WireGuard): an idle terminal sends nothing,
            // so the gateway can let its session go; the first stream after the idle time
            // starts the rekey at once.
            at(r.session_began.map(|b| b + rekey_age(init, &r.config)));
        }
        due
    }

    /// Terminal: rekeying. Erases the replaced session after the overlap; starts a rekey when
    /// the session is old or has carried enough datagrams; resends its initiation; and tears
    /// the session down if the rekey stays unanswered.
    fn check_rekey(&mut self, now: Instant) {
        let stamp = self.now_stamp(now);
        let in_use = !self.streams.is_empty();
        let Sec::Terminal {
            init,
            gateway,
            local_key,
            gateway_key,
            ..
        } = &mut self.security
        else {
            return;
        };
        if !init.is_established() {
            return;
        }
        let r = &mut self.rekey;
        if r.previous_until.is_some_and(|t| now >= t) {
            init.erase_previous();
            r.previous_until = None;
        }
        if init.rekeying() {
            let began = r.began.unwrap_or(now);
            if now.saturating_duration_since(began) >= r.config.give_up_after {
                tracing::info!(
                    gateway = %gateway,
                    "tunnel: the gateway left a rekey unanswered for {} s; the session is                      torn down for a new handshake (gateway overloaded, or the link lost every                      initiation)",
                    r.config.give_up_after.as_secs()
                );
                self.counts.rekey_failures += 1;
                self.rehandshake(now);
                return;
            }
            if r.next_send.is_none_or(|t| now >= t) {
                // A resend, once each suite's initiation went, is a new initiation with a newer
                // timestamp (see `fail_over_if_unanswered`).
                if r.next_send.is_some() && init.offered_every_suite() {
                    let index = init.index().wrapping_add(2) | 1;
                    let _ = init.rekey(local_key, gateway_key, index, stamp);
                }
                self.control
                    .push_back((*gateway, init.initiation_to_send().to_vec(), false));
                r.next_send = Some(now + HANDSHAKE_RETRY);
            }
            return;
        }
        let age = rekey_age(init, &r.config);
        let old = in_use
            && r.session_began
                .is_some_and(|b| now.saturating_duration_since(b) >= age);
        if !old && init.session_messages() < r.config.after_messages {
            return;
        }
        let index = init.index().wrapping_add(2) | 1;
        if init.rekey(local_key, gateway_key, index, stamp).is_err() {
            return;
        }
        r.began = Some(now);
        r.next_send = Some(now + HANDSHAKE_RETRY);
        self.control
            .push_back((*gateway, init.initiation_to_send().to_vec(), false));
    }

    /// Terminal: a rekey's response arrived; the new session is in use.
    fn on_rekeyed(&mut self, now: Instant) {
        let Sec::Terminal { init, .. } = &mut self.security else {
            return;
        };
        let instance = init.gateway_info().map(|i| i.instance);
        // The gateway seals on the old session until a datagram arrives on the new one; a
        // terminal that only receives (a download: STP acknowledges when polled) might send
        // none before the overlap erases the old session here. A probe moves it at once.
        self.rekey.switch_probe = None;
        self.probe_new_session(now);
        let Sec::Terminal { init, .. } = &mut self.security else {
            return;
        };
        self.counts.rekeys += 1;
        let r = &mut self.rekey;
        r.began = None;
        r.next_send = None;
        r.session_began = Some(now);
        r.previous_until = Some(now + r.config.overlap);
        if instance != self.watch.instance {
            // Another gateway process answered: the old session's gateway is gone.
            init.erase_previous();
            r.previous_until = None;
            self.on_established(now);
        } else {
            self.watch.last_handshake = Some(now);
        }
    }

    /// Terminal: announces our capabilities on the session just established (`docs/tunnel.md`,
    /// "Capabilities"); the gateway answers with its own. Until it does, both ends compute
    /// STP's checksum for each other: [`Self::resend_capabilities`] covers a loss.
    fn send_capabilities(&mut self, now: Instant) {
        self.rekey.capabilities_sent = None;
        self.rekey.capabilities_attempts = 0;
        self.rekey.capabilities_answered = false;
        self.seal_capabilities(now);
    }

    /// Terminal, as the gateway's data arrives on the current session: our capabilities again
    /// if the gateway has not answered them within [`CAPABILITIES_RESEND_INTERVAL`] (ours or its
    /// answer was lost), up to [`CAPABILITIES_ATTEMPTS`] times a session. Driven by arriving
    /// data, not a timer: with no data both ways, no checksum is computed either.
    fn resend_capabilities(&mut self, now: Instant) {
        let r = &self.rekey;
        if r.capabilities_answered
            || r.capabilities_attempts == 0
            || r.capabilities_attempts >= CAPABILITIES_ATTEMPTS
            || r.capabilities_sent
                .is_some_and(|t| now.saturating_duration_since(t) < CAPABILITIES_RESEND_INTERVAL)
        {
            return;
        }
        self.seal_capabilities(now);
    }

    fn seal_capabilities(&mut self, now: Instant) {
        let Sec::Terminal { init, gateway, .. } = &mut self.security else {
            return;
        };
        if self.legacy_tunnel {
            return;
        }
        if let Ok(d) = init.capabilities_datagram() {
            self.control.push_back((*gateway, d, true));
            self.rekey.capabilities_sent = Some(now);
            self.rekey.capabilities_attempts += 1;
        }
    }

    /// Terminal, after a rekey: an empty datagram (a probe) on the new session, so the gateway
    /// seals on it from now on; again while the gateway's datagrams still come on the old one,
    /// at most every [`SWITCH_PROBE_INTERVAL`] (the first may be lost).
    fn probe_new_session(&mut self, now: Instant) {
        let Sec::Terminal { init, gateway, .. } = &mut self.security else {
            return;
        };
        if self
            .rekey
            .switch_probe
            .is_some_and(|t| now.saturating_duration_since(t) < SWITCH_PROBE_INTERVAL)
        {
            return;
        }
        let mut d = Vec::new();
        if init.seal(&[], &mut d).is_ok() {
            self.control.push_back((*gateway, d, false));
            self.rekey.switch_probe = Some(now);
        }
    }

    /// Terminal: replaces the session with a new handshake, sent at once.
    fn rehandshake(&mut self, now: Instant) {
        self.rekey = RekeyState {
            config: self.rekey.config,
            ..RekeyState::default()
        };
        let stamp = self.now_stamp(now);
        if let Sec::Terminal {
            init,
            local_key,
            gateway_key,
            handshakes,
            cipher,
            ..
        } = &mut self.security
        {
            let index = init.index().wrapping_add(2) | 1;
            if let Ok(fresh) = new_initiator(local_key, gateway_key, index, stamp, *cipher) {
                **init = fresh;
                *handshakes += 1;
                self.next_handshake = now;
                self.sent_since_heard = None;
                self.watch.handshake_began = Some(now);
            }
        }
    }

    /// Terminal: the gateway answered a handshake. A gateway of another instance than the last
    /// session's has restarted (or is another one): the connections that reached the old one
    /// are gone there, so they are reset now; opens it never answered are sent again at once.
    fn on_established(&mut self, now: Instant) {
        let Sec::Terminal { init, gateway, .. } = &self.security else {
            return;
        };
        let gateway = *gateway;
        let Some(info) = init.gateway_info() else {
            return;
        };
        let w = &mut self.watch;
        w.clock_offset_ns = Some(
            i128::from(info.clock_ns)
                - i128::from(self.wall_clock_at_zero_ns.wrapping_add(now.as_nanos())),
        );
        w.last_handshake = Some(now);
        self.rekey.session_began = Some(now);
        let took = w
            .handshake_began
            .take()
            .map_or(0, |b| now.saturating_duration_since(b).as_millis());
        let was_down = std::mem::replace(&mut w.down, false);
        let previous = w.instance.replace(info.instance);
        let restarted = previous.is_some_and(|p| p != info.instance);
        let mut reset = 0;
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            let Some(h) = self.streams.get(&id).map(|st| st.handle) else {
                continue;
            };
            let confirmed = self
                .endpoint
                .connection(h)
                .is_some_and(|c| c.is_established());
            if restarted && confirmed {
                if let Some(mut st) = self.remove_stream(id) {
                    if let Some(c) = self.endpoint.connection(st.handle) {
                        c.abort(AbortCode::HopClosed.code());
                    }
                    let _ = st
                        .events
                        .offer(StreamEvent::Failed(StreamError::GatewayRestarted));
                    reset += 1;
                }
                continue;
            }
            if let Some(c) = self.endpoint.connection(h) {
                c.retry_handshake(now);
            }
            self.dirty.insert(id);
        }
        if restarted {
            tracing::info!(
                gateway = %gateway,
                handshake_ms = took,
                reset,
                "tunnel up: the gateway restarted (a new instance); the connections it carried \
                 are reset"
            );
        } else if was_down {
            tracing::info!(gateway = %gateway, handshake_ms = took, "tunnel up again");
        } else {
            tracing::info!(gateway = %gateway, handshake_ms = took, "tunnel up");
        }
    }

    /// Terminal: the gateway says it has no session with our index. Unauthenticated, so only a
    /// hint: a new handshake, at most one per [`HANDSHAKE_RETRY`] for this reason.
    fn on_session_unknown(&mut self, now: Instant) {
        if !self.established()
            || self
                .watch
                .last_notice
                .is_some_and(|t| now.saturating_duration_since(t) < HANDSHAKE_RETRY)
        {
            return;
        }
        self.watch.last_notice = Some(now);
        if let Sec::Terminal { gateway, .. } = &self.security {
            tracing::info!(
                gateway = %gateway,
                "tunnel: the gateway does not know our session (it restarted?); new handshake"
            );
        }
        self.rehandshake(now);
    }

    /// Gateway: tells `to` that it has no session `index` (rate-limited, all terminals
    /// together, to [`NOTICES_PER_SECOND`]). Five bytes, smaller than the datagram that caused
    /// it, so the notice amplifies nothing.
    fn send_notice(&mut self, now: Instant, to: SocketAddr, index: u32) {
        let (start, count) = &mut self.watch.notices;
        if now.saturating_duration_since(*start) >= Duration::from_secs(1) {
            *start = now;
            *count = 0;
        }
        if *count >= NOTICES_PER_SECOND {
            return;
        }
        *count += 1;
        let mut d = Vec::with_capacity(crate::tunnel::wire::UNKNOWN_SESSION_LEN);
        crate::tunnel::wire::emit_header(&mut d, crate::tunnel::wire::TYPE_UNKNOWN_SESSION, index);
        self.control.push_back((to, d, false));
    }

    /// Gateway: logs a refused handshake with its likely cause, once a minute per source.
    fn log_refused_handshake(
        &mut self,
        now: Instant,
        from: SocketAddr,
        e: &crate::tunnel::Error,
        key: Option<PublicKey>,
    ) {
        use crate::tunnel::Error as E;
        if *e == E::OtherSuite {
            // The terminal offered one handshake in each of its suites and the first to arrive
            // was accepted: routine, neither a replay nor an error.
            tracing::debug!(
                source = %from,
                "tunnel handshake offered again in another cipher suite: one offer was accepted, \
                 this one is dropped"
            );
            return;
        }
        let what = match (e, key) {
            (E::AuthFailed, _) => "failed authentication: the terminal's gateway_public_key is \
                                   not this gateway's public key (or it is not a satstp terminal)"
                .to_string(),
            (E::UnknownKey, Some(k)) => format!(
                "from terminal key {k} (fingerprint {}), which is not in allowed_terminals",
                k.fingerprint()
            ),
            (E::Replay(_), _) => {
                "replayed, or older than this terminal key's last handshake from that address \
                 (its clock went back?)"
                    .to_string()
            }
            _ => return,
        };
        let line = format!("tunnel handshake from {from} refused: {what}");
        self.watch.last_error = Some((now, line.clone()));
        if self.handshake_log.allow(from.ip(), now) {
            tracing::info!(source = %from, "{line}");
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
            unanswered_total,
            cipher,
        } = &mut self.security
        else {
            return;
        };
        *unanswered += 1;
        *unanswered_total += 1;
        if gateways.len() < 2 || *unanswered <= FAILOVER_AFTER_HANDSHAKES {
            // A resend is a new initiation with a newer timestamp, not the same bytes: the
            // gateway refuses an initiation older than the last it accepted from this key, and
            // a terminal's workers hold one key each with their own handshakes — one whose
            // initiation reached the gateway after a sibling's newer one would be refused for
            // ever if it repeated itself. (A lost answer leaves the gateway an unconfirmed
            // session, which the next handshake from this address replaces.)
            // Each suite's initiation goes once before the timestamp is renewed.
            if *unanswered > 1 && init.offered_every_suite() {
                let index = init.index().wrapping_add(2) | 1;
                if let Ok(fresh) = new_initiator(local_key, gateway_key, index, stamp, *cipher) {
                    **init = fresh;
                }
            }
            return;
        }
        let next = (*current + 1) % gateways.len();
        let Some(&(addr, key)) = gateways.get(next) else {
            return;
        };
        let index = init.index().wrapping_add(2) | 1;
        let Ok(fresh) = new_initiator(local_key, &key, index, stamp, *cipher) else {
            return;
        };
        let same_gateway = addr == *gateway;
        if same_gateway {
            tracing::warn!(
                gateway = %addr,
                "gateway left {FAILOVER_AFTER_HANDSHAKES} handshakes unanswered; trying its next \
                 key (gateway_public_keys)"
            );
        } else {
            tracing::warn!(
                from = %gateway,
                to = %addr,
                "gateway left {FAILOVER_AFTER_HANDSHAKES} handshakes unanswered; failing over"
            );
        }
        **init = fresh;
        *gateway = addr;
        *gateway_key = key;
        *current = next;
        *unanswered = 1;
        *handshakes += 1;
        self.sent_since_heard = None;
        if same_gateway {
            // The same gateway under another key: its connections live on.
            return;
        }
        // Connections that reached the old gateway cannot move: reset them so their clients
        // see the failure at once rather than at their idle timeout. Connections that have
        // sent nothing yet (opened while no gateway answered) open at the new one.
        self.fail_streams(true, StreamError::FailedOver);
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
        let established = self.established();
        for id in ids {
            self.blocked.remove(&id);
            // A terminal's first piece waits for the session; then its deadline is stamped.
            let stamp = match self.streams.get(&id) {
                Some(s) if s.unstamped && established => Some(self.gateway_deadline_ms(s.deadline)),
                _ => None,
            };
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            if let Some(ms) = stamp {
                if let Some((first, _)) = s.pending.front_mut() {
                    let mut b = first.to_vec();
                    if crate::stream::stamp_deadline(&mut b, ms) {
                        *first = Bytes::from(b);
                    }
                }
                s.unstamped = false;
            }
            let hold_writes = s.unstamped;
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
            while let Some((bytes, token)) = s.pending.front_mut().filter(|_| !hold_writes) {
                match c.write_bytes(bytes) {
                    Ok(n) => {
                        s.accepted += n as u64;
                        if token.is_none() {
                            s.untokened += n as u64;
                        }
                        if n > 0 && s.on_sent.is_some() {
                            self.unsent.insert(id);
                        }
                        if n == bytes.len() {
                            s.pending.pop_front();
                        } else {
                            let rest = bytes.slice(n..);
                            *bytes = rest;
                            break;
                        }
                    }
                    Err(_) => {
                        s.pending.clear();
                        break;
                    }
                }
            }
            if s.pending.is_empty() && s.shutdown_requested && !hold_writes {
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

    /// The next datagram to send, sealed, in `out` (cleared first): handshake datagrams first,
    /// then what the endpoint has to send as far as the send allocation allows (`None`:
    /// nothing more now).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        out.clear();
        self.poll_transmit_append(now, out)
    }

    /// As [`Self::poll_transmit`], appending the datagram to `out` (its last `size` bytes;
    /// `out` is left as it was when there is none). STP builds its datagram right there,
    /// behind room for the tunnel's header, and it is sealed in place: the driver's send batch
    /// takes it without a copy.
    pub(crate) fn poll_transmit_append(
        &mut self,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let start = out.len();
        if let Some((destination, d, counted)) = self.control.pop_front() {
            out.extend_from_slice(&d);
            return Some(Transmit {
                destination,
                size: d.len(),
                counted,
            });
        }
        if !self.established() {
            return None;
        }
        // Room for the tunnel's header before STP's datagram (none in clear).
        let room = match self.security {
            Sec::Clear { .. } => 0,
            Sec::Terminal { .. } | Sec::Gateway { .. } => crate::tunnel::wire::DATA_HEADER_LEN,
        };
        loop {
            if let Some(sh) = &mut self.shaper {
                if !sh.ready(now) {
                    self.counts.shaped += 1;
                    out.truncate(start);
                    return None;
                }
            }
            out.truncate(start);
            out.resize(start + room, 0);
            let Some(t) = self.endpoint.poll_transmit_append(now, out) else {
                out.truncate(start);
                return None;
            };
            let Some(datagram) = out.get(start + room..) else {
                continue;
            };
            // A terminal sends everything to the gateway in use (its endpoint names it by the
            // first gateway's address).
            let destination = match &self.security {
                Sec::Terminal { gateway, .. } => *gateway,
                Sec::Gateway { .. } | Sec::Clear { .. } => t.destination,
            };
            if let Some(tap) = &mut self.tap {
                match self.security {
                    Sec::Clear { .. } => tap(self.local, destination, datagram),
                    _ => show_tunnelled(tap, self.local, destination, datagram),
                }
            }
            // The silence timer runs from the first send the gateway must answer (data, a
            // poll, an open or a close); a STAT answering the gateway's own poll expects
            // nothing back, so an idle connection does not look like a gateway gone silent.
            if matches!(self.security, Sec::Terminal { .. })
                && self.sent_since_heard.is_none()
                && stp::wire::peek_types(datagram).is_some_and(|t| {
                    use stp::wire::Types;
                    [Types::SD, Types::POLL, Types::BGN, Types::END]
                        .into_iter()
                        .any(|a| t.contains(a))
                })
            {
                self.sent_since_heard = Some(now);
            }
            // STP left the checksum out (`emit_checksum`, set in `new`): filled here for a
            // peer that has not said it skips it.
            let ok = match &mut self.security {
                Sec::Terminal { init, .. } => init.seal_stp_in_place(out, start).is_ok(),
                Sec::Gateway { responder } => responder
                    .seal_to_in_place(t.destination, out, start, true)
                    .is_ok(),
                Sec::Clear { .. } => true,
            };
            if !ok {
                continue;
            }
            let size = out.len() - start;
            if let Some(sh) = &mut self.shaper {
                sh.charge(size);
            }
            return Some(Transmit {
                destination,
                size,
                counted: true,
            });
        }
    }

    /// The driver sent `datagrams` counted datagrams of `bytes` in all.
    pub(crate) fn note_sent(&mut self, _now: Instant, datagrams: u64, bytes: u64) {
        self.counts.datagrams_sent += datagrams;
        self.counts.bytes_sent += bytes;
    }

    /// A snapshot of the counters and connections.
    pub(crate) fn status(&mut self) -> HopStatus {
        let mut totals = self.endpoint.stats().closed.clone();
        for h in self.endpoint.handles() {
            if let Some(c) = self.endpoint.connection(h) {
                totals.add(&c.stats());
            }
        }
        let mut streams = Vec::with_capacity(self.streams.len());
        for (&id, s) in &self.streams {
            if let Some(c) = self.endpoint.connection(s.handle) {
                let stats = c.stats();
                streams.push(StreamStatus {
                    id,
                    peer: s.peer,
                    peer_key: s.peer_key,
                    payload_bytes_sent: stats.payload_bytes_sent,
                    payload_bytes_received: stats.payload_bytes_received,
                    stp: Some(stats),
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
        let now = self.last_now;
        let ago = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t));
        let tunnel_report = TunnelReport {
            state: if self.watch.down {
                TunnelState::Down
            } else if self.established() {
                TunnelState::Up
            } else {
                TunnelState::Handshaking
            },
            last_handshake_ago: ago(self.watch.last_handshake),
            last_error: self.watch.last_error.as_ref().map(|(_, e)| e.clone()),
            last_error_ago: ago(self.watch.last_error.as_ref().map(|(t, _)| *t)),
            sessions_by_cipher: match &self.security {
                Sec::Terminal { init, .. } => {
                    let mut n = [0; 2];
                    if let Some(c) = init.cipher() {
                        n[c.index()] = 1;
                    }
                    n
                }
                Sec::Gateway { responder } => responder.sessions_by_cipher(),
                Sec::Clear { .. } => [0; 2],
            },
        };
        HopStatus {
            tunnel_report,
            local: self.local,
            established: self.established(),
            handshakes_started,
            rekeys: match &self.security {
                Sec::Gateway { responder } => responder.counters().rekeys,
                _ => self.counts.rekeys,
            },
            rekey_failures: self.counts.rekey_failures,
            datagrams_sent: self.counts.datagrams_sent,
            bytes_sent: self.counts.bytes_sent,
            datagrams_received: self.counts.datagrams_received,
            bytes_received: self.counts.bytes_received,
            shaped: self.counts.shaped,
            opens_rate_limited: self.counts.opens_rate_limited,
            socket_overflows: 0,
            backpressure_episodes: 0,
            window_ceiling_bytes: None,
            send_rate_bps: self.shaper.as_ref().map(|s| s.rate_bps),
            tunnel,
            stp: Some(StpStatus {
                endpoint: self.endpoint.stats().clone(),
                totals,
            }),
            streams,
        }
    }
}
