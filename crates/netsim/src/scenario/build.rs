//! Building one replication's simulation from a checked scenario: nodes, links, ACK management,
//! routes, flows and web sources.

use super::*;
use crate::gateway::{GatewayEnd, GatewayEndSpec, GatewaySpec, Hop, SplitGateway};
use crate::packet::{Addr, FlowId, LinkId, NodeId};
use crate::sim::{Sim, Time};
use crate::stp_agent::{StpAgent, StpRole};
use crate::tcp::TcpAgent;
use crate::units::{parse_bytes, parse_duration_ns, parse_rate_bps};
use crate::web::{WebClient, WebServer};
use linkmodel::QueueLimit;
use std::collections::BTreeMap;

impl Scenario {
    /// Sets up the ACK management (`crate::ackmgmt`) the links ask for.
    fn manage_links(&self, sim: &mut Sim) -> Result<(), ScenarioError> {
        for l in &self.links {
            let dirs = [
                (format!("{}->{}", l.a, l.b), Some(&l.forward)),
                (format!("{}->{}", l.b, l.a), l.reverse.as_ref()),
            ];
            for (name, p) in dirs {
                let Some(p) = p else { continue };
                let f = |k: &str| format!("link {name}.{k}");
                let filter = p.ack_filter.unwrap_or(false);
                let drop_front = p.ack_drop_front.unwrap_or(false);
                if !filter && !drop_front && p.ack_pacing.is_none() && p.window_overwrite.is_none()
                {
                    continue;
                }
                let Some(id) = sim.link_by_name(&name) else {
                    continue;
                };
                let model = sim.links()[id.0 as usize].model.config().clone();
                if matches!(model.discipline, linkmodel::Discipline::Red(_)) {
                    return Err(field(
                        f("red"),
                        "ACK management (ack_filter, ack_pacing, window_overwrite, ack_drop_front) needs a drop-tail queue",
                    ));
                }
                let (capacity_packets, capacity_bytes) = match model.queue {
                    QueueLimit::Packets(n) => (n as usize, None),
                    QueueLimit::Bytes(b) => (usize::MAX, Some(b)),
                };
                let pacing = match &p.ack_pacing {
                    None => None,
                    Some(a) => {
                        let watch = sim.link_by_name(&a.watch).ok_or_else(|| {
                            field(
                                f("ack_pacing.watch"),
                                format!("no link named '{}'", a.watch),
                            )
                        })?;
                        if a.threshold_packets == 0 {
                            return Err(field(
                                f("ack_pacing.threshold_packets"),
                                "must be at least 1",
                            ));
                        }
                        Some(crate::ackmgmt::AckPacing {
                            watch,
                            rate_bps: sim.links()[watch.0 as usize].model.config().rate_bps,
                            threshold_packets: a.threshold_packets as usize,
                        })
                    }
                };
                let window_cap = match &p.window_overwrite {
                    Some(w) => Some(unit(&f("window_overwrite"), parse_bytes(w))?),
                    None => None,
                };
                sim.manage_link(
                    id,
                    crate::ackmgmt::AckQueueConfig {
                        capacity_packets,
                        capacity_bytes,
                        filter,
                        pacing,
                        window_cap,
                        drop_front,
                    },
                );
            }
        }
        Ok(())
    }

    /// Builds the simulation for one replication: nodes, links and their ACK management, routes,
    /// then flows and web sources in file order (the order fixes agent ids and start events).
    pub fn build(&self, seed: u64) -> Result<Built, ScenarioError> {
        if self.is_constellation() {
            return Err(field(
                "constellation",
                "this scenario runs on the constellation network (Scenario::leo_plan, `satstp sim`), not as nodes and links",
            ));
        }
        let mut sim = Sim::new(seed);
        self.add_nodes(&mut sim)?;
        self.add_links(&mut sim)?;
        self.manage_links(&mut sim)?;
        sim.compute_routes();
        self.add_routes(&mut sim)?;
        let mut flows = Vec::new();
        let mut names = BTreeMap::new();
        let flow_specs = self.expanded_flows()?;
        for (i, f) in flow_specs.iter().enumerate() {
            if names.insert(f.name.clone(), ()).is_some() {
                return Err(field(format!("flow {}", f.name), "defined twice"));
            }
            flows.push(self.add_flow(&mut sim, seed, i, f)?);
        }
        for (j, w) in self.web.iter().enumerate() {
            if names.insert(w.name.clone(), ()).is_some() {
                return Err(field(
                    format!("web {}", w.name),
                    "a flow or web source of that name exists",
                ));
            }
            flows.push(self.add_web(&mut sim, j, w)?);
        }
        Ok(Built { sim, flows })
    }

    fn add_nodes(&self, sim: &mut Sim) -> Result<(), ScenarioError> {
        let mut seen = BTreeMap::new();
        for n in &self.nodes {
            if seen.insert(n.name.clone(), ()).is_some() {
                return Err(field(format!("node {}", n.name), "defined twice"));
            }
            sim.add_node(&n.name);
        }
        Ok(())
    }

    fn add_links(&self, sim: &mut Sim) -> Result<(), ScenarioError> {
        for l in &self.links {
            let a = node(sim, &l.a, "link.a")?;
            let b = node(sim, &l.b, "link.b")?;
            let name = format!("link {}->{}", l.a, l.b);
            let fwd = self.link_config(&name, &l.forward, None)?;
            if l.simplex && l.reverse.is_some() {
                return Err(field(
                    format!("{name}.reverse"),
                    "a simplex link has no reverse direction",
                ));
            }
            let rev = match &l.reverse {
                Some(r) => {
                    Some(self.link_config(&format!("link {}->{}", l.b, l.a), r, Some(&fwd))?)
                }
                None => (!l.simplex).then(|| fwd.clone()),
            };
            sim.add_link(&format!("{}->{}", l.a, l.b), a, b, fwd)?;
            if let Some(rev) = rev {
                sim.add_link(&format!("{}->{}", l.b, l.a), b, a, rev)?;
            }
        }
        Ok(())
    }

    /// Sets the scenario's static routes over the computed ones and checks that they arrive.
    fn add_routes(&self, sim: &mut Sim) -> Result<(), ScenarioError> {
        for r in &self.routes {
            let what = format!("route at {} to {}", r.at, r.to);
            let at = node(sim, &r.at, &format!("{what}.at"))?;
            let to = node(sim, &r.to, &format!("{what}.to"))?;
            let via = sim.link_by_name(&r.via).ok_or_else(|| {
                field(format!("{what}.via"), format!("no link named '{}'", r.via))
            })?;
            if !sim.set_route(at, to, via) {
                return Err(field(
                    format!("{what}.via"),
                    format!("link '{}' does not leave node '{}'", r.via, r.at),
                ));
            }
        }
        if !self.routes.is_empty() {
            for (i, a) in self.nodes.iter().enumerate() {
                for (j, b) in self.nodes.iter().enumerate() {
                    let (x, y) = (NodeId(i as u32), NodeId(j as u32));
                    if sim.reachable(x, y) && !sim.route_arrives(x, y) {
                        return Err(field(
                            "route",
                            format!(
                                "the routes from '{}' to '{}' loop or end before arriving",
                                a.name, b.name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds flow number `i` (0-based, in file order after `count` expansion): its endpoints'
    /// agents and what its figures are measured on.
    fn add_flow(
        &self,
        sim: &mut Sim,
        seed: u64,
        i: usize,
        f: &FlowSpec,
    ) -> Result<BuiltFlow, ScenarioError> {
        let id = FlowId(i as u32 + 1);
        let from = node(sim, &f.from, &format!("flow {}.from", f.name))?;
        let to = node(sim, &f.to, &format!("flow {}.to", f.name))?;
        sim.check_route(from, to)?;
        sim.check_route(to, from)?;
        let bytes = match &f.bytes {
            Some(b) => Some(unit(&format!("flow {}.bytes", f.name), parse_bytes(b))?),
            None => None,
        };
        let start = match &f.start {
            Some(s) => unit(&format!("flow {}.start", f.name), parse_duration_ns(s))?,
            None => 0,
        };
        let bottleneck = match &f.bottleneck {
            Some(b) => sim.link_by_name(b).ok_or_else(|| {
                field(
                    format!("flow {}.bottleneck", f.name),
                    format!("no link named '{b}'"),
                )
            })?,
            None => slowest_on_path(sim, from, to).ok_or_else(|| {
                field(
                    format!("flow {}", f.name),
                    "source and sink are the same node",
                )
            })?,
        };
        let reverse_channel = match &f.reverse_channel {
            Some(r) => Some(sim.link_by_name(r).ok_or_else(|| {
                field(
                    format!("flow {}.reverse_channel", f.name),
                    format!("no link named '{r}'"),
                )
            })?),
            None => sim
                .reverse_link(bottleneck)
                .or_else(|| slowest_on_path(sim, to, from)),
        };
        if f.trace {
            sim.metrics.enable_trace(id);
        }
        check_node_flow_keys(f)?;
        let ends = FlowEnds {
            i,
            id,
            from,
            to,
            src_port: 10_000 + i as u16 * 2,
            dst_port: 10_001 + i as u16 * 2,
            bytes,
            start,
            seed,
        };
        match f.protocol.as_str() {
            "stp" => self.add_stp_flow(sim, f, &ends)?,
            "tcp" if f.stripes.is_some_and(|n| n != 1) => self.add_striped_flow(sim, f, &ends)?,
            "tcp" => self.add_tcp_flow(sim, f, &ends)?,
            "split" => self.add_split_flow(sim, f, &ends)?,
            other => {
                return Err(field(
                    format!("flow {}.protocol", f.name),
                    format!("unknown protocol '{other}' (use stp, tcp or split)"),
                ))
            }
        }
        Ok(BuiltFlow {
            id,
            name: f.name.clone(),
            protocol: f.protocol.clone(),
            start,
            bytes,
            bottleneck,
            reverse_channel,
        })
    }

    /// An STP sender and sink (the real engine).
    fn add_stp_flow(&self, sim: &mut Sim, f: &FlowSpec, e: &FlowEnds) -> Result<(), ScenarioError> {
        let cfg = self.stp_config(f)?;
        let stp_err =
            |err: stp::ConfigError| field(format!("flow {}.stp", f.name), err.to_string());
        let role = StpRole::Sender {
            peer: e.peer(),
            bytes: e.bytes,
        };
        let sender =
            StpAgent::new(e.src_port, e.id, role, cfg.clone(), e.sender_seed()).map_err(stp_err)?;
        let sink =
            StpAgent::new(e.dst_port, e.id, StpRole::Sink, cfg, e.sink_seed()).map_err(stp_err)?;
        let framing = self.stp_framing(f)?;
        e.add_ends(
            sim,
            Box::new(sender.with_framing(framing)),
            Box::new(sink.with_framing(framing)),
        )
    }

    /// A TCP transfer striped over `stripes` connections.
    fn add_striped_flow(
        &self,
        sim: &mut Sim,
        f: &FlowSpec,
        e: &FlowEnds,
    ) -> Result<(), ScenarioError> {
        let n = f.stripes.unwrap_or(1);
        let fname = |k: &str| format!("flow {}.{k}", f.name);
        if n == 0 || n > crate::striping::MAX_STRIPES {
            return Err(field(
                fname("stripes"),
                format!("must be 1 to {}", crate::striping::MAX_STRIPES),
            ));
        }
        // Connection 0 uses the flow's port; the others 50000 + 64·i + k.
        let base = 50_000 + 64 * e.i;
        if base + 64 > usize::from(u16::MAX) {
            return Err(field(fname("stripes"), "too many flows for striping ports"));
        }
        let ports: Vec<u16> = std::iter::once(e.src_port)
            .chain((1..n as usize).map(|k| (base + k) as u16))
            .collect();
        let cfg = self.tcp_config(f, f.tcp.as_ref(), "tcp")?;
        let peer = e.peer();
        let tcp_err = tcp_field_error(f);
        let mut sender =
            crate::striping::StripedSender::new(e.id, ports, peer, e.bytes, cfg.clone())
                .map_err(tcp_err)?;
        if let Some(b) = &f.stripe_block {
            let b = unit(&fname("stripe_block"), parse_bytes(b))?;
            if b == 0 {
                return Err(field(fname("stripe_block"), "must be at least 1 byte"));
            }
            sender = sender.with_block(b);
        }
        let sink = crate::striping::StripedSink::new(e.dst_port, e.id, n, cfg).map_err(tcp_err)?;
        e.add_ends(sim, Box::new(sender), Box::new(sink))
    }

    /// A TCP sender and sink (the TCP model).
    fn add_tcp_flow(&self, sim: &mut Sim, f: &FlowSpec, e: &FlowEnds) -> Result<(), ScenarioError> {
        let cfg = self.tcp_config(f, f.tcp.as_ref(), "tcp")?;
        let peer = e.peer();
        let tcp_err = tcp_field_error(f);
        let sender =
            TcpAgent::bulk_sender(e.id, e.src_port, peer, e.bytes, cfg.clone()).map_err(tcp_err)?;
        let sink = TcpAgent::sink(e.dst_port, cfg).map_err(tcp_err)?;
        e.add_ends(sim, Box::new(sender), Box::new(sink))
    }

    /// A TCP sender, the split gateway at `split_at`, and the hop's far end (an STP
    /// [`GatewayEnd`] or a TCP sink).
    fn add_split_flow(
        &self,
        sim: &mut Sim,
        f: &FlowSpec,
        e: &FlowEnds,
    ) -> Result<(), ScenarioError> {
        let (i, id, from, to, start) = (e.i, e.id, e.from, e.to, e.start);
        let name = |k: &str| format!("flow {}.{k}", f.name);
        let at_name = f
            .split_at
            .as_deref()
            .ok_or_else(|| field(name("split_at"), "required for protocol \"split\""))?;
        let at = node(sim, at_name, &name("split_at"))?;
        if at == from || at == to {
            return Err(field(
                name("split_at"),
                "must be a node between from and to",
            ));
        }
        sim.check_route(from, at)?;
        sim.check_route(at, to)?;
        let relay = match &f.relay_buffer {
            Some(b) => unit(&name("relay_buffer"), parse_bytes(b))?,
            None => 256 * 1024,
        };
        let in_cfg = self.tcp_config(f, f.tcp.as_ref(), "tcp")?;
        let (gw_in, gw_out) = (20_000 + i as u16 * 2, 20_001 + i as u16 * 2);
        let sink_addr = e.peer();
        let hop = match f.hop.as_deref() {
            Some("stp") => {
                let cfg = self.stp_config(f)?;
                // Checked as the sink's endpoint would be.
                cfg.validate()
                    .map_err(|err| field(name("stp"), err.to_string()))?;
                // The gateway side of the hop: header, verdict, the origin's
                // reader (at once, as the seeds' sinks read).
                let sink = GatewayEnd::new(GatewayEndSpec {
                    flow: id,
                    port: e.dst_port,
                    origin: sink_addr,
                    config: cfg.clone(),
                    seed: e.sink_seed(),
                    framing: self.stp_framing(f)?,
                    read_rate_bps: None,
                    reader_buffer: u64::MAX,
                });
                sim.add_agent(to, e.dst_port, start, Box::new(sink))?;
                Hop::Stp(cfg)
            }
            Some("tcp") => {
                let spec = f.hop_tcp.as_ref().or(f.tcp.as_ref());
                let cfg = self.tcp_config(f, spec, "hop_tcp")?;
                let sink = TcpAgent::sink(e.dst_port, cfg.clone())
                    .map_err(|err| field(name(&format!("hop_tcp.{}", err.field)), err.reason))?;
                sim.add_agent(to, e.dst_port, start, Box::new(sink))?;
                Hop::Tcp(cfg)
            }
            other => {
                return Err(field(
                    name("hop"),
                    format!("{other:?} is not \"stp\" or \"tcp\""),
                ))
            }
        };
        let gw = SplitGateway::new(GatewaySpec {
            flow: id,
            in_port: gw_in,
            out_port: gw_out,
            sink: sink_addr,
            in_config: in_cfg.clone(),
            hop,
            relay_buffer: relay,
            seed: e.gateway_seed(),
            framing: self.stp_framing(f)?,
        });
        sim.add_agent(at, gw_in, start, Box::new(gw))?;
        let sender = TcpAgent::bulk_sender(
            id,
            e.src_port,
            Addr {
                node: at,
                port: gw_in,
            },
            e.bytes,
            in_cfg,
        )
        .map_err(|err| field(name(&format!("tcp.{}", err.field)), err.reason))?;
        sim.add_agent(from, e.src_port, start, Box::new(sender))?;
        Ok(())
    }

    /// Adds web source number `j`: a server and a client of WWW-like background traffic.
    fn add_web(&self, sim: &mut Sim, j: usize, w: &WebSpec) -> Result<BuiltFlow, ScenarioError> {
        let wname = |k: &str| format!("web {}.{k}", w.name);
        let id = FlowId(10_000 + j as u32);
        let server = node(sim, &w.server, &wname("server"))?;
        let client = node(sim, &w.client, &wname("client"))?;
        sim.check_route(server, client)?;
        sim.check_route(client, server)?;
        let load = unit(&wname("load"), parse_rate_bps(&w.load))?;
        let start = match &w.start {
            Some(s) => unit(&wname("start"), parse_duration_ns(s))?,
            None => 0,
        };
        let spec = FlowSpec {
            name: w.name.clone(),
            count: None,
            protocol: "web".into(),
            from: w.server.clone(),
            to: w.client.clone(),
            bytes: None,
            start: None,
            duration: None,
            origin_delay: None,
            origin_rate: None,
            bottleneck: None,
            reverse_channel: None,
            trace: false,
            stp: None,
            tcp: w.tcp.clone(),
            split_at: None,
            hop: None,
            hop_tcp: None,
            relay_buffer: None,
            stripes: None,
            stripe_block: None,
        };
        let cfg = self.tcp_config(&spec, w.tcp.as_ref(), "tcp")?;
        let port = 30_000 + j as u16;
        let first_client_port = 40_000 + j as u16 * 1000;
        sim.add_agent(
            server,
            port,
            start,
            Box::new(WebServer::new(port, id, cfg.clone())),
        )?;
        let client_agent = WebClient::new(
            Addr { node: server, port },
            id,
            cfg,
            load,
            first_client_port,
            1000,
        );
        sim.add_agent(
            client,
            first_client_port.wrapping_sub(1).max(1),
            start,
            Box::new(client_agent),
        )?;
        let bottleneck = slowest_on_path(sim, server, client).ok_or_else(|| {
            field(
                format!("web {}", w.name),
                "server and client are the same node",
            )
        })?;
        Ok(BuiltFlow {
            id,
            name: w.name.clone(),
            protocol: "web".into(),
            start,
            bytes: None,
            bottleneck,
            reverse_channel: sim.reverse_link(bottleneck),
        })
    }
}

/// The node named `name`, or an error naming the key `what`.
fn node(sim: &Sim, name: &str, what: &str) -> Result<NodeId, ScenarioError> {
    sim.node(name)
        .ok_or_else(|| field(what.to_string(), format!("unknown node '{name}'")))
}

/// Refuses the keys a node scenario's flow does not take.
fn check_node_flow_keys(f: &FlowSpec) -> Result<(), ScenarioError> {
    if f.duration.is_some() {
        return Err(field(
            format!("flow {}.duration", f.name),
            "is for a constellation scenario's flows; here give bytes, or let the flow run to the end",
        ));
    }
    for (k, given) in [
        ("origin_delay", f.origin_delay.is_some()),
        ("origin_rate", f.origin_rate.is_some()),
    ] {
        if given {
            return Err(field(
                format!("flow {}.{k}", f.name),
                "is for a constellation scenario's flows; here the flow's from node is its host",
            ));
        }
    }
    if f.stripes.is_some() && f.protocol != "tcp" {
        return Err(field(
            format!("flow {}.stripes", f.name),
            "striping is for protocol \"tcp\"",
        ));
    }
    if f.stripe_block.is_some() && f.stripes.is_none_or(|n| n == 1) {
        return Err(field(
            format!("flow {}.stripe_block", f.name),
            "is for a striped transfer: set stripes to 2 or more",
        ));
    }
    Ok(())
}

/// A flow's endpoints as the protocol builders need them.
struct FlowEnds {
    /// The flow's number in file order (0-based): its ports derive from it.
    i: usize,
    id: FlowId,
    from: NodeId,
    to: NodeId,
    src_port: u16,
    dst_port: u16,
    bytes: Option<u64>,
    start: Time,
    /// The replication's seed, from which the agents' own derive.
    seed: u64,
}

impl FlowEnds {
    /// The seed of the sender's STP endpoint.
    fn sender_seed(&self) -> u64 {
        self.seed ^ (u64::from(self.id.0) << 20)
    }

    /// The seed of the sink's STP endpoint (also the far end of a split flow's STP hop).
    fn sink_seed(&self) -> u64 {
        self.seed ^ (u64::from(self.id.0) << 21) ^ 0x5a5a
    }

    /// The seed of a split flow's gateway.
    fn gateway_seed(&self) -> u64 {
        self.seed ^ (u64::from(self.id.0) << 22) ^ 0xa5a5
    }

    /// The receiving end's address, which the sender connects to.
    fn peer(&self) -> Addr {
        Addr {
            node: self.to,
            port: self.dst_port,
        }
    }

    /// Adds the flow's sender at its source and its sink at its destination (in that order),
    /// both starting with the flow.
    fn add_ends(
        &self,
        sim: &mut Sim,
        sender: Box<dyn crate::sim::Agent>,
        sink: Box<dyn crate::sim::Agent>,
    ) -> Result<(), ScenarioError> {
        sim.add_agent(self.from, self.src_port, self.start, sender)?;
        sim.add_agent(self.to, self.dst_port, self.start, sink)?;
        Ok(())
    }
}

/// A TCP model's configuration error as the error of flow `f`'s `tcp.<field>` key.
fn tcp_field_error(
    f: &FlowSpec,
) -> impl Fn(crate::tcp::TcpConfigError) -> ScenarioError + Copy + '_ {
    |err| field(format!("flow {}.tcp.{}", f.name, err.field), err.reason)
}

/// The slowest link on the path from `from` to `to` (the first such, on ties).
fn slowest_on_path(
    sim: &Sim,
    from: crate::packet::NodeId,
    to: crate::packet::NodeId,
) -> Option<LinkId> {
    let mut at = from;
    let mut best: Option<(u64, LinkId)> = None;
    for _ in 0..sim.links().len() {
        if at == to {
            return best.map(|b| b.1);
        }
        let (id, link) = sim.next_hop(at, to)?;
        let rate = link.model.config().rate_bps;
        if best.is_none_or(|(r, _)| rate < r) {
            best = Some((rate, id));
        }
        at = link.to;
    }
    None
}

/// A scenario turned into a simulation, with what is needed to summarise it.
pub struct Built {
    pub sim: Sim,
    pub flows: Vec<BuiltFlow>,
}

/// A flow's identity in a built simulation.
#[derive(Debug, Clone)]
pub struct BuiltFlow {
    pub id: FlowId,
    pub name: String,
    pub protocol: String,
    pub start: Time,
    pub bytes: Option<u64>,
    pub bottleneck: LinkId,
    /// Where reverse-channel use is counted.
    pub reverse_channel: Option<LinkId>,
}
