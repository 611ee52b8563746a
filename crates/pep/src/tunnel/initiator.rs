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
    index: u32,
    initiation: Vec<u8>,
    handshake: Option<HandshakeState>,
    session: Option<Session>,
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
        Ok(Initiator {
            index,
            initiation,
            handshake: Some(hs),
            session: None,
            accepted_response: None,
            gateway: None,
            counters: Counters::default(),
        })
    }

    /// The initiation datagram; identical on every call, so resending it is safe.
    pub fn initiation(&self) -> &[u8] {
        &self.initiation
    }

    /// Our index: the one the gateway writes in its datagrams to us.
    pub fn index(&self) -> u32 {
        self.index
    }

    pub fn is_established(&self) -> bool {
        self.session.is_some()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Once established: the gateway's instance and clock from its response.
    pub fn gateway_info(&self) -> Option<GatewayInfo> {
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
                let hs = self.handshake.take().ok_or(Error::Internal)?;
                let transport = hs
                    .into_stateless_transport_mode()
                    .map_err(|e| Error::Noise(e.to_string()))?;
                self.session = Some(Session::new(transport, remote_index));
                self.accepted_response = Some(d.to_vec());
                self.gateway = Some(info);
                self.counters.handshakes += 1;
                Ok(Opened::Established)
            }
            Packet::Data {
                receiver,
                nonce,
                ciphertext,
            } => {
                if receiver != self.index {
                    return Err(Error::UnknownSession(receiver));
                }
                let session = self
                    .session
                    .as_mut()
                    .ok_or(Error::UnknownSession(receiver))?;
                if ciphertext.len() < TAG_LEN {
                    return Err(Error::Malformed);
                }
                session.open(nonce, ciphertext, out)?;
                self.counters.data_opened += 1;
                Ok(Opened::Data {
                    session: self.index,
                })
            }
        }
    }
}
