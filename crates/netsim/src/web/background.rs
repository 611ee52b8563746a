//! Web-like background traffic: a client that opens a new TCP connection per request (Poisson
//! arrivals, so the offered load does not depend on the path), sends a small request and reads
//! the response; a server that answers each request with a heavy-tailed response size.
//!
//! Response sizes follow the SURGE model of Barford and Crovella (SIGMETRICS 1998), built from
//! Web server traces: with probability 0.93 a lognormal body (μ = 9.357, σ = 1.318 in ln bytes,
//! median ≈ 11.6 KB), otherwise a Pareto tail (k = 133 KB, α = 1.1), here capped at 2 MB so a
//! single draw cannot dominate a 60-second run. The seeds used the ns HTTP generator built on
//! 1995–96 Berkeley traces, whose tables are not published with them; SURGE's published
//! parameters describe the same kind of traffic. The mean response is computed from these
//! parameters and sets the request rate: rate = load ÷ (8 × mean response).

use crate::packet::{Addr, Direction, FlowId, Packet, Payload};
use crate::sim::{Agent, Ctx, Time, SEC};
use crate::stack::{earliest, send_tcp, tcp_timer, Route, Wakeups};
use crate::tcp::{TcpConfig, TcpConnection};
use rand_core::RngCore;
use std::any::Any;
use std::collections::BTreeMap;

/// Request size in bytes (an HTTP GET with typical headers).
pub const REQUEST_BYTES: u64 = 350;
const BODY_MU: f64 = 9.357;
const BODY_SIGMA: f64 = 1.318;
const TAIL_P: f64 = 0.07;
const TAIL_K: f64 = 133_000.0;
const TAIL_ALPHA: f64 = 1.1;
const CAP: f64 = 2_000_000.0;
/// Most connections a client keeps open at once (new requests wait beyond it).
const MAX_OPEN: usize = 256;

fn uniform(rng: &mut dyn RngCore) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

fn normal(rng: &mut dyn RngCore) -> f64 {
    // Box–Muller.
    let (u1, u2) = (uniform(rng), uniform(rng));
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Draws a response size in bytes.
pub fn response_size(rng: &mut dyn RngCore) -> u64 {
    let v = if uniform(rng) < TAIL_P {
        TAIL_K / uniform(rng).powf(1.0 / TAIL_ALPHA)
    } else {
        (BODY_MU + BODY_SIGMA * normal(rng)).exp()
    };
    v.clamp(1.0, CAP) as u64
}

/// Mean of `response_size` (the tail's mean is that of min(X, CAP); the body's cap is
/// negligible).
pub fn mean_response() -> f64 {
    let body = (BODY_MU + BODY_SIGMA * BODY_SIGMA / 2.0).exp();
    let tail = TAIL_K / (TAIL_ALPHA - 1.0) * (TAIL_ALPHA - (TAIL_K / CAP).powf(TAIL_ALPHA - 1.0));
    (1.0 - TAIL_P) * body + TAIL_P * tail
}

struct Exchange {
    conn: TcpConnection,
    response_left: u64,
    got_request: u64,
    closed: bool,
}

fn drive(
    conns: &mut BTreeMap<Addr, Exchange>,
    port_of: impl Fn(&Addr) -> (u16, Addr),
    flow: FlowId,
    dir: Direction,
    ctx: &mut Ctx<'_>,
    next: &mut Option<Time>,
) {
    for (key, ex) in conns.iter_mut() {
        let (port, peer) = port_of(key);
        let route = Route {
            port,
            peer,
            flow,
            direction: dir,
        };
        if send_tcp(ctx, &mut ex.conn, route, |_, _| {}).more {
            *next = earliest(*next, Some(ctx.now));
        }
        *next = earliest(*next, ex.conn.poll_timeout());
    }
}

/// Answers requests with heavy-tailed responses. One server serves any number of clients.
pub struct WebServer {
    port: u16,
    flow: FlowId,
    config: TcpConfig,
    conns: BTreeMap<Addr, Exchange>,
    wakeups: Wakeups,
    /// Responses started.
    pub responses: u64,
}

impl WebServer {
    pub fn new(port: u16, flow: FlowId, config: TcpConfig) -> Self {
        WebServer {
            port,
            flow,
            config,
            conns: BTreeMap::new(),
            wakeups: Wakeups::default(),
            responses: 0,
        }
    }

    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        for ex in self.conns.values_mut() {
            let n = ex.conn.readable();
            ex.got_request += ex.conn.read(n);
            if ex.got_request >= REQUEST_BYTES && ex.response_left == 0 && !ex.closed {
                ex.response_left = response_size(ctx.rng);
                self.responses += 1;
            }
            if ex.response_left > 0 {
                ex.response_left -= ex.conn.write(ex.response_left);
                if ex.response_left == 0 && !ex.closed {
                    ex.conn.close();
                    ex.closed = true;
                }
            }
        }
        let mut next = None;
        let port = self.port;
        drive(
            &mut self.conns,
            |a| (port, *a),
            self.flow,
            Direction::Forward,
            ctx,
            &mut next,
        );
        self.conns
            .retain(|_, ex| !(ex.closed && ex.conn.is_send_complete() && ex.conn.peer_finished()));
        self.wakeups.arm(ctx, next);
    }
}

fn fire(conns: &mut BTreeMap<Addr, Exchange>, now: Time) {
    for ex in conns.values_mut() {
        tcp_timer(&mut ex.conn, now);
    }
}

impl Agent for WebServer {
    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        let Payload::Tcp(seg) = &pkt.payload else {
            return;
        };
        if !self.conns.contains_key(&pkt.src) {
            if !seg.syn || seg.ack_flag {
                return;
            }
            let conn = TcpConnection::new_passive(ctx.now, self.config.clone());
            self.conns.insert(
                pkt.src,
                Exchange {
                    conn,
                    response_left: 0,
                    got_request: 0,
                    closed: false,
                },
            );
        }
        if let Some(ex) = self.conns.get_mut(&pkt.src) {
            ex.conn.on_segment(ctx.now, seg);
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
        self.wakeups.fired(ctx.now);
        fire(&mut self.conns, ctx.now);
        self.pump(ctx);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Issues requests to a `WebServer` at Poisson arrival times and reads the responses.
pub struct WebClient {
    server: Addr,
    flow: FlowId,
    config: TcpConfig,
    /// Mean time between requests.
    mean_gap_ns: f64,
    next_port: u16,
    first_port: u16,
    ports: u16,
    conns: BTreeMap<Addr, Exchange>,
    wakeups: Wakeups,
    next_request: Time,
    /// Requests issued and responses completed.
    pub requests: u64,
    pub completed: u64,
}

/// Token of the request-arrival timer (the connections' wake-ups use token 0).
const ARRIVAL: u64 = u64::MAX;

impl WebClient {
    /// A client offering `load_bps` of responses on average, using local ports
    /// `first_port .. first_port + ports`.
    pub fn new(
        server: Addr,
        flow: FlowId,
        config: TcpConfig,
        load_bps: u64,
        first_port: u16,
        ports: u16,
    ) -> Self {
        let rate = load_bps as f64 / (8.0 * mean_response());
        WebClient {
            server,
            flow,
            config,
            mean_gap_ns: SEC as f64 / rate.max(1e-9),
            next_port: first_port,
            first_port,
            ports: ports.max(1),
            conns: BTreeMap::new(),
            wakeups: Wakeups::default(),
            next_request: 0,
            requests: 0,
            completed: 0,
        }
    }

    fn schedule_arrival(&mut self, ctx: &mut Ctx<'_>) {
        let gap = -self.mean_gap_ns * uniform(ctx.rng).ln();
        self.next_request = ctx.now + gap as Time;
        ctx.timer_at(self.next_request, ARRIVAL);
    }

    fn request(&mut self, ctx: &mut Ctx<'_>) {
        if self.conns.len() >= MAX_OPEN {
            return;
        }
        for _ in 0..self.ports {
            let port = self.next_port;
            self.next_port = self.first_port + (self.next_port - self.first_port + 1) % self.ports;
            let key = Addr {
                node: ctx.node,
                port,
            };
            if self.conns.contains_key(&key) {
                continue;
            }
            ctx.bind(port);
            let mut conn = TcpConnection::new_active(ctx.now, self.config.clone());
            conn.write(REQUEST_BYTES);
            self.conns.insert(
                key,
                Exchange {
                    conn,
                    response_left: 0,
                    got_request: 0,
                    closed: false,
                },
            );
            self.requests += 1;
            return;
        }
    }

    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        for ex in self.conns.values_mut() {
            let n = ex.conn.readable();
            let got = ex.conn.read(n);
            ctx.metrics.delivered(self.flow, got);
            if ex.conn.peer_finished() && !ex.closed {
                ex.conn.close();
                ex.closed = true;
                self.completed += 1;
            }
        }
        let mut next = None;
        let server = self.server;
        drive(
            &mut self.conns,
            |a| (a.port, server),
            self.flow,
            Direction::Reverse,
            ctx,
            &mut next,
        );
        self.conns
            .retain(|_, ex| !(ex.closed && ex.conn.is_send_complete()));
        self.wakeups.arm(ctx, next);
    }
}

impl Agent for WebClient {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.metrics.started(self.flow, ctx.now);
        self.schedule_arrival(ctx);
    }

    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let (Payload::Tcp(seg), Some(ex)) = (&pkt.payload, self.conns.get_mut(&pkt.dst)) {
            ex.conn.on_segment(ctx.now, seg);
        }
        self.pump(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        if token == ARRIVAL {
            self.request(ctx);
            self.schedule_arrival(ctx);
        } else {
            self.wakeups.fired(ctx.now);
            fire(&mut self.conns, ctx.now);
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
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    #[test]
    fn response_sizes_match_their_mean() {
        let mut r = ChaCha8Rng::seed_from_u64(3);
        let n = 400_000;
        let sum: f64 = (0..n).map(|_| response_size(&mut r) as f64).sum();
        let mean = sum / n as f64;
        let want = mean_response();
        assert!(
            (mean - want).abs() / want < 0.08,
            "sampled {mean}, model {want}"
        );
        let mut sizes: Vec<u64> = (0..10_001).map(|_| response_size(&mut r)).collect();
        sizes.sort_unstable();
        let median = sizes[5000] as f64;
        assert!((8_000.0..16_000.0).contains(&median), "median {median}");
    }
}
