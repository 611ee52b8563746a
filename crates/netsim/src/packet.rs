//! What travels through the simulated network.

use crate::tcp::TcpSegment;

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

/// IPv4 header bytes.
pub const IP_HEADER: u32 = 20;
/// UDP header bytes (STP runs over UDP).
pub const UDP_HEADER: u32 = 8;
/// TCP header bytes without options.
pub const TCP_HEADER: u32 = 20;
