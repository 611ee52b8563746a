//! [`Target`]: where a terminal asks its gateway to connect (an address, or a name and a port),
//! and its binary form, carried in the stream header (the SOCKS5 address form, which a SOCKS5
//! request also uses).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use thiserror::Error;

const ATYP_IPV4: u8 = 1;
const ATYP_DOMAIN: u8 = 3;
const ATYP_IPV6: u8 = 4;

/// Longest domain name a [`Target`] can hold (the length travels in one byte).
pub(crate) const MAX_DOMAIN_LEN: usize = 255;

/// Where a terminal wants to be connected: an address, or a name the gateway resolves.
///
/// # Binary form
///
/// [`Target::encode`] writes, and [`Target::decode`] reads, the form carried in the first bytes
/// of an STP BGN to tell the gateway where to connect (the SOCKS5 address form without the
/// command header):
///
/// | kind byte | then | then |
/// |---|---|---|
/// | `1` (IPv4) | 4 address bytes | 2-byte big-endian port |
/// | `4` (IPv6) | 16 address bytes | 2-byte big-endian port |
/// | `3` (domain) | 1 length byte `n` (1–255), `n` name bytes | 2-byte big-endian port |
///
/// An IPv6 address loses its flow label and scope id on the way.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Ip(SocketAddr),
    Domain { host: String, port: u16 },
}

/// Why bytes could not be read as a [`Target`], or a name cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetError {
    #[error("target truncated: {needed} bytes needed, {got} available")]
    Truncated { needed: usize, got: usize },
    #[error("unknown target address kind {0}")]
    UnknownKind(u8),
    #[error("empty domain name")]
    EmptyDomain,
    #[error("domain name longer than {MAX_DOMAIN_LEN} bytes")]
    DomainTooLong,
    #[error("domain name holds a character other than letters, digits, '-', '.' and '_'")]
    BadDomain,
}

/// Checks that `host` can be a domain name in a [`Target`].
pub(crate) fn validate_domain(host: &[u8]) -> Result<(), TargetError> {
    if host.is_empty() {
        return Err(TargetError::EmptyDomain);
    }
    if host.len() > MAX_DOMAIN_LEN {
        return Err(TargetError::DomainTooLong);
    }
    if host
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        Ok(())
    } else {
        Err(TargetError::BadDomain)
    }
}

impl Target {
    /// A domain target, with the name checked by [`validate_domain`].
    pub(crate) fn domain(host: impl Into<String>, port: u16) -> Result<Target, TargetError> {
        let host = host.into();
        validate_domain(host.as_bytes())?;
        Ok(Target::Domain { host, port })
    }

    pub fn port(&self) -> u16 {
        match self {
            Target::Ip(addr) => addr.port(),
            Target::Domain { port, .. } => *port,
        }
    }

    /// Appends the binary form (see the type's documentation) to `out`.
    ///
    /// A `Domain` whose name [`validate_domain`] refuses (it can only be built by hand, not by
    /// [`Target::domain`] or the parsers here) is written with length 0, which
    /// [`Target::decode`] rejects, so a bad name never reaches the far side as another name.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Target::Ip(SocketAddr::V4(a)) => {
                out.push(ATYP_IPV4);
                out.extend_from_slice(&a.ip().octets());
            }
            Target::Ip(SocketAddr::V6(a)) => {
                out.push(ATYP_IPV6);
                out.extend_from_slice(&a.ip().octets());
            }
            Target::Domain { host, .. } => {
                out.push(ATYP_DOMAIN);
                match validate_domain(host.as_bytes()) {
                    Ok(()) => {
                        // validate_domain bounds the length to 255.
                        out.push(u8::try_from(host.len()).unwrap_or(0));
                        out.extend_from_slice(host.as_bytes());
                    }
                    Err(_) => out.push(0),
                }
            }
        }
        out.extend_from_slice(&self.port().to_be_bytes());
    }

    /// Reads a target from the start of `buf`; returns it and the number of bytes it took.
    pub fn decode(buf: &[u8]) -> Result<(Target, usize), TargetError> {
        let kind = *buf.first().ok_or(TargetError::Truncated {
            needed: 1,
            got: buf.len(),
        })?;
        match parse_address(kind, buf, 1)? {
            AddrParse::Done(target, len) => Ok((target, len)),
            AddrParse::Need(needed) => Err(TargetError::Truncated {
                needed,
                got: buf.len(),
            }),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Ip(addr) => write!(f, "{addr}"),
            Target::Domain { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

enum AddrParse {
    Done(Target, usize),
    /// The total length needed before more can be said.
    Need(usize),
}

/// Parses an address of kind `kind` whose bytes start at `buf[at]`, followed by a port.
fn parse_address(kind: u8, buf: &[u8], at: usize) -> Result<AddrParse, TargetError> {
    let (addr_len, addr_start) = match kind {
        ATYP_IPV4 => (4, at),
        ATYP_IPV6 => (16, at),
        ATYP_DOMAIN => match buf.get(at) {
            None => return Ok(AddrParse::Need(at + 1)),
            Some(0) => return Err(TargetError::EmptyDomain),
            Some(&n) => (usize::from(n), at + 1),
        },
        other => return Err(TargetError::UnknownKind(other)),
    };
    let end = addr_start + addr_len + 2;
    let (Some(addr), Some(port)) = (
        buf.get(addr_start..addr_start + addr_len),
        buf.get(addr_start + addr_len..end),
    ) else {
        return Ok(AddrParse::Need(end));
    };
    let port = match *port {
        [hi, lo] => u16::from_be_bytes([hi, lo]),
        _ => return Ok(AddrParse::Need(end)),
    };
    let target = match kind {
        ATYP_IPV4 => {
            let octets: [u8; 4] = addr.try_into().map_err(|_| TargetError::Truncated {
                needed: end,
                got: buf.len(),
            })?;
            Target::Ip(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(octets),
                port,
            )))
        }
        ATYP_IPV6 => {
            let octets: [u8; 16] = addr.try_into().map_err(|_| TargetError::Truncated {
                needed: end,
                got: buf.len(),
            })?;
            Target::Ip(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(octets),
                port,
                0,
                0,
            )))
        }
        _ => {
            validate_domain(addr)?;
            let host = std::str::from_utf8(addr)
                .map_err(|_| TargetError::BadDomain)?
                .to_owned();
            Target::Domain { host, port }
        }
    };
    Ok(AddrParse::Done(target, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_round_trip_and_display() {
        let targets = [
            Target::Ip("192.0.2.7:25".parse().unwrap()),
            Target::Ip("[2001:db8::7]:443".parse().unwrap()),
            Target::domain("xn--bcher-kva.example", 8443).unwrap(),
            Target::domain("a".repeat(255), 1).unwrap(),
        ];
        for t in &targets {
            let mut buf = Vec::new();
            t.encode(&mut buf);
            buf.extend_from_slice(b"payload");
            let (back, len) = Target::decode(&buf).unwrap();
            assert_eq!(&back, t);
            assert_eq!(&buf[len..], b"payload");
            // Every truncation is an error naming what is missing.
            for n in 0..len {
                assert!(matches!(
                    Target::decode(&buf[..n]),
                    Err(TargetError::Truncated { got, .. }) if got == n
                ));
            }
        }
        assert_eq!(targets[0].to_string(), "192.0.2.7:25");
        assert_eq!(targets[1].to_string(), "[2001:db8::7]:443");
        assert_eq!(targets[2].to_string(), "xn--bcher-kva.example:8443");
    }

    #[test]
    fn target_decode_errors() {
        assert_eq!(Target::decode(&[9, 0, 0]), Err(TargetError::UnknownKind(9)));
        assert_eq!(Target::decode(&[3, 0, 0, 0]), Err(TargetError::EmptyDomain));
        assert_eq!(
            Target::decode(&[3, 2, b'a', b'/', 0, 0]),
            Err(TargetError::BadDomain)
        );
        assert_eq!(Target::domain("", 1), Err(TargetError::EmptyDomain));
        assert_eq!(
            Target::domain("a".repeat(256), 1),
            Err(TargetError::DomainTooLong)
        );
        // A hand-built bad name encodes as something decode refuses.
        let mut buf = Vec::new();
        Target::Domain {
            host: "evil:host".into(),
            port: 1,
        }
        .encode(&mut buf);
        assert!(Target::decode(&buf).is_err());
    }
}
