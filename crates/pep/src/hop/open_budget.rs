//! The gateway's per-terminal budget of connection opens (a token bucket per tunnel session).

use std::collections::HashMap;
use stp::Instant;

/// Sustained rate of datagrams opening connections (carrying a BGN) a gateway takes from one
/// terminal session, per second, and the burst above it. A BGN rides on every datagram of a
/// connection's first round trip, so this admits some 170 new connections a second per
/// terminal, 500 in a burst — beyond a household's or a ship's browsing — while a terminal (or
/// a stolen key) opening connections as fast as it can costs the gateway a header check per
/// datagram, not a connection, a stream and a relay each (`satstp bench flood`: 39 % of a
/// download's goodput kept without this budget, 98 % with it).
pub(crate) const OPENS_PER_S: f64 = 500.0;
pub(crate) const OPENS_BURST: f64 = 1500.0;

/// The per-session token buckets behind [`OPENS_PER_S`].
#[derive(Default)]
pub(crate) struct OpenBudgets {
    buckets: HashMap<u32, (f64, Instant)>,
}

impl OpenBudgets {
    /// Takes one token from `session`'s bucket; false when it is empty.
    pub(crate) fn allow(&mut self, session: u32, now: Instant) -> bool {
        if self.buckets.len() > MAX_OPEN_BUDGETS && !self.buckets.contains_key(&session) {
            // Sessions come and go (restarts, failovers); start afresh rather than grow.
            self.buckets.clear();
        }
        let (tokens, at) = self.buckets.entry(session).or_insert((OPENS_BURST, now));
        *tokens = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * OPENS_PER_S)
            .min(OPENS_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Most sessions with an open budget remembered at once.
const MAX_OPEN_BUDGETS: usize = 8192;
