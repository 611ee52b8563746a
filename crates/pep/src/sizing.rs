//! Sizing the satellite hop from its configured allocation: the rate each side may send at, the
//! STP parameters that let a connection start at that rate instead of slow-starting across a
//! long round trip, and the buffers that keep one connection able to fill the link.
//!
//! Given the send rate `S` and receive rate `R` of this side (bit/s of link bytes) and the hop's
//! base RTT:
//! - the hop's shaper sends at `SHAPER_SHARE` × `S` (a little under the link, so the link's queue
//!   stays empty despite timer jitter);
//! - each connection uses STP's allocation controller (`stp::CongestionMode::Allocated`) at the
//!   shaper's rate expressed in STP datagram bytes (tunnel, IP and UDP headers removed), with
//!   the first window one bandwidth-delay product of that rate, and backs off when its RTT rises
//!   more than `max(MIN_QUEUE_DELAY_MS, RTT / 4)` above the floor;
//! - the send buffer holds 2 × the send BDP and the receive buffer 2.5 × the receive BDP (the
//!   seeds' 2–3 × BDP: one BDP in flight, one more to keep the pipe full through a loss
//!   recovery, and some slack for the rate mismatch with the terrestrial side).
//!
//! The split-TCP hop is sized from the same allocation: its sockets pace at the payload share
//! of `SHAPER_SHARE` × `S` ([`tcp_payload_rate_bps`]), and the route to the peer should carry
//! initial windows of one BDP each way ([`HopLink::tcp_route_windows`]; `docs/gateway.md`).

use crate::tunnel::wire::DATA_OVERHEAD;

/// IPv4 + UDP header bytes, charged to the send allocation per datagram.
pub const IPV4_UDP_OVERHEAD: usize = 28;
/// IPv6 + UDP header bytes.
pub(crate) const IPV6_UDP_OVERHEAD: usize = 48;

/// Share of the configured send rate the hop's shaper uses.
pub const SHAPER_SHARE: f64 = 0.99;
/// Smallest queueing delay the allocation controller tolerates before backing off, ms.
pub(crate) const MIN_QUEUE_DELAY_MS: u32 = 25;

/// Pacing granularity on an allocated hop, µs.
pub(crate) const PACING_GRANULARITY_US: u32 = 5000;

/// The path MTU the hop's datagrams are sized for (Ethernet's, and a satellite modem's).
pub(crate) const HOP_PATH_MTU_BYTES: usize = 1500;

/// Largest STP datagram whose sealed form (plus the tunnel's header and tag) travels in one IP
/// packet of [`HOP_PATH_MTU_BYTES`] — IPv6 headers when `ipv6`, else IPv4. Larger datagrams
/// are fragmented by the sender's kernel (or refused where it segments a batch), which costs
/// an extra packet per datagram and loses both fragments' worth when either is lost.
pub(crate) fn hop_max_datagram_bytes(ipv6: bool) -> u16 {
    let ip_udp = if ipv6 { 40 + 8 } else { IPV4_UDP_OVERHEAD };
    (HOP_PATH_MTU_BYTES - ip_udp - DATA_OVERHEAD) as u16
}

/// TCP payload of a full segment on a 1500-byte IPv4 path with timestamps (20 IP, 20 TCP and 12
/// option bytes): the segment size of the split-TCP hop.
pub(crate) const TCP_HOP_MSS: u64 = 1448;

/// The pacing rate of a split-TCP hop socket whose side may send `link_rate_bps` (bit/s of link
/// bytes): the shaper's share of it, counted in TCP payload as the kernel's pacing counts.
pub(crate) fn tcp_payload_rate_bps(link_rate_bps: u64) -> u64 {
    let shaped = (link_rate_bps as f64 * SHAPER_SHARE) as u64;
    let payload = u128::from(shaped) * u128::from(TCP_HOP_MSS) / HOP_PATH_MTU_BYTES as u128;
    (payload as u64).max(8000)
}

/// Initial windows, in segments of [`TCP_HOP_MSS`], for the route a side's hop connections
/// take to its peer (`ip route ... initcwnd N initrwnd M`): what lets a new connection start
/// at the allocation instead of slow-starting across the satellite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRouteWindows {
    /// `initcwnd`: one bandwidth-delay product of this side's sending direction.
    pub initcwnd: u32,
    /// `initrwnd`: one bandwidth-delay product of this side's receiving direction.
    pub initrwnd: u32,
}

/// How long a hop's connection waits through silence before declaring the peer dead, ms:
/// satellite outages (rain fade, a dish's handover, a gateway switch) last up to about a
/// minute, and a connection that outlives one resumes where it stopped.
pub(crate) const HOP_DEAD_TIMEOUT_MS: u32 = 120_000;

/// STP's defaults for a hop whose peer is reached over IPv6 (`ipv6`) or IPv4: the engine's
/// defaults with datagrams that fit [`HOP_PATH_MTU_BYTES`] after tunnel, IP and UDP headers,
/// and the dead-peer timeout [`HOP_DEAD_TIMEOUT_MS`].
pub fn hop_stp_defaults(ipv6: bool) -> stp::Config {
    stp::Config {
        max_datagram_bytes: hop_max_datagram_bytes(ipv6),
        dead_timeout_ms: HOP_DEAD_TIMEOUT_MS,
        ..stp::Config::default()
    }
}

/// What a side knows of its satellite link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopLink {
    /// This side's sending direction, bit/s of link bytes.
    pub send_rate_bps: u64,
    /// This side's receiving direction, bit/s of link bytes.
    pub recv_rate_bps: u64,
    /// Base round-trip time of the hop, ms.
    pub rtt_ms: u32,
}

impl HopLink {
    /// The rate the hop's shaper sends at, bit/s of link bytes.
    pub(crate) fn shaper_rate_bps(&self) -> u64 {
        ((self.send_rate_bps as f64 * SHAPER_SHARE) as u64).max(1000)
    }

    /// The STP parameters for this link, starting from `base` (whose datagram size is kept).
    pub fn stp_config(&self, base: stp::Config) -> stp::Config {
        let mut c = base;
        let datagram = u64::from(c.max_datagram_bytes);
        let on_link = datagram + (DATA_OVERHEAD + IPV4_UDP_OVERHEAD) as u64;
        let stp_rate = (u128::from(self.shaper_rate_bps()) * u128::from(datagram)
            / u128::from(on_link)) as u64;
        c.congestion = stp::CongestionMode::Allocated {
            rate_bps: stp_rate.max(1000),
            max_queue_delay_ms: (self.rtt_ms / 4).max(MIN_QUEUE_DELAY_MS),
        };
        c.initial_rtt_ms = self.rtt_ms.clamp(1, 60_000);
        // A real-time driver wakes late by a millisecond or more under load; a pacer bucket a
        // few milliseconds deep keeps the allocation usable at tens of Mb/s (the link's queue of
        // a bandwidth-delay product absorbs such bursts easily).
        c.pacing_granularity_us = c.pacing_granularity_us.max(PACING_GRANULARITY_US);
        let bdp = |rate: u64| u128::from(rate) * u128::from(self.rtt_ms) / 8000;
        let clamp = |b: u128, floor: u32| b.clamp(u128::from(floor), 1 << 30) as u32;
        c.send_buffer_bytes = clamp(bdp(self.send_rate_bps) * 2, c.send_buffer_bytes);
        c.recv_buffer_bytes = clamp(bdp(self.recv_rate_bps) * 5 / 2, c.recv_buffer_bytes);
        c
    }

    /// The initial windows for this side's route to its peer on the split-TCP hop: one BDP of
    /// each direction in full segments (at least 10, the kernel's default initial window).
    pub fn tcp_route_windows(&self) -> TcpRouteWindows {
        let segments = |rate: u64| {
            let bdp = u128::from(rate) * u128::from(self.rtt_ms) / 8000;
            (bdp / u128::from(TCP_HOP_MSS)).clamp(10, 1 << 20) as u32
        };
        TcpRouteWindows {
            initcwnd: segments(self.send_rate_bps),
            initrwnd: segments(self.recv_rate_bps),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geo_gateway_starts_at_its_downlink() {
        // The gateway of the `geo` profile: sends 50 Mb/s down, receives 5 Mb/s up, 600 ms.
        let link = HopLink {
            send_rate_bps: 50_000_000,
            recv_rate_bps: 5_000_000,
            rtt_ms: 600,
        };
        assert_eq!(link.shaper_rate_bps(), 49_500_000);
        let c = link.stp_config(stp::Config::default());
        c.validate().unwrap();
        let stp::CongestionMode::Allocated {
            rate_bps,
            max_queue_delay_ms,
        } = c.congestion
        else {
            panic!("allocation mode expected, got {:?}", c.congestion);
        };
        // 1452-byte datagrams carry 29 tunnel and 28 IP/UDP bytes on the link.
        assert_eq!(rate_bps, 49_500_000 * 1452 / 1509);
        assert_eq!(max_queue_delay_ms, 150);
        assert_eq!(c.initial_rtt_ms, 600);
        assert_eq!(c.send_buffer_bytes, 7_500_000, "2 x 3.75 MB");
        assert_eq!(
            c.recv_buffer_bytes,
            4 << 20,
            "2.5 x the 375 kB uplink BDP is below the default, which stays"
        );
    }

    #[test]
    fn geo_tcp_hop_paces_at_its_allocation_and_starts_with_a_bdp() {
        let gateway = HopLink {
            send_rate_bps: 50_000_000,
            recv_rate_bps: 5_000_000,
            rtt_ms: 600,
        };
        // 49.5 Mb/s of 1500-byte packets is 47.784 Mb/s of 1448-byte payloads.
        assert_eq!(tcp_payload_rate_bps(50_000_000), 47_784_000);
        // 3.75 MB down and 375 kB up, in 1448-byte segments.
        let w = gateway.tcp_route_windows();
        assert_eq!((w.initcwnd, w.initrwnd), (2589, 258));
        let terminal = HopLink {
            send_rate_bps: 5_000_000,
            recv_rate_bps: 50_000_000,
            rtt_ms: 600,
        };
        let w = terminal.tcp_route_windows();
        assert_eq!((w.initcwnd, w.initrwnd), (258, 2589));
        // A slow, short link keeps the kernel's default of 10.
        let tiny = HopLink {
            send_rate_bps: 100_000,
            recv_rate_bps: 100_000,
            rtt_ms: 20,
        };
        assert_eq!(tiny.tcp_route_windows().initcwnd, 10);
    }

    #[test]
    fn short_rtt_keeps_the_queue_delay_floor() {
        let link = HopLink {
            send_rate_bps: 15_000_000,
            recv_rate_bps: 100_000_000,
            rtt_ms: 40,
        };
        let c = link.stp_config(stp::Config::default());
        c.validate().unwrap();
        assert!(matches!(
            c.congestion,
            stp::CongestionMode::Allocated {
                max_queue_delay_ms: 25,
                ..
            }
        ));
    }

    #[test]
    fn hop_datagrams_fit_a_1500_byte_path_once_sealed() {
        for (ipv6, ip_udp) in [(false, 28usize), (true, 48)] {
            let d = usize::from(hop_max_datagram_bytes(ipv6));
            assert_eq!(d + DATA_OVERHEAD + ip_udp, HOP_PATH_MTU_BYTES);
            hop_stp_defaults(ipv6).validate().unwrap();
        }
        assert_eq!(hop_max_datagram_bytes(false), 1443);
        assert_eq!(hop_max_datagram_bytes(true), 1423);
    }
}
