//! The discrete-event core: virtual time in integer nanoseconds, a deterministic event queue
//! (ties broken by insertion order), nodes with static routes, simplex links (each a
//! [`linkmodel::Direction`], the link direction the emulators and memnet run too: this module only
//! turns its deliveries into arrival events), agents bound to (node, port) addresses, one seeded
//! random stream per component.

use crate::metrics::{LinkTally, Metrics};
use crate::packet::{Addr, Direction, FlowId, LinkId, NodeId, Packet, Payload};
use linkmodel::{Direction as LinkDirection, Fate, LinkConfig, LinkConfigError};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

pub use crate::clock::{Time, MS, SEC};

/// A hook that sees every packet a link transmits (used for pcap output).
pub type Tracer = dyn FnMut(Time, &Packet);

/// Identifies an agent within a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(pub u32);

/// Something attached to a node that sends and receives packets: a transport endpoint with its
/// application, a gateway, a traffic source.
pub trait Agent: Any {
    /// Called once when the simulation starts (or when the agent is added to a running one).
    fn start(&mut self, _ctx: &mut Ctx<'_>) {}
    /// A packet addressed to one of the agent's ports arrived.
    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet);
    /// A timer the agent set fired. Timers cannot be cancelled: agents ignore stale tokens.
    fn on_timer(&mut self, _ctx: &mut Ctx<'_>, _token: u64) {}
    /// Called when the run ends, to flush metrics.
    fn finish(&mut self, _ctx: &mut Ctx<'_>) {}
    /// For reading an agent's state after a run.
    fn as_any(&self) -> &dyn Any;
}

/// What an agent may do while handling an event.
pub struct Ctx<'a> {
    pub now: Time,
    /// The node the agent sits on.
    pub node: NodeId,
    /// The agent's own random stream.
    pub rng: &'a mut ChaCha8Rng,
    pub metrics: &'a mut Metrics,
    out: &'a mut Vec<Packet>,
    timers: &'a mut Vec<(Time, u64)>,
    binds: &'a mut Vec<u16>,
    next_packet_id: &'a mut u64,
    /// Datagram buffers given back by receivers, for senders to build in (see
    /// [`Ctx::datagram_buffer`]).
    buffers: &'a mut Vec<Vec<u8>>,
}

/// Datagram buffers the simulator keeps for reuse (more are freed).
const KEPT_BUFFERS: usize = 256;
/// The capacity of a new datagram buffer (any STP datagram fits).
const BUFFER_CAPACITY: usize = 2048;

impl Ctx<'_> {
    /// Sends a packet from `src` (one of the agent's ports on this node).
    pub fn send(
        &mut self,
        src_port: u16,
        dst: Addr,
        flow: FlowId,
        direction: Direction,
        size: u32,
        payload: Payload,
    ) {
        let id = *self.next_packet_id;
        *self.next_packet_id += 1;
        self.out.push(Packet {
            id,
            src: Addr {
                node: self.node,
                port: src_port,
            },
            dst,
            flow,
            direction,
            size,
            payload,
            retransmission: false,
        });
    }

    /// Marks the packet sent last as a retransmission (see [`Packet::retransmission`]).
    pub fn mark_retransmission(&mut self) {
        if let Some(p) = self.out.last_mut() {
            p.retransmission = true;
        }
    }

    /// Asks for `on_timer(token)` at time `at` (immediately if in the past).
    pub fn timer_at(&mut self, at: Time, token: u64) {
        self.timers.push((at.max(self.now), token));
    }

    /// Binds another port on this node to the agent (gateways listen on several).
    pub fn bind(&mut self, port: u16) {
        self.binds.push(port);
    }

    /// An empty buffer to build a datagram in: one a receiver gave back ([`Self::recycle`]) if
    /// any, so that a datagram crossing the simulator costs no allocation.
    pub fn datagram_buffer(&mut self) -> Vec<u8> {
        self.buffers
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUFFER_CAPACITY))
    }

    /// Gives back the buffer of a datagram that was handled, for [`Self::datagram_buffer`].
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.buffers.len() < KEPT_BUFFERS && buf.capacity() >= BUFFER_CAPACITY {
            buf.clear();
            self.buffers.push(buf);
        }
    }
}

#[derive(Debug)]
enum EventKind {
    /// A packet reaches `node`, over `via` (None: handed to its own node).
    Arrive {
        node: NodeId,
        pkt: Packet,
        via: Option<LinkId>,
    },
    Timer {
        agent: AgentId,
        token: u64,
    },
    Start {
        agent: AgentId,
    },
    /// A managed link (`crate::ackmgmt`) may send its next waiting packet.
    Service {
        link: LinkId,
    },
}

/// A scheduled event as the heap holds it: its time, insertion order and the slot of its
/// [`EventKind`] in `Sim::pending`. Keeping the kind (which may carry a packet) out of the
/// heap makes each heap move 24 bytes instead of a whole packet.
#[derive(Debug)]
struct Event {
    at: Time,
    seq: u64,
    slot: u32,
}

impl Event {
    /// Time, then insertion order, as one number: compared without a branch per field (the heap
    /// compares at every level of every push and pop).
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.at) << 64) | u128::from(self.seq)
    }
}

/// Marks an [`Event`] whose slot is a link's lane of arrivals (the low bits are the link id)
/// rather than a slot of `Sim::pending`.
const LANE: u32 = 1 << 31;

/// A packet on its way across a link, held in the link's lane until it arrives at the far end.
#[derive(Debug)]
struct Arrival {
    at: Time,
    seq: u64,
    pkt: Packet,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: the heap pops the earliest time, then the earliest insertion.
        other.key().cmp(&self.key())
    }
}

/// A node: a name, and the outgoing link towards every other node.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    routes: HashMap<NodeId, LinkId, BuildNodeHasher>,
}

/// Hashes node ids and addresses (small integers, not attacker-chosen) with a multiplication
/// per field instead of SipHash: a route is looked up at every hop of every packet, a port at
/// every delivery.
#[derive(Default, Clone, Copy)]
pub(crate) struct NodeHasher(u64);

impl std::hash::Hasher for NodeHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u16(&mut self, x: u16) {
        self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(crate) type BuildNodeHasher = std::hash::BuildHasherDefault<NodeHasher>;

/// One direction of a link, with the model that decides packet fates.
pub struct SimLink {
    pub name: String,
    pub from: NodeId,
    pub to: NodeId,
    pub model: LinkDirection,
    rng: ChaCha8Rng,
}

/// Why a topology or simulation could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("link {name}: {source}")]
    Link {
        name: String,
        source: LinkConfigError,
    },
    #[error("no route from node {from} to node {to}")]
    NoRoute { from: String, to: String },
    #[error("port {port} on node {node} is already bound")]
    PortInUse { node: String, port: u16 },
    #[error("unknown node {0}")]
    UnknownNode(String),
}

/// A simulation: topology, agents, event queue, metrics.
pub struct Sim {
    now: Time,
    seed: u64,
    events: BinaryHeap<Event>,
    /// The kinds of the scheduled events, by slot, and the free slots.
    pending: Vec<Option<EventKind>>,
    /// Per link, the packets crossing it in arrival order: a link delivers in order (but for
    /// duplicates and the reordering impairment), so its arrivals need not each pass through the
    /// heap, which holds one entry per non-empty lane, its head (slot `LANE | link`). An arrival
    /// that would come before the lane's last goes to the heap as any event. Time and insertion
    /// order decide as before: every event keeps the sequence number it had, and a lane's keys
    /// increase, so events are taken in exactly the order a heap of them all would give.
    lanes: Vec<VecDeque<Arrival>>,
    free_slots: Vec<u32>,
    next_seq: u64,
    nodes: Vec<Node>,
    links: Vec<SimLink>,
    agents: Vec<Option<Box<dyn Agent>>>,
    agent_rng: Vec<ChaCha8Rng>,
    agent_node: Vec<NodeId>,
    ports: HashMap<Addr, AgentId, BuildNodeHasher>,
    next_packet_id: u64,
    pub metrics: Metrics,
    /// What crossed each link (by link id) since the last run returned: added to `metrics` then.
    tally: Vec<LinkTally>,
    /// Packets that reached a node with no agent on their port.
    pub undeliverable: u64,
    /// Total events processed.
    pub events_processed: u64,
    /// Packet trace hooks (pcap writers), per link.
    tracers: BTreeMap<LinkId, Box<Tracer>>,
    /// Links whose waiting packets are held here for ACK management.
    managed: BTreeMap<LinkId, crate::ackmgmt::ManagedQueue>,
    /// What the agent handling the current event sent, asked and bound: kept between events so
    /// that handling one allocates nothing, and lent to the agent's `Ctx` in place.
    scratch: Scratch,
}

#[derive(Default)]
struct Scratch {
    out: Vec<Packet>,
    timers: Vec<(Time, u64)>,
    binds: Vec<u16>,
    buffers: Vec<Vec<u8>>,
}

/// Derives an independent random stream for component `index` of kind `kind`.
fn stream(seed: u64, kind: u64, index: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(kind << 32 | index);
    r
}

impl Sim {
    /// An empty simulation; `seed` determines every random choice of the run.
    pub fn new(seed: u64) -> Sim {
        Sim {
            now: 0,
            seed,
            events: BinaryHeap::new(),
            pending: Vec::new(),
            lanes: Vec::new(),
            free_slots: Vec::new(),
            next_seq: 0,
            nodes: Vec::new(),
            links: Vec::new(),
            agents: Vec::new(),
            agent_rng: Vec::new(),
            agent_node: Vec::new(),
            ports: HashMap::default(),
            next_packet_id: 0,
            metrics: Metrics::default(),
            tally: Vec::new(),
            undeliverable: 0,
            events_processed: 0,
            tracers: BTreeMap::new(),
            managed: BTreeMap::new(),
            scratch: Scratch::default(),
        }
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Adds a node.
    pub fn add_node(&mut self, name: &str) -> NodeId {
        self.nodes.push(Node {
            name: name.to_string(),
            routes: HashMap::default(),
        });
        NodeId(self.nodes.len() as u32 - 1)
    }

    /// Looks a node up by name.
    pub fn node(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| NodeId(i as u32))
    }

    /// The name of a node.
    pub fn node_name(&self, id: NodeId) -> &str {
        &self.nodes[id.0 as usize].name
    }

    /// Adds a simplex link from `from` to `to`.
    pub fn add_link(
        &mut self,
        name: &str,
        from: NodeId,
        to: NodeId,
        config: LinkConfig,
    ) -> Result<LinkId, SimError> {
        let model = LinkDirection::new(config).map_err(|source| SimError::Link {
            name: name.to_string(),
            source,
        })?;
        let id = LinkId(self.links.len() as u32);
        self.links.push(SimLink {
            name: name.to_string(),
            from,
            to,
            model,
            rng: stream(self.seed, 1, u64::from(id.0)),
        });
        self.tally.push(LinkTally::default());
        self.lanes.push(VecDeque::new());
        Ok(id)
    }

    /// Adds a link each way with the same parameters; returns (a→b, b→a).
    pub fn add_duplex(
        &mut self,
        a: NodeId,
        b: NodeId,
        config: LinkConfig,
    ) -> Result<(LinkId, LinkId), SimError> {
        let (na, nb) = (self.node_name(a).to_string(), self.node_name(b).to_string());
        let ab = self.add_link(&format!("{na}->{nb}"), a, b, config.clone())?;
        let ba = self.add_link(&format!("{nb}->{na}"), b, a, config)?;
        Ok((ab, ba))
    }

    /// The links, by id.
    pub fn links(&self) -> &[SimLink] {
        &self.links
    }

    /// Finds a link by name (`"a->b"` for duplex links).
    pub fn link_by_name(&self, name: &str) -> Option<LinkId> {
        self.links
            .iter()
            .position(|l| l.name == name)
            .map(|i| LinkId(i as u32))
    }

    /// Computes static shortest-path routes (fewest hops, then lowest link index) between every
    /// pair of nodes. Call after the topology is complete.
    pub fn compute_routes(&mut self) {
        let n = self.nodes.len();
        let mut adj: Vec<Vec<(NodeId, LinkId)>> = vec![Vec::new(); n];
        for (i, l) in self.links.iter().enumerate() {
            adj[l.from.0 as usize].push((l.to, LinkId(i as u32)));
        }
        for src in 0..n {
            // Breadth-first search from src; remember the first link taken.
            let mut first: Vec<Option<LinkId>> = vec![None; n];
            let mut seen = vec![false; n];
            seen[src] = true;
            let mut q = VecDeque::new();
            for &(to, link) in &adj[src] {
                if !seen[to.0 as usize] {
                    seen[to.0 as usize] = true;
                    first[to.0 as usize] = Some(link);
                    q.push_back(to);
                }
            }
            while let Some(u) = q.pop_front() {
                for &(to, _) in &adj[u.0 as usize] {
                    if !seen[to.0 as usize] {
                        seen[to.0 as usize] = true;
                        first[to.0 as usize] = first[u.0 as usize];
                        q.push_back(to);
                    }
                }
            }
            let routes = &mut self.nodes[src].routes;
            routes.clear();
            for (dst, link) in first.into_iter().enumerate() {
                if let Some(link) = link {
                    routes.insert(NodeId(dst as u32), link);
                }
            }
        }
    }

    /// The link a packet at `at` takes towards `to`.
    pub fn next_hop(&self, at: NodeId, to: NodeId) -> Option<(LinkId, &SimLink)> {
        let id = *self.nodes.get(at.0 as usize)?.routes.get(&to)?;
        Some((id, &self.links[id.0 as usize]))
    }

    /// The link running the other way between the same two nodes, if any.
    pub fn reverse_link(&self, id: LinkId) -> Option<LinkId> {
        let l = self.links.get(id.0 as usize)?;
        self.links
            .iter()
            .position(|r| r.from == l.to && r.to == l.from)
            .map(|i| LinkId(i as u32))
    }

    /// Overrides the route at `at` towards `to` (call after `compute_routes`): packets for `to`
    /// leave `at` on `link`, which must start at `at`. Returns false (and changes nothing) if it
    /// does not.
    pub fn set_route(&mut self, at: NodeId, to: NodeId, link: LinkId) -> bool {
        let starts_here = self
            .links
            .get(link.0 as usize)
            .is_some_and(|l| l.from == at);
        match self.nodes.get_mut(at.0 as usize) {
            Some(n) if starts_here && at != to => {
                n.routes.insert(to, link);
                true
            }
            _ => false,
        }
    }

    /// Whether following the routes hop by hop from `from` arrives at `to` (no dead end, no
    /// loop).
    pub fn route_arrives(&self, from: NodeId, to: NodeId) -> bool {
        let mut at = from;
        for _ in 0..=self.nodes.len() {
            if at == to {
                return true;
            }
            match self.next_hop(at, to) {
                Some((_, l)) => at = l.to,
                None => return false,
            }
        }
        false
    }

    /// Whether `to` can be reached from `from`.
    pub fn reachable(&self, from: NodeId, to: NodeId) -> bool {
        from == to || self.nodes[from.0 as usize].routes.contains_key(&to)
    }

    /// Checks that `to` is reachable from `from`, with an error naming both.
    pub fn check_route(&self, from: NodeId, to: NodeId) -> Result<(), SimError> {
        if self.reachable(from, to) {
            Ok(())
        } else {
            Err(SimError::NoRoute {
                from: self.node_name(from).to_string(),
                to: self.node_name(to).to_string(),
            })
        }
    }

    /// Adds an agent listening on `port` at `node`; it starts at time `start`.
    pub fn add_agent(
        &mut self,
        node: NodeId,
        port: u16,
        start: Time,
        agent: Box<dyn Agent>,
    ) -> Result<AgentId, SimError> {
        let addr = Addr { node, port };
        if self.ports.contains_key(&addr) {
            return Err(SimError::PortInUse {
                node: self.node_name(node).to_string(),
                port,
            });
        }
        let id = AgentId(self.agents.len() as u32);
        self.agents.push(Some(agent));
        self.agent_rng.push(stream(self.seed, 2, u64::from(id.0)));
        self.agent_node.push(node);
        self.ports.insert(addr, id);
        self.schedule(start, EventKind::Start { agent: id });
        Ok(id)
    }

    /// The agent behind `id`, for reading its state.
    pub fn agent(&self, id: AgentId) -> Option<&dyn Agent> {
        self.agents.get(id.0 as usize).and_then(|a| a.as_deref())
    }

    /// Typed access to an agent.
    pub fn agent_as<T: Agent>(&self, id: AgentId) -> Option<&T> {
        self.agent(id).and_then(|a| a.as_any().downcast_ref::<T>())
    }

    /// Records every packet that enters `link` (after its queue accepts it) with `f`.
    pub fn trace_link(&mut self, link: LinkId, f: Box<Tracer>) {
        self.tracers.insert(link, f);
    }

    fn schedule(&mut self, at: Time, kind: EventKind) {
        self.next_seq += 1;
        self.schedule_as(at, self.next_seq, kind);
    }

    /// Schedules `kind` with the sequence number `seq` already taken.
    fn schedule_as(&mut self, at: Time, seq: u64, kind: EventKind) {
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.pending[i as usize] = Some(kind);
                i
            }
            None => {
                self.pending.push(Some(kind));
                (self.pending.len() - 1) as u32
            }
        };
        self.events.push(Event { at, seq, slot });
    }

    /// Schedules the arrival of `pkt` at the far end of `link` (node `to`) at `at`: in the
    /// link's lane when it comes no earlier than the lane's last arrival, else as any event.
    #[inline(always)]
    fn schedule_arrival(&mut self, link: LinkId, to: NodeId, at: Time, pkt: Packet) {
        self.next_seq += 1;
        let seq = self.next_seq;
        let i = link.0 as usize;
        // A link with a lane, and an arrival no earlier than the lane's last, waits in the lane;
        // anything else is scheduled as any event.
        let Some(lane) = self
            .lanes
            .get_mut(i)
            .filter(|lane| link.0 < LANE && lane.back().is_none_or(|last| last.at <= at))
        else {
            return self.schedule_as(
                at,
                seq,
                EventKind::Arrive {
                    node: to,
                    pkt,
                    via: Some(link),
                },
            );
        };
        let first = lane.is_empty();
        lane.push_back(Arrival { at, seq, pkt });
        if first {
            self.events.push(Event {
                at,
                seq,
                slot: LANE | link.0,
            });
        }
    }

    /// Takes the head of lane `link` (whose entry is the heap's top): the heap's top becomes
    /// the lane's next arrival, or goes if the lane is empty.
    fn take_lane_head(&mut self, link: u32) -> Option<Packet> {
        let Some(lane) = self.lanes.get_mut(link as usize) else {
            self.events.pop();
            return None;
        };
        let head = lane.pop_front();
        match lane.front() {
            Some(next) => {
                if let Some(mut top) = self.events.peek_mut() {
                    // Replacing the top and sifting it down keeps the same set of keys as a pop
                    // and a push would.
                    *top = Event {
                        at: next.at,
                        seq: next.seq,
                        slot: LANE | link,
                    };
                }
            }
            None => {
                self.events.pop();
            }
        }
        head.map(|a| a.pkt)
    }

    /// Runs events up to and including time `end`; returns the number processed.
    pub fn run_until(&mut self, end: Time) -> u64 {
        let mut n = 0;
        while let Some(ev) = self.events.peek() {
            if ev.at > end {
                break;
            }
            let (at, slot) = (ev.at, ev.slot);
            if slot & LANE != 0 {
                let link = slot & !LANE;
                let Some(pkt) = self.take_lane_head(link) else {
                    continue;
                };
                self.now = at;
                n += 1;
                let to = self.links[link as usize].to;
                self.crossed(LinkId(link), to, pkt);
                continue;
            }
            let Some(ev) = self.events.pop() else { break };
            let Some(kind) = self
                .pending
                .get_mut(ev.slot as usize)
                .and_then(Option::take)
            else {
                continue;
            };
            self.free_slots.push(ev.slot);
            self.now = ev.at;
            n += 1;
            match kind {
                EventKind::Arrive { node, pkt, via } => match via {
                    Some(link) => self.crossed(link, node, pkt),
                    None => self.arrive(node, pkt),
                },
                EventKind::Timer { agent, token } => {
                    self.with_agent(agent, |a, ctx| a.on_timer(ctx, token))
                }
                EventKind::Start { agent } => self.with_agent(agent, |a, ctx| a.start(ctx)),
                EventKind::Service { link } => {
                    if let Some(q) = self.managed.get_mut(&link) {
                        if q.next_service == Some(self.now) {
                            q.next_service = None;
                        }
                    }
                    self.service(link)
                }
            }
        }
        self.now = self.now.max(end);
        for (i, t) in self.tally.iter_mut().enumerate() {
            t.flush(&mut self.metrics, LinkId(i as u32));
        }
        self.events_processed += n;
        n
    }

    /// Lets every agent flush its metrics (call once after the last `run_until`).
    pub fn finish(&mut self) {
        for i in 0..self.agents.len() {
            self.with_agent(AgentId(i as u32), |a, ctx| a.finish(ctx));
        }
    }

    fn with_agent(&mut self, id: AgentId, f: impl FnOnce(&mut dyn Agent, &mut Ctx<'_>)) {
        let i = id.0 as usize;
        let Some(mut agent) = self.agents.get_mut(i).and_then(Option::take) else {
            return;
        };
        let node = self.agent_node[i];
        {
            let mut ctx = Ctx {
                now: self.now,
                node,
                rng: &mut self.agent_rng[i],
                metrics: &mut self.metrics,
                out: &mut self.scratch.out,
                timers: &mut self.scratch.timers,
                binds: &mut self.scratch.binds,
                next_packet_id: &mut self.next_packet_id,
                buffers: &mut self.scratch.buffers,
            };
            f(agent.as_mut(), &mut ctx);
        }
        self.agents[i] = Some(agent);
        // Most events bind nothing and many set no timer: an empty vector is not touched.
        if !self.scratch.binds.is_empty() {
            for port in self.scratch.binds.drain(..) {
                self.ports.entry(Addr { node, port }).or_insert(id);
            }
        }
        if !self.scratch.timers.is_empty() {
            for k in 0..self.scratch.timers.len() {
                let (at, token) = self.scratch.timers[k];
                self.schedule(at, EventKind::Timer { agent: id, token });
            }
            self.scratch.timers.clear();
        }
        if !self.scratch.out.is_empty() {
            // Taken so that forwarding may use `self` (it handles no agent event, so the
            // scratch is not used meanwhile); given back empty, its allocation kept.
            let mut out = std::mem::take(&mut self.scratch.out);
            for pkt in out.drain(..) {
                self.forward(node, pkt);
            }
            self.scratch.out = out;
        }
    }

    /// A packet crossed `link` to `node`. Counted when it has crossed, so packets still queued
    /// when the run ends are not.
    fn crossed(&mut self, link: LinkId, node: NodeId, pkt: Packet) {
        if let Some(t) = self.tally.get_mut(link.0 as usize) {
            t.on_transmitted(&pkt);
        }
        self.arrive(node, pkt)
    }

    /// A packet is at `node`: deliver it, or put it on the next link.
    fn arrive(&mut self, node: NodeId, pkt: Packet) {
        if pkt.dst.node == node {
            match self.ports.get(&pkt.dst).copied() {
                Some(agent) => self.with_agent(agent, |a, ctx| a.on_packet(ctx, pkt)),
                None => self.undeliverable += 1,
            }
            return;
        }
        self.forward(node, pkt);
    }

    fn forward(&mut self, node: NodeId, pkt: Packet) {
        if pkt.dst.node == node {
            self.schedule(
                self.now,
                EventKind::Arrive {
                    node,
                    pkt,
                    via: None,
                },
            );
            return;
        }
        let Some(&link_id) = self.nodes[node.0 as usize].routes.get(&pkt.dst.node) else {
            self.undeliverable += 1;
            return;
        };
        if self.managed.contains_key(&link_id) {
            self.enqueue_managed(link_id, pkt);
            return;
        }
        self.transmit(link_id, pkt);
    }

    /// Offers `pkt` to the model of link `link_id` and schedules its arrivals.
    #[inline(always)]
    fn transmit(&mut self, link_id: LinkId, pkt: Packet) {
        let link = &mut self.links[link_id.0 as usize];
        let to = link.to;
        let fate = link.model.offer(self.now, pkt.size as usize, &mut link.rng);
        self.metrics.on_link(link_id, &pkt, &fate, self.now);
        if matches!(fate, Fate::Deliver { .. }) {
            if let Some(tr) = self.tracers.get_mut(&link_id) {
                tr(self.now, &pkt);
            }
        }
        if let Some(at) = fate.intact_arrival() {
            self.schedule_arrival(link_id, to, at, pkt);
            return;
        }
        for d in LinkDirection::deliveries(fate, pkt) {
            if d.duplicate {
                // A duplicate is an artefact of the link, not a second transmission.
                self.schedule(
                    d.at_ns,
                    EventKind::Arrive {
                        node: to,
                        pkt: d.datagram,
                        via: None,
                    },
                );
            } else {
                self.schedule_arrival(link_id, to, d.at_ns, d.datagram);
            }
        }
    }

    /// Holds the packets waiting for `link` in a managed queue (ACK filtering, pacing, window
    /// overwriting: `crate::ackmgmt`) instead of the link model's queue. Call before the run;
    /// the link should be drop-tail (its model then only ever holds the packet in service).
    pub fn manage_link(&mut self, link: LinkId, config: crate::ackmgmt::AckQueueConfig) {
        self.managed
            .insert(link, crate::ackmgmt::ManagedQueue::new(config));
    }

    /// The managed queue of `link`, if it has one.
    pub fn managed_queue(&self, link: LinkId) -> Option<&crate::ackmgmt::ManagedQueue> {
        self.managed.get(&link)
    }

    fn enqueue_managed(&mut self, link_id: LinkId, pkt: Packet) {
        let Some(q) = self.managed.get_mut(&link_id) else {
            return;
        };
        if let Err(pkt) = q.push(pkt) {
            let fate = Fate::Drop(linkmodel::DropCause::Queue);
            self.metrics.on_link(link_id, &pkt, &fate, self.now);
            return;
        }
        self.service(link_id);
    }

    /// Sends what a managed link may send now, and schedules its next look.
    fn service(&mut self, link_id: LinkId) {
        loop {
            let now = self.now;
            let busy = self.links[link_id.0 as usize].model.busy_until_ns();
            let watched = match self.managed.get(&link_id).and_then(|q| q.config().pacing) {
                Some(p) => match self.links.get_mut(p.watch.0 as usize) {
                    Some(l) => l.model.queue_len(now),
                    None => 0,
                },
                None => 0,
            };
            let Some(q) = self.managed.get_mut(&link_id) else {
                return;
            };
            if q.is_empty() {
                return;
            }
            let wake = if busy > now {
                Some(busy)
            } else {
                match q.release(now, watched) {
                    crate::ackmgmt::Release::Now(pkt) => {
                        self.transmit(link_id, pkt);
                        continue;
                    }
                    crate::ackmgmt::Release::At(t) => Some(t),
                    crate::ackmgmt::Release::Empty => None,
                }
            };
            if let Some(t) = wake {
                if q.next_service.is_none_or(|s| t < s) {
                    q.next_service = Some(t);
                    self.schedule(t, EventKind::Service { link: link_id });
                }
            }
            return;
        }
    }

    /// Direction-agnostic helper for agents that answer: the reverse of a flow direction.
    pub fn reverse(d: Direction) -> Direction {
        match d {
            Direction::Forward => Direction::Reverse,
            Direction::Reverse => Direction::Forward,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkmodel::{Delay, Fate};

    /// Sends three packets of varying sizes every millisecond for 200 ms.
    struct Burst {
        to: Addr,
    }

    impl Agent for Burst {
        fn start(&mut self, ctx: &mut Ctx<'_>) {
            ctx.timer_at(ctx.now, 0);
        }
        fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
        fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
            for k in 0..3 {
                let size = 100 + ((token * 3 + k) * 397 % 1400) as u32;
                let payload = Payload::Stp(vec![0; size as usize - 28]);
                ctx.send(1, self.to, FlowId(1), Direction::Forward, size, payload);
            }
            if token < 199 {
                ctx.timer_at(ctx.now + MS, token + 1);
            }
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// Records when each packet (by id) arrived.
    #[derive(Default)]
    struct Record {
        got: Vec<(Time, u64)>,
    }

    impl Agent for Record {
        fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
            self.got.push((ctx.now, pkt.id));
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// Arrivals are taken in time order, ties in the order they were scheduled, at the instants
    /// the link model gives, whether they wait in the link's lane or (reordered by the link,
    /// duplicated, or behind a delay step) in the heap: the same link model with the same random
    /// stream, offered the same packets, predicts every arrival, and in order.
    #[test]
    fn arrivals_come_in_time_then_scheduling_order_from_lane_and_heap() {
        for (reorder_p, duplicate_p, corrupt_p) in [(0.0, 0.0, 0.0), (0.2, 0.1, 0.1)] {
            let mut cfg = LinkConfig::simple(4_000_000, 10 * MS, 1000);
            cfg.reorder_p = reorder_p;
            cfg.reorder_delay_ns = 3 * MS;
            cfg.duplicate_p = duplicate_p;
            cfg.corrupt_p = corrupt_p;
            cfg.delay = Delay::Trace {
                points: vec![(0, 10 * MS), (50 * MS, 2 * MS), (120 * MS, 10 * MS)],
                period_ns: None,
            };
            let seed = 11;
            let mut sim = Sim::new(seed);
            let (a, b) = (sim.add_node("a"), sim.add_node("b"));
            let link = sim.add_link("a->b", a, b, cfg.clone()).unwrap();
            sim.compute_routes();
            let to = Addr { node: b, port: 2 };
            sim.add_agent(a, 1, 0, Box::new(Burst { to })).unwrap();
            let rec = sim.add_agent(b, 2, 0, Box::new(Record::default())).unwrap();
            sim.run_until(SEC);

            let mut model = LinkDirection::new(cfg).unwrap();
            let mut rng = stream(seed, 1, u64::from(link.0));
            let mut expected = Vec::new();
            let mut id = 0;
            for token in 0..200u64 {
                for k in 0..3 {
                    let size = 100 + ((token * 3 + k) * 397 % 1400) as usize;
                    if let Fate::Deliver {
                        at_ns,
                        duplicate_at_ns,
                        ..
                    } = model.offer(token * MS, size, &mut rng)
                    {
                        // The duplicate is scheduled first.
                        expected.extend(duplicate_at_ns.map(|d| (d, id)));
                        expected.push((at_ns, id));
                    }
                    id += 1;
                }
            }
            // Stable: equal times keep the order of scheduling.
            expected.sort_by_key(|&(at, _)| at);
            let got = &sim.agent_as::<Record>(rec).unwrap().got;
            assert_eq!(got.len(), expected.len());
            assert_eq!(got, &expected, "reorder {reorder_p}");
            let reordered = expected.windows(2).filter(|w| w[0].1 > w[1].1).count();
            assert_eq!(reordered > 0, reorder_p > 0.0, "{reordered}");
        }
    }
}
