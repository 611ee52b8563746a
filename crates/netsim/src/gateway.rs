//! The split-connection gateway node: terminates the source's TCP connection and relays its bytes
//! into a second transport towards the sink (TCP with its own options, or STP), through a bounded
//! relay buffer; end of stream passes through once every byte has been relayed.
//!
//! An STP hop is the real gateway's hop logic, `pep::hop::core::HopCore` (the same streams,
//! backpressure and close handling as the daemons), without the tunnel: the simulated hop is
//! unencrypted, as the seeds' gateways were, so datagrams keep their STP size.
//!
//! Data content is not modelled on the TCP side (byte counts), so the STP side carries zeros.

use crate::packet::{Addr, Direction, FlowId, Packet, Payload};
use crate::sim::{Agent, Ctx, Time};
use crate::stp_agent::{addr_of, socket_of, Framing};
use crate::tcp::{TcpConfig, TcpConnection};
use bytes::Bytes;
use pep::hop::core::{CoreConfig, CoreSecurity, EventSink, HopCore, Offer, StreamId};
use pep::hop::StreamEvent;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::any::Any;
use std::collections::BTreeSet;
use stp::{EndpointConfig, Instant};

/// The hop's reader: the far end sends nothing the simulation looks at.
struct Discard;

impl EventSink for Discard {
    fn offer(&mut self, _: StreamEvent) -> Offer {
        Offer::Taken
    }
}

/// The transport on the gateway's far side.
pub enum Hop {
    Tcp(TcpConfig),
    Stp(EndpointConfig),
}

enum HopConn {
    Tcp(Box<TcpConnection>),
    Stp {
        core: Box<HopCore<Discard, ()>>,
        id: StreamId,
    },
}

/// What a gateway relays, and how.
pub struct GatewaySpec {
    pub flow: FlowId,
    /// Port the source's TCP connects to.
    pub in_port: u16,
    /// Port the hop sends from.
    pub out_port: u16,
    /// The sink the hop connects to.
    pub sink: Addr,
    /// TCP options of the source-side connection.
    pub in_config: TcpConfig,
    pub hop: Hop,
    /// Most bytes held at the gateway (written into the hop, not yet acknowledged).
    pub relay_buffer: u64,
    /// Seed of the hop's random stream.
    pub seed: u64,
    /// Wire framing of an STP hop's datagrams.
    pub framing: Framing,
}

/// A split-connection gateway for one flow.
pub struct SplitGateway {
    flow: FlowId,
    /// Port the source connects to (TCP).
    in_port: u16,
    /// Port the hop uses towards the sink.
    out_port: u16,
    sink: Addr,
    in_config: TcpConfig,
    hop_kind: Hop,
    relay_buffer: u64,
    seed: u64,
    framing: Framing,
    incoming: Option<(Addr, TcpConnection)>,
    hop: Option<HopConn>,
    hop_closed: bool,
    relayed: u64,
    stp_retransmissions: u64,
    wakeups: BTreeSet<Time>,
    buf: Vec<u8>,
}

const ZEROS_LEN: usize = 64 * 1024;
/// The bytes an STP hop carries.
static ZEROS: [u8; ZEROS_LEN] = [0; ZEROS_LEN];

impl SplitGateway {
    /// A gateway as `spec` describes.
    pub fn new(spec: GatewaySpec) -> Self {
        SplitGateway {
            flow: spec.flow,
            in_port: spec.in_port,
            out_port: spec.out_port,
            sink: spec.sink,
            in_config: spec.in_config,
            hop_kind: spec.hop,
            relay_buffer: spec.relay_buffer.max(1),
            seed: spec.seed,
            framing: spec.framing,
            incoming: None,
            hop: None,
            hop_closed: false,
            relayed: 0,
            stp_retransmissions: 0,
            wakeups: BTreeSet::new(),
            buf: Vec::with_capacity(2048),
        }
    }

    /// Bytes relayed from the incoming connection into the hop.
    pub fn relayed(&self) -> u64 {
        self.relayed
    }

    fn open_hop(&mut self, now: Time) {
        if self.hop.is_some() {
            return;
        }
        self.hop = match &self.hop_kind {
            Hop::Tcp(cfg) => Some(HopConn::Tcp(Box::new(TcpConnection::new_active(
                now,
                cfg.clone(),
            )))),
            Hop::Stp(cfg) => {
                let mut cfg = cfg.clone();
                // The relay buffer is the STP send buffer (written, not yet acknowledged).
                cfg.connection.send_buffer_bytes = self.relay_buffer.clamp(4096, 1 << 30) as u32;
                let t = Instant::from_nanos(now);
                let config = CoreConfig {
                    endpoint: cfg,
                    seed: self.seed,
                    rng: Some(Box::new(ChaCha8Rng::seed_from_u64(self.seed))),
                    send_rate_bps: None,
                    // No tap and no shaper here: the own address only names the hop's port.
                    local: std::net::SocketAddr::from(([0, 0, 0, 0], self.out_port)),
                    wall_clock_at_zero_ns: 0,
                };
                let security = CoreSecurity::Clear {
                    peer: socket_of(self.sink),
                };
                let Ok(mut core) = HopCore::new(config, security, t) else {
                    return;
                };
                let Ok(info) = core.open(t, Bytes::new(), Discard) else {
                    return;
                };
                Some(HopConn::Stp {
                    core: Box::new(core),
                    id: info.id,
                })
            }
        };
    }

    /// Moves bytes from the incoming connection into the hop, as far as the relay buffer allows.
    fn relay(&mut self, now: Time) {
        let (Some((_, inc)), Some(hop)) = (self.incoming.as_mut(), self.hop.as_mut()) else {
            return;
        };
        loop {
            let space = match hop {
                HopConn::Tcp(t) => self.relay_buffer.saturating_sub(t.unacked_bytes()),
                HopConn::Stp { core, id } => core.send_space(*id),
            };
            let n = inc.readable().min(space).min(ZEROS_LEN as u64);
            if n == 0 {
                break;
            }
            let taken = match hop {
                HopConn::Tcp(t) => t.write(n),
                HopConn::Stp { core, id } => {
                    // Within the send space: the core hands it all to STP at once.
                    core.write(*id, Bytes::from_static(&ZEROS[..n as usize]), None);
                    core.pump(Instant::from_nanos(now), &mut |_| None);
                    n
                }
            };
            if taken == 0 {
                break;
            }
            inc.read(taken);
            self.relayed += taken;
        }
        if inc.peer_finished() && inc.readable() == 0 && !self.hop_closed {
            self.hop_closed = true;
            match hop {
                HopConn::Tcp(t) => t.close(),
                HopConn::Stp { core, id } => {
                    core.shutdown(*id);
                    core.pump(Instant::from_nanos(now), &mut |_| None);
                }
            }
            // The source's connection is done too: close our side of it.
            inc.close();
        }
    }

    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        self.relay(now);
        let mut next: Option<Time> = None;
        if let Some((peer, inc)) = self.incoming.as_mut() {
            while let Some(seg) = inc.poll_segment(now) {
                let size = seg.wire_size();
                ctx.send(
                    self.in_port,
                    *peer,
                    self.flow,
                    Direction::Reverse,
                    size,
                    Payload::Tcp(seg),
                );
            }
            next = inc.poll_timeout();
        }
        match self.hop.as_mut() {
            Some(HopConn::Tcp(t)) => {
                let mut retx = t.retransmissions();
                while let Some(seg) = t.poll_segment(now) {
                    let size = seg.wire_size();
                    ctx.send(
                        self.out_port,
                        self.sink,
                        self.flow,
                        Direction::Forward,
                        size,
                        Payload::Tcp(seg),
                    );
                    if t.retransmissions() > retx {
                        retx = t.retransmissions();
                        ctx.mark_retransmission();
                    }
                }
                next = min_opt(next, t.poll_timeout());
                ctx.metrics
                    .sample(self.flow, now, t.cwnd(), t.highest_data_sent());
            }
            Some(HopConn::Stp { core, id }) => {
                let t = Instant::from_nanos(now);
                core.pump(t, &mut |_| None);
                let retx = |core: &mut HopCore<Discard, ()>| {
                    core.stream_stats(*id)
                        .map_or(0, |s| s.retransmitted_packets)
                };
                let mut before = retx(core);
                while let Some(tx) = core.poll_transmit(t, &mut self.buf) {
                    let size = tx.size as u32 + self.framing.overhead();
                    ctx.send(
                        self.out_port,
                        addr_of(tx.destination),
                        self.flow,
                        Direction::Forward,
                        size,
                        Payload::Stp(self.buf[..tx.size].to_vec()),
                    );
                    let after = retx(core);
                    if after > before {
                        before = after;
                        ctx.mark_retransmission();
                    }
                }
                if let Some(st) = core.stream_stats(*id) {
                    self.stp_retransmissions = st.retransmitted_packets;
                }
                next = min_opt(next, core.poll_timeout(t).map(|x| x.as_nanos()));
            }
            None => {}
        }
        if let Some(at) = next {
            let at = at.max(now);
            if self.wakeups.first().is_none_or(|&w| at < w) && self.wakeups.len() < 64 {
                self.wakeups.insert(at);
                ctx.timer_at(at, at);
            }
        }
    }
}

fn min_opt(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl Agent for SplitGateway {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.bind(self.out_port);
    }

    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let now = ctx.now;
        if pkt.dst.port == self.in_port {
            if let Payload::Tcp(seg) = &pkt.payload {
                if self.incoming.is_none() && seg.syn && !seg.ack_flag {
                    self.incoming = Some((
                        pkt.src,
                        TcpConnection::new_passive(now, self.in_config.clone()),
                    ));
                    // Open the hop at once, so it starts while the source's handshake finishes.
                    self.open_hop(now);
                }
                if let Some((peer, inc)) = self.incoming.as_mut() {
                    if *peer == pkt.src {
                        inc.on_segment(now, seg);
                    }
                }
            }
        } else if pkt.dst.port == self.out_port {
            match (&pkt.payload, self.hop.as_mut()) {
                (Payload::Tcp(seg), Some(HopConn::Tcp(t))) => t.on_segment(now, seg),
                (Payload::Stp(bytes), Some(HopConn::Stp { core, .. })) => {
                    core.handle_datagram(Instant::from_nanos(now), socket_of(pkt.src), bytes);
                }
                _ => {}
            }
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        if !self.wakeups.remove(&token) {
            return;
        }
        let now = ctx.now;
        if let Some((_, inc)) = self.incoming.as_mut() {
            if inc.poll_timeout().is_some_and(|t| t <= now) {
                inc.on_timeout(now);
            }
        }
        match self.hop.as_mut() {
            Some(HopConn::Tcp(t)) if t.poll_timeout().is_some_and(|x| x <= now) => {
                t.on_timeout(now)
            }
            Some(HopConn::Stp { core, .. }) => core.handle_timeout(Instant::from_nanos(now)),
            _ => {}
        }
        self.pump(ctx);
    }

    fn finish(&mut self, ctx: &mut Ctx<'_>) {
        let retx = match &self.hop {
            Some(HopConn::Tcp(t)) => {
                let st = t.stats();
                for _ in 0..st.timeouts {
                    ctx.metrics.timeout(self.flow);
                }
                ctx.metrics.fast_recoveries(self.flow, st.fast_retransmits);
                st.retransmitted_segments
            }
            Some(HopConn::Stp { .. }) => self.stp_retransmissions,
            None => 0,
        };
        ctx.metrics.retransmitted(self.flow, retx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
