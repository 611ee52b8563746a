//! `satstp bench engine`: the STP engine alone, two endpoints in memory on one thread.

use crate::error::Result;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::net::SocketAddr;
use stp::{Config, Endpoint, EndpointConfig, Instant};

/// The flags' checks.
pub fn check(payload: u16, bytes: u64, idle: u32) -> Result<()> {
    if !(256..=9000).contains(&payload) {
        bail!("--payload must be between 256 and 9000 bytes, got {payload}");
    }
    if bytes == 0 {
        bail!("--bytes must be positive");
    }
    if idle > 100_000 {
        bail!("--idle must be at most 100000, got {idle}");
    }
    Ok(())
}

/// What the engine benchmark measured.
#[derive(Debug, Clone, Copy)]
pub struct EngineResult {
    pub bytes: u64,
    pub seconds: f64,
    pub datagrams: u64,
    pub control_datagrams: u64,
    /// Resident memory added by the idle connections (both endpoints' halves), KiB.
    pub idle_rss_kib: u64,
}

impl EngineResult {
    /// Resident bytes per idle connection (both ends), when there are idle connections.
    pub fn idle_per_conn(&self, idle: u32) -> Option<f64> {
        (idle > 0).then(|| self.idle_rss_kib as f64 * 1024.0 / f64::from(idle))
    }

    /// Resident bytes per end of an idle connection (each connection has two: the initiator in
    /// one endpoint, the responder in the other), when there are idle connections. The figure
    /// the engine's 1 KiB target is stated in.
    pub fn idle_per_end(&self, idle: u32) -> Option<f64> {
        self.idle_per_conn(idle).map(|b| b / 2.0)
    }
}

/// Moves `total` bytes between two STP endpoints in memory on this thread (no delay, no
/// loss), in SDs of `payload` bytes, with `idle` idle connections held beside.
pub fn run(total: u64, payload: u16, idle: u32) -> Result<EngineResult> {
    let conn = Config {
        // Header (12) + room kept for POLL (8), END (4) and BGN/BGNAK (16).
        max_datagram_bytes: payload + 40,
        recv_buffer_bytes: 16 << 20,
        send_buffer_bytes: 16 << 20,
        min_poll_interval_ms: 1,
        ..Config::default()
    };
    let cfg = EndpointConfig {
        connection: conn,
        max_connections: idle + 10,
        max_accept_queue: idle + 10,
        ..EndpointConfig::default()
    };
    let mut a = Endpoint::new(cfg.clone(), Box::new(ChaCha8Rng::seed_from_u64(1)))?;
    let mut b = Endpoint::new(cfg, Box::new(ChaCha8Rng::seed_from_u64(2)))?;
    let addr_a = SocketAddr::from(([192, 0, 2, 1], 1));
    let addr_b = SocketAddr::from(([192, 0, 2, 2], 1));
    let mut buf = Vec::with_capacity(usize::from(payload) + 64);
    // Open the idle connections first and let their handshakes finish.
    let rss_before = crate::process::rss_kib()?;
    for _ in 0..idle {
        a.connect(Instant::ZERO, addr_b)?;
    }
    exchange(&mut a, &mut b, addr_a, addr_b, Instant::ZERO, &mut buf);
    while b.accept().is_some() {}
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}
    // Taking their events marks the connections for polling: let every endpoint find them
    // quiet (nothing to send, deadlines computed) before the clock starts, as in a daemon that
    // has held them for a while.
    exchange(&mut a, &mut b, addr_a, addr_b, Instant::ZERO, &mut buf);
    for ep in [&mut a, &mut b] {
        ep.poll_timeout(Instant::ZERO);
    }
    let idle_rss_kib = crate::process::rss_kib()?.saturating_sub(rss_before);
    let start = std::time::Instant::now();
    let clock = || Instant::from_nanos(start.elapsed().as_nanos() as u64);
    let ha = a.connect(clock(), addr_b)?;
    let source = vec![0x5au8; 1 << 20];
    let mut sink = vec![0u8; 1 << 20];
    let (mut written, mut read) = (0u64, 0u64);
    let (mut datagrams, mut control) = (0u64, 0u64);
    let mut hb = None;
    while read < total {
        let now = clock();
        if written < total {
            let c = a
                .connection(ha)
                .ok_or_else(|| err!("sender connection vanished"))?;
            let n = (total - written).min(source.len() as u64) as usize;
            written += c
                .write(&source[..n])
                .map_err(|e| err!("write failed: {e}"))? as u64;
        }
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            b.handle_datagram(now, addr_a, &buf[..t.size]);
            datagrams += 1;
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(now, addr_b, &buf[..t.size]);
            datagrams += 1;
            control += 1;
        }
        if hb.is_none() {
            hb = b.accept();
        }
        if let Some(h) = hb {
            if let Some(c) = b.connection(h) {
                while let Ok(n) = c.read(&mut sink) {
                    if n == 0 {
                        break;
                    }
                    read += n as u64;
                }
            }
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        for ep in [&mut a, &mut b] {
            if ep.poll_timeout(now).is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
        }
        if start.elapsed().as_secs() > 600 {
            bail!("engine benchmark did not finish within 600 s ({read} of {total} bytes)");
        }
    }
    Ok(EngineResult {
        bytes: read,
        seconds: start.elapsed().as_secs_f64(),
        datagrams,
        control_datagrams: control,
        idle_rss_kib,
    })
}

/// Delivers datagrams between the two endpoints until neither has anything to send.
fn exchange(
    a: &mut Endpoint,
    b: &mut Endpoint,
    addr_a: SocketAddr,
    addr_b: SocketAddr,
    now: Instant,
    buf: &mut Vec<u8>,
) {
    loop {
        let mut moved = false;
        while let Some(t) = a.poll_transmit(now, buf) {
            b.handle_datagram(now, addr_a, &buf[..t.size]);
            moved = true;
        }
        while let Some(t) = b.poll_transmit(now, buf) {
            a.handle_datagram(now, addr_b, &buf[..t.size]);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}
