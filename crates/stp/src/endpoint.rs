//! Many connections over one datagram socket: demultiplexing by (peer address, connection id,
//! role), accepting BGNs, stateless answers for unknown or closed connections, and a bounded
//! memory of closed connections so that late packets of an old instance are never taken by a
//! new one.

use crate::config::{Config, ConfigError, EndpointConfig};
use crate::connection::{Connection, Event, Quiet, Role};
use crate::ordered_set::OrderedSet;
use crate::stats::EndpointStats;
use crate::time::Instant;
use crate::wire::{
    EndAck, Header, Packet, Rst, RstReason, Types, WireError, HEADER_LEN, SUPPORTED_VERSIONS,
    VERSION,
};
use rand_core::RngCore;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Identifies a connection within its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub u64);

/// A datagram to send to `destination`: `size` bytes at the start of the caller's buffer
/// ([`Endpoint::poll_transmit`]) or at its end ([`Endpoint::poll_transmit_append`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub destination: SocketAddr,
    pub size: usize,
}

/// Why `connect` failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnectError {
    #[error("connection limit of {0} reached")]
    TooManyConnections(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    remote: SocketAddr,
    conn_id: u32,
    local_is_initiator: bool,
}

#[derive(Debug, Clone, Copy)]
struct ClosedEntry {
    instance: u8,
    peer_final: Option<u32>,
    failed: bool,
    expires: Instant,
}

#[derive(Debug)]
struct Slot {
    conn: Connection,
    key: Key,
    /// This connection's entry in `Endpoint::deadlines`, if it has one.
    deadline: Option<Instant>,
}

/// Hashes [`ConnectionHandle`]s with one multiplication (Fx-style) instead of SipHash. Handles are
/// numbered locally in sequence, so no peer can choose them to collide; the keys a peer does
/// choose (`Key`: its address and connection id) keep the standard, seeded hasher.
#[derive(Debug, Default, Clone, Copy)]
struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by connection handle.
type HandleMap<V> = HashMap<ConnectionHandle, V, BuildHasherDefault<HandleHasher>>;

/// Entries the accept queue keeps room for once drained.
const ACCEPT_QUEUE_KEPT: usize = 16;

/// Entries `handle_timeout`'s list of expired connections keeps room for between calls.
const DUE_KEPT: usize = 16;

/// Most stateless answers queued at once.
const MAX_STATELESS_QUEUE: usize = 1024;

/// A set of STP connections sharing one datagram socket.
pub struct Endpoint {
    config: EndpointConfig,
    /// `config.connection`, shared by every connection (one copy, not one per connection).
    conn_config: Arc<Config>,
    rng: Box<dyn RngCore + Send>,
    /// By handle; a hash map, because a lookup per datagram must not grow with the number of
    /// connections (nothing iterates it but `handles`, which sorts). Slots are boxed: the table
    /// then holds 16-byte entries, so probing it stays within a few cache lines however many
    /// connections there are, its spare capacity costs 16 bytes a bucket instead of a whole
    /// connection, and growing it moves no connection.
    conns: HandleMap<Box<Slot>>,
    by_key: HashMap<Key, ConnectionHandle>,
    /// The last `by_key` hit: consecutive datagrams mostly belong to the same connection, and
    /// comparing keys is cheaper than hashing one with the seeded hasher. Cleared whenever
    /// `by_key` changes.
    recent: Option<(Key, ConnectionHandle)>,
    /// Connections that may have something to send: touched by a datagram, a timer or the
    /// application since they last had nothing to send. Only these are polled.
    active: OrderedSet<ConnectionHandle>,
    /// Connections that may have events for the application.
    eventful: OrderedSet<ConnectionHandle>,
    /// The handle served last by `poll_transmit` (round robin).
    cursor: u64,
    /// Every connection's next deadline, ordered (each also in its slot); recomputed only for
    /// connections in `dirty`.
    deadlines: OrderedSet<(Instant, ConnectionHandle)>,
    /// Connections whose deadline may have changed since it was last computed.
    dirty: OrderedSet<ConnectionHandle>,
    /// What the last `poll_transmit` that found a connection with nothing to send asked on the
    /// way, for the `poll_timeout` that follows (`Connection::poll_timeout_quiet`): one entry
    /// (a driver's send loop ends with the empty poll, then asks for the deadline). Forgotten
    /// whenever that connection is reached otherwise (at every `conns.get_mut` but those two).
    quiet: Option<(ConnectionHandle, Quiet)>,
    /// `handle_timeout`'s list of connections whose deadline passed (empty between calls).
    due: Vec<ConnectionHandle>,
    accept_queue: VecDeque<ConnectionHandle>,
    closed: HashMap<Key, ClosedEntry>,
    closed_order: VecDeque<(Instant, Key)>,
    stateless: VecDeque<(SocketAddr, Vec<u8>)>,
    reset_tokens: f64,
    reset_refill: Instant,
    next_handle: u64,
    /// The most any connection advertises as its receive window ([`Self::set_window_ceiling`];
    /// `u64::MAX`: its buffer's room alone).
    window_ceiling: u64,
    stats: EndpointStats,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("connections", &self.conns.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Endpoint {
    /// An endpoint using `rng` for connection ids, instance numbers and initial sequence numbers.
    pub fn new(config: EndpointConfig, rng: Box<dyn RngCore + Send>) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Endpoint {
            reset_tokens: f64::from(config.stateless_resets_per_s),
            conn_config: Arc::new(config.connection.clone()),
            config,
            rng,
            conns: HandleMap::default(),
            by_key: HashMap::new(),
            recent: None,
            active: OrderedSet::default(),
            eventful: OrderedSet::default(),
            cursor: 0,
            deadlines: OrderedSet::default(),
            dirty: OrderedSet::default(),
            quiet: None,
            due: Vec::new(),
            accept_queue: VecDeque::new(),
            closed: HashMap::new(),
            closed_order: VecDeque::new(),
            stateless: VecDeque::new(),
            reset_refill: Instant::ZERO,
            next_handle: 0,
            window_ceiling: u64::MAX,
            stats: EndpointStats::default(),
        })
    }

    /// The endpoint's configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Counters of datagrams that reached no connection, and of connections already freed.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Number of connections held.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// Handles of every connection held, in creation order.
    pub fn handles(&self) -> Vec<ConnectionHandle> {
        let mut h: Vec<ConnectionHandle> = self.conns.keys().copied().collect();
        h.sort_unstable();
        h
    }

    /// Opens a connection to `remote`. Data written before the BGNAK rides on the BGN and the
    /// following SDs within the initial window (fast start).
    pub fn connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
    ) -> Result<ConnectionHandle, ConnectError> {
        if self.conns.len() >= self.config.max_connections as usize {
            return Err(ConnectError::TooManyConnections(
                self.config.max_connections,
            ));
        }
        let key = loop {
            let id = self.rng.next_u32();
            let key = Key {
                remote,
                conn_id: id,
                local_is_initiator: true,
            };
            if id != 0 && !self.by_key.contains_key(&key) && !self.closed.contains_key(&key) {
                break key;
            }
        };
        let instance = (self.rng.next_u32() & 0x7f) as u8;
        let isn = self.rng.next_u32();
        let conn = Connection::new_initiator(
            now,
            Arc::clone(&self.conn_config),
            key.conn_id,
            instance,
            isn,
        );
        Ok(self.insert(key, conn))
    }

    fn insert(&mut self, key: Key, conn: Connection) -> ConnectionHandle {
        let h = ConnectionHandle(self.next_handle);
        self.next_handle += 1;
        self.recent = None;
        self.by_key.insert(key, h);
        self.conns.insert(
            h,
            Box::new(Slot {
                conn,
                key,
                deadline: None,
            }),
        );
        self.touch(h);
        h
    }

    /// The next connection accepted from a peer's BGN.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        while let Some(h) = self.accept_queue.pop_front() {
            if self.conns.contains_key(&h) {
                return Some(h);
            }
        }
        // Drained: give back what a burst of BGNs grew the queue to.
        self.accept_queue.shrink_to(ACCEPT_QUEUE_KEPT);
        None
    }

    /// The connection behind `handle`, while the endpoint holds it. (The endpoint assumes the
    /// caller may change it, and polls it at the next `poll_transmit`/`poll_event`.)
    pub fn connection(&mut self, handle: ConnectionHandle) -> Option<&mut Connection> {
        let slot = self.conns.get_mut(&handle)?;
        if self.quiet.is_some_and(|(q, _)| q == handle) {
            self.quiet = None;
        }
        self.active.insert(handle);
        self.eventful.insert(handle);
        self.dirty.insert(handle);
        Some(&mut slot.conn)
    }

    /// The connection behind `handle`, for reading only: unlike [`Self::connection`] it does not
    /// mark the connection to be polled again.
    pub fn connection_ref(&self, handle: ConnectionHandle) -> Option<&Connection> {
        self.conns.get(&handle).map(|slot| &slot.conn)
    }

    fn touch(&mut self, h: ConnectionHandle) {
        self.active.insert(h);
        self.eventful.insert(h);
        self.dirty.insert(h);
    }

    /// Records `t` as the deadline of the connection in `slot` (handle `h`).
    fn set_deadline(
        deadlines: &mut OrderedSet<(Instant, ConnectionHandle)>,
        slot: &mut Slot,
        h: ConnectionHandle,
        t: Option<Instant>,
    ) {
        // Unchanged: leave the ordered set alone (with many connections an update walks a deep
        // tree, and a busy connection's next deadline often stays put between datagrams).
        if slot.deadline == t {
            return;
        }
        if let Some(old) = slot.deadline {
            deadlines.remove(&(old, h));
        }
        if let Some(t) = t {
            deadlines.insert((t, h));
        }
        slot.deadline = t;
    }

    /// The peer address of a connection.
    pub fn remote(&self, handle: ConnectionHandle) -> Option<SocketAddr> {
        self.conns.get(&handle).map(|s| s.key.remote)
    }

    /// Processes one received datagram from `remote`. Never panics, whatever the bytes.
    pub fn handle_datagram(&mut self, now: Instant, remote: SocketAddr, data: &[u8]) {
        self.receive(now, remote, data, true);
    }

    /// As [`Self::handle_datagram`] for a datagram a carrier has authenticated byte for byte
    /// (satstp's tunnel: its AEAD tag covers the whole STP datagram): the STP checksum is not
    /// verified (spec §3.3), every other check is.
    pub fn handle_authenticated_datagram(&mut self, now: Instant, remote: SocketAddr, data: &[u8]) {
        self.receive(now, remote, data, false);
    }

    fn receive(&mut self, now: Instant, remote: SocketAddr, data: &[u8], verify_checksum: bool) {
        self.stats.datagrams_received += 1;
        let header = match Packet::peek_header(data) {
            Ok(h) => h,
            Err(WireError::UnsupportedVersion(_)) => {
                self.stats.malformed += 1;
                self.answer_foreign_version(now, remote, data);
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let parsed = if verify_checksum {
            Packet::parse(data)
        } else {
            Packet::parse_authenticated(data)
        };
        let packet = match parsed {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let key = Key {
            remote,
            conn_id: header.conn_id,
            local_is_initiator: !header.from_initiator,
        };
        if let Some(h) = self.lookup(&key) {
            if let Some(slot) = self.conns.get_mut(&h) {
                if self.quiet.is_some_and(|(q, _)| q == h) {
                    self.quiet = None;
                }
                if slot.conn.instance() == header.instance {
                    slot.conn.handle_packet(now, &packet, data.len());
                    self.touch(h);
                    return;
                }
                if header.from_initiator && packet.bgn.is_some() {
                    // The initiator started a new instance: it has forgotten the old one.
                    slot.conn.supersede();
                    self.recent = None;
                    self.by_key.remove(&key);
                    self.touch(h);
                } else {
                    self.stats.wrong_instance += 1;
                    return;
                }
            }
        }
        if let Some(c) = self.closed.get(&key).copied() {
            if c.expires > now && c.instance == header.instance {
                self.stats.late += 1;
                if let (Some(end), Some(fin)) = (packet.end, c.peer_final) {
                    if end.final_seq == fin {
                        let mut ack = Packet::new(reply_header(&header));
                        ack.endak = Some(EndAck { final_seq: fin });
                        self.queue_stateless(now, remote, &ack);
                    }
                } else if c.failed && packet.rst.is_none() {
                    self.reset(now, remote, &header, RstReason::UnknownConnection, 0);
                }
                return;
            }
        }
        match packet.bgn {
            Some(bgn) if header.from_initiator => {
                if bgn.versions & SUPPORTED_VERSIONS == 0 {
                    self.refuse_version(now, remote, &header);
                    return;
                }
                let full = self.conns.len() >= self.config.max_connections as usize
                    || self.accept_queue.len() >= self.config.max_accept_queue as usize;
                if !self.config.accept_incoming || full {
                    self.stats.refused += 1;
                    self.reset(now, remote, &header, RstReason::Refused, 0);
                    return;
                }
                let isn = self.rng.next_u32();
                let mut conn = Connection::new_responder(
                    now,
                    Arc::clone(&self.conn_config),
                    header.conn_id,
                    header.instance,
                    isn,
                    &bgn,
                );
                conn.handle_packet(now, &packet, data.len());
                let h = self.insert(key, conn);
                self.accept_queue.push_back(h);
                self.stats.accepted += 1;
            }
            _ => {
                self.stats.unknown_connection += 1;
                if packet.rst.is_none() {
                    self.reset(now, remote, &header, RstReason::UnknownConnection, 0);
                }
            }
        }
    }

    /// The connection `key` names, if any.
    fn lookup(&mut self, key: &Key) -> Option<ConnectionHandle> {
        if let Some((k, h)) = &self.recent {
            if k == key {
                return Some(*h);
            }
        }
        let h = *self.by_key.get(key)?;
        self.recent = Some((*key, h));
        Some(h)
    }

    /// A BGN in a version we do not speak gets RST(UnsupportedVersion) listing ours. Bytes 4..9 of
    /// the header (connection id, role bit, instance) keep their place in every version.
    fn answer_foreign_version(&mut self, now: Instant, remote: SocketAddr, data: &[u8]) {
        if data.len() < HEADER_LEN {
            return;
        }
        let types = u16::from_be_bytes([data[0], data[1]]) & 0x0fff;
        let from_initiator = data[8] & 0x80 != 0;
        if types & Types::BGN.bits() == 0 || !from_initiator {
            return;
        }
        let header = Header {
            version: VERSION,
            types: Types::BGN,
            from_initiator,
            instance: data[8] & 0x7f,
            conn_id: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
            seq: 0,
        };
        self.refuse_version(now, remote, &header);
    }

    /// Refuses a BGN with RST(UnsupportedVersion) carrying the bitmap of versions we speak.
    fn refuse_version(&mut self, now: Instant, remote: SocketAddr, header: &Header) {
        self.stats.refused += 1;
        self.reset(
            now,
            remote,
            header,
            RstReason::UnsupportedVersion,
            SUPPORTED_VERSIONS,
        );
    }

    fn reset(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        to: &Header,
        reason: RstReason,
        detail: u16,
    ) {
        let mut p = Packet::new(reply_header(to));
        p.rst = Some(Rst { reason, detail });
        self.queue_stateless(now, remote, &p);
    }

    fn queue_stateless(&mut self, now: Instant, remote: SocketAddr, p: &Packet<'_>) {
        let rate = f64::from(self.config.stateless_resets_per_s);
        let dt = now
            .saturating_duration_since(self.reset_refill)
            .as_secs_f64();
        self.reset_refill = self.reset_refill.max(now);
        self.reset_tokens = (self.reset_tokens + dt * rate).min(rate.max(1.0));
        if self.reset_tokens < 1.0 || self.stateless.len() >= MAX_STATELESS_QUEUE {
            self.stats.stateless_suppressed += 1;
            return;
        }
        self.reset_tokens -= 1.0;
        let mut buf = Vec::with_capacity(HEADER_LEN + 8);
        p.emit(&mut buf);
        self.stateless.push_back((remote, buf));
    }

    /// Caps the receive window every connection advertises from now on (`None`: each its
    /// buffer's room, the default). The bytes a sender may have in flight towards this endpoint
    /// are the sum of the windows: a driver whose datagrams wait in one socket buffer keeps that
    /// sum within the buffer with a ceiling of its share, so a receiver that falls behind makes
    /// its senders wait instead of losing what overflows. Only what is advertised changes: an SD
    /// is still taken whenever the buffer has room for it (one already in flight under a larger
    /// window is not lost), and a raised ceiling reaches a sender with the next STAT (a sender
    /// held by the window keeps polling).
    pub fn set_window_ceiling(&mut self, ceiling: Option<u64>) {
        self.window_ceiling = ceiling.unwrap_or(u64::MAX);
    }

    /// The ceiling set by [`Self::set_window_ceiling`].
    pub fn window_ceiling(&self) -> Option<u64> {
        (self.window_ceiling != u64::MAX).then_some(self.window_ceiling)
    }

    /// Writes the next datagram to send into `buf` (which is cleared first). Connections take
    /// turns, so one busy connection cannot starve the others.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        self.poll_transmit_append(now, buf)
    }

    /// As [`Self::poll_transmit`], appending the datagram to `buf` (its `size` bytes at the end;
    /// `buf` is left as it was when nothing is due): a driver builds it where it will leave,
    /// behind room it reserved for an encapsulation header, without copying it again.
    pub fn poll_transmit_append(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((destination, d)) = self.stateless.pop_front() {
            buf.extend_from_slice(&d);
            self.stats.stateless_sent += 1;
            return Some(Transmit {
                destination,
                size: d.len(),
            });
        }
        // Serve active connections round robin, starting after the one served last; one with
        // nothing to send leaves the active set until something touches it again.
        while let Some(h) = self
            .active
            .first_from(ConnectionHandle(self.cursor.wrapping_add(1)))
            .or_else(|| self.active.first())
        {
            self.cursor = h.0;
            let Some(slot) = self.conns.get_mut(&h) else {
                self.active.remove(&h);
                continue;
            };
            let mut quiet = None;
            let sent = slot
                .conn
                .poll_transmit_noting(now, buf, &mut quiet, self.window_ceiling);
            if let Some(q) = quiet {
                self.quiet = Some((h, q));
            } else if self.quiet.is_some_and(|(q, _)| q == h) {
                self.quiet = None;
            }
            let remote = slot.key.remote;
            let drained = sent.is_none() && slot.conn.is_drained();
            self.dirty.insert(h);
            if slot.conn.has_events() {
                self.eventful.insert(h);
            }
            if let Some(size) = sent {
                return Some(Transmit {
                    destination: remote,
                    size,
                });
            }
            self.active.remove(&h);
            if drained {
                self.reap_if_drained(now, h);
            }
        }
        None
    }

    /// The next event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        while let Some(h) = self.eventful.first() {
            if self.quiet.is_some_and(|(q, _)| q == h) {
                self.quiet = None;
            }
            match self.conns.get_mut(&h).map(|s| s.conn.poll_event()) {
                Some(Some(e)) => return Some((h, e)),
                _ => {
                    self.eventful.remove(&h);
                    self.active.insert(h);
                }
            }
        }
        None
    }

    /// The earliest instant at which `handle_timeout` (then `poll_transmit`) is needed.
    pub fn poll_timeout(&mut self, now: Instant) -> Option<Instant> {
        while let Some(h) = self.dirty.pop_first() {
            // A connection no longer held took its deadline with it (`reap_if_drained`).
            let Some(slot) = self.conns.get_mut(&h) else {
                continue;
            };
            let t = match self.quiet.take() {
                Some((qh, q)) if qh == h && q.at() == now => slot.conn.poll_timeout_quiet(now, q),
                Some((qh, _)) if qh == h => slot.conn.poll_timeout(now),
                other => {
                    self.quiet = other;
                    slot.conn.poll_timeout(now)
                }
            };
            Self::set_deadline(&mut self.deadlines, slot, h, t);
        }
        if !self.stateless.is_empty() {
            return Some(now);
        }
        self.deadlines.first().map(|(t, _)| t)
    }

    /// Runs the timers that have expired.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Deadlines are only as fresh as the last `poll_timeout`; bring them up to date first.
        self.poll_timeout(now);
        // The handles due, in a vector kept between calls (no allocation per timer).
        let mut due = std::mem::take(&mut self.due);
        while let Some((t, h)) = self.deadlines.first() {
            if t > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(slot) = self.conns.get_mut(&h) {
                if self.quiet.is_some_and(|(q, _)| q == h) {
                    self.quiet = None;
                }
                slot.deadline = None;
                slot.conn.handle_timeout(now);
                due.push(h);
            }
        }
        for &h in &due {
            self.touch(h);
            self.reap_if_drained(now, h);
        }
        due.clear();
        // A burst of many expiries does not leave a large vector behind.
        due.shrink_to(DUE_KEPT);
        self.due = due;
        self.expire_closed(now);
    }

    /// Drops a connection that is over and fully drained, remembering it as closed.
    fn reap_if_drained(&mut self, now: Instant, h: ConnectionHandle) {
        if !self.conns.get(&h).is_some_and(|s| s.conn.is_drained()) {
            return;
        }
        let Some(slot) = self.conns.remove(&h) else {
            return;
        };
        if self.by_key.get(&slot.key) == Some(&h) {
            self.recent = None;
            self.by_key.remove(&slot.key);
        }
        self.active.remove(&h);
        self.eventful.remove(&h);
        self.dirty.remove(&h);
        if let Some(t) = slot.deadline {
            self.deadlines.remove(&(t, h));
        }
        self.stats.closed.add(&slot.conn.stats());
        self.remember_closed(now, slot.key, &slot.conn);
        self.expire_closed(now);
    }

    fn expire_closed(&mut self, now: Instant) {
        while let Some(&(exp, key)) = self.closed_order.front() {
            if exp > now && self.closed_order.len() <= self.config.max_closed_entries as usize {
                break;
            }
            self.closed_order.pop_front();
            if self.closed.get(&key).is_some_and(|c| c.expires == exp) {
                self.closed.remove(&key);
            }
        }
    }

    fn remember_closed(&mut self, now: Instant, key: Key, conn: &Connection) {
        let expires = now + Duration::from_millis(u64::from(self.config.closed_retention_ms));
        self.closed.insert(
            key,
            ClosedEntry {
                instance: conn.instance(),
                peer_final: conn.peer_final_wire(),
                failed: conn.error().is_some(),
                expires,
            },
        );
        self.closed_order.push_back((expires, key));
    }

    /// Whether a connection was opened by this endpoint.
    pub fn is_initiator(&self, handle: ConnectionHandle) -> Option<bool> {
        self.conns
            .get(&handle)
            .map(|s| s.conn.role() == Role::Initiator)
    }
}

fn reply_header(to: &Header) -> Header {
    Header {
        version: VERSION,
        types: Types::empty(),
        from_initiator: !to.from_initiator,
        instance: to.instance,
        conn_id: to.conn_id,
        seq: 0,
    }
}
