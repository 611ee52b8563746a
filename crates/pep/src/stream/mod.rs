//! The stream protocol between terminal and gateway, sans-IO (no tokio, no sockets): what opens
//! every stream across the hop and what answers it. Documented in `docs/gateway.md`
//! ("The stream header") and the byte path in `docs/architecture.md`.
//!
//! - [`Target`]: where to connect, an address or a name and a port, and its binary form;
//! - [`StreamHeader`]: the stream's first bytes from the terminal (the target, the client's
//!   address, the deadline);
//! - [`Verdict`]: the gateway's answer, the first byte of the stream back.
//!
//! Every side speaks it through this module alone: the daemons' terminal (SOCKS5, HTTP
//! CONNECT and TPROXY listeners map their own protocol to and from it at their edge), the
//! daemons' gateway, the relay ([`crate::splice`]), and the simulator's split gateway
//! (`netsim::gateway`), which runs it in virtual time.

mod header;
mod target;

pub use header::{canonical_addr, HeaderError, StreamHeader, MAX_HEADER};
pub(crate) use header::{stamp_deadline, DEADLINE_MARGIN_MS};
pub use target::{Target, TargetError};

use std::fmt;
use std::io;

/// The gateway's answer to a stream: whether it connected to the target, and if not, why.
///
/// On the wire it is one byte (the stream's first byte back), with the values of the SOCKS5
/// reply codes so a SOCKS5 terminal passes them on unchanged: 0 connected, 1 other failure,
/// 2 denied by policy, 3 network unreachable, 4 host unreachable or timed out, 5 refused. An
/// unknown byte reads as [`Verdict::Failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Connected: the server's bytes follow.
    Connected,
    /// Any other failure (the gateway refused the stream itself, the hop failed, …).
    Failed,
    /// The gateway's policy does not allow the destination.
    PolicyDenied,
    /// No route to the destination's network.
    NetworkUnreachable,
    /// The destination did not answer (unreachable, no address for the name, or timed out).
    HostUnreachable,
    /// The destination refused the connection.
    Refused,
}

impl Verdict {
    /// Every verdict, in the order of their bytes.
    #[cfg(test)]
    pub(crate) const ALL: [Verdict; 6] = [
        Verdict::Connected,
        Verdict::Failed,
        Verdict::PolicyDenied,
        Verdict::NetworkUnreachable,
        Verdict::HostUnreachable,
        Verdict::Refused,
    ];

    /// The verdict's byte on the wire.
    pub fn to_byte(self) -> u8 {
        match self {
            Verdict::Connected => 0,
            Verdict::Failed => 1,
            Verdict::PolicyDenied => 2,
            Verdict::NetworkUnreachable => 3,
            Verdict::HostUnreachable => 4,
            Verdict::Refused => 5,
        }
    }

    /// The verdict a byte names (an unknown byte is a general failure).
    pub(crate) fn from_byte(b: u8) -> Verdict {
        match b {
            0 => Verdict::Connected,
            2 => Verdict::PolicyDenied,
            3 => Verdict::NetworkUnreachable,
            4 => Verdict::HostUnreachable,
            5 => Verdict::Refused,
            _ => Verdict::Failed,
        }
    }

    /// The verdict for a failed connect to the destination.
    pub fn for_connect_error(e: &io::Error) -> Verdict {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => Verdict::Refused,
            io::ErrorKind::TimedOut | io::ErrorKind::HostUnreachable => Verdict::HostUnreachable,
            io::ErrorKind::NetworkUnreachable => Verdict::NetworkUnreachable,
            _ => Verdict::Failed,
        }
    }

    /// Whether the gateway connected.
    pub fn is_connected(self) -> bool {
        self == Verdict::Connected
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Connected => "connected",
            Verdict::Failed => "failed at the gateway",
            Verdict::PolicyDenied => "denied by the gateway's policy",
            Verdict::NetworkUnreachable => "network unreachable",
            Verdict::HostUnreachable => "host unreachable or timed out",
            Verdict::Refused => "connection refused by the destination",
        })
    }
}

/// Reads the verdict at the start of the first bytes a stream delivered back: the verdict and
/// the server's bytes that came with it; `None` for no bytes yet. The one place the verdict
/// byte is parsed.
pub fn split_verdict(first: &[u8]) -> Option<(Verdict, &[u8])> {
    let (&b, rest) = first.split_first()?;
    Some((Verdict::from_byte(b), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_round_trip_and_unknown_bytes_are_failures() {
        for (i, v) in Verdict::ALL.into_iter().enumerate() {
            assert_eq!(v.to_byte() as usize, i);
            assert_eq!(Verdict::from_byte(v.to_byte()), v);
        }
        for b in 6..=255u8 {
            assert_eq!(Verdict::from_byte(b), Verdict::Failed);
        }
        assert_eq!(split_verdict(&[]), None);
        assert_eq!(
            split_verdict(&[0, b'H', b'i']),
            Some((Verdict::Connected, &b"Hi"[..]))
        );
        assert_eq!(split_verdict(&[5]), Some((Verdict::Refused, &[][..])));
    }

    #[test]
    fn connect_errors_map_to_verdicts() {
        let v = |k| Verdict::for_connect_error(&io::Error::from(k));
        assert_eq!(v(io::ErrorKind::ConnectionRefused), Verdict::Refused);
        assert_eq!(v(io::ErrorKind::TimedOut), Verdict::HostUnreachable);
        assert_eq!(v(io::ErrorKind::HostUnreachable), Verdict::HostUnreachable);
        assert_eq!(
            v(io::ErrorKind::NetworkUnreachable),
            Verdict::NetworkUnreachable
        );
        assert_eq!(v(io::ErrorKind::PermissionDenied), Verdict::Failed);
    }
}
