//! The kit's one error type.

use std::io;
use thiserror::Error;

/// What went wrong in a transfer, a proxy exchange or the origin.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The proxy answered, but not with success: the SOCKS5 reply code (RFC 1928 §6).
    #[error("SOCKS5 CONNECT failed with reply code {0}")]
    SocksRefused(u8),
    /// The HTTP CONNECT proxy answered with this status instead of 2xx.
    #[error("HTTP CONNECT failed with status {0}")]
    ConnectRefused(u16),
    /// The peer broke the protocol (SOCKS5, HTTP CONNECT or HTTP).
    #[error("{0}")]
    Protocol(String),
    /// The origin answered a request with this status.
    #[error("the origin answered {status} for {what}")]
    Status { status: u16, what: String },
    /// A byte of object `key` arrived other than the pattern says.
    #[error("object {key}: byte {offset} of {len} is wrong")]
    WrongByte { key: u64, offset: u64, len: u64 },
    /// The connection ended before all of a body arrived.
    #[error("connection closed after {got} of {len} bytes")]
    Short { got: u64, len: u64 },
    /// TLS set-up or handshake failed (certificate generation, configuration, the peer's
    /// handshake).
    #[error("TLS: {0}")]
    Tls(String),
    /// An HTTP/2 connection or stream failed.
    #[error("HTTP/2: {0}")]
    H2(String),
    /// A deadline passed.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl Error {
    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol(what.into())
    }
}
