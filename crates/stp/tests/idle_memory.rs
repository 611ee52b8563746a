//! What an idle connection costs: the connection struct, and every heap byte its two endpoints
//! hold for it once the handshake is over (the connection itself, its own allocations and its
//! share of the endpoints' tables), counted by a counting allocator. Each end (the initiator in
//! one endpoint, the responder in the other) is within 1 KiB, tables included: 993 bytes, of
//! which 768 are the connection struct (it was 1,712 per end, 984 of them the struct, before the
//! statistics, events, controller and hole bookkeeping left the heap; 1,968 per end with the
//! statistics and configuration inline). These bounds keep it from growing back unnoticed.

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
fn each_end_of_an_idle_connection_stays_within_1_kib() {
    let size = std::mem::size_of::<Connection>();
    // 4,000 connections leave the endpoints' hash tables half full (8,192 buckets), near their
    // emptiest, so their share here is about the most it gets.
    let per_end = heap_per_idle_connection(4000) / 2.0;
    eprintln!(
        "size_of::<Connection>() = {size} bytes; heap per end of an idle connection = {per_end:.0} bytes"
    );
    assert!(size <= 800, "Connection is {size} bytes, above 800");
    assert!(
        per_end <= 1024.0,
        "an idle connection holds {per_end:.0} heap bytes per end, above 1 KiB"
    );
}
