//! One established session: the two directional keys, the send nonce counter and the receive
//! replay window.
//!
//! The keys are the Noise split of the finished handshake (`snow`'s raw split), held in
//! the RustCrypto ciphers of the handshake's suite, which zeroize their keys when dropped; the
//! split's copies are zeroized at once. The transport is Noise's, with empty associated data:
//! ChaCha20-Poly1305 with a 96-bit nonce of 32 zero bits and the 64-bit counter little-endian,
//! or AES-256-GCM with 32 zero bits and the counter big-endian.

use super::replay::ReplayWindow;
use super::wire::{emit_header, DATA_HEADER_LEN, MAX_PAYLOAD, TAG_LEN, TYPE_DATA};
use super::{Cipher, Error, REJECT_AFTER_MESSAGES};
use aes_gcm::Aes256Gcm;
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};
use snow::HandshakeState;
use zeroize::Zeroize;

/// One direction's key, in its suite's cipher.
enum Aead {
    ChaCha(Box<ChaCha20Poly1305>),
    Aes(Box<Aes256Gcm>),
}

impl Aead {
    fn new(cipher: Cipher, key: &[u8; 32]) -> Aead {
        match cipher {
            Cipher::ChaCha20Poly1305 => Aead::ChaCha(Box::new(ChaCha20Poly1305::new(key.into()))),
            Cipher::Aes256Gcm => Aead::Aes(Box::new(Aes256Gcm::new(key.into()))),
        }
    }

    /// Noise's nonce for counter `n`: 32 zero bits, then `n` little-endian (ChaChaPoly) or
    /// big-endian (AESGCM).
    fn nonce(&self, n: u64) -> Nonce {
        let mut b = [0u8; 12];
        match self {
            Aead::ChaCha(_) => b[4..].copy_from_slice(&n.to_le_bytes()),
            Aead::Aes(_) => b[4..].copy_from_slice(&n.to_be_bytes()),
        }
        Nonce::from(b)
    }

    fn seal(&self, n: u64, body: &mut [u8]) -> Result<Tag, Error> {
        let nonce = self.nonce(n);
        match self {
            Aead::ChaCha(c) => c.encrypt_in_place_detached(&nonce, &[], body),
            Aead::Aes(c) => c.encrypt_in_place_detached(&nonce, &[], body),
        }
        .map_err(|_| Error::Internal)
    }

    fn open(&self, n: u64, body: &mut [u8], tag: &[u8]) -> Result<(), Error> {
        let nonce = self.nonce(n);
        let tag = Tag::from_slice(tag);
        match self {
            Aead::ChaCha(c) => c.decrypt_in_place_detached(&nonce, &[], body, tag),
            Aead::Aes(c) => c.decrypt_in_place_detached(&nonce, &[], body, tag),
        }
        .map_err(|_| Error::AuthFailed)
    }
}

pub(crate) struct Session {
    send: Aead,
    recv: Aead,
    cipher: Cipher,
    /// The peer's index: written in every data datagram we send.
    pub(crate) remote_index: u32,
    send_nonce: u64,
    received: u64,
    window: ReplayWindow,
}

impl Session {
    /// The session of a finished handshake in `cipher`'s suite (`initiator`: our side
    /// started it).
    pub(crate) fn from_handshake(
        hs: &mut HandshakeState,
        cipher: Cipher,
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
        let send = Aead::new(cipher, send);
        let recv = Aead::new(cipher, recv);
        i2r.zeroize();
        r2i.zeroize();
        Ok(Session {
            send,
            recv,
            cipher,
            remote_index,
            send_nonce: 0,
            received: 0,
            window: ReplayWindow::default(),
        })
    }

    /// The session's suite.
    pub(crate) fn cipher(&self) -> Cipher {
        self.cipher
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
        match self.send.seal(nonce, body) {
            Ok(tag) => {
                out.extend_from_slice(&tag);
                self.send_nonce += 1;
                Ok(())
            }
            Err(e) => {
                out.clear();
                Err(e)
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
        if let Err(e) = self.recv.open(nonce, out, tag) {
            out.clear();
            return Err(e);
        }
        if !self.window.update(nonce) {
            out.clear();
            return Err(Error::Replay(nonce));
        }
        self.received += 1;
        Ok(())
    }
}
