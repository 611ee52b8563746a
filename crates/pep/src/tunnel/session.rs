//! One established session: the two directional keys, the send nonce counter and the receive
//! replay window.
//!
//! The keys are the Noise split of the finished handshake (`snow`'s raw split), held in
//! ChaCha20-Poly1305 ciphers that zeroize their key when dropped; the split's copies are
//! zeroized at once. The transport is Noise's: ChaCha20-Poly1305 with empty associated data
//! and a 96-bit nonce of 32 zero bits and the 64-bit counter, little-endian.

use super::replay::ReplayWindow;
use super::wire::{emit_header, DATA_HEADER_LEN, MAX_PAYLOAD, TAG_LEN, TYPE_DATA};
use super::{Error, REJECT_AFTER_MESSAGES};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};
use snow::HandshakeState;
use zeroize::Zeroize;

pub(crate) struct Session {
    send: ChaCha20Poly1305,
    recv: ChaCha20Poly1305,
    /// The peer's index: written in every data datagram we send.
    pub(crate) remote_index: u32,
    send_nonce: u64,
    received: u64,
    window: ReplayWindow,
}

fn noise_nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_le_bytes());
    Nonce::from(b)
}

impl Session {
    /// The session of a finished handshake (`initiator`: our side started it).
    pub(crate) fn from_handshake(
        hs: &mut HandshakeState,
        initiator: bool,
        remote_index: u32,
    ) -> Result<Self, Error> {
        if !hs.is_handshake_finished() {
            return Err(Error::Internal);
        }
        let (mut i2r, mut r2i) = hs.dangerously_get_raw_split();
        let (send, recv) = if initiator {
            (&i2r, &r2i)
        } else {
            (&r2i, &i2r)
        };
        let send = ChaCha20Poly1305::new(send.into());
        let recv = ChaCha20Poly1305::new(recv.into());
        i2r.zeroize();
        r2i.zeroize();
        Ok(Session {
            send,
            recv,
            remote_index,
            send_nonce: 0,
            received: 0,
            window: ReplayWindow::default(),
        })
    }

    /// Data datagrams sealed and opened on this session.
    pub(crate) fn messages(&self) -> u64 {
        self.send_nonce.saturating_add(self.received)
    }

    /// Appends a data datagram carrying `payload` to `out` (which is cleared first).
    pub(crate) fn seal(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::TooLarge(payload.len()));
        }
        if self.send_nonce >= REJECT_AFTER_MESSAGES {
            return Err(Error::NonceExhausted);
        }
        let nonce = self.send_nonce;
        out.clear();
        emit_header(out, TYPE_DATA, self.remote_index);
        out.extend_from_slice(&nonce.to_be_bytes());
        out.extend_from_slice(payload);
        let body = out.get_mut(DATA_HEADER_LEN..).ok_or(Error::Internal)?;
        match self
            .send
            .encrypt_in_place_detached(&noise_nonce(nonce), &[], body)
        {
            Ok(tag) => {
                out.extend_from_slice(&tag);
                self.send_nonce += 1;
                Ok(())
            }
            Err(_) => {
                out.clear();
                Err(Error::Internal)
            }
        }
    }

    /// Decrypts a data datagram's ciphertext into `out` (cleared first). The replay window is
    /// consulted before and advanced only after the AEAD tag verified, so forged or replayed
    /// datagrams change nothing.
    pub(crate) fn open(
        &mut self,
        nonce: u64,
        ciphertext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        out.clear();
        if nonce >= REJECT_AFTER_MESSAGES || !self.window.check(nonce) {
            return Err(Error::Replay(nonce));
        }
        let len = ciphertext
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(Error::Malformed)?;
        let (body, tag) = ciphertext.split_at(len);
        out.extend_from_slice(body);
        if self
            .recv
            .decrypt_in_place_detached(&noise_nonce(nonce), &[], out, Tag::from_slice(tag))
            .is_err()
        {
            out.clear();
            return Err(Error::AuthFailed);
        }
        if !self.window.update(nonce) {
            out.clear();
            return Err(Error::Replay(nonce));
        }
        self.received += 1;
        Ok(())
    }
}
