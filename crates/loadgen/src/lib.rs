//! The load-generation kit: what drives traffic through the gateway in the benchmarks, the demo
//! and the tests (in the spirit of ns-3's applications).
//!
//! - [`pattern`]: the byte pattern every transfer carries, and its checker: position- and
//!   object-dependent, so a lost, duplicated, reordered or mixed-up byte shows.
//! - [`socks5`] and [`http_connect`]: the two proxy clients, each one protocol implementation
//!   (sans-IO encode/decode) with an async (tokio) and a blocking flavour.
//! - [`http`]: HTTP/1.1 `GET` of a patterned object and `POST` of one, every byte checked.
//! - [`origin`]: the origin server that answers them (and a raw dialect for byte-stream tests).
//! - [`h3`]: the same origin over HTTP/3 on QUIC (UDP), with a certificate authority made per
//!   run, for browsers.
//! - [`tls`]: the origin's TLS 1.3 (a test CA made per run; HTTP/2 or HTTP/1.1 by ALPN).
//! - [`client`]: how a client reaches the origin (directly, through SOCKS5 or HTTP CONNECT).
//! - [`ports`]: loopback ports for the daemons a run starts, outside the ephemeral range.
//! - [`page`]: the web-page fetcher (HTTP/1.1 persistent connections, or HTTP/1.0-style one
//!   connection per object).
//!
//! Library errors are typed ([`Error`]); callers add context.

pub mod client;
pub mod h3;
pub mod http;
pub mod http_connect;
pub mod origin;
pub mod page;
pub mod pattern;
pub mod ports;
pub mod socks5;
pub mod tls;

mod error;

/// A copy of what `m` holds (the default if a holder panicked): the origins' counters as read
/// by their accessors.
pub(crate) fn snapshot<T: Clone + Default>(m: &std::sync::Mutex<T>) -> T {
    m.lock().map(|v| v.clone()).unwrap_or_default()
}
pub use error::Error;
