//! The short-transfer and web experiments of thesis §4.2.4 and §5.3 as functions: a path, a
//! transport, a workload in, the figures out. `satstp reproduce` runs them (the `web-*`
//! reproductions) and sets the seeds' figures beside theirs; `docs/scenarios.md` describes the
//! topologies.
//!
//! - [`client_server`]: the seeds' laboratory set-up, two hosts whose drivers limit the rate and
//!   add the delay (thesis §4.1.3): 1.3 Mb/s, a fixed RTT, queues that never overflow for these
//!   workloads.
//! - [`run_http`]: an HTTP client and server on such a path.
//! - [`run_bulk`] over [`Network::DirecPc`] or [`Network::Ricochet`]: file transfers over the
//!   two commercial networks of Table 5.4 as we model them from the thesis' description, with a
//!   probe measuring the queueing delay of the last hop.

use crate::packet::{Addr, Direction, FlowId, NodeId, Packet, Payload};
use crate::sim::{Agent, Ctx, Sim, SimError, Time, MS, SEC};
use crate::stp_agent::{Framing, StpAgent, StpRole};
use crate::tcp::{TcpAgent, TcpConfig, TcpSegment};
use crate::web::http::{add_http_pair, HttpError, HttpLog, Transport, Workload};
use crate::web::{WebClient, WebServer};
use linkmodel::{LinkConfig, QueueLimit};
use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use stp::EndpointConfig;

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{0}")]
    Config(String),
}

/// A two-host path: data (server → client) and return rates, one-way delays, queues.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathSpec {
    pub down_bps: u64,
    pub up_bps: u64,
    pub one_way_ns: Time,
    pub down_queue_packets: u32,
    pub up_queue_packets: u32,
}

impl PathSpec {
    /// The seeds' laboratory path: 1.3 Mb/s both ways, RTT `rtt_ns`, 100-packet queues.
    pub fn lab(rtt_ns: Time) -> Self {
        PathSpec {
            down_bps: 1_300_000,
            up_bps: 1_300_000,
            one_way_ns: rtt_ns / 2,
            down_queue_packets: 100,
            up_queue_packets: 100,
        }
    }
}

/// Two nodes, "server" and "client", joined by `path`.
pub fn client_server(path: PathSpec, seed: u64) -> Result<(Sim, NodeId, NodeId), SimError> {
    let mut sim = Sim::new(seed);
    let server = sim.add_node("server");
    let client = sim.add_node("client");
    sim.add_link(
        "server->client",
        server,
        client,
        LinkConfig::simple(path.down_bps, path.one_way_ns, path.down_queue_packets),
    )?;
    sim.add_link(
        "client->server",
        client,
        server,
        LinkConfig::simple(path.up_bps, path.one_way_ns, path.up_queue_packets),
    )?;
    sim.compute_routes();
    Ok((sim, client, server))
}

/// Runs an HTTP client and server over `path` until the workload is done (or `limit`), and
/// returns the log and the simulated events.
pub fn run_http(
    path: PathSpec,
    transport: Transport,
    workload: Workload,
    seed: u64,
    limit: Time,
) -> Result<(HttpLog, u64), ExperimentError> {
    let (mut sim, client, server) = client_server(path, seed)?;
    let log = add_http_pair(
        &mut sim,
        client,
        server,
        FlowId(1),
        (1000, 80),
        transport,
        workload,
        seed,
        0,
    )?;
    let mut events = 0;
    let mut t = 0;
    while t < limit {
        t += 10 * SEC;
        events += sim.run_until(t);
        if log.borrow().pages.len() >= workload.max_pages as usize {
            break;
        }
    }
    sim.finish();
    let out = log.borrow().clone();
    Ok((out, events))
}

/// The seeds' TCP of the short-transfer experiments: BSD timing (500 ms clock, delayed ACKs on
/// the 200 ms tick), initial window one segment, SACK-NewReno recovery.
pub fn seeds_tcp(mss_bytes: u32) -> TcpConfig {
    TcpConfig {
        mss_bytes,
        delayed_ack_on_ticks: true,
        ..TcpConfig::default()
    }
}

/// The two commercial networks of thesis Table 5.4, as modelled here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Hughes DirecPC: a 2 Mb/s satellite broadcast channel from the uplink center to the user
    /// (shared: web-like traffic of other users takes about 30 % of it), the return path over a
    /// 50 kb/s modem and ten Internet routers with web-like cross traffic; 12 hops, RTT about
    /// 375 ms.
    DirecPc,
    /// Metricom Ricochet: a 30 kb/s radio hop each way (150 ms one way including the radio
    /// relays, a drop-tail queue of 15 s of line rate) between the user and the radio gateway,
    /// then 13 Internet routers with cross traffic to the server; 15 hops, base RTT about 350 ms.
    Ricochet,
}

impl Network {
    /// Transfer size of the seeds' experiments (1 MB over DirecPC, 100 KB over Ricochet).
    pub fn file_bytes(self) -> u64 {
        match self {
            Network::DirecPc => 1_000_000,
            Network::Ricochet => 100_000,
        }
    }
}

/// The bulk protocol of a Table 5.4 transfer.
#[derive(Debug, Clone)]
pub enum Bulk {
    Tcp(TcpConfig),
    Stp(EndpointConfig),
}

/// One file transfer's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BulkResult {
    /// Bytes delivered × 8 ÷ time from start to the last byte (or to the time limit).
    pub goodput_bps: f64,
    /// The transfer's bytes on the user's return link, × 8 ÷ the same time.
    pub reverse_bps: f64,
    pub completed: bool,
    /// Queueing delay of the user's downlink seen by the probe: largest and mean, seconds.
    pub max_queue_s: f64,
    pub mean_queue_s: f64,
    pub events: u64,
}

/// Sends a small packet every `period` to a [`ProbeSink`]; the packet carries its send time.
struct ProbeSender {
    port: u16,
    to: Addr,
    flow: FlowId,
    period: Time,
}

impl Agent for ProbeSender {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        ctx.timer_at(ctx.now, 0);
    }
    fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
        let seg = TcpSegment {
            ts_val: ctx.now + 1,
            ..TcpSegment::default()
        };
        ctx.send(
            self.port,
            self.to,
            self.flow,
            Direction::Forward,
            40,
            Payload::Tcp(seg),
        );
        ctx.timer_at(ctx.now + self.period, 0);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Records the one-way delay of every probe, seconds.
struct ProbeSink {
    delays: Rc<RefCell<Vec<f64>>>,
}

impl Agent for ProbeSink {
    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let Payload::Tcp(seg) = &pkt.payload {
            if seg.ts_val > 0 {
                let sent = seg.ts_val - 1;
                self.delays.borrow_mut().push((ctx.now - sent) as f64 / 1e9);
            }
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn chain(sim: &mut Sim, names: &[String], cfg: &LinkConfig) -> Result<Vec<NodeId>, SimError> {
    let nodes: Vec<NodeId> = names.iter().map(|n| sim.add_node(n)).collect();
    for w in nodes.windows(2) {
        sim.add_duplex(w[0], w[1], cfg.clone())?;
    }
    Ok(nodes)
}

fn web(
    sim: &mut Sim,
    server: NodeId,
    client: NodeId,
    id: u32,
    load_bps: u64,
) -> Result<(), SimError> {
    let cfg = TcpConfig {
        recv_buffer_bytes: 16 * 1024,
        ..TcpConfig::default()
    };
    let port = 30_000 + id as u16;
    let flow = FlowId(10_000 + id);
    sim.add_agent(
        server,
        port,
        0,
        Box::new(WebServer::new(port, flow, cfg.clone())),
    )?;
    let first = 40_000 + id as u16 * 1000;
    sim.add_agent(
        client,
        first - 1,
        0,
        Box::new(WebClient::new(
            Addr { node: server, port },
            flow,
            cfg,
            load_bps,
            first,
            900,
        )),
    )?;
    Ok(())
}

/// One file transfer of `network.file_bytes()` from the server to the user with `bulk`, with
/// the network's cross traffic; seed `seed`; gives up after `limit`.
pub fn run_bulk(
    network: Network,
    bulk: &Bulk,
    seed: u64,
    limit: Time,
) -> Result<BulkResult, ExperimentError> {
    let mut sim = Sim::new(seed);
    let internet = LinkConfig::simple(10_000_000, 0, 50);
    // (user, last-hop node, server, the user's down and up links by name, probe source).
    let (user, server, down_link, up_link, probe_from) = match network {
        Network::DirecPc => {
            let user = sim.add_node("user");
            let uplink = sim.add_node("uplink-center");
            let dish = sim.add_node("satellite-downlink");
            let others = sim.add_node("other-users");
            let isp = sim.add_node("isp");
            // The user's modem: 50 kb/s each way, 20 ms, 10-packet queue.
            sim.add_duplex(user, isp, LinkConfig::simple(50_000, 20 * MS, 10))?;
            sim.add_duplex(others, isp, LinkConfig::simple(10_000_000, 20 * MS, 100))?;
            let names: Vec<String> = (1..=10).map(|i| format!("r{i}")).collect();
            let routers = chain(
                &mut sim,
                &names,
                &LinkConfig {
                    delay: linkmodel::Delay::Fixed(8 * MS),
                    ..internet.clone()
                },
            )?;
            sim.add_duplex(isp, routers[0], internet.clone())?;
            sim.add_duplex(routers[9], uplink, internet.clone())?;
            // The source sits at the uplink center (the thesis' BSD machine there).
            let server = sim.add_node("server");
            sim.add_duplex(server, uplink, LinkConfig::simple(100_000_000, MS, 100))?;
            let far = sim.add_node("web-far");
            let near = sim.add_node("web-near");
            sim.add_duplex(far, routers[9], internet.clone())?;
            sim.add_duplex(near, routers[0], internet.clone())?;
            // Terrestrial routes first: the broadcast channel must not become a shortcut for
            // Internet traffic (routes are fewest-hop).
            sim.compute_routes();
            // The broadcast channel: simplex, 2 Mb/s, 250 ms (GEO), a 100-packet queue, shared
            // by every user under the beam.
            let sat = sim.add_link(
                "uplink-center->satellite-downlink",
                uplink,
                dish,
                LinkConfig::simple(2_000_000, 250 * MS, 100),
            )?;
            let fast = LinkConfig::simple(100_000_000, 0, 100);
            sim.add_link("satellite-downlink->user", dish, user, fast.clone())?;
            sim.add_link("satellite-downlink->other-users", dish, others, fast)?;
            let to_user = sim
                .link_by_name("satellite-downlink->user")
                .ok_or_else(|| ExperimentError::Config("no downlink".into()))?;
            let to_others = sim
                .link_by_name("satellite-downlink->other-users")
                .ok_or_else(|| ExperimentError::Config("no downlink".into()))?;
            // Data to the users goes over the satellite; everything from them over the Internet.
            for (to, last) in [(user, to_user), (others, to_others)] {
                sim.set_route(uplink, to, sat);
                sim.set_route(dish, to, last);
            }
            // Cross traffic: web traffic across the Internet routers both ways, and other users'
            // downloads on the broadcast channel (about 30 % of it).
            web(&mut sim, far, near, 1, 3_000_000)?;
            web(&mut sim, near, far, 2, 3_000_000)?;
            web(&mut sim, uplink, others, 3, 600_000)?;
            (
                user,
                server,
                "satellite-downlink->user",
                "user->isp",
                uplink,
            )
        }
        Network::Ricochet => {
            let user = sim.add_node("user");
            let radio = sim.add_node("radio-gateway");
            // 30 kb/s, 150 ms one way, a queue of 15 s of line rate (≈ 56 KB).
            let mut r = LinkConfig::simple(30_000, 150 * MS, 0);
            r.queue = QueueLimit::Bytes(30_000 / 8 * 15);
            sim.add_duplex(radio, user, r)?;
            let names: Vec<String> = (1..=13).map(|i| format!("r{i}")).collect();
            let routers = chain(
                &mut sim,
                &names,
                &LinkConfig {
                    delay: linkmodel::Delay::Fixed(2 * MS),
                    ..internet.clone()
                },
            )?;
            sim.add_duplex(radio, routers[0], internet.clone())?;
            let server = sim.add_node("server");
            sim.add_duplex(server, routers[12], internet.clone())?;
            let far = sim.add_node("web-far");
            let near = sim.add_node("web-near");
            sim.add_duplex(far, routers[12], internet.clone())?;
            sim.add_duplex(near, routers[0], internet.clone())?;
            sim.compute_routes();
            web(&mut sim, far, near, 1, 3_000_000)?;
            web(&mut sim, near, far, 2, 3_000_000)?;
            (
                user,
                server,
                "radio-gateway->user",
                "user->radio-gateway",
                radio,
            )
        }
    };
    let flow = FlowId(1);
    let bytes = network.file_bytes();
    let (src_port, dst_port) = (5000, 5001);
    let peer = Addr {
        node: user,
        port: dst_port,
    };
    let start = SEC;
    match bulk {
        Bulk::Tcp(cfg) => {
            let s = TcpAgent::bulk_sender(flow, src_port, peer, Some(bytes), cfg.clone())
                .map_err(|e| ExperimentError::Config(e.to_string()))?;
            let k = TcpAgent::sink(dst_port, cfg.clone())
                .map_err(|e| ExperimentError::Config(e.to_string()))?;
            sim.add_agent(server, src_port, start, Box::new(s))?;
            sim.add_agent(user, dst_port, start, Box::new(k))?;
        }
        Bulk::Stp(cfg) => {
            let map = |e: stp::ConfigError| ExperimentError::Config(e.to_string());
            let s = StpAgent::new(
                src_port,
                flow,
                StpRole::Sender {
                    peer,
                    bytes: Some(bytes),
                },
                cfg.clone(),
                seed ^ 0x51,
            )
            .map_err(map)?
            .with_framing(Framing::Ip);
            let k = StpAgent::new(dst_port, flow, StpRole::Sink, cfg.clone(), seed ^ 0x52)
                .map_err(map)?
                .with_framing(Framing::Ip);
            sim.add_agent(server, src_port, start, Box::new(s))?;
            sim.add_agent(user, dst_port, start, Box::new(k))?;
        }
    }
    let delays = Rc::new(RefCell::new(Vec::new()));
    sim.add_agent(
        probe_from,
        7000,
        start,
        Box::new(ProbeSender {
            port: 7000,
            to: Addr {
                node: user,
                port: 7001,
            },
            flow: FlowId(20_000),
            period: 250 * MS,
        }),
    )?;
    sim.add_agent(
        user,
        7001,
        start,
        Box::new(ProbeSink {
            delays: delays.clone(),
        }),
    )?;
    let mut events = 0;
    let mut t = start;
    while t < limit {
        t += SEC;
        events += sim.run_until(t);
        if sim.metrics.is_completed(flow) {
            break;
        }
    }
    sim.finish();
    let m = sim.metrics.flows.get(&flow).cloned().unwrap_or_default();
    let end = m.completed_ns.unwrap_or(t);
    let secs = (end.saturating_sub(start)).max(1) as f64 / 1e9;
    let up = sim
        .link_by_name(up_link)
        .and_then(|l| sim.metrics.links.get(&l))
        .map_or(0, |l| l.flow_bytes(flow, Direction::Reverse));
    let _ = down_link;
    let d = delays.borrow();
    let base = d.iter().copied().fold(f64::INFINITY, f64::min);
    let (max_q, mean_q) = if d.is_empty() {
        (0.0, 0.0)
    } else {
        (
            d.iter().map(|x| x - base).fold(0.0, f64::max),
            d.iter().map(|x| x - base).sum::<f64>() / d.len() as f64,
        )
    };
    Ok(BulkResult {
        goodput_bps: m.delivered_bytes as f64 * 8.0 / secs,
        reverse_bps: up as f64 * 8.0 / secs,
        completed: m.completed_ns.is_some(),
        max_queue_s: max_q,
        mean_queue_s: mean_q,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::http::{HttpVersion, Pages, Think};

    #[test]
    fn lab_path_transfers() {
        let w = Workload {
            version: HttpVersion::Http10 { parallel: 1 },
            pages: Pages::Objects(1),
            think: Think::Fixed(500 * MS),
            max_pages: 30,
        };
        let (log, _) = run_http(
            PathSpec::lab(600 * MS),
            Transport::Tcp(seeds_tcp(1460)),
            w,
            1,
            3600 * SEC,
        )
        .unwrap();
        assert_eq!(log.transfers.len(), 30);
        let min = log.transfers.iter().map(|t| t.latency_ns).min().unwrap();
        assert!((1200 * MS..1300 * MS).contains(&min), "{min}");
    }

    #[test]
    fn scenario_keys_of_the_window_options() {
        let text = |v: &str| {
            format!(
                "name = \"t\"\nduration = \"2s\"\n[[node]]\nname = \"a\"\n[[node]]\nname = \"b\"\n\
                 [[link]]\na = \"a\"\nb = \"b\"\nrate = \"1Mbps\"\ndelay = \"10ms\"\n\
                 [[flow]]\nname = \"f\"\nprotocol = \"stp\"\nfrom = \"a\"\nto = \"b\"\n\
                 [flow.stp]\nwindow_rtt_backoff_ms = {v}\nunpaced_first_flight = true\n"
            )
        };
        let ok = crate::scenario::Scenario::from_toml(&text("1000")).unwrap();
        assert!(ok.build(1).is_ok());
        let e = match crate::scenario::Scenario::from_toml(&text("0")) {
            Err(e) => e.to_string(),
            Ok(sc) => sc.build(1).err().expect("0 ms is rejected").to_string(),
        };
        assert!(e.contains("window_rtt_backoff_ms"), "{e}");
    }

    #[test]
    fn both_networks_carry_a_file() {
        for net in [Network::DirecPc, Network::Ricochet] {
            for bulk in [
                Bulk::Tcp(seeds_tcp(1460)),
                Bulk::Stp(EndpointConfig::default()),
            ] {
                let r = run_bulk(net, &bulk, 1, 300 * SEC).unwrap();
                assert!(r.completed, "{net:?} {bulk:?}: {r:?}");
                assert!(r.goodput_bps > 10_000.0 && r.reverse_bps > 0.0, "{r:?}");
            }
        }
    }
}
