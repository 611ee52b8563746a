//! The terminal's side of the tunnel: one handshake towards one gateway, then one session.

use super::session::Session;
use super::wire::{emit_header, Packet, INITIATION_LEN, RESPONSE_LEN, TAG_LEN};
use super::{noise_params, prologue, Counters, Error, Opened};
use crate::keys::{PrivateKey, PublicKey};
use snow::HandshakeState;

/// A terminal's tunnel to its gateway.
///
/// `new` writes the initiation once; the driver sends [`Initiator::initiation`] (and resends the
/// same bytes until [`Initiator::is_established`]), passes every datagram from the gateway to
/// [`Initiator::open`], and seals STP datagrams with [`Initiator::seal`] once established.
pub struct Initiator {
    /// The index of the latest handshake (the one under way, or the current session's).
    index: u32,
    initiation: Vec<u8>,
    handshake: Option<HandshakeState>,
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
pub struct GatewayInfo {
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
    pub fn new(
        local: &PrivateKey,
        gateway: &PublicKey,
        index: u32,
        timestamp: u64,
    ) -> Result<Self, Error> {
        let (hs, initiation) = start(local, gateway, index, timestamp)?;
        Ok(Initiator {
            index,
            initiation,
            handshake: Some(hs),
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
    pub fn rekey(
        &mut self,
        local: &PrivateKey,
        gateway: &PublicKey,
        index: u32,
        timestamp: u64,
    ) -> Result<(), Error> {
        let (hs, initiation) = start(local, gateway, index, timestamp)?;
        self.index = index;
        self.initiation = initiation;
        self.handshake = Some(hs);
        Ok(())
    }

    /// A rekey handshake is under way (a session is up and a new handshake is unanswered).
    pub fn rekeying(&self) -> bool {
        self.session.is_some() && self.handshake.is_some()
    }

    /// Data datagrams sealed and opened on the current session.
    pub(crate) fn session_messages(&self) -> u64 {
        self.session.as_ref().map_or(0, Session::messages)
    }

    /// Whether the session replaced by the last rekey is still kept (to open late datagrams).
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// Drops the session replaced by the last rekey; its keys are zeroized. Datagrams on it are
    /// then rejected as for an unknown session.
    pub fn erase_previous(&mut self) {
        self.previous = None;
    }
}

/// A handshake towards `gateway` and its initiation datagram.
fn start(
    local: &PrivateKey,
    gateway: &PublicKey,
    index: u32,
    timestamp: u64,
) -> Result<(HandshakeState, Vec<u8>), Error> {
    {
        let noise = |e: snow::Error| Error::Noise(e.to_string());
        let prologue = prologue(index);
        let mut hs = snow::Builder::new(noise_params()?)
            .local_private_key(local.as_bytes())
            .map_err(noise)?
            .remote_public_key(gateway.as_bytes())
            .map_err(noise)?
            .prologue(&prologue)
            .map_err(noise)?
            .build_initiator()
            .map_err(noise)?;
        let mut initiation = Vec::with_capacity(INITIATION_LEN);
        emit_header(&mut initiation, super::wire::TYPE_INITIATION, index);
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
    /// The initiation datagram; identical on every call, so resending it is safe.
    pub fn initiation(&self) -> &[u8] {
        &self.initiation
    }

    /// Our index: the one the gateway writes in its datagrams to us.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    pub fn is_established(&self) -> bool {
        self.session.is_some()
    }

    pub fn counters(&self) -> &Counters {
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
            Packet::Response { receiver, noise } => {
                if receiver != self.index {
                    return Err(Error::UnknownSession(receiver));
                }
                if self.accepted_response.as_deref() == Some(d) {
                    return Err(Error::Replay(0));
                }
                let Some(hs) = self.handshake.as_mut() else {
                    return Err(Error::AuthFailed);
                };
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
                let mut hs = self.handshake.take().ok_or(Error::Internal)?;
                let fresh = Session::from_handshake(&mut hs, true, remote_index)?;
                drop(hs);
                let old = self.session.replace(fresh);
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
                let session = match (&mut self.session, &mut self.previous) {
                    (Some(s), _) if receiver == self.session_index => s,
                    (_, Some((i, s))) if receiver == *i => s,
                    _ => return Err(Error::UnknownSession(receiver)),
                };
                if ciphertext.len() < TAG_LEN {
                    return Err(Error::Malformed);
                }
                session.open(nonce, ciphertext, out)?;
                self.counters.data_opened += 1;
                Ok(Opened::Data { session: receiver })
            }
        }
    }
}
