//! The satellite hop: a [`Hop`] handle hands out [`HopStream`]s (byte streams with backpressure
//! both ways) whichever transport carries them.
//!
//! - [`handle`]: the handle API and the commands behind it;
//! - [`core`]: the STP hop's logic, sans-IO (streams over one `stp::Endpoint`, the Noise tunnel);
//! - [`stp`]: the STP hop's tokio driver, one UDP socket and one task around the core;
//! - [`tcp`]: the split-TCP hop, one kernel TCP connection per stream;
//! - [`read_ahead`]: the STP hop's bound on bytes read from TCP and not yet sent, shared fairly;
//! - [`clock`]: the clock of times that cross the hop (tunnel responses, stream deadlines);
//! - [`shaper`], [`batch`], [`open_budget`], [`udp_batch`]: the send allocation, datagrams
//!   leaving together, the gateway's per-terminal open budget, segmented UDP sends.

#[cfg(feature = "runtime")]
mod backpressure;
mod batch;
pub(crate) mod clock;
pub mod core;
mod error;
#[cfg(feature = "runtime")]
mod handle;
mod open_budget;
#[cfg(feature = "runtime")]
pub(crate) mod read_ahead;
mod shaper;
#[cfg(feature = "runtime")]
pub(crate) mod stp;
#[cfg(feature = "runtime")]
pub(crate) mod tcp;
#[cfg(feature = "runtime")]
pub(crate) mod udp_batch;

// The hop core driven in virtual time over `memnet`'s wire, as a unit test: it turns the
// core's knobs (rekey timing, cipher suites, the sent-datagram count) that are not API.
#[cfg(test)]
mod tests_core;
// The terminal's failover between gateways, timed against the re-handshake constants.
#[cfg(all(test, feature = "runtime"))]
mod tests_failover;

pub use core::{
    HopStatus, RekeyConfig, StpStatus, StreamEvent, StreamStatus, TunnelReport, TunnelState,
};
pub use error::{AbortCode, HopError, StreamError, TcpHopFailure};
#[cfg(feature = "runtime")]
pub use handle::{AllowedChange, Hop, HopConfig, HopMonitor, HopStream, Security};
#[cfg(feature = "runtime")]
pub(crate) use handle::{HopReader, HopWriter, WorkerHome};
#[cfg(feature = "runtime")]
pub use read_ahead::default_read_ahead_bytes;
#[cfg(feature = "runtime")]
pub use stp::udp_buffer_report;
