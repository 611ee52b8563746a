//! The deadline `Endpoint::poll_timeout` gives right after a send loop (whose last
//! `poll_transmit` found nothing to send) is built from what that empty poll asked, not asked
//! again: it must be the deadline asked afresh. Over a whole transfer between two endpoints, at
//! every step, the deadline after the send loop is compared with the one computed again once the
//! connection was handed out (`Endpoint::connection`, which makes the endpoint recompute it).

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::collections::VecDeque;
use std::net::SocketAddr;
use stp::{ConnectionHandle, Endpoint, EndpointConfig, Instant};

const DELAY_NS: u64 = 40_000_000;
const SIZE: u64 = 3_000_000;

struct Side {
    ep: Endpoint,
    addr: SocketAddr,
    conn: Option<ConnectionHandle>,
    /// Datagrams on their way to this side: arrival time and bytes.
    inbox: VecDeque<(u64, Vec<u8>)>,
    /// The endpoint's deadline, in nanoseconds.
    deadline: Option<u64>,
}

impl Side {
    fn new(seed: u64, addr: &str) -> Side {
        let ep = Endpoint::new(
            EndpointConfig::default(),
            Box::new(ChaCha8Rng::seed_from_u64(seed)),
        )
        .unwrap();
        Side {
            ep,
            addr: addr.parse().unwrap(),
            conn: None,
            inbox: VecDeque::new(),
            deadline: None,
        }
    }
}

#[test]
fn the_deadline_after_an_empty_poll_is_the_one_asked_afresh() {
    let mut sides = [Side::new(1, "192.0.2.1:1"), Side::new(2, "192.0.2.2:1")];
    let to = sides[1].addr;
    sides[0].conn = Some(sides[0].ep.connect(Instant::ZERO, to).unwrap());
    let zeros = vec![0u8; 16 * 1024];
    let (mut written, mut received) = (0u64, 0u64);
    let mut buf = Vec::with_capacity(2048);
    let mut now = 0u64;
    let mut compared = 0;
    for _ in 0..200_000 {
        for i in 0..2 {
            let (x, y) = sides.split_at_mut(1);
            let (side, other) = if i == 0 {
                (&mut x[0], &mut y[0])
            } else {
                (&mut y[0], &mut x[0])
            };
            let t = Instant::from_nanos(now);
            while side.inbox.front().is_some_and(|(at, _)| *at <= now) {
                let (_, d) = side.inbox.pop_front().unwrap();
                side.ep.handle_datagram(t, other.addr, &d);
            }
            if side.deadline.is_some_and(|d| d <= now) {
                side.ep.handle_timeout(t);
            }
            while let Some(h) = side.ep.accept() {
                side.conn = Some(h);
            }
            while side.ep.poll_event().is_some() {}
            if let Some(c) = side.conn.and_then(|h| side.ep.connection(h)) {
                if i == 0 {
                    while written < SIZE {
                        let n = (SIZE - written).min(zeros.len() as u64) as usize;
                        match c.write(&zeros[..n]) {
                            Ok(0) | Err(_) => break,
                            Ok(k) => written += k as u64,
                        }
                    }
                    if written == SIZE {
                        c.shutdown();
                    }
                } else {
                    while let Ok(Some(chunk)) = c.read_chunk(usize::MAX) {
                        received += chunk.len() as u64;
                    }
                }
            }
            while let Some(tx) = side.ep.poll_transmit(t, &mut buf) {
                other
                    .inbox
                    .push_back((now + DELAY_NS, buf[..tx.size].to_vec()));
            }
            // Right after the empty poll, then asked afresh.
            let after_poll = side.ep.poll_timeout(t);
            if let Some(h) = side.conn {
                side.ep.connection(h);
                assert_eq!(
                    side.ep.poll_timeout(t),
                    after_poll,
                    "side {i} at {now} ns: the deadline after the empty poll differs"
                );
                compared += 1;
            }
            side.deadline = after_poll.map(|d| d.as_nanos());
        }
        if received == SIZE {
            break;
        }
        let next = sides
            .iter()
            .filter_map(|s| s.inbox.front())
            .map(|(at, _)| *at)
            .chain(sides.iter().filter_map(|s| s.deadline))
            .min()
            .expect("something is pending until the transfer ends");
        now = next.max(now + 1);
    }
    assert_eq!(received, SIZE, "the transfer completed");
    assert!(compared > 500, "{compared} deadlines compared");
}
