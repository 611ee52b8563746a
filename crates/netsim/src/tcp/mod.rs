//! TCP models at segment level (byte sequence numbers, headers counted, payload not carried):
//! Reno, NewReno, SACK-Reno and SACK-NewReno senders, a receiver with delayed ACKs and SACK, and
//! the window-increase options the seeds study.

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
}

impl TcpSegment {
    /// Bytes of TCP options on the wire (SACK: 2 + 8 per block, padded to 4).
    pub fn option_bytes(&self) -> u32 {
        if self.sack.is_empty() {
            0
        } else {
            (2 + 8 * self.sack.len() as u32).div_ceil(4) * 4
        }
    }
}
