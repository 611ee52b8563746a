//! Destination policy: which addresses the gateway may connect to on a terminal's behalf, so
//! that it is never an open proxy into its own host, its local networks or private space.
//!
//! [`Policy::check`] applies these rules, in order, to an address (an IPv4-mapped IPv6 address
//! `::ffff:a.b.c.d` is checked as `a.b.c.d`):
//!
//! 1. an entry of `deny` covering it denies it;
//! 2. loopback (127/8, ::1), link-local (169.254/16, fe80::/10), unspecified and "this network"
//!    (0/8, ::), multicast (224/4, ff00::/8), broadcast and reserved (240/4) addresses, and the
//!    gateway's own addresses, are denied unless an `allow` entry covers them;
//! 3. private addresses (RFC 1918 10/8, 172.16/12, 192.168/16; RFC 6598 CGNAT 100.64/10; IPv6
//!    ULA fc00::/7) are denied unless `allow_private` is set or an `allow` entry covers them;
//! 4. when `allow` is not empty, an address no entry covers is denied;
//! 5. anything else is allowed.
//!
//! CIDRs are written `address/prefix`, or a bare address for a single host. Host bits set below
//! the prefix are cleared (`10.1.2.3/8` means `10.0.0.0/8`); an IPv4-mapped IPv6 CIDR
//! (`::ffff:10.0.0.0/104`) is read as its IPv4 form.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use thiserror::Error;

/// An IPv4 or IPv6 network: an address with its host bits cleared and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CidrError {
    #[error("not an IP address")]
    BadAddress,
    #[error("prefix length is not a number")]
    BadPrefix,
    #[error("prefix length {prefix} exceeds {max}")]
    PrefixTooLong { prefix: u32, max: u8 },
}

/// `addr` as IPv4 when it is an IPv4-mapped IPv6 address.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl Cidr {
    /// The network of `addr` with `prefix` bits (host bits cleared; an IPv4-mapped IPv6 network
    /// of prefix 96 or more becomes IPv4).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => {
                (canonical(addr), prefix - 96)
            }
            other => (other, prefix),
        };
        match addr {
            IpAddr::V4(v4) => {
                if prefix > 32 {
                    return Err(CidrError::PrefixTooLong {
                        prefix: u32::from(prefix),
                        max: 32,
                    });
                }
                let bits = u32::from(v4) & mask_v4(prefix);
                Ok(Cidr {
                    addr: IpAddr::V4(Ipv4Addr::from(bits)),
                    prefix,
                })
            }
            IpAddr::V6(v6) => {
                if prefix > 128 {
                    return Err(CidrError::PrefixTooLong {
                        prefix: u32::from(prefix),
                        max: 128,
                    });
                }
                let bits = u128::from(v6) & mask_v6(prefix);
                Ok(Cidr {
                    addr: IpAddr::V6(Ipv6Addr::from(bits)),
                    prefix,
                })
            }
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this network (an IPv4-mapped IPv6 `ip` is taken as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask_v4(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask_v6(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| CidrError::BadAddress)?;
        let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CidrError::BadPrefix);
                }
                let p: u32 = p.parse().map_err(|_| CidrError::BadPrefix)?;
                if p > u32::from(max) {
                    return Err(CidrError::PrefixTooLong { prefix: p, max });
                }
                u8::try_from(p).map_err(|_| CidrError::BadPrefix)?
            }
        };
        Cidr::new(addr, prefix)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What a [`Policy`] is built from. The default allows any public address and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    /// CIDRs allowed; when not empty, only these are allowed (an entry also lifts the default
    /// denial of special and private addresses it covers). Default empty.
    pub allow: Vec<String>,
    /// CIDRs always denied, whatever else says. Default empty.
    pub deny: Vec<String>,
    /// Allow private addresses (RFC 1918, RFC 6598, IPv6 ULA). Default false.
    pub allow_private: bool,
    /// The gateway's own addresses, denied unless an `allow` entry covers them. Default empty.
    pub own_addresses: Vec<IpAddr>,
}

/// Why a [`PolicyConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error("{field} entry {entry:?} is not a CIDR: {reason}")]
    BadCidr {
        /// `"allow"` or `"deny"`.
        field: &'static str,
        entry: String,
        reason: CidrError,
    },
}

/// Why [`Policy::check`] denied an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// A `deny` entry covers it.
    DenyRule(Cidr),
    Loopback,
    LinkLocal,
    /// Unspecified, or IPv4 "this network" (0/8).
    Unspecified,
    Multicast,
    /// Limited broadcast or IPv4 reserved space (240/4).
    Broadcast,
    /// One of the gateway's own addresses.
    OwnAddress,
    /// Private space without `allow_private` or an `allow` entry.
    Private,
    /// An allow-list is set and no entry covers it.
    NotAllowed,
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::DenyRule(c) => write!(f, "covered by deny entry {c}"),
            DenyReason::Loopback => f.write_str("loopback address"),
            DenyReason::LinkLocal => f.write_str("link-local address"),
            DenyReason::Unspecified => f.write_str("unspecified or this-network address"),
            DenyReason::Multicast => f.write_str("multicast address"),
            DenyReason::Broadcast => f.write_str("broadcast or reserved address"),
            DenyReason::OwnAddress => f.write_str("one of the gateway's own addresses"),
            DenyReason::Private => {
                f.write_str("private address (set allow_private or add an allow entry)")
            }
            DenyReason::NotAllowed => f.write_str("not covered by any allow entry"),
        }
    }
}

/// A denied destination and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("destination {ip} denied: {reason}")]
pub struct Denied {
    /// The address checked, in canonical form (IPv4 for an IPv4-mapped address).
    pub ip: IpAddr,
    pub reason: DenyReason,
}

/// The gateway's destination policy; see the module documentation for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
    allow_private: bool,
    own_addresses: Vec<IpAddr>,
}

fn parse_list(field: &'static str, entries: &[String]) -> Result<Vec<Cidr>, PolicyError> {
    entries
        .iter()
        .map(|entry| {
            entry.parse().map_err(|reason| PolicyError::BadCidr {
                field,
                entry: entry.clone(),
                reason,
            })
        })
        .collect()
}

fn special(ip: IpAddr) -> Option<DenyReason> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Some(DenyReason::Loopback)
            } else if v4.is_link_local() {
                Some(DenyReason::LinkLocal)
            } else if o[0] == 0 {
                Some(DenyReason::Unspecified)
            } else if v4.is_multicast() {
                Some(DenyReason::Multicast)
            } else if o[0] >= 240 {
                Some(DenyReason::Broadcast)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some(DenyReason::Loopback)
            } else if v6.is_unspecified() {
                Some(DenyReason::Unspecified)
            } else if first & 0xffc0 == 0xfe80 {
                Some(DenyReason::LinkLocal)
            } else if v6.is_multicast() {
                Some(DenyReason::Multicast)
            } else {
                None
            }
        }
    }
}

fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_private() || (o[0] == 100 && o[1] & 0xc0 == 64)
        }
        IpAddr::V6(v6) => v6.segments()[0] & 0xfe00 == 0xfc00,
    }
}

impl Policy {
    /// Builds the policy; a bad CIDR is reported with its field and entry.
    pub fn new(cfg: PolicyConfig) -> Result<Policy, PolicyError> {
        Ok(Policy {
            allow: parse_list("allow", &cfg.allow)?,
            deny: parse_list("deny", &cfg.deny)?,
            allow_private: cfg.allow_private,
            own_addresses: cfg.own_addresses.into_iter().map(canonical).collect(),
        })
    }

    /// Whether the gateway may connect to `ip`, and if not, why.
    pub fn check(&self, ip: IpAddr) -> Result<(), Denied> {
        let ip = canonical(ip);
        let deny = |reason| Err(Denied { ip, reason });
        if let Some(rule) = self.deny.iter().find(|c| c.contains(ip)) {
            return deny(DenyReason::DenyRule(*rule));
        }
        let allowed = self.allow.iter().any(|c| c.contains(ip));
        if !allowed {
            if let Some(reason) = special(ip) {
                return deny(reason);
            }
            if self.own_addresses.contains(&ip) {
                return deny(DenyReason::OwnAddress);
            }
            if is_private(ip) && !self.allow_private {
                return deny(DenyReason::Private);
            }
            if !self.allow.is_empty() {
                return deny(DenyReason::NotAllowed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn policy(cfg: PolicyConfig) -> Policy {
        Policy::new(cfg).unwrap()
    }

    fn reason(p: &Policy, s: &str) -> Option<DenyReason> {
        p.check(ip(s)).err().map(|d| d.reason)
    }

    #[test]
    fn defaults_deny_special_and_private() {
        let own = ip("203.0.113.9");
        let p = policy(PolicyConfig {
            own_addresses: vec![own],
            ..PolicyConfig::default()
        });
        let cases = [
            ("127.0.0.1", DenyReason::Loopback),
            ("::1", DenyReason::Loopback),
            ("169.254.169.254", DenyReason::LinkLocal),
            ("fe80::1", DenyReason::LinkLocal),
            ("0.0.0.0", DenyReason::Unspecified),
            ("::", DenyReason::Unspecified),
            ("224.0.0.1", DenyReason::Multicast),
            ("ff02::1", DenyReason::Multicast),
            ("255.255.255.255", DenyReason::Broadcast),
            ("10.1.2.3", DenyReason::Private),
            ("172.16.0.1", DenyReason::Private),
            ("192.168.1.1", DenyReason::Private),
            ("100.64.0.1", DenyReason::Private),
            ("100.127.255.255", DenyReason::Private),
            ("fc00::1", DenyReason::Private),
            ("fd12:3456::1", DenyReason::Private),
            ("::ffff:127.0.0.1", DenyReason::Loopback),
            ("::ffff:10.0.0.1", DenyReason::Private),
            ("203.0.113.9", DenyReason::OwnAddress),
            ("::ffff:203.0.113.9", DenyReason::OwnAddress),
        ];
        for (addr, why) in cases {
            assert_eq!(reason(&p, addr), Some(why), "{addr}");
        }
        for addr in [
            "93.184.216.34",
            "100.128.0.1",
            "172.32.0.1",
            "2001:db8::1",
            "8.8.8.8",
        ] {
            assert_eq!(p.check(ip(addr)), Ok(()), "{addr}");
        }
        let denied = p.check(ip("::ffff:127.0.0.1")).unwrap_err();
        assert_eq!(denied.ip, ip("127.0.0.1"));
        assert!(denied.to_string().contains("loopback"));
    }

    #[test]
    fn allow_private_lifts_private_only() {
        let p = policy(PolicyConfig {
            allow_private: true,
            ..PolicyConfig::default()
        });
        for addr in ["10.0.0.1", "192.168.0.1", "100.64.1.1", "fd00::1"] {
            assert_eq!(p.check(ip(addr)), Ok(()), "{addr}");
        }
        assert_eq!(reason(&p, "127.0.0.1"), Some(DenyReason::Loopback));
        assert_eq!(reason(&p, "169.254.0.1"), Some(DenyReason::LinkLocal));
    }

    #[test]
    fn explicit_allow_of_a_private_24() {
        let p = policy(PolicyConfig {
            allow: vec!["192.168.7.0/24".into()],
            ..PolicyConfig::default()
        });
        assert_eq!(p.check(ip("192.168.7.20")), Ok(()));
        assert_eq!(p.check(ip("::ffff:192.168.7.20")), Ok(()));
        // A non-empty allow list is an allow-list: others are denied.
        assert_eq!(reason(&p, "192.168.8.1"), Some(DenyReason::Private));
        assert_eq!(reason(&p, "8.8.8.8"), Some(DenyReason::NotAllowed));
    }

    #[test]
    fn explicit_allow_lifts_loopback_and_own_address() {
        let p = policy(PolicyConfig {
            allow: vec!["127.0.0.1".into(), "0.0.0.0/0".into(), "::/0".into()],
            own_addresses: vec![ip("198.51.100.1")],
            ..PolicyConfig::default()
        });
        assert_eq!(p.check(ip("127.0.0.1")), Ok(()));
        // 0.0.0.0/0 covers everything, including the gateway itself: allow is explicit.
        assert_eq!(p.check(ip("198.51.100.1")), Ok(()));
    }

    #[test]
    fn deny_wins_over_allow() {
        let p = policy(PolicyConfig {
            allow: vec!["10.0.0.0/8".into()],
            deny: vec!["10.9.0.0/16".into()],
            allow_private: true,
            ..PolicyConfig::default()
        });
        assert_eq!(p.check(ip("10.1.0.1")), Ok(()));
        assert_eq!(
            reason(&p, "10.9.3.4"),
            Some(DenyReason::DenyRule("10.9.0.0/16".parse().unwrap()))
        );
        let p = policy(PolicyConfig {
            deny: vec!["2001:db8::/32".into(), "93.184.216.34".into()],
            ..PolicyConfig::default()
        });
        assert!(matches!(
            reason(&p, "2001:db8::5"),
            Some(DenyReason::DenyRule(_))
        ));
        assert!(matches!(
            reason(&p, "::ffff:93.184.216.34"),
            Some(DenyReason::DenyRule(_))
        ));
        assert_eq!(p.check(ip("2001:db9::5")), Ok(()));
    }

    #[test]
    fn allow_list_mode() {
        let p = policy(PolicyConfig {
            allow: vec!["198.51.100.0/24".into(), "2001:db8:1::/48".into()],
            ..PolicyConfig::default()
        });
        assert_eq!(p.check(ip("198.51.100.200")), Ok(()));
        assert_eq!(p.check(ip("2001:db8:1:ffff::1")), Ok(()));
        assert_eq!(reason(&p, "198.51.101.1"), Some(DenyReason::NotAllowed));
        assert_eq!(reason(&p, "2001:db8:2::1"), Some(DenyReason::NotAllowed));
        assert_eq!(reason(&p, "127.0.0.1"), Some(DenyReason::Loopback));
    }

    #[test]
    fn bad_cidr_names_the_entry() {
        for (allow, deny, field, entry) in [
            (vec!["10.0.0.0/8", "10.0.0/8"], vec![], "allow", "10.0.0/8"),
            (vec![], vec!["192.168.0.0/33"], "deny", "192.168.0.0/33"),
            (vec![], vec!["::/129"], "deny", "::/129"),
            (vec!["1.2.3.4/"], vec![], "allow", "1.2.3.4/"),
            (vec!["1.2.3.4/+8"], vec![], "allow", "1.2.3.4/+8"),
            (vec!["example.com"], vec![], "allow", "example.com"),
        ] {
            let err = Policy::new(PolicyConfig {
                allow: allow.into_iter().map(String::from).collect(),
                deny: deny.into_iter().map(String::from).collect(),
                ..PolicyConfig::default()
            })
            .unwrap_err();
            let PolicyError::BadCidr {
                field: f, entry: e, ..
            } = &err;
            assert_eq!((*f, e.as_str()), (field, entry));
            assert!(err.to_string().contains(entry), "{err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }

    #[test]
    fn cidr_parsing_and_containment() {
        let c: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains(ip("10.255.0.1")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(!c.contains(ip("::a01:203")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("255.255.255.255")));
        assert!(!all.contains(ip("::1")));
        let host: Cidr = "2001:db8::1".parse().unwrap();
        assert_eq!(host.prefix(), 128);
        assert!(host.contains(ip("2001:db8::1")));
        assert!(!host.contains(ip("2001:db8::2")));
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert_eq!(" 192.0.2.0/24 ".parse::<Cidr>().unwrap().prefix(), 24);
    }
}
