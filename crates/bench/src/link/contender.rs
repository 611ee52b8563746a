//! The contenders of `satstp bench link`: the ways of carrying the traffic across the link.

use pep::quic_policy::QuicPolicy;
use std::fmt;
use std::str::FromStr;

/// One way of carrying the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Kernel TCP end to end with this congestion control.
    Kernel(&'static str),
    /// satstp terminal and gateway with TCP on the hop (cubic), tuned as `docs/gateway.md`
    /// describes: paced at the allocation, initial windows of a BDP on the hop's routes, no
    /// slow start after idle.
    SplitTcp,
    /// As `SplitTcp` with BBR on the hop.
    SplitTcpBbr,
    /// satstp terminal and gateway with STP on the hop.
    SplitStp,
    /// As `SplitStp`, with the terminal's SOCKS5 fast open (`socks_fast_open = true`).
    SplitStpFastOpen,
    /// As `SplitStp`, the client's connections intercepted transparently (TPROXY) instead of
    /// reaching the terminal through SOCKS5, with the terminal's QUIC policy (`quic`): `pass`
    /// (`split-stp-tproxy`), `block` (`split-stp-tproxy-block`), `reject`
    /// (`split-stp-tproxy-reject`).
    SplitStpTproxy(QuicPolicy),
}

pub const KERNEL_CCS: [&str; 3] = ["cubic", "bbr", "reno"];

const SPLIT: [(&str, Contender); 7] = [
    ("split-tcp", Contender::SplitTcp),
    ("split-tcp-bbr", Contender::SplitTcpBbr),
    ("split-stp", Contender::SplitStp),
    ("split-stp-fo", Contender::SplitStpFastOpen),
    (
        "split-stp-tproxy",
        Contender::SplitStpTproxy(QuicPolicy::Pass),
    ),
    (
        "split-stp-tproxy-block",
        Contender::SplitStpTproxy(QuicPolicy::Block),
    ),
    (
        "split-stp-tproxy-reject",
        Contender::SplitStpTproxy(QuicPolicy::Reject),
    ),
];

impl FromStr for Contender {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        if let Some(cc) = KERNEL_CCS.iter().find(|c| **c == s) {
            return Ok(Contender::Kernel(cc));
        }
        match SPLIT.iter().find(|(name, _)| *name == s) {
            Some((_, c)) => Ok(*c),
            None => Err(format!(
                "unknown contender '{s}' (valid: cubic, bbr, reno, split-tcp, split-tcp-bbr, \
                 split-stp, split-stp-fo, split-stp-tproxy, split-stp-tproxy-block, \
                 split-stp-tproxy-reject)"
            )),
        }
    }
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Contender::Kernel(cc) => f.write_str(cc),
            c => {
                let name = SPLIT.iter().find(|(_, s)| s == c).map_or("?", |(n, _)| n);
                f.write_str(name)
            }
        }
    }
}

impl Contender {
    pub fn describe(self) -> String {
        match self {
            Contender::Kernel(cc) => format!("kernel TCP end to end, {cc}"),
            Contender::SplitTcp => "satstp terminal + gateway, TCP (cubic) on the hop".into(),
            Contender::SplitTcpBbr => "satstp terminal + gateway, TCP (bbr) on the hop".into(),
            Contender::SplitStp => "satstp terminal + gateway, STP on the hop".into(),
            Contender::SplitStpFastOpen => {
                "satstp terminal + gateway, STP on the hop, SOCKS5 fast open".into()
            }
            Contender::SplitStpTproxy(quic) => format!(
                "satstp terminal + gateway, STP on the hop, a LAN client intercepted by TPROXY, \
                 quic = \"{}\"",
                quic.as_str()
            ),
        }
    }

    /// Whether the client is on a LAN behind a transparent terminal.
    pub fn transparent(self) -> bool {
        matches!(self, Contender::SplitStpTproxy(_))
    }

    /// The terminal's QUIC policy when it is not `pass` (the cells where the browser, a repeat
    /// visitor that knows the origin's HTTP/3, goes for QUIC and must fall back to TCP).
    pub fn quic_fallback(self) -> Option<QuicPolicy> {
        match self {
            Contender::SplitStpTproxy(q) if q != QuicPolicy::Pass => Some(q),
            _ => None,
        }
    }

    /// Whether the contender runs the satstp daemons.
    pub fn is_split(self) -> bool {
        !matches!(self, Contender::Kernel(_))
    }

    /// Whether the hop is STP (its retransmissions come from the gateway's `/metrics`).
    pub fn stp_hop(self) -> bool {
        self.is_split() && self.tcp_hop().is_none()
    }

    /// The congestion control of a split-TCP hop (`None`: not a TCP hop).
    pub fn tcp_hop(self) -> Option<&'static str> {
        match self {
            Contender::SplitTcp => Some("cubic"),
            Contender::SplitTcpBbr => Some("bbr"),
            _ => None,
        }
    }
}

/// What the browser workload speaks to the origin (`--http`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Plain HTTP/1.1 on port 8080.
    H1,
    /// HTTP/1.1 over TLS 1.3 on port 443.
    Https1,
    /// HTTP/2 over TLS 1.3 on port 443 (ALPN `h2`).
    H2,
    /// HTTP/3 over QUIC on UDP 443 (the browser forced to QUIC for the origin).
    H3,
}

const PROTOCOLS: [(&str, Protocol); 4] = [
    ("h1", Protocol::H1),
    ("https1", Protocol::Https1),
    ("h2", Protocol::H2),
    ("h3", Protocol::H3),
];

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        PROTOCOLS
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, p)| *p)
            .ok_or_else(|| {
                format!(
                    "unknown protocol '{s}' (valid: h1 = plain HTTP/1.1, https1 = HTTP/1.1 over \
                     TLS, h2 = HTTP/2 over TLS, h3 = HTTP/3 over QUIC)"
                )
            })
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = PROTOCOLS
            .iter()
            .find(|(_, p)| p == self)
            .map_or("?", |(n, _)| n);
        f.write_str(name)
    }
}

impl Protocol {
    /// The origin's TLS application protocols for this choice (`None`: plain HTTP).
    pub fn alpn(self) -> Option<loadgen::tls::Alpn> {
        match self {
            Protocol::H1 => None,
            Protocol::Https1 => Some(loadgen::tls::Alpn::Http1),
            Protocol::H2 => Some(loadgen::tls::Alpn::Http2),
            Protocol::H3 => Some(loadgen::tls::Alpn::Http3),
        }
    }

    /// What the browser reports as the page's protocol (`nextHopProtocol`) when this one is used.
    pub fn next_hop(self) -> &'static str {
        match self {
            Protocol::H1 | Protocol::Https1 => "http/1.1",
            Protocol::H2 => "h2",
            Protocol::H3 => "h3",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_and_name_themselves() {
        for name in ["h1", "https1", "h2", "h3"] {
            let p: Protocol = name.parse().unwrap();
            assert_eq!(p.to_string(), name);
        }
        let e = "spdy".parse::<Protocol>().unwrap_err();
        assert!(
            e.contains("unknown protocol 'spdy'") && e.contains("h2 = HTTP/2"),
            "{e}"
        );
    }

    #[test]
    fn contenders_parse_and_name_themselves() {
        for name in [
            "cubic",
            "bbr",
            "reno",
            "split-tcp",
            "split-tcp-bbr",
            "split-stp",
            "split-stp-fo",
            "split-stp-tproxy",
            "split-stp-tproxy-block",
            "split-stp-tproxy-reject",
        ] {
            let c: Contender = name.parse().unwrap();
            assert_eq!(c.to_string(), name);
        }
        use pep::quic_policy::QuicPolicy;
        let cell = |name: &str| name.parse::<Contender>().unwrap();
        assert_eq!(cell("split-stp-tproxy").quic_fallback(), None);
        assert!(cell("split-stp-tproxy").transparent());
        assert_eq!(
            cell("split-stp-tproxy-block").quic_fallback(),
            Some(QuicPolicy::Block)
        );
        assert_eq!(
            cell("split-stp-tproxy-reject").quic_fallback(),
            Some(QuicPolicy::Reject)
        );
        assert!(!cell("split-stp").transparent());
        let e = "vegas".parse::<Contender>().unwrap_err();
        assert!(e.contains("unknown contender 'vegas'"), "{e}");
    }
}
