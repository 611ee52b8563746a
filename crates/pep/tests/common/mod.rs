//! Shared pieces of the gateway's end-to-end tests.
#![allow(dead_code)]

use linkem::{EmulatorConfig, EmulatorHandle, Profile, UdpEmulator};
use linkmodel::LinkConfig;
use pep::hop::{Hop, HopConfig, Security};
use pep::keys::generate_keypair;
use pep::keys::{PrivateKey, PublicKey};
use pep::policy::{Policy, PolicyConfig};
use pep::socks::SocksAuth;
use pep::tunnel::{Responder, ResponderConfig};
use rand_core::SeedableRng;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use stp::EndpointConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A deterministic pseudo-random byte pattern.
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

/// Hop parameters for tests.
pub fn hop_config(seed: u64, relay_buffer_bytes: u32) -> HopConfig {
    HopConfig {
        endpoint: EndpointConfig::default(),
        relay_buffer_bytes,
        seed,
        send_rate_bps: None,
    }
}

/// Hop parameters sized from a link's allocation, as the daemons size them from their config.
pub fn hop_config_for(seed: u64, link: pep::sizing::HopLink) -> HopConfig {
    let connection = link.stp_config(stp::Config::default());
    let bdp = link.send_rate_bps.max(link.recv_rate_bps) * u64::from(link.rtt_ms) / 8000;
    HopConfig {
        endpoint: EndpointConfig {
            connection,
            ..EndpointConfig::default()
        },
        relay_buffer_bytes: u32::try_from(bdp * 5 / 2).unwrap_or(u32::MAX),
        seed,
        send_rate_bps: Some(link.shaper_rate_bps()),
    }
}

/// The two sides' views of a profile's allocation: (terminal, gateway).
pub fn profile_links(p: Profile) -> (pep::sizing::HopLink, pep::sizing::HopLink) {
    let (down, up, rtt_ns) = p.parameters();
    let rtt_ms = (rtt_ns / 1_000_000) as u32;
    (
        pep::sizing::HopLink {
            send_rate_bps: up,
            recv_rate_bps: down,
            rtt_ms,
        },
        pep::sizing::HopLink {
            send_rate_bps: down,
            recv_rate_bps: up,
            rtt_ms,
        },
    )
}

/// With a profile, an emulated link in front of `gateway`; returns it and the address the
/// terminal should use.
pub async fn link_to(
    gateway: SocketAddr,
    profile: Option<Profile>,
    seed: u64,
) -> (Option<EmulatorHandle>, SocketAddr) {
    match profile {
        Some(p) => {
            let (up, down) = p.links();
            let emu = emulate(gateway, up, down, seed).await;
            let addr = emu.local_addr();
            (Some(emu), addr)
        }
        None => (None, gateway),
    }
}

/// An emulated link with these directions in front of `gateway`.
pub async fn emulate(
    gateway: SocketAddr,
    up: LinkConfig,
    down: LinkConfig,
    seed: u64,
) -> EmulatorHandle {
    UdpEmulator::start(EmulatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        to: gateway,
        up,
        down,
        seed,
    })
    .await
    .unwrap()
}

/// A terminal hop on loopback talking to `gateway`.
pub async fn terminal_hop(
    local: PrivateKey,
    gateway_key: PublicKey,
    gateway: SocketAddr,
    config: HopConfig,
) -> Hop {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    Hop::start(
        sock,
        Security::Terminal {
            local,
            gateway_key,
            gateway,
        },
        config,
    )
    .unwrap()
}

pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Origin server: "D n\n" → n pattern bytes then close; "U n\n" → reads n bytes, answers the
/// 8-byte FNV hash, closes.
pub async fn origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut r = BufReader::new(s);
                let mut line = String::new();
                if r.read_line(&mut line).await.is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let (Some(cmd), Some(n)) = (
                    parts.next(),
                    parts.next().and_then(|n| n.parse::<usize>().ok()),
                ) else {
                    return;
                };
                if cmd == "D" {
                    let _ = r.get_mut().write_all(&pattern(7, n)).await;
                    let _ = r.get_mut().shutdown().await;
                } else {
                    let mut got = vec![0u8; n];
                    if r.read_exact(&mut got).await.is_ok() {
                        let _ = r.get_mut().write_all(&fnv(&got).to_be_bytes()).await;
                        let _ = r.get_mut().shutdown().await;
                    }
                }
            });
        }
    });
    addr
}

/// SOCKS5 CONNECT to `dest`; returns the stream and the reply code.
pub async fn socks_connect(proxy: SocketAddr, dest: SocketAddr) -> (TcpStream, u8) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let SocketAddr::V4(v4) = dest else {
        panic!("ipv4 only here")
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.unwrap();
    (s, rep[1])
}

/// A terminal with a SOCKS5 listener and a gateway on loopback, optionally with an emulated link
/// (`(up, down)`) between them; the gateway allows `allow`.
pub struct Setup {
    pub socks: SocketAddr,
    pub emu: Option<EmulatorHandle>,
    pub gateway: pep::hop::HopMonitor,
    pub terminal: pep::hop::HopMonitor,
}

pub async fn socks_pair(
    terminal: HopConfig,
    gateway: HopConfig,
    links: Option<(LinkConfig, LinkConfig)>,
    allow: Vec<String>,
) -> Setup {
    socks_pair_opts(terminal, gateway, links, allow, false).await
}

/// [`socks_pair`] with the terminal's SOCKS5 fast open on or off.
pub async fn socks_pair_opts(
    terminal: HopConfig,
    gateway: HopConfig,
    links: Option<(LinkConfig, LinkConfig)>,
    allow: Vec<String>,
    fast_open: bool,
) -> Setup {
    let (tk, tp) = generate_keypair().unwrap();
    let (gk, gp) = generate_keypair().unwrap();
    let gsock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let rng = Box::new(rand_chacha::ChaCha20Rng::seed_from_u64(3));
    let responder = Responder::new(gk, [tp], ResponderConfig::default(), rng).unwrap();
    let gw = Hop::start(
        gsock,
        Security::Gateway {
            responder: Box::new(responder),
        },
        gateway,
    )
    .unwrap();
    let gw_addr = gw.local_addr();
    let gw_monitor = gw.monitor();
    let policy = Arc::new(
        Policy::new(PolicyConfig {
            allow,
            deny: vec![],
            allow_private: false,
            own_addresses: vec![],
        })
        .unwrap(),
    );
    tokio::spawn(pep::relay::serve(gw, policy, Duration::from_secs(5)));
    let (emu, to) = match links {
        Some((up, down)) => {
            let emu = emulate(gw_addr, up, down, 4).await;
            let addr = emu.local_addr();
            (Some(emu), addr)
        }
        None => (None, gw_addr),
    };
    let term = terminal_hop(tk, gp, to, terminal).await;
    let terminal = term.monitor();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let socks = l.local_addr().unwrap();
    tokio::spawn(pep::relay::serve_socks_opts(
        l,
        Arc::new(term),
        Arc::new(SocksAuth::None),
        pep::ops::Ops::unlimited(pep::metrics::Side::Terminal),
        fast_open,
    ));
    Setup {
        socks,
        emu,
        gateway: gw_monitor,
        terminal,
    }
}
