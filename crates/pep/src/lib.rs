//! `pep`: the split-connection gateway of satstp. For now it holds the security layer of the
//! satellite hop: [`tunnel`] (Noise IK handshake, encrypted datagrams with replay protection,
//! sessions for many terminals on one socket) and [`keys`] (static key pairs and key files).
//! Both are sans-IO: no sockets, threads or clock; the driver passes datagrams and `now` in.

pub mod capture;
pub mod config;
pub mod fdlimit;
pub mod hop;
pub mod http_connect;
pub mod http_endpoint;
pub mod keys;
pub mod metrics;
pub mod ops;
pub mod policy;
pub mod relay;
pub mod sizing;
pub mod socks;
pub mod tcp_hop;
pub mod tproxy;
pub mod tunnel;
mod udp_batch;

pub use socks::Target;
