//! Arbitrary datagrams fed to an endpoint that holds a live connection (both roles), with time
//! advancing: no panic, and the endpoint keeps answering.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::time::Duration;
use stp::{Endpoint, EndpointConfig, Instant};

fuzz_target!(|data: &[u8]| {
    let cfg = EndpointConfig::default();
    let mut a = Endpoint::new(cfg.clone(), Box::new(ChaCha8Rng::seed_from_u64(1))).unwrap();
    let mut b = Endpoint::new(cfg, Box::new(ChaCha8Rng::seed_from_u64(2))).unwrap();
    let addr_a = "192.0.2.1:1".parse().unwrap();
    let addr_b = "192.0.2.2:1".parse().unwrap();
    let mut now = Instant::ZERO;
    let h = a.connect(now, addr_b).unwrap();
    a.connection(h).unwrap().write(&[1u8; 4000]).unwrap();
    let mut buf = Vec::new();
    while let Some(t) = a.poll_transmit(now, &mut buf) {
        b.handle_datagram(now, addr_a, &buf[..t.size]);
    }
    while let Some(t) = b.poll_transmit(now, &mut buf) {
        a.handle_datagram(now, addr_b, &buf[..t.size]);
    }
    // Split the input into datagrams at 0xff 0x00 markers; the first byte of each piece picks
    // the target endpoint and how far the clock moves.
    for piece in data.split(|&x| x == 0xff) {
        let Some((&ctl, body)) = piece.split_first() else { continue };
        now += Duration::from_millis(u64::from(ctl & 0x3f) * 10);
        let (ep, from) = if ctl & 0x80 != 0 { (&mut a, addr_b) } else { (&mut b, addr_a) };
        ep.handle_datagram(now, from, body);
        if ep.poll_timeout(now).is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        while ep.poll_transmit(now, &mut buf).is_some() {}
        while ep.poll_event().is_some() {}
    }
});
