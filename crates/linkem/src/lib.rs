//! Real-time link emulation on the shared link model ([`linkmodel`]).
//!
//! [`UdpEmulator`] is an in-process UDP relay, needing no privileges, that sits between a
//! terminal and a gateway and impairs each direction with its own [`linkmodel::Direction`]: rate
//! (fixed or a mahimahi trace),
//! one-way delay (fixed or traced), queue limit and discipline, loss, outages, duplication and
//! corruption, all decided by the same model the simulator uses, with the wall clock as time.
//! [`Profile`] names typical satellite paths.
//!
//! [`NetEmulator`] (Linux, root) is the IP-level emulator: two network namespaces, the terminal
//! side and the gateway side, each with a TUN device, joined only through a forwarder applying
//! the same link model to every IP packet (see the [`net`] module). Both drive one [`Lane`] per
//! direction: the link direction and its delivery schedule, in time passed in.

mod lane;
pub mod net;
mod profile;
mod relay;
mod schedule;

pub use lane::Lane;
pub use net::{NetConfig, NetDirectionStats, NetEmulator, NetError, NetStats, Side};
pub use profile::{
    direction, leo_delay_trace, queue_bytes_for, Profile, UnknownProfile, LEO_RECONFIGURATION_NS,
    LEO_SLOT_DELAYS_MS, MIN_QUEUE_BYTES, UDP_IPV4_OVERHEAD_BYTES,
};
pub use relay::{
    Direction, DirectionStats, EmulatorConfig, EmulatorError, EmulatorHandle, EmulatorStats,
    UdpEmulator, MAX_DATAGRAM_BYTES,
};
pub use schedule::{Due, DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES};
