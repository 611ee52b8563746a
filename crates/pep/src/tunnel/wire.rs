//! The tunnel's datagram layouts (all integers big-endian):
//!
//! ```text
//! initiation: type=1 | sender index (4)   | Noise IK message 1 (104)      = 109 bytes
//! response:   type=2 | receiver index (4) | Noise IK message 2 (68)       =  73 bytes
//! (types 5 and 6: the same in the AES-256-GCM suite)
//! data:       type=3 | receiver index (4) | nonce (8) | ciphertext+tag (n+16) = n + 29 bytes
//! unknown:    type=4 | receiver index (4)                                =   5 bytes
//! capabilities: type=7 | receiver index (4) | nonce (8) | sealed 8 bytes + tag (16) = 37 bytes
//! ```
//!
//! A capabilities datagram is sealed on the session like data (same nonce sequence); its
//! plaintext is `00 63 61 70` ("\0cap", never an STP datagram: version nibble 0) and a 32-bit
//! flag word. A version that does not know type 7 drops it as malformed.
//!
//! Parsing only splits bytes; it never panics and never allocates.

pub(crate) const TYPE_INITIATION: u8 = 1;
pub(crate) const TYPE_RESPONSE: u8 = 2;
pub(crate) const TYPE_DATA: u8 = 3;
/// An initiation in the AES-256-GCM suite (`Noise_IK_25519_AESGCM_BLAKE2s`); same layout as
/// type 1. A version that does not know it drops it as malformed.
pub(crate) const TYPE_INITIATION_AESGCM: u8 = 5;
/// The response to a type-5 initiation; same layout as type 2.
pub(crate) const TYPE_RESPONSE_AESGCM: u8 = 6;
/// Gateway → terminal, unauthenticated: "I have no session with the index you wrote" (a
/// restarted gateway). A hint only: the terminal answers it with a new handshake.
pub(crate) const TYPE_UNKNOWN_SESSION: u8 = 4;
/// Length of an unknown-session notice.
pub(crate) const UNKNOWN_SESSION_LEN: usize = 5;
/// Either end, sealed on the session: what this end does (`docs/tunnel.md`, "Capabilities").
pub(crate) const TYPE_CAPABILITIES: u8 = 7;
/// The first four bytes of a capabilities plaintext.
pub(crate) const CAPABILITIES_MAGIC: [u8; 4] = [0, b'c', b'a', b'p'];
/// A capabilities plaintext: the magic and a 32-bit flag word.
pub(crate) const CAPABILITIES_LEN: usize = 8;
/// Capability: this end does not verify the STP checksum of the datagrams it opens (the AEAD
/// tag covers every byte), so its peer may leave the checksum field zero (spec §3.3).
pub(crate) const CAP_SKIPS_STP_CHECKSUM: u32 = 1;

/// A capabilities plaintext announcing `flags`.
pub(crate) fn capabilities(flags: u32) -> [u8; CAPABILITIES_LEN] {
    let mut b = [0u8; CAPABILITIES_LEN];
    b[..4].copy_from_slice(&CAPABILITIES_MAGIC);
    b[4..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// The flag word of a capabilities plaintext (unknown bits are kept for the caller to ignore).
pub(crate) fn parse_capabilities(plain: &[u8]) -> Option<u32> {
    if plain.len() != CAPABILITIES_LEN || plain[..4] != CAPABILITIES_MAGIC {
        return None;
    }
    be32(&plain[4..])
}

/// Noise IK message 1: ephemeral (32) + encrypted static (32 + 16) + encrypted 8-byte timestamp (8 + 16).
pub(crate) const INITIATION_NOISE_LEN: usize = 32 + 48 + 8 + 16;
/// The response's encrypted payload: the responder's index (4), its instance (8: random at the
/// gateway's start, so a terminal tells a restarted gateway from the one it knew) and its clock
/// (8: ns since the Unix epoch when the response was made).
pub(crate) const RESPONSE_PAYLOAD_LEN: usize = 4 + 8 + 8;
/// Noise IK message 2: ephemeral (32) + encrypted payload (20 + 16).
pub(crate) const RESPONSE_NOISE_LEN: usize = 32 + RESPONSE_PAYLOAD_LEN + 16;
pub(crate) const INITIATION_LEN: usize = 1 + 4 + INITIATION_NOISE_LEN;
pub(crate) const RESPONSE_LEN: usize = 1 + 4 + RESPONSE_NOISE_LEN;
pub(crate) const DATA_HEADER_LEN: usize = 1 + 4 + 8;
/// AEAD tag length (ChaCha20-Poly1305).
pub(crate) const TAG_LEN: usize = 16;
/// Bytes a data datagram adds to the STP datagram it carries.
pub const DATA_OVERHEAD: usize = DATA_HEADER_LEN + TAG_LEN;
/// Largest STP datagram a data datagram can carry (Noise's 65535-byte message limit).
pub(crate) const MAX_PAYLOAD: usize = 65535 - TAG_LEN;

use super::Cipher;

impl Cipher {
    /// The type byte of an initiation in this suite.
    pub(crate) fn initiation_type(self) -> u8 {
        match self {
            Cipher::ChaCha20Poly1305 => TYPE_INITIATION,
            Cipher::Aes256Gcm => TYPE_INITIATION_AESGCM,
        }
    }

    /// The type byte of a response in this suite.
    pub(crate) fn response_type(self) -> u8 {
        match self {
            Cipher::ChaCha20Poly1305 => TYPE_RESPONSE,
            Cipher::Aes256Gcm => TYPE_RESPONSE_AESGCM,
        }
    }
}

/// Whether `ty` is an initiation's type byte (either suite).
pub(crate) fn is_initiation(ty: u8) -> bool {
    ty == TYPE_INITIATION || ty == TYPE_INITIATION_AESGCM
}

/// A tunnel datagram split into its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packet<'a> {
    Initiation {
        sender: u32,
        noise: &'a [u8],
        cipher: Cipher,
    },
    Response {
        receiver: u32,
        noise: &'a [u8],
        cipher: Cipher,
    },
    Data {
        receiver: u32,
        nonce: u64,
        ciphertext: &'a [u8],
    },
    UnknownSession {
        receiver: u32,
    },
    Capabilities {
        receiver: u32,
        nonce: u64,
        ciphertext: &'a [u8],
    },
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

fn be64(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(..8)?.try_into().ok()?))
}

impl<'a> Packet<'a> {
    /// Splits a datagram; `None` if its type is unknown or its length wrong for its type.
    pub(crate) fn parse(d: &'a [u8]) -> Option<Packet<'a>> {
        let (&ty, rest) = d.split_first()?;
        let index = be32(rest)?;
        let body = rest.get(4..)?;
        let cipher = |aes: bool| {
            if aes {
                Cipher::Aes256Gcm
            } else {
                Cipher::ChaCha20Poly1305
            }
        };
        match ty {
            TYPE_INITIATION | TYPE_INITIATION_AESGCM if body.len() == INITIATION_NOISE_LEN => {
                Some(Packet::Initiation {
                    sender: index,
                    noise: body,
                    cipher: cipher(ty == TYPE_INITIATION_AESGCM),
                })
            }
            TYPE_RESPONSE | TYPE_RESPONSE_AESGCM if body.len() == RESPONSE_NOISE_LEN => {
                Some(Packet::Response {
                    receiver: index,
                    noise: body,
                    cipher: cipher(ty == TYPE_RESPONSE_AESGCM),
                })
            }
            TYPE_DATA if body.len() >= 8 + TAG_LEN && body.len() <= 8 + MAX_PAYLOAD + TAG_LEN => {
                Some(Packet::Data {
                    receiver: index,
                    nonce: be64(body)?,
                    ciphertext: body.get(8..)?,
                })
            }
            TYPE_CAPABILITIES if body.len() == 8 + CAPABILITIES_LEN + TAG_LEN => {
                Some(Packet::Capabilities {
                    receiver: index,
                    nonce: be64(body)?,
                    ciphertext: body.get(8..)?,
                })
            }
            TYPE_UNKNOWN_SESSION if body.is_empty() => {
                Some(Packet::UnknownSession { receiver: index })
            }
            _ => None,
        }
    }
}

/// Writes a type and an index: the first five bytes of every datagram.
pub(crate) fn emit_header(out: &mut Vec<u8>, ty: u8, index: u32) {
    out.push(ty);
    out.extend_from_slice(&index.to_be_bytes());
}

/// Writes a sealed datagram's header (type: data or capabilities, receiver index, nonce) into
/// its room.
pub(crate) fn write_data_header(
    head: &mut [u8; DATA_HEADER_LEN],
    kind: u8,
    receiver: u32,
    nonce: u64,
) {
    let (ty, rest) = head.split_at_mut(1);
    let (index, n) = rest.split_at_mut(4);
    ty[0] = kind;
    index.copy_from_slice(&receiver.to_be_bytes());
    n.copy_from_slice(&nonce.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked() {
        assert_eq!(Packet::parse(&[]), None);
        assert_eq!(Packet::parse(&[TYPE_DATA, 0, 0, 0]), None);
        let mut d = vec![TYPE_DATA, 0, 0, 0, 7];
        d.extend_from_slice(&9u64.to_be_bytes());
        d.extend_from_slice(&[0; TAG_LEN - 1]);
        assert_eq!(Packet::parse(&d), None);
        d.push(0);
        assert!(matches!(
            Packet::parse(&d),
            Some(Packet::Data { receiver: 7, nonce: 9, ciphertext }) if ciphertext.len() == TAG_LEN
        ));
        let mut i = vec![TYPE_INITIATION, 0, 0, 0, 1];
        i.resize(INITIATION_LEN - 1, 0);
        assert_eq!(Packet::parse(&i), None);
        i.push(0);
        assert!(matches!(
            Packet::parse(&i),
            Some(Packet::Initiation {
                sender: 1,
                cipher: Cipher::ChaCha20Poly1305,
                ..
            })
        ));
        i[0] = TYPE_INITIATION_AESGCM;
        assert!(matches!(
            Packet::parse(&i),
            Some(Packet::Initiation {
                sender: 1,
                cipher: Cipher::Aes256Gcm,
                ..
            })
        ));
        i[0] = 9;
        assert_eq!(Packet::parse(&i), None);
    }
}
