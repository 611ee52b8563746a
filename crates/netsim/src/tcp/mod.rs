//! TCP models at segment level (byte sequence numbers, headers counted, payload not carried):
//! Reno, NewReno, SACK-Reno and SACK-NewReno senders, a receiver with delayed ACKs and SACK, and
//! the window-increase options the seeds study.
//!
//! - [`TcpConfig`]: every option, with defaults and validation.
//! - [`TcpConnection`]: one endpoint in the sans-IO style (segments and time in, segments and
//!   deadlines out), reusable by any driver (the agents here, a split-connection gateway).
//! - [`TcpAgent`]: a bulk sender or a sink on a simulator node, driving connections and reporting
//!   flow metrics.

mod agent;
mod config;
mod connection;
mod ranges;
mod receiver;
mod rto;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ttcp;

pub use agent::{TcpAgent, TcpRole};
pub use config::{
    IncreasePolicy, InitialWindow, TcpConfig, TcpConfigError, Variant, MAX_WINDOW_BYTES,
    UNSCALED_WINDOW_BYTES,
};
pub use connection::{RecoveryState, TcpConnection, TcpState, TcpStats};
pub use rto::RtoEstimator;

pub use crate::packet::TcpSegment;
