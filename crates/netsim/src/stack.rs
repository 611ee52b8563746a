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

/// Sends every datagram `ep` has due at `ctx.now` (to the address each names), marking a
/// datagram as a retransmission when connection `watch`'s retransmitted-packet count grew with
/// it (`None`: no marking, for an endpoint serving many connections). `seen` carries that count
/// from one call to the next (the count only grows when `poll_transmit` emits a retransmission,
/// so the one read after the last datagram is still current: one lookup and statistics copy
/// fewer per event). `each` runs before every datagram is sent.
pub fn send_stp(
    ctx: &mut Ctx<'_>,
    ep: &mut Endpoint,
    buf: &mut Vec<u8>,
    wire: StpWire,
    watch: Option<ConnectionHandle>,
    seen: &mut Option<(ConnectionHandle, u64)>,
    mut each: impl FnMut(&mut Ctx<'_>),
) -> Sent {
    let mut sent = Sent::default();
    let now = Instant::from_nanos(ctx.now);
    let retx = |ep: &mut Endpoint, h: Option<ConnectionHandle>| {
        h.and_then(|h| ep.connection(h))
            .map_or(0, |c| c.stats().retransmitted_packets)
    };
    let mut before = match *seen {
        Some((h, n)) if Some(h) == watch => n,
        _ => retx(ep, watch),
    };
    while let Some(t) = ep.poll_transmit(now, buf) {
        each(ctx);
        let size = t.size as u32 + wire.framing;
        sent.segments += 1;
        sent.bytes += u64::from(size);
        ctx.send(
            wire.port,
            crate::stp_agent::addr_of(t.destination),
            wire.flow,
            wire.direction,
            size,
            Payload::Stp(buf[..t.size].to_vec()),
        );
        let after = retx(ep, watch);
        if after > before {
            before = after;
            ctx.mark_retransmission();
        }
    }
    *seen = watch.map(|h| (h, before));
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
