//! Shared pieces of the gateway's end-to-end tests.
#![allow(dead_code)]

use linkem::{EmulatorConfig, EmulatorHandle, Profile, UdpEmulator};
use pep::hop::{Hop, HopConfig, Security};
use pep::keys::{PrivateKey, PublicKey};
use std::net::SocketAddr;
use stp::EndpointConfig;
use tokio::net::UdpSocket;

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
    let Some(p) = profile else {
        return (None, gateway);
    };
    let (up, down) = p.links();
    let emu = UdpEmulator::start(EmulatorConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        to: gateway,
        up,
        down,
        seed,
    })
    .await
    .unwrap();
    let addr = emu.local_addr();
    (Some(emu), addr)
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
