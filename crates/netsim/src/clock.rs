//! Virtual time and its units, the one clock every simulator module shares (kept apart from
//! `sim` so the modules `sim` drives can name time without depending back on it).

/// Virtual time, nanoseconds since the start of the run.
pub type Time = u64;

/// Nanoseconds per millisecond.
pub const MS: Time = 1_000_000;
/// Nanoseconds per second.
pub const SEC: Time = 1_000_000_000;
