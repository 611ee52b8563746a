//! An agent that drives the real STP engine (`stp::Endpoint`) with real encoded datagrams, with
//! a bulk (or persistent) sending application on the initiator and a counting sink on the
//! responder.

use crate::packet::{Addr, Direction, FlowId, NodeId, Packet, Payload, IP_HEADER, UDP_HEADER};
use crate::sim::{Agent, Ctx};
use crate::stack::{send_stp, stp_deadline, Deadline, StpWire};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::any::Any;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use stp::{ConnectionHandle, ConnectionStats, Endpoint, EndpointConfig, Event, Instant};

/// The socket address standing for a simulator address: node n is 10.(n>>16).(n>>8).(n).
pub fn socket_of(a: Addr) -> SocketAddr {
    let n = a.node.0;
    let ip = Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8);
    SocketAddr::V4(SocketAddrV4::new(ip, a.port))
}

/// The simulator address behind a socket address made by `socket_of`.
pub fn addr_of(s: SocketAddr) -> Addr {
    match s {
        SocketAddr::V4(v4) => {
            let o = v4.ip().octets();
            Addr {
                node: NodeId((u32::from(o[1]) << 16) | (u32::from(o[2]) << 8) | u32::from(o[3])),
                port: v4.port(),
            }
        }
        SocketAddr::V6(v6) => Addr {
            node: NodeId(u32::MAX),
            port: v6.port(),
        },
    }
}

/// What the agent does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StpRole {
    /// Opens a connection to `peer` and sends `bytes` (None: a persistent flow that never ends).
    Sender { peer: Addr, bytes: Option<u64> },
    /// Accepts connections and reads everything.
    Sink,
}

const WRITE_CHUNK: usize = 64 * 1024;

/// The STP agent.
pub struct StpAgent {
    port: u16,
    flow: FlowId,
    role: StpRole,
    ep: Endpoint,
    conn: Option<ConnectionHandle>,
    written: u64,
    shut: bool,
    timer: Deadline,
    /// The connection's retransmitted-packet count after the last datagram sent.
    retx_seen: Option<(ConnectionHandle, u64)>,
    buf: Vec<u8>,
    /// What the sender writes: slices of one allocation, which the connection keeps without
    /// copying (`write_bytes`).
    zeros: bytes::Bytes,
    /// Statistics of the last connection: after `finish`, those it ended with (read afresh if
    /// the endpoint still holds it, else as they were when it last raised an event, which was
    /// when it closed or failed). Before `finish`, an earlier copy.
    pub stats: Option<ConnectionStats>,
    /// Failures seen, as text.
    pub failures: Vec<String>,
    pub received: u64,
    /// Bytes added to every datagram on the wire (IP and UDP headers by default).
    framing: u32,
}

/// How STP datagrams are carried: the wire bytes added to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// STP over UDP over IPv4 (28 bytes), as this implementation runs on a real network.
    #[default]
    Udp,
    /// STP directly over IPv4 (20 bytes), as the seeds' ns module and BSD kernel STP ran
    /// ("STP/IP header = 32 bytes", thesis §5.2.3).
    Ip,
}

impl Framing {
    /// Bytes of headers below STP on the wire.
    pub fn overhead(self) -> u32 {
        match self {
            Framing::Udp => IP_HEADER + UDP_HEADER,
            Framing::Ip => IP_HEADER,
        }
    }
}

impl StpAgent {
    /// An agent on `port`, accounting its packets to `flow`. The endpoint's random stream is
    /// seeded from `seed`.
    pub fn new(
        port: u16,
        flow: FlowId,
        role: StpRole,
        config: EndpointConfig,
        seed: u64,
    ) -> Result<Self, stp::ConfigError> {
        let ep = Endpoint::new(config, Box::new(ChaCha8Rng::seed_from_u64(seed)))?;
        Ok(StpAgent {
            port,
            flow,
            role,
            ep,
            conn: None,
            written: 0,
            shut: false,
            timer: Deadline::default(),
            retx_seen: None,
            buf: Vec::with_capacity(2048),
            zeros: bytes::Bytes::from(vec![0u8; WRITE_CHUNK]),
            stats: None,
            failures: Vec::new(),
            received: 0,
            framing: Framing::Udp.overhead(),
        })
    }

    /// Carries datagrams as `framing` says (default UDP/IP).
    pub fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing.overhead();
        self
    }

    fn direction(&self) -> Direction {
        match self.role {
            StpRole::Sender { .. } => Direction::Forward,
            StpRole::Sink => Direction::Reverse,
        }
    }

    /// Application work: write what fits, read what arrived, note events.
    fn app(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if let StpRole::Sink = self.role {
            while let Some(h) = self.ep.accept() {
                self.conn = Some(h);
            }
        }
        // Statistics are copied when something happens to the connection (and at finish), not on
        // every packet: the copy is the costliest thing this agent would do.
        let mut snapshot = false;
        while let Some((_, ev)) = self.ep.poll_event() {
            snapshot = true;
            if let Event::Failed(e) = ev {
                self.failures.push(e.to_string());
            }
        }
        let Some(h) = self.conn else { return };
        let Some(c) = self.ep.connection(h) else {
            return;
        };
        if let StpRole::Sender { bytes, .. } = self.role {
            loop {
                let want = match bytes {
                    Some(total) => (total - self.written).min(WRITE_CHUNK as u64) as usize,
                    None => WRITE_CHUNK,
                };
                if want == 0 {
                    if !self.shut {
                        c.shutdown();
                        self.shut = true;
                    }
                    break;
                }
                match c.write_bytes(&self.zeros.slice(..want)) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.written += n as u64,
                }
            }
        }
        loop {
            match c.read_chunk(usize::MAX) {
                Ok(Some(b)) => {
                    self.received += b.len() as u64;
                    ctx.metrics.delivered(self.flow, b.len() as u64);
                }
                Ok(None) => {
                    if matches!(self.role, StpRole::Sink) {
                        ctx.metrics.completed(self.flow, now);
                        if !self.shut {
                            c.shutdown();
                            self.shut = true;
                        }
                    }
                    break;
                }
                Err(_) => break,
            }
        }
        let tracing = ctx.metrics.tracing(self.flow);
        // The copy kept is only ever read once the connection is gone (`finish` reads a held
        // connection afresh). The endpoint releases a connection only when it is over and its
        // events were all taken, and becoming over (closed or failed) queues an event: so the
        // copy taken at the last event is one of an over connection, and copies taken while it
        // was live are overwritten before anything reads them. Copying only then keeps exactly
        // what the last event's copy was, without building and copying 488 bytes at every
        // datagram that raised an event (nearly all of them: readable, writable).
        if (snapshot && c.is_terminal()) || tracing || self.stats.is_none() {
            self.stats = Some(c.stats());
        }
        if let (StpRole::Sender { .. }, true) = (self.role, tracing) {
            let s = c.stats();
            ctx.metrics
                .sample(self.flow, now, s.cwnd_bytes, s.payload_bytes_sent);
        }
    }

    /// Sends every datagram due and arms the timer for the next deadline.
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let wire = StpWire {
            port: self.port,
            flow: self.flow,
            direction: self.direction(),
            framing: self.framing,
        };
        let flow = self.flow;
        // The flow starts with its first datagram: one look-up per event, not per datagram.
        let mut first = true;
        send_stp(
            ctx,
            &mut self.ep,
            &mut self.buf,
            wire,
            self.conn,
            &mut self.retx_seen,
            |ctx| {
                if std::mem::take(&mut first) {
                    ctx.metrics.started(flow, ctx.now);
                }
            },
        );
        let deadline = stp_deadline(&mut self.ep, ctx.now);
        self.timer.arm(ctx, deadline);
    }
}

impl Agent for StpAgent {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        if let StpRole::Sender { peer, .. } = self.role {
            match self
                .ep
                .connect(Instant::from_nanos(ctx.now), socket_of(peer))
            {
                Ok(h) => self.conn = Some(h),
                Err(e) => self.failures.push(e.to_string()),
            }
        }
        self.app(ctx);
        self.pump(ctx);
    }

    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let Payload::Stp(bytes) = pkt.payload {
            self.ep
                .handle_datagram(Instant::from_nanos(ctx.now), socket_of(pkt.src), &bytes);
            ctx.recycle(bytes);
        }
        self.app(ctx);
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        if !self.timer.fired(token) {
            return;
        }
        self.ep.handle_timeout(Instant::from_nanos(ctx.now));
        self.app(ctx);
        self.pump(ctx);
    }

    fn finish(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(c) = self.conn.and_then(|h| self.ep.connection(h)) {
            self.stats = Some(c.stats());
        }
        if let (StpRole::Sender { .. }, Some(s)) = (self.role, &self.stats) {
            ctx.metrics
                .retransmitted(self.flow, s.retransmitted_packets);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Sim, MS, SEC};
    use linkmodel::{LinkConfig, QueueLimit};

    #[test]
    fn address_mapping_roundtrips() {
        for n in [0u32, 1, 255, 256, 70_000] {
            let a = Addr {
                node: NodeId(n),
                port: 4242,
            };
            assert_eq!(addr_of(socket_of(a)), a);
        }
    }

    /// Every datagram the engine retransmits, and only those, is marked as a retransmission on
    /// the link: with random loss (a lost packet still counts as transmitted) and a queue that
    /// never overflows, the forward link's packets beyond its original ones are exactly the
    /// sender's retransmitted packets, whichever event sent them.
    #[test]
    fn retransmissions_are_marked_on_the_link_one_for_one() {
        let (mut sim, a, peer, ab) = crate::stack::tests::lossy_forward_path(3, 0.03);
        let flow = FlowId(1);
        let cfg = EndpointConfig::default();
        let role = StpRole::Sender {
            peer,
            bytes: Some(3_000_000),
        };
        let sender = StpAgent::new(1000, flow, role, cfg.clone(), 1).unwrap();
        let sink = StpAgent::new(2000, flow, StpRole::Sink, cfg, 2).unwrap();
        let sender_id = sim.add_agent(a, 1000, 0, Box::new(sender)).unwrap();
        sim.add_agent(peer.node, 2000, 0, Box::new(sink)).unwrap();
        sim.run_until(120 * SEC);
        sim.finish();
        assert_eq!(sim.metrics.flows[&flow].delivered_bytes, 3_000_000);
        let stats = sim
            .agent_as::<StpAgent>(sender_id)
            .and_then(|s| s.stats.clone())
            .unwrap();
        let link = &sim.metrics.links[&ab];
        let marked = link.transmitted.packets - link.original.packets;
        assert!(stats.retransmitted_packets > 20, "{stats:?}");
        assert_eq!(marked, stats.retransmitted_packets);
    }

    #[test]
    fn stp_bulk_over_a_geo_link_in_the_simulator() {
        let mut sim = Sim::new(7);
        let a = sim.add_node("a");
        let b = sim.add_node("b");
        let mut l = LinkConfig::simple(1_500_000, 266 * MS, 0);
        l.queue = QueueLimit::Bytes(99_750);
        sim.add_duplex(a, b, l).unwrap();
        sim.compute_routes();
        let flow = FlowId(1);
        let cfg = EndpointConfig::default();
        let size = 2_000_000;
        let sender = StpAgent::new(
            1000,
            flow,
            StpRole::Sender {
                peer: Addr {
                    node: b,
                    port: 2000,
                },
                bytes: Some(size),
            },
            cfg.clone(),
            1,
        )
        .unwrap();
        let sink = StpAgent::new(2000, flow, StpRole::Sink, cfg, 2).unwrap();
        sim.add_agent(a, 1000, 0, Box::new(sender)).unwrap();
        let sink_id = sim.add_agent(b, 2000, 0, Box::new(sink)).unwrap();
        sim.run_until(60 * SEC);
        sim.finish();
        let m = &sim.metrics.flows[&flow];
        assert_eq!(m.delivered_bytes, size);
        let done = m.completed_ns.expect("completed");
        let goodput = size as f64 * 8.0 / (done as f64 / 1e9);
        assert!(goodput > 1_100_000.0, "goodput {goodput}");
        let sink = sim.agent_as::<StpAgent>(sink_id).unwrap();
        assert!(sink.failures.is_empty());
        assert_eq!(sink.received, size);
    }
}
