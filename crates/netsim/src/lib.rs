//! A deterministic discrete-event packet simulator for satellite transport studies.
//!
//! The simulator drives the real `stp` engine with real encoded datagrams, models the TCP variants
//! the seeds study, and uses the same `linkmodel` as the real-time emulator, so its results are
//! results about the shipped code. Same scenario and seed give identical results.

pub mod ackmgmt;
pub mod clock;
pub mod gateway;
// Short transfers and web latency (issue 15): the HTTP model, its agents, the analytic model.
pub mod http;
pub mod http_model;
pub mod latency_model;
// The LEO constellation as a packet network (issue 26).
pub mod leo_net;
pub mod leo_scenario;
pub mod metrics;
pub mod packet;
pub mod pcap;
pub mod reproduce;
pub mod scenario;
pub mod shard;
pub mod sim;
pub mod stp_agent;
pub mod striping;
pub mod tcp;
pub mod web_experiments;
pub mod web_repro;
/// Units in the scenario files and on the command line (shared with the gateway configuration).
pub use linkmodel::units;
pub mod web;

pub use metrics::{mean_ci95, FlowMetrics, Metrics};
pub use packet::{Addr, Direction, FlowId, LinkId, NodeId, Packet, Payload};
pub use sim::{Agent, AgentId, Ctx, Sim, SimError, Time, MS, SEC};
pub use tcp::{
    IncreasePolicy, InitialWindow, TcpAgent, TcpConfig, TcpConfigError, TcpConnection, TcpSegment,
    TcpStats, Variant,
};
