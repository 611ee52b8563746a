//! The satellite hop: a [`Hop`] handle hands out [`HopStream`]s (byte streams with backpressure
//! both ways) whichever transport carries them.
//!
//! - [`handle`]: the handle API and the commands behind it;
//! - [`stp`]: the STP hop, one UDP socket, one `stp::Endpoint` and the Noise tunnel;
//! - [`tcp`]: the split-TCP hop, one kernel TCP connection per stream;
//! - [`shaper`], [`batch`], [`open_budget`], [`udp_batch`]: the send allocation, datagrams
//!   leaving together, the gateway's per-terminal open budget, segmented UDP sends.

pub mod batch;
pub mod handle;
pub mod open_budget;
pub mod shaper;
pub mod stp;
pub mod tcp;
pub(crate) mod udp_batch;

pub use handle::{
    Hop, HopConfig, HopMonitor, HopReader, HopStatus, HopStream, HopWriter, Security, StpTotals,
    StreamEvent, StreamStatus, ABORT_DROPPED, ABORT_HOP_CLOSED, FAILOVER_AFTER_HANDSHAKES,
};
pub use open_budget::{OPENS_BURST, OPENS_PER_S};
pub use stp::{IPV4_UDP_OVERHEAD, IPV6_UDP_OVERHEAD, REHANDSHAKE_AFTER};
