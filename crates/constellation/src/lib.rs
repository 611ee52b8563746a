//! LEO satellite constellations and packet routing, after chapter 6 of Henderson's thesis:
//! circular orbits over a rotating spherical Earth (Walker star and delta shells, the thesis'
//! Iridium and Teledesic, modern shells) or real satellites from TLEs through SGP4; ISLs as the
//! thesis models them; ground terminals with elevation masks and handoff; min-delay and min-hop
//! shortest paths, geographic forwarding (§6.5) and centralized routing with Gray-coded cells and
//! aggregated tables (§6.6); and the one-way delay of a terminal-to-terminal path over time, in
//! the delay-trace format the emulators and the simulator read.
//!
//! Everything is a pure function of time and a seed: no clock, no global randomness.

pub mod cells;
pub mod central;
pub mod experiments;
pub mod fstate;
pub mod geo;
pub mod geographic;
pub mod ground;
pub mod polar;
pub mod routing;
pub mod tle;
pub mod topology;
pub mod trace;
pub mod walker;

pub use geo::{Place, Vec3};
pub use ground::{AttachPolicy, HandoffMode};
pub use routing::Metric;
pub use topology::{Constellation, Snapshot};
pub use trace::{PathSpec, PathTrace, Routing, TraceSpec};
pub use walker::Shell;

/// What is wrong with a constellation, a place, a TLE or a request, named.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConstellationError {
    #[error("constellation field {field}: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("unknown constellation '{0}' (presets: iridium, teledesic, starlink-550, kuiper-630, oneweb)")]
    UnknownPreset(String),
    #[error(
        "unknown place '{0}' (give a built-in city, see `satstp leo list`, or LAT,LON in degrees)"
    )]
    UnknownPlace(String),
    #[error("{source_name} line {line}: {reason}")]
    Line {
        source_name: String,
        line: usize,
        reason: String,
    },
    #[error("{0}")]
    Request(String),
}
