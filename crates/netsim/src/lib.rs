//! A deterministic discrete-event packet simulator for satellite transport studies.
//!
//! The simulator drives the real `stp` engine with real encoded datagrams, models the TCP variants
//! the seeds study, and uses the same `linkmodel` as the real-time emulator, so its results are
//! results about the shipped code. Same scenario and seed give identical results.

// The parts, kept apart as ns-3 keeps them (docs/architecture.md):
//
// The core: virtual time, events, nodes, links (the shared `linkmodel`), packets, measurements.
pub mod clock;
pub mod metrics;
pub mod packet;
pub mod pcap;
pub mod sim;
/// Units in the scenario files and on the command line (shared with the gateway configuration).
pub use linkmodel::units;

// Models: the TCP variants the seeds study, and ACK management in a link's queue.
pub mod ackmgmt;
pub mod tcp;

// The socket layer: sending what a connection (TCP model or STP engine) has due, its timers.
pub mod stack;

// Applications: agents on nodes that drive a transport (TCP model, real STP engine) and read
// and write its bytes: bulk senders and sinks, striping, the split gateway.
pub mod gateway;
pub mod stp_agent;
pub mod striping;

// Helpers: building a simulation from a scenario file, a LEO constellation as a packet network.
pub mod leo_net;
pub mod leo_scenario;
pub mod scenario;

// Experiments: the reproductions of the seeds' experiments and sharded runs of them.
pub mod reproduce;
pub mod shard;

// Short transfers and the web (issue 15), models, applications and experiments in one folder.
pub mod web;

pub use metrics::{mean_ci95, FlowMetrics, Metrics};
pub use packet::{Addr, Direction, FlowId, LinkId, NodeId, Packet, Payload};
pub use sim::{Agent, AgentId, Ctx, Sim, SimError, Time, MS, SEC};
pub use tcp::{
    IncreasePolicy, InitialWindow, TcpAgent, TcpConfig, TcpConfigError, TcpConnection, TcpSegment,
    TcpStats, Variant,
};
