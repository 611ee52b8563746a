//! Named satellite paths: the rates and round trips of typical GEO, LEO and historical links,
//! turned into one [`LinkConfig`] per direction.
//!
//! "Up" is terminal → gateway (the return channel of a consumer terminal), "down" is
//! gateway → terminal. The round trip is split evenly: each direction gets half as its one-way
//! delay. Every profile uses a drop-tail queue limited in bytes to one bandwidth-delay product of
//! that direction (rate × round trip), but never less than [`MIN_QUEUE_BYTES`] (16 packets of
//! 1500 bytes), and counts [`UDP_IPV4_OVERHEAD_BYTES`] of headers per datagram on the medium.

use linkmodel::{Delay, LinkConfig, QueueLimit};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// IPv4 + UDP header bytes added to every relayed datagram on the emulated medium.
pub const UDP_IPV4_OVERHEAD_BYTES: u32 = 28;

/// The smallest queue a profile (or [`queue_bytes_for`]) chooses: 16 full-size packets.
pub const MIN_QUEUE_BYTES: u64 = 16 * 1500;

/// The default queue of a direction: one bandwidth-delay product (`rate_bps` × `rtt_ns`, in
/// bytes), at least [`MIN_QUEUE_BYTES`].
pub fn queue_bytes_for(rate_bps: u64, rtt_ns: u64) -> u64 {
    let bdp = u128::from(rate_bps) * u128::from(rtt_ns) / 8 / 1_000_000_000;
    u64::try_from(bdp).unwrap_or(u64::MAX).max(MIN_QUEUE_BYTES)
}

/// A loss-free direction with the profile defaults: fixed one-way delay, byte-limited drop-tail
/// queue of one bandwidth-delay product, IPv4 + UDP overhead.
pub fn direction(rate_bps: u64, one_way_ns: u64) -> LinkConfig {
    let mut link = LinkConfig::simple(rate_bps, one_way_ns, 1);
    link.queue = QueueLimit::Bytes(queue_bytes_for(rate_bps, one_way_ns.saturating_mul(2)));
    link.overhead_bytes = UDP_IPV4_OVERHEAD_BYTES;
    link
}

/// A named path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A modern GEO broadband terminal: 50 Mb/s down, 5 Mb/s up, 600 ms round trip.
    Geo,
    /// The GEO path of the late-1990s studies: 1.3 Mb/s both ways, 600 ms round trip.
    Geo1998,
    /// DirecPC-style asymmetric service: 2 Mb/s down, 50 kb/s up, 375 ms round trip.
    DirecPc,
    /// A LEO constellation: 100 Mb/s down, 15 Mb/s up, 40 ms round trip.
    Leo,
}

impl Profile {
    /// Every profile, in the order they are listed to users.
    pub const ALL: [Profile; 4] = [
        Profile::Geo,
        Profile::Geo1998,
        Profile::DirecPc,
        Profile::Leo,
    ];

    /// The name accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Profile::Geo => "geo",
            Profile::Geo1998 => "geo-1998",
            Profile::DirecPc => "direcpc",
            Profile::Leo => "leo",
        }
    }

    /// `(down_rate_bps, up_rate_bps, rtt_ns)`.
    pub fn parameters(self) -> (u64, u64, u64) {
        match self {
            Profile::Geo => (50_000_000, 5_000_000, 600_000_000),
            Profile::Geo1998 => (1_300_000, 1_300_000, 600_000_000),
            Profile::DirecPc => (2_000_000, 50_000, 375_000_000),
            Profile::Leo => (100_000_000, 15_000_000, 40_000_000),
        }
    }

    /// The link configurations `(up, down)`.
    pub fn links(self) -> (LinkConfig, LinkConfig) {
        let (down_bps, up_bps, rtt_ns) = self.parameters();
        let one_way = rtt_ns / 2;
        (direction(up_bps, one_way), direction(down_bps, one_way))
    }
}

/// How often a LEO constellation reassigns terminals to satellites (Starlink reconfigures its
/// paths every 15 seconds), nanoseconds.
pub const LEO_RECONFIGURATION_NS: u64 = 15_000_000_000;

/// One-way delays of successive 15-second slots of [`leo_delay_trace`], milliseconds: the path
/// length changes with each satellite assignment; the mean is the `leo` profile's 20 ms.
pub const LEO_SLOT_DELAYS_MS: [u64; 8] = [16, 19, 24, 18, 22, 25, 20, 16];

/// The one-way delay of a LEO path under reconfiguration: constant within each
/// [`LEO_RECONFIGURATION_NS`] slot, stepping to the next of [`LEO_SLOT_DELAYS_MS`] at each slot
/// boundary, and repeating after the eight slots (2 minutes).
pub fn leo_delay_trace() -> Delay {
    let points = LEO_SLOT_DELAYS_MS
        .iter()
        .zip(0u64..)
        .map(|(&d, i)| (i * LEO_RECONFIGURATION_NS, d * 1_000_000))
        .collect();
    Delay::Trace {
        points,
        period_ns: Some(LEO_SLOT_DELAYS_MS.len() as u64 * LEO_RECONFIGURATION_NS),
    }
}

impl Profile {
    /// The links `(up, down)` for the IP-level emulator: as [`Profile::links`], but the packets
    /// are whole IP packets, so no overhead is added on the medium, and `leo`'s delay follows
    /// [`leo_delay_trace`] (mean 20 ms one way) instead of staying fixed.
    pub fn ip_links(self) -> (LinkConfig, LinkConfig) {
        let (mut up, mut down) = self.links();
        for l in [&mut up, &mut down] {
            l.overhead_bytes = 0;
            if self == Profile::Leo {
                l.delay = leo_delay_trace();
            }
        }
        (up, down)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A profile name that is not one of [`Profile::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown profile '{0}' (valid profiles: geo, geo-1998, direcpc, leo)")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let want = s.trim().to_ascii_lowercase();
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == want)
            .ok_or_else(|| UnknownProfile(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkmodel::Delay;

    #[test]
    fn names_round_trip_and_unknown_lists_valid_ones() {
        for p in Profile::ALL {
            assert_eq!(p.name().parse::<Profile>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!("GEO-1998".parse::<Profile>(), Ok(Profile::Geo1998));
        let err = "meo".parse::<Profile>().unwrap_err().to_string();
        assert!(err.contains("'meo'"), "{err}");
        for p in Profile::ALL {
            assert!(err.contains(p.name()), "{err}");
        }
    }

    #[test]
    fn profiles_have_the_issue_figures() {
        let (up, down) = Profile::Geo.links();
        assert_eq!((up.rate_bps, down.rate_bps), (5_000_000, 50_000_000));
        assert_eq!(up.delay, Delay::Fixed(300_000_000));
        assert_eq!(down.queue, QueueLimit::Bytes(3_750_000), "one BDP");
        let (up, down) = Profile::DirecPc.links();
        assert_eq!((up.rate_bps, down.rate_bps), (50_000, 2_000_000));
        assert_eq!(down.delay, Delay::Fixed(187_500_000));
        assert_eq!(up.queue, QueueLimit::Bytes(MIN_QUEUE_BYTES), "floor");
        let (up, down) = Profile::Leo.links();
        assert_eq!((up.rate_bps, down.rate_bps), (15_000_000, 100_000_000));
        assert_eq!(up.delay, Delay::Fixed(20_000_000));
        let (up, down) = Profile::Geo1998.links();
        assert_eq!((up.rate_bps, down.rate_bps), (1_300_000, 1_300_000));
        for p in Profile::ALL {
            let (up, down) = p.links();
            assert!(up.validate().is_ok() && down.validate().is_ok(), "{p}");
            assert_eq!(up.overhead_bytes, UDP_IPV4_OVERHEAD_BYTES);
        }
    }

    #[test]
    fn ip_links_have_no_overhead_and_leo_steps_every_15_s() {
        for p in Profile::ALL {
            let (up, down) = p.ip_links();
            let (uup, udown) = p.links();
            assert_eq!((up.overhead_bytes, down.overhead_bytes), (0, 0));
            assert_eq!((up.rate_bps, down.queue), (uup.rate_bps, udown.queue));
            assert!(up.validate().is_ok() && down.validate().is_ok(), "{p}");
        }
        let (up, _) = Profile::Leo.ip_links();
        let link = linkmodel::Link::new(up).unwrap();
        let s = 1_000_000_000;
        assert_eq!(link.delay_at(0), 16_000_000);
        assert_eq!(link.delay_at(15 * s - 1), 16_000_000);
        assert_eq!(link.delay_at(15 * s), 19_000_000);
        assert_eq!(link.delay_at(120 * s + 31 * s), 24_000_000, "repeats");
        let mean = LEO_SLOT_DELAYS_MS.iter().sum::<u64>() / LEO_SLOT_DELAYS_MS.len() as u64;
        assert_eq!(mean, 20);
        assert_eq!(Profile::Geo.ip_links().0.delay, Delay::Fixed(300_000_000));
    }
}
