//! The four drivers of a link direction — the simulator's link (`netsim::Sim`), `memnet::Net`,
//! and the emulators' lane (`linkem::Lane`, the core of both the UDP relay and the TUN forwarder)
//! — given the same seed and the same datagrams in virtual time, deliver the same datagrams at the
//! same instants as `linkmodel::Direction` itself: delay and rate traces replayed, a delay step
//! down kept in order, queue overflows, outages, loss, corruption and duplication alike.

use linkmodel::{DeliveryTrace, Direction, LinkConfig, Loss, Outage, QueueLimit};
use netsim::{Addr, Agent, Ctx, FlowId, Packet, Payload, Sim};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::any::Any;

const MS: u64 = 1_000_000;

/// (arrival time, bytes), in the order they are handed over.
type Schedule = Vec<(u64, Vec<u8>)>;

/// A burst every 10 ms (1 to 6 datagrams of 100-1400 bytes at the same instant) for 2 s.
fn datagrams() -> Vec<(u64, Vec<u8>)> {
    let mut v = Vec::new();
    for k in 0..200u64 {
        for j in 0..(1 + k * 7 % 6) {
            let size = 100 + ((k * 131 + j * 577) % 1301) as usize;
            let fill = (k * 8 + j) as u8;
            v.push((k * 10 * MS, vec![fill; size]));
        }
    }
    v
}

/// Delay 80 ms, stepping down to 20 ms at 500 ms, up to 60 at 1 s, down to 10 at 1.5 s.
fn delay_trace() -> linkmodel::Delay {
    linkmodel::trace::parse_delay_trace("0 80\n500 20\n1000 60\n1500 10\n", "steps.trace")
        .expect("valid trace")
}

/// A mahimahi trace: 1 opportunity per ms for 50 ms, then 3 per ms for 50 ms, repeating.
fn rate_trace() -> DeliveryTrace {
    let mut text = String::new();
    for t in 1..=100u64 {
        for _ in 0..if t <= 50 { 1 } else { 3 } {
            text.push_str(&format!("{t}\n"));
        }
    }
    DeliveryTrace::parse(&text, "steps.mahimahi").expect("valid trace")
}

fn configs() -> Vec<(&'static str, LinkConfig)> {
    let mut fixed = LinkConfig::simple(2_000_000, 0, 20);
    fixed.delay = delay_trace();
    fixed.outages = vec![Outage {
        start_ns: 1200 * MS,
        duration_ns: 100 * MS,
    }];
    let mut traced = fixed.clone();
    traced.rate_trace = Some(rate_trace());
    traced.queue = QueueLimit::Bytes(20_000);
    let mut random = traced.clone();
    random.loss = Loss::Random { p: 0.05 };
    random.duplicate_p = 0.05;
    random.corrupt_p = 0.05;
    vec![
        ("delay trace", fixed),
        ("rate trace", traced),
        ("random", random),
    ]
}

/// The reference: the link direction itself, with the given generator.
fn reference(config: &LinkConfig, mut rng: ChaCha8Rng) -> Schedule {
    let mut dir = Direction::new(config.clone()).unwrap();
    let mut out: Schedule = Vec::new();
    for (t, d) in datagrams() {
        let (_, got) = dir.send(t, d.len(), d, &mut rng);
        out.extend(got.map(|d| (d.at_ns, d.datagram)));
    }
    // Stable: equal instants keep the order the datagrams were scheduled in.
    out.sort_by_key(|d| d.0);
    out
}

fn lane(config: &LinkConfig, seed: u64) -> Schedule {
    let mut lane = linkem::Lane::new(config.clone(), ChaCha8Rng::seed_from_u64(seed)).unwrap();
    for (t, d) in datagrams() {
        lane.offer(t, &d);
    }
    std::iter::from_fn(|| lane.pop_due(u64::MAX))
        .map(|due| (due.at_ns, due.data))
        .collect()
}

fn memnet(config: &LinkConfig, seed: u64) -> Schedule {
    let ep = stp::EndpointConfig::default();
    let back = LinkConfig::simple(1_000_000, 0, 10);
    let mut net = memnet::Net::new(ep.clone(), ep, config.clone(), back, seed);
    for (t, d) in datagrams() {
        net.now = t;
        net.offer(memnet::Side::A, d);
    }
    net.wire
        .schedule()
        .into_iter()
        .map(|(at, to, d)| {
            assert_eq!(to, memnet::Side::B);
            (at, d.to_vec())
        })
        .collect()
}

/// Sends the datagrams at their instants.
struct Sender {
    to: Addr,
    datagrams: Vec<(u64, Vec<u8>)>,
}

impl Agent for Sender {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        for (i, (t, _)) in self.datagrams.iter().enumerate() {
            ctx.timer_at(*t, i as u64);
        }
    }
    fn on_packet(&mut self, _ctx: &mut Ctx<'_>, _pkt: Packet) {}
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, token: u64) {
        if let Some((_, d)) = self.datagrams.get(token as usize) {
            let size = d.len() as u32;
            let payload = Payload::Stp(d.clone());
            ctx.send(
                1,
                self.to,
                FlowId(0),
                netsim::Direction::Forward,
                size,
                payload,
            );
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Records what arrives, when.
#[derive(Default)]
struct Sink {
    got: Schedule,
}

impl Agent for Sink {
    fn on_packet(&mut self, ctx: &mut Ctx<'_>, pkt: Packet) {
        if let Payload::Stp(d) = pkt.payload {
            self.got.push((ctx.now, d));
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn netsim(config: &LinkConfig, seed: u64) -> Schedule {
    let mut sim = Sim::new(seed);
    let a = sim.add_node("a");
    let b = sim.add_node("b");
    sim.add_link("a->b", a, b, config.clone()).unwrap();
    sim.compute_routes();
    let sink = sim.add_agent(b, 2, 0, Box::new(Sink::default())).unwrap();
    let to = Addr { node: b, port: 2 };
    let sender = Sender {
        to,
        datagrams: datagrams(),
    };
    sim.add_agent(a, 1, 0, Box::new(sender)).unwrap();
    sim.run_until(10_000 * MS);
    sim.agent_as::<Sink>(sink).unwrap().got.clone()
}

/// The generator of the simulator's first link: the run's seed, stream `1 << 32` (links are
/// kind 1, index 0).
fn netsim_link_rng(seed: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(1 << 32);
    r
}

#[test]
fn every_driver_delivers_the_direction_schedule() {
    let seed = 11;
    for (name, config) in configs() {
        let want = reference(&config, ChaCha8Rng::seed_from_u64(seed));
        let sent = datagrams().len();
        assert!(want.len() > sent / 3, "{name}: {} of {sent}", want.len());
        assert!(want.len() < sent + sent / 5, "{name}: some dropped");
        assert_eq!(lane(&config, seed), want, "{name}: emulators' lane");
        assert_eq!(memnet(&config, seed), want, "{name}: memnet");
        let sim_want = if name == "random" {
            // The simulator derives one generator per link from the run's seed.
            reference(&config, netsim_link_rng(seed))
        } else {
            want.clone()
        };
        assert_eq!(netsim(&config, seed), sim_want, "{name}: simulator");
    }
}

#[test]
fn a_delay_step_down_never_reorders_in_any_driver() {
    let (_, config) = configs().remove(1);
    let seed = 3;
    for (driver, got) in [
        ("lane", lane(&config, seed)),
        ("memnet", memnet(&config, seed)),
        ("netsim", netsim(&config, seed)),
    ] {
        // Datagrams carry their send order in their fill byte (k * 8 + j, wrapping): arrivals
        // are in send order iff the fills, unwrapped, never go back.
        let sent: Vec<Vec<u8>> = datagrams().into_iter().map(|d| d.1).collect();
        let mut next = 0;
        for (_, d) in &got {
            let pos = sent[next..]
                .iter()
                .position(|s| s == d)
                .unwrap_or_else(|| panic!("{driver}: a datagram arrived out of order"));
            next += pos + 1;
        }
        // And the trace really steps down while datagrams are in flight: at 500 ms the delay
        // drops by 60 ms, so arrivals bunch up at the held instant.
        let held = got.windows(2).filter(|w| w[0].0 == w[1].0).count();
        assert!(held > 5, "{driver}: {held}");
    }
}
