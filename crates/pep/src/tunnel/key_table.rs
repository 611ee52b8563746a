//! What a gateway's workers share about each terminal key: the replay state of its initiations
//! and the key's sessions on every worker, so `max_sessions_per_key` and replay protection hold
//! for the daemon, not per worker. A gateway of N workers steers each datagram to a worker by its
//! source port (`docs/scaling.md`, "Workers"), so two terminals sharing a key — or one initiation
//! replayed from another port — usually reach different workers, each with its own [`Responder`].
//!
//! The table is touched only on handshakes and when a session ends (both rare, and handshakes are
//! rate-limited); the data path reads one atomic flag per datagram ([`Worker::has_evictions`]).
//! A session another worker must drop (its key went over the limit there) is queued for that
//! worker and flagged; the worker drops it before it opens its next datagram.
//!
//! [`Responder`]: super::Responder

use crate::keys::PublicKey;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Sessions one address of a key may hold: the current one and the one before it (datagrams in
/// flight across a rekey still open).
pub(crate) const SESSIONS_PER_ADDRESS: usize = 2;

/// One session of a key: the worker that holds it, its index there, the address of its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub worker: usize,
    pub index: u32,
    pub addr: SocketAddr,
    /// A data datagram arrived on it (the terminal has it: its handshake's answer arrived).
    pub confirmed: bool,
}

/// How many of a key's latest accepted initiations the table remembers: more than a terminal's
/// workers usually start at once, so each worker's first handshake counts even when a
/// sibling's newer one got there first. An initiation not newer than the oldest remembered one
/// (with all of them remembered) is refused.
pub(crate) const RECENT_INITIATIONS: usize = 64;

/// How far (in the initiation timestamps' nanoseconds) an initiation may be older than the
/// newest accepted from its key and still be accepted, if it comes from an address that has no
/// newer one accepted and is not itself one accepted: a terminal's workers (one key, one
/// address each) handshake at once and their initiations reach the gateway, and its workers'
/// shared table, in any order.
pub(crate) const REORDER_NS: u64 = 10_000_000_000;

/// One accepted initiation of a key: its timestamp, the address it came from and its initiator
/// index (the index is authenticated: the timestamp and index identify the initiation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Accepted {
    timestamp: u64,
    addr: SocketAddr,
    sender: u32,
}

#[derive(Default)]
struct KeyState {
    /// The key's [`RECENT_INITIATIONS`] latest accepted initiations (by timestamp, oldest
    /// first), over all workers.
    accepted: VecDeque<Accepted>,
    /// The key's sessions on all workers, oldest first.
    sessions: VecDeque<Held>,
}

impl KeyState {
    /// What the key's accepted initiations say of one with `timestamp` from `addr` with
    /// initiator index `sender`.
    fn freshness(&self, timestamp: u64, addr: SocketAddr, sender: u32) -> Freshness {
        let Some(newest) = self.accepted.back().map(|a| a.timestamp) else {
            return Freshness::Fresh;
        };
        // The same initiation (timestamp and index): from its own address, and its tunnel's
        // latest, its other suite (a terminal offers one handshake in each of its suites with
        // the same index and timestamp); from elsewhere, or superseded, a replay.
        if let Some(a) = self
            .accepted
            .iter()
            .find(|a| a.timestamp == timestamp && a.sender == sender)
        {
            let superseded = self
                .accepted
                .iter()
                .any(|b| b.addr == addr && b.timestamp > timestamp);
            return match a.addr == addr && !superseded {
                true => Freshness::OtherSuite,
                false => Freshness::Replay,
            };
        }
        if timestamp > newest {
            return Freshness::Fresh;
        }
        // Older than the newest: another tunnel of the key (a sibling worker) may have got
        // there first. Refused when its own address has a newer one accepted (its clock went
        // back, or a stale initiation of that tunnel), when too much older, or when older than
        // every remembered one.
        let oldest = self.accepted.front().map_or(0, |a| a.timestamp);
        let forgotten = self.accepted.len() >= RECENT_INITIATIONS && timestamp <= oldest;
        let own_newer = self
            .accepted
            .iter()
            .any(|a| a.addr == addr && a.timestamp >= timestamp);
        if forgotten || own_newer || newest - timestamp > REORDER_NS {
            Freshness::Replay
        } else {
            Freshness::Fresh
        }
    }

    /// Remembers an accepted initiation (its timestamp sorted in; the oldest forgotten beyond
    /// [`RECENT_INITIATIONS`]).
    fn remember(&mut self, a: Accepted) {
        let at = self
            .accepted
            .iter()
            .rposition(|b| b.timestamp <= a.timestamp)
            .map_or(0, |i| i + 1);
        self.accepted.insert(at, a);
        while self.accepted.len() > RECENT_INITIATIONS {
            self.accepted.pop_front();
        }
    }
}

#[derive(Default)]
struct Inner {
    keys: HashMap<PublicKey, KeyState>,
    /// Per worker: sessions other workers evicted, to be dropped by it.
    evicted: Vec<Vec<u32>>,
    flags: Vec<Arc<AtomicBool>>,
}

/// The table shared by the responders of one gateway ([`super::Responder::join`]).
#[derive(Default)]
pub(crate) struct KeyTable {
    inner: Mutex<Inner>,
}

impl KeyTable {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(KeyTable::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A worker that panicked holding the lock left the table consistent (every change is
        // one push or retain), so its poison is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new worker's handle on the table.
    pub(crate) fn join(self: &Arc<Self>) -> Worker {
        let mut inner = self.lock();
        let flag = Arc::new(AtomicBool::new(false));
        inner.flags.push(Arc::clone(&flag));
        inner.evicted.push(Vec::new());
        Worker {
            table: Arc::clone(self),
            id: inner.flags.len() - 1,
            flag,
        }
    }
}

/// What a new session of a key did to the key's other sessions.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// Sessions dropped for `max_sessions_per_key`, oldest first, with where they were.
    pub evicted: Vec<Held>,
    /// Addresses of the key's other sessions that remain, from addresses other than the new one's.
    pub other_addrs: Vec<SocketAddr>,
}

/// The addresses other than `addr` that `sessions` come from, each once, oldest session's first.
fn other_addresses(sessions: &VecDeque<Held>, addr: SocketAddr) -> Vec<SocketAddr> {
    let mut others: Vec<SocketAddr> = Vec::new();
    for h in sessions {
        if h.addr != addr && !others.contains(&h.addr) {
            others.push(h.addr);
        }
    }
    others
}

/// What the key's replay state says of an initiation ([`Worker::check_initiation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Newer than every initiation accepted from the key, or a little older from another of its
    /// tunnels ([`REORDER_NS`]).
    Fresh,
    /// The latest handshake accepted from an address, offered again in another suite (same
    /// address, initiator index and timestamp): not a replay, but no second session either.
    OtherSuite,
    /// An accepted initiation from another address, or one older than its address's last
    /// accepted (or too old): a replay, or the terminal's clock went back.
    Replay,
}

/// One worker's handle on the [`KeyTable`].
pub(crate) struct Worker {
    table: Arc<KeyTable>,
    id: usize,
    flag: Arc<AtomicBool>,
}

impl Worker {
    pub(crate) fn id(&self) -> usize {
        self.id
    }

    /// Whether an initiation of `key` with `timestamp`, from `addr` with initiator index
    /// `sender`, may start a session: not one accepted (the timestamp and index say), and newer
    /// than every one accepted from the key — or from another tunnel of the key (address) with
    /// none newer, at most [`REORDER_NS`] older than the newest ([`Freshness`]).
    pub(crate) fn check_initiation(
        &self,
        key: &PublicKey,
        timestamp: u64,
        addr: SocketAddr,
        sender: u32,
    ) -> Freshness {
        let inner = self.table.lock();
        inner.keys.get(key).map_or(Freshness::Fresh, |state| {
            state.freshness(timestamp, addr, sender)
        })
    }

    /// Records a new session of `key` from `addr` on this worker. A key's sessions from one
    /// address are one tunnel (a terminal, or one of its workers) and keep at most
    /// [`SESSIONS_PER_ADDRESS`]: beyond that its own sessions go, unconfirmed ones first (a
    /// handshake whose answer was lost), then the oldest. A key holds sessions from at most
    /// `limit` addresses: beyond that every session of the address heard from longest ago goes
    /// (several terminals sharing one key evict each other). Evicted sessions of other workers
    /// are queued for them; this worker's are returned for the caller to remove. `Err` (nothing
    /// recorded) when the initiation is no longer fresh ([`Worker::check_initiation`]): a
    /// concurrent handshake of the key on another worker has meanwhile accepted it, or a newer
    /// one from its address.
    pub(crate) fn admit(
        &self,
        key: PublicKey,
        timestamp: u64,
        index: u32,
        (addr, sender): (SocketAddr, u32),
        limit: usize,
    ) -> Result<Admitted, ()> {
        let mut inner = self.table.lock();
        let state = inner.keys.entry(key).or_default();
        if state.freshness(timestamp, addr, sender) != Freshness::Fresh {
            return Err(());
        }
        state.remember(Accepted {
            timestamp,
            addr,
            sender,
        });
        let mut evicted = Vec::new();
        // The tunnel's own sessions: keep room for the new one.
        while state.sessions.iter().filter(|h| h.addr == addr).count() >= SESSIONS_PER_ADDRESS {
            let own = |h: &&Held| h.addr == addr;
            let pos = state
                .sessions
                .iter()
                .position(|h| own(&h) && !h.confirmed)
                .or_else(|| state.sessions.iter().position(|h| own(&h)));
            match pos.and_then(|p| state.sessions.remove(p)) {
                Some(h) => evicted.push(h),
                None => break,
            }
        }
        // Other tunnels of the key: at most `limit` addresses with this one.
        loop {
            let others = other_addresses(&state.sessions, addr);
            if others.len() < limit.max(1) {
                break;
            }
            // The oldest session's address first (sessions are kept oldest first).
            let Some(&gone) = others.first() else {
                break;
            };
            let (out, kept): (VecDeque<Held>, VecDeque<Held>) =
                state.sessions.drain(..).partition(|h| h.addr == gone);
            state.sessions = kept;
            evicted.extend(out);
        }
        let other_addrs = other_addresses(&state.sessions, addr);
        state.sessions.push_back(Held {
            worker: self.id,
            index,
            addr,
            confirmed: false,
        });
        for h in &evicted {
            if h.worker != self.id {
                if let Some(q) = inner.evicted.get_mut(h.worker) {
                    q.push(h.index);
                }
                if let Some(f) = inner.flags.get(h.worker) {
                    f.store(true, Ordering::Release);
                }
            }
        }
        Ok(Admitted {
            evicted,
            other_addrs,
        })
    }

    /// Marks a session of this worker confirmed (its first data datagram arrived).
    pub(crate) fn confirm(&self, key: &PublicKey, index: u32) {
        let mut inner = self.table.lock();
        if let Some(h) = inner.keys.get_mut(key).and_then(|state| {
            state
                .sessions
                .iter_mut()
                .find(|h| h.worker == self.id && h.index == index)
        }) {
            h.confirmed = true;
        }
    }

    /// Forgets a session of this worker (it ended here: expired, superseded, revoked, evicted).
    pub(crate) fn forget(&self, key: &PublicKey, index: u32) {
        let mut inner = self.table.lock();
        if let Some(state) = inner.keys.get_mut(key) {
            state
                .sessions
                .retain(|h| !(h.worker == self.id && h.index == index));
        }
    }

    /// Whether other workers evicted sessions of this one (one atomic load: the data path's cost).
    pub(crate) fn has_evictions(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Takes the sessions other workers evicted from this one.
    pub(crate) fn take_evictions(&self) -> Vec<u32> {
        let mut inner = self.table.lock();
        self.flag.store(false, Ordering::Release);
        inner
            .evicted
            .get_mut(self.id)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> PublicKey {
        PublicKey::from_slice(&[b; 32]).unwrap()
    }
    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_key_over_its_limit_loses_its_oldest_session_on_whichever_worker_holds_it() {
        let table = KeyTable::new();
        let (w0, w1) = (table.join(), table.join());
        let k = key(1);
        assert!(w0
            .admit(k, 1, 10, (at(1), 7), 2)
            .unwrap()
            .evicted
            .is_empty());
        let second = w1.admit(k, 2, 20, (at(2), 7), 2).unwrap();
        assert_eq!(second.other_addrs, vec![at(1)]);
        assert!(!w0.has_evictions());
        // A third address: the oldest address's sessions go, wherever they are.
        let third = w1.admit(k, 3, 21, (at(3), 7), 2).unwrap();
        assert_eq!(
            third.evicted,
            vec![Held {
                worker: 0,
                index: 10,
                addr: at(1),
                confirmed: false,
            }]
        );
        assert!(w0.has_evictions() && !w1.has_evictions());
        assert_eq!(w0.take_evictions(), vec![10]);
        assert!(!w0.has_evictions());
        assert!(w0.take_evictions().is_empty());
    }

    #[test]
    fn a_tunnel_keeps_two_sessions_losing_unconfirmed_ones_first_and_other_tunnels_stay() {
        let table = KeyTable::new();
        let (w0, w1) = (table.join(), table.join());
        let k = key(2);
        // Two tunnels of one key (a terminal's two workers).
        w0.admit(k, 1, 10, (at(1), 7), 2).unwrap();
        w1.admit(k, 2, 20, (at(2), 7), 2).unwrap();
        w1.confirm(&k, 20);
        // The tunnel at port 2 rekeys: nothing goes (the current and the next session).
        assert!(w1
            .admit(k, 3, 21, (at(2), 7), 2)
            .unwrap()
            .evicted
            .is_empty());
        // Its answer was lost and it tries again: the unconfirmed 21 goes, the live 20 stays.
        let again = w1.admit(k, 4, 22, (at(2), 7), 2).unwrap();
        assert_eq!(again.evicted.len(), 1);
        assert_eq!(again.evicted[0].index, 21);
        // With both confirmed, the oldest of the tunnel goes; the tunnel at port 1 never does.
        w1.confirm(&k, 22);
        let next = w1.admit(k, 5, 23, (at(2), 7), 2).unwrap();
        assert_eq!(next.evicted.len(), 1);
        assert_eq!(next.evicted[0].index, 20);
        assert!(!w0.has_evictions());
    }

    #[test]
    fn replays_are_refused_across_workers_and_forgotten_sessions_free_their_place() {
        let table = KeyTable::new();
        let (w0, w1) = (table.join(), table.join());
        let k = key(3);
        w0.admit(k, 5, 10, (at(1), 7), 2).unwrap();
        let check = |w: &Worker, t, port, sender| w.check_initiation(&k, t, at(port), sender);
        assert_eq!(check(&w1, 5, 2, 7), Freshness::Replay);
        assert_eq!(check(&w1, 4, 1, 7), Freshness::Replay);
        assert_eq!(check(&w1, 6, 2, 7), Freshness::Fresh);
        // The accepted handshake offered again (its other suite): same address, index and
        // timestamp, on either worker. Another index or address at that timestamp is a replay.
        assert_eq!(check(&w0, 5, 1, 7), Freshness::OtherSuite);
        assert_eq!(check(&w1, 5, 1, 7), Freshness::OtherSuite);
        assert_eq!(check(&w1, 5, 1, 8), Freshness::Replay);
        assert_eq!(check(&w1, 5, 3, 7), Freshness::Replay);
        assert!(w1.admit(k, 5, 20, (at(2), 7), 2).is_err());
        w0.forget(&k, 10);
        let next = w1.admit(k, 6, 20, (at(2), 7), 1).unwrap();
        assert!(next.evicted.is_empty() && next.other_addrs.is_empty());
        // Another key is independent.
        assert_eq!(w0.check_initiation(&key(4), 1, at(1), 7), Freshness::Fresh);
    }

    #[test]
    fn a_keys_tunnels_handshake_in_any_order_and_replays_stay_refused() {
        // A terminal's two workers (ports 1 and 2, indices 7 and 9) start together: their
        // timestamps may be equal, and the older may reach the table second.
        let table = KeyTable::new();
        let (w0, w1) = (table.join(), table.join());
        let k = key(5);
        let t = 1_700_000_000_000_000_000u64;
        w1.admit(k, t + 40, 20, (at(2), 9), 2).unwrap();
        assert_eq!(w0.check_initiation(&k, t, at(1), 7), Freshness::Fresh);
        w0.admit(k, t, 10, (at(1), 7), 2).unwrap();
        // Equal timestamps of two tunnels (another index, another address) are two handshakes.
        let k2 = key(6);
        w0.admit(k2, t, 10, (at(1), 7), 2).unwrap();
        w1.admit(k2, t, 20, (at(2), 9), 2).unwrap();
        // Replays stay refused: an accepted initiation from anywhere else, an initiation of a
        // tunnel older than its last accepted, one much older than the key's newest.
        let check = |t, port, sender| w1.check_initiation(&k, t, at(port), sender);
        assert_eq!(check(t, 3, 7), Freshness::Replay);
        assert_eq!(check(t + 40, 1, 9), Freshness::Replay);
        assert_eq!(check(t - 1, 1, 11), Freshness::Replay);
        assert_eq!(check(t + 40 - REORDER_NS - 1, 3, 13), Freshness::Replay);
        assert_eq!(check(t + 1, 3, 13), Freshness::Fresh);
        // The accepted handshake's other suite, from its own address: not a replay; once that
        // address has a newer one, a replay.
        assert_eq!(check(t, 1, 7), Freshness::OtherSuite);
        assert_eq!(check(t + 40, 2, 9), Freshness::OtherSuite);
        w0.admit(k, t + 50, 11, (at(1), 11), 2).unwrap();
        assert_eq!(check(t, 1, 7), Freshness::Replay);
        assert!(w1.admit(k, t, 21, (at(3), 7), 2).is_err());
        // With RECENT_INITIATIONS remembered, one older than all of them is refused.
        let k3 = key(7);
        for i in 0..RECENT_INITIATIONS as u64 {
            w0.admit(k3, t + 10 * (i + 1), 1, (at(100 + i as u16), 7), usize::MAX)
                .unwrap();
        }
        assert_eq!(
            w0.check_initiation(&k3, t + 10, at(99), 9),
            Freshness::Replay
        );
        assert_eq!(
            w0.check_initiation(&k3, t + 11, at(99), 9),
            Freshness::Fresh
        );
    }
}
