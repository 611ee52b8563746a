//! Hash maps for keys no outsider chooses freely: numbers the daemon assigns itself (stream ids,
//! STP connection handles, tunnel session indexes) and the addresses of peers that completed a
//! handshake. They are looked up once or more per datagram, where std's SipHash cost 2.6 % of the
//! gateway's samples with 100 flows (`docs/scaling.md`); foldhash is several times cheaper and
//! still seeded at random per process. Keys a stranger picks (an unauthenticated datagram's
//! address, a public key in an initiation) keep std's hasher.

use std::collections::{HashMap, HashSet};

/// A [`HashMap`] with foldhash, for keys no outsider chooses freely (module documentation).
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A [`HashSet`] with foldhash, for keys no outsider chooses freely (module documentation).
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;
