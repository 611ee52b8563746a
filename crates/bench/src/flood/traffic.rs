//! The hostile traffic of `satstp bench flood`: forged datagrams (random bytes, replays of
//! captured ones, handshake initiations from unknown keys) sent at a set rate, the tap that
//! captures the terminal's datagrams for replay, an authenticated terminal opening streams
//! beyond its limit, and the kernel's receive-buffer drop counter.

use crate::error::Result;
use pep::hop::Hop;
use pep::keys::{generate_keypair, PublicKey};
use pep::tunnel::Initiator;
use rand_core::{RngCore, SeedableRng};
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// Captured terminal datagrams kept for replay.
pub const CAPTURE: usize = 256;
/// Forged initiations from unknown keys prepared before the flood (generating them is costly).
const FORGED_INITIATIONS: usize = 64;
/// Stream opens the authenticated attacker keeps in flight.
const ATTACKER_OPENS_IN_FLIGHT: usize = 64;

/// The forged datagrams of the flood, by kind, sent round robin.
pub struct Ammunition {
    pub random: bool,
    pub replays: Vec<Vec<u8>>,
    pub initiations: Vec<Vec<u8>>,
}

/// Counts of what the flood sent.
#[derive(Default)]
pub struct Sent {
    pub random: AtomicU64,
    pub replayed: AtomicU64,
    pub initiations: AtomicU64,
    pub errors: AtomicU64,
}

/// Sends the flood to `to` at `rate` datagrams per second until `stop`; round robin over
/// random bytes, replays and initiations (kinds without ammunition are skipped).
pub fn flood(to: SocketAddr, rate: u64, ammo: Ammunition, sent: Arc<Sent>, stop: Arc<AtomicBool>) {
    let Ok(sock) = StdUdpSocket::bind(if to.is_ipv6() {
        "[::1]:0"
    } else {
        "127.0.0.1:0"
    }) else {
        sent.errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut random = vec![0u8; 1500];
    let start = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Keep to the rate: send what is due, then sleep a little.
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if n >= due {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        for _ in 0..(due - n).min(1000) {
            n += 1;
            // Round robin over the kinds that have ammunition.
            let mut kind = n % 3;
            for _ in 0..3 {
                let ready = match kind {
                    0 => ammo.random,
                    1 => !ammo.replays.is_empty(),
                    _ => !ammo.initiations.is_empty(),
                };
                if ready {
                    break;
                }
                kind = (kind + 1) % 3;
            }
            let (data, counter): (&[u8], &AtomicU64) = match kind {
                1 if !ammo.replays.is_empty() => (
                    &ammo.replays[(n as usize / 3) % ammo.replays.len()],
                    &sent.replayed,
                ),
                2 if !ammo.initiations.is_empty() => (
                    &ammo.initiations[(n as usize / 3) % ammo.initiations.len()],
                    &sent.initiations,
                ),
                _ if !ammo.random => break,
                _ => {
                    let len = 20 + (rng.next_u32() as usize % 1400);
                    rng.fill_bytes(&mut random[..len]);
                    (&random[..len], &sent.random)
                }
            };
            match sock.send_to(data, to) {
                Ok(_) => counter.fetch_add(1, Ordering::Relaxed),
                Err(_) => sent.errors.fetch_add(1, Ordering::Relaxed),
            };
        }
    }
}

/// Handshake initiations towards `gateway` from freshly generated keys it does not know.
pub fn forged_initiations(gateway: &PublicKey) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(FORGED_INITIATIONS);
    for i in 0..FORGED_INITIATIONS {
        let (k, _) = generate_keypair().map_err(|e| err!("generating a key pair: {e}"))?;
        let init = Initiator::new(&k, gateway, i as u32 * 2 + 1, 1)
            .map_err(|e| err!("forging an initiation: {e}"))?;
        out.push(init.initiation().to_vec());
    }
    Ok(out)
}

/// A UDP relay between the terminal and the emulator that keeps copies of the terminal's last
/// `CAPTURE` datagrams. Returns the address the terminal should use.
pub async fn tap(to: SocketAddr, captured: Arc<Mutex<Vec<Vec<u8>>>>) -> Result<SocketAddr> {
    let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
    let addr = sock.local_addr()?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        let mut terminal: Option<SocketAddr> = None;
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let data = &buf[..n];
            if from == to {
                if let Some(t) = terminal {
                    let _ = sock.send_to(data, t).await;
                }
            } else {
                terminal = Some(from);
                if let Ok(mut c) = captured.lock() {
                    if c.len() == CAPTURE {
                        c.remove(0);
                    }
                    c.push(data.to_vec());
                }
                let _ = sock.send_to(data, to).await;
            }
        }
    });
    Ok(addr)
}

/// UDP datagrams the kernel dropped because a socket's receive buffer was full (`RcvbufErrors`
/// of `/proc/net/snmp`, all sockets of this network namespace); 0 where it cannot be read.
pub fn udp_rcvbuf_errors() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/net/snmp") else {
        return 0;
    };
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The authenticated attacker: opens streams to `origin` as fast as the gateway answers,
/// `ATTACKER_OPENS_IN_FLIGHT` at a time, keeping the ones admitted; counts the opens.
pub async fn attack_opens(
    hop: Arc<Hop>,
    origin: SocketAddr,
    opens: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let target = pep::stream::Target::Ip(origin);
    let mut kept = Vec::new();
    let mut set = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        while set.len() < ATTACKER_OPENS_IN_FLIGHT {
            let (hop, target) = (Arc::clone(&hop), target.clone());
            set.spawn(async move { pep::terminal::open(&hop, &target, &[], None).await });
            opens.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(Ok(Ok((stream, _)))) = set.join_next().await {
            kept.push(stream);
        }
    }
    set.abort_all();
}
