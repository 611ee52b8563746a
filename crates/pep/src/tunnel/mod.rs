//! The security layer of the satellite hop, sans-IO: it sits between the UDP socket and the STP
//! endpoint. Outbound, `seal(stp_datagram) -> udp_payload`; inbound,
//! `open(udp_payload) -> stp_datagram | handshake reply | error`. Full description with the
//! reasoning: `docs/tunnel.md`.
//!
//! # Cryptography
//!
//! The handshake is `snow`'s implementation of the Noise protocol `Noise_IK_25519_ChaChaPoly_BLAKE2s`
//! (the handshake WireGuard builds on) or, where both ends have AES instructions,
//! `Noise_IK_25519_AESGCM_BLAKE2s` ([`Cipher`], [`CipherChoice`]: a terminal offers its suites
//! one per retry, the initiation's type byte names the suite). A terminal ([`Initiator`]) knows the gateway's static
//! public key in advance; the gateway ([`Responder`]) learns the terminal's static key, encrypted,
//! from the first message and serves it only if it is on its allow-list. The prologue
//! `"satstp-tunnel-v1"` followed by the initiator's 4-byte index is mixed into the handshake, so the
//! initiation's header is authenticated too.
//!
//! # Wire format (big-endian; see [`wire`])
//!
//! ```text
//! initiation: 0x01 | sender index u32   | Noise msg 1: e, s, es, ss + payload timestamp u64 (104) = 109 B
//! response:   0x02 | receiver index u32 | Noise msg 2: e, ee, se + payload index u32, instance u64, clock u64 (68) = 73 B
//!             (0x05, 0x06: the same in the AES-256-GCM suite)
//! data:       0x03 | receiver index u32 | nonce u64 | AEAD(stp datagram) + tag 16
//! unknown:    0x04 | receiver index u32 (gateway → terminal: no session with that index) = 5 B
//! ```
//!
//! A data datagram adds [`DATA_OVERHEAD`] = 29 bytes to the STP datagram (on top of STP's 12-byte
//! header, UDP's 8 and IP's 20). Each side picks the 4-byte index the other writes in datagrams
//! to it, so the gateway finds a session by a map lookup, without trial decryption, and any
//! number of terminals share one gateway socket.
//!
//! # Datagrams, loss and reordering
//!
//! Sessions use `snow`'s *stateless* transport: every data datagram carries its 64-bit nonce
//! (a per-direction counter from 0) explicitly, so datagrams decrypt independently of loss and
//! order. The receiver keeps a [`replay::WINDOW`] = 2048-nonce sliding window: a nonce is accepted
//! once and only if it is less than 2048 below the highest accepted one; the window moves only
//! after the AEAD tag verified. A session refuses to send or accept nonces from
//! [`REJECT_AFTER_MESSAGES`] (2^60) on; a new handshake is then needed.
//!
//! # Handshake, retransmission, replays of initiations
//!
//! The initiation carries a timestamp chosen by the driver that must grow from one handshake of a
//! terminal to the next (for example wall-clock nanoseconds, as WireGuard's TAI64N). The gateway
//! remembers each allowed key's latest accepted initiations (timestamp, initiator index,
//! address) and rejects one accepted before, or one not newer than the last from its address
//! (counted as replays), so a recorded initiation cannot replace a live session; a key's
//! several tunnels (a terminal's workers) may reach it in any order within 10 s
//! ([`key_table`]). Retransmitting is the driver's job and is safe: an [`Initiator`]'s
//! initiation bytes never change, and the gateway answers a byte-identical copy of the last
//! initiation it accepted from a key with the same cached response, without new state or
//! Diffie–Hellman work. To re-handshake (after a gateway restart, nonce exhaustion or
//! a long silence) the driver makes a new `Initiator` with a larger timestamp.
//!
//! # Limits (all state is bounded)
//!
//! [`ResponderConfig`]: at most `max_sessions` sessions in total; a terminal key holds sessions
//! from at most `max_sessions_per_key` addresses, two per address (the newest replace the
//! oldest, so re-handshakes cannot pile up; [`KeyTable`] counts them over a gateway's workers);
//! handshakes that need Diffie–Hellman work are rate-limited by a token bucket
//! (`handshakes_per_second`, `handshake_burst`) driven by the `now` the driver passes in. The
//! allow-list bounds the per-key records. Idle sessions are removed by
//! [`Responder::expire_idle`].
//!
//! # Failures
//!
//! Every rejected datagram returns a typed [`enum@Error`] and increments one field of [`Counters`];
//! a datagram that fails authentication, replays, names an unknown session or key, or is
//! malformed creates and changes no session state (the handshake token bucket is the one thing a
//! failed handshake consumes).
//!
//! # Not done (see docs/tunnel.md)
//!
//! No automatic rekeying within a session, no cookie (proof-of-address) reply under load, no
//! hiding of the fact that this is satstp traffic, and no protection of traffic volume and timing.

mod initiator;
mod key_table;
pub(crate) mod log_limit;
pub(crate) mod replay;
mod responder;
mod session;
pub(crate) mod wire;

pub use initiator::Initiator;
pub(crate) use key_table::KeyTable;
pub(crate) use responder::REVOKED_LINGER;
pub use responder::{Responder, ResponderConfig};
pub use wire::DATA_OVERHEAD;
pub(crate) use wire::MAX_PAYLOAD;

use thiserror::Error;

/// The Noise protocol name of the ChaCha20-Poly1305 suite (every version speaks it; the TCP
/// hop and key generation use it).
pub(crate) const NOISE_PATTERN: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";
/// The Noise protocol name of the AES-256-GCM suite (offered where the CPU has AES
/// instructions; see [`Cipher`]).
pub(crate) const NOISE_PATTERN_AESGCM: &str = "Noise_IK_25519_AESGCM_BLAKE2s";
/// Mixed into every handshake (followed by the initiator's index). Version 2: the response
/// carries the gateway's instance and clock, and the unknown-session notice exists.
pub(crate) const PROLOGUE: &[u8] = b"satstp-tunnel-v2";
/// Nonces from this value on are neither sent nor accepted.
pub(crate) const REJECT_AFTER_MESSAGES: u64 = 1 << 60;

pub(crate) fn noise_params() -> Result<snow::params::NoiseParams, Error> {
    noise_params_for(Cipher::ChaCha20Poly1305)
}

pub(crate) fn noise_params_for(cipher: Cipher) -> Result<snow::params::NoiseParams, Error> {
    cipher
        .noise_pattern()
        .parse()
        .map_err(|e: snow::Error| Error::Noise(e.to_string()))
}

/// The AEAD of a tunnel session: the Noise handshake's cipher and the data datagrams'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// `Noise_IK_25519_ChaChaPoly_BLAKE2s`: fast in software everywhere; every version of the
    /// tunnel speaks it (initiation type 1, response type 2).
    ChaCha20Poly1305,
    /// `Noise_IK_25519_AESGCM_BLAKE2s`: the faster one where the CPU has AES and carry-less
    /// multiplication instructions (initiation type 5, response type 6).
    Aes256Gcm,
}

impl Cipher {
    pub(crate) fn noise_pattern(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => NOISE_PATTERN,
            Cipher::Aes256Gcm => NOISE_PATTERN_AESGCM,
        }
    }

    /// Every suite, in the order of [`Cipher::index`].
    pub(crate) const ALL: [Cipher; 2] = [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm];

    /// The suite's place in [`Cipher::ALL`] (and in per-suite counts).
    pub(crate) fn index(self) -> usize {
        match self {
            Cipher::ChaCha20Poly1305 => 0,
            Cipher::Aes256Gcm => 1,
        }
    }

    /// The name the configuration and the logs use.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    /// Whether this machine runs AES-GCM in hardware (x86: AES-NI and PCLMULQDQ; aarch64: the
    /// AES and PMULL extensions). Without them AES-GCM runs in constant-time software, several
    /// times slower than ChaCha20-Poly1305.
    pub(crate) fn aes_in_hardware() -> bool {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        {
            std::arch::is_x86_feature_detected!("aes")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
        }
        #[cfg(target_arch = "aarch64")]
        {
            std::arch::is_aarch64_feature_detected!("aes")
                && std::arch::is_aarch64_feature_detected!("pmull")
        }
        #[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
        {
            false
        }
    }
}

/// Which ciphers a side offers (terminal) or accepts (gateway): the `tunnel_cipher`
/// configuration key. `docs/tunnel.md`, "Cipher".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CipherChoice {
    /// AES-256-GCM where this machine has AES instructions, ChaCha20-Poly1305 always (a
    /// terminal offers AES-256-GCM first and alternates with ChaCha20-Poly1305 while
    /// unanswered; a gateway accepts what it would offer).
    #[default]
    Auto,
    /// This cipher only.
    Only(Cipher),
}

/// The values `tunnel_cipher` accepts, for error messages.
pub(crate) const CIPHER_CHOICES: &str = "\"auto\", \"chacha20-poly1305\" or \"aes-256-gcm\"";

impl CipherChoice {
    /// Reads a `tunnel_cipher` value; the error says what is accepted.
    pub fn parse(s: &str) -> Result<CipherChoice, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(CipherChoice::Auto),
            "chacha20-poly1305" => Ok(CipherChoice::Only(Cipher::ChaCha20Poly1305)),
            "aes-256-gcm" => Ok(CipherChoice::Only(Cipher::Aes256Gcm)),
            _ => Err(format!("\"{s}\": one of {CIPHER_CHOICES}")),
        }
    }

    /// The ciphers in order of preference: with `Auto`, AES-256-GCM where this machine has AES
    /// instructions ([`Cipher::aes_in_hardware`]), then ChaCha20-Poly1305.
    pub fn ciphers(self) -> Vec<Cipher> {
        match self {
            CipherChoice::Only(c) => vec![c],
            CipherChoice::Auto if Cipher::aes_in_hardware() => {
                vec![Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305]
            }
            CipherChoice::Auto => vec![Cipher::ChaCha20Poly1305],
        }
    }

    /// Whether a gateway with this choice accepts an initiation in `cipher`: `Auto` accepts
    /// the ciphers it would offer (AES-256-GCM only with AES instructions: a gateway without
    /// them leaves AES initiations unanswered and the terminal falls back to ChaCha20-Poly1305).
    pub(crate) fn accepts(self, cipher: Cipher) -> bool {
        self.ciphers().contains(&cipher)
    }
}

pub(crate) fn prologue(initiator_index: u32) -> [u8; 20] {
    let mut p = [0u8; 20];
    p[..16].copy_from_slice(PROLOGUE);
    p[16..].copy_from_slice(&initiator_index.to_be_bytes());
    p
}

/// Why a datagram was rejected or a call failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// Unknown type, wrong length for its type, or an authenticated message with a bad payload.
    #[error("malformed tunnel datagram")]
    Malformed,
    /// No session (or pending handshake) has the receiver index the datagram names.
    #[error("no session with index {0:#010x}")]
    UnknownSession(u32),
    /// The AEAD tag or the Noise handshake message did not verify.
    #[error("authentication failed")]
    AuthFailed,
    /// A data nonce already seen or too far behind the window, or an initiation whose timestamp
    /// is not newer than the last accepted from that key.
    #[error("replayed or too old (nonce or timestamp {0})")]
    Replay(u64),
    /// An initiation of the handshake accepted last from its key, in another of the terminal's
    /// suites (same address, index and timestamp): the terminal offered the handshake once per
    /// suite and the gateway took the first. Not a replay; dropped.
    #[error("the accepted handshake offered again in another cipher suite")]
    OtherSuite,
    /// A well-formed initiation from a static key not on the allow-list.
    #[error("terminal key not on the allow-list")]
    UnknownKey,
    /// The handshake token bucket is empty.
    #[error("handshake rate limit reached")]
    RateLimited,
    /// `max_sessions` reached.
    #[error("session limit reached")]
    SessionLimit,
    /// `seal` before the handshake completed, or to a session or address the responder lacks.
    #[error("no established session")]
    NotEstablished,
    /// The session has used all its nonces; a new handshake is needed.
    #[error("session nonces exhausted; start a new handshake")]
    NonceExhausted,
    /// The STP datagram is larger than a tunnel datagram can carry.
    #[error("datagram of {0} bytes too large for the tunnel (max {MAX_PAYLOAD})")]
    TooLarge(usize),
    /// A `ResponderConfig` value is invalid; the message names the field.
    #[error("invalid tunnel configuration: {0}")]
    Config(String),
    /// `snow` refused a configuration (bad key, unsupported pattern).
    #[error("noise: {0}")]
    Noise(String),
    /// An invariant of this module failed; never expected.
    #[error("internal tunnel error")]
    Internal,
}

/// What the tunnel rejected and did, per side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub auth_failures: u64,
    pub replays: u64,
    pub unknown_session: u64,
    pub malformed: u64,
    pub unknown_key: u64,
    pub rate_limited: u64,
    pub session_limit: u64,
    /// Handshakes completed (initiator: responses accepted; responder: sessions created).
    pub handshakes: u64,
    /// Byte-identical initiations answered from the cache.
    pub duplicate_initiations: u64,
    /// Data and capabilities datagrams sealed and opened.
    pub data_sealed: u64,
    pub data_opened: u64,
    /// STP datagrams whose checksum the hop computed as it sealed them, because the session's
    /// peer had not said it skips the verification (an older version, or before its
    /// capabilities arrived; `docs/tunnel.md`, "Capabilities").
    pub stp_checksums_filled: u64,
    /// Rekeys completed (initiator: a new session replaced a live one; responder: a handshake
    /// from a key that had a live session).
    pub rekeys: u64,
}

impl Counters {
    /// Counts a rejected datagram under its reason.
    pub(crate) fn count(&mut self, e: &Error) {
        let c = match e {
            Error::Malformed => &mut self.malformed,
            Error::UnknownSession(_) => &mut self.unknown_session,
            Error::AuthFailed => &mut self.auth_failures,
            Error::Replay(_) => &mut self.replays,
            Error::UnknownKey => &mut self.unknown_key,
            Error::RateLimited => &mut self.rate_limited,
            Error::SessionLimit => &mut self.session_limit,
            _ => return,
        };
        *c += 1;
    }
}

/// What an accepted inbound datagram was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// A data datagram: the output buffer holds the STP datagram; `session` is the local index
    /// of the session it arrived on.
    Data { session: u32 },
    /// (Responder) an initiation was accepted or was a retransmission of the last accepted one:
    /// the output buffer holds the response to send back to the datagram's source.
    Reply { session: u32 },
    /// (Initiator) the response arrived: the session is established and `seal` may be used.
    Established,
    /// (Initiator) the response to a rekey arrived: the new session seals from now on, the
    /// replaced one still opens until `Initiator::erase_previous`.
    Rekeyed,
    /// (Initiator) the gateway says it has no session with the index ours writes: it probably
    /// restarted. Unauthenticated: the driver starts a new handshake, nothing more.
    SessionUnknown,
    /// The peer's capabilities datagram on session `session` (the local index): its flags are
    /// noted on the session (`docs/tunnel.md`, "Capabilities"); the output buffer is empty.
    Capabilities { session: u32 },
}

/// The capabilities this version announces on every session: it does not verify STP checksums
/// inside the tunnel (`stp::Endpoint::handle_authenticated_datagram`).
pub const OUR_CAPABILITIES: u32 = wire::CAP_SKIPS_STP_CHECKSUM;

/// Opens a data datagram where it lies, for either end: `open` decrypts the sealed part for the
/// session `receiver` at `nonce` and returns the plaintext's length. On success the STP
/// datagram is `d[range]`; anything but a data datagram is malformed.
fn open_data_in_place(
    d: &mut [u8],
    open: impl FnOnce(u32, u64, &mut [u8]) -> Result<usize, Error>,
) -> Result<(Opened, std::ops::Range<usize>), Error> {
    match wire::Packet::parse(d) {
        Some(wire::Packet::Data {
            receiver, nonce, ..
        }) => d
            .get_mut(wire::DATA_HEADER_LEN..)
            .ok_or(Error::Malformed)
            .and_then(|sealed| open(receiver, nonce, sealed))
            .map(|n| {
                (
                    Opened::Data { session: receiver },
                    wire::DATA_HEADER_LEN..wire::DATA_HEADER_LEN + n,
                )
            }),
        _ => Err(Error::Malformed),
    }
}

// The tunnel end to end and its two cipher suites, as unit tests: they reach the sessions'
// counters, the key table and the wire's type bytes, which are not the crate's API.
#[cfg(test)]
mod tests_cipher;
#[cfg(test)]
mod tests_e2e;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse() {
        assert!(noise_params_for(Cipher::ChaCha20Poly1305).is_ok());
        assert!(noise_params_for(Cipher::Aes256Gcm).is_ok());
    }

    #[test]
    fn cipher_choice_reads_the_documented_values() {
        assert_eq!(CipherChoice::parse("auto"), Ok(CipherChoice::Auto));
        assert_eq!(
            CipherChoice::parse("AES-256-GCM"),
            Ok(CipherChoice::Only(Cipher::Aes256Gcm))
        );
        assert_eq!(
            CipherChoice::parse("chacha20-poly1305"),
            Ok(CipherChoice::Only(Cipher::ChaCha20Poly1305))
        );
        let e = CipherChoice::parse("aes128").unwrap_err();
        assert!(
            e.contains("\"aes128\"") && e.contains("chacha20-poly1305"),
            "{e}"
        );
        assert_eq!(
            CipherChoice::Only(Cipher::Aes256Gcm).ciphers(),
            vec![Cipher::Aes256Gcm]
        );
        assert_eq!(
            CipherChoice::Auto.ciphers().len(),
            if Cipher::aes_in_hardware() { 2 } else { 1 }
        );
        assert!(CipherChoice::Auto.accepts(Cipher::ChaCha20Poly1305));
    }
}
