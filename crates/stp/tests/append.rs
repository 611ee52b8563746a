//! `Endpoint::poll_transmit_append` builds the same datagrams as `poll_transmit`, after what the
//! buffer already holds (the hop builds them behind room for its tunnel header, in its send
//! batch), and leaves the buffer as it was when nothing is due.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::net::SocketAddr;
use stp::{Endpoint, EndpointConfig, Instant};

fn endpoint() -> Endpoint {
    Endpoint::new(
        EndpointConfig::default(),
        Box::new(ChaCha8Rng::seed_from_u64(9)),
    )
    .unwrap()
}

#[test]
fn appended_datagrams_are_the_ones_poll_transmit_writes() {
    let peer: SocketAddr = "192.0.2.2:1".parse().unwrap();
    let (mut a, mut b) = (endpoint(), endpoint());
    let (ha, hb) = (
        a.connect(Instant::ZERO, peer).unwrap(),
        b.connect(Instant::ZERO, peer).unwrap(),
    );
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    a.connection(ha).unwrap().write(&data).unwrap();
    b.connection(hb).unwrap().write(&data).unwrap();
    let prefix = b"already batched".to_vec();
    let (mut one, mut appended) = (Vec::new(), prefix.clone());
    let mut sent = 0;
    loop {
        let t = a.poll_transmit(Instant::ZERO, &mut one);
        let start = appended.len();
        let u = b.poll_transmit_append(Instant::ZERO, &mut appended);
        assert_eq!(t, u, "datagram {sent}");
        let Some(u) = u else { break };
        assert_eq!(appended.len() - start, u.size);
        assert_eq!(&appended[start..], &one[..], "datagram {sent}");
        sent += 1;
    }
    assert!(sent >= 1, "the BGN (with data) left");
    assert_eq!(
        &appended[..prefix.len()],
        &prefix[..],
        "what was there is untouched"
    );
    // Nothing due: the buffer is as it was.
    let len = appended.len();
    assert!(b
        .poll_transmit_append(Instant::ZERO, &mut appended)
        .is_none());
    assert_eq!(appended.len(), len);
}

#[test]
fn unsent_counts_written_bytes_until_their_first_transmission() {
    let peer: SocketAddr = "192.0.2.2:1".parse().unwrap();
    let mut a = endpoint();
    let h = a.connect(Instant::ZERO, peer).unwrap();
    let data = vec![7u8; 20_000];
    assert_eq!(a.connection(h).unwrap().unsent(), 0);
    let n = a.connection(h).unwrap().write(&data).unwrap();
    assert_eq!(a.connection(h).unwrap().unsent(), n as u64);
    // What leaves (the BGN's flight, as far as the initial window allows) is no longer unsent;
    // what is in flight is not counted.
    let mut out = Vec::new();
    let mut sent = 0;
    while a.poll_transmit(Instant::ZERO, &mut out).is_some() {
        sent += 1;
    }
    assert!(sent >= 1);
    let left = a.connection(h).unwrap().unsent();
    assert!(
        left < n as u64,
        "{left} of {n} still unsent after {sent} datagrams"
    );
}
