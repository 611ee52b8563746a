//! The hop's error vocabulary: why a stream was reset ([`AbortCode`], the code that crosses the
//! hop with the reset), why a stream failed ([`StreamError`]) and why the hop refused a request
//! ([`HopError`]).

use std::fmt;
use std::net::SocketAddr;
use thiserror::Error;

/// Why a stream was reset, as the code the reset carries across the hop (an STP RST's detail,
/// or the split-TCP hop's ABORT frame). The far side's relay resets its TCP connection in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum AbortCode {
    /// No reason given (the split-TCP hop's writer went away without a FIN).
    Unspecified = 0,
    /// Gateway: the stream did not begin with a valid stream header.
    BadHeader = 1,
    /// Gateway: the hop had no room for another incoming stream.
    Overloaded = 2,
    /// The relay's TCP connection failed (reset by its peer, or a read or write error).
    TcpFailed = 3,
    /// The relay closed the connection after its idle timeout.
    Idle = 4,
    /// The stream's writer was dropped without a half-close or an abort.
    WriterDropped = 5,
    /// The hop stopped (its handle was dropped or closed) or failed over to another gateway.
    HopClosed = 6,
    /// The side's graceful shutdown ran out of time.
    DrainTimeout = 7,
    /// The open's deadline passed: the terminal gave up waiting for the verdict, or the gateway
    /// got the stream too late and did not run it.
    Expired = 8,
    /// Gateway: the terminal's key was removed from the allow-list (a reload revoked it).
    Revoked = 9,
}

impl AbortCode {
    /// Every code, in numeric order.
    pub(crate) const ALL: [AbortCode; 10] = [
        AbortCode::Unspecified,
        AbortCode::BadHeader,
        AbortCode::Overloaded,
        AbortCode::TcpFailed,
        AbortCode::Idle,
        AbortCode::WriterDropped,
        AbortCode::HopClosed,
        AbortCode::DrainTimeout,
        AbortCode::Expired,
        AbortCode::Revoked,
    ];

    /// The code on the wire.
    pub(crate) fn code(self) -> u16 {
        self as u16
    }

    /// The code's meaning, `None` for a number this version does not know.
    pub(crate) fn from_code(code: u16) -> Option<AbortCode> {
        AbortCode::ALL.get(usize::from(code)).copied()
    }

    fn describe(self) -> &'static str {
        match self {
            AbortCode::Unspecified => "unspecified",
            AbortCode::BadHeader => "bad stream header",
            AbortCode::Overloaded => "gateway overloaded",
            AbortCode::TcpFailed => "TCP connection failed",
            AbortCode::Idle => "idle timeout",
            AbortCode::WriterDropped => "writer dropped",
            AbortCode::HopClosed => "hop closed",
            AbortCode::DrainTimeout => "drain timed out",
            AbortCode::Expired => "open expired",
            AbortCode::Revoked => "terminal key revoked",
        }
    }
}

impl fmt::Display for AbortCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code {}: {}", self.code(), self.describe())
    }
}

/// Why a stream failed: its reader sees this instead of an end.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StreamError {
    /// The far side reset the stream with `code` (an [`AbortCode`] when known).
    #[error("reset by the peer ({})", describe_code(*.code))]
    Reset { code: u16 },
    /// The STP connection failed otherwise (timed out, refused, superseded, ...).
    #[error("{0}")]
    Stp(stp::ConnectionError),
    /// This side's hop stopped.
    #[error("hop closed")]
    HopClosed,
    /// Terminal: the hop moved to another gateway; the stream had reached the old one.
    #[error("gateway failed over")]
    FailedOver,
    /// Terminal: the tunnel is down (the gateway leaves handshakes unanswered); the stream had
    /// sent nothing.
    #[error("tunnel to the gateway is down")]
    TunnelDown,
    /// Terminal: the gateway restarted; the stream had reached the old instance.
    #[error("the gateway restarted")]
    GatewayRestarted,
    /// Gateway: the stream's terminal key was removed from the allow-list.
    #[error("terminal key revoked")]
    Revoked,
    /// The split-TCP hop's connection failed.
    #[error("tcp hop: {0}")]
    TcpHop(TcpHopFailure),
}

impl StreamError {
    /// The abort code of a reset by the peer.
    pub fn abort_code(&self) -> Option<AbortCode> {
        match self {
            StreamError::Reset { code } => AbortCode::from_code(*code),
            _ => None,
        }
    }
}

impl From<stp::ConnectionError> for StreamError {
    fn from(e: stp::ConnectionError) -> Self {
        match e {
            stp::ConnectionError::Reset {
                reason: stp::wire::RstReason::Aborted,
                detail,
            } => StreamError::Reset { code: detail },
            other => StreamError::Stp(other),
        }
    }
}

fn describe_code(code: u16) -> String {
    match AbortCode::from_code(code) {
        Some(c) => c.to_string(),
        None => format!("code {code}"),
    }
}

/// How a split-TCP hop connection failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TcpHopFailure {
    #[error("the hop connection closed before the end of the stream")]
    ClosedEarly,
    #[error("hop connection: {0}")]
    Connection(String),
    #[error("malformed frame on the hop")]
    Malformed,
    #[error("a frame on the hop failed authentication")]
    Authentication,
    #[error("{0}")]
    Handshake(String),
}

/// Why the hop refused a request or could not start.
#[derive(Debug, Error)]
pub enum HopError {
    /// The hop's task is gone.
    #[error("hop closed")]
    Closed,
    /// Only a terminal opens streams.
    #[error("only a terminal opens streams")]
    NotTerminal,
    /// A terminal needs at least one gateway.
    #[error("a terminal needs at least one gateway")]
    NoGateway,
    /// Terminal: the tunnel is down (the gateway leaves handshakes unanswered).
    #[error("tunnel to the gateway is down")]
    TunnelDown,
    #[error("send_rate_bps must be positive")]
    ZeroRate,
    /// The STP endpoint refused the configuration.
    #[error(transparent)]
    StpConfig(#[from] stp::ConfigError),
    /// The STP endpoint refused the connection.
    #[error(transparent)]
    StpConnect(#[from] stp::ConnectError),
    /// The tunnel could not be set up (a bad key, say).
    #[error("tunnel: {0}")]
    Tunnel(#[from] crate::tunnel::Error),
    /// The split-TCP hop's Noise handshake could not be set up (a bad key, say).
    #[error("tunnel: {0}")]
    Noise(#[from] snow::Error),
    /// A socket could not be set up.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The split-TCP hop's socket options do not apply on this host.
    #[cfg(feature = "runtime")]
    #[error(transparent)]
    Sockopt(#[from] crate::sockopt::SockoptError),
    /// The split-TCP hop's gateway cannot listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_ones_stay_numbers() {
        for c in AbortCode::ALL {
            assert_eq!(AbortCode::from_code(c.code()), Some(c));
        }
        assert_eq!(AbortCode::from_code(10), None);
        let e = StreamError::Reset { code: 7 };
        assert_eq!(e.abort_code(), Some(AbortCode::DrainTimeout));
        assert!(e.to_string().contains("code 7"), "{e}");
        assert_eq!(
            StreamError::Reset { code: 99 }.to_string(),
            "reset by the peer (code 99)"
        );
    }
}
