//! What travels through the simulated network.

/// A node of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// A simplex link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// A flow, for metrics: every packet a flow causes carries its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowId(pub u32);

/// An agent is addressed by its node and a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    pub node: NodeId,
    pub port: u16,
}

/// Which way a packet goes relative to its flow's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Data direction (source → sink).
    Forward,
    /// Acknowledgements, STATs and other feedback (sink → source).
    Reverse,
}

/// The contents of a packet.
#[derive(Debug, Clone)]
pub enum Payload {
    /// A TCP segment (modelled, not encoded).
    Tcp(TcpSegment),
    /// A real encoded STP datagram, as `stp` emitted it.
    Stp(Vec<u8>),
}

/// One packet.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Unique per simulation run, in creation order.
    pub id: u64,
    pub src: Addr,
    pub dst: Addr,
    pub flow: FlowId,
    pub direction: Direction,
    /// Bytes on the wire, network and transport headers included.
    pub size: u32,
    pub payload: Payload,
    /// The packet repeats data its sender sent before (a retransmission): its bits count in a
    /// link's utilization but not in its utilization in original bits.
    pub retransmission: bool,
}

impl linkmodel::Datagram for Packet {
    /// An STP datagram's bit is flipped (the index wraps over the bytes carried, which exclude
    /// the IP and UDP headers counted in `size`). A modelled TCP segment has no bytes to flip:
    /// the receiver's checksum would discard it, so it is lost.
    fn flip_bit(&mut self, bit: usize) -> bool {
        match &mut self.payload {
            Payload::Stp(bytes) => {
                let i = bit / 8 % bytes.len().max(1);
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << (bit % 8);
                }
                true
            }
            Payload::Tcp(_) => false,
        }
    }
}

/// IPv4 header bytes.
pub const IP_HEADER: u32 = 20;
/// UDP header bytes (STP runs over UDP).
pub const UDP_HEADER: u32 = 8;
/// TCP header bytes without options.
pub const TCP_HEADER: u32 = 20;

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
mod tests {
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
