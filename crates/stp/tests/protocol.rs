//! Wire-level protocol behaviour: what goes on the wire, and when, for the mechanisms the
//! specification names (USTAT per hole, the STAT timestamp rule, burst-end POLLs, pacing,
//! stateless answers, version negotiation, instances, limits, keepalives, POLLs after END).

use linkmodel::{LinkConfig, QueueLimit};
use memnet::{Bulk, Net, Outcome, Side, Writer, NS_PER_MS};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::net::SocketAddr;
use stp::wire::{End, Header, Packet, Poll, RstReason, Types, SUPPORTED_VERSIONS, VERSION};
use stp::{Config, ConnectionError, Endpoint, EndpointConfig, InitialWindow, Instant};

fn geo() -> LinkConfig {
    let mut l = LinkConfig::simple(1_500_000, 266 * NS_PER_MS, 0);
    l.queue = QueueLimit::Bytes(99_750);
    l.overhead_bytes = 28;
    l
}

fn cfg(conn: Config) -> EndpointConfig {
    EndpointConfig {
        connection: conn,
        ..EndpointConfig::default()
    }
}

#[test]
fn a_single_loss_costs_one_ustat_and_one_retransmission() {
    // Drop the 40th datagram a sends (an SD well inside the transfer). The receiver must report
    // the hole once (USTAT) and the sender resend it once, even though STATs answering POLLs sent
    // before the retransmission keep listing the hole until the copy arrives.
    let mut net = Net::symmetric(EndpointConfig::default(), geo(), 21);
    net.drop_filter = Some(Box::new(|a_to_b, idx, _| a_to_b && idx == 40));
    let r = Bulk {
        net,
        a_to_b: 600_000,
        b_to_a: 0,
        limit_ns: 100_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
    let (a, b) = (r.a_stats.unwrap(), r.b_stats.unwrap());
    assert_eq!(
        b.packets_sent.get(Types::USTAT),
        1,
        "one USTAT for one hole"
    );
    assert!(b.packets_sent.get(Types::STAT) >= 3, "STATs kept flowing");
    assert_eq!(a.retransmitted_packets, 1, "exactly one copy resent");
    assert_eq!(
        b.sd_duplicates, 0,
        "no spurious retransmission reached the receiver"
    );
}

#[test]
fn small_window_polls_on_the_last_sd_of_each_burst() {
    let conn = Config {
        initial_window: InitialWindow::FourKss,
        ..Config::default()
    };
    let mut net = Net::symmetric(cfg(conn), geo(), 22);
    net.capture = Some(Vec::new());
    let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
    net.a
        .connection(ha)
        .unwrap()
        .write(&vec![1u8; 200_000])
        .unwrap();
    let mut hb = None;
    net.run(3_000 * NS_PER_MS, |net| {
        if hb.is_none() {
            hb = net.b.accept();
        }
        if let Some(h) = hb {
            let mut sink = vec![0u8; 1 << 16];
            while let Ok(n) = net.b.connection(h).unwrap().read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
        }
        false
    });
    let log = net.capture.take().unwrap();
    let sent: Vec<_> = log.iter().filter(|c| c.from == Side::A).collect();
    // Bursts: SDs separated by more than 100 ms (a round trip is 532 ms).
    let mut bursts: Vec<Vec<&memnet::Captured>> = Vec::new();
    for c in &sent {
        match bursts.last_mut() {
            Some(b) if c.at_ns - b.last().unwrap().at_ns < 100 * NS_PER_MS => b.push(c),
            _ => bursts.push(vec![c]),
        }
    }
    assert!(bursts.len() >= 3, "expected several round trips of bursts");
    for (i, b) in bursts.iter().take(3).enumerate() {
        let last = b.last().unwrap().packet();
        assert!(
            last.poll.is_some() && !last.payload.is_empty(),
            "burst {i}: last SD must carry a POLL"
        );
        let standalone = b.iter().filter(|c| c.packet().payload.is_empty()).count();
        assert_eq!(
            standalone, 0,
            "burst {i}: no standalone POLL in small-window mode"
        );
    }
    assert_eq!(
        bursts[0].len(),
        3,
        "4KSS with ~1400-byte SDs is three packets"
    );
}

#[test]
fn pacing_spreads_a_window_instead_of_a_line_rate_burst() {
    // 100 Mb/s, 300 ms RTT: a bandwidth-delay product of ~2600 datagrams, and a queue of one BDP.
    let mut link = LinkConfig::simple(100_000_000, 150 * NS_PER_MS, 2600);
    link.overhead_bytes = 28;
    let mut net = Net::symmetric(EndpointConfig::default(), link, 23);
    net.capture = Some(Vec::new());
    let r = Bulk {
        net,
        a_to_b: 20_000_000,
        b_to_a: 0,
        limit_ns: 60_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact, "{r:?}");
    let cwnd_packets = r.a_stats.as_ref().unwrap().cwnd_bytes / 1412;
    let log = r.net.capture.as_ref().unwrap();
    let mut per_ms = std::collections::BTreeMap::<u64, u32>::new();
    for c in log
        .iter()
        .filter(|c| c.from == Side::A && c.at_ns > 400 * NS_PER_MS)
    {
        *per_ms.entry(c.at_ns / NS_PER_MS).or_default() += 1;
    }
    let worst = per_ms.values().copied().max().unwrap();
    eprintln!("largest 1-ms burst: {worst} datagrams; final cwnd {cwnd_packets} packets");
    assert!(
        cwnd_packets > 1000,
        "the window must have grown large for this test to mean anything"
    );
    // Spread over the RTT (300 ms) at a gain of at most 2, a window leaves at well under 1 % of
    // itself per millisecond; a line-rate burst would put all of it there.
    assert!(
        worst as u64 * 20 <= cwnd_packets,
        "a {worst}-datagram burst within 1 ms (window {cwnd_packets})"
    );
}

#[test]
fn max_rate_bounds_the_window_controller() {
    let conn = Config {
        max_rate_bps: Some(500_000),
        ..Config::default()
    };
    let link = LinkConfig::simple(20_000_000, 50 * NS_PER_MS, 1000);
    let r = Bulk {
        net: Net::symmetric(cfg(conn), link, 24),
        a_to_b: 1_000_000,
        b_to_a: 0,
        limit_ns: 100_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact);
    let bps = 1_000_000.0 * 8.0 / (r.ab_done_ns.unwrap() as f64 / 1e9);
    eprintln!("bounded goodput {bps:.0} b/s");
    assert!(
        (400_000.0..=520_000.0).contains(&bps),
        "goodput {bps:.0} b/s with a 500 kb/s cap"
    );
}

fn raw_endpoint(seed: u64) -> Endpoint {
    Endpoint::new(
        EndpointConfig::default(),
        Box::new(ChaCha8Rng::seed_from_u64(seed)),
    )
    .unwrap()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn drain(ep: &mut Endpoint, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        out.push(buf[..t.size].to_vec());
    }
    out
}

fn header(types: Types, from_initiator: bool, conn_id: u32, instance: u8, seq: u32) -> Header {
    Header {
        version: VERSION,
        types,
        from_initiator,
        instance,
        conn_id,
        seq,
    }
}

#[test]
fn unknown_connections_get_a_stateless_reset_and_resets_get_nothing() {
    let mut b = raw_endpoint(1);
    let now = Instant::ZERO;
    let mut p = Packet::new(header(Types::SD, true, 1234, 5, 77));
    p.payload = b"stray";
    let mut d = Vec::new();
    p.emit(&mut d);
    b.handle_datagram(now, addr("192.0.2.9:1"), &d);
    let out = drain(&mut b, now);
    assert_eq!(out.len(), 1);
    let r = Packet::parse(&out[0]).unwrap();
    assert_eq!(r.rst.map(|r| r.reason), Some(RstReason::UnknownConnection));
    assert_eq!(
        (r.header.conn_id, r.header.instance, r.header.from_initiator),
        (1234, 5, false)
    );
    // A RST for an unknown connection is not answered (no reset loops).
    b.handle_datagram(now, addr("192.0.2.9:1"), &out[0]);
    assert!(drain(&mut b, now).is_empty());
    assert_eq!(b.stats().unknown_connection, 2);
    assert_eq!(b.connection_count(), 0, "no state created");
}

/// A datagram with a wrong checksum is dropped as malformed, unless a carrier authenticated it
/// (the tunnel's AEAD): then it is processed like an intact one (spec §3.3).
#[test]
fn an_authenticated_datagram_skips_only_the_checksum() {
    let now = Instant::ZERO;
    let mut p = Packet::new(header(Types::SD, true, 1234, 5, 77));
    p.payload = b"stray";
    let mut d = Vec::new();
    p.emit(&mut d);
    d[2] ^= 0x01;
    let mut plain = raw_endpoint(1);
    plain.handle_datagram(now, addr("192.0.2.9:1"), &d);
    assert!(drain(&mut plain, now).is_empty());
    assert_eq!(
        (plain.stats().malformed, plain.stats().unknown_connection),
        (1, 0)
    );
    let mut tunnelled = raw_endpoint(1);
    tunnelled.handle_authenticated_datagram(now, addr("192.0.2.9:1"), &d);
    let out = drain(&mut tunnelled, now);
    assert_eq!(out.len(), 1, "the stray SD draws its RST");
    let r = Packet::parse(&out[0]).unwrap();
    assert_eq!(r.rst.map(|r| r.reason), Some(RstReason::UnknownConnection));
    assert_eq!(
        (
            tunnelled.stats().malformed,
            tunnelled.stats().unknown_connection
        ),
        (0, 1)
    );
    // Everything but the checksum is still checked: a truncated datagram is malformed.
    tunnelled.handle_authenticated_datagram(now, addr("192.0.2.9:1"), &d[..8]);
    assert_eq!(tunnelled.stats().malformed, 1);
}

#[test]
fn stateless_resets_are_rate_limited() {
    let mut b = raw_endpoint(1);
    let now = Instant::ZERO;
    for i in 0..1000u32 {
        let mut p = Packet::new(header(Types::POLL, true, i + 1, 0, 0));
        p.poll = Some(Poll {
            next_seq: 0,
            keepalive: false,
            timestamp: 0,
        });
        let mut d = Vec::new();
        p.emit(&mut d);
        b.handle_datagram(now, addr("192.0.2.9:1"), &d);
    }
    let out = drain(&mut b, now);
    assert_eq!(
        out.len() as u32,
        EndpointConfig::default().stateless_resets_per_s
    );
    assert_eq!(b.stats().stateless_suppressed, 900);
}

#[test]
fn version_negotiation_refuses_with_the_supported_bitmap() {
    let mut b = raw_endpoint(1);
    let now = Instant::ZERO;
    // A BGN whose header says version 2: answered in version 1 with the bitmap we support.
    let mut p = Packet::new(header(Types::BGN, true, 99, 3, 0));
    p.bgn = Some(stp::wire::Bgn {
        isn: 1,
        rwnd: 1 << 20,
        max_datagram: 1452,
        versions: 0b10,
        timestamp: 0,
    });
    let mut d = Vec::new();
    p.emit(&mut d);
    d[0] = (d[0] & 0x0f) | 0x20;
    b.handle_datagram(now, addr("192.0.2.9:1"), &d);
    let out = drain(&mut b, now);
    let r = Packet::parse(&out[0]).unwrap();
    assert_eq!(
        r.rst.map(|r| (r.reason, r.detail)),
        Some((RstReason::UnsupportedVersion, SUPPORTED_VERSIONS))
    );
    assert_eq!(r.header.conn_id, 99);
    // A version-1 BGN offering only version 2 is refused the same way.
    let mut d = Vec::new();
    p.emit(&mut d);
    b.handle_datagram(now, addr("192.0.2.9:1"), &d);
    let out = drain(&mut b, now);
    let r = Packet::parse(&out[0]).unwrap();
    assert_eq!(r.rst.map(|r| r.reason), Some(RstReason::UnsupportedVersion));
    assert_eq!(b.connection_count(), 0);
}

#[test]
fn packets_of_another_instance_are_ignored() {
    let mut net = Net::symmetric(
        EndpointConfig::default(),
        LinkConfig::simple(10_000_000, NS_PER_MS, 100),
        25,
    );
    let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
    let mut oa = Outcome::default();
    net.run(100 * NS_PER_MS, |net| {
        oa.absorb(&net.events(Side::A), net.now);
        oa.connected
    });
    let hb = net.b.accept().unwrap();
    let (id, inst) = {
        let c = net.b.connection(hb).unwrap();
        (c.id(), c.instance())
    };
    // An END from "a" with the right id but the wrong instance must not end b's stream.
    let mut p = Packet::new(header(Types::empty(), true, id, (inst + 1) & 0x7f, 0));
    p.end = Some(End { final_seq: 0 });
    let mut d = Vec::new();
    p.emit(&mut d);
    let now = net.instant();
    let from = net.addr_a;
    net.b.handle_datagram(now, from, &d);
    assert_eq!(net.b.stats().wrong_instance, 1);
    let c = net.b.connection(hb).unwrap();
    assert_eq!(
        c.read(&mut [0u8; 8]),
        Err(stp::ReadError::Blocked),
        "stream still open"
    );
    let _ = ha;
}

#[test]
fn a_listener_that_refuses_fails_the_initiator() {
    let refuse = EndpointConfig {
        accept_incoming: false,
        ..EndpointConfig::default()
    };
    let mut net = Net::new(EndpointConfig::default(), refuse, geo(), geo(), 26);
    net.a.connect(net.instant(), net.addr_b).unwrap();
    let mut oa = Outcome::default();
    net.run(5_000 * NS_PER_MS, |net| {
        oa.absorb(&net.events(Side::A), net.now);
        oa.failed.is_some()
    });
    assert_eq!(oa.failed, Some(ConnectionError::Refused));
    assert_eq!(net.b.stats().refused, 1);
}

#[test]
fn connection_limit_refuses_extra_bgns() {
    let limited = EndpointConfig {
        max_connections: 2,
        ..EndpointConfig::default()
    };
    let mut net = Net::new(EndpointConfig::default(), limited, geo(), geo(), 27);
    for _ in 0..3 {
        net.a.connect(net.instant(), net.addr_b).unwrap();
    }
    let mut failures = 0;
    let mut connected = 0;
    net.run(5_000 * NS_PER_MS, |net| {
        for (_, e) in net.events(Side::A) {
            match e {
                stp::Event::Failed(ConnectionError::Refused) => failures += 1,
                stp::Event::Connected => connected += 1,
                _ => {}
            }
        }
        failures + connected == 3
    });
    assert_eq!((connected, failures), (2, 1));
}

#[test]
fn an_unanswered_bgn_fails_after_the_dead_timeout() {
    let conn = Config {
        dead_timeout_ms: 12_000,
        ..Config::default()
    };
    let mut net = Net::symmetric(cfg(conn), geo(), 28);
    net.drop_filter = Some(Box::new(|a_to_b, _, _| a_to_b));
    net.a.connect(net.instant(), net.addr_b).unwrap();
    let mut oa = Outcome::default();
    net.run(60_000 * NS_PER_MS, |net| {
        oa.absorb(&net.events(Side::A), net.now);
        oa.failed.is_some()
    });
    assert!(
        matches!(oa.failed, Some(ConnectionError::HandshakeTimeout(_))),
        "{oa:?}"
    );
    let t = oa.failed_at_ns.unwrap();
    assert!(
        (12_000 * NS_PER_MS..=12_100 * NS_PER_MS).contains(&t),
        "failed at {} ms",
        t / NS_PER_MS
    );
    assert!(net.b.connection_count() == 0);
}

#[test]
fn idle_connections_stay_up_on_rare_keepalives() {
    let mut net = Net::symmetric(EndpointConfig::default(), geo(), 29);
    net.capture = Some(Vec::new());
    let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
    let (mut oa, mut ob) = (Outcome::default(), Outcome::default());
    net.run(120_000 * NS_PER_MS, |net| {
        oa.absorb(&net.events(Side::A), net.now);
        ob.absorb(&net.events(Side::B), net.now);
        let _ = net.b.accept();
        false
    });
    assert!(
        oa.connected && oa.failed.is_none() && ob.failed.is_none(),
        "{oa:?} {ob:?}"
    );
    let s = net.a.connection(ha).unwrap().stats();
    let polls = s.packets_sent.get(Types::POLL);
    if std::env::var("KA_DEBUG").is_ok() {
        for c in net.capture.as_ref().unwrap() {
            let p = c.packet();
            eprintln!(
                "{:>8} ms {:?} {:?} ka={:?}",
                c.at_ns / NS_PER_MS,
                c.from,
                p.header.types,
                p.poll.map(|x| x.keepalive)
            );
        }
    }
    eprintln!("keepalive POLLs in 120 s idle: a sent {polls}");
    assert!(
        s.keepalives_sent >= 5,
        "keepalives must keep the peer alive"
    );
    assert!(
        polls <= 14,
        "keepalives must be rare: {polls} POLLs in 120 s"
    );
}

#[test]
fn many_connections_share_one_endpoint() {
    let link = LinkConfig::simple(20_000_000, 100 * NS_PER_MS, 2000);
    let mut net = Net::symmetric(EndpointConfig::default(), link, 30);
    let n = 40;
    let mut writers = Vec::new();
    for i in 0..n {
        let h = net.a.connect(net.instant(), net.addr_b).unwrap();
        writers.push((h, Writer::new(i, 100_000 + i * 1000)));
    }
    let mut accepted: Vec<(stp::ConnectionHandle, u64)> = Vec::new();
    let mut sink = vec![0u8; 65536];
    let done = net.run(120_000 * NS_PER_MS, |net| {
        for (h, w) in writers.iter_mut() {
            w.drive(&mut net.a, *h);
        }
        while let Some(h) = net.b.accept() {
            accepted.push((h, 0));
        }
        let mut finished = 0;
        for (h, got) in accepted.iter_mut() {
            if let Some(c) = net.b.connection(*h) {
                loop {
                    match c.read(&mut sink) {
                        Ok(0) => {
                            finished += 1;
                            break;
                        }
                        Ok(k) => *got += k as u64,
                        Err(_) => break,
                    }
                }
            }
        }
        net.events(Side::A);
        net.events(Side::B);
        finished == n
    });
    assert!(done, "not every connection finished");
    let mut totals: Vec<u64> = accepted.iter().map(|(_, g)| *g).collect();
    totals.sort_unstable();
    let mut expected: Vec<u64> = (0..n).map(|i| 100_000 + i * 1000).collect();
    expected.sort_unstable();
    assert_eq!(totals, expected);
}

#[test]
fn a_stat_that_cannot_list_every_hole_is_partial_and_recovery_still_completes() {
    // Small datagrams (300 bytes) leave room for about 40 gaps per STAT; dropping every other SD
    // of the first 240 creates ~120 holes.
    let conn = Config {
        max_datagram_bytes: 300,
        initial_window: InitialWindow::Packets(300),
        ..Config::default()
    };
    let link = LinkConfig::simple(10_000_000, 100 * NS_PER_MS, 5000);
    let mut net = Net::symmetric(cfg(conn), link, 31);
    net.capture = Some(Vec::new());
    net.drop_filter = Some(Box::new(|a_to_b, idx, _| {
        a_to_b && (2..240).contains(&idx) && idx % 2 == 0
    }));
    let r = Bulk {
        net,
        a_to_b: 200_000,
        b_to_a: 0,
        limit_ns: 100_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
    let log = r.net.capture.as_ref().unwrap();
    let partial: Vec<_> = log
        .iter()
        .filter(|c| c.from == Side::B)
        .filter_map(|c| c.packet().stat.filter(|s| s.partial).map(|s| s.gaps.len()))
        .collect();
    assert!(!partial.is_empty(), "expected at least one partial STAT");
    assert!(
        partial.iter().all(|&n| n > 30),
        "a partial STAT lists as many gaps as fit: {partial:?}"
    );
    assert!(
        log.iter().all(|c| c.data.len() <= 300),
        "no datagram above the negotiated size"
    );
}

#[test]
fn min_rate_raises_pacing_above_the_window_rate() {
    let conn = Config {
        min_rate_bps: Some(5_000_000),
        initial_window: InitialWindow::Packets(1),
        ..Config::default()
    };
    let mut net = Net::symmetric(cfg(conn), geo(), 32);
    let ha = net.a.connect(net.instant(), net.addr_b).unwrap();
    let rate = net.a.connection(ha).unwrap().stats().pacing_rate_bps;
    // One packet per 600 ms would be ~19 kb/s; the floor lifts it to 5 Mb/s.
    assert!(
        (5_000_000.0..5_000_001.0).contains(&rate),
        "pacing rate {rate}"
    );
}

#[test]
fn a_silent_return_path_backs_off_polls_and_collapses_the_window() {
    // The return path goes dark for 8 s in mid-transfer; the dead timeout is 30 s.
    let mut fwd = geo();
    fwd.queue = QueueLimit::Bytes(200_000);
    let mut rev = fwd.clone();
    let (from, len) = (10_000 * NS_PER_MS, 8_000 * NS_PER_MS);
    rev.outages = vec![linkmodel::Outage {
        start_ns: from,
        duration_ns: len,
    }];
    let mut net = Net::new(
        EndpointConfig::default(),
        EndpointConfig::default(),
        fwd,
        rev,
        33,
    );
    net.capture = Some(Vec::new());
    let r = Bulk {
        net,
        a_to_b: 4_000_000,
        b_to_a: 0,
        limit_ns: 200_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
    let a = r.a_stats.unwrap();
    assert!(
        a.window_collapses >= 1,
        "window must collapse when POLLs go unanswered"
    );
    // Without backoff, POLLs at srtt/3 would number ~45 in 8 s.
    let polls = r
        .net
        .capture
        .as_ref()
        .unwrap()
        .iter()
        .filter(|c| c.from == Side::A && (from + 2_000 * NS_PER_MS..from + len).contains(&c.at_ns))
        .filter(|c| c.packet().poll.is_some())
        .count();
    eprintln!("POLLs in the last 6 s of the outage: {polls}");
    assert!(polls <= 8, "{polls} POLLs while the return path was dark");
}

#[test]
fn fast_start_sds_larger_than_the_peer_limit_are_still_recovered() {
    // a cuts its fast-start SDs for 1452-byte datagrams; b only wants 1000. One of them is lost
    // and must be resent at its original size.
    let small = Config {
        max_datagram_bytes: 1000,
        ..Config::default()
    };
    let mut net = Net::new(EndpointConfig::default(), cfg(small), geo(), geo(), 34);
    net.drop_filter = Some(Box::new(|a_to_b, idx, _| a_to_b && idx == 1));
    net.capture = Some(Vec::new());
    let r = Bulk {
        net,
        a_to_b: 100_000,
        b_to_a: 0,
        limit_ns: 60_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
    let a = r.a_stats.unwrap();
    assert!(
        a.retransmitted_packets >= 1,
        "the lost fast-start SD was resent"
    );
    let log = r.net.capture.as_ref().unwrap();
    let late_big = log
        .iter()
        .filter(|c| c.from == Side::A && c.at_ns > 600 * NS_PER_MS && c.data.len() > 1000)
        .count();
    assert!(late_big >= 1, "the resent SD keeps its original size");
    let late_new_big = log
        .iter()
        .filter(|c| c.from == Side::A && c.at_ns > 1_200 * NS_PER_MS && c.data.len() > 1000)
        .count();
    assert!(late_new_big <= 1, "new SDs after BGNAK respect b's limit");
}

#[test]
fn a_lost_endak_is_answered_again() {
    // Drop b's first ENDAK: a repeats its END and must still get an ENDAK, whether b still holds
    // the connection or has already released it.
    let mut net = Net::symmetric(EndpointConfig::default(), geo(), 35);
    let mut dropped = false;
    net.drop_filter = Some(Box::new(move |a_to_b, _, d| {
        let endak = !a_to_b && Packet::parse(d).is_ok_and(|p| p.endak.is_some());
        if endak && !dropped {
            dropped = true;
            return true;
        }
        false
    }));
    let r = Bulk {
        net,
        a_to_b: 50_000,
        b_to_a: 0,
        limit_ns: 60_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
}

#[test]
fn a_lost_sd_at_the_cumulative_point_is_resent_even_behind_others_in_a_short_window() {
    // A receive buffer of two SDs, overrun by fast start; the second SD and its first copy are
    // lost. The SD at the cumulative point must still be resent when the queue holds others
    // ahead of it and the window is short.
    let small = Config {
        recv_buffer_bytes: 2824,
        ..Config::default()
    };
    let mut net = Net::new(EndpointConfig::default(), cfg(small), geo(), geo(), 36);
    let mut seqs: Vec<u32> = Vec::new();
    let mut dropped = 0;
    net.drop_filter = Some(Box::new(move |a_to_b, _, d| {
        let Ok(p) = Packet::parse(d) else {
            return false;
        };
        if !a_to_b || p.payload.is_empty() {
            return false;
        }
        let seq = p.header.seq;
        if !seqs.contains(&seq) {
            seqs.push(seq);
        }
        if seqs.len() >= 2 && seq == seqs[1] && dropped < 2 {
            dropped += 1;
            return true;
        }
        false
    }));
    let r = Bulk {
        net,
        a_to_b: 28_240,
        b_to_a: 0,
        limit_ns: 60_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
}

#[test]
fn retransmissions_after_the_end_do_not_each_draw_a_poll() {
    // The whole transfer (40 SDs) leaves in the first window, so every SD is packetized (END
    // sent, send state Sent) before any loss is reported; every other SD of that flight is lost.
    // The window halves to 20 SDs, above small-window mode (10 SDs), so the repair is polled by
    // the timer (3 per RTT) as any other repair, and the retransmissions do not each carry a
    // POLL (and so draw a STAT each). The END rides on those timer POLLs.
    let conn = Config {
        initial_window: InitialWindow::Packets(40),
        ..Config::default()
    };
    let link = LinkConfig::simple(10_000_000, 250 * NS_PER_MS, 1000);
    let mut net = Net::symmetric(cfg(conn), link, 41);
    net.capture = Some(Vec::new());
    let mut seen = std::collections::HashSet::new();
    net.drop_filter = Some(Box::new(move |a_to_b, _, bytes| {
        let Ok(p) = Packet::parse(bytes) else {
            return false;
        };
        if !a_to_b || !p.header.types.contains(Types::SD) || !seen.insert(p.header.seq) {
            return false;
        }
        seen.len() % 2 == 0
    }));
    let mss = Config::default().max_datagram_bytes - 40;
    let bytes = 40 * mss as u64;
    let r = Bulk {
        net,
        a_to_b: bytes,
        b_to_a: 0,
        limit_ns: 100_000 * NS_PER_MS,
    }
    .run();
    assert!(r.ab_exact && r.a.closed && r.b.closed, "{r:?}");
    let log = r.net.capture.as_ref().unwrap();
    let mut sent = std::collections::HashSet::new();
    let (mut retx, mut retx_polled) = (0, 0);
    for c in log.iter().filter(|c| c.from == Side::A) {
        let p = c.packet();
        if p.header.types.contains(Types::SD) && !sent.insert(p.header.seq) {
            retx += 1;
            retx_polled += usize::from(p.poll.is_some());
        }
    }
    assert_eq!(retx, 20, "each lost SD resent once");
    assert!(
        retx_polled <= retx / 3,
        "{retx_polled} of {retx} retransmissions carried a POLL"
    );
    let stats = r.b_stats.unwrap();
    assert!(
        stats.packets_sent.get(Types::STAT) <= 12,
        "{} STATs for one repair round",
        stats.packets_sent.get(Types::STAT)
    );
}
