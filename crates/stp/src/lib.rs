//! STP, the Satellite Transport Protocol, as a sans-IO engine.
//!
//! The engine performs no I/O, reads no clock and owns no global randomness: a driver hands it
//! datagrams and the current [`Instant`], and takes datagrams and the next deadline out. The same
//! code runs inside the `netsim` simulator (virtual time) and the `pep` gateway (real sockets).
//!
//! * [`Endpoint`] holds many [`Connection`]s over one datagram socket.
//! * [`wire`] parses and emits every packet type (SD, POLL, STAT, USTAT, BGN, BGNAK, END, ENDAK,
//!   RST); `docs/stp-spec.md` in the repository is the normative specification.
//!
//! ```
//! use stp::{Endpoint, EndpointConfig, Instant};
//! use rand_core::SeedableRng;
//! let rng = Box::new(rand_chacha::ChaCha8Rng::seed_from_u64(1));
//! let mut client = Endpoint::new(EndpointConfig::default(), rng).unwrap();
//! let server_addr = "192.0.2.1:4000".parse().unwrap();
//! let h = client.connect(Instant::ZERO, server_addr).unwrap();
//! client.connection(h).unwrap().write(b"GET /").unwrap();
//! let mut buf = Vec::new();
//! let t = client.poll_transmit(Instant::ZERO, &mut buf).unwrap();
//! assert_eq!(t.destination, server_addr); // BGN|SD|POLL, carrying the request
//! ```

mod cache;
mod config;
mod congestion;
mod connection;
mod endpoint;
#[cfg(feature = "serde")]
pub mod options;
mod ordered_set;
mod pacing;
mod recv;
mod rtt;
mod send;
mod seq;
pub mod stats;
mod time;
pub mod wire;

pub use config::{Config, ConfigError, CongestionMode, EndpointConfig, InitialWindow, Profile};
pub use connection::{
    Connection, ConnectionError, DatagramError, Event, ReadError, Role, WriteError,
};
pub use endpoint::{ConnectError, ConnectionHandle, Endpoint, Transmit};
#[cfg(feature = "serde")]
pub use options::ConfigOptions;
pub use stats::{ConnectionStats, ConnectionTotals, EndpointStats};
pub use time::Instant;
