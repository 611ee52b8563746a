//! The hop-wide read-ahead bound: how many bytes the relays of one daemon may have read from
//! their TCP connections that STP has not yet sent for the first time (in the relay buffer, in
//! the worker's queue, or in STP's send buffer unsent). Bytes in flight (sent, awaiting their
//! acknowledgement) are outside it: a satellite hop keeps its window full whatever the bound.
//!
//! The bound is shared by every worker and every connection of the hop, fairly among the
//! connections that have something to send (`docs/scaling.md`, "The read-ahead bound"). With
//! `n` such connections (those holding unsent bytes, and those whose socket has bytes and that
//! wait for room) a connection holding `h` may take `c` more bytes when
//!
//! - `h + c ≤ max(bound / n, CHUNK)`: nobody holds more than its fair share (or one chunk)
//!   while another has bytes to send, so a connection whose peer stopped reading (its STP
//!   window closed) pins at most its share and the others keep theirs; and
//! - `total + c ≤ bound`, or `h + c ≤ CHUNK`: the sum stays within the bound except for at most
//!   one chunk per connection, which every connection may always hold so that none waits on
//!   another's bytes.
//!
//! So at any time `total ≤ bound + Σ min(hᵢ, CHUNK)`: every grant either keeps the total within
//! the bound, or is one within the connection's first chunk.

use crate::metrics::Metrics;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// A connection may always hold this much unsent (the relay's largest read, `splice`'s
/// `READ_BUF`).
pub(crate) const CHUNK: u64 = 64 * 1024;
/// The smallest grant worth a read while a connection waits for more (the relay's smallest
/// read buffer).
const MIN_GRANT: u64 = 4 * 1024;
/// The default bound's floor. One flow needs far less (8 MiB is 11 ms of the loopback bench's
/// 6 Gbit/s), but 100 busy flows sharing 8 MiB hold 84 KiB each: their send queues run dry
/// between the relays' reads, and each time STP sends a POLL and gets a STAT (17,700-28,900 in
/// the bench's 100-flow run against 8,400-17,800 with 32 MiB), which cost the gateway 1.13-1.26
/// CPU s/GB against 1.10-1.17 (`docs/scaling.md`, "The read-ahead bound").
pub(crate) const READ_AHEAD_FLOOR_BYTES: u64 = 32 << 20;
/// The default bound's ceiling.
pub(crate) const READ_AHEAD_CEILING_BYTES: u64 = 256 << 20;
/// The default bound is this much of the hop's allocation (`send_rate_bps`), in ms.
pub(crate) const READ_AHEAD_RATE_MS: u64 = 20;

/// The default read-ahead bound of a hop sending at `send_rate_bps` (`None`: unshaped): 20 ms
/// of the rate, from 32 MiB to 256 MiB.
pub fn default_read_ahead_bytes(send_rate_bps: Option<u64>) -> u64 {
    let of_rate = send_rate_bps.map_or(0, |r| (r / 8).saturating_mul(READ_AHEAD_RATE_MS) / 1000);
    of_rate.clamp(READ_AHEAD_FLOOR_BYTES, READ_AHEAD_CEILING_BYTES)
}

#[derive(Default)]
struct State {
    /// Bytes held by all connections.
    total: u64,
    /// Connections holding bytes or waiting for room.
    active: u64,
}

/// One hop's read-ahead bound, shared by its workers and its connections' [`Slot`]s.
pub(crate) struct ReadAhead {
    bound: u64,
    state: Mutex<State>,
    /// Notified whenever bytes are released.
    room: Notify,
    metrics: Option<Arc<Metrics>>,
}

impl ReadAhead {
    /// A bound of `bound` bytes; its use and waits are reported to `metrics`
    /// (`read_ahead_*`).
    pub(crate) fn new(bound: u64, metrics: Option<Arc<Metrics>>) -> Arc<ReadAhead> {
        if let Some(m) = &metrics {
            m.read_ahead_bound_bytes
                .set(i64::try_from(bound).unwrap_or(i64::MAX));
        }
        Arc::new(ReadAhead {
            bound: bound.max(CHUNK),
            state: Mutex::new(State::default()),
            room: Notify::new(),
            metrics,
        })
    }

    /// A new connection's share of the bound.
    pub(crate) fn slot(self: &Arc<Self>) -> Arc<Slot> {
        Arc::new(Slot {
            ra: Arc::clone(self),
            held: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            counted: AtomicBool::new(false),
        })
    }

    /// Bytes held by all connections now.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn report(&self, st: &State) {
        if let Some(m) = &self.metrics {
            m.read_ahead_bytes
                .set(i64::try_from(st.total).unwrap_or(i64::MAX));
        }
    }
}

/// One connection's part of a [`ReadAhead`]: the relay takes bytes before it reads its TCP
/// socket ([`Slot::acquire`]), the hop releases them once STP has sent them
/// ([`Slot::release`]). Dropping the last handle releases what is still held.
pub(crate) struct Slot {
    ra: Arc<ReadAhead>,
    // Changed only under `ra.state`'s lock.
    held: AtomicU64,
    waiting: AtomicBool,
    /// Counted in `State::active` (holding, or waiting).
    counted: AtomicBool,
}

impl Slot {
    /// Waits until this connection may hold more, then takes up to `want` bytes (at least
    /// `min(want, 4 KiB)`); returns how many. Give back what the read did not use with
    /// [`Slot::release`].
    pub(crate) async fn acquire(&self, want: u64) -> u64 {
        let mut waited = false;
        let _guard = WaitGuard(self);
        loop {
            let notified = self.ra.room.notified();
            tokio::pin!(notified);
            // Registered before the check, so a release between the check and the wait wakes it.
            notified.as_mut().enable();
            {
                let mut st = self.ra.lock();
                let grant = self.grant(&st, want);
                if grant > 0 {
                    self.held.fetch_add(grant, Ordering::Relaxed);
                    st.total += grant;
                    self.waiting.store(false, Ordering::Relaxed);
                    self.recount(&mut st);
                    self.ra.report(&st);
                    return grant;
                }
                self.waiting.store(true, Ordering::Relaxed);
                self.recount(&mut st);
            }
            if !waited {
                waited = true;
                if let Some(m) = &self.ra.metrics {
                    m.read_ahead_waits.inc();
                }
            }
            notified.await;
        }
    }

    /// What this connection may take now of `want` (0: nothing worth a read).
    fn grant(&self, st: &State, want: u64) -> u64 {
        let bound = self.ra.bound;
        let h = self.held.load(Ordering::Relaxed);
        let n = st.active + u64::from(!self.counted.load(Ordering::Relaxed));
        let share = (bound / n.max(1)).max(CHUNK);
        let by_share = share.saturating_sub(h);
        let by_total = bound.saturating_sub(st.total).max(CHUNK.saturating_sub(h));
        let room = by_share.min(by_total);
        let grant = want.min(room);
        if grant == 0 || grant < want.min(MIN_GRANT) {
            0
        } else {
            grant
        }
    }

    /// Returns `n` bytes (sent by STP, or not read after all).
    pub(crate) fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        {
            let mut st = self.ra.lock();
            let h = self.held.load(Ordering::Relaxed);
            let n = n.min(h);
            self.held.store(h - n, Ordering::Relaxed);
            st.total -= n.min(st.total);
            self.recount(&mut st);
            self.ra.report(&st);
        }
        self.ra.room.notify_waiters();
    }

    /// Bytes this connection holds.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn recount(&self, st: &mut State) {
        let now = self.held.load(Ordering::Relaxed) > 0 || self.waiting.load(Ordering::Relaxed);
        let was = self.counted.swap(now, Ordering::Relaxed);
        match (was, now) {
            (false, true) => st.active += 1,
            (true, false) => st.active = st.active.saturating_sub(1),
            _ => {}
        }
    }
}

impl super::core::OnSent for Slot {
    fn on_sent(&self, bytes: u64) {
        self.release(bytes);
    }
}

/// Clears a slot's waiting mark however its wait ends (a cancelled relay included).
struct WaitGuard<'a>(&'a Slot);

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.0.waiting.load(Ordering::Relaxed) {
            let mut st = self.0.ra.lock();
            self.0.waiting.store(false, Ordering::Relaxed);
            self.0.recount(&mut st);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let h = self.held();
        self.release(h);
        let mut st = self.ra.lock();
        self.waiting.store(false, Ordering::Relaxed);
        self.recount(&mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn default_bound_from_the_rate() {
        assert_eq!(default_read_ahead_bytes(None), 32 << 20);
        // 50 Mb/s: 20 ms is 125 kB, under the floor.
        assert_eq!(default_read_ahead_bytes(Some(50_000_000)), 32 << 20);
        // 40 Gbit/s: 20 ms is 100 MB.
        assert_eq!(default_read_ahead_bytes(Some(40_000_000_000)), 100_000_000);
        assert_eq!(default_read_ahead_bytes(Some(u64::MAX)), 256 << 20);
    }

    #[tokio::test]
    async fn one_connection_takes_up_to_the_bound_then_waits() {
        let ra = ReadAhead::new(1 << 20, None);
        let a = ra.slot();
        let mut got = 0;
        while got < 1 << 20 {
            got += a.acquire(CHUNK).await;
        }
        assert_eq!(ra.total(), 1 << 20);
        // Full: the next acquire waits until bytes are released.
        let more = tokio::time::timeout(Duration::from_millis(50), a.acquire(CHUNK)).await;
        assert!(more.is_err(), "took past the bound");
        a.release(CHUNK);
        let more = tokio::time::timeout(Duration::from_millis(50), a.acquire(CHUNK)).await;
        assert_eq!(more.ok(), Some(CHUNK));
    }

    #[tokio::test]
    async fn a_stalled_holder_leaves_every_other_connection_a_chunk_and_shares_shrink() {
        let ra = ReadAhead::new(1 << 20, None);
        // `stalled` fills the whole bound while alone and never releases (its peer stopped
        // reading).
        let stalled = ra.slot();
        while stalled.held() < 1 << 20 {
            stalled.acquire(CHUNK).await;
        }
        // Another connection still gets one chunk at a time, at once.
        let b = ra.slot();
        let got = tokio::time::timeout(Duration::from_millis(50), b.acquire(CHUNK)).await;
        assert_eq!(got.ok(), Some(CHUNK));
        b.release(CHUNK);
        // With two holders, a third gets its chunk while the first may take no more.
        let c = ra.slot();
        assert_eq!(c.acquire(CHUNK).await, CHUNK);
        let more = tokio::time::timeout(Duration::from_millis(30), stalled.acquire(CHUNK)).await;
        assert!(more.is_err(), "a holder beyond its share took more");
        assert!(ra.total() <= (1 << 20) + 2 * CHUNK);
        drop(stalled);
        assert_eq!(ra.total(), CHUNK);
    }

    #[tokio::test]
    async fn shares_are_fair_among_connections_with_bytes_to_send() {
        let bound = 4 << 20;
        let ra = ReadAhead::new(bound, None);
        let slots: Vec<_> = (0..4).map(|_| ra.slot()).collect();
        // Each takes in turn until none can: every one ends at its share, 1 MiB.
        loop {
            let mut took = false;
            for s in &slots {
                if let Ok(n) =
                    tokio::time::timeout(Duration::from_millis(5), s.acquire(CHUNK)).await
                {
                    took |= n > 0;
                }
            }
            if !took {
                break;
            }
        }
        for s in &slots {
            assert_eq!(s.held(), 1 << 20);
        }
        assert_eq!(ra.total(), bound);
    }
}
