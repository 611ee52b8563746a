//! The simulator's socket layer: what every application agent needs to drive a transport
//! connection on a node — send what the connection has due, mark retransmissions on the wire,
//! let its timers fire, and ask the simulator for the next wake-up — in one place, for the TCP
//! model ([`TcpConnection`]) and the real STP engine ([`stp::Endpoint`]). Applications (bulk
//! senders and sinks, striping, the web and HTTP agents, the split gateway) only write into and
//! read from their connections and then call this layer.
//!
//! The routine is the one each agent used to carry: per event, every segment or datagram due now
//! is sent (at most [`MAX_SEGMENTS_PER_EVENT`] TCP segments per connection, the rest at a timer
//! for the same instant, so a runaway window cannot stall the event loop), a packet the
//! transport sent again is marked as a retransmission on the wire ([`Ctx::mark_retransmission`]),
//! and one timer is set for the earliest deadline ([`Wakeups`] for agents that drive several
//! connections with token 0, [`Deadline`] for agents whose token is the deadline itself).

use crate::packet::{Addr, Direction, FlowId, Payload};
use crate::sim::{Ctx, Time};
use crate::tcp::TcpConnection;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use stp::{ConnectionHandle, Endpoint, Instant};

/// TCP segments one connection may send per event; more are sent at a timer set for the same
/// instant, so a runaway window cannot stall the event loop.
pub const MAX_SEGMENTS_PER_EVENT: usize = 4096;
/// Pending wake-up times a [`Wakeups`] keeps (only the earliest matters; later ones are
/// re-derived).
const MAX_WAKEUPS: usize = 64;

/// Where a connection's packets go: the agent's port, the peer, the flow they count to and
/// their direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub port: u16,
    pub peer: Addr,
    pub flow: FlowId,
    pub direction: Direction,
}

/// What [`send_tcp`] or [`send_stp`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sent {
    /// Segments or datagrams sent.
    pub segments: usize,
    /// Their bytes on the wire.
    pub bytes: u64,
    /// It stopped at [`MAX_SEGMENTS_PER_EVENT`]: more are due now.
    pub more: bool,
}

/// Sends every segment `conn` has due at `ctx.now` along `route`, each one the connection sent
/// again marked as a retransmission, at most [`MAX_SEGMENTS_PER_EVENT`]. `each` runs after every
/// segment sent (metrics: the first packet, cwnd samples).
pub fn send_tcp(
    ctx: &mut Ctx<'_>,
    conn: &mut TcpConnection,
    route: Route,
    mut each: impl FnMut(&mut Ctx<'_>, &TcpConnection),
) -> Sent {
    let now = ctx.now;
    let mut sent = Sent::default();
    let mut retx = conn.retransmissions();
    while let Some(seg) = conn.poll_segment(now) {
        let size = seg.wire_size();
        sent.bytes += u64::from(size);
        ctx.send(
            route.port,
            route.peer,
            route.flow,
            route.direction,
            size,
            Payload::Tcp(seg),
        );
        if conn.retransmissions() > retx {
            retx = conn.retransmissions();
            ctx.mark_retransmission();
        }
        each(ctx, conn);
        sent.segments += 1;
        if sent.segments >= MAX_SEGMENTS_PER_EVENT {
            sent.more = true;
            break;
        }
    }
    sent
}

/// Lets `conn`'s timer act if its deadline passed.
pub fn tcp_timer(conn: &mut TcpConnection, now: Time) {
    if conn.poll_timeout().is_some_and(|t| t <= now) {
        conn.on_timeout(now);
    }
}

/// The earlier of two optional deadlines.
pub fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// An agent's pending wake-ups (timers with token 0, which cannot be cancelled): a timer is set
/// only for a deadline earlier than every one pending, so one wake-up serves all the agent's
/// connections.
#[derive(Debug, Default)]
pub struct Wakeups {
    pending: BTreeSet<Time>,
}

impl Wakeups {
    /// Asks for a wake-up at `next` (a deadline, or `now` when more is due) unless one at or
    /// before it is pending.
    pub fn arm(&mut self, ctx: &mut Ctx<'_>, next: Option<Time>) {
        let Some(t) = next else { return };
        if self.pending.first().is_none_or(|&w| w > t) {
            ctx.timer_at(t, 0);
            self.pending.insert(t);
            if self.pending.len() > MAX_WAKEUPS {
                self.pending.pop_last();
            }
        }
    }

    /// A wake-up fired at `now`: forgets those due.
    pub fn fired(&mut self, now: Time) {
        while self.pending.first().is_some_and(|&w| w <= now) {
            self.pending.pop_first();
        }
    }
}

/// One armed timer whose token is its own deadline: a timer firing with another token is stale.
#[derive(Debug, Default, Clone, Copy)]
pub struct Deadline {
    armed: Option<Time>,
}

impl Deadline {
    /// Asks for a wake-up at `at` (not before now) unless one at or before it is armed and not
    /// yet past.
    pub fn arm(&mut self, ctx: &mut Ctx<'_>, at: Option<Time>) {
        let Some(at) = at else { return };
        let at = at.max(ctx.now);
        if self.armed.is_none_or(|a| at < a || a < ctx.now) {
            self.armed = Some(at);
            ctx.timer_at(at, at);
        }
    }

    /// Whether a timer with `token` is the armed one; if so it is disarmed.
    pub fn fired(&mut self, token: u64) -> bool {
        if self.armed != Some(token) {
            return false;
        }
        self.armed = None;
        true
    }
}

/// How an STP endpoint's datagrams go out: the agent's port, the flow and direction they count
/// to, and the bytes of headers below STP on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StpWire {
    pub port: u16,
    pub flow: FlowId,
    pub direction: Direction,
    pub framing: u32,
}

/// Something that emits STP datagrams: the engine's endpoint, or `pep`'s hop core around one.
pub trait Datagrams {
    /// The next datagram due at `now`, in `buf`: its destination and size (`None`: nothing
    /// more now).
    fn poll_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(SocketAddr, usize)>;
}

impl Datagrams for Endpoint {
    fn poll_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(SocketAddr, usize)> {
        self.poll_transmit(now, buf)
            .map(|t| (t.destination, t.size))
    }
}

/// Sends every datagram `src` has due at `ctx.now` (to the address each names), marking one as a
/// retransmission when `retransmitted(src)` (a count of retransmitted packets, `before` before
/// the first) grew with it. `each` runs before every datagram is sent. Returns what was sent
/// and the count after the last datagram.
pub fn send_datagrams<D: Datagrams>(
    ctx: &mut Ctx<'_>,
    src: &mut D,
    buf: &mut Vec<u8>,
    wire: StpWire,
    mut before: u64,
    mut retransmitted: impl FnMut(&mut D) -> u64,
    mut each: impl FnMut(&mut Ctx<'_>),
) -> (Sent, u64) {
    let now = Instant::from_nanos(ctx.now);
    let mut sent = Sent::default();
    while let Some((destination, len)) = src.poll_datagram(now, buf) {
        each(ctx);
        let size = len as u32 + wire.framing;
        sent.segments += 1;
        sent.bytes += u64::from(size);
        // The datagram leaves in the buffer it was built in, without a copy; the next is built
        // in one a receiver gave back.
        let fresh = ctx.datagram_buffer();
        let mut bytes = std::mem::replace(buf, fresh);
        bytes.truncate(len);
        ctx.send(
            wire.port,
            crate::stp_agent::addr_of(destination),
            wire.flow,
            wire.direction,
            size,
            Payload::Stp(bytes),
        );
        let after = retransmitted(src);
        if after > before {
            before = after;
            ctx.mark_retransmission();
        }
    }
    (sent, before)
}

/// [`send_datagrams`] for an STP endpoint, watching connection `watch`'s retransmitted-packet
/// count (`None`: no marking, for an endpoint serving many connections). `seen` carries that
/// count from one call to the next (the count only grows when `poll_transmit` emits a
/// retransmission, so the one read after the last datagram is still current: one lookup and
/// statistics copy fewer per event).
pub fn send_stp(
    ctx: &mut Ctx<'_>,
    ep: &mut Endpoint,
    buf: &mut Vec<u8>,
    wire: StpWire,
    watch: Option<ConnectionHandle>,
    seen: &mut Option<(ConnectionHandle, u64)>,
    each: impl FnMut(&mut Ctx<'_>),
) -> Sent {
    // Read only: `Endpoint::connection` would mark the connection to be polled again, and the
    // whole statistics would be built and copied, after every datagram.
    let count = |ep: &mut Endpoint| {
        watch
            .and_then(|h| ep.connection_ref(h))
            .map_or(0, stp::Connection::retransmitted_packets)
    };
    let before = match *seen {
        Some((h, n)) if Some(h) == watch => n,
        _ => count(ep),
    };
    let (sent, last) = send_datagrams(ctx, ep, buf, wire, before, count, each);
    *seen = watch.map(|h| (h, last));
    sent
}

/// The endpoint's next deadline in simulator time.
pub fn stp_deadline(ep: &mut Endpoint, now: Time) -> Option<Time> {
    ep.poll_timeout(Instant::from_nanos(now))
        .map(|d| d.as_nanos())
}

/// A TCP sender's counters as last reported to the flow's metrics: [`report`](Self::report)
/// adds what grew since (retransmitted segments, timeouts, fast recoveries).
#[derive(Debug, Default, Clone, Copy)]
pub struct Reported {
    retransmissions: u64,
    timeouts: u64,
    recoveries: u64,
}

impl Reported {
    /// Reports the growth of the counters (totals over the flow's connections) to `flow`.
    pub fn report(
        &mut self,
        ctx: &mut Ctx<'_>,
        flow: FlowId,
        retransmissions: u64,
        timeouts: u64,
        recoveries: u64,
    ) {
        if retransmissions > self.retransmissions {
            ctx.metrics
                .retransmitted(flow, retransmissions - self.retransmissions);
            self.retransmissions = retransmissions;
        }
        while self.timeouts < timeouts {
            ctx.metrics.timeout(flow);
            self.timeouts += 1;
        }
        if recoveries > self.recoveries {
            ctx.metrics
                .fast_recoveries(flow, recoveries - self.recoveries);
            self.recoveries = recoveries;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::packet::{LinkId, NodeId, Packet};
    use crate::sim::{Agent, Sim, MS, SEC};
    use crate::tcp::{TcpAgent, TcpConfig};
    use linkmodel::LinkConfig;
    use std::any::Any;

    /// Two nodes joined by 2 Mb/s, 100 ms links whose queues never overflow, the forward one
    /// losing packets at random with probability `p`: the sending node, the receiving end's
    /// address (port 2000) and the forward link.
    pub(crate) fn lossy_forward_path(seed: u64, p: f64) -> (Sim, NodeId, Addr, LinkId) {
        let mut sim = Sim::new(seed);
        let a = sim.add_node("a");
        let b = sim.add_node("b");
        let mut fwd = LinkConfig::simple(2_000_000, 100 * MS, 100_000);
        fwd.loss = linkmodel::Loss::Random { p };
        let ab = sim.add_link("a->b", a, b, fwd).unwrap();
        sim.add_link(
            "b->a",
            b,
            a,
            LinkConfig::simple(2_000_000, 100 * MS, 100_000),
        )
        .unwrap();
        sim.compute_routes();
        let peer = Addr {
            node: b,
            port: 2000,
        };
        (sim, a, peer, ab)
    }

    /// Arms the given deadlines at start through a [`Wakeups`] and records when it wakes.
    struct Sleeper {
        deadlines: Vec<Time>,
        wakeups: Wakeups,
        woke: Vec<Time>,
    }

    impl Agent for Sleeper {
        fn start(&mut self, ctx: &mut Ctx<'_>) {
            for &d in &self.deadlines {
                self.wakeups.arm(ctx, Some(d));
            }
        }
        fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
        fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
            assert_eq!(token, 0);
            self.wakeups.fired(ctx.now);
            self.woke.push(ctx.now);
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// One timer per deadline earlier than every pending one: later or equal deadlines are
    /// served by the wake-up already pending (the agent re-derives them when it wakes).
    #[test]
    fn wakeups_set_a_timer_only_for_an_earlier_deadline() {
        let mut sim = Sim::new(1);
        let n = sim.add_node("n");
        let sleeper = Sleeper {
            deadlines: vec![50 * MS, 80 * MS, 30 * MS, 30 * MS, 100 * MS],
            wakeups: Wakeups::default(),
            woke: Vec::new(),
        };
        let id = sim.add_agent(n, 1, 0, Box::new(sleeper)).unwrap();
        sim.run_until(SEC);
        let s = sim.agent_as::<Sleeper>(id).unwrap();
        assert_eq!(s.woke, vec![30 * MS, 50 * MS]);
        assert!(s.wakeups.pending.is_empty());
    }

    /// Arms a [`Deadline`] twice, earlier the second time, and records which timers count.
    struct Alarm {
        timer: Deadline,
        rang: Vec<Time>,
        stale: usize,
    }

    impl Agent for Alarm {
        fn start(&mut self, ctx: &mut Ctx<'_>) {
            self.timer.arm(ctx, Some(100 * MS));
            self.timer.arm(ctx, Some(40 * MS));
            // Later than the armed one: no new timer.
            self.timer.arm(ctx, Some(70 * MS));
        }
        fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
        fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
            if self.timer.fired(token) {
                self.rang.push(ctx.now);
            } else {
                self.stale += 1;
            }
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn a_deadline_timer_superseded_by_an_earlier_one_is_stale() {
        let mut sim = Sim::new(1);
        let n = sim.add_node("n");
        let alarm = Alarm {
            timer: Deadline::default(),
            rang: Vec::new(),
            stale: 0,
        };
        let id = sim.add_agent(n, 1, 0, Box::new(alarm)).unwrap();
        sim.run_until(SEC);
        let a = sim.agent_as::<Alarm>(id).unwrap();
        assert_eq!(a.rang, vec![40 * MS]);
        assert_eq!(a.stale, 1, "the 100 ms timer fires but no longer counts");
    }

    /// Every TCP segment the model retransmits, and only those, is marked on the wire: over a
    /// lossy link whose queue never overflows, the forward link's packets beyond its original
    /// ones are the sender's retransmitted segments.
    #[test]
    fn tcp_retransmissions_are_marked_on_the_link_one_for_one() {
        let (mut sim, a, peer, ab) = lossy_forward_path(5, 0.02);
        let flow = FlowId(1);
        let cfg = TcpConfig::default();
        let sender = TcpAgent::bulk_sender(flow, 1000, peer, Some(2_000_000), cfg.clone()).unwrap();
        let id = sim.add_agent(a, 1000, 0, Box::new(sender)).unwrap();
        let sink = TcpAgent::sink(2000, cfg).unwrap();
        sim.add_agent(peer.node, 2000, 0, Box::new(sink)).unwrap();
        sim.run_until(300 * SEC);
        sim.finish();
        assert_eq!(sim.metrics.flows[&flow].delivered_bytes, 2_000_000);
        let retransmitted = sim
            .agent_as::<TcpAgent>(id)
            .and_then(|s| s.connection())
            .map(|c| c.stats().retransmitted_segments)
            .unwrap();
        let link = &sim.metrics.links[&ab];
        assert!(retransmitted > 10, "{retransmitted}");
        assert_eq!(
            link.transmitted.packets - link.original.packets,
            retransmitted
        );
        assert_eq!(
            sim.metrics.flows[&flow].retransmitted_packets,
            retransmitted
        );
    }
}
