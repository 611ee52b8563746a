//! `pep`: the split-connection gateway of satstp.
//!
//! # The API on one page
//!
//! - **The two sides**: [`Terminal::start`] with [`TerminalOptions`] (its hop,
//!   [`stack::TerminalHop`], an [`stack::StpHop`] sized by [`sizing::HopLink`], its
//!   [`stack::SocksListener`]) and [`Gateway::start`] with [`GatewayOptions`]
//!   ([`stack::GatewayHops`], a [`gateway::policy::Policy`] from its
//!   [`gateway::policy::PolicyConfig`], [`gateway::connect::ConnectOptions`]); each reports
//!   [`hop::HopStatus`], its [`ops::Ops`] and [`metrics::Metrics`] (exported as Prometheus
//!   text on its metrics listener; in process, [`metrics::Metrics::refused`]), and stops with a
//!   drain.
//! - **The hop handle**, for a program that drives a hop itself: [`hop::Hop`] (started with a
//!   [`hop::HopConfig`] and its [`hop::Security`]: a [`tunnel::Initiator`] or
//!   [`tunnel::Responder`] and [`keys`]) hands out [`hop::HopStream`]s that deliver
//!   [`hop::StreamEvent`]s; [`terminal::open`] opens one with the stream header and waits for
//!   the verdict. [`hop::core::HopCore`] is the same hop without I/O, which `netsim` drives in
//!   virtual time.
//! - **The stream protocol**, sans-IO: [`Target`], [`stream::StreamHeader`], [`Verdict`] and
//!   [`stream::split_verdict`]; [`socks`] and [`http_connect`] parse their clients' requests
//!   into it.
//! - **Configuration**: [`config`] reads the daemons' files ([`config::load_terminal`],
//!   [`config::load_gateway`]) and [`setup`] checks them and makes them into a side's options;
//!   [`sizing`], [`quic_policy`], [`sockopt`], [`capture`],
//!   [`fdlimit`] and [`nft_rules`] are what the daemons apply from it.
//!
//! Inside (not API): `splice` relays one TCP connection and one stream both ways, the
//! listeners of [`terminal`] and the serving side of [`gateway`], the tunnel's sessions, replay
//! window and wire, the hop's drivers and shaping, and `http_endpoint` serving the metrics.
//! What is not named above is `pub(crate)`: `unreachable_pub` keeps a `pub` that no user can
//! reach from being written.

#![warn(unreachable_pub)]
// The module docs are written for whoever maintains the crate and name its internals; rustdoc
// shows those names as plain text on the public pages.
#![allow(rustdoc::private_intra_doc_links)]
// Without the tokio runtime, the items only its drivers use are unused.
#![cfg_attr(not(feature = "runtime"), allow(dead_code, unused_imports))]

pub mod capture;
pub mod config;
mod fast_hash;
#[cfg(feature = "runtime")]
pub mod fdlimit;
pub mod gateway;
pub mod hop;
#[cfg(feature = "runtime")]
pub mod http_connect;
#[cfg(feature = "runtime")]
mod http_endpoint;
pub mod keys;
pub mod metrics;
pub mod nft_rules;
#[cfg(feature = "runtime")]
pub mod ops;
pub mod quic_policy;
#[cfg(feature = "runtime")]
pub mod setup;
pub mod sizing;
#[cfg(feature = "runtime")]
pub mod sockopt;
#[cfg(feature = "runtime")]
pub mod socks;
#[cfg(feature = "runtime")]
mod splice;
#[cfg(feature = "runtime")]
pub mod stack;
pub mod stream;
#[cfg(feature = "runtime")]
pub mod terminal;
pub mod tunnel;

#[cfg(feature = "runtime")]
pub use stack::{Gateway, GatewayOptions, Terminal, TerminalOptions};
pub use stream::{Target, Verdict};

// The suites that use what is not API live in the crate (`stack/tests_*.rs`,
// `hop/tests_failover.rs`, `metrics/tests_*.rs`) and share the integration tests' helpers
// (`tests/common`), which name the crate `pep`.
#[cfg(test)]
extern crate self as pep;
#[cfg(all(test, feature = "runtime"))]
#[allow(unreachable_pub)]
#[path = "../tests/common/mod.rs"]
mod tests_common;
