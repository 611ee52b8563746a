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
    }
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
