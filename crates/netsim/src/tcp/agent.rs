//! A simulator agent that drives [`TcpConnection`]s: a bulk sender that connects to a peer and
//! sends N bytes (or, persistent, without end), or a sink that accepts connections and reads
//! everything. It reports the flow's metrics: the sender `started`, `retransmitted`, `timeout`
//! and a `sample` of cwnd and highest sequence per segment sent; the sink `delivered` and
//! `completed` (all bytes and the FIN received).

use super::config::{TcpConfig, TcpConfigError};
use super::connection::TcpConnection;
use crate::packet::{Addr, Direction, FlowId, Packet, Payload};
use crate::sim::{Agent, Ctx};
use crate::stack::{earliest, send_tcp, tcp_timer, Reported, Route, Wakeups};
use std::any::Any;
use std::collections::BTreeMap;

/// Connections a sink keeps; SYNs beyond are ignored.
const MAX_SINK_CONNECTIONS: usize = 4096;

/// What a [`TcpAgent`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpRole {
    Sender,
    Sink,
}

#[derive(Debug)]
struct SenderSide {
    flow: FlowId,
    peer: Addr,
    /// Bytes still to offer the connection; `None` for a persistent transfer.
    to_write: Option<u64>,
    conn: Option<TcpConnection>,
    started: bool,
    reported: Reported,
}

#[derive(Debug)]
struct Accepted {
    flow: FlowId,
    conn: TcpConnection,
    completed: bool,
}

#[derive(Debug)]
enum Side {
    Sender(Box<SenderSide>),
    Sink(BTreeMap<Addr, Accepted>),
}

/// A TCP endpoint on a simulator node.
#[derive(Debug)]
pub struct TcpAgent {
    port: u16,
    config: TcpConfig,
    side: Side,
    wakeups: Wakeups,
}

impl TcpAgent {
    /// A sender on `port` that connects to `peer` and sends `bytes` (or, with `None`, keeps
    /// sending), then closes.
    pub fn bulk_sender(
        flow: FlowId,
        port: u16,
        peer: Addr,
        bytes: Option<u64>,
        config: TcpConfig,
    ) -> Result<Self, TcpConfigError> {
        config.validate()?;
        Ok(TcpAgent {
            port,
            config,
            side: Side::Sender(Box::new(SenderSide {
                flow,
                peer,
                to_write: bytes,
                conn: None,
                started: false,
                reported: Reported::default(),
            })),
            wakeups: Wakeups::default(),
        })
    }

    /// A sink on `port` that accepts connections, reads everything, and closes its side once the
    /// peer finished. Its metrics go to the flow of the packets that opened each connection.
    pub fn sink(port: u16, config: TcpConfig) -> Result<Self, TcpConfigError> {
        config.validate()?;
        Ok(TcpAgent {
            port,
            config,
            side: Side::Sink(BTreeMap::new()),
            wakeups: Wakeups::default(),
        })
    }

    pub fn role(&self) -> TcpRole {
        match self.side {
            Side::Sender(_) => TcpRole::Sender,
            Side::Sink(_) => TcpRole::Sink,
        }
    }

    /// The sender's connection (after the agent started).
    pub fn connection(&self) -> Option<&TcpConnection> {
        match &self.side {
            Side::Sender(s) => s.conn.as_ref(),
            Side::Sink(_) => None,
        }
    }

    /// The sink's connections, by peer address.
    pub fn accepted(&self) -> Vec<(Addr, FlowId, &TcpConnection)> {
        match &self.side {
            Side::Sender(_) => Vec::new(),
            Side::Sink(m) => m.iter().map(|(a, c)| (*a, c.flow, &c.conn)).collect(),
        }
    }

    /// The application's part (write what is left, read everything, close when done), then the
    /// stack's: send what the connections emit, report the sender's counters, set the next timer.
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let port = self.port;
        let mut more = false;
        let mut next = None;
        match &mut self.side {
            Side::Sender(s) => {
                let Some(conn) = s.conn.as_mut() else { return };
                match s.to_write.as_mut() {
                    Some(left) => {
                        if *left > 0 {
                            *left -= conn.write(*left);
                        }
                        if *left == 0 {
                            conn.close();
                        }
                    }
                    None => {
                        conn.write(u64::MAX);
                    }
                }
                conn.read(u64::MAX);
                let flow = s.flow;
                // Looked up once, not per segment (the flow's entry exists once it started).
                let tracing = ctx.metrics.tracing(flow);
                let started = &mut s.started;
                let route = Route {
                    port,
                    peer: s.peer,
                    flow,
                    direction: Direction::Forward,
                };
                more = send_tcp(ctx, conn, route, |ctx, conn| {
                    if !*started {
                        *started = true;
                        ctx.metrics.started(flow, now);
                    }
                    if tracing {
                        ctx.metrics
                            .sample(flow, now, conn.cwnd(), conn.highest_data_sent());
                    }
                })
                .more;
                let st = conn.stats();
                s.reported.report(
                    ctx,
                    flow,
                    st.retransmitted_segments,
                    st.timeouts,
                    st.fast_retransmits,
                );
                next = conn.poll_timeout();
            }
            Side::Sink(conns) => {
                for (&peer, a) in conns.iter_mut() {
                    let n = a.conn.read(u64::MAX);
                    if n > 0 {
                        ctx.metrics.delivered(a.flow, n);
                    }
                    if a.conn.peer_finished() && !a.completed {
                        a.completed = true;
                        ctx.metrics.completed(a.flow, now);
                        a.conn.close();
                    }
                    let route = Route {
                        port,
                        peer,
                        flow: a.flow,
                        direction: Direction::Reverse,
                    };
                    more |= send_tcp(ctx, &mut a.conn, route, |_, _| {}).more;
                    next = earliest(next, a.conn.poll_timeout());
                }
            }
        }
        if more {
            next = Some(now);
        }
        self.wakeups.arm(ctx, next);
    }
}

impl Agent for TcpAgent {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        if let Side::Sender(s) = &mut self.side {
            if s.conn.is_none() {
                s.conn = Some(TcpConnection::new_active(ctx.now, self.config.clone()));
            }
        }
        self.pump(ctx);
    }

    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Tcp(seg) = &pkt.payload else {
            return;
        };
        let now = ctx.now;
        match &mut self.side {
            Side::Sender(s) => {
                if pkt.src != s.peer {
                    return;
                }
                if let Some(conn) = s.conn.as_mut() {
                    conn.on_segment(now, seg);
                }
            }
            Side::Sink(conns) => {
                let fresh_syn = seg.syn && !seg.ack_flag;
                let replace = match conns.get(&pkt.src) {
                    None => fresh_syn && conns.len() < MAX_SINK_CONNECTIONS,
                    // A new connection from the same address after the old one finished.
                    Some(a) => fresh_syn && a.completed && a.conn.is_send_complete(),
                };
                if replace {
                    conns.insert(
                        pkt.src,
                        Accepted {
                            flow: pkt.flow,
                            conn: TcpConnection::new_passive(now, self.config.clone()),
                            completed: false,
                        },
                    );
                }
                if let Some(a) = conns.get_mut(&pkt.src) {
                    a.conn.on_segment(now, seg);
                }
            }
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
        let now = ctx.now;
        self.wakeups.fired(now);
        match &mut self.side {
            Side::Sender(s) => {
                if let Some(conn) = s.conn.as_mut() {
                    tcp_timer(conn, now);
                }
            }
            Side::Sink(conns) => {
                for a in conns.values_mut() {
                    tcp_timer(&mut a.conn, now);
                }
            }
        }
        self.pump(ctx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
