//! A LEO constellation as a packet network (issue 26): every satellite a router, every ISL and
//! GSL a pair of simplex links on the shared link model (own rate, drop-tail queue, and a delay
//! that follows the link's length over time), ground stations as hosts where any of the
//! simulator's agents (TCP variants, the STP agent) run, and the forwarding state of
//! [`constellation::fstate`] swapped into the nodes' routes at every step, so packets in flight
//! meet path changes and can be reordered by them.
//!
//! Model limits, stated:
//! - a link's delay is piecewise constant between steps (the length at each step / c), and a
//!   link keeps packets in order (its queue moves as a whole);
//! - the links are those up at some step of the run; a link that goes down keeps delivering
//!   what is already on it, and routes simply stop using it;
//! - when a destination sees no satellite, the nodes keep their last route towards it.

use crate::packet::{LinkId, NodeId};
use crate::sim::{Sim, SimError, Time};
use constellation::fstate::{ForwardingState, FstateComputer, NO_HOP};
use constellation::geo::Vec3;
use constellation::ground::{visible, AttachPolicy};
use constellation::{Constellation, Place, Snapshot};
use linkmodel::{Delay, LinkConfig};
use std::collections::BTreeMap;

/// What to build.
#[derive(Debug, Clone)]
pub struct LeoNetConfig {
    pub constellation: Constellation,
    pub stations: Vec<Place>,
    /// Length of the run (the links' delay traces cover it).
    pub duration: Time,
    /// Forwarding state and link delays are recomputed every `step`.
    pub step: Time,
    pub isl_rate_bps: u64,
    pub gsl_rate_bps: u64,
    /// Drop-tail queue of every link, packets.
    pub queue_packets: u32,
    pub seed: u64,
    /// Which satellites a station sends up to and receives down from: joint (any it sees,
    /// chosen with the route) or one per step (highest, first).
    pub attach: AttachPolicy,
}

impl LeoNetConfig {
    /// The network of the modern LEO study: `constellation` over `stations` for `duration`,
    /// routes and delays recomputed every second, 100 Mb/s ISLs, 10 Mb/s GSLs, 100-packet
    /// drop-tail queues, joint attachment, seed 1. Other settings by struct update, e.g.
    /// `LeoNetConfig { gsl_rate_bps: 2_000_000, ..LeoNetConfig::study(c, stations, duration) }`.
    pub fn study(constellation: Constellation, stations: Vec<Place>, duration: Time) -> Self {
        LeoNetConfig {
            constellation,
            stations,
            duration,
            step: crate::sim::SEC,
            isl_rate_bps: 100_000_000,
            gsl_rate_bps: 10_000_000,
            queue_packets: 100,
            seed: 1,
            attach: AttachPolicy::Joint,
        }
    }
}

/// Why a constellation network could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LeoNetError {
    #[error("constellation network: {0}")]
    Config(String),
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// Counts of a run's route swaps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Steps applied.
    pub steps: u64,
    /// Route entries changed (all of them at the first step).
    pub changes: u64,
    /// Of which at the first step (setting every route up).
    pub initial: u64,
}

/// The network, its simulation, and the forwarding state it applies.
pub struct LeoNet {
    pub sim: Sim,
    constellation: Constellation,
    satellites: usize,
    stations: Vec<Vec3>,
    /// Sim link of each (from node, to node), node ids as in the forwarding state.
    links: BTreeMap<(u32, u32), LinkId>,
    fc: FstateComputer,
    prev: ForwardingState,
    cur: ForwardingState,
    step: Time,
    steps: u64,
    next_k: u64,
    pub routes: RouteStats,
    /// ISL samples, one per step from the second on (see [`IslSample`]).
    pub isl_samples: Vec<IslSample>,
    /// Per ISL direction (as [`LeoNet::isl_links`]): bytes transmitted at the last sample, and
    /// the longest queueing delay seen at a sample (ns).
    isl_seen: Vec<(LinkId, u64, u64)>,
    isl_rate_bps: u64,
    last_sample: Time,
    attach: AttachPolicy,
    /// Hosts behind stations ([`LeoNet::add_host`]): (host node, its station).
    hosts: Vec<(NodeId, usize)>,
}

/// The ISLs over one step: traffic since the previous step, and the queues at the step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IslSample {
    /// End of the interval (s).
    pub t_s: f64,
    /// ISL directions that carried traffic in the interval.
    pub links_used: u32,
    /// Utilisation (bits transmitted / (rate × interval)), mean over the ISL directions used
    /// and the largest.
    pub mean_utilisation: f64,
    pub max_utilisation: f64,
    /// ISL directions with packets waiting at the step, and their queueing delay (the backlog
    /// ahead of a packet arriving then, ms): mean over those and the largest.
    pub links_queued: u32,
    pub mean_queue_ms: f64,
    pub max_queue_ms: f64,
    /// Bytes waiting in all ISL queues at the step.
    pub queued_bytes: u64,
}

/// One ISL direction over the whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct IslLinkSummary {
    /// `sat-A->sat-B`.
    pub name: String,
    pub bytes: u64,
    /// Bits transmitted / (rate × duration).
    pub utilisation: f64,
    /// Longest queueing delay seen at a step (ms).
    pub max_queue_ms: f64,
    pub queue_drops: u64,
}

/// Piecewise-constant delay points of one link, filled step by step.
#[derive(Default)]
struct Track {
    points: Vec<(u64, u64)>,
}

impl Track {
    fn at(&mut self, t: u64, d: u64) {
        match self.points.last() {
            None => self.points.push((0, d)),
            Some(&(_, last)) if last != d => self.points.push((t, d)),
            _ => {}
        }
    }
}

impl LeoNet {
    /// Builds the network: nodes `0..N` are the satellites, then one per ground station (named
    /// as the places); ISLs and GSLs up at any step of the run become links.
    pub fn build(cfg: &LeoNetConfig) -> Result<LeoNet, LeoNetError> {
        if cfg.step == 0 || cfg.duration == 0 {
            return Err(LeoNetError::Config(
                "step and duration must be positive".into(),
            ));
        }
        if cfg.stations.len() < 2 {
            return Err(LeoNetError::Config(
                "at least two ground stations are needed".into(),
            ));
        }
        let c = &cfg.constellation;
        let steps = cfg.duration / cfg.step;
        let stations: Vec<Vec3> = cfg.stations.iter().map(Place::position).collect();
        let mask = c.elevation_mask_deg();
        let mut isl: BTreeMap<(u32, u32), Track> = BTreeMap::new();
        let mut gsl: BTreeMap<(u32, u32), Track> = BTreeMap::new();
        let mut snap = Snapshot::default();
        let mut seen = Vec::new();
        let n = c.count() as u32;
        for k in 0..=steps {
            let t = k * cfg.step;
            snap.rebuild(c, t as f64 / 1e9);
            for &(a, b) in &snap.edges {
                let d = snap.positions[a as usize].dist(snap.positions[b as usize])
                    / constellation::geo::C_KM_S;
                isl.entry((a, b))
                    .or_default()
                    .at(t, (d * 1e9).round() as u64);
            }
            for (g, &p) in stations.iter().enumerate() {
                visible(&snap.positions, p, mask, &mut seen);
                for &(s, d) in &seen {
                    gsl.entry((n + g as u32, s)).or_default().at(t, d);
                }
            }
        }
        let mut sim = Sim::new(cfg.seed);
        for i in 0..n {
            sim.add_node(&format!("sat-{i}"));
        }
        for p in &cfg.stations {
            sim.add_node(&p.name);
        }
        let mut links = BTreeMap::new();
        let link = |rate: u64, track: &Track| LinkConfig {
            delay: Delay::Trace {
                points: track.points.clone(),
                period_ns: None,
            },
            ..LinkConfig::simple(rate, 0, cfg.queue_packets)
        };
        for (&(a, b), tr) in isl.iter().chain(gsl.iter()) {
            let rate = if a >= n || b >= n {
                cfg.gsl_rate_bps
            } else {
                cfg.isl_rate_bps
            };
            let (na, nb) = (
                sim.node_name(NodeId(a)).to_string(),
                sim.node_name(NodeId(b)).to_string(),
            );
            let ab = sim.add_link(&format!("{na}->{nb}"), NodeId(a), NodeId(b), link(rate, tr))?;
            let ba = sim.add_link(&format!("{nb}->{na}"), NodeId(b), NodeId(a), link(rate, tr))?;
            links.insert((a, b), ab);
            links.insert((b, a), ba);
        }
        let n32 = n;
        let isl_seen = links
            .iter()
            .filter(|((a, b), _)| *a < n32 && *b < n32)
            .map(|(_, &l)| (l, 0, 0))
            .collect();
        Ok(LeoNet {
            isl_samples: Vec::new(),
            isl_seen,
            isl_rate_bps: cfg.isl_rate_bps,
            last_sample: 0,
            sim,
            constellation: c.clone(),
            satellites: n as usize,
            stations,
            links,
            fc: FstateComputer::new(),
            prev: ForwardingState::default(),
            cur: ForwardingState::default(),
            step: cfg.step,
            steps,
            next_k: 0,
            routes: RouteStats::default(),
            attach: cfg.attach,
            hosts: Vec::new(),
        })
    }

    /// Adds a host behind ground station `g`, joined to it by a terrestrial duplex link of
    /// `rate_bps` and one-way `delay` (queue as the network's links), before the run starts.
    /// The host sends everything through its station; every node reaches the host by its route
    /// to the station. Returns the host's node and its uplink (host → station).
    pub fn add_host(
        &mut self,
        g: usize,
        name: &str,
        rate_bps: u64,
        delay: Time,
        queue_packets: u32,
    ) -> Result<(NodeId, LinkId), LeoNetError> {
        if g >= self.stations.len() {
            return Err(LeoNetError::Config(format!(
                "a host behind station {g}, but there are {} stations",
                self.stations.len()
            )));
        }
        if self.routes.steps > 0 {
            return Err(LeoNetError::Config(
                "hosts are added before the run starts".into(),
            ));
        }
        let station = self.station(g);
        let host = self.sim.add_node(name);
        let cfg = LinkConfig::simple(rate_bps, delay, queue_packets);
        let sname = self.sim.node_name(station).to_string();
        let up = self
            .sim
            .add_link(&format!("{name}->{sname}"), host, station, cfg.clone())?;
        let down = self
            .sim
            .add_link(&format!("{sname}->{name}"), station, host, cfg)?;
        self.sim.set_route(station, host, down);
        for h in 0..self.stations.len() {
            self.sim.set_route(host, self.station(h), up);
        }
        for &(other, _) in &self.hosts {
            self.sim.set_route(host, other, up);
        }
        self.hosts.push((host, g));
        Ok((host, up))
    }

    /// The node of ground station `g`.
    pub fn station(&self, g: usize) -> NodeId {
        NodeId((self.satellites + g) as u32)
    }

    /// The number of satellites (nodes `0..satellites`).
    pub fn satellites(&self) -> usize {
        self.satellites
    }

    /// The ISL links (both directions), for utilisation and queueing.
    pub fn isl_links(&self) -> impl Iterator<Item = LinkId> + '_ {
        let n = self.satellites as u32;
        self.links
            .iter()
            .filter(move |((a, b), _)| *a < n && *b < n)
            .map(|(_, &l)| l)
    }

    /// Bytes all flows sent in `direction` on the stations' uplinks (each packet counted once,
    /// at its first hop).
    pub fn station_uplink_bytes(&self, direction: crate::packet::Direction) -> u64 {
        let n = self.satellites as u32;
        let fwd = direction == crate::packet::Direction::Forward;
        self.links
            .iter()
            .filter(|((a, _), _)| *a >= n)
            .filter_map(|(_, l)| self.sim.metrics.links.get(l))
            .flat_map(|m| m.by_flow.iter())
            .filter(|((_, f), _)| *f == fwd)
            .map(|(_, v)| v.bytes)
            .sum()
    }

    /// Packets dropped at full queues of the ISLs (`isl`) or of the GSLs.
    pub fn queue_drops(&self, isl: bool) -> u64 {
        let n = self.satellites as u32;
        self.links
            .iter()
            .filter(|((a, b), _)| (*a < n && *b < n) == isl)
            .filter_map(|(_, l)| self.sim.metrics.links.get(l))
            .map(|m| m.dropped_queue)
            .sum()
    }

    /// The forwarding state applied last.
    pub fn forwarding_state(&self) -> &ForwardingState {
        &self.prev
    }

    /// Runs the simulation to `end`, swapping in the forwarding state of each step on the way
    /// (the state of step `k` holds from `k·step`).
    pub fn run_until(&mut self, end: Time) {
        while self.next_k <= self.steps && self.next_k * self.step <= end {
            let t = self.next_k * self.step;
            if t > 0 {
                self.sim.run_until(t - 1);
            }
            self.apply(t);
            if t > 0 {
                self.sample_isls(t);
            }
            self.next_k += 1;
        }
        self.sim.run_until(end);
    }

    /// Appends the ISL sample of the interval ending at `t`.
    fn sample_isls(&mut self, t: Time) {
        let interval = t.saturating_sub(self.last_sample).max(1);
        self.last_sample = t;
        let capacity = self.isl_rate_bps as f64 * interval as f64 / 1e9;
        let mut x = IslSample {
            t_s: t as f64 / 1e9,
            ..IslSample::default()
        };
        let (mut util_sum, mut queue_sum) = (0.0, 0.0);
        for (link, last_bytes, max_q) in &mut self.isl_seen {
            let bytes = self
                .sim
                .metrics
                .links
                .get(link)
                .map_or(0, |m| m.transmitted.bytes);
            let sent = bytes - *last_bytes;
            *last_bytes = bytes;
            if sent > 0 {
                let u = sent as f64 * 8.0 / capacity;
                x.links_used += 1;
                util_sum += u;
                x.max_utilisation = x.max_utilisation.max(u);
            }
            let backlog = self
                .sim
                .links()
                .get(link.0 as usize)
                .map_or(0, |l| l.model.busy_until_ns().saturating_sub(t));
            if backlog > 0 {
                *max_q = (*max_q).max(backlog);
                let ms = backlog as f64 / 1e6;
                x.links_queued += 1;
                queue_sum += ms;
                x.max_queue_ms = x.max_queue_ms.max(ms);
                x.queued_bytes +=
                    (backlog as u128 * u128::from(self.isl_rate_bps) / 8_000_000_000) as u64;
            }
        }
        x.mean_utilisation = util_sum / f64::from(x.links_used.max(1));
        x.mean_queue_ms = queue_sum / f64::from(x.links_queued.max(1));
        self.isl_samples.push(x);
    }

    /// Every ISL direction that carried traffic, over the run so far (`duration` long).
    pub fn isl_summary(&self, duration: Time) -> Vec<IslLinkSummary> {
        let capacity = self.isl_rate_bps as f64 * duration.max(1) as f64 / 1e9;
        self.isl_seen
            .iter()
            .filter_map(|&(link, _, max_q)| {
                let m = self.sim.metrics.links.get(&link)?;
                let bytes = m.transmitted.bytes;
                (bytes > 0 || m.dropped_queue > 0).then(|| IslLinkSummary {
                    name: self
                        .sim
                        .links()
                        .get(link.0 as usize)
                        .map_or_else(String::new, |l| l.name.clone()),
                    bytes,
                    utilisation: bytes as f64 * 8.0 / capacity,
                    max_queue_ms: max_q as f64 / 1e6,
                    queue_drops: m.dropped_queue,
                })
            })
            .collect()
    }

    fn apply(&mut self, t: Time) {
        self.fc.step_attached(
            &self.constellation,
            t as f64 / 1e9,
            &self.stations,
            self.attach,
            &mut self.cur,
        );
        let (n, g) = (self.satellites, self.stations.len());
        let first = self.routes.steps == 0;
        for node in 0..n + g {
            for dest in 0..g {
                let next = match self.cur.next_hop(node, dest) {
                    Some(v) => v,
                    None => continue,
                };
                if !first && self.prev.next_hop(node, dest) == Some(next) {
                    continue;
                }
                if next == NO_HOP {
                    continue;
                }
                if let Some(&l) = self.links.get(&(node as u32, next)) {
                    self.sim
                        .set_route(NodeId(node as u32), self.station(dest), l);
                    self.routes.changes += 1;
                    // The hosts behind the destination are reached the same way.
                    for &(host, _) in self.hosts.iter().filter(|h| h.1 == dest) {
                        self.sim.set_route(NodeId(node as u32), host, l);
                    }
                }
            }
        }
        if first {
            self.routes.initial = self.routes.changes;
        }
        self.routes.steps += 1;
        std::mem::swap(&mut self.prev, &mut self.cur);
    }
}

/// The transport of a [`bulk_study`]'s flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StudyTransport {
    /// A TCP variant with the simulator's default options (the seeds' TCP).
    Tcp(crate::tcp::Variant),
    /// CUBIC: SACK-NewReno's loss recovery with CUBIC's window growth and reduction (RFC 9438:
    /// β = 0.7, fast convergence), all else as `Tcp(SackNewReno)`, so the two differ only in
    /// the window rule.
    Cubic,
    /// The STP agent with the engine's default configuration, over IP framing.
    Stp,
}

/// A bulk-transfer study on a constellation network: `flows` flows of `transport`, flow `f`
/// from station `f mod G` to station `(f + G/2) mod G`, started over the first second, run for
/// the configuration's duration.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkStudy {
    /// Goodput of each flow (b/s), in flow order.
    pub goodput_bps: Vec<f64>,
    /// Bytes each flow's receiver got, and when a sized flow's last byte arrived.
    pub delivered_bytes: Vec<u64>,
    pub completed_at: Vec<Option<Time>>,
    pub events: u64,
    /// Route entries changed after the first step (the paths changing under the flows).
    pub route_changes: u64,
    /// Packets that met a node without a route (an end without a satellite).
    pub undeliverable: u64,
    /// Bytes the stations sent up, in the flows' data direction and in their reverse
    /// (acknowledgement) direction, summed over the flows.
    pub up_forward_bytes: u64,
    pub up_reverse_bytes: u64,
    /// Packets dropped at full queues of ISLs and of GSLs.
    pub isl_queue_drops: u64,
    pub gsl_queue_drops: u64,
    /// Packets the receiving ends got, and of them those that arrived after a packet of the
    /// same flow sent later (overtaken: reordering, from path changes).
    pub received_packets: u64,
    pub reordered_packets: u64,
    /// The same per flow, in flow order.
    pub received_per_flow: Vec<u64>,
    pub reordered_per_flow: Vec<u64>,
    /// Stations (indices into the configuration's) of each flow: (sender, receiver).
    pub endpoints: Vec<(usize, usize)>,
    /// Delays per flow per second of the run (`[flow][second]`), for RTT over time.
    pub seconds: Vec<Vec<FlowSecond>>,
    /// The ISLs at every step, and each ISL direction used over the run.
    pub isl: Vec<IslSample>,
    pub isl_links: Vec<IslLinkSummary>,
    /// Wall time of building the network and of the run (s).
    pub build_s: f64,
    pub run_s: f64,
}

impl BulkStudy {
    /// The utilisation over the run of the busiest ISL direction used (0 when none was).
    pub fn busiest_isl_utilisation(&self) -> f64 {
        self.isl_links
            .iter()
            .map(|l| l.utilisation)
            .fold(0.0, f64::max)
    }

    /// The longest ISL queueing delay at any step, in ms (0 without ISLs).
    pub fn longest_isl_queue_ms(&self) -> f64 {
        self.isl.iter().map(|x| x.max_queue_ms).fold(0.0, f64::max)
    }
}

/// One flow over one second of a [`bulk_study`]: the one-way delays (sending station's uplink
/// to receiving agent, queueing included) of the packets that arrived in it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowSecond {
    /// Data direction: sum of delays (ms) and packets.
    pub fwd_ms_sum: f64,
    pub fwd_packets: u32,
    /// Reverse (acknowledgement) direction.
    pub rev_ms_sum: f64,
    pub rev_packets: u32,
}

impl FlowSecond {
    /// The round-trip time of the path in this second: mean one-way delay of the data plus
    /// that of the acknowledgements (ms; a receiver's ACK delay not included). None without
    /// packets both ways.
    pub fn rtt_ms(&self) -> Option<f64> {
        (self.fwd_packets > 0 && self.rev_packets > 0).then(|| {
            self.fwd_ms_sum / f64::from(self.fwd_packets)
                + self.rev_ms_sum / f64::from(self.rev_packets)
        })
    }
}

/// What the observers of a study share: send times of packets in flight (noted as they enter
/// the sending station's uplink), per-flow per-second delays, per-flow reordering.
#[derive(Default)]
struct StudyLog {
    sent: std::collections::HashMap<u64, Time>,
    /// `[flow][second]`.
    seconds: Vec<Vec<FlowSecond>>,
    /// Per flow: data packets received, of them overtaken by one sent later, highest id seen.
    received: Vec<u64>,
    reordered: Vec<u64>,
    highest: Vec<Option<u64>>,
}

/// Wraps an agent of flow index `flow`: notes the delay of each packet it gets and, for the
/// data direction, whether a packet sent later arrived first (packet ids grow in sending
/// order; a link keeps its packets in order, so only a path change reorders).
struct Observe {
    inner: Box<dyn crate::sim::Agent>,
    flow: usize,
    /// From then on the agent gets no packets or timers (a sender stops sending).
    stop: Option<Time>,
    log: std::rc::Rc<std::cell::RefCell<StudyLog>>,
    /// The flow's data receiver: its data-direction packets are counted (a split flow's
    /// gateway also gets data, from the origin, which is not the flow's delivery).
    receiver: bool,
}

impl crate::sim::Agent for Observe {
    fn start(&mut self, ctx: &mut crate::sim::Ctx<'_>) {
        self.inner.start(ctx)
    }
    fn on_packet(&mut self, ctx: &mut crate::sim::Ctx<'_>, pkt: crate::packet::Packet) {
        {
            let mut log = self.log.borrow_mut();
            let log = &mut *log;
            let fwd = pkt.direction == crate::packet::Direction::Forward;
            if let Some(sent) = log.sent.remove(&pkt.id) {
                let ms = ctx.now.saturating_sub(sent) as f64 / 1e6;
                let sec = (ctx.now / crate::sim::SEC) as usize;
                if let Some(b) = log.seconds.get_mut(self.flow).and_then(|f| f.get_mut(sec)) {
                    if fwd {
                        b.fwd_ms_sum += ms;
                        b.fwd_packets += 1;
                    } else {
                        b.rev_ms_sum += ms;
                        b.rev_packets += 1;
                    }
                }
            }
            if fwd && self.receiver {
                if let (Some(n), Some(late), Some(h)) = (
                    log.received.get_mut(self.flow),
                    log.reordered.get_mut(self.flow),
                    log.highest.get_mut(self.flow),
                ) {
                    *n += 1;
                    *late += u64::from(h.is_some_and(|h| pkt.id < h));
                    *h = Some(h.map_or(pkt.id, |h| h.max(pkt.id)));
                }
            }
        }
        if self.stop.is_none_or(|t| ctx.now < t) {
            self.inner.on_packet(ctx, pkt)
        }
    }
    fn on_timer(&mut self, ctx: &mut crate::sim::Ctx<'_>, token: u64) {
        if self.stop.is_none_or(|t| ctx.now < t) {
            self.inner.on_timer(ctx, token)
        }
    }
    fn finish(&mut self, ctx: &mut crate::sim::Ctx<'_>) {
        self.inner.finish(ctx)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.inner.as_any()
    }
}

/// One flow of a [`flow_study`]: between two of the configuration's stations (indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StudyFlow {
    /// Sending and receiving station.
    pub src: usize,
    pub dst: usize,
    pub transport: StudyTransport,
    /// When the flow starts.
    pub start: Time,
    /// Bytes to transfer; None: a persistent flow that sends until the run ends.
    pub bytes: Option<u64>,
    /// When the sender stops (it gets no more ACKs or timers, so sends nothing; what is in
    /// flight still arrives). None: it sends until its bytes are done or the run ends.
    pub stop: Option<Time>,
    /// The sender runs on a host behind station `src` (a terrestrial link), not on the
    /// station itself.
    pub origin: Option<Origin>,
    /// Split at station `src`: a gateway there ends the origin's TCP (`transport`, a TCP
    /// variant or CUBIC) and relays the bytes into `hop` across the constellation to the
    /// receiver at `dst`. Needs `origin`.
    pub split: Option<Split>,
}

/// A flow's origin host: its terrestrial link to the flow's sending station.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub rate_bps: u64,
    /// One-way delay.
    pub delay: Time,
}

/// A split flow's gateway at its sending station ([`crate::gateway::SplitGateway`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The transport across the constellation.
    pub hop: StudyTransport,
    /// Bytes the gateway holds (written into the hop, not yet acknowledged).
    pub relay_buffer: u64,
}

/// Runs a [`BulkStudy`]: `flows` persistent flows of `transport`, flow `f` from station
/// `f mod G` to station `(f + G/2) mod G`, started over the first second.
pub fn bulk_study(
    cfg: &LeoNetConfig,
    flows: usize,
    transport: StudyTransport,
) -> Result<BulkStudy, LeoNetError> {
    let g = cfg.stations.len();
    let half = (g / 2).max(1);
    let list: Vec<StudyFlow> = (0..flows)
        .map(|f| StudyFlow {
            src: f % g.max(1),
            dst: (f + half) % g.max(1),
            transport,
            start: crate::sim::SEC * f as u64 / flows.max(1) as u64,
            bytes: None,
            stop: None,
            origin: None,
            split: None,
        })
        .collect();
    flow_study(cfg, &list)
}

/// Runs the flows `list` on the constellation network of `cfg` (flow `f` is `FlowId(f + 1)`),
/// measuring them as [`bulk_study`] does; `goodput_bps` counts over the whole run.
pub fn flow_study(cfg: &LeoNetConfig, list: &[StudyFlow]) -> Result<BulkStudy, LeoNetError> {
    let flows = list.len();
    if let Some(f) = list
        .iter()
        .find(|f| f.src >= cfg.stations.len() || f.dst >= cfg.stations.len())
    {
        return Err(LeoNetError::Config(format!(
            "a flow names station {} or {}, but there are {} stations",
            f.src,
            f.dst,
            cfg.stations.len()
        )));
    }
    use crate::gateway::{GatewayEnd, GatewayEndSpec, GatewaySpec, Hop, SplitGateway};
    use crate::packet::{Addr, FlowId};
    use crate::sim::Agent;
    use crate::stp_agent::{Framing, StpAgent, StpRole};
    use crate::tcp::{TcpAgent, TcpConfig, Variant};
    let started = std::time::Instant::now();
    let mut leo = LeoNet::build(cfg)?;
    let build_s = started.elapsed().as_secs_f64();
    let tcp_of = |transport: StudyTransport| match transport {
        StudyTransport::Tcp(v) => TcpConfig::with_variant(v),
        StudyTransport::Cubic => TcpConfig {
            increase: crate::tcp::IncreasePolicy::Cubic,
            ..TcpConfig::with_variant(Variant::SackNewReno)
        },
        StudyTransport::Stp => TcpConfig::with_variant(Variant::NewReno),
    };
    let stp_err = |e: stp::ConfigError| LeoNetError::Config(e.to_string());
    let secs = cfg.duration.div_ceil(crate::sim::SEC) as usize + 1;
    let log = std::rc::Rc::new(std::cell::RefCell::new(StudyLog {
        sent: Default::default(),
        seconds: vec![vec![FlowSecond::default(); secs]; flows],
        received: vec![0; flows],
        reordered: vec![0; flows],
        highest: vec![None; flows],
    }));
    let observed =
        |flow: usize, stop: Option<Time>, receiver: bool, a: Box<dyn Agent>| -> Box<dyn Agent> {
            Box::new(Observe {
                inner: a,
                flow,
                stop,
                log: std::rc::Rc::clone(&log),
                receiver,
            })
        };
    // Send times: as packets enter their station's uplink (stations only send their own).
    let n = leo.satellites as u32;
    let mut uplinks: Vec<LinkId> = leo
        .links
        .iter()
        .filter(|((a, _), _)| *a >= n)
        .map(|(_, &l)| l)
        .collect();
    // Origin hosts (added in flow order): an end-to-end flow's delays count from its host's
    // uplink, a split flow's from its station's (the hop's packets; the gateway is observed).
    let mut origins = Vec::with_capacity(flows);
    for (f, spec) in list.iter().enumerate() {
        if spec.split.is_some() && spec.origin.is_none() {
            return Err(LeoNetError::Config(format!(
                "flow {f} is split but has no origin host"
            )));
        }
        origins.push(match spec.origin {
            Some(o) => {
                let name = format!("origin-{f}");
                let (host, up) =
                    leo.add_host(spec.src, &name, o.rate_bps, o.delay, cfg.queue_packets)?;
                if spec.split.is_none() {
                    uplinks.push(up);
                }
                Some(host)
            }
            None => None,
        });
    }
    for l in uplinks {
        let log = std::rc::Rc::clone(&log);
        leo.sim.trace_link(
            l,
            Box::new(move |now, pkt| {
                log.borrow_mut().sent.entry(pkt.id).or_insert(now);
            }),
        );
    }
    let err = |e: crate::tcp::TcpConfigError| LeoNetError::Config(e.to_string());
    let mut endpoints = Vec::with_capacity(flows);
    for (f, spec) in list.iter().enumerate() {
        let (src, dst, transport) = (spec.src, spec.dst, spec.transport);
        let tcp = tcp_of(transport);
        let port = 5000u16.wrapping_add((2 * f) as u16);
        let peer = Addr {
            node: leo.station(dst),
            port: port + 1,
        };
        let flow = FlowId(f as u32 + 1);
        let at = spec.start;
        let from = origins[f].unwrap_or(leo.station(src));
        if let Some(split) = spec.split {
            if transport == StudyTransport::Stp {
                return Err(LeoNetError::Config(format!(
                    "flow {f}: a split flow's origin speaks TCP, not STP"
                )));
            }
            let (gw_in, gw_out) = (
                20_000u16.wrapping_add((2 * f) as u16),
                20_001u16.wrapping_add((2 * f) as u16),
            );
            let seed = cfg.seed ^ ((f as u64) << 8) ^ 0xa5a5;
            let (hop, sink): (Hop, Box<dyn Agent>) = match split.hop {
                StudyTransport::Stp => {
                    let conf = stp::EndpointConfig::default();
                    // The gateway side of the hop, as the daemons' (pep::stream's header and
                    // verdict); the origin reads at once.
                    let sink = GatewayEnd::new(GatewayEndSpec {
                        flow,
                        port: port + 1,
                        origin: peer,
                        config: conf.clone(),
                        seed: seed ^ 2,
                        framing: Framing::Ip,
                        read_rate_bps: None,
                        reader_buffer: u64::MAX,
                    });
                    (Hop::Stp(conf), Box::new(sink))
                }
                t => {
                    let c = tcp_of(t);
                    let sink = TcpAgent::sink(port + 1, c.clone()).map_err(err)?;
                    (Hop::Tcp(c), Box::new(sink))
                }
            };
            let gw = SplitGateway::new(GatewaySpec {
                flow,
                in_port: gw_in,
                out_port: gw_out,
                sink: peer,
                in_config: tcp.clone(),
                hop,
                relay_buffer: split.relay_buffer,
                seed,
                framing: Framing::Ip,
            });
            let to_gw = Addr {
                node: leo.station(src),
                port: gw_in,
            };
            let s = TcpAgent::bulk_sender(flow, port, to_gw, spec.bytes, tcp).map_err(err)?;
            leo.sim
                .add_agent(from, port, at, observed(f, spec.stop, false, Box::new(s)))?;
            leo.sim.add_agent(
                leo.station(src),
                gw_in,
                at,
                observed(f, None, false, Box::new(gw)),
            )?;
            leo.sim.add_agent(
                leo.station(dst),
                port + 1,
                at,
                observed(f, None, true, sink),
            )?;
            endpoints.push((src, dst));
            continue;
        }
        let (s, k): (Box<dyn Agent>, Box<dyn Agent>) = match transport {
            StudyTransport::Tcp(_) | StudyTransport::Cubic => (
                Box::new(
                    TcpAgent::bulk_sender(flow, port, peer, spec.bytes, tcp.clone())
                        .map_err(err)?,
                ),
                Box::new(TcpAgent::sink(port + 1, tcp.clone()).map_err(err)?),
            ),
            StudyTransport::Stp => {
                let role = StpRole::Sender {
                    peer,
                    bytes: spec.bytes,
                };
                let seed = cfg.seed ^ ((f as u64) << 8);
                let conf = stp::EndpointConfig::default();
                (
                    Box::new(
                        StpAgent::new(port, flow, role, conf.clone(), seed ^ 1)
                            .map_err(stp_err)?
                            .with_framing(Framing::Ip),
                    ),
                    Box::new(
                        StpAgent::new(port + 1, flow, StpRole::Sink, conf, seed ^ 2)
                            .map_err(stp_err)?
                            .with_framing(Framing::Ip),
                    ),
                )
            }
        };
        leo.sim
            .add_agent(from, port, at, observed(f, spec.stop, false, s))?;
        leo.sim
            .add_agent(leo.station(dst), port + 1, at, observed(f, None, true, k))?;
        endpoints.push((src, dst));
    }
    leo.run_until(cfg.duration);
    leo.sim.finish();
    let secs = cfg.duration as f64 / 1e9;
    let isl_links = leo.isl_summary(cfg.duration);
    let isl = std::mem::take(&mut leo.isl_samples);
    let log = std::mem::take(&mut *log.borrow_mut());
    Ok(BulkStudy {
        goodput_bps: (0..flows)
            .map(|f| {
                leo.sim
                    .metrics
                    .flows
                    .get(&FlowId(f as u32 + 1))
                    .map_or(0.0, |m| m.delivered_bytes as f64 * 8.0 / secs)
            })
            .collect(),
        delivered_bytes: (0..flows)
            .map(|f| {
                leo.sim
                    .metrics
                    .flows
                    .get(&FlowId(f as u32 + 1))
                    .map_or(0, |m| m.delivered_bytes)
            })
            .collect(),
        completed_at: (0..flows)
            .map(|f| {
                leo.sim
                    .metrics
                    .flows
                    .get(&FlowId(f as u32 + 1))
                    .and_then(|m| m.completed_ns)
            })
            .collect(),
        events: leo.sim.events_processed,
        route_changes: leo.routes.changes - leo.routes.initial,
        undeliverable: leo.sim.undeliverable,
        up_forward_bytes: leo.station_uplink_bytes(crate::packet::Direction::Forward),
        up_reverse_bytes: leo.station_uplink_bytes(crate::packet::Direction::Reverse),
        isl_queue_drops: leo.queue_drops(true),
        gsl_queue_drops: leo.queue_drops(false),
        received_packets: log.received.iter().sum(),
        reordered_packets: log.reordered.iter().sum(),
        received_per_flow: log.received,
        reordered_per_flow: log.reordered,
        endpoints,
        seconds: log.seconds,
        isl,
        isl_links,
        build_s,
        run_s: started.elapsed().as_secs_f64() - build_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Addr, Direction, FlowId, Packet, Payload};
    use crate::sim::{Agent, Ctx, MS, SEC};
    use crate::tcp::{TcpAgent, TcpConfig, Variant};
    use std::any::Any;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Sends a 100-byte packet carrying its send time every 100 ms.
    struct Probe {
        to: Addr,
    }
    impl Agent for Probe {
        fn start(&mut self, ctx: &mut Ctx<'_>) {
            ctx.timer_at(ctx.now, 0);
        }
        fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
        fn on_timer(&mut self, ctx: &mut Ctx<'_>, _token: u64) {
            let sent = ctx.now.to_le_bytes().to_vec();
            ctx.send(
                7000,
                self.to,
                FlowId(99),
                Direction::Forward,
                100,
                Payload::Stp(sent),
            );
            ctx.timer_at(ctx.now + 100 * MS, 0);
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// Records (send time, one-way delay) of the probes it gets.
    struct ProbeSink {
        got: Rc<RefCell<Vec<(Time, Time)>>>,
    }
    impl Agent for ProbeSink {
        fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
            if let Payload::Stp(b) = &pkt.payload {
                if let Ok(x) = <[u8; 8]>::try_from(b.as_slice()) {
                    let sent = u64::from_le_bytes(x);
                    self.got.borrow_mut().push((sent, ctx.now - sent));
                }
            }
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn net(stations: &[&str], secs: u64) -> LeoNet {
        let places = stations
            .iter()
            .map(|n| constellation::geo::place(n).unwrap())
            .collect();
        let starlink = Constellation::preset("starlink-550").unwrap();
        LeoNet::build(&LeoNetConfig {
            gsl_rate_bps: 20_000_000,
            ..LeoNetConfig::study(starlink, places, secs * SEC)
        })
        .unwrap()
    }

    /// A NewReno transfer New York → Los Angeles across starlink-550 for 20 s: it fills most
    /// of the 20 Mb/s GSL, and the routes change on the way (satellites move) without breaking
    /// it.
    #[test]
    fn tcp_runs_across_the_constellation_while_routes_change() {
        let mut leo = net(&["New York", "Los Angeles", "London"], 20);
        let (ny, la) = (leo.station(0), leo.station(1));
        let cfg = TcpConfig::with_variant(Variant::NewReno);
        let s = TcpAgent::bulk_sender(
            FlowId(1),
            5000,
            Addr {
                node: la,
                port: 5001,
            },
            None,
            cfg.clone(),
        )
        .unwrap();
        let k = TcpAgent::sink(5001, cfg).unwrap();
        leo.sim.add_agent(ny, 5000, 0, Box::new(s)).unwrap();
        leo.sim.add_agent(la, 5001, 0, Box::new(k)).unwrap();
        // Probes London → New York: their one-way delay is the forwarding state's path delay
        // at the step they were sent in (plus little queueing behind the transfer's ACKs).
        let london = leo.station(2);
        let got = Rc::new(RefCell::new(Vec::new()));
        let to = Addr {
            node: ny,
            port: 7000,
        };
        leo.sim
            .add_agent(london, 7000, 0, Box::new(Probe { to }))
            .unwrap();
        let sink = ProbeSink {
            got: Rc::clone(&got),
        };
        leo.sim.add_agent(ny, 7000, 0, Box::new(sink)).unwrap();
        let mut expected = Vec::new();
        for k in 0..20 {
            leo.run_until(k * SEC);
            let fs = leo.forwarding_state();
            expected.push(fs.gs_delay_ns[2 * 3]); // station 2 (London) to station 0 (NY)
        }
        leo.run_until(20 * SEC);
        let got = got.borrow();
        assert!(got.len() >= 190, "{} probes arrived", got.len());
        for &(sent, d) in got.iter() {
            let e = expected[(sent / SEC) as usize];
            // Within a step the satellites move: the path's delay drifts by well under 1 ms.
            assert!(
                d + MS >= e && d <= e + 3 * MS,
                "probe at {sent} ns: {d} ns, path {e} ns"
            );
        }
        leo.sim.finish();
        assert_eq!(leo.routes.steps, 21);
        // The first step sets every route up; a static network would change none after it.
        assert_eq!(leo.routes.initial, ((leo.satellites() + 3) * 3 - 3) as u64);
        assert!(
            leo.routes.changes > leo.routes.initial + 100,
            "{} route changes",
            leo.routes.changes
        );
        let delivered = leo.sim.metrics.flows[&FlowId(1)].delivered_bytes;
        let goodput = delivered as f64 * 8.0 / 20.0;
        assert!(goodput > 0.5 * 20e6, "goodput {goodput} b/s");
        assert_eq!(leo.sim.undeliverable, 0);
    }

    /// The study's three transports run over a small network and deliver.
    #[test]
    fn bulk_study_runs_tcp_and_stp() {
        let stations = ["New York", "Los Angeles", "London", "Tokyo"]
            .iter()
            .map(|n| constellation::geo::place(n).unwrap())
            .collect();
        let starlink = Constellation::preset("starlink-550").unwrap();
        let cfg = LeoNetConfig {
            gsl_rate_bps: 5_000_000,
            ..LeoNetConfig::study(starlink, stations, 5 * SEC)
        };
        for t in [
            StudyTransport::Tcp(Variant::NewReno),
            StudyTransport::Tcp(Variant::SackNewReno),
            StudyTransport::Cubic,
            StudyTransport::Stp,
        ] {
            let r = bulk_study(&cfg, 4, t).unwrap();
            assert_eq!(r.goodput_bps.len(), 4);
            for g in &r.goodput_bps {
                // Two flows share each station's 5 Mb/s uplink or downlink at most.
                assert!(*g > 0.5e6 && *g < 5e6, "{t:?}: {g}");
            }
            assert_eq!(r.undeliverable, 0);
            assert!(r.up_forward_bytes > 4 * 250_000 && r.up_reverse_bytes > 0);
            assert!(r.up_reverse_bytes < r.up_forward_bytes / 4);
            assert!(r.received_packets > 4 * 200 && r.reordered_packets < r.received_packets);
            // RTT over time: every flow has a path RTT in each second once it runs, no
            // shorter than light along the great circle and back, and no longer than that
            // plus two full 100-packet GSL queues at 5 Mb/s (240 ms each) and some ISL queueing.
            for (f, &(a, b)) in r.endpoints.iter().enumerate() {
                let light = 2.0 * cfg.stations[a].distance_km(&cfg.stations[b])
                    / constellation::geo::C_KM_S
                    * 1e3;
                for sec in 2..5 {
                    let rtt = r.seconds[f][sec].rtt_ms();
                    let rtt = rtt.unwrap_or_else(|| panic!("{t:?} flow {f} second {sec}"));
                    assert!(
                        rtt >= light && rtt <= light + 600.0,
                        "{t:?} flow {f} second {sec}: RTT {rtt:.1} ms, light {light:.1} ms"
                    );
                }
            }
            // One ISL sample per step after the first; utilisations are fractions of the rate.
            assert_eq!(r.isl.len(), 5);
            assert!(r.isl.iter().skip(1).all(|x| x.links_used > 0));
            assert!(r.isl.iter().all(|x| x.max_utilisation <= 1.0 + 1e-9));
            assert!(!r.isl_links.is_empty());
            for l in &r.isl_links {
                assert!(l.utilisation > 0.0 && l.utilisation <= 1.0, "{l:?}");
            }
            assert_eq!(
                r.reordered_per_flow.iter().sum::<u64>(),
                r.reordered_packets
            );
        }
    }

    /// The modern study at full size, for its speed figure in an optimised build:
    /// `cargo test -p netsim --lib leo_net::tests::modern_study_speed -- --ignored --nocapture`
    /// (`LEO_STUDY_TRANSPORT=stp|sack|cubic` for STP, SACK-NewReno or CUBIC, `LEO_STUDY_SECONDS` to shorten)
    /// (`satstp bench leo --network` runs the same [`bulk_study`]).
    #[test]
    #[ignore]
    fn modern_study_speed() {
        let secs: u64 = std::env::var("LEO_STUDY_SECONDS")
            .ok()
            .and_then(|x| x.parse().ok())
            .unwrap_or(200);
        let cfg = LeoNetConfig::study(
            Constellation::preset("starlink-550").unwrap(),
            constellation::geo::stations(100),
            secs * SEC,
        );
        let transport = match std::env::var("LEO_STUDY_TRANSPORT").as_deref() {
            Ok("stp") => StudyTransport::Stp,
            Ok("sack") => StudyTransport::Tcp(Variant::SackNewReno),
            Ok("cubic") => StudyTransport::Cubic,
            _ => StudyTransport::Tcp(Variant::NewReno),
        };
        let r = bulk_study(&cfg, 100, transport).unwrap();
        let mut g = r.goodput_bps.clone();
        g.sort_by(f64::total_cmp);
        let mut rtt: Vec<f64> = r
            .seconds
            .iter()
            .flat_map(|f| f.iter().filter_map(FlowSecond::rtt_ms))
            .collect();
        rtt.sort_by(f64::total_cmp);
        let busiest = r.busiest_isl_utilisation();
        let longest = r.longest_isl_queue_ms();
        eprintln!(
            "{transport:?}, {secs} s: {} events, build {:.1} s, run {:.1} s, {:.0} events/s, {} route changes, \
             goodput min {:.2} median {:.2} max {:.2} total {:.1} Mb/s, {} without route; \
             {} of {} packets reordered; RTT per flow-second median {:.1} ms, 95th pct {:.1} ms; \
             {} ISL directions used, busiest {:.1} %, longest ISL queue {:.2} ms; drops ISL {} GSL {}; \
             reverse/forward bytes {:.4}",
            r.events,
            r.build_s,
            r.run_s,
            r.events as f64 / r.run_s,
            r.route_changes,
            g[0] / 1e6,
            g[50] / 1e6,
            g[99] / 1e6,
            g.iter().sum::<f64>() / 1e6,
            r.undeliverable,
            r.reordered_packets,
            r.received_packets,
            rtt.get(rtt.len() / 2).copied().unwrap_or(f64::NAN),
            rtt.get(rtt.len() * 95 / 100).copied().unwrap_or(f64::NAN),
            r.isl_links.len(),
            busiest * 100.0,
            longest,
            r.isl_queue_drops,
            r.gsl_queue_drops,
            r.up_reverse_bytes as f64 / r.up_forward_bytes.max(1) as f64,
        );
        assert!(r.events > 0);
    }
}
