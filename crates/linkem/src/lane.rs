//! One emulated direction, the core both emulators drive: a [`linkmodel::Direction`], its seeded
//! generator, and the [`Schedule`] of datagrams waiting for their arrival time. The UDP relay and
//! the TUN forwarder only read datagrams, stamp them with their clock, call [`Lane::offer`], and
//! write what [`Lane::pop_due`] hands back; every decision is the link direction's. Time is
//! passed in, so the same core runs in virtual time in tests.

use crate::schedule::{Due, Schedule, DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES};
use linkmodel::{Direction, LinkConfig, LinkConfigError, LinkStats};
use rand_chacha::ChaCha8Rng;

/// One direction of an emulator.
#[derive(Debug)]
pub struct Lane {
    direction: Direction,
    rng: ChaCha8Rng,
    schedule: Schedule,
    dropped_schedule: u64,
}

impl Lane {
    /// A direction with `config`'s link and the given generator, and a schedule bounded by
    /// [`DEFAULT_MAX_ENTRIES`] and [`DEFAULT_MAX_BYTES`].
    pub fn new(config: LinkConfig, rng: ChaCha8Rng) -> Result<Self, LinkConfigError> {
        Ok(Lane {
            direction: Direction::new(config)?,
            rng,
            schedule: Schedule::new(DEFAULT_MAX_ENTRIES, DEFAULT_MAX_BYTES),
            dropped_schedule: 0,
        })
    }

    /// Offers a datagram received at `now_ns` (non-decreasing) and schedules what arrives.
    pub fn offer(&mut self, now_ns: u64, data: &[u8]) {
        let (_, deliveries) = self
            .direction
            .send(now_ns, data.len(), data.to_vec(), &mut self.rng);
        for d in deliveries {
            if self.schedule.push(d.at_ns, d.datagram).is_err() {
                self.dropped_schedule += 1;
            }
        }
    }

    /// The next datagram due at or before `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Due> {
        self.schedule.pop_due(now_ns)
    }

    /// When the next datagram is due.
    pub fn next_at(&self) -> Option<u64> {
        self.schedule.next_at()
    }

    /// Datagrams waiting, and their bytes.
    pub fn in_flight(&self) -> (u64, u64) {
        (self.schedule.len() as u64, self.schedule.bytes() as u64)
    }

    /// The link direction's counters.
    pub fn link_stats(&self) -> LinkStats {
        self.direction.stats()
    }

    /// Accepted by the link but dropped because the schedule was full.
    pub fn dropped_schedule(&self) -> u64 {
        self.dropped_schedule
    }
}
