//! Deterministic in-memory network: two STP endpoints joined by two [`linkmodel::Direction`]s
//! (the link direction the simulator and the emulators run), driven by a virtual clock, plus stream writers and checkers. Used by the engine's
//! end-to-end tests, `satstp demo` and `satstp bench`. Nothing here touches a socket; the same
//! seed gives the same run, bit for bit.

use linkmodel::{Direction, LinkConfig, LinkConfigError};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use stp::{ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};

pub mod sweep;

pub const NS_PER_MS: u64 = 1_000_000;

/// Which endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    A,
    B,
}

/// Decides whether to drop a datagram: (direction a→b?, index in that direction, bytes).
pub type DropFilter = dyn FnMut(bool, u64, &[u8]) -> bool;

/// A datagram as one side sent it.
#[derive(Debug, Clone)]
pub struct Captured {
    pub at_ns: u64,
    pub from: Side,
    pub data: Vec<u8>,
}

impl Captured {
    /// The parsed packet (captures are always well-formed: they come from the engine).
    pub fn packet(&self) -> stp::wire::Packet<'_> {
        stp::wire::Packet::parse(&self.data).expect("engine emitted a malformed datagram")
    }
}

/// A datagram on its way: (arrival time, insertion order, receiving side, bytes). Ties in time
/// are broken by insertion order, so runs are deterministic.
type InFlight = (u64, u64, Side, Vec<u8>);

/// Two link directions between sides A and B under a virtual clock: a datagram put on one is
/// handed to the other side at the arrival time its [`Direction`] decides. What [`Net`] joins
/// two STP endpoints with, and what `pep`'s hop-core test joins two hop cores with.
#[derive(Debug)]
pub struct Wire {
    /// a→b and b→a.
    pub links: [Direction; 2],
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<InFlight>>,
    order: u64,
}

impl Wire {
    /// The two directions, one generator for both seeded with `seed`.
    pub fn new(ab: LinkConfig, ba: LinkConfig, seed: u64) -> Result<Wire, LinkConfigError> {
        Ok(Wire {
            links: [Direction::new(ab)?, Direction::new(ba)?],
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            order: 0,
        })
    }

    /// Puts a datagram from `from` on its direction at `now_ns`; what the direction delivers is
    /// scheduled for the other side.
    pub fn offer(&mut self, now_ns: u64, from: Side, data: Vec<u8>) {
        let (dir, to) = match from {
            Side::A => (0, Side::B),
            Side::B => (1, Side::A),
        };
        let (_, deliveries) = self.links[dir].send(now_ns, data.len(), data, &mut self.rng);
        for d in deliveries {
            self.order += 1;
            self.queue
                .push(Reverse((d.at_ns, self.order, to, d.datagram)));
        }
    }

    /// When the next datagram arrives.
    pub fn next_at(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse((at, ..))| *at)
    }

    /// The next datagram arriving at or before `now_ns`, and the side it arrives at.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(Side, Vec<u8>)> {
        if self.next_at()? > now_ns {
            return None;
        }
        self.queue.pop().map(|Reverse((_, _, to, data))| (to, data))
    }

    /// Drops every datagram on its way to `side` (a restarted host never sees them).
    pub fn discard_to(&mut self, side: Side) {
        let queue = std::mem::take(&mut self.queue);
        self.queue = queue
            .into_iter()
            .filter(|Reverse((_, _, to, _))| *to != side)
            .collect();
    }

    /// The delivery schedule: datagrams on their way as (arrival time, receiving side, bytes),
    /// in the order they will be handed over.
    pub fn schedule(&self) -> Vec<(u64, Side, &[u8])> {
        let mut v: Vec<&InFlight> = self.queue.iter().map(|Reverse(f)| f).collect();
        v.sort_by_key(|f| (f.0, f.1));
        v.into_iter()
            .map(|(at, _, to, data)| (*at, *to, data.as_slice()))
            .collect()
    }
}

/// Two endpoints and the links between them.
pub struct Net {
    pub now: u64,
    pub a: Endpoint,
    pub b: Endpoint,
    pub addr_a: SocketAddr,
    pub addr_b: SocketAddr,
    /// The two link directions.
    pub wire: Wire,
    buf: Vec<u8>,
    /// Datagram bytes each side put on its link (STP bytes plus the link's per-packet overhead).
    pub wire_bytes: [u64; 2],
    /// When set, every datagram put on a link is recorded here (before the link's fate).
    pub capture: Option<Vec<Captured>>,
    /// Optional hook deciding whether to drop a datagram: (direction a→b?, index of the datagram
    /// in that direction, its bytes).
    pub drop_filter: Option<Box<DropFilter>>,
    sent_count: [u64; 2],
}

pub fn ep(config: EndpointConfig, seed: u64) -> Endpoint {
    Endpoint::new(config, Box::new(ChaCha8Rng::seed_from_u64(seed))).expect("valid config")
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("now_ns", &self.now)
            .field("wire_bytes", &self.wire_bytes)
            .finish()
    }
}

impl Net {
    pub fn new(
        cfg_a: EndpointConfig,
        cfg_b: EndpointConfig,
        ab: LinkConfig,
        ba: LinkConfig,
        seed: u64,
    ) -> Net {
        Net {
            now: 0,
            a: ep(cfg_a, seed.wrapping_mul(3) + 1),
            b: ep(cfg_b, seed.wrapping_mul(5) + 2),
            addr_a: "192.0.2.1:7000".parse().unwrap(),
            addr_b: "198.51.100.1:7000".parse().unwrap(),
            wire: Wire::new(ab, ba, seed).expect("valid links"),
            buf: Vec::new(),
            wire_bytes: [0, 0],
            drop_filter: None,
            capture: None,
            sent_count: [0, 0],
        }
    }

    /// The same link both ways.
    pub fn symmetric(cfg: EndpointConfig, link: LinkConfig, seed: u64) -> Net {
        Net::new(cfg.clone(), cfg, link.clone(), link, seed)
    }

    pub fn instant(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    pub fn ep(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Puts a datagram from `from` on its link at the current time.
    pub fn offer(&mut self, from: Side, data: Vec<u8>) {
        self.wire.offer(self.now, from, data);
    }

    /// Moves every datagram both endpoints want to send now onto the links.
    pub fn pump(&mut self) {
        let now = self.instant();
        loop {
            let mut moved = false;
            for side in [Side::A, Side::B] {
                let mut buf = std::mem::take(&mut self.buf);
                let t = self.ep(side).poll_transmit(now, &mut buf);
                if let Some(t) = t {
                    moved = true;
                    let dir = side as usize;
                    let idx = self.sent_count[dir];
                    self.sent_count[dir] += 1;
                    let dropped = match self.drop_filter.as_mut() {
                        Some(f) => f(side == Side::A, idx, &buf[..t.size]),
                        None => false,
                    };
                    if let Some(log) = self.capture.as_mut() {
                        log.push(Captured {
                            at_ns: self.now,
                            from: side,
                            data: buf[..t.size].to_vec(),
                        });
                    }
                    self.wire_bytes[dir] +=
                        (t.size + self.wire.links[dir].config().overhead_bytes as usize) as u64;
                    if !dropped {
                        self.offer(side, buf[..t.size].to_vec());
                    }
                }
                self.buf = buf;
            }
            if !moved {
                break;
            }
        }
    }

    /// The next instant something happens (a delivery or a timer), if any.
    pub fn next_event(&mut self) -> Option<u64> {
        let now = self.instant();
        let mut t = self.wire.next_at();
        for side in [Side::A, Side::B] {
            if let Some(x) = self.ep(side).poll_timeout(now) {
                let x = x.as_nanos().max(self.now);
                t = Some(t.map_or(x, |t: u64| t.min(x)));
            }
        }
        t
    }

    /// Advances the clock to the next event (at most to `limit`), delivering datagrams and firing
    /// timers due then. Returns false when nothing is scheduled before `limit`.
    pub fn advance(&mut self, limit: u64) -> bool {
        let Some(t) = self.next_event() else {
            self.now = limit;
            return false;
        };
        if t > limit {
            self.now = limit;
            return false;
        }
        // Never stand still: a deadline of "now" still moves time by a nanosecond if nothing
        // else could make progress.
        self.now = t.max(self.now);
        let now = self.instant();
        while let Some((to, data)) = self.wire.pop_due(self.now) {
            let from = if to == Side::B {
                self.addr_a
            } else {
                self.addr_b
            };
            self.ep(to).handle_datagram(now, from, &data);
        }
        for side in [Side::A, Side::B] {
            let e = self.ep(side);
            if e.poll_timeout(now).is_some_and(|x| x <= now) {
                e.handle_timeout(now);
            }
        }
        true
    }

    /// Runs `app` and the network until `app` returns true or `limit_ns` passes. Returns whether
    /// the app finished.
    pub fn run(&mut self, limit_ns: u64, mut app: impl FnMut(&mut Net) -> bool) -> bool {
        let mut stuck_at = u64::MAX;
        let mut same_time_steps = 0u32;
        loop {
            self.pump();
            if app(self) {
                self.pump();
                return true;
            }
            self.pump();
            if self.now >= limit_ns {
                return false;
            }
            let before = self.now;
            if !self.advance(limit_ns) {
                return app(self);
            }
            if self.now == before {
                if stuck_at == before {
                    same_time_steps += 1;
                    // A deadline that stays at "now" while nothing is sent is an engine livelock.
                    if same_time_steps > 10_000 {
                        let ta = self.a.poll_timeout(self.instant());
                        let tb = self.b.poll_timeout(self.instant());
                        panic!(
                            "livelock at {} ns: timeouts a={ta:?} b={tb:?}; a={:?} b={:?}",
                            self.now, self.a, self.b
                        );
                    }
                } else {
                    stuck_at = before;
                    same_time_steps = 0;
                }
            }
        }
    }

    /// Drains pending events of one side into a vector.
    pub fn events(&mut self, side: Side) -> Vec<(ConnectionHandle, Event)> {
        let mut v = Vec::new();
        while let Some(e) = self.ep(side).poll_event() {
            v.push(e);
        }
        v
    }
}

/// Deterministic pseudo-random payload generator with a running FNV-1a hash. The bytes depend
/// only on the seed, never on how they are chunked (the generator's words are taken whole into a
/// block and handed out from there), so a writer and a checker may ask for different sizes.
pub struct Stream {
    rng: ChaCha8Rng,
    block: [u8; 64],
    block_used: usize,
    pub total: u64,
    pub done: u64,
    pub hash: u64,
}

impl Stream {
    pub fn new(seed: u64, total: u64) -> Stream {
        Stream {
            rng: ChaCha8Rng::seed_from_u64(seed),
            block: [0; 64],
            block_used: 64,
            total,
            done: 0,
            hash: 0xcbf2_9ce4_8422_2325,
        }
    }

    /// Next chunk of up to `max` bytes (empty at the end).
    pub fn next_chunk(&mut self, max: usize) -> Vec<u8> {
        let n = (self.total - self.done).min(max as u64) as usize;
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            if self.block_used == self.block.len() {
                self.rng.fill_bytes(&mut self.block);
                self.block_used = 0;
            }
            let take = (n - v.len()).min(self.block.len() - self.block_used);
            v.extend_from_slice(&self.block[self.block_used..self.block_used + take]);
            self.block_used += take;
        }
        v
    }

    /// Records `n` bytes of `chunk` as consumed (written or verified).
    pub fn consume(&mut self, chunk: &[u8]) {
        for &b in chunk {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.done += chunk.len() as u64;
    }
}

/// Writes a stream into a connection as space allows, keeping unwritten bytes for later.
pub struct Writer {
    pub stream: Stream,
    pending: Vec<u8>,
    pub finished: bool,
    pub shutdown_when_done: bool,
}

impl Writer {
    pub fn new(seed: u64, total: u64) -> Writer {
        Writer {
            stream: Stream::new(seed, total),
            pending: Vec::new(),
            finished: false,
            shutdown_when_done: true,
        }
    }

    /// Writes as much as fits; shuts down once everything is written. Returns false if the
    /// connection is gone or failed.
    pub fn drive(&mut self, ep: &mut Endpoint, h: ConnectionHandle) -> bool {
        let Some(c) = ep.connection(h) else {
            return false;
        };
        loop {
            if self.pending.is_empty() {
                self.pending = self.stream.next_chunk(64 * 1024);
                if self.pending.is_empty() {
                    if !self.finished && self.shutdown_when_done {
                        c.shutdown();
                    }
                    self.finished = true;
                    return true;
                }
            }
            match c.write(&self.pending) {
                Ok(0) => return true,
                Ok(n) => {
                    let rest = self.pending.split_off(n);
                    self.stream.consume(&self.pending);
                    self.pending = rest;
                }
                Err(_) => return false,
            }
        }
    }
}

/// Reads a connection to its end, hashing what arrives.
pub struct Reader {
    pub bytes: u64,
    pub hash: u64,
    pub eof: bool,
    pub eof_at_ns: Option<u64>,
    buf: Vec<u8>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            bytes: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            eof: false,
            eof_at_ns: None,
            buf: vec![0u8; 65536],
        }
    }
}

impl Reader {
    pub fn drive(&mut self, ep: &mut Endpoint, h: ConnectionHandle, now: u64) {
        let Some(c) = ep.connection(h) else { return };
        loop {
            match c.read(&mut self.buf) {
                Ok(0) => {
                    if !self.eof {
                        self.eof = true;
                        self.eof_at_ns = Some(now);
                    }
                    return;
                }
                Ok(n) => {
                    for &b in &self.buf[..n] {
                        self.hash ^= u64::from(b);
                        self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
                    }
                    self.bytes += n as u64;
                }
                Err(_) => return,
            }
        }
    }
}

/// Per-connection outcome flags gathered from events.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub connected: bool,
    pub closed: bool,
    pub failed: Option<stp::ConnectionError>,
    pub failed_at_ns: Option<u64>,
    pub closed_at_ns: Option<u64>,
}

impl Outcome {
    pub fn absorb(&mut self, events: &[(ConnectionHandle, Event)], now: u64) {
        for (_, e) in events {
            match e {
                Event::Connected => self.connected = true,
                Event::Closed => {
                    self.closed = true;
                    self.closed_at_ns.get_or_insert(now);
                }
                Event::Failed(err) => {
                    self.failed = Some(err.clone());
                    self.failed_at_ns.get_or_insert(now);
                }
                _ => {}
            }
        }
    }
}

/// Reads a connection and checks every byte, in order, against the stream the writer produced
/// (same seed): any corruption, loss, duplication or reordering of stream bytes is caught at the
/// first wrong byte.
pub struct Checker {
    expected: Stream,
    pub bytes: u64,
    pub eof: bool,
    pub mismatch_at: Option<u64>,
    buf: Vec<u8>,
}

impl Checker {
    pub fn new(seed: u64, total: u64) -> Checker {
        Checker {
            expected: Stream::new(seed, total),
            bytes: 0,
            eof: false,
            mismatch_at: None,
            buf: vec![0u8; 32768],
        }
    }

    pub fn drive(&mut self, ep: &mut Endpoint, h: ConnectionHandle) {
        let Some(c) = ep.connection(h) else { return };
        loop {
            match c.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => {
                    let want = self.expected.next_chunk(n);
                    if want.len() != n || want[..] != self.buf[..n] {
                        let first = want
                            .iter()
                            .zip(&self.buf[..n])
                            .position(|(a, b)| a != b)
                            .unwrap_or(want.len());
                        self.mismatch_at.get_or_insert(self.bytes + first as u64);
                    }
                    self.expected.consume(&want);
                    self.bytes += n as u64;
                }
                Err(_) => return,
            }
        }
    }

    pub fn complete(&self, total: u64) -> bool {
        self.eof && self.bytes == total && self.mismatch_at.is_none()
    }
}

/// A bulk transfer in one or both directions over a `Net`, run until both sides close or one fails.
pub struct Bulk {
    pub net: Net,
    pub a_to_b: u64,
    pub b_to_a: u64,
    pub limit_ns: u64,
}

/// What a bulk transfer achieved.
#[derive(Debug)]
pub struct BulkResult {
    /// The network after the run (link counters, endpoints).
    pub net: Net,
    pub done: bool,
    /// Time when the last byte of a→b was read at b.
    pub ab_done_ns: Option<u64>,
    pub ba_done_ns: Option<u64>,
    pub ab_exact: bool,
    pub ba_exact: bool,
    pub a: Outcome,
    pub b: Outcome,
    pub wire_bytes: [u64; 2],
    pub b_stats: Option<stp::ConnectionStats>,
    pub a_stats: Option<stp::ConnectionStats>,
}

impl BulkResult {
    /// Goodput of the a→b transfer in bits per second of application bytes, measured from the
    /// connect call to the moment the receiver read the end of the stream.
    pub fn goodput_bps(&self, bytes: u64) -> Option<f64> {
        let ns = self.ab_done_ns?;
        Some(bytes as f64 * 8.0 / (ns as f64 / 1e9))
    }
}

impl Bulk {
    /// Runs the transfer; `Net::now` is left at the end time.
    pub fn run(self) -> BulkResult {
        let mut owned = self.net;
        let net = &mut owned;
        let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
        let mut hb = None;
        let mut wa = Writer::new(11, self.a_to_b);
        let mut wb = Writer::new(22, self.b_to_a);
        let mut ra = Reader::default();
        let mut rb = Reader::default();
        let (mut oa, mut ob) = (Outcome::default(), Outcome::default());
        let (mut a_stats, mut b_stats) = (None, None);
        let done = net.run(self.limit_ns, |net| {
            let now = net.now;
            wa.drive(&mut net.a, ha);
            if hb.is_none() {
                hb = net.b.accept();
            }
            if let Some(h) = hb {
                wb.drive(&mut net.b, h);
                rb.drive(&mut net.b, h, now);
                if let Some(c) = net.b.connection(h) {
                    b_stats = Some(c.stats());
                }
            }
            ra.drive(&mut net.a, ha, now);
            if let Some(c) = net.a.connection(ha) {
                a_stats = Some(c.stats());
            }
            let ea = net.events(Side::A);
            oa.absorb(&ea, now);
            let eb = net.events(Side::B);
            ob.absorb(&eb, now);
            (oa.closed && ob.closed) || oa.failed.is_some() || ob.failed.is_some()
        });
        let wire_bytes = owned.wire_bytes;
        BulkResult {
            net: owned,
            done,
            ab_done_ns: rb.eof_at_ns,
            ba_done_ns: ra.eof_at_ns,
            ab_exact: rb.eof && rb.bytes == self.a_to_b && rb.hash == wa.stream.hash,
            ba_exact: ra.eof && ra.bytes == self.b_to_a && ra.hash == wb.stream.hash,
            a: oa,
            b: ob,
            wire_bytes,
            a_stats,
            b_stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_bytes_do_not_depend_on_chunking() {
        let mut whole = Stream::new(9, 10_000);
        let all = whole.next_chunk(10_000);
        let mut pieces = Stream::new(9, 10_000);
        let mut got = Vec::new();
        for n in [1usize, 3, 5, 2881, 7, 64, 63, 10_000].iter().cycle() {
            let c = pieces.next_chunk(*n);
            if c.is_empty() {
                break;
            }
            pieces.consume(&c);
            got.extend_from_slice(&c);
        }
        assert_eq!(got, all);
    }
}
