//! Striping: one transfer carried by N parallel TCP connections sharing its byte stream (the
//! "multiple TCP sessions" of seed 003 and ACTS's xftp, seed 004). The stream is cut into
//! blocks assigned dynamically: a connection gets the next block whenever less than one block
//! of what it was given is still unsent, so a slow connection never holds up the rest (003:
//! "divide the file into smaller blocks and dynamically assign these blocks to connections
//! which are free to transmit them"). The sink reassembles by counting: the transfer is
//! complete when every connection delivered its share and its FIN.

use crate::packet::{Addr, Direction, FlowId, Packet, Payload};
use crate::sim::{Agent, Ctx, Time};
use crate::stack::{earliest, send_tcp, tcp_timer, Reported, Route, Wakeups};
use crate::tcp::{TcpConfig, TcpConfigError, TcpConnection};
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};

/// Most connections one striped transfer may use.
pub const MAX_STRIPES: u32 = 64;
/// Block of the byte stream handed to a connection at a time, unless the flow sets its own
/// (`stripe_block`, [`StripedSender::with_block`]).
pub const BLOCK_BYTES: u64 = 64 * 1024;

/// The sending side of a striped transfer: connection k uses port `ports[k]`.
#[derive(Debug)]
pub struct StripedSender {
    flow: FlowId,
    ports: Vec<u16>,
    peer: Addr,
    config: TcpConfig,
    conns: Vec<TcpConnection>,
    /// Bytes handed to each connection.
    given: Vec<u64>,
    /// Block handed out at a time.
    block: u64,
    /// Bytes of the transfer not yet handed out; `None` for a persistent transfer.
    left: Option<u64>,
    started: bool,
    reported: Reported,
    wakeups: Wakeups,
}

impl StripedSender {
    /// A transfer of `bytes` (None: without end) to `peer` over one connection per port.
    pub fn new(
        flow: FlowId,
        ports: Vec<u16>,
        peer: Addr,
        bytes: Option<u64>,
        config: TcpConfig,
    ) -> Result<Self, TcpConfigError> {
        config.validate()?;
        Ok(StripedSender {
            flow,
            given: vec![0; ports.len()],
            block: BLOCK_BYTES,
            ports,
            peer,
            config,
            conns: Vec::new(),
            left: bytes,
            started: false,
            reported: Reported::default(),
            wakeups: Wakeups::default(),
        })
    }

    /// Hands out blocks of `bytes` (at least 1) instead of [`BLOCK_BYTES`].
    pub fn with_block(mut self, bytes: u64) -> Self {
        self.block = bytes.max(1);
        self
    }

    /// Bytes handed to each connection so far.
    pub fn shares(&self) -> &[u64] {
        &self.given
    }

    /// The connections (after the agent started).
    pub fn connections(&self) -> &[TcpConnection] {
        &self.conns
    }

    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let mut next: Option<Time> = None;
        // Hand out blocks to the connections that have less than one block unsent.
        for (k, c) in self.conns.iter_mut().enumerate() {
            match self.left.as_mut() {
                None => {
                    c.write(u64::MAX);
                }
                Some(left) => {
                    let unsent = self.given[k].saturating_sub(c.highest_data_sent());
                    if *left > 0 && unsent < self.block {
                        let n = c.write(self.block.min(*left));
                        self.given[k] += n;
                        *left -= n;
                    }
                }
            }
        }
        if self.left == Some(0) {
            for c in &mut self.conns {
                c.close();
            }
        }
        let (mut retx, mut timeouts, mut recoveries) = (0, 0, 0);
        let (flow, started) = (self.flow, &mut self.started);
        for (k, c) in self.conns.iter_mut().enumerate() {
            c.read(u64::MAX);
            let route = Route {
                port: self.ports[k],
                peer: self.peer,
                flow,
                direction: Direction::Forward,
            };
            let sent = send_tcp(ctx, c, route, |ctx, _| {
                if !*started {
                    *started = true;
                    ctx.metrics.started(flow, now);
                }
            });
            if sent.more {
                next = Some(now);
            }
            let st = c.stats();
            retx += st.retransmitted_segments;
            timeouts += st.timeouts;
            recoveries += st.fast_retransmits;
            next = earliest(next, c.poll_timeout());
        }
        self.reported.report(ctx, flow, retx, timeouts, recoveries);
        self.wakeups.arm(ctx, next);
    }
}

impl Agent for StripedSender {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        if self.conns.is_empty() {
            for &p in self.ports.iter().skip(1) {
                ctx.bind(p);
            }
            self.conns = (0..self.ports.len())
                .map(|_| TcpConnection::new_active(ctx.now, self.config.clone()))
                .collect();
        }
        self.pump(ctx);
    }

    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Tcp(seg) = &pkt.payload else {
            return;
        };
        if pkt.src != self.peer {
            return;
        }
        if let Some(k) = self.ports.iter().position(|&p| p == pkt.dst.port) {
            if let Some(c) = self.conns.get_mut(k) {
                c.on_segment(ctx.now, seg);
            }
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
        let now = ctx.now;
        self.wakeups.fired(now);
        for c in &mut self.conns {
            tcp_timer(c, now);
        }
        self.pump(ctx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The receiving side: accepts the transfer's connections (up to `stripes`), reads everything,
/// and reports the transfer complete when all of them finished.
#[derive(Debug)]
pub struct StripedSink {
    port: u16,
    flow: FlowId,
    stripes: usize,
    config: TcpConfig,
    conns: BTreeMap<Addr, TcpConnection>,
    finished: BTreeSet<Addr>,
    completed: bool,
    wakeups: Wakeups,
}

impl StripedSink {
    pub fn new(
        port: u16,
        flow: FlowId,
        stripes: u32,
        config: TcpConfig,
    ) -> Result<Self, TcpConfigError> {
        config.validate()?;
        Ok(StripedSink {
            port,
            flow,
            stripes: stripes as usize,
            config,
            conns: BTreeMap::new(),
            finished: BTreeSet::new(),
            completed: false,
            wakeups: Wakeups::default(),
        })
    }

    /// Whether every connection delivered its share and its FIN.
    pub fn is_complete(&self) -> bool {
        self.completed
    }

    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let mut next = None;
        for (&peer, c) in &mut self.conns {
            let n = c.read(u64::MAX);
            if n > 0 {
                ctx.metrics.delivered(self.flow, n);
            }
            if c.peer_finished() && self.finished.insert(peer) {
                c.close();
            }
            let route = Route {
                port: self.port,
                peer,
                flow: self.flow,
                direction: Direction::Reverse,
            };
            if send_tcp(ctx, c, route, |_, _| {}).more {
                next = Some(now);
            }
            next = earliest(next, c.poll_timeout());
        }
        if !self.completed && self.finished.len() == self.stripes {
            self.completed = true;
            ctx.metrics.completed(self.flow, now);
        }
        self.wakeups.arm(ctx, next);
    }
}

impl Agent for StripedSink {
    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Tcp(seg) = &pkt.payload else {
            return;
        };
        if !self.conns.contains_key(&pkt.src)
            && seg.syn
            && !seg.ack_flag
            && self.conns.len() < self.stripes
        {
            self.conns.insert(
                pkt.src,
                TcpConnection::new_passive(ctx.now, self.config.clone()),
            );
        }
        if let Some(c) = self.conns.get_mut(&pkt.src) {
            c.on_segment(ctx.now, seg);
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
        let now = ctx.now;
        self.wakeups.fired(now);
        for c in self.conns.values_mut() {
            tcp_timer(c, now);
        }
        self.pump(ctx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Sim, MS, SEC};
    use linkmodel::LinkConfig;

    /// A transfer of `bytes` over `n` stripes across a 2 Mb/s, 100 ms path with `loss`.
    fn transfer(n: u32, bytes: u64, loss: f64, seed: u64) -> (Sim, crate::sim::AgentId) {
        transfer_in_blocks(n, bytes, loss, seed, BLOCK_BYTES)
    }

    /// As [`transfer`], handing out `block` bytes at a time.
    fn transfer_in_blocks(
        n: u32,
        bytes: u64,
        loss: f64,
        seed: u64,
        block: u64,
    ) -> (Sim, crate::sim::AgentId) {
        let mut sim = Sim::new(seed);
        let a = sim.add_node("a");
        let b = sim.add_node("b");
        let mut cfg = LinkConfig::simple(2_000_000, 50 * MS, 50);
        cfg.loss = linkmodel::Loss::Random { p: loss };
        sim.add_link("a->b", a, b, cfg).unwrap();
        sim.add_link("b->a", b, a, LinkConfig::simple(2_000_000, 50 * MS, 50))
            .unwrap();
        sim.compute_routes();
        let tcp = TcpConfig {
            mss_bytes: 960,
            ..TcpConfig::default()
        };
        let ports: Vec<u16> = (0..n as u16).map(|k| 100 + k).collect();
        let peer = Addr { node: b, port: 9 };
        let tx = StripedSender::new(FlowId(1), ports, peer, Some(bytes), tcp.clone())
            .unwrap()
            .with_block(block);
        let id = sim.add_agent(a, 100, 0, Box::new(tx)).unwrap();
        let rx = StripedSink::new(9, FlowId(1), n, tcp).unwrap();
        sim.add_agent(b, 9, 0, Box::new(rx)).unwrap();
        sim.run_until(120 * SEC);
        (sim, id)
    }

    #[test]
    fn every_byte_arrives_once_over_the_stripes() {
        for (n, loss) in [(1, 0.0), (4, 0.0), (6, 0.01)] {
            let bytes = 1_000_003;
            let (sim, id) = transfer(n, bytes, loss, 7);
            let m = &sim.metrics.flows[&FlowId(1)];
            assert_eq!(m.delivered_bytes, bytes, "{n} stripes, loss {loss}");
            assert!(m.completed_ns.is_some(), "{n} stripes: not complete");
            let tx = sim.agent_as::<StripedSender>(id).unwrap();
            assert_eq!(tx.shares().iter().sum::<u64>(), bytes);
            assert_eq!(tx.connections().len(), n as usize);
            if n > 1 {
                // Dynamic assignment: every connection carried part of the transfer.
                assert!(tx.shares().iter().all(|&s| s > 0), "{:?}", tx.shares());
            }
        }
    }

    #[test]
    fn smaller_blocks_put_a_short_file_on_every_connection() {
        // 100 KB over 4 connections: 64 KB blocks leave two idle (xftp's "effective initial
        // cwnd of N segments" needs all four, seed 004); 8 KB blocks use all four, sooner.
        let run = |block| {
            let (sim, id) = transfer_in_blocks(4, 100_000, 0.0, 1, block);
            let tx = sim.agent_as::<StripedSender>(id).unwrap();
            let used = tx.shares().iter().filter(|&&s| s > 0).count();
            let m = &sim.metrics.flows[&FlowId(1)];
            assert_eq!(m.delivered_bytes, 100_000);
            (used, m.completed_ns.unwrap())
        };
        let (big_used, big_t) = run(BLOCK_BYTES);
        let (small_used, small_t) = run(8 * 1024);
        assert_eq!((big_used, small_used), (2, 4));
        assert!(small_t < big_t, "8 KB: {small_t} ns, 64 KB: {big_t} ns");
    }

    #[test]
    fn more_stripes_finish_a_window_limited_transfer_sooner() {
        // 2 Mb/s × 100 ms = 25 KB in flight fills the path; a 16 KB window cannot.
        let limited = |n| {
            let mut sim = Sim::new(1);
            let a = sim.add_node("a");
            let b = sim.add_node("b");
            sim.add_duplex(a, b, LinkConfig::simple(2_000_000, 50 * MS, 50))
                .unwrap();
            sim.compute_routes();
            let tcp = TcpConfig {
                mss_bytes: 960,
                recv_buffer_bytes: 16 * 1024,
                ..TcpConfig::default()
            };
            let ports: Vec<u16> = (0..n as u16).map(|k| 100 + k).collect();
            let peer = Addr { node: b, port: 9 };
            let tx = StripedSender::new(FlowId(1), ports, peer, Some(500_000), tcp.clone());
            sim.add_agent(a, 100, 0, Box::new(tx.unwrap())).unwrap();
            let rx = StripedSink::new(9, FlowId(1), n, tcp).unwrap();
            sim.add_agent(b, 9, 0, Box::new(rx)).unwrap();
            sim.run_until(60 * SEC);
            sim.metrics.flows[&FlowId(1)].completed_ns.unwrap()
        };
        let (one, three) = (limited(1), limited(3));
        assert!(three * 2 < one * 3 / 2, "1: {one} ns, 3: {three} ns");
    }
}
