//! The terminal's side of the tunnel: one handshake towards one gateway, then one session.

use super::session::Session;
use super::wire::{emit_header, Packet, INITIATION_LEN, RESPONSE_LEN, TAG_LEN};
use super::{noise_params_for, prologue, Cipher, CipherChoice, Counters, Error, Opened};
use crate::keys::{PrivateKey, PublicKey};
use snow::HandshakeState;

/// One handshake under way in one suite, with its initiation datagram.
struct Offer {
    cipher: Cipher,
    /// `None` once a response was accepted (for this offer or another).
    handshake: Option<HandshakeState>,
    initiation: Vec<u8>,
}

/// A terminal's tunnel to its gateway.
///
/// `new` writes the initiation once per suite offered; the driver sends
/// [`Initiator::initiation_to_send`] (and again until [`Initiator::is_established`]: with two
/// suites offered the calls alternate between their initiations, the preferred first), passes
/// every datagram from the gateway to [`Initiator::open`], and seals STP datagrams with
/// [`Initiator::seal`] once established.
pub struct Initiator {
    /// The index of the latest handshake (the one under way, or the current session's).
    index: u32,
    /// The latest handshake's offers, one per suite, in order of preference (their handshake
    /// states are dropped once one is answered).
    offers: Vec<Offer>,
    /// The offer [`Initiator::initiation_to_send`] returns next.
    next_offer: usize,
    /// The suites offered, in order of preference (also on every rekey: a session that fell
    /// back to a later suite because an initiation was lost moves to the preferred one at its
    /// next rekey, if the gateway accepts it).
    ciphers: Vec<Cipher>,
    /// The current session came from a first handshake answered in a later suite than the
    /// preferred one (the preferred initiation was lost, or the gateway refuses it).
    fell_back: bool,
    session: Option<Session>,
    /// Our index of the current session.
    session_index: u32,
    /// After a rekey: the replaced session (our index, session), kept to open datagrams
    /// still in flight on it until [`Initiator::erase_previous`]; it never seals.
    previous: Option<(u32, Session)>,
    accepted_response: Option<Vec<u8>>,
    /// From the response: the gateway's instance and its clock (ns since the Unix epoch) when
    /// it made the response.
    gateway: Option<GatewayInfo>,
    counters: Counters,
}

/// What a gateway's response tells about the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GatewayInfo {
    /// Random at the gateway's start: another value means another gateway process.
    pub instance: u64,
    /// The gateway's clock when it made the response, ns since the Unix epoch.
    pub clock_ns: u64,
}

impl Initiator {
    /// Starts a handshake with the gateway whose static public key is `gateway`. `index` is the
    /// value the gateway will write in datagrams to us (random is best; any value works).
    /// `timestamp` must be larger than that of any earlier handshake of this key with this
    /// gateway (e.g. nanoseconds since the Unix epoch), or the gateway rejects it as a replay.
    /// Offers the suites of [`CipherChoice::Auto`].
    pub fn new(
        local: &PrivateKey,
        gateway: &PublicKey,
        index: u32,
        timestamp: u64,
    ) -> Result<Self, Error> {
        Self::with_cipher(local, gateway, index, timestamp, CipherChoice::Auto)
    }

    /// As [`Initiator::new`], offering the suites of `choice` (`tunnel_cipher`).
    pub(crate) fn with_cipher(
        local: &PrivateKey,
        gateway: &PublicKey,
        index: u32,
        timestamp: u64,
        choice: CipherChoice,
    ) -> Result<Self, Error> {
        Self::with_ciphers(local, gateway, index, timestamp, &choice.ciphers())
    }

    /// As [`Initiator::new`], offering `ciphers` in this order (at least one).
    pub(crate) fn with_ciphers(
        local: &PrivateKey,
        gateway: &PublicKey,
        index: u32,
        timestamp: u64,
        ciphers: &[Cipher],
    ) -> Result<Self, Error> {
        if ciphers.is_empty() {
            return Err(Error::Config("no cipher to offer".into()));
        }
        let offers = offers(local, gateway, index, timestamp, ciphers)?;
        Ok(Initiator {
            index,
            offers,
            next_offer: 0,
            ciphers: ciphers.to_vec(),
            fell_back: false,
            session: None,
            session_index: index,
            previous: None,
            accepted_response: None,
            gateway: None,
            counters: Counters::default(),
        })
    }

    /// Rekeying: starts a new handshake (with a new `index` and a larger `timestamp`) while the
    /// current session keeps sealing and opening. [`Initiator::initiation`] is then the new
    /// initiation; when its response arrives ([`Opened::Rekeyed`]) the new session seals from
    /// then on and the old one only opens until [`Initiator::erase_previous`]. Without a
    /// session it is a fresh start.
    pub(crate) fn rekey(
        &mut self,
        local: &PrivateKey,
        gateway: &PublicKey,
        index: u32,
        timestamp: u64,
    ) -> Result<(), Error> {
        self.offers = offers(local, gateway, index, timestamp, &self.ciphers)?;
        self.next_offer = 0;
        self.index = index;
        Ok(())
    }

    /// A rekey handshake is under way (a session is up and a new handshake is unanswered).
    pub(crate) fn rekeying(&self) -> bool {
        self.session.is_some() && self.offers.iter().any(|o| o.handshake.is_some())
    }

    /// Whether the current session came from a first handshake answered in a later suite than
    /// the preferred one: the driver rekeys it early, to try the preferred suite again
    /// (a rekey's session never counts, so a gateway that refuses it costs one extra rekey).
    pub(crate) fn fell_back(&self) -> bool {
        self.fell_back
    }

    /// The suite of the current session (`None` before the first response).
    pub(crate) fn cipher(&self) -> Option<Cipher> {
        self.session.as_ref().map(Session::cipher)
    }

    /// Data datagrams sealed and opened on the current session.
    pub(crate) fn session_messages(&self) -> u64 {
        self.session.as_ref().map_or(0, Session::messages)
    }

    /// Whether the session replaced by the last rekey is still kept (to open late datagrams).
    #[cfg(test)]
    pub(crate) fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// Drops the session replaced by the last rekey; its keys are zeroized. Datagrams on it are
    /// then rejected as for an unknown session.
    pub(crate) fn erase_previous(&mut self) {
        self.previous = None;
    }
}

/// A handshake towards `gateway` in each suite of `ciphers` (same index and timestamp: the
/// gateway accepts at most one of them, the others are replays of its timestamp).
fn offers(
    local: &PrivateKey,
    gateway: &PublicKey,
    index: u32,
    timestamp: u64,
    ciphers: &[Cipher],
) -> Result<Vec<Offer>, Error> {
    ciphers
        .iter()
        .map(|&cipher| {
            let (handshake, initiation) = start(local, gateway, index, timestamp, cipher)?;
            Ok(Offer {
                cipher,
                handshake: Some(handshake),
                initiation,
            })
        })
        .collect()
}

/// A handshake towards `gateway` and its initiation datagram.
fn start(
    local: &PrivateKey,
    gateway: &PublicKey,
    index: u32,
    timestamp: u64,
    cipher: Cipher,
) -> Result<(HandshakeState, Vec<u8>), Error> {
    {
        let noise = |e: snow::Error| Error::Noise(e.to_string());
        let prologue = prologue(index);
        let mut hs = snow::Builder::new(noise_params_for(cipher)?)
            .local_private_key(local.as_bytes())
            .map_err(noise)?
            .remote_public_key(gateway.as_bytes())
            .map_err(noise)?
            .prologue(&prologue)
            .map_err(noise)?
            .build_initiator()
            .map_err(noise)?;
        let mut initiation = Vec::with_capacity(INITIATION_LEN);
        emit_header(&mut initiation, cipher.initiation_type(), index);
        initiation.resize(INITIATION_LEN, 0);
        let body = initiation.get_mut(5..).ok_or(Error::Internal)?;
        let n = hs
            .write_message(&timestamp.to_be_bytes(), body)
            .map_err(noise)?;
        if n + 5 != INITIATION_LEN {
            return Err(Error::Internal);
        }
        Ok((hs, initiation))
    }
}

impl Initiator {
    /// The initiation of the preferred suite; identical on every call, so resending it is safe.
    pub fn initiation(&self) -> &[u8] {
        self.offers.first().map_or(&[], |o| o.initiation.as_slice())
    }

    /// The initiation to send now: each call returns the next suite's (the preferred first), so
    /// a gateway that drops one suite (an older version, or one configured for the other) gets
    /// the other at the next retry. Each suite's bytes never change: resending is safe. Empty
    /// once the handshake is answered.
    pub(crate) fn initiation_to_send(&mut self) -> &[u8] {
        let n = self.offers.len().max(1);
        let i = self.next_offer % n;
        self.next_offer = (i + 1) % n;
        self.offers.get(i).map_or(&[], |o| o.initiation.as_slice())
    }

    /// Whether every suite's initiation of this handshake has been sent (the next
    /// [`Self::initiation_to_send`] starts over with the preferred one): a driver resending
    /// from then on makes a new handshake with a newer timestamp instead.
    pub(crate) fn offered_every_suite(&self) -> bool {
        self.next_offer == 0
    }

    /// Our index: the one the gateway writes in its datagrams to us.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    pub fn is_established(&self) -> bool {
        self.session.is_some()
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Once established: the gateway's instance and clock from its response.
    pub(crate) fn gateway_info(&self) -> Option<GatewayInfo> {
        self.gateway
    }

    /// Seals one STP datagram into a tunnel datagram in `out` (cleared first).
    pub fn seal(&mut self, stp_datagram: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        let session = self.session.as_mut().ok_or(Error::NotEstablished)?;
        session.seal(stp_datagram, out)?;
        self.counters.data_sealed += 1;
        Ok(())
    }

    /// As [`Self::seal`], sealing in place the STP datagram at `out[start + 13..]` behind the
    /// header's room ([`Session::seal_in_place`]).
    pub(crate) fn seal_in_place(&mut self, out: &mut Vec<u8>, start: usize) -> Result<(), Error> {
        let Some(session) = self.session.as_mut() else {
            out.truncate(start);
            return Err(Error::NotEstablished);
        };
        session.seal_in_place(out, start)?;
        self.counters.data_sealed += 1;
        Ok(())
    }

    /// As [`Self::seal_in_place`] for an STP datagram emitted without its checksum: the
    /// checksum is filled first unless the gateway said it does not verify it.
    pub(crate) fn seal_stp_in_place(
        &mut self,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<(), Error> {
        if let Some(s) = &self.session {
            if s.fill_stp_checksum_for_peer(out, start) {
                self.counters.stp_checksums_filled += 1;
            }
        }
        self.seal_in_place(out, start)
    }

    /// Handles one datagram from the gateway. On `Opened::Data`, `out` holds the STP datagram;
    /// on `Opened::Established`, `out` is empty and the session is ready. Errors are counted and
    /// change no state.
    pub fn open(&mut self, udp_payload: &[u8], out: &mut Vec<u8>) -> Result<Opened, Error> {
        out.clear();
        let r = self.open_inner(udp_payload, out);
        if let Err(e) = &r {
            out.clear();
            self.counters.count(e);
        }
        r
    }

    fn open_inner(&mut self, d: &[u8], out: &mut Vec<u8>) -> Result<Opened, Error> {
        match Packet::parse(d).ok_or(Error::Malformed)? {
            Packet::Initiation { .. } => Err(Error::Malformed),
            Packet::UnknownSession { receiver } => match &self.session {
                Some(s) if s.remote_index == receiver => Ok(Opened::SessionUnknown),
                _ => Err(Error::UnknownSession(receiver)),
            },
            Packet::Response {
                receiver,
                noise,
                cipher,
            } => {
                if receiver != self.index {
                    return Err(Error::UnknownSession(receiver));
                }
                if self.accepted_response.as_deref() == Some(d) {
                    return Err(Error::Replay(0));
                }
                // The response's type names the suite of the initiation it answers.
                let Some(offer) = self
                    .offers
                    .iter_mut()
                    .find(|o| o.cipher == cipher && o.handshake.is_some())
                else {
                    return Err(Error::AuthFailed);
                };
                let hs = offer.handshake.as_mut().ok_or(Error::Internal)?;
                let mut payload = [0u8; RESPONSE_LEN];
                let n = hs
                    .read_message(noise, &mut payload)
                    .map_err(|_| Error::AuthFailed)?;
                // Authenticated but not ours to understand: the handshake state has moved on,
                // so this initiator can no longer complete; the driver starts a new one.
                let body = payload.get(..n).ok_or(Error::Malformed)?;
                if body.len() != super::wire::RESPONSE_PAYLOAD_LEN {
                    return Err(Error::Malformed);
                }
                let be = |r: std::ops::Range<usize>| -> Result<u64, Error> {
                    let b = body.get(r).ok_or(Error::Malformed)?;
                    Ok(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
                };
                let remote_index = u32::try_from(be(0..4)?).map_err(|_| Error::Malformed)?;
                let info = GatewayInfo {
                    instance: be(4..12)?,
                    clock_ns: be(12..20)?,
                };
                let mut hs = offer.handshake.take().ok_or(Error::Internal)?;
                let fresh = Session::from_handshake(&mut hs, cipher, true, remote_index)?;
                drop(hs);
                for o in &mut self.offers {
                    o.handshake = None;
                }
                let old = self.session.replace(fresh);
                self.fell_back = old.is_none() && self.ciphers.first() != Some(&cipher);
                let old_index = std::mem::replace(&mut self.session_index, self.index);
                self.accepted_response = Some(d.to_vec());
                self.gateway = Some(info);
                self.counters.handshakes += 1;
                match old {
                    Some(old) => {
                        // Replaces (and so erases) an earlier previous session, if any.
                        self.previous = Some((old_index, old));
                        self.counters.rekeys += 1;
                        Ok(Opened::Rekeyed)
                    }
                    None => Ok(Opened::Established),
                }
            }
            Packet::Data {
                receiver,
                nonce,
                ciphertext,
            } => {
                let n = self.open_copy(receiver, nonce, ciphertext, out)?;
                out.truncate(n);
                Ok(Opened::Data { session: receiver })
            }
            Packet::Capabilities {
                receiver,
                nonce,
                ciphertext,
            } => {
                let n = self.open_copy(receiver, nonce, ciphertext, out)?;
                let plain = out.get(..n).ok_or(Error::Malformed)?;
                self.session_mut(receiver)
                    .ok_or(Error::UnknownSession(receiver))?
                    .note_capabilities(plain)?;
                out.clear();
                Ok(Opened::Capabilities { session: receiver })
            }
        }
    }

    /// Opens a sealed part, copied into `out`, on the session it names; returns the
    /// plaintext's length (its first bytes in `out`).
    fn open_copy(
        &mut self,
        receiver: u32,
        nonce: u64,
        ciphertext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize, Error> {
        out.extend_from_slice(ciphertext);
        self.open_data(receiver, nonce, out)
    }

    /// The current or the previous session, by our index.
    fn session_mut(&mut self, receiver: u32) -> Option<&mut Session> {
        match (&mut self.session, &mut self.previous) {
            (Some(s), _) if receiver == self.session_index => Some(s),
            (_, Some((i, s))) if receiver == *i => Some(s),
            _ => None,
        }
    }

    /// A capabilities datagram announcing [`super::OUR_CAPABILITIES`] on the current session.
    pub(crate) fn capabilities_datagram(&mut self) -> Result<Vec<u8>, Error> {
        let session = self.session.as_mut().ok_or(Error::NotEstablished)?;
        let d = session.seal_capabilities(super::OUR_CAPABILITIES)?;
        self.counters.data_sealed += 1;
        Ok(d)
    }

    /// Tests: whether the gateway said, on the current session, that it does not verify STP
    /// checksums.
    #[cfg(test)]
    pub(crate) fn peer_skips_stp_checksum(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(Session::peer_skips_stp_checksum)
    }

    /// As [`Self::open`] for a data datagram, decrypted where it lies: on `Opened::Data` the
    /// STP datagram is `d[range]`. Anything else is refused as malformed (the caller hands
    /// other datagrams to [`Self::open`]).
    pub(crate) fn open_in_place(
        &mut self,
        d: &mut [u8],
    ) -> Result<(Opened, std::ops::Range<usize>), Error> {
        let r = super::open_data_in_place(d, |receiver, nonce, sealed| {
            self.open_data(receiver, nonce, sealed)
        });
        if let Err(e) = &r {
            self.counters.count(e);
        }
        r
    }

    /// Opens a data datagram's `sealed` part (ciphertext and tag) in place on the session it
    /// names (the current or the previous one); returns the plaintext's length.
    fn open_data(&mut self, receiver: u32, nonce: u64, sealed: &mut [u8]) -> Result<usize, Error> {
        let session = self
            .session_mut(receiver)
            .ok_or(Error::UnknownSession(receiver))?;
        if sealed.len() < TAG_LEN {
            return Err(Error::Malformed);
        }
        let n = session.open_in_place(nonce, sealed)?;
        self.counters.data_opened += 1;
        Ok(n)
    }
}
