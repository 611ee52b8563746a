//! One established session: the two directional keys, the send nonce counter and the receive
//! replay window.
//!
//! The keys are the Noise split of the finished handshake (`snow`'s raw split), held in the
//! handshake's suite's cipher — RustCrypto's ChaCha20-Poly1305, ring's AES-256-GCM (several
//! times cheaper per byte than RustCrypto's, whose GHASH reduces every block) — each zeroized
//! when dropped; the split's copies are zeroized at once. The transport is Noise's, with empty associated data:
//! ChaCha20-Poly1305 with a 96-bit nonce of 32 zero bits and the 64-bit counter little-endian,
//! or AES-256-GCM with 32 zero bits and the counter big-endian.

use super::replay::ReplayWindow;
use super::wire::{
    write_data_header, CAP_SKIPS_STP_CHECKSUM, DATA_HEADER_LEN, MAX_PAYLOAD, TAG_LEN, TYPE_DATA,
};
use super::{Cipher, Error, REJECT_AFTER_MESSAGES};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};
use snow::HandshakeState;
use zeroize::Zeroize;

/// One direction's key, in its suite's cipher.
enum Aead {
    ChaCha(Box<ChaCha20Poly1305>),
    Aes(RingAes),
}

/// An AES-256-GCM key in ring (AES-NI and an aggregated carry-less GHASH where the CPU has
/// them), zeroized when dropped: ring keeps its key schedule as plain data and does not.
struct RingAes(Box<std::mem::MaybeUninit<ring::aead::LessSafeKey>>);

// Overwriting the key's bytes and then freeing them without running its destructor is sound
// only while it has none.
const _: () = assert!(!std::mem::needs_drop::<ring::aead::LessSafeKey>());

impl RingAes {
    fn new(key: &[u8; 32]) -> Result<RingAes, Error> {
        let unbound = ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key)
            .map_err(|_| Error::Internal)?;
        Ok(RingAes(Box::new(std::mem::MaybeUninit::new(
            ring::aead::LessSafeKey::new(unbound),
        ))))
    }

    fn key(&self) -> &ring::aead::LessSafeKey {
        // SAFETY: initialised in `new` and only overwritten in `drop`.
        unsafe { self.0.assume_init_ref() }
    }
}

impl Drop for RingAes {
    fn drop(&mut self) {
        let bytes = self.0.as_mut_ptr().cast::<u8>();
        for i in 0..std::mem::size_of::<ring::aead::LessSafeKey>() {
            // SAFETY: within the boxed value; a MaybeUninit may hold any bytes, and the
            // LessSafeKey is never read again (it has no destructor to run).
            unsafe { std::ptr::write_volatile(bytes.add(i), 0) };
        }
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Aead {
    fn new(cipher: Cipher, key: &[u8; 32]) -> Result<Aead, Error> {
        Ok(match cipher {
            Cipher::ChaCha20Poly1305 => Aead::ChaCha(Box::new(ChaCha20Poly1305::new(key.into()))),
            Cipher::Aes256Gcm => Aead::Aes(RingAes::new(key)?),
        })
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
            Aead::ChaCha(c) => c
                .encrypt_in_place_detached(&nonce, &[], body)
                .map_err(|_| Error::Internal),
            Aead::Aes(k) => {
                let nonce = ring::aead::Nonce::assume_unique_for_key(nonce.into());
                let tag = k
                    .key()
                    .seal_in_place_separate_tag(nonce, ring::aead::Aad::empty(), body)
                    .map_err(|_| Error::Internal)?;
                Ok(*Tag::from_slice(tag.as_ref()))
            }
        }
    }

    fn open(&self, n: u64, body: &mut [u8], tag: &[u8]) -> Result<(), Error> {
        let nonce = self.nonce(n);
        match self {
            Aead::ChaCha(c) => c
                .decrypt_in_place_detached(&nonce, &[], body, Tag::from_slice(tag))
                .map_err(|_| Error::AuthFailed),
            Aead::Aes(k) => {
                let nonce = ring::aead::Nonce::assume_unique_for_key(nonce.into());
                let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| Error::AuthFailed)?;
                k.key()
                    .open_in_place_separate_tag(
                        nonce,
                        ring::aead::Aad::empty(),
                        ring::aead::Tag::from(tag),
                        body,
                        0..,
                    )
                    .map(|_| ())
                    .map_err(|_| Error::AuthFailed)
            }
        }
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
    /// The capability flags the peer announced on this session (`wire::CAP_*`; none until its
    /// capabilities datagram arrives).
    pub(crate) peer_capabilities: u32,
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
        let keys = Aead::new(cipher, send).and_then(|s| Ok((s, Aead::new(cipher, recv)?)));
        i2r.zeroize();
        r2i.zeroize();
        let (send, recv) = keys?;
        Ok(Session {
            send,
            recv,
            cipher,
            remote_index,
            send_nonce: 0,
            received: 0,
            window: ReplayWindow::default(),
            peer_capabilities: 0,
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
        out.clear();
        out.extend_from_slice(&[0; DATA_HEADER_LEN]);
        out.extend_from_slice(payload);
        self.seal_in_place(out, 0)
    }

    /// Seals in place the data datagram that `out[start..]` holds: [`DATA_HEADER_LEN`] bytes
    /// of room for the header (their content is overwritten), then the payload, which is
    /// encrypted where it lies; the tag is appended. The hop builds STP's datagram this way
    /// where it leaves, so the payload is not copied to be sealed. On an error `out` is cut
    /// back to `start`.
    pub(crate) fn seal_in_place(&mut self, out: &mut Vec<u8>, start: usize) -> Result<(), Error> {
        self.seal_kind_in_place(out, start, TYPE_DATA)
    }

    /// A capabilities datagram announcing `flags` (`wire::CAP_*`), sealed on this session.
    pub(crate) fn seal_capabilities(&mut self, flags: u32) -> Result<Vec<u8>, Error> {
        let mut out = vec![0; DATA_HEADER_LEN];
        out.extend_from_slice(&super::wire::capabilities(flags));
        self.seal_kind_in_place(&mut out, 0, super::wire::TYPE_CAPABILITIES)?;
        Ok(out)
    }

    /// Whether the peer said it does not verify STP checksums ([`CAP_SKIPS_STP_CHECKSUM`]).
    pub(crate) fn peer_skips_stp_checksum(&self) -> bool {
        self.peer_capabilities & CAP_SKIPS_STP_CHECKSUM != 0
    }

    /// Notes the flags of the peer's capabilities plaintext `plain` (malformed unless it is one).
    pub(crate) fn note_capabilities(&mut self, plain: &[u8]) -> Result<(), Error> {
        self.peer_capabilities = super::wire::parse_capabilities(plain).ok_or(Error::Malformed)?;
        Ok(())
    }

    /// Before [`Self::seal_in_place`] of an STP datagram emitted without its checksum (at
    /// `out[start + DATA_HEADER_LEN..]`): fills the checksum unless the peer said it skips it;
    /// whether it did.
    pub(crate) fn fill_stp_checksum_for_peer(&self, out: &mut [u8], start: usize) -> bool {
        if self.peer_skips_stp_checksum() {
            return false;
        }
        match out.get_mut(start + DATA_HEADER_LEN..) {
            Some(d) => {
                stp::wire::fill_checksum(d);
                true
            }
            None => false,
        }
    }

    /// [`Self::seal_in_place`] with `kind` as the datagram's type (data or capabilities).
    fn seal_kind_in_place(
        &mut self,
        out: &mut Vec<u8>,
        start: usize,
        kind: u8,
    ) -> Result<(), Error> {
        let payload_len = out
            .len()
            .checked_sub(start.saturating_add(DATA_HEADER_LEN))
            .ok_or(Error::Internal);
        let r = payload_len.and_then(|len| {
            if len > MAX_PAYLOAD {
                return Err(Error::TooLarge(len));
            }
            if self.send_nonce >= REJECT_AFTER_MESSAGES {
                return Err(Error::NonceExhausted);
            }
            let nonce = self.send_nonce;
            let head = out
                .get_mut(start..start + DATA_HEADER_LEN)
                .and_then(|h| <&mut [u8; DATA_HEADER_LEN]>::try_from(h).ok())
                .ok_or(Error::Internal)?;
            write_data_header(head, kind, self.remote_index, nonce);
            let body = out
                .get_mut(start + DATA_HEADER_LEN..)
                .ok_or(Error::Internal)?;
            let tag = self.send.seal(nonce, body)?;
            out.extend_from_slice(&tag);
            self.send_nonce += 1;
            Ok(())
        });
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Decrypts a data datagram's `sealed` part (ciphertext and tag) where it lies: the
    /// plaintext is its first `n` bytes (returned); on an error its content is undefined. The
    /// replay window is consulted before and advanced only after the AEAD tag verified, so
    /// forged or replayed datagrams change nothing.
    pub(crate) fn open_in_place(&mut self, nonce: u64, sealed: &mut [u8]) -> Result<usize, Error> {
        if nonce >= REJECT_AFTER_MESSAGES || !self.window.check(nonce) {
            return Err(Error::Replay(nonce));
        }
        let len = sealed.len().checked_sub(TAG_LEN).ok_or(Error::Malformed)?;
        let (body, tag) = sealed.split_at_mut(len);
        self.recv.open(nonce, body, tag)?;
        if !self.window.update(nonce) {
            return Err(Error::Replay(nonce));
        }
        self.received += 1;
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Noise's nonces (The Noise Protocol Framework, §12.3 and §12.4): 32 zero bits, then the
    /// counter little-endian for ChaChaPoly, big-endian for AESGCM.
    #[test]
    fn nonces_are_noises() {
        let key = [7u8; 32];
        let n = 0x0102_0304_0506_0708u64;
        let aes = Aead::new(Cipher::Aes256Gcm, &key).unwrap();
        let chacha = Aead::new(Cipher::ChaCha20Poly1305, &key).unwrap();
        assert_eq!(
            aes.nonce(n).as_slice(),
            [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(
            chacha.nonce(n).as_slice(),
            [0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        assert_eq!(
            aes.nonce(u64::MAX).as_slice(),
            [0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255]
        );
        assert_eq!(aes.nonce(0).as_slice(), [0u8; 12]);
    }

    /// ring's AES-256-GCM (the data path since 27 November 2026) seals as RustCrypto's (the one
    /// before) did, with Noise's nonce, so terminals and gateways of either version talk; each
    /// opens the other's, and a flipped bit fails.
    #[test]
    fn ring_aes_gcm_seals_as_rustcrypto_did() {
        use aes_gcm::aead::{AeadInPlace, KeyInit};
        let key = [7u8; 32];
        let ours = Aead::new(Cipher::Aes256Gcm, &key).unwrap();
        let theirs = aes_gcm::Aes256Gcm::new((&key).into());
        for (n, len) in [
            (0u64, 0usize),
            (1, 1),
            (2, 15),
            (0x0102_0304_0506, 1400),
            (u64::MAX - 1, 33),
        ] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 31 + 5) as u8).collect();
            let mut a = plain.clone();
            let tag_a = ours.seal(n, &mut a).unwrap();
            let mut b = plain.clone();
            let nonce = ours.nonce(n);
            let tag_b = theirs
                .encrypt_in_place_detached(&nonce, &[], &mut b)
                .unwrap();
            assert_eq!(
                (&a, tag_a.as_slice()),
                (&b, tag_b.as_slice()),
                "counter {n}"
            );
            ours.open(n, &mut b, &tag_b).unwrap();
            assert_eq!(b, plain);
            theirs
                .decrypt_in_place_detached(&nonce, &[], &mut a, &tag_a)
                .unwrap();
            assert_eq!(a, plain);
            let mut bad = tag_b;
            bad[0] ^= 1;
            let mut c = plain.clone();
            let _ = ours.seal(n, &mut c).unwrap();
            assert_eq!(ours.open(n, &mut c, &bad), Err(Error::AuthFailed));
        }
    }
}
