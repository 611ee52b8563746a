//! What an idle connection costs: the connection struct, and every heap byte its two endpoints
//! hold for it once the handshake is over (the connection's own allocations and its share of the
//! endpoints' tables), counted by a counting allocator. The connection struct is within 1 KiB
//! (it was 1,528 bytes with its statistics and configuration inline; 3,937 heap bytes for both
//! ends, 3,425 now); these bounds keep it from growing back unnoticed.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicIsize, Ordering};
use stp::{Connection, Endpoint, EndpointConfig, Instant};

/// Counts the bytes currently allocated (by the requested layout; the allocator's own rounding
/// and headers come on top, which `bench engine --idle` shows in resident memory).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Delivers datagrams both ways until neither endpoint has anything to send.
fn exchange(a: &mut Endpoint, b: &mut Endpoint, addr_a: SocketAddr, addr_b: SocketAddr) {
    let mut buf = Vec::with_capacity(2048);
    loop {
        let mut moved = false;
        while let Some(t) = a.poll_transmit(Instant::ZERO, &mut buf) {
            b.handle_datagram(Instant::ZERO, addr_a, &buf[..t.size]);
            moved = true;
        }
        while let Some(t) = b.poll_transmit(Instant::ZERO, &mut buf) {
            a.handle_datagram(Instant::ZERO, addr_b, &buf[..t.size]);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

/// Heap bytes held per idle connection (both ends, endpoint tables included), over `n`.
fn heap_per_idle_connection(n: u32) -> f64 {
    let cfg = EndpointConfig {
        max_connections: n + 10,
        max_accept_queue: n + 10,
        ..EndpointConfig::default()
    };
    let mut a = Endpoint::new(cfg.clone(), Box::new(ChaCha8Rng::seed_from_u64(1))).unwrap();
    let mut b = Endpoint::new(cfg, Box::new(ChaCha8Rng::seed_from_u64(2))).unwrap();
    let addr_a: SocketAddr = "192.0.2.1:1".parse().unwrap();
    let addr_b: SocketAddr = "192.0.2.2:1".parse().unwrap();
    // Warm the allocator-independent parts (the endpoints' empty tables) before counting.
    exchange(&mut a, &mut b, addr_a, addr_b);
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..n {
        a.connect(Instant::ZERO, addr_b).unwrap();
    }
    exchange(&mut a, &mut b, addr_a, addr_b);
    let mut accepted = 0;
    while b.accept().is_some() {
        accepted += 1;
    }
    assert_eq!(accepted, n, "every connection was accepted");
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}
    exchange(&mut a, &mut b, addr_a, addr_b);
    for ep in [&mut a, &mut b] {
        ep.poll_timeout(Instant::ZERO);
    }
    assert_eq!(a.connection_count(), n as usize);
    assert_eq!(b.connection_count(), n as usize);
    let after = LIVE.load(Ordering::Relaxed);
    (after - before) as f64 / f64::from(n)
}

#[test]
fn an_idle_connection_stays_within_its_memory_bounds() {
    let size = std::mem::size_of::<Connection>();
    let per_conn = heap_per_idle_connection(4000);
    eprintln!(
        "size_of::<Connection>() = {size} bytes; heap per idle connection (both ends) = {per_conn:.0} bytes"
    );
    assert!(size <= 1024, "Connection is {size} bytes, above 1 KiB");
    assert!(
        per_conn <= 3.5 * 1024.0,
        "an idle connection holds {per_conn:.0} heap bytes for its two ends, above 3.5 KiB"
    );
}
