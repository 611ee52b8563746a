//! The real hop logic (`crate::hop::core`: streams, backpressure, handshakes, the Noise tunnel)
//! of a terminal and a gateway, joined by `memnet`'s [`Wire`] (two `linkmodel::Direction`s under a
//! virtual clock, as `memnet` joins two STP endpoints): no socket, no task, no wall clock.
//! Runs are deterministic (the Noise ephemeral keys differ between runs, their sizes and so
//! every timing do not).
//!
//! - Clean closes reach the far side as an end after every byte, many streams closing at once,
//!   on a lossy link, and while a side drains.
//! - A drain that runs out of time resets what is left with the drain's abort code, the same
//!   way in every run.
//! - An outage shorter than the dead-peer timeout is ridden out byte-exact (the terminal's
//!   re-handshake carries the old connections on); a longer one fails the streams, never ends
//!   them cleanly.
//! - A restarted gateway over GEO: the terminal's probe finds it and the stream the old one
//!   carried fails within a second and two round trips; a stream opened just after the restart
//!   is served within three round trips (notice, handshake, BGN).
//! - A terminal with a connection open and idle keeps its session (no new handshake, no
//!   erasure); with nothing open it sends nothing (no rekey by age), the gateway erases its
//!   session after `SESSION_IDLE_EXPIRY`, and its next stream is served within three round
//!   trips (notice, handshake, BGN).
//! - On a hop sized for its link, a request on a new stream is answered one round trip later,
//!   the answer arriving at the link's rate, and bytes written behind the BGN before anything
//!   came back follow it in order.

use crate::hop::core::{CoreConfig, CoreSecurity, EventSink, HopCore, Offer, StreamId, StreamInfo};
use crate::hop::{AbortCode, StreamError, StreamEvent};
use crate::keys::PrivateKey;
use crate::tunnel::{Responder, ResponderConfig};
use bytes::Bytes;
use linkmodel::{LinkConfig, Loss, Outage};
use memnet::{Side, Wire};
use rand_core::SeedableRng;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use stp::{EndpointConfig, Instant};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
/// Chunks a reader holds before the core must wait for it (as the tokio driver's channel).
const READER_ROOM: usize = 16;

/// A stream's reader: what it received, bounded like the driver's channel; the test's
/// application takes events out as it runs.
#[derive(Clone, Default)]
struct Reader(Rc<RefCell<VecDeque<StreamEvent>>>);

impl EventSink for Reader {
    fn offer(&mut self, ev: StreamEvent) -> Offer {
        let mut q = self.0.borrow_mut();
        if q.len() >= READER_ROOM {
            return Offer::Full(ev);
        }
        q.push_back(ev);
        Offer::Taken
    }
}

/// What a side's application has seen of one stream.
#[derive(Default, Debug)]
struct Received {
    bytes: Vec<u8>,
    finished: bool,
    failed: Option<StreamError>,
}

impl Received {
    fn take(&mut self, r: &Reader) {
        while let Some(ev) = r.0.borrow_mut().pop_front() {
            match ev {
                StreamEvent::Data(b) => {
                    assert!(
                        !self.finished && self.failed.is_none(),
                        "data after the end"
                    );
                    self.bytes.extend_from_slice(&b);
                }
                StreamEvent::Finished => {
                    assert!(self.failed.is_none(), "an end after a failure");
                    self.finished = true;
                }
                StreamEvent::Failed(e) => {
                    assert!(!self.finished, "a failure after a clean end: {e}");
                    self.failed = Some(e);
                }
            }
        }
    }
}

type Core = HopCore<Reader, ()>;

/// A terminal and a gateway over two links, in virtual time.
struct Pair {
    now: u64,
    terminal: Core,
    gateway: Core,
    t_addr: SocketAddr,
    g_addr: SocketAddr,
    /// Terminal (side A) → gateway (side B), and back.
    wire: Wire,
    /// Streams the gateway accepted, in order, with their readers.
    accepted: Vec<(StreamInfo, Reader)>,
    buf: Vec<u8>,
    /// Tunnel capabilities datagrams still to be lost on the way, and those sent (lost or
    /// not): to the gateway, to the terminal.
    lose_capabilities: [u32; 2],
    capabilities_sent: [u32; 2],
}

fn key(b: u8) -> PrivateKey {
    PrivateKey::from_bytes([b; 32])
}

fn endpoint(dead_timeout_ms: u32) -> EndpointConfig {
    EndpointConfig {
        connection: stp::Config {
            dead_timeout_ms,
            ..crate::sizing::hop_stp_defaults(false)
        },
        ..EndpointConfig::default()
    }
}

/// A hop core's configuration in these tests (no injected randomness, the wall clock at
/// 2023-11-14 at time zero).
fn core_config(
    endpoint: EndpointConfig,
    seed: u64,
    send_rate_bps: Option<u64>,
    local: SocketAddr,
) -> CoreConfig {
    CoreConfig {
        endpoint,
        seed,
        rng: None,
        send_rate_bps,
        local,
        wall_clock_at_zero_ns: 1_700_000_000 * S,
    }
}

/// The gateway's side: key 2, serving the terminal's key 1, its handshakes seeded by `seed`.
fn gateway_security(seed: u64) -> CoreSecurity {
    let responder = Responder::new(
        key(2),
        [key(1).public_key().unwrap()],
        ResponderConfig::default(),
        Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(seed)),
    )
    .unwrap();
    CoreSecurity::Gateway {
        responder: Box::new(responder),
    }
}

impl Pair {
    fn new(up: LinkConfig, down: LinkConfig, dead_timeout_ms: u32, seed: u64) -> Pair {
        let e = endpoint(dead_timeout_ms);
        Pair::with_endpoints(up, down, [e.clone(), e], seed)
    }

    /// Both sides sized from the links' rates and `rtt_ms`, as the daemons size their hops
    /// (`crate::sizing`, `crate::stack::StpHop::sized`).
    fn sized(up: LinkConfig, down: LinkConfig, rtt_ms: u32, seed: u64) -> Pair {
        let side = |send: &LinkConfig, recv: &LinkConfig| {
            let link = crate::sizing::HopLink {
                send_rate_bps: send.rate_bps,
                recv_rate_bps: recv.rate_bps,
                rtt_ms,
            };
            EndpointConfig {
                connection: link.stp_config(crate::sizing::hop_stp_defaults(false)),
                ..EndpointConfig::default()
            }
        };
        let endpoints = [side(&up, &down), side(&down, &up)];
        Pair::with_endpoints(up, down, endpoints, seed)
    }

    /// `endpoints`: the terminal's, the gateway's.
    fn with_endpoints(
        up: LinkConfig,
        down: LinkConfig,
        endpoints: [EndpointConfig; 2],
        seed: u64,
    ) -> Pair {
        Pair::with_keys(up, down, endpoints, seed, None)
    }

    /// As `with_endpoints`; `gateway_keys`: the gateway public keys the terminal knows, in
    /// order (default: the gateway's own).
    fn with_keys(
        up: LinkConfig,
        down: LinkConfig,
        endpoints: [EndpointConfig; 2],
        seed: u64,
        gateway_keys: Option<Vec<crate::keys::PublicKey>>,
    ) -> Pair {
        let [t_endpoint, g_endpoint] = endpoints;
        let t_addr: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        let g_addr: SocketAddr = "198.51.100.1:7000".parse().unwrap();
        let tk = key(1);
        let gp = key(2).public_key().unwrap();
        let t0 = Instant::ZERO;
        let terminal = HopCore::new(
            core_config(
                t_endpoint,
                seed.wrapping_mul(3) + 1,
                Some(up.rate_bps * 99 / 100),
                t_addr,
            ),
            CoreSecurity::Terminal {
                local: tk,
                gateways: gateway_keys
                    .unwrap_or_else(|| vec![gp])
                    .into_iter()
                    .map(|k| (g_addr, k))
                    .collect(),
            },
            t0,
        )
        .unwrap();
        let gateway = HopCore::new(
            core_config(
                g_endpoint,
                seed.wrapping_mul(5) + 2,
                Some(down.rate_bps * 99 / 100),
                g_addr,
            ),
            gateway_security(seed),
            t0,
        )
        .unwrap();
        Pair {
            now: 0,
            terminal,
            gateway,
            t_addr,
            g_addr,
            wire: Wire::new(up, down, seed).unwrap(),
            accepted: Vec::new(),
            buf: Vec::new(),
            lose_capabilities: [0, 0],
            capabilities_sent: [0, 0],
        }
    }

    fn instant(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    /// Lets both cores work and puts what they send on the links.
    fn pump(&mut self) {
        let now = self.instant();
        self.terminal.pump(now, &mut |_| None);
        let accepted = &mut self.accepted;
        self.gateway.pump(now, &mut |info| {
            let r = Reader::default();
            accepted.push((info, r.clone()));
            Some(r)
        });
        for to_gateway in [true, false] {
            loop {
                let core = if to_gateway {
                    &mut self.terminal
                } else {
                    &mut self.gateway
                };
                let Some(t) = core.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                // As the daemons' driver: probes and handshakes are not counted sends.
                if t.counted {
                    core.note_sent(now, 1, t.size as u64);
                }
                if self.buf.first() == Some(&crate::tunnel::wire::TYPE_CAPABILITIES) {
                    let way = usize::from(!to_gateway);
                    self.capabilities_sent[way] += 1;
                    if self.lose_capabilities[way] > 0 {
                        self.lose_capabilities[way] -= 1;
                        continue;
                    }
                }
                let from = if to_gateway { Side::A } else { Side::B };
                self.wire.offer(self.now, from, self.buf[..t.size].to_vec());
            }
        }
    }

    /// Advances to the next delivery or deadline (at most `limit`) and handles it.
    fn advance(&mut self, limit: u64) {
        let now = self.instant();
        let mut next = self.wire.next_at();
        for d in [
            self.terminal.poll_timeout(now),
            self.gateway.poll_timeout(now),
        ]
        .into_iter()
        .flatten()
        {
            let d = d.as_nanos().max(self.now);
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        // A reader that had no room is looked at again soon, as the driver does.
        if self.terminal.holding() || self.gateway.holding() {
            next = Some(next.map_or(self.now + MS, |n| n.min(self.now + MS)));
        }
        self.now = next.unwrap_or(limit).min(limit).max(self.now + 1);
        let now = self.instant();
        while let Some((to, mut data)) = self.wire.pop_due(self.now) {
            if to == Side::B {
                self.gateway
                    .handle_datagram_in_place(now, self.t_addr, &mut data);
            } else {
                self.terminal
                    .handle_datagram_in_place(now, self.g_addr, &mut data);
            }
        }
        self.terminal.handle_timeout(now);
        self.gateway.handle_timeout(now);
    }

    /// Runs until `done` or `limit_ns`; `app` acts after every step.
    fn run(&mut self, limit_ns: u64, mut app: impl FnMut(&mut Pair) -> bool) -> bool {
        let mut steps = 0u64;
        loop {
            steps += 1;
            assert!(
                steps < 2_000_000,
                "no end in sight at {} ns: terminal {:?} gateway {:?}",
                self.now,
                self.terminal.poll_timeout(self.instant()),
                self.gateway.poll_timeout(self.instant())
            );
            self.pump();
            if app(self) {
                self.pump();
                return true;
            }
            self.pump();
            if self.now >= limit_ns {
                return false;
            }
            self.advance(limit_ns);
        }
    }

    /// A download asked for now: the terminal opens a stream with `GET` and closes its side,
    /// the gateway answers the first stream it accepts with `body` and closes. Runs until the
    /// reader finished or failed, or `limit_ns`; whether it ended in time and what it saw.
    fn download(&mut self, body: &[u8], limit_ns: u64) -> (bool, Received) {
        let r = Reader::default();
        let now = self.instant();
        let id = self
            .terminal
            .open(now, Bytes::from_static(b"GET"), r.clone())
            .unwrap();
        self.terminal.shutdown(id.id);
        let body = Bytes::copy_from_slice(body);
        let mut seen = Received::default();
        let mut answered = false;
        let done = self.run(limit_ns, |p| {
            if !answered {
                if let Some((info, _)) = p.accepted.first() {
                    p.gateway.write(info.id, body.clone(), None);
                    p.gateway.shutdown(info.id);
                    answered = true;
                }
            }
            seen.take(&r);
            seen.finished || seen.failed.is_some()
        });
        (done, seen)
    }

    /// A new stream asked for now, to a gateway without the terminal's session: served within
    /// three round trips of `rtt` ns (BGN and notice, handshake, BGN and answer) and 100 ms.
    /// How long it took.
    fn served_again(&mut self, rtt: u64) -> u64 {
        let t0 = self.now;
        assert!(self.served(t0 + 20 * S));
        let took = self.now - t0;
        assert!(
            took <= 3 * rtt + 100 * MS,
            "served {} ms after the open (3 RTT = {} ms)",
            took / MS,
            3 * rtt / MS
        );
        took
    }

    /// A new stream asked for now: the gateway answers the next stream it accepts with
    /// `served`. Whether that answer reached the terminal's reader by `limit_ns`.
    fn served(&mut self, limit_ns: u64) -> bool {
        let before = self.accepted.len();
        let r = Reader::default();
        let now = self.instant();
        self.terminal
            .open(now, Bytes::from_static(b"GET"), r.clone())
            .unwrap();
        let mut seen = Received::default();
        let mut answered = false;
        self.run(limit_ns, |p| {
            if !answered && p.accepted.len() > before {
                let id = p.accepted[before].0.id;
                p.gateway.write(id, Bytes::from_static(b"served"), None);
                answered = true;
            }
            seen.take(&r);
            seen.bytes == b"served"
        })
    }
}

/// The byte pattern of stream `i`.
fn pattern(i: u64, n: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A GEO-like hop: `down_bps` down, a tenth of it up, 600 ms round trip, queues of a BDP.
fn geo(down_bps: u64) -> (LinkConfig, LinkConfig) {
    let q = |rate: u64| (rate * 6 / 10 / 8 / 1500).max(16) as u32;
    let mut up = LinkConfig::simple(down_bps / 10, 300 * MS, q(down_bps / 10));
    let mut down = LinkConfig::simple(down_bps, 300 * MS, q(down_bps));
    up.overhead_bytes = 28;
    down.overhead_bytes = 28;
    (up, down)
}

/// The terminal side of an upload: the terminal writes `size` bytes on each of `n` streams and
/// half-closes them all at once (the gateway answers each with its own bytes and a half-close).
struct Transfers {
    ids: Vec<StreamId>,
    t_readers: Vec<Reader>,
    t_seen: Vec<Received>,
    g_seen: HashMap<StreamId, Received>,
    /// Gateway streams answered (written and half-closed).
    answered: Vec<bool>,
    size: usize,
}

impl Transfers {
    fn open(p: &mut Pair, n: usize, size: usize) -> Transfers {
        let mut t = Transfers {
            ids: Vec::new(),
            t_readers: Vec::new(),
            t_seen: Vec::new(),
            g_seen: HashMap::new(),
            answered: Vec::new(),
            size,
        };
        for i in 0..n {
            let r = Reader::default();
            let now = p.instant();
            let info = p
                .terminal
                .open(now, Bytes::from(pattern(i as u64, size)), r.clone())
                .unwrap();
            t.ids.push(info.id);
            t.t_readers.push(r);
            t.t_seen.push(Received::default());
        }
        // Every stream closes at once, its bytes still queued behind the allocation.
        for &id in &t.ids {
            p.terminal.shutdown(id);
        }
        t
    }

    /// Takes what arrived on both sides and answers the gateway's new streams; true once every
    /// stream ended (cleanly or not) both ways.
    fn step(&mut self, p: &mut Pair) -> bool {
        for (r, seen) in self.t_readers.iter().zip(&mut self.t_seen) {
            seen.take(r);
        }
        while self.answered.len() < p.accepted.len() {
            let (info, _) = &p.accepted[self.answered.len()];
            let k = self.answered.len() as u64 + 1000;
            p.gateway
                .write(info.id, Bytes::from(pattern(k, self.size / 2)), None);
            p.gateway.shutdown(info.id);
            self.answered.push(true);
        }
        for (info, r) in &p.accepted {
            self.g_seen.entry(info.id).or_default().take(r);
        }
        let ended = |s: &Received| s.finished || s.failed.is_some();
        self.t_seen.iter().all(ended)
            && self.g_seen.len() == self.ids.len()
            && self.g_seen.values().all(ended)
    }

    /// Every byte arrived, in order, each way, followed by a clean end.
    fn assert_complete(&self, p: &Pair) {
        assert_eq!(p.accepted.len(), self.ids.len());
        for (i, (info, _)) in p.accepted.iter().enumerate() {
            let g = &self.g_seen[&info.id];
            assert!(
                g.failed.is_none(),
                "gateway stream {i} failed: {:?}",
                g.failed
            );
            assert!(g.finished, "gateway stream {i} did not end");
            // Streams reach the gateway in the order their BGNs arrive: match by content.
            assert!(
                (0..self.ids.len()).any(|k| g.bytes == pattern(k as u64, self.size)),
                "gateway stream {i}: {} bytes, not one terminal stream's bytes",
                g.bytes.len()
            );
        }
        for (i, t) in self.t_seen.iter().enumerate() {
            assert!(
                t.failed.is_none(),
                "terminal stream {i} failed: {:?}",
                t.failed
            );
            assert!(t.finished, "terminal stream {i} did not end");
            assert_eq!(t.bytes.len(), self.size / 2, "terminal stream {i}");
        }
    }
}

#[test]
fn many_streams_closing_at_once_end_cleanly_after_every_byte() {
    let (mut up, mut down) = geo(20_000_000);
    up.loss = Loss::Random { p: 0.01 };
    down.loss = Loss::Random { p: 0.01 };
    down.reorder_p = 0.01;
    down.reorder_delay_ns = 5 * MS;
    let mut p = Pair::new(up, down, crate::sizing::HOP_DEAD_TIMEOUT_MS, 11);
    let mut t = Transfers::open(&mut p, 40, 60_000);
    assert!(p.run(120 * S, |p| t.step(p)), "streams still open at 120 s");
    t.assert_complete(&p);
    // The closing handshakes finish too: both hops end up carrying nothing (what a drain waits
    // for before it stops a hop).
    let until = p.now + 60 * S;
    assert!(
        p.run(until, |p| p.terminal.stream_count() == 0
            && p.gateway.stream_count() == 0),
        "streams left after the closes"
    );
    let st = p.gateway.status();
    let stp = st.stp.expect("the STP hop core reports its STP figures");
    assert!(stp.totals.retransmitted_packets > 0, "the loss was felt");
}

/// A drain: no new stream opens; the open ones get until `deadline` to finish; what is left then
/// is reset with [`AbortCode::DrainTimeout`] (as the daemons' drain does through its relays).
fn drain(p: &mut Pair, t: &mut Transfers, deadline: u64) -> bool {
    let finished = p.run(deadline, |p| t.step(p));
    if !finished {
        p.terminal
            .abort_all(AbortCode::DrainTimeout, StreamError::HopClosed);
        let until = p.now + 10 * S;
        p.run(until, |p| t.step(p));
    }
    finished
}

#[test]
fn a_drain_with_time_enough_ends_every_stream_cleanly() {
    let (up, down) = geo(20_000_000);
    let mut p = Pair::new(up, down, crate::sizing::HOP_DEAD_TIMEOUT_MS, 5);
    let mut t = Transfers::open(&mut p, 20, 200_000);
    // The drain starts at once, with every stream's bytes still to cross.
    assert!(drain(&mut p, &mut t, 30 * S), "drain ran out of time");
    t.assert_complete(&p);
}

/// Runs a drain that cannot finish: what each gateway stream received, and when the run ended.
fn short_drain(seed: u64) -> (Vec<(usize, Option<StreamError>, bool)>, u64) {
    let (up, down) = geo(2_000_000);
    let mut p = Pair::new(up, down, crate::sizing::HOP_DEAD_TIMEOUT_MS, seed);
    // 8 × 2 MB up a 200 kb/s uplink: minutes of work, 5 s to do it.
    let mut t = Transfers::open(&mut p, 8, 2_000_000);
    assert!(
        !drain(&mut p, &mut t, 5 * S),
        "an impossible drain finished"
    );
    let mut out: Vec<_> = p
        .accepted
        .iter()
        .map(|(info, _)| {
            let g = &t.g_seen[&info.id];
            (g.bytes.len(), g.failed.clone(), g.finished)
        })
        .collect();
    out.sort_by_key(|o| o.0);
    (out, p.now)
}

#[test]
fn a_drain_out_of_time_resets_with_its_code_the_same_way_every_run() {
    let (first, at) = short_drain(3);
    assert_eq!(first.len(), 8);
    for (bytes, failed, finished) in &first {
        assert!(!finished, "a cut stream ended cleanly after {bytes} bytes");
        assert!(*bytes < 2_000_000);
        let e = failed.as_ref().expect("the cut stream failed");
        assert_eq!(e.abort_code(), Some(AbortCode::DrainTimeout), "{e}");
    }
    let (second, at2) = short_drain(3);
    assert_eq!(first, second, "same seed, same outcome");
    assert_eq!(at, at2);
}

/// A 2 MB download through an outage of `outage_s` at 2 s, with the dead-peer timeout
/// `dead_ms`: what the terminal's reader saw.
fn download_through_outage(outage_s: u64, dead_ms: u32) -> Received {
    let (mut up, mut down) = geo(10_000_000);
    for l in [&mut up, &mut down] {
        l.outages = vec![Outage {
            start_ns: 2 * S,
            duration_ns: outage_s * S,
        }];
    }
    let mut p = Pair::new(up, down, dead_ms, 7);
    let body = pattern(99, 2_000_000);
    let (_, seen) = p.download(&body, (outage_s + 300) * S);
    if seen.finished {
        assert_eq!(seen.bytes, body, "a clean end must follow every byte");
    }
    seen
}

#[test]
fn an_outage_shorter_than_the_dead_timeout_is_ridden_out_byte_exact() {
    let seen = download_through_outage(60, crate::sizing::HOP_DEAD_TIMEOUT_MS);
    assert!(
        seen.finished,
        "download did not complete: {:?}",
        seen.failed
    );
    assert_eq!(seen.bytes.len(), 2_000_000);
}

#[test]
fn an_outage_longer_than_the_dead_timeout_fails_the_stream() {
    let seen = download_through_outage(60, 20_000);
    assert!(
        !seen.finished,
        "a clean end after an outage past the dead timeout"
    );
    let e = seen.failed.expect("the stream failed");
    assert!(
        matches!(e, StreamError::Stp(stp::ConnectionError::TimedOut(_))),
        "{e}"
    );
    assert!(seen.bytes.len() < 2_000_000);
}

/// What one browser request costs on a hop already up (`geo`, 50 Mb/s down, both sides sized
/// from the link as the daemons are): a new stream whose
/// BGN carries the request, a second write right behind it before anything came back (what a
/// fast-open or transparent terminal relays when the client writes after its first bytes
/// left), and the gateway's answer of `size` bytes as soon as the stream arrives. Returns when
/// the answer's first and last bytes reached the terminal (ns after the open) and what the
/// gateway received.
fn request_round(size: usize) -> (u64, u64, Vec<u8>) {
    let (up, down) = geo(50_000_000);
    let mut p = Pair::sized(up, down, 600, 21);
    // The tunnel comes up with a first exchange.
    let mut warm = Transfers::open(&mut p, 1, 1000);
    assert!(p.run(20 * S, |p| warm.step(p)), "warm-up did not finish");
    warm.assert_complete(&p);
    let until = p.now + 2 * S;
    p.run(until, |_| false);

    let t0 = p.now;
    let reader = Reader::default();
    let info = p
        .terminal
        .open(p.instant(), Bytes::from_static(b"GET /a "), reader.clone())
        .unwrap();
    p.terminal
        .write(info.id, Bytes::from_static(b"GET /b"), None);
    let mut seen = Received::default();
    let mut g_seen = Received::default();
    let mut first_byte = None;
    let mut answered = false;
    let done = p.run(t0 + 10 * S, |p| {
        if p.accepted.len() == 2 {
            if !answered {
                let id = p.accepted[1].0.id;
                p.gateway.write(id, Bytes::from(pattern(7, size)), None);
                answered = true;
            }
            g_seen.take(&p.accepted[1].1);
        }
        seen.take(&reader);
        if first_byte.is_none() && !seen.bytes.is_empty() {
            first_byte = Some(p.now - t0);
        }
        seen.bytes.len() == size && g_seen.bytes.len() == 13
    });
    assert!(done, "the answer did not arrive within 10 s");
    assert_eq!(seen.bytes, pattern(7, size));
    (first_byte.unwrap(), p.now - t0, g_seen.bytes)
}

#[test]
fn a_request_on_a_new_stream_costs_one_round_trip_and_its_answer_is_not_paced_out() {
    for size in [30_000usize, 120_000] {
        let (first, last, got) = request_round(size);
        // The bytes written behind the BGN, before anything came back, follow it in order.
        assert_eq!(got, b"GET /a GET /b", "what the gateway received");
        // One round trip (600 ms) and the answer's serialization at 50 Mb/s (with the tunnel's
        // and STP's headers), plus the pacer's bucket of 5 ms and a little: no extra round
        // trip, no pacing over the RTT. (With STP's defaults instead of the sized hop, the
        // 30 kB answer's last byte comes about 1.5 s after the open.)
        let serialization = size as u64 * 8 * S / 50_000_000 * 110 / 100;
        eprintln!(
            "{size} bytes: first byte {:.1} ms, last {:.1} ms after the open (serialization {:.1} ms)",
            first as f64 / MS as f64,
            last as f64 / MS as f64,
            serialization as f64 / MS as f64
        );
        assert!(first < 600 * MS + 5 * MS, "first byte after {first} ns");
        assert!(
            last < 600 * MS + serialization + 10 * MS,
            "last byte after {last} ns"
        );
    }
}

/// A new gateway core in place of `p.gateway` (a restarted process: same key and address, a
/// new instance, no sessions); datagrams in flight to the old one are lost with it.
fn restart_gateway(p: &mut Pair, seed: u64) {
    p.gateway = HopCore::new(
        core_config(
            endpoint(crate::sizing::HOP_DEAD_TIMEOUT_MS),
            seed,
            None,
            p.g_addr,
        ),
        gateway_security(seed),
        p.instant(),
    )
    .unwrap();
    p.accepted.clear();
    p.wire.discard_to(Side::B);
}

#[test]
fn over_geo_a_restarted_gateway_is_found_and_serves_within_two_round_trips_and_a_handshake() {
    let rtt = 600 * MS;
    let (up, down) = geo(10_000_000);
    let mut p = Pair::new(up, down, crate::sizing::HOP_DEAD_TIMEOUT_MS, 11);
    // A stream the first gateway carries (it answers and keeps it open).
    let old = Reader::default();
    p.terminal
        .open(p.instant(), Bytes::from_static(b"GET"), old.clone())
        .unwrap();
    let mut old_seen = Received::default();
    let mut answered = false;
    assert!(p.run(10 * S, |p| {
        if let (false, Some((info, _))) = (answered, p.accepted.first()) {
            p.gateway
                .write(info.id, Bytes::from_static(b"answer"), None);
            answered = true;
        }
        old_seen.take(&old);
        old_seen.bytes == b"answer"
    }));
    // The gateway dies and a new one starts; the terminal has nothing to send.
    restart_gateway(&mut p, 99);
    let back = p.now;
    let mut failed_at = None;
    assert!(p.run(back + 10 * S, |p| {
        old_seen.take(&old);
        if old_seen.failed.is_some() {
            failed_at = Some(p.now - back);
        }
        failed_at.is_some()
    }));
    let failed_at = failed_at.unwrap();
    assert_eq!(old_seen.failed, Some(StreamError::GatewayRestarted));
    assert!(!old_seen.finished);
    // Found by the probe (a second of quiet), then notice and handshake: two round trips.
    assert!(
        failed_at <= crate::hop::core::PROBE_AFTER.as_nanos() as u64 + 2 * rtt + 100 * MS,
        "the old stream failed {} ms after the restart",
        failed_at / MS
    );

    // Again, and this time a new stream opens right after the restart: its BGN gets the
    // notice, the terminal re-handshakes and sends the BGN again at once.
    restart_gateway(&mut p, 123);
    let took = p.served_again(rtt);
    eprintln!(
        "over geo: old stream reset {} ms after the restart; a new one served in {} ms",
        failed_at / MS,
        took / MS
    );
}

/// Rekeying under load: a 20 MB download over a lossy, reordering hop while the terminal
/// rekeys every second or 1500 datagrams. Every byte arrives, in order, the streams never
/// notice (no failure, no new full handshake), and once the overlap has passed the replaced
/// session is gone.
#[test]
fn a_20_mb_download_across_ten_rekeys_on_a_lossy_reordering_hop_is_byte_exact() {
    let link = |rate_bps: u64| {
        let mut l = LinkConfig::simple(rate_bps, 20 * MS, 200);
        l.overhead_bytes = 28;
        l.loss = Loss::Random { p: 0.01 };
        l.reorder_p = 0.02;
        l.reorder_delay_ns = 5 * MS;
        l
    };
    let mut p = Pair::new(link(4_000_000), link(40_000_000), 30_000, 11);
    let overlap = 300 * MS;
    p.terminal.set_rekey(crate::hop::RekeyConfig {
        after: std::time::Duration::from_secs(1),
        after_messages: 1500,
        overlap: std::time::Duration::from_nanos(overlap),
        give_up_after: std::time::Duration::from_secs(10),
    });
    let body = pattern(27, 20_000_000);
    let (done, seen) = p.download(&body, 120 * S);
    assert!(done && seen.finished, "download failed: {:?}", seen.failed);
    assert!(seen.bytes == body, "the body arrived altered");
    let st = p.terminal.status();
    assert!(st.rekeys >= 10, "only {} rekeys", st.rekeys);
    assert_eq!(st.rekey_failures, 0);
    assert_eq!(
        st.handshakes_started, 1,
        "a rekey fell back to a full handshake"
    );
    let g = p.gateway.status();
    assert!(
        g.tunnel.rekeys >= 10,
        "gateway saw {} rekeys",
        g.tunnel.rekeys
    );
    // The replaced session outlives its rekey by the overlap, no longer.
    let end = p.now + 2 * overlap;
    p.run(end, |_| false);
    assert!(
        !p.terminal.previous_session_kept(),
        "the replaced session was kept past the overlap"
    );
}

/// A terminal that knows the gateway under two keys (`gateway_public_keys`, a rotation) whose
/// first the gateway no longer holds: it moves to the second after
/// `FAILOVER_AFTER_HANDSHAKES` unanswered initiations, and a download asked for at the start
/// completes byte-exact.
#[test]
fn a_terminal_with_two_gateway_keys_moves_to_the_one_the_gateway_holds() {
    let (up, down) = geo(10_000_000);
    let e = endpoint(30_000);
    let retired = key(9).public_key().unwrap();
    let current = key(2).public_key().unwrap();
    let mut p = Pair::with_keys(up, down, [e.clone(), e], 5, Some(vec![retired, current]));
    let body = pattern(5, 1_000_000);
    let (done, seen) = p.download(&body, 60 * S);
    assert!(done && seen.finished, "download failed: {:?}", seen.failed);
    assert!(seen.bytes == body);
    let g = p.gateway.status();
    assert!(
        g.tunnel.auth_failures >= 1,
        "the retired key was never tried"
    );
    assert_eq!(g.tunnel.handshakes, 1);
}

/// Unknown-session notices the gateway has had cause to send (datagrams for a session it does
/// not have).
fn unknown_sessions(p: &mut Pair) -> u64 {
    p.gateway.status().tunnel.unknown_session
}

#[test]
fn a_gateway_erases_an_idle_terminals_session_and_the_terminal_is_served_again_in_three_round_trips(
) {
    let rtt = 600 * MS;
    let expiry = crate::hop::core::SESSION_IDLE_EXPIRY.as_nanos() as u64;
    let (up, down) = geo(10_000_000);
    let mut p = Pair::new(up, down, crate::sizing::HOP_DEAD_TIMEOUT_MS, 31);
    let mut first = Transfers::open(&mut p, 2, 10_000);
    assert!(p.run(30 * S, |p| first.step(p)), "the first exchange");
    first.assert_complete(&p);

    // A stream left open and quiet for longer than the expiry keeps its session: STP's polls
    // cross the hop.
    let held = Reader::default();
    let info = p
        .terminal
        .open(p.instant(), Bytes::from_static(b"hold"), held.clone())
        .unwrap();
    // It is not mistaken for a silent gateway either: the terminal's STATs answering the
    // gateway's polls expect no answer, so no new handshake starts (rekeys by age go on).
    let handshakes = p.terminal.status().handshakes_started;
    let until = p.now + expiry + 100 * S;
    p.run(until, |_| false);
    assert_eq!(
        p.terminal.status().handshakes_started,
        handshakes,
        "new handshakes while a stream sat idle"
    );
    let mut held_seen = Received::default();
    held_seen.take(&held);
    assert_eq!(held_seen.failed, None, "the held stream failed");
    assert_eq!(unknown_sessions(&mut p), 0, "a session with a live stream");
    let gid = p.accepted.last().expect("the held stream arrived").0.id;
    p.terminal.shutdown(info.id);
    p.gateway.shutdown(gid);
    let until = p.now + 10 * S;
    p.run(until, |_| false);

    // Now nothing is open and nothing crosses (an idle session is not rekeyed by age: a
    // rekey is a handshake across the satellite for nothing): the gateway erases the session.
    let rekeys = p.terminal.status().rekeys;
    let until = p.now + expiry + 60 * S;
    p.run(until, |_| false);
    assert_eq!(
        p.terminal.status().rekeys,
        rekeys,
        "an idle session was rekeyed"
    );
    assert_eq!(unknown_sessions(&mut p), 0);

    // A new stream: its BGN gets the notice, the terminal re-handshakes and sends it again.
    p.served_again(rtt);
    assert!(
        unknown_sessions(&mut p) >= 1,
        "the gateway still had the session of a terminal idle for longer than {} s",
        expiry / S
    );
}

/// A gateway that accepts ChaCha20-Poly1305 only (as one of an older version): a terminal that
/// prefers AES-256-GCM (it has AES instructions) gets a ChaCha session one retry later, rekeys
/// it once after `UPGRADE_AFTER` of use to try AES-256-GCM again, falls back again, and then
/// keeps that session until `rekey_after_s`. Without AES instructions the terminal offers
/// ChaCha20-Poly1305 alone: one handshake, no early rekey.
#[test]
fn a_terminal_that_fell_back_to_chacha_tries_aes_once_more_then_stays() {
    use crate::tunnel::{Cipher, CipherChoice};
    let link = || LinkConfig::simple(10_000_000, 20 * MS, 200);
    let mut p = Pair::new(link(), link(), 30_000, 5);
    p.gateway
        .set_cipher(CipherChoice::Only(Cipher::ChaCha20Poly1305))
        .unwrap();
    let r = Reader::default();
    let now = p.instant();
    p.terminal
        .open(now, Bytes::from_static(b"GET"), r.clone())
        .unwrap();
    let mut seen = Received::default();
    let mut answered = false;
    assert!(p.run(10 * S, |p| {
        if let (false, Some((info, _))) = (answered, p.accepted.first()) {
            p.gateway.write(info.id, Bytes::from_static(b"hi"), None);
            answered = true;
        }
        seen.take(&r);
        seen.bytes == b"hi"
    }));
    assert_eq!(p.terminal.tunnel_cipher(), Some(Cipher::ChaCha20Poly1305));
    // `/status` and `/metrics` show the suite: the terminal's session, the gateway's.
    let chacha = Cipher::ChaCha20Poly1305.index();
    for (side, st) in [
        ("terminal", p.terminal.status()),
        ("gateway", p.gateway.status()),
    ] {
        let by = st.tunnel_report.sessions_by_cipher;
        assert_eq!(
            (by[chacha], by.iter().sum::<u64>()),
            (1, 1),
            "{side}: {by:?}"
        );
    }
    // The stream stays open (the session is in use) for 40 s.
    let end = p.now + 40 * S;
    p.run(end, |_| false);
    let st = p.terminal.status();
    let aes = Cipher::aes_in_hardware();
    assert_eq!(
        st.rekeys,
        u64::from(aes),
        "one early rekey to try AES-256-GCM again (AES instructions: {aes})"
    );
    assert_eq!(st.rekey_failures, 0);
    assert_eq!(p.terminal.tunnel_cipher(), Some(Cipher::ChaCha20Poly1305));
    assert_eq!(
        p.gateway.status().tunnel.malformed,
        2 * u64::from(aes),
        "the AES initiations of the handshake and of the rekey, dropped"
    );
    seen.take(&r);
    assert!(
        seen.failed.is_none(),
        "the stream failed: {:?}",
        seen.failed
    );
}

/// A 2 MB download over a small GEO hop with one end possibly of the version before tunnel
/// capabilities; the body, and both sides' status after it.
fn download_with_legacy(
    legacy_terminal: bool,
    legacy_gateway: bool,
) -> (Received, super::HopStatus, super::HopStatus) {
    download_losing_capabilities(legacy_terminal, legacy_gateway, [0, 0]).1
}

/// As [`download_with_legacy`], with the first `lose[0]` capabilities datagrams to the gateway
/// and `lose[1]` to the terminal lost; also the pair after it.
fn download_losing_capabilities(
    legacy_terminal: bool,
    legacy_gateway: bool,
    lose: [u32; 2],
) -> (Pair, (Received, super::HopStatus, super::HopStatus)) {
    let (up, down) = geo(20_000_000);
    let mut p = Pair::new(up, down, 30_000, 5);
    p.lose_capabilities = lose;
    // STP leaves the checksum to the tunnel, which fills it where the peer verifies.
    assert!(!p.terminal.stp_emits_checksums() && !p.gateway.stp_emits_checksums());
    if legacy_terminal {
        p.terminal.act_as_legacy_tunnel();
    }
    if legacy_gateway {
        p.gateway.act_as_legacy_tunnel();
    }
    let body = pattern(3, 2_000_000);
    let (done, seen) = p.download(&body, 60 * S);
    assert!(done && seen.finished, "download failed: {:?}", seen.failed);
    assert!(seen.bytes == body, "the body arrived altered");
    let (t, g) = (p.terminal.status(), p.gateway.status());
    (p, (seen, t, g))
}

fn stp_malformed(st: &super::HopStatus) -> u64 {
    st.stp.as_ref().map_or(0, |s| s.endpoint.malformed)
}

/// Two ends of this version exchange capabilities on their session and from then on leave STP's
/// checksum out (the AEAD tag covers every byte): the gateway computes it only for what it sent
/// before the terminal's capabilities arrived, and neither STP endpoint drops a datagram.
#[test]
fn ends_that_both_skip_the_checksum_stop_computing_it_after_one_exchange() {
    let (_, t, g) = download_with_legacy(false, false);
    assert!(
        g.tunnel.data_sealed > 1000,
        "{} sealed",
        g.tunnel.data_sealed
    );
    assert!(
        g.tunnel.stp_checksums_filled <= 2,
        "the gateway computed {} of {} checksums",
        g.tunnel.stp_checksums_filled,
        g.tunnel.data_sealed
    );
    assert!(
        t.tunnel.stp_checksums_filled <= 2,
        "the terminal computed {} of {} checksums",
        t.tunnel.stp_checksums_filled,
        t.tunnel.data_sealed
    );
    assert_eq!((stp_malformed(&t), stp_malformed(&g)), (0, 0));
    assert_eq!((t.tunnel.malformed, g.tunnel.malformed), (0, 0));
}

/// Against a gateway of the version before (no capabilities, every checksum verified) a
/// terminal of this one computes every checksum: the old gateway drops its capabilities
/// datagram as malformed, and not one STP datagram.
#[test]
fn a_terminal_computes_every_checksum_for_an_older_gateway() {
    let (_, t, g) = download_with_legacy(false, true);
    assert!(t.tunnel.data_sealed > 10, "{} sealed", t.tunnel.data_sealed);
    // Every STP datagram; the rest are capabilities, sent again while the older gateway's
    // data came without an answer, and no more than the most a session sends.
    let capabilities = t.tunnel.data_sealed - t.tunnel.stp_checksums_filled;
    assert!(
        (2..=u64::from(super::core::CAPABILITIES_ATTEMPTS)).contains(&capabilities),
        "{capabilities} capabilities datagrams"
    );
    assert_eq!(stp_malformed(&g), 0, "the older gateway refused a datagram");
    assert_eq!(stp_malformed(&t), 0);
}

/// Against a terminal of the version before, a gateway of this one computes every checksum.
#[test]
fn a_gateway_computes_every_checksum_for_an_older_terminal() {
    let (_, t, g) = download_with_legacy(true, false);
    assert!(g.tunnel.data_sealed > 1000);
    assert_eq!(g.tunnel.stp_checksums_filled, g.tunnel.data_sealed);
    assert_eq!(
        stp_malformed(&t),
        0,
        "the older terminal refused a datagram"
    );
    assert_eq!(stp_malformed(&g), 0);
}

/// A lost capabilities datagram, either way, is made good: the terminal sends its own again
/// while the gateway's data comes without the gateway's answer, so both ends stop computing
/// checksums a second or so into the session instead of at the next rekey.
#[test]
fn a_lost_capabilities_datagram_is_sent_again() {
    let (p, (_, _, lossless)) = download_losing_capabilities(false, false, [0, 0]);
    assert_eq!(p.capabilities_sent, [1, 1], "no loss: one each way");
    for lose in [[1, 0], [0, 1]] {
        let (p, (_, t, g)) = download_losing_capabilities(false, false, lose);
        assert_eq!(p.lose_capabilities, [0, 0], "{lose:?}: nothing was lost");
        assert!(
            p.terminal.terminal_peer_skips_stp_checksum(),
            "{lose:?}: the terminal never heard the gateway's capabilities"
        );
        // The terminal sent its capabilities twice: the lost one (or the one whose answer was
        // lost) and one more; the gateway answered each that arrived.
        let answered = if lose[0] == 1 { 1 } else { 2 };
        assert_eq!(p.capabilities_sent, [2, answered], "{lose:?}");
        // The gateway computed checksums for a while (all of them until the second arrived
        // when the first was lost), then stopped well before the download's end.
        if lose[0] == 1 {
            assert!(
                g.tunnel.stp_checksums_filled > lossless.tunnel.stp_checksums_filled + 10,
                "{lose:?}: {} filled",
                g.tunnel.stp_checksums_filled
            );
        }
        assert!(
            g.tunnel.stp_checksums_filled < g.tunnel.data_sealed / 2,
            "{lose:?}: the gateway computed {} of {} checksums",
            g.tunnel.stp_checksums_filled,
            g.tunnel.data_sealed
        );
        assert_eq!((stp_malformed(&t), stp_malformed(&g)), (0, 0));
    }
}
