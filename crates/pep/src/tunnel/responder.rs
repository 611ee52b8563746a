//! The gateway's side of the tunnel: answers initiations from allowed terminal keys and holds
//! the sessions of many terminals behind one socket, found by index.

use super::key_table::{Freshness, KeyTable, Worker};
use super::log_limit::LogLimiter;
use super::session::Session;
use super::wire::{emit_header, Packet, RESPONSE_LEN};
use super::{noise_params_for, prologue, Cipher, CipherChoice, Counters, Error, Opened};
use crate::fast_hash::FastMap;
use crate::keys::{PrivateKey, PublicKey};
use rand_core::RngCore;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use stp::Instant;

/// The responder's limits. Defaults in the field docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Sessions in total (default 4096). Initiations beyond it are rejected and counted.
    pub max_sessions: usize,
    /// Source addresses (tunnels) a terminal key may hold sessions from at once, over all of a
    /// gateway's workers (default 2: a terminal and its NAT rebinding, or a terminal's two
    /// workers). A handshake from one more address drops every session of the address heard
    /// from longest ago, logged as a likely cloned key. Each address keeps at most two sessions
    /// (the current one and the one before, so datagrams in flight across a rekey still open).
    pub max_sessions_per_key: usize,
    /// Sustained rate of handshakes given Diffie–Hellman work, per second (default 200).
    pub handshakes_per_second: u32,
    /// Handshakes allowed in a burst above that rate (default 100).
    pub handshake_burst: u32,
    /// After a rekey, how long the replaced session of a terminal still opens datagrams once
    /// the new one carried its first (default 10 000 ms); then it is erased, keys zeroized.
    pub rekey_overlap_ms: u64,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            max_sessions: 4096,
            max_sessions_per_key: 2,
            handshakes_per_second: 200,
            handshake_burst: 100,
            rekey_overlap_ms: 10_000,
        }
    }
}

impl ResponderConfig {
    /// Rejects values that would make the responder useless, naming the field.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.max_sessions == 0 {
            return Err("max_sessions must be at least 1".into());
        }
        if self.max_sessions_per_key == 0 {
            return Err("max_sessions_per_key must be at least 1".into());
        }
        if self.handshake_burst == 0 {
            return Err("handshake_burst must be at least 1".into());
        }
        Ok(())
    }
}

/// What the responder remembers about an allowed terminal key.
#[derive(Default)]
struct Peer {
    /// The last accepted initiation, its response and session: answers retransmissions.
    last_initiation: Option<(Vec<u8>, Vec<u8>, u32)>,
    /// This key's sessions on this responder by local index, oldest first (all of its
    /// workers': [`KeyTable`]).
    sessions: VecDeque<u32>,
}

struct Entry {
    session: Session,
    peer: PublicKey,
    /// Where the last authenticated datagram of this session came from.
    addr: SocketAddr,
    last_rx: Instant,
    /// Creation order among all sessions: a later session of a key supersedes earlier ones.
    seq: u64,
    /// Whether a data datagram arrived on it (the terminal has the session).
    confirmed: bool,
    /// When a later session of the same key was confirmed: erased `rekey_overlap_ms` after.
    superseded_at: Option<Instant>,
    /// When its key was removed from the allow-list: from then on it opens nothing, and it
    /// seals only for [`REVOKED_LINGER`] (the resets of its connections), then it is erased.
    revoked_at: Option<Instant>,
}

/// How long a revoked terminal's session still seals (so the resets of its connections reach
/// it) before it is erased, keys and all.
pub(crate) const REVOKED_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Token bucket in milli-tokens, refilled from the driver's `now`.
struct Bucket {
    milli_tokens: u64,
    last: Option<Instant>,
}

/// The gateway's tunnel endpoint. See the module documentation.
pub struct Responder {
    local: PrivateKey,
    /// During a key changeover: a second static key initiations may be addressed to.
    next: Option<PrivateKey>,
    config: ResponderConfig,
    peers: HashMap<PublicKey, Peer>,
    /// Keyed by the index this gateway drew for each session.
    sessions: FastMap<u32, Entry>,
    /// Only addresses a datagram authenticated from (a completed handshake or a session's data).
    by_addr: FastMap<SocketAddr, u32>,
    /// Ephemeral key of each peer's last accepted initiation -> that peer (at most one per peer).
    initiations: HashMap<[u8; 32], PublicKey>,
    bucket: Bucket,
    rng: Box<dyn RngCore + Send>,
    counters: Counters,
    /// Random at start: sent in every response, so terminals tell a restarted gateway.
    instance: u64,
    /// Wall-clock ns since the Unix epoch at `now` = 0: the clock sent in responses.
    wall_clock_at_zero_ns: u64,
    /// The key of the last initiation refused as `UnknownKey` (for the driver's log).
    rejected_key: Option<PublicKey>,
    /// Evictions of a key's session for `max_sessions_per_key`: logged once a minute per key.
    eviction_log: LogLimiter<PublicKey>,
    /// Keys with sessions from several addresses: logged once in ten minutes per key.
    addresses_log: LogLimiter<PublicKey>,
    /// The replay state and session list of every key, shared with the gateway's other workers.
    keys: Worker,
    /// The next session's `seq`.
    next_seq: u64,
    /// The suites initiations may use (`tunnel_cipher`); others are dropped as malformed.
    cipher: CipherChoice,
}

impl Responder {
    /// A responder with static key `local`, serving only the terminal keys in `allowed`.
    /// `rng` picks session indices.
    pub fn new(
        local: PrivateKey,
        allowed: impl IntoIterator<Item = PublicKey>,
        config: ResponderConfig,
        rng: Box<dyn RngCore + Send>,
    ) -> Result<Self, Error> {
        config.validate().map_err(Error::Config)?;
        let burst = u64::from(config.handshake_burst) * 1000;
        let mut rng = rng;
        let instance = rng.next_u64();
        Ok(Responder {
            instance,
            wall_clock_at_zero_ns: 0,
            rejected_key: None,
            eviction_log: LogLimiter::new(std::time::Duration::from_secs(60)),
            addresses_log: LogLimiter::new(std::time::Duration::from_secs(600)),
            keys: KeyTable::new().join(),
            local,
            next: None,
            peers: allowed.into_iter().map(|k| (k, Peer::default())).collect(),
            sessions: FastMap::default(),
            by_addr: FastMap::default(),
            initiations: HashMap::new(),
            bucket: Bucket {
                milli_tokens: burst,
                last: None,
            },
            config,
            rng,
            counters: Counters::default(),
            next_seq: 0,
            cipher: CipherChoice::Auto,
        })
    }

    /// Makes this responder one of a gateway's workers sharing `table`: replay protection and
    /// `max_sessions_per_key` then hold across all responders that joined it. Call before the
    /// first datagram (sessions made earlier stay outside the table).
    pub(crate) fn join(&mut self, table: &Arc<KeyTable>) {
        self.keys = table.join();
    }

    /// Live sessions by suite ([`super::Cipher::index`]), a rekey's superseded session and
    /// revoked ones not counted: one per terminal tunnel.
    pub(crate) fn sessions_by_cipher(&self) -> [u64; 2] {
        let mut n = [0; 2];
        for e in self.sessions.values() {
            if e.superseded_at.is_none() && e.revoked_at.is_none() {
                if let Some(c) = n.get_mut(e.session.cipher().index()) {
                    *c += 1;
                }
            }
        }
        n
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Key rotation: also accepts initiations addressed to `next` (a terminal that already
    /// knows the gateway's new public key), besides those to the key it was made with. An
    /// initiation for `next` costs a second Diffie–Hellman try (es, ss) after the first key's
    /// failed, within the same handshake token. `None` ends the changeover. `docs/gateway.md`,
    /// "Rotating the gateway's key".
    pub(crate) fn set_next_key(&mut self, next: Option<PrivateKey>) {
        self.next = next;
    }

    /// Ends a changeover: the next key becomes the only one (initiations to the old key then
    /// fail authentication). Live sessions are kept whichever key they were made with: their
    /// keys do not depend on the static key any more. False without a next key.
    #[cfg(test)]
    pub(crate) fn promote_next_key(&mut self) -> bool {
        match self.next.take() {
            Some(next) => {
                self.local = next;
                true
            }
            None => false,
        }
    }

    /// Replaces the static keys (a reload of the gateway's key files): initiations are
    /// answered with `local` from now on, and also with `next` during a changeover (`None`:
    /// none). Live sessions are kept whichever key they were made with; so are the replay
    /// state and the answer to a retransmitted initiation.
    pub(crate) fn set_keys(&mut self, local: PrivateKey, next: Option<PrivateKey>) {
        self.local = local;
        self.next = next;
    }

    /// The public keys initiations may be addressed to: the current one, then the next one
    /// during a changeover (a key whose public half cannot be computed is left out).
    pub(crate) fn public_keys(&self) -> Vec<PublicKey> {
        std::iter::once(&self.local)
            .chain(self.next.as_ref())
            .filter_map(|k| k.public_key().ok())
            .collect()
    }

    /// The suites initiations may use from now on (`tunnel_cipher`; default
    /// [`CipherChoice::Auto`]). An initiation in another is dropped and counted as malformed,
    /// as a gateway of an older version drops it; the terminal then offers its other suite.
    pub(crate) fn set_cipher(&mut self, choice: CipherChoice) {
        self.cipher = choice;
    }

    /// Sets the clock sent in responses: wall-clock ns since the Unix epoch at `now` = 0.
    pub(crate) fn set_wall_clock(&mut self, at_zero_ns: u64) {
        self.wall_clock_at_zero_ns = at_zero_ns;
    }

    /// The key of the last initiation refused because it is not on the allow-list.
    pub(crate) fn rejected_key(&self) -> Option<PublicKey> {
        self.rejected_key
    }

    /// Serves the terminal keys in `allowed` from now on (a reloaded allow-list): keys kept
    /// keep their sessions and replay state. The sessions of keys no longer allowed are revoked
    /// at once: nothing they carry opens any more (the terminal gets the unknown-session notice
    /// and its new handshakes are refused as `UnknownKey`); they still seal for
    /// [`REVOKED_LINGER`], so the driver can send the resets of their connections
    /// ([`Self::session_revoked`]), and [`Self::expire_revoked`] then erases them. Returns the
    /// keys added and removed.
    pub(crate) fn set_allowed(
        &mut self,
        now: Instant,
        allowed: impl IntoIterator<Item = PublicKey>,
    ) -> (Vec<PublicKey>, Vec<PublicKey>) {
        let new: std::collections::HashSet<PublicKey> = allowed.into_iter().collect();
        let removed: Vec<PublicKey> = self
            .peers
            .keys()
            .filter(|k| !new.contains(k))
            .copied()
            .collect();
        let added: Vec<PublicKey> = new
            .iter()
            .filter(|k| !self.peers.contains_key(k))
            .copied()
            .collect();
        for key in &removed {
            let sessions: Vec<u32> = self
                .peers
                .get(key)
                .map(|p| p.sessions.iter().copied().collect())
                .unwrap_or_default();
            for s in sessions {
                if let Some(e) = self.sessions.get_mut(&s) {
                    e.revoked_at = Some(now);
                }
            }
            self.peers.remove(key);
            self.initiations.retain(|_, k| k != key);
        }
        for key in &added {
            self.peers.insert(*key, Peer::default());
        }
        (added, removed)
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// The terminal key a session belongs to.
    pub(crate) fn session_peer(&self, session: u32) -> Option<&PublicKey> {
        self.sessions.get(&session).map(|e| &e.peer)
    }

    /// The session whose last authenticated datagram came from `addr`, if any.
    pub fn session_for_addr(&self, addr: SocketAddr) -> Option<u32> {
        self.by_addr.get(&addr).copied()
    }

    /// Seals an STP datagram for a session into `out` (cleared first).
    pub fn seal(
        &mut self,
        session: u32,
        stp_datagram: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let entry = self
            .sessions
            .get_mut(&session)
            .ok_or(Error::NotEstablished)?;
        entry.session.seal(stp_datagram, out)?;
        self.counters.data_sealed += 1;
        Ok(())
    }

    /// Seals an STP datagram for the session last heard from `addr` (the destination
    /// `stp::Endpoint::poll_transmit` names when the driver hands it the UDP source addresses)
    /// into `out` (cleared first).
    #[cfg(test)]
    pub(crate) fn seal_to(
        &mut self,
        addr: SocketAddr,
        stp_datagram: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        out.clear();
        out.extend_from_slice(&[0; super::wire::DATA_HEADER_LEN]);
        out.extend_from_slice(stp_datagram);
        self.seal_to_in_place(addr, out, 0, false)
    }

    /// As [`Self::seal_to`], sealing in place the datagram at `out[start + 13..]` behind the
    /// header's room ([`Session::seal_in_place`]). With `stp` it is an STP datagram emitted
    /// without its checksum: the checksum is filled first unless the session's terminal said it
    /// does not verify it.
    pub(crate) fn seal_to_in_place(
        &mut self,
        addr: SocketAddr,
        out: &mut Vec<u8>,
        start: usize,
        stp: bool,
    ) -> Result<(), Error> {
        let entry = self
            .session_for_addr(addr)
            .and_then(|session| self.sessions.get_mut(&session));
        let Some(entry) = entry else {
            out.truncate(start);
            return Err(Error::NotEstablished);
        };
        if stp && entry.session.fill_stp_checksum_for_peer(out, start) {
            self.counters.stp_checksums_filled += 1;
        }
        entry.session.seal_in_place(out, start)?;
        self.counters.data_sealed += 1;
        Ok(())
    }

    /// Removes a session (and its address mapping).
    pub(crate) fn remove_session(&mut self, session: u32) {
        if let Some(e) = self.sessions.remove(&session) {
            self.keys.forget(&e.peer, session);
            if self.by_addr.get(&e.addr) == Some(&session) {
                self.by_addr.remove(&e.addr);
            }
            if let Some(p) = self.peers.get_mut(&e.peer) {
                p.sessions.retain(|&s| s != session);
                if p.last_initiation
                    .as_ref()
                    .is_some_and(|(_, _, s)| *s == session)
                {
                    if let Some((init, _, _)) = p.last_initiation.take() {
                        if let Some(e) = ephemeral_of(&init) {
                            self.initiations.remove(&e);
                        }
                    }
                }
            }
        }
    }

    /// Whether `session` belongs to a key removed from the allow-list (it opens nothing and is
    /// erased [`REVOKED_LINGER`] after the removal).
    #[cfg(test)]
    pub(crate) fn session_revoked(&self, session: u32) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|e| e.revoked_at.is_some())
    }

    /// When the next revoked session is due to be erased ([`Self::expire_revoked`]).
    pub(crate) fn next_revoked_expiry(&self) -> Option<Instant> {
        self.sessions
            .values()
            .filter_map(|e| e.revoked_at)
            .min()
            .map(|t| t + REVOKED_LINGER)
    }

    /// Erases the revoked sessions whose [`REVOKED_LINGER`] has passed; returns how many.
    pub(crate) fn expire_revoked(&mut self, now: Instant) -> usize {
        let done: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, e)| {
                e.revoked_at
                    .is_some_and(|t| now.saturating_duration_since(t) >= REVOKED_LINGER)
            })
            .map(|(&i, _)| i)
            .collect();
        for &i in &done {
            self.remove_session(i);
        }
        done.len()
    }

    /// Drops the sessions the gateway's other workers evicted from this one
    /// ([`KeyTable`]: their key went over `max_sessions_per_key` there).
    fn drop_evicted(&mut self) {
        if self.keys.has_evictions() {
            for i in self.keys.take_evictions() {
                self.remove_session(i);
            }
        }
    }

    /// Removes sessions that have received nothing for `idle_ms`; returns how many.
    pub(crate) fn expire_idle(&mut self, now: Instant, idle_ms: u64) -> usize {
        self.drop_evicted();
        let idle = std::time::Duration::from_millis(idle_ms);
        let stale: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.last_rx) >= idle)
            .map(|(&i, _)| i)
            .collect();
        for &i in &stale {
            self.remove_session(i);
        }
        stale.len()
    }

    /// Handles one datagram from `from`. `Opened::Reply`: send `out` back to `from`.
    /// `Opened::Data`: `out` holds the STP datagram. Errors are counted; a rejected datagram
    /// creates and changes no session state.
    pub fn open(
        &mut self,
        now: Instant,
        udp_payload: &[u8],
        from: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<Opened, Error> {
        out.clear();
        self.drop_evicted();
        let r = match Packet::parse(udp_payload) {
            None | Some(Packet::Response { .. }) | Some(Packet::UnknownSession { .. }) => {
                Err(Error::Malformed)
            }
            Some(Packet::Initiation { cipher, .. }) if !self.cipher.accepts(cipher) => {
                Err(Error::Malformed)
            }
            Some(Packet::Initiation {
                sender,
                noise,
                cipher,
            }) => self.initiation(now, udp_payload, (sender, cipher), noise, from, out),
            Some(Packet::Data {
                receiver,
                nonce,
                ciphertext,
            }) => {
                out.extend_from_slice(ciphertext);
                self.data(now, receiver, nonce, out, from).map(|n| {
                    out.truncate(n);
                    Opened::Data { session: receiver }
                })
            }
            Some(Packet::Capabilities {
                receiver,
                nonce,
                ciphertext,
            }) => {
                out.extend_from_slice(ciphertext);
                self.capabilities(now, receiver, nonce, out, from)
            }
        };
        if let Err(e) = &r {
            out.clear();
            self.counters.count(e);
        }
        r
    }

    /// As [`Self::open`] for a data datagram, decrypted where it lies: on `Opened::Data` the
    /// STP datagram is `d[range]`. Anything else is refused as malformed (the caller hands
    /// other datagrams to [`Self::open`]).
    pub(crate) fn open_in_place(
        &mut self,
        now: Instant,
        d: &mut [u8],
        from: SocketAddr,
    ) -> Result<(Opened, std::ops::Range<usize>), Error> {
        self.drop_evicted();
        let r = super::open_data_in_place(d, |receiver, nonce, sealed| {
            self.data(now, receiver, nonce, sealed, from)
        });
        if let Err(e) = &r {
            self.counters.count(e);
        }
        r
    }

    /// Opens a capabilities datagram's sealed part (in `out`) on session `receiver` (which it
    /// confirms like data) and notes the terminal's flags; `out` is left empty.
    fn capabilities(
        &mut self,
        now: Instant,
        receiver: u32,
        nonce: u64,
        out: &mut Vec<u8>,
        from: SocketAddr,
    ) -> Result<Opened, Error> {
        let n = self.data(now, receiver, nonce, out, from)?;
        let plain = out.get(..n).ok_or(Error::Malformed)?;
        self.sessions
            .get_mut(&receiver)
            .ok_or(Error::UnknownSession(receiver))?
            .session
            .note_capabilities(plain)?;
        out.clear();
        Ok(Opened::Capabilities { session: receiver })
    }

    /// A capabilities datagram announcing [`super::OUR_CAPABILITIES`] on session `session`.
    pub(crate) fn capabilities_datagram(&mut self, session: u32) -> Result<Vec<u8>, Error> {
        let e = self
            .sessions
            .get_mut(&session)
            .ok_or(Error::UnknownSession(session))?;
        let d = e.session.seal_capabilities(super::OUR_CAPABILITIES)?;
        self.counters.data_sealed += 1;
        Ok(d)
    }

    /// Opens a data datagram's `sealed` part (ciphertext and tag) in place on session
    /// `receiver`, and notes where the terminal is; returns the plaintext's length.
    fn data(
        &mut self,
        now: Instant,
        receiver: u32,
        nonce: u64,
        sealed: &mut [u8],
        from: SocketAddr,
    ) -> Result<usize, Error> {
        let entry = self
            .sessions
            .get_mut(&receiver)
            .filter(|e| e.revoked_at.is_none())
            .ok_or(Error::UnknownSession(receiver))?;
        let n = entry.session.open_in_place(nonce, sealed)?;
        entry.last_rx = now;
        let (peer, seq) = (entry.peer, entry.seq);
        let first = !std::mem::replace(&mut entry.confirmed, true);
        if first {
            self.keys.confirm(&peer, receiver);
        }
        if entry.addr != from {
            let old = entry.addr;
            entry.addr = from;
            if self.by_addr.get(&old) == Some(&receiver) {
                self.by_addr.remove(&old);
            }
        }
        // Replies go on the newest session the terminal has used from there: a late datagram
        // on a replaced session does not take them back to it.
        let newer_mapped = self
            .by_addr
            .get(&from)
            .and_then(|i| self.sessions.get(i))
            .is_some_and(|e| e.peer == peer && e.seq > seq);
        if !newer_mapped {
            self.by_addr.insert(from, receiver);
        }
        self.counters.data_opened += 1;
        self.retire_superseded(now, &peer, seq, first, from);
        Ok(n)
    }

    /// After a datagram on `key`'s session `seq` from `from`: on its first, the key's earlier
    /// sessions last heard from `from` are superseded (that terminal has rekeyed; sessions of the
    /// key at other addresses are other tunnels — a terminal's other workers — and stay);
    /// superseded sessions older than the overlap are erased.
    fn retire_superseded(
        &mut self,
        now: Instant,
        key: &PublicKey,
        seq: u64,
        first: bool,
        from: SocketAddr,
    ) {
        let Some(p) = self.peers.get(key) else {
            return;
        };
        let overlap = std::time::Duration::from_millis(self.config.rekey_overlap_ms);
        let mut done = Vec::new();
        for &i in &p.sessions {
            let Some(e) = self.sessions.get_mut(&i) else {
                continue;
            };
            if first && e.seq < seq && e.addr == from && e.superseded_at.is_none() {
                e.superseded_at = Some(now);
            }
            if e.superseded_at
                .is_some_and(|t| now.saturating_duration_since(t) >= overlap)
            {
                done.push(i);
            }
        }
        for i in done {
            self.remove_session(i);
        }
    }

    fn take_token(&mut self, now: Instant) -> bool {
        let cap = u64::from(self.config.handshake_burst) * 1000;
        if let Some(last) = self.bucket.last {
            let ms = now.saturating_duration_since(last).as_millis();
            let add = ms.saturating_mul(u128::from(self.config.handshakes_per_second));
            let add = u64::try_from(add).unwrap_or(u64::MAX);
            self.bucket.milli_tokens = self.bucket.milli_tokens.saturating_add(add).min(cap);
        }
        if self.bucket.last.is_none_or(|l| now > l) {
            self.bucket.last = Some(now);
        }
        if self.bucket.milli_tokens >= 1000 {
            self.bucket.milli_tokens -= 1000;
            true
        } else {
            false
        }
    }

    fn initiation(
        &mut self,
        now: Instant,
        datagram: &[u8],
        (sender, cipher): (u32, Cipher),
        noise: &[u8],
        from: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Result<Opened, Error> {
        // A retransmission of an accepted initiation: same answer, no new state, no DH work.
        // The ephemeral key (first 32 bytes of the Noise message) identifies it.
        let ephemeral = ephemeral_of(datagram).ok_or(Error::Malformed)?;
        if let Some(p) = self
            .initiations
            .get(&ephemeral)
            .and_then(|k| self.peers.get(k))
        {
            if let Some((init, resp, session)) = &p.last_initiation {
                if init.as_slice() == datagram {
                    out.extend_from_slice(resp);
                    self.counters.duplicate_initiations += 1;
                    return Ok(Opened::Reply { session: *session });
                }
            }
        }
        if !self.take_token(now) {
            return Err(Error::RateLimited);
        }
        let noise_err = |e: snow::Error| Error::Noise(e.to_string());
        let prologue = prologue(sender);
        let mut payload = [0u8; 64];
        // The current static key first, then (during a changeover) the next one.
        let mut read = None;
        for local in std::iter::once(&self.local).chain(self.next.as_ref()) {
            let mut hs = snow::Builder::new(noise_params_for(cipher)?)
                .local_private_key(local.as_bytes())
                .map_err(noise_err)?
                .prologue(&prologue)
                .map_err(noise_err)?
                .build_responder()
                .map_err(noise_err)?;
            if let Ok(n) = hs.read_message(noise, &mut payload) {
                read = Some((hs, n));
                break;
            }
        }
        let (mut hs, n) = read.ok_or(Error::AuthFailed)?;
        let key = hs
            .get_remote_static()
            .and_then(|k| PublicKey::from_slice(k).ok())
            .ok_or(Error::Internal)?;
        let timestamp = match payload.get(..n) {
            Some(&[a, b, c, d, e, f, g, h]) => u64::from_be_bytes([a, b, c, d, e, f, g, h]),
            _ => return Err(Error::Malformed),
        };
        let Some(peer) = self.peers.get(&key) else {
            self.rejected_key = Some(key);
            return Err(Error::UnknownKey);
        };
        match self.keys.check_initiation(&key, timestamp, from, sender) {
            Freshness::Fresh => {}
            Freshness::OtherSuite => return Err(Error::OtherSuite),
            Freshness::Replay => return Err(Error::Replay(timestamp)),
        }
        let replaces_own = peer.sessions.len() >= self.config.max_sessions_per_key;
        if !replaces_own && self.sessions.len() >= self.config.max_sessions {
            return Err(Error::SessionLimit);
        }
        // A fresh local index: random, distinct from every live one.
        let mut index = None;
        for _ in 0..64 {
            let candidate = self.rng.next_u32();
            if !self.sessions.contains_key(&candidate) {
                index = Some(candidate);
                break;
            }
        }
        let index = index.ok_or(Error::SessionLimit)?;
        let mut response = Vec::with_capacity(RESPONSE_LEN);
        emit_header(&mut response, cipher.response_type(), sender);
        response.resize(RESPONSE_LEN, 0);
        let body = response.get_mut(5..).ok_or(Error::Internal)?;
        let mut payload = [0u8; super::wire::RESPONSE_PAYLOAD_LEN];
        let clock = self.wall_clock_at_zero_ns.wrapping_add(now.as_nanos());
        payload[..4].copy_from_slice(&index.to_be_bytes());
        payload[4..12].copy_from_slice(&self.instance.to_be_bytes());
        payload[12..].copy_from_slice(&clock.to_be_bytes());
        let written = hs.write_message(&payload, body).map_err(noise_err)?;
        if written + 5 != RESPONSE_LEN {
            return Err(Error::Internal);
        }
        let session = Session::from_handshake(&mut hs, cipher, false, sender)?;
        drop(hs);

        // Everything checked: now create state, first in the table the workers share (a
        // concurrent handshake of the key on another worker may have taken a newer timestamp).
        let admitted = self
            .keys
            .admit(
                key,
                timestamp,
                index,
                (from, sender),
                self.config.max_sessions_per_key,
            )
            .map_err(|()| Error::Replay(timestamp))?;
        for held in &admitted.evicted {
            // A terminal replacing its own session (a re-handshake from where it was) is
            // routine; another address may be a second terminal with the same key.
            if held.addr != from && self.eviction_log.allow(key, now) {
                let last_heard_s = self
                    .sessions
                    .get(&held.index)
                    .filter(|_| held.worker == self.keys.id())
                    .map(|e| now.saturating_duration_since(e.last_rx).as_secs());
                tracing::info!(
                    terminal = %key,
                    evicted = %held.addr,
                    new = %from,
                    last_heard_s,
                    "tunnel session evicted: more than max_sessions_per_key = {} \
                     addresses hold sessions of this terminal key (several terminals sharing \
                     one key, e.g. a cloned configuration or VM image, evict each other)",
                    self.config.max_sessions_per_key
                );
            }
            if held.worker == self.keys.id() {
                self.remove_session(held.index);
            }
        }
        if admitted.evicted.is_empty()
            && !admitted.other_addrs.is_empty()
            && self.addresses_log.allow(key, now)
        {
            tracing::info!(
                terminal = %key,
                new = %from,
                others = ?admitted.other_addrs,
                "tunnel sessions of one terminal key from several addresses: a terminal with \
                 workers > 1, or several terminals sharing one key (a cloned configuration or \
                 VM image; give each its own key)"
            );
        }
        // A rekey: the key has a live session. Replies stay on it until the terminal uses the
        // new one (it may not have the response yet); then it is superseded.
        let rekey = self.peers.get(&key).is_some_and(|p| !p.sessions.is_empty());
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sessions.insert(
            index,
            Entry {
                session,
                peer: key,
                addr: from,
                last_rx: now,
                seq,
                confirmed: false,
                superseded_at: None,
                revoked_at: None,
            },
        );
        let mapped_to_key = self
            .by_addr
            .get(&from)
            .and_then(|i| self.sessions.get(i))
            .is_some_and(|e| e.peer == key);
        if !(rekey && mapped_to_key) {
            self.by_addr.insert(from, index);
        }
        if rekey {
            self.counters.rekeys += 1;
        }
        let peer = self.peers.get_mut(&key).ok_or(Error::Internal)?;
        peer.sessions.push_back(index);
        if let Some((old, _, _)) = peer.last_initiation.take() {
            if let Some(e) = ephemeral_of(&old) {
                self.initiations.remove(&e);
            }
        }
        peer.last_initiation = Some((datagram.to_vec(), response.clone(), index));
        self.initiations.insert(ephemeral, key);
        out.extend_from_slice(&response);
        self.counters.handshakes += 1;
        Ok(Opened::Reply { session: index })
    }
}

/// The initiator's ephemeral public key: bytes 5..37 of an initiation datagram.
fn ephemeral_of(initiation: &[u8]) -> Option<[u8; 32]> {
    initiation.get(5..37)?.try_into().ok()
}
