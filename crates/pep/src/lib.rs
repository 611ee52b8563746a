//! `pep`: the split-connection gateway of satstp, by role and layer:
//!
//! - [`hop`]: the satellite hop (the handle API, the STP and split-TCP transports, shaping);
//! - [`tunnel`], [`keys`]: the hop's security (Noise IK, sans-IO);
//! - [`stream`]: the stream protocol, sans-IO: the header that opens every stream (target,
//!   client, deadline) and the gateway's [`stream::Verdict`]; [`socks`] and [`http_connect`] map
//!   their clients' protocols to and from it;
//! - [`terminal`]: accepting clients (SOCKS5, HTTP CONNECT, TPROXY) and opening streams;
//! - [`gateway`]: serving streams (policy, connect);
//! - `splice` (internal): one TCP connection and one stream relayed both ways;
//! - [`sockopt`]: every socket option the gateway sets;
//! - [`stack`]: a side assembled ([`Terminal::start`], [`Gateway::start`]) and stopped;
//! - [`setup`]: a side's configuration ([`config`]) checked and made into its options;
//! - [`config`], [`sizing`], [`ops`], [`metrics`], [`capture`], [`fdlimit`]: configuration,
//!   sizing from the allocation, limits, metrics (served by the internal `http_endpoint`),
//!   capture;
//! - [`nft_rules`]: the shipped nftables files made ready to load.
//!
//! What is not named here is internal (`pub(crate)`): `unreachable_pub` keeps a `pub` that no
//! user can reach from being written.

#![warn(unreachable_pub)]
// Without the tokio runtime, the items only its drivers use are unused.
#![cfg_attr(not(feature = "runtime"), allow(dead_code, unused_imports))]

pub mod capture;
pub mod config;
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
