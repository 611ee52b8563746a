//! Destination policy: which destinations the gateway may connect to on a terminal's behalf, so
//! that it is never an open proxy into its own host, its local networks or private space.
//!
//! A rule ([`Rule`]) is an IP address (`192.0.2.7`), a CIDR prefix (`10.0.0.0/8`,
//! `2001:db8::/32`), a host name (`example.com`, that name only) or a domain wildcard
//! (`*.example.com`, every name strictly below it, not the name itself). Names are compared
//! case-insensitively, a trailing dot ignored.
//!
//! A destination given by name is first checked by name ([`Policy::check_name`], before it is
//! resolved): a `deny` name rule matching it denies it. Then every resolved address is checked
//! ([`Policy::check_resolved`]); a destination given as an address is checked the same way,
//! with no name. For an address (an IPv4-mapped IPv6 address
//! `::ffff:a.b.c.d` is checked as `a.b.c.d`), in order:
//!
//! 1. a `deny` CIDR covering it denies it;
//! 2. loopback (127/8, ::1), link-local (169.254/16, fe80::/10), unspecified and "this network"
//!    (0/8, ::), multicast (224/4, ff00::/8), broadcast and reserved (240/4) addresses, and the
//!    gateway's own addresses, are denied unless an `allow` CIDR covers them;
//! 3. private addresses (RFC 1918 10/8, 172.16/12, 192.168/16; RFC 6598 CGNAT 100.64/10; IPv6
//!    ULA fc00::/7) are denied unless `allow_private` is set or an `allow` CIDR covers them;
//! 4. when `allow` is not empty, an address that no `allow` CIDR covers is denied unless the
//!    destination's name matches an `allow` name rule;
//! 5. anything else is allowed.
//!
//! So an allowed name lifts only the allow-list (rule 4): the addresses it resolves to still meet
//! the deny CIDRs and the special and private defaults, and a name cannot smuggle a private
//! address past the policy.
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
    pub(crate) fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
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

    #[cfg(test)]
    pub(crate) fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this network (an IPv4-mapped IPv6 `ip` is taken as IPv4).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
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

/// One policy rule: an address range or a host name (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rule {
    Net(Cidr),
    /// A host name, lower case, without a trailing dot; `wildcard` means "strictly below it".
    Name {
        name: String,
        wildcard: bool,
    },
}

/// Why a string is not a policy rule.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuleError {
    #[error("empty rule")]
    Empty,
    #[error("not an address prefix: {0}")]
    Cidr(CidrError),
    #[error("not an address, prefix or host name: {0}")]
    Name(String),
}

impl FromStr for Rule {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Rule, RuleError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(RuleError::Empty);
        }
        // Anything with a '/' or ':' or that parses as an address is meant as an address range.
        let addr_part = s.split('/').next().unwrap_or(s);
        if s.contains('/') || s.contains(':') || addr_part.parse::<IpAddr>().is_ok() {
            return s.parse::<Cidr>().map(Rule::Net).map_err(RuleError::Cidr);
        }
        if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(RuleError::Cidr(CidrError::BadAddress));
        }
        let (name, wildcard) = match s.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (s, false),
        };
        check_hostname(name).map_err(RuleError::Name)?;
        Ok(Rule::Name {
            name: name.trim_end_matches('.').to_ascii_lowercase(),
            wildcard,
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Net(c) => c.fmt(f),
            Rule::Name { name, wildcard } if *wildcard => write!(f, "*.{name}"),
            Rule::Name { name, .. } => f.write_str(name),
        }
    }
}

impl Rule {
    /// Whether an address falls in this rule (a name rule never matches an address).
    #[cfg(test)]
    pub(crate) fn matches_ip(&self, ip: IpAddr) -> bool {
        matches!(self, Rule::Net(c) if c.contains(ip))
    }

    /// Whether a host name matches this rule (case-insensitive, a trailing dot ignored; an
    /// address rule never matches a name).
    pub(crate) fn matches_name(&self, host: &str) -> bool {
        let Rule::Name { name, wildcard } = self else {
            return false;
        };
        let host = host.trim_end_matches('.');
        if !*wildcard {
            return host.eq_ignore_ascii_case(name);
        }
        // Strictly below: "x.example.com" for "*.example.com", never "example.com" itself.
        let Some(cut) = host.len().checked_sub(name.len() + 1) else {
            return false;
        };
        host.as_bytes().get(cut) == Some(&b'.')
            && host
                .get(cut + 1..)
                .is_some_and(|tail| tail.eq_ignore_ascii_case(name))
            && cut > 0
    }
}

/// Checks a host name: 1..=253 characters (a trailing dot aside) of labels of 1..=63 letters,
/// digits, '-' (not at either end) and '_'.
pub(crate) fn check_hostname(h: &str) -> Result<(), String> {
    let h = h.strip_suffix('.').unwrap_or(h);
    if h.is_empty() || h.len() > 253 {
        return Err("host name must be from 1 to 253 characters".into());
    }
    for label in h.split('.') {
        if label.is_empty()
            || label.len() > 63
            || label.starts_with('-')
            || label.ends_with('-')
            || !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("{label:?} is not a valid host name label"));
        }
    }
    Ok(())
}

/// What a [`Policy`] is built from, and the gateway configuration's `[gateway.policy]` table
/// (`allow`, `deny`, `allow_private`; `own_addresses` is the gateway's, not the file's). The
/// default allows any public address and nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Rules allowed; when not empty, only destinations they match are allowed (a CIDR entry
    /// also lifts the default denial of special and private addresses it covers, a name entry
    /// does not). Default empty.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules always denied, whatever else says. Default empty.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Allow private addresses (RFC 1918, RFC 6598, IPv6 ULA). Default false.
    #[serde(default)]
    pub allow_private: bool,
    /// The gateway's own addresses, denied unless an `allow` entry covers them. Default empty.
    #[serde(skip)]
    pub own_addresses: Vec<IpAddr>,
}

/// Why a [`PolicyConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error("{field}[{index}]: {entry:?}: {reason}")]
    BadRule {
        /// `"allow"` or `"deny"`.
        field: &'static str,
        /// The entry's position in its list.
        index: usize,
        entry: String,
        reason: RuleError,
    },
}

/// Why [`Policy::check_resolved`] denied an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// A `deny` entry covers it.
    DenyRule(Cidr),
    /// A `deny` name rule matches the destination's name.
    DenyName,
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
            DenyReason::DenyName => f.write_str("name matched by a deny entry"),
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

/// A denied address and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("destination {ip} denied: {reason}")]
pub struct Denied {
    /// The address checked, in canonical form (IPv4 for an IPv4-mapped address).
    pub ip: IpAddr,
    pub reason: DenyReason,
}

/// A host name denied before resolution, and the rule that denied it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("destination {name} denied: matches deny entry {rule}")]
pub(crate) struct NameDenied {
    pub name: String,
    pub rule: Rule,
}

/// The policy a running gateway applies, replaced whole when its configuration is reloaded
/// (SIGHUP): a stream is checked against the policy in force when it arrives.
#[derive(Debug)]
pub(crate) struct PolicyCell(std::sync::RwLock<std::sync::Arc<Policy>>);

impl PolicyCell {
    pub(crate) fn new(policy: std::sync::Arc<Policy>) -> PolicyCell {
        PolicyCell(std::sync::RwLock::new(policy))
    }

    /// The policy in force now.
    pub(crate) fn current(&self) -> std::sync::Arc<Policy> {
        std::sync::Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts `policy` in force for the streams that arrive from now on.
    pub(crate) fn replace(&self, policy: Policy) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(policy);
    }
}

/// The gateway's destination policy; see the module documentation for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    allow: Vec<Cidr>,
    deny: Vec<Cidr>,
    allow_names: Vec<Rule>,
    deny_names: Vec<Rule>,
    allow_private: bool,
    own_addresses: Vec<IpAddr>,
}

/// Parses a rule list into its address ranges and its name rules.
fn parse_list(
    field: &'static str,
    entries: &[String],
) -> Result<(Vec<Cidr>, Vec<Rule>), PolicyError> {
    let mut nets = Vec::new();
    let mut names = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        match entry.parse::<Rule>() {
            Ok(Rule::Net(c)) => nets.push(c),
            Ok(name) => names.push(name),
            Err(reason) => {
                return Err(PolicyError::BadRule {
                    field,
                    index,
                    entry: entry.clone(),
                    reason,
                })
            }
        }
    }
    Ok((nets, names))
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
        let (allow, allow_names) = parse_list("allow", &cfg.allow)?;
        let (deny, deny_names) = parse_list("deny", &cfg.deny)?;
        Ok(Policy {
            allow,
            deny,
            allow_names,
            deny_names,
            allow_private: cfg.allow_private,
            own_addresses: cfg.own_addresses.into_iter().map(canonical).collect(),
        })
    }

    /// Whether the gateway may connect to `ip`, given as an address, and if not, why.
    pub fn check(&self, ip: IpAddr) -> Result<(), Denied> {
        self.check_resolved(None, ip)
    }

    /// Whether a destination given by name passes the name rules, before it is resolved: a
    /// `deny` name rule matching it denies it.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), NameDenied> {
        match self.deny_names.iter().find(|r| r.matches_name(name)) {
            Some(rule) => Err(NameDenied {
                name: name.to_owned(),
                rule: rule.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether the gateway may connect to `ip`, an address `name` resolved to (`None` for a
    /// destination given as an address). An `allow` name rule matching `name` satisfies a
    /// non-empty allow-list; the deny CIDRs and the special and private defaults still apply.
    pub(crate) fn check_resolved(&self, name: Option<&str>, ip: IpAddr) -> Result<(), Denied> {
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
            let has_allow_list = !self.allow.is_empty() || !self.allow_names.is_empty();
            let name_allowed =
                name.is_some_and(|n| self.allow_names.iter().any(|r| r.matches_name(n)));
            if has_allow_list && !name_allowed {
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
    fn bad_rule_names_the_entry() {
        for (allow, deny, field, index, entry) in [
            (
                vec!["10.0.0.0/8", "10.0.0/8"],
                vec![],
                "allow",
                1,
                "10.0.0/8",
            ),
            (vec![], vec!["192.168.0.0/33"], "deny", 0, "192.168.0.0/33"),
            (vec![], vec!["::/129"], "deny", 0, "::/129"),
            (vec!["1.2.3.4/"], vec![], "allow", 0, "1.2.3.4/"),
            (vec!["1.2.3.4/+8"], vec![], "allow", 0, "1.2.3.4/+8"),
            (vec!["bad name!"], vec![], "allow", 0, "bad name!"),
            (vec![], vec!["", "x"], "deny", 0, ""),
            (vec!["1.2.3"], vec![], "allow", 0, "1.2.3"),
            (vec!["*.-x.com"], vec![], "allow", 0, "*.-x.com"),
        ] {
            let err = Policy::new(PolicyConfig {
                allow: allow.into_iter().map(String::from).collect(),
                deny: deny.into_iter().map(String::from).collect(),
                ..PolicyConfig::default()
            })
            .unwrap_err();
            let PolicyError::BadRule {
                field: f,
                index: i,
                entry: e,
                ..
            } = &err;
            assert_eq!((*f, *i, e.as_str()), (field, index, entry));
            assert!(err.to_string().contains(entry), "{err}");
            assert!(
                err.to_string().starts_with(&format!("{field}[{index}]")),
                "{err}"
            );
        }
    }

    #[test]
    fn rules_parse_and_match() {
        let r: Rule = "10.0.0.0/8".parse().unwrap();
        assert!(r.matches_ip(ip("10.200.1.1")));
        assert!(!r.matches_ip(ip("11.0.0.1")));
        assert!(!r.matches_name("10.0.0.1"));
        let r: Rule = "192.168.1.0/23".parse().unwrap();
        assert!(r.matches_ip(ip("192.168.0.9")));
        assert!(!r.matches_ip(ip("192.168.2.1")));
        let r: Rule = "2001:db8::/32".parse().unwrap();
        assert!(r.matches_ip(ip("2001:db8:1::1")));
        assert!(!r.matches_ip(ip("10.0.0.1")));
        let r: Rule = "*.Example.com".parse().unwrap();
        assert_eq!(r.to_string(), "*.example.com");
        assert!(r.matches_name("www.example.com."));
        assert!(r.matches_name("a.b.EXAMPLE.com"));
        assert!(!r.matches_name("example.com"));
        assert!(!r.matches_name(".example.com"));
        assert!(!r.matches_name("badexample.com"));
        assert!(!r.matches_ip(ip("93.184.216.34")));
        let r: Rule = "example.com.".parse().unwrap();
        assert!(r.matches_name("EXAMPLE.com"));
        assert!(r.matches_name("example.com."));
        assert!(!r.matches_name("www.example.com"));
        assert!("1.2.3.4/x".parse::<Rule>().is_err());
    }

    #[test]
    fn name_rules() {
        let p = policy(PolicyConfig {
            deny: vec!["*.blocked.example".into(), "evil.example".into()],
            ..PolicyConfig::default()
        });
        let d = p.check_name("WWW.blocked.example.").unwrap_err();
        assert_eq!(d.rule.to_string(), "*.blocked.example");
        assert!(d.to_string().contains("*.blocked.example"), "{d}");
        assert!(p.check_name("evil.example").is_err());
        assert_eq!(p.check_name("blocked.example"), Ok(()));
        assert_eq!(p.check_name("good.example"), Ok(()));
        // No allow list: resolved public addresses pass, private ones do not.
        assert_eq!(
            p.check_resolved(Some("good.example"), ip("93.184.216.34")),
            Ok(())
        );
        assert_eq!(
            p.check_resolved(Some("good.example"), ip("10.0.0.1"))
                .map_err(|d| d.reason),
            Err(DenyReason::Private)
        );

        let p = policy(PolicyConfig {
            allow: vec!["*.cdn.example".into(), "198.51.100.0/24".into()],
            deny: vec!["93.184.216.0/24".into()],
            ..PolicyConfig::default()
        });
        // An allowed name satisfies the allow-list for its public addresses ...
        assert_eq!(
            p.check_resolved(Some("a.cdn.example"), ip("8.8.8.8")),
            Ok(())
        );
        // ... but not for other names or bare addresses ...
        assert_eq!(
            p.check_resolved(Some("other.example"), ip("8.8.8.8"))
                .map_err(|d| d.reason),
            Err(DenyReason::NotAllowed)
        );
        assert_eq!(reason(&p, "8.8.8.8"), Some(DenyReason::NotAllowed));
        // ... and it lifts neither deny CIDRs nor the special and private defaults.
        assert!(matches!(
            p.check_resolved(Some("a.cdn.example"), ip("93.184.216.34"))
                .map_err(|d| d.reason),
            Err(DenyReason::DenyRule(_))
        ));
        assert_eq!(
            p.check_resolved(Some("a.cdn.example"), ip("127.0.0.1"))
                .map_err(|d| d.reason),
            Err(DenyReason::Loopback)
        );
        assert_eq!(
            p.check_resolved(Some("a.cdn.example"), ip("192.168.1.1"))
                .map_err(|d| d.reason),
            Err(DenyReason::Private)
        );
        // The CIDR entry still works on its own.
        assert_eq!(p.check(ip("198.51.100.7")), Ok(()));
        // An allow list of names only is an allow-list too.
        let p = policy(PolicyConfig {
            allow: vec!["only.example".into()],
            ..PolicyConfig::default()
        });
        assert_eq!(reason(&p, "8.8.8.8"), Some(DenyReason::NotAllowed));
        assert_eq!(
            p.check_resolved(Some("only.example"), ip("8.8.8.8")),
            Ok(())
        );
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
