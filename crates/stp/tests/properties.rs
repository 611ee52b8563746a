//! Property tests: under random impairments, every byte arrives exactly once and in order, or a
//! connection reports failure; hostile datagrams never panic an endpoint.

use linkmodel::{LinkConfig, Loss, QueueLimit};
use memnet::{Checker, Net, Outcome, Side, Writer, NS_PER_MS};
use proptest::prelude::*;
use stp::{Config, EndpointConfig, Instant};

#[derive(Debug, Clone)]
struct Scenario {
    rate_bps: u64,
    delay_ms: u64,
    queue: u32,
    loss: f64,
    reorder_p: f64,
    reorder_ms: u64,
    duplicate_p: f64,
    corrupt_p: f64,
    a_to_b: u64,
    b_to_a: u64,
    recv_buffer: u32,
    reorder_threshold: u32,
    seed: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (100_000u64..20_000_000, 0u64..300, 3u32..300, 0.0f64..0.15),
        (0.0f64..0.2, 1u64..60, 0.0f64..0.1, 0.0f64..0.1),
        (
            0u64..400_000,
            0u64..100_000,
            8_192u32..2_000_000,
            1u32..6,
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rate_bps, delay_ms, queue, loss),
                (reorder_p, reorder_ms, duplicate_p, corrupt_p),
                (a_to_b, b_to_a, recv_buffer, reorder_threshold, seed),
            )| Scenario {
                rate_bps,
                delay_ms,
                queue,
                loss,
                reorder_p,
                reorder_ms,
                duplicate_p,
                corrupt_p,
                a_to_b,
                b_to_a,
                recv_buffer,
                reorder_threshold,
                seed,
            },
        )
}

fn link(s: &Scenario) -> LinkConfig {
    let mut l = LinkConfig::simple(s.rate_bps, s.delay_ms * NS_PER_MS, s.queue);
    l.queue = QueueLimit::Packets(s.queue);
    l.loss = if s.loss > 0.0 {
        Loss::Random { p: s.loss }
    } else {
        Loss::None
    };
    l.reorder_p = s.reorder_p;
    l.reorder_delay_ns = s.reorder_ms * NS_PER_MS;
    l.duplicate_p = s.duplicate_p;
    l.corrupt_p = s.corrupt_p;
    l
}

fn run(s: &Scenario) -> Result<(), TestCaseError> {
    let conn = Config {
        recv_buffer_bytes: s.recv_buffer,
        reorder_threshold: s.reorder_threshold,
        ..Config::default()
    };
    let cfg = EndpointConfig {
        connection: conn,
        ..EndpointConfig::default()
    };
    let mut net = Net::symmetric(cfg, link(s), s.seed);
    let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
    let mut hb = None;
    let mut wa = Writer::new(s.seed ^ 1, s.a_to_b);
    let mut wb = Writer::new(s.seed ^ 2, s.b_to_a);
    let mut ca = Checker::new(s.seed ^ 2, s.b_to_a);
    let mut cb = Checker::new(s.seed ^ 1, s.a_to_b);
    let (mut oa, mut ob) = (Outcome::default(), Outcome::default());
    let limit = 1_500_000 * NS_PER_MS;
    net.run(limit, |net| {
        wa.drive(&mut net.a, ha);
        ca.drive(&mut net.a, ha);
        if hb.is_none() {
            hb = net.b.accept();
        }
        if let Some(h) = hb {
            wb.drive(&mut net.b, h);
            cb.drive(&mut net.b, h);
        }
        let now = net.now;
        let ea = net.events(Side::A);
        oa.absorb(&ea, now);
        let eb = net.events(Side::B);
        ob.absorb(&eb, now);
        (oa.closed && ob.closed) || oa.failed.is_some() || ob.failed.is_some()
    });
    prop_assert!(
        ca.mismatch_at.is_none(),
        "b→a stream corrupted at byte {:?}",
        ca.mismatch_at
    );
    prop_assert!(
        cb.mismatch_at.is_none(),
        "a→b stream corrupted at byte {:?}",
        cb.mismatch_at
    );
    let failed = oa.failed.is_some() || ob.failed.is_some();
    if std::env::var("STP_PROP_VERBOSE").is_ok() {
        eprintln!(
            "OUTCOME failed={failed} a={:?} b={:?} bytes {}/{} {}/{} t={}ms loss={:.3}",
            oa.failed,
            ob.failed,
            cb.bytes,
            s.a_to_b,
            ca.bytes,
            s.b_to_a,
            net.now / NS_PER_MS,
            s.loss
        );
    }
    if !failed {
        prop_assert!(
            cb.complete(s.a_to_b),
            "a→b incomplete ({} of {} bytes) without a failure report",
            cb.bytes,
            s.a_to_b
        );
        prop_assert!(
            ca.complete(s.b_to_a),
            "b→a incomplete ({} of {} bytes) without a failure report",
            ca.bytes,
            s.b_to_a
        );
        prop_assert!(
            oa.closed && ob.closed,
            "not closed and not failed: a {oa:?} b {ob:?}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_byte_exactly_once_in_order_or_failure(s in scenario()) {
        run(&s)?;
    }

    #[test]
    fn hostile_datagrams_never_panic(datagrams in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 1..64), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        // A live connection between a and b, then arbitrary bytes and mutated real datagrams.
        let cfg = EndpointConfig::default();
        let mut net = Net::symmetric(cfg, LinkConfig::simple(10_000_000, NS_PER_MS, 100), 1);
        let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
        net.a.connection(ha).unwrap().write(&[7u8; 5000]).unwrap();
        let mut real = Vec::new();
        let mut buf = Vec::new();
        while let Some(t) = net.a.poll_transmit(net.instant(), &mut buf) {
            real.push(buf[..t.size].to_vec());
        }
        let now = Instant::from_nanos(NS_PER_MS);
        for d in &real {
            net.b.handle_datagram(now, net.addr_a, d);
        }
        for d in &datagrams {
            net.b.handle_datagram(now, net.addr_a, d);
            net.a.handle_datagram(now, net.addr_b, d);
        }
        for d in &real {
            let mut m = d.clone();
            for &(i, x) in &flips {
                let n = m.len();
                m[i % n] ^= x;
            }
            net.b.handle_datagram(now, net.addr_a, &m);
            net.a.handle_datagram(now, net.addr_b, &m);
        }
        // Both endpoints keep working.
        let mut out = Vec::new();
        while net.b.poll_transmit(now, &mut out).is_some() {}
        while net.a.poll_transmit(now, &mut out).is_some() {}
        let _ = net.a.poll_timeout(now);
        net.a.handle_timeout(now + std::time::Duration::from_secs(100));
    }
}
