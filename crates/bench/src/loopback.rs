//! The split gateway wired together on loopback, as `satstp demo` runs it: a gateway, the UDP
//! link emulator in front of its hop port and a terminal with a SOCKS5 listener, both hop sides
//! sized from the link as the daemons size them (`pep::sizing::HopLink`). Also the pieces
//! `bench flood` shares with it (the two sides' hop links, the policy that lets a gateway reach
//! a loopback origin) and the demo's goodput ceiling.

use crate::error::{Context, Result};
use linkem::{EmulatorConfig, EmulatorHandle, Profile, UdpEmulator};
use pep::gateway::policy::{Policy, PolicyConfig};
use pep::keys::generate_keypair;
use pep::sizing::HopLink;
use pep::socks::SocksAuth;
use pep::stack::{SocksListener, StpHop, TerminalHop};
use pep::{GatewayOptions, TerminalOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Loopback, any port.
const ANY: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// The hop links of a satellite link's two sides, `(gateway, terminal)`: the gateway sends at
/// the downlink's rate and receives at the uplink's, the terminal the other way round.
pub fn hop_links(down_bps: u64, up_bps: u64, rtt_ms: u32) -> (HopLink, HopLink) {
    let gateway = HopLink {
        send_rate_bps: down_bps,
        recv_rate_bps: up_bps,
        rtt_ms,
    };
    let terminal = HopLink {
        send_rate_bps: up_bps,
        recv_rate_bps: down_bps,
        rtt_ms,
    };
    (gateway, terminal)
}

/// A gateway's policy that allows a loopback origin (a gateway denies loopback by default).
pub fn loopback_origin_policy() -> Result<Policy> {
    Policy::new(PolicyConfig {
        allow: vec!["127.0.0.0/8".into()],
        deny: vec![],
        allow_private: false,
        own_addresses: vec![],
    })
    .map_err(|e| err!("building the gateway policy: {e}"))
}

/// Terminal, emulator and gateway, wired together on loopback.
pub struct Stack {
    /// The terminal's SOCKS5 listener.
    pub socks: SocketAddr,
    pub emulator: EmulatorHandle,
    pub gateway: pep::Gateway,
}

impl Stack {
    /// Starts the gateway, the emulator with `profile`'s links in front of it, and the terminal
    /// (its SOCKS5 fast open as given); both hops sized from the link's rates and round trip.
    pub async fn start(
        profile: Profile,
        down_bps: u64,
        up_bps: u64,
        rtt_ms: u32,
        seed: u64,
        fast_open: bool,
    ) -> Result<Stack> {
        let (terminal_key, terminal_pub) = generate_keypair()?;
        let (gateway_key, gateway_pub) = generate_keypair()?;
        let (gw_link, term_link) = hop_links(down_bps, up_bps, rtt_ms);
        let mut g = GatewayOptions::new(
            gateway_key,
            vec![terminal_pub],
            ANY,
            StpHop::sized(gw_link, false, seed.wrapping_add(2)),
            gw_link.relay_buffer_bytes(),
            Arc::new(loopback_origin_policy()?),
            Duration::from_secs(30),
        );
        g.responder_seed = seed ^ 0x5eed;
        let gateway = pep::Gateway::start(g)
            .await
            .map_err(|e| err!("starting the gateway: {e}"))?;
        let (up, down) = profile.links();
        let emulator = UdpEmulator::start(EmulatorConfig {
            listen: ANY,
            to: gateway.hop_addr(),
            up,
            down,
            seed,
        })
        .await?;
        let mut stp = StpHop::sized(term_link, false, seed.wrapping_add(1));
        stp.bind = Some(ANY);
        let mut t = TerminalOptions::new(
            terminal_key,
            emulator.local_addr(),
            gateway_pub,
            TerminalHop::Stp(Box::new(stp)),
            term_link.relay_buffer_bytes(),
        );
        t.socks = Some(SocksListener {
            listen: ANY,
            auth: SocksAuth::None,
            fast_open,
        });
        let terminal = pep::Terminal::start(t)
            .await
            .map_err(|e| err!("starting the terminal: {e}"))?;
        Ok(Stack {
            socks: terminal
                .socks_addr()
                .context("the terminal's SOCKS5 listener")?,
            emulator,
            gateway,
        })
    }
}

/// The best goodput of one object of `size` bytes as a fraction of the downlink: the request's
/// round trip, then the object at the payload share of the link (the shaper's share of it).
pub fn ceiling(size: u64, down_bps: u64, rtt_ns: u64) -> f64 {
    let payload_rate = down_bps as f64 * (1.0 - header_share()) * pep::sizing::SHAPER_SHARE;
    let secs = rtt_ns as f64 / 1e9 + size as f64 * 8.0 / payload_rate;
    size as f64 * 8.0 / secs / down_bps as f64
}

/// Share of a full SD's bytes on the link that is not payload (STP header, tunnel, UDP, IPv4),
/// with the hop's datagram size.
pub fn header_share() -> f64 {
    let payload = pep::sizing::hop_stp_defaults(false).max_payload() as f64;
    let headers =
        stp::wire::HEADER_LEN + pep::tunnel::DATA_OVERHEAD + pep::sizing::IPV4_UDP_OVERHEAD;
    headers as f64 / (payload + headers as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_sides_links_mirror_each_other() {
        let (g, t) = hop_links(50_000_000, 5_000_000, 600);
        assert_eq!((g.send_rate_bps, g.recv_rate_bps), (50_000_000, 5_000_000));
        assert_eq!((t.send_rate_bps, t.recv_rate_bps), (5_000_000, 50_000_000));
        assert_eq!((g.rtt_ms, t.rtt_ms), (600, 600));
    }

    #[test]
    fn the_ceiling_is_the_payload_share_less_one_round_trip() {
        let h = header_share();
        assert!(h > 0.01 && h < 0.1, "{h}");
        // A huge object approaches the payload share; a small one loses its round trip.
        let big = ceiling(1 << 40, 50_000_000, 600_000_000);
        let bound = (1.0 - h) * pep::sizing::SHAPER_SHARE;
        assert!(big < bound && big > bound * 0.999, "{big} vs {bound}");
        let small = ceiling(1_000_000, 50_000_000, 600_000_000);
        assert!(small < big * 0.5, "{small}");
    }

    #[test]
    fn a_loopback_origin_is_allowed() {
        let p = loopback_origin_policy().unwrap();
        assert!(p.check("127.0.0.1".parse().unwrap()).is_ok());
    }
}
