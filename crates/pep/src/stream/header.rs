//! The stream header: the first bytes of every stream from the terminal (where to connect and,
//! when known, the client's address), and the status byte the gateway answers with. Documented
//! in `docs/gateway.md`:
//!
//! - terminal → gateway, first bytes of the stream (they ride on the BGN), the [`StreamHeader`]:
//!   a version byte, then the destination as `Target::encode` writes it; with version `0x02`
//!   the client's own address follows, in the same form (kind 1 or 4, address, port), so a
//!   gateway with source-address transparency can connect from it. Version `0x01` carries no
//!   client address; a gateway accepts both. Version `0x03` is a prefix: an 8-byte deadline
//!   (ms since the Unix epoch in the gateway's clock, 0 for none) then a version 1 or 2 header;
//!   the gateway refuses a stream whose deadline has passed (at-most-once opens). Then the
//!   client's data.
//! - gateway → terminal, first byte: the outcome of the gateway's connect, the [`Verdict`](super::Verdict)
//!   byte (0 = connected, 2 = denied by policy, 3 = network unreachable, 4 = host unreachable or
//!   timed out, 5 = refused, 1 = other failure; the values of the SOCKS5 reply codes, so a
//!   SOCKS5 terminal maps them one to one); then the server's data if connected.
//!
//! A new connection therefore costs exactly one satellite round trip before the client's first
//! byte reaches the server: the gateway connects while the BGN's answer is on its way back.

use super::target::{Target, TargetError};
use std::net::SocketAddr;
use thiserror::Error;

/// Version byte of a stream header without the client's address.
pub(crate) const RELAY_VERSION: u8 = 1;
/// Version byte of a stream header that carries the client's address after the destination.
pub(crate) const RELAY_VERSION_CLIENT: u8 = 2;
/// Version byte of the deadline prefix: 8 bytes of deadline, then a version 1 or 2 header.
pub(crate) const RELAY_VERSION_DEADLINE: u8 = 3;
/// Most header bytes a gateway waits for before giving up on a stream (the longest header is
/// 9 + 1 + 258 + 19 = 287 bytes: a deadline, a 255-byte name and an IPv6 client address).
pub const MAX_HEADER: usize = 300;
/// A gateway refuses a stream whose deadline is less than this far ahead: its connect and its
/// verdict's way back to the terminal must fit before the terminal gives up.
pub(crate) const DEADLINE_MARGIN_MS: u64 = 500;

/// Writes `deadline_ms` into the deadline field of the header at the start of `buf`, if it
/// has one (version `0x03`); whether it had.
pub(crate) fn stamp_deadline(buf: &mut [u8], deadline_ms: u64) -> bool {
    match buf.get_mut(..9) {
        Some([RELAY_VERSION_DEADLINE, field @ ..]) => {
            field.copy_from_slice(&deadline_ms.to_be_bytes());
            true
        }
        _ => false,
    }
}

/// The first bytes of every stream, from the terminal: where to connect and, when the terminal
/// knows it, from whose address the connection came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    pub target: Target,
    /// The client's address as the terminal saw it (IPv4-mapped IPv6 addresses travel as IPv4).
    pub client: Option<SocketAddr>,
    /// The deadline prefix (version `0x03`): ms since the Unix epoch in the gateway's clock
    /// after which the terminal has given up on the stream; 0 for none (the terminal's hop
    /// writes it, [`stamp_deadline`]). `None`: no prefix.
    pub deadline_ms: Option<u64>,
}

/// Why bytes cannot begin a stream header.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderError {
    #[error("unknown relay version {0}")]
    UnknownVersion(u8),
    #[error("bad destination in the stream header: {0}")]
    Target(TargetError),
    #[error("bad client address in the stream header: {0}")]
    Client(TargetError),
    #[error("the client address in the stream header is a name, not an IP address")]
    ClientNotAnAddress,
    #[error("a deadline prefix must be followed by a version 1 or 2 header")]
    NestedDeadline,
}

/// `addr` with an IPv4-mapped IPv6 address turned into IPv4 (a dual-stack socket reports IPv4
/// peers that way).
pub fn canonical_addr(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

impl StreamHeader {
    /// Bytes [`Self::emit`] writes.
    #[cfg(test)]
    pub(crate) fn buffer_len(&self) -> usize {
        let mut v = Vec::new();
        self.emit(&mut v);
        v.len()
    }

    /// Appends the header's binary form: version `0x02` with a client address, `0x01` without,
    /// behind the `0x03` deadline prefix when `deadline_ms` is set.
    pub fn emit(&self, out: &mut Vec<u8>) {
        if let Some(d) = self.deadline_ms {
            out.push(RELAY_VERSION_DEADLINE);
            out.extend_from_slice(&d.to_be_bytes());
        }
        match self.client {
            Some(c) => {
                out.push(RELAY_VERSION_CLIENT);
                self.target.encode(out);
                Target::Ip(canonical_addr(c)).encode(out);
            }
            None => {
                out.push(RELAY_VERSION);
                self.target.encode(out);
            }
        }
    }

    /// Reads a header from the start of `buf`: `Ok(None)` while more bytes are needed, the
    /// header and its length once complete, an error as soon as `buf` cannot begin one.
    pub fn parse(buf: &[u8]) -> Result<Option<(StreamHeader, usize)>, HeaderError> {
        if buf.first() == Some(&RELAY_VERSION_DEADLINE) {
            let Some(field) = buf.get(1..9) else {
                return Ok(None);
            };
            let mut d = [0u8; 8];
            d.copy_from_slice(field);
            if buf.get(9) == Some(&RELAY_VERSION_DEADLINE) {
                return Err(HeaderError::NestedDeadline);
            }
            return Ok(
                Self::parse(buf.get(9..).unwrap_or_default())?.map(|(mut h, n)| {
                    h.deadline_ms = Some(u64::from_be_bytes(d));
                    (h, 9 + n)
                }),
            );
        }
        let Some((&version, rest)) = buf.split_first() else {
            return Ok(None);
        };
        if version != RELAY_VERSION && version != RELAY_VERSION_CLIENT {
            return Err(HeaderError::UnknownVersion(version));
        }
        let (target, n) = match Target::decode(rest) {
            Ok(t) => t,
            Err(TargetError::Truncated { .. }) => return Ok(None),
            Err(e) => return Err(HeaderError::Target(e)),
        };
        if version == RELAY_VERSION {
            return Ok(Some((
                StreamHeader {
                    target,
                    client: None,
                    deadline_ms: None,
                },
                1 + n,
            )));
        }
        let rest = rest.get(n..).unwrap_or_default();
        match Target::decode(rest) {
            Ok((Target::Ip(client), m)) => Ok(Some((
                StreamHeader {
                    target,
                    client: Some(canonical_addr(client)),
                    deadline_ms: None,
                },
                1 + n + m,
            ))),
            Ok((Target::Domain { .. }, _)) => Err(HeaderError::ClientNotAnAddress),
            Err(TargetError::Truncated { .. }) => Ok(None),
            Err(e) => Err(HeaderError::Client(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(h: &StreamHeader) -> Vec<u8> {
        let mut b = Vec::new();
        h.emit(&mut b);
        assert_eq!(b.len(), h.buffer_len());
        b
    }

    #[test]
    fn header_without_client_is_version_1() {
        let h = StreamHeader {
            target: Target::Ip("198.51.100.7:443".parse().unwrap()),
            client: None,
            deadline_ms: None,
        };
        let b = encoded(&h);
        assert_eq!(b, [1, 1, 198, 51, 100, 7, 1, 187]);
        assert_eq!(StreamHeader::parse(&b), Ok(Some((h, 8))));
    }

    #[test]
    fn header_with_client_round_trips_byte_by_byte() {
        for (target, client) in [
            (
                Target::Ip("[2001:db8::1]:80".parse().unwrap()),
                "[2001:db8:1::2]:40000",
            ),
            (
                Target::domain("example.com", 8080).unwrap(),
                "192.0.2.2:1234",
            ),
        ] {
            let h = StreamHeader {
                target,
                client: Some(client.parse().unwrap()),
                deadline_ms: None,
            };
            let mut b = encoded(&h);
            assert_eq!(b[0], RELAY_VERSION_CLIENT);
            let len = b.len();
            for cut in 0..len {
                assert_eq!(StreamHeader::parse(&b[..cut]), Ok(None), "cut at {cut}");
            }
            b.extend_from_slice(b"GET /");
            assert_eq!(StreamHeader::parse(&b), Ok(Some((h.clone(), len))));
        }
    }

    #[test]
    fn mapped_client_address_travels_as_ipv4() {
        let h = StreamHeader {
            target: Target::Ip("203.0.113.2:80".parse().unwrap()),
            client: Some("[::ffff:192.0.2.2]:5555".parse().unwrap()),
            deadline_ms: None,
        };
        let b = encoded(&h);
        let (got, _) = StreamHeader::parse(&b).unwrap().unwrap();
        assert_eq!(got.client, Some("192.0.2.2:5555".parse().unwrap()));
    }

    #[test]
    fn deadline_prefix_is_stamped_and_round_trips() {
        let h = StreamHeader {
            target: Target::domain("example.com", 443).unwrap(),
            client: Some("192.0.2.2:1234".parse().unwrap()),
            deadline_ms: Some(0),
        };
        let mut b = encoded(&h);
        assert_eq!(b[0], RELAY_VERSION_DEADLINE);
        assert_eq!(b[9], RELAY_VERSION_CLIENT);
        let len = b.len();
        for cut in 0..len {
            assert_eq!(StreamHeader::parse(&b[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(stamp_deadline(&mut b, 1_700_000_000_123));
        b.extend_from_slice(b"GET /");
        let (got, n) = StreamHeader::parse(&b).unwrap().unwrap();
        assert_eq!(n, len);
        assert_eq!(got.deadline_ms, Some(1_700_000_000_123));
        assert_eq!((got.target, got.client), (h.target, h.client));
        // Only a header with the prefix has a field to stamp.
        let mut plain = vec![1, 1, 198, 51, 100, 7, 1, 187];
        assert!(!stamp_deadline(&mut plain, 5));
        assert_eq!(plain, [1, 1, 198, 51, 100, 7, 1, 187]);
        // Prefixes do not nest.
        let mut nested = vec![3; 9];
        nested.extend_from_slice(&[3; 9]);
        assert_eq!(
            StreamHeader::parse(&nested),
            Err(HeaderError::NestedDeadline)
        );
    }

    #[test]
    fn bad_headers_are_named() {
        assert_eq!(
            StreamHeader::parse(&[9, 1]),
            Err(HeaderError::UnknownVersion(9))
        );
        assert_eq!(
            StreamHeader::parse(&[1, 7, 0]),
            Err(HeaderError::Target(TargetError::UnknownKind(7)))
        );
        // Version 2 whose client address is a name.
        let mut b = vec![2];
        Target::Ip("203.0.113.2:80".parse().unwrap()).encode(&mut b);
        Target::domain("a.example", 1).unwrap().encode(&mut b);
        assert_eq!(
            StreamHeader::parse(&b),
            Err(HeaderError::ClientNotAnAddress)
        );
        let mut b = vec![2];
        Target::Ip("203.0.113.2:80".parse().unwrap()).encode(&mut b);
        b.push(5);
        assert_eq!(
            StreamHeader::parse(&b),
            Err(HeaderError::Client(TargetError::UnknownKind(5)))
        );
    }
}
