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

use crate::packet::{IP_HEADER, TCP_HEADER};

/// A TCP segment as the simulator carries it. Data bytes are counted, not carried.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcpSegment {
    /// Sequence number of the first byte (SYN and FIN each take one number).
    pub seq: u64,
    /// Data bytes carried.
    pub len: u32,
    /// Cumulative acknowledgement (next byte expected), valid when `ack_flag`.
    pub ack: u64,
    pub ack_flag: bool,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    /// Receive window offered, bytes (already scaled).
    pub window: u64,
    /// SACK blocks `[start, end)`, most recent first, at most 3 (4 without timestamps).
    pub sack: Vec<(u64, u64)>,
    /// SYN option: SACK permitted (RFC 2018).
    pub sack_permitted: bool,
    /// SYN option: window scale present (RFC 1323); windows above 65535 need it on both SYNs.
    pub window_scaling: bool,
    /// Timestamp option (RFC 7323), as simulated time + 1 (0: no option): TSval ...
    pub ts_val: u64,
    /// ... and TSecr, the TSval echoed.
    pub ts_ecr: u64,
}

impl TcpSegment {
    /// Bytes of TCP options on the wire (SACK: 2 + 8 per block, padded to 4). The options of a
    /// SYN (MSS, window scale, SACK-permitted) are not counted.
    pub fn option_bytes(&self) -> u32 {
        // Timestamps: 10 bytes, padded to 12.
        let ts = if self.ts_val > 0 { 12 } else { 0 };
        if self.sack.is_empty() {
            ts
        } else {
            ts + (2 + 8 * self.sack.len() as u32).div_ceil(4) * 4
        }
    }

    /// Bytes on the wire: IPv4 and TCP headers, options, data.
    pub fn wire_size(&self) -> u32 {
        (IP_HEADER + TCP_HEADER + self.option_bytes()).saturating_add(self.len)
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    #[test]
    fn wire_size_counts_headers_and_options() {
        let data = TcpSegment {
            len: 1460,
            ..Default::default()
        };
        assert_eq!(data.wire_size(), 1500);
        let ack = TcpSegment {
            ack_flag: true,
            sack: vec![(1, 2), (3, 4), (5, 6)],
            ..Default::default()
        };
        // 2 + 24 = 26, padded to 28
        assert_eq!(ack.option_bytes(), 28);
        assert_eq!(ack.wire_size(), 68);
        let one = TcpSegment {
            sack: vec![(1, 2)],
            ..Default::default()
        };
        assert_eq!(one.option_bytes(), 12);
        let syn = TcpSegment {
            syn: true,
            sack_permitted: true,
            window_scaling: true,
            ..Default::default()
        };
        assert_eq!(syn.wire_size(), 40);
    }
}
