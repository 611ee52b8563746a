//! Loopback ports for the daemons a benchmark or test starts: chosen below the kernel's
//! ephemeral range, so the ports the kernel hands to outgoing connections (a thousand parallel
//! downloads, other tests) never take one between its choice and the daemon's bind.
//!
//! A port bound to 0 and released (the usual trick) comes from the ephemeral range; with many
//! connections opening at once the kernel may give it to one of them before the daemon binds it
//! (`bench gateway --terminals 100` lost a terminal to `Address already in use` this way). Here a
//! port is taken from `[10000, low end of net.ipv4.ip_local_port_range)`, starting at a place
//! that differs per process and per call, and only if both TCP and UDP can bind it on
//! 127.0.0.1 at the time of asking, and never twice in one process (a benchmark asks for a few
//! hundred before starting its daemons, which would otherwise meet on one by chance). Two
//! processes choosing at the same moment can still meet on a port (about one in 20,000 per pair
//! of choices); the caller's bind then fails with `Address already in use`, named.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Lowest port handed out.
const FIRST: u16 = 10_000;
static CALLS: AtomicU32 = AtomicU32::new(0);
/// The ports this process has handed out.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The ephemeral range's low end (`/proc/sys/net/ipv4/ip_local_port_range`; 32768 if unreadable).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

fn bindable(port: u16) -> bool {
    let at = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpListener::bind(at).is_ok() && UdpSocket::bind(at).is_ok()
}

/// A loopback port that TCP and UDP could both bind at the time of asking, outside the
/// ephemeral range (see the module documentation). Falls back to one the kernel picks when the
/// range below it is too small or full.
pub fn free_port() -> std::io::Result<u16> {
    let low = ephemeral_low();
    if low > FIRST + 1000 {
        let span = u32::from(low - FIRST);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let start = (std::process::id().wrapping_mul(7919) ^ nanos).wrapping_add(call * 131);
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        let given = given.get_or_insert_with(HashSet::new);
        for i in 0..2048u32 {
            let port = FIRST + (start.wrapping_add(i) % span) as u16;
            if !given.contains(&port) && bindable(port) {
                given.insert(port);
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_bindable_and_never_given_twice() {
        let low = ephemeral_low();
        let ports: Vec<u16> = (0..500).map(|_| free_port().unwrap()).collect();
        for &p in &ports {
            if low > FIRST + 1000 {
                assert!((FIRST..low).contains(&p), "{p} not below {low}");
            }
            assert!(bindable(p), "{p} cannot be bound");
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "a port handed out twice");
    }
}
