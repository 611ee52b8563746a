//! Static X25519 key pairs for the tunnel and their files.
//!
//! A key file holds one key as 64 hexadecimal digits (32 bytes) on one line; upper or lower case
//! is accepted on reading, lower case is written, and surrounding whitespace is ignored. The
//! private key file (`PREFIX.key`) is created with mode 0600 and never overwritten; the public
//! key file (`PREFIX.pub`) is world-readable. Key generation and the private-to-public derivation
//! go through `snow`'s own X25519 implementation and OS random source: nothing here is
//! cryptography of our own.

use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;
use zeroize::{Zeroize, Zeroizing};

/// Length in bytes of an X25519 key, private or public.
pub(crate) const KEY_LEN: usize = 32;

/// A static private key. Its `Debug` output never shows the key; its bytes are zeroized when
/// it is dropped (and the text it was read from, or written as, when that is dropped).
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKey([u8; KEY_LEN]);

impl Drop for PrivateKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// A static public key: what a terminal is known by on the gateway's allow-list, and what a
/// terminal must be configured with to reach its gateway.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey([u8; KEY_LEN]);

/// Why a key could not be made, parsed or stored.
#[derive(Debug, Error)]
pub enum KeyError {
    #[error("key generation failed: {0}")]
    Generate(String),
    #[error("a key must be {KEY_LEN} bytes written as 64 hexadecimal digits; got {0}")]
    Format(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("{}: already exists; refusing to overwrite a key file", path.display())]
    Exists { path: PathBuf },
    /// A well-formed key that cannot work: a placeholder or a low-order X25519 point.
    #[error("{0}")]
    Unusable(String),
}

/// The X25519 public keys of small order (with bit 255 cleared, as X25519 reads them): 0, 1,
/// the two points of order 8, p - 1, p and p + 1. A key exchange with any of them gives a
/// shared secret an attacker knows, so no key file or configuration may name one.
const LOW_ORDER_POINTS: [[u8; KEY_LEN]; 7] = [
    [0; KEY_LEN],
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    high_point(0xec),
    high_point(0xed),
    high_point(0xee),
];

/// `b`, then thirty `0xff`, then `0x7f`: p - 1, p and p + 1 for `b` = 0xec, 0xed, 0xee.
const fn high_point(b: u8) -> [u8; KEY_LEN] {
    let mut k = [0xff; KEY_LEN];
    k[0] = b;
    k[KEY_LEN - 1] = 0x7f;
    k
}

impl PrivateKey {
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PrivateKey(bytes)
    }
    pub(crate) fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
    /// The matching public key (X25519 base-point multiplication, done by `snow`).
    pub fn public_key(&self) -> Result<PublicKey, KeyError> {
        let mut dh = DefaultResolver
            .resolve_dh(&DHChoice::Curve25519)
            .ok_or_else(|| KeyError::Generate("no X25519 implementation".into()))?;
        dh.set(&self.0);
        PublicKey::from_slice(dh.pubkey())
    }
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }
    /// Parses 64 hex digits; an all-zero key (a placeholder) is refused.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let k = Zeroizing::new(from_hex(s)?);
        if *k == [0; KEY_LEN] {
            return Err(KeyError::Unusable(
                "all zeros: a placeholder, not a key (make one with `satstp keygen`)".into(),
            ));
        }
        Ok(PrivateKey(*k))
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

impl PublicKey {
    pub(crate) fn from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        let arr: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| KeyError::Format(format!("{} bytes", bytes.len())))?;
        Ok(PublicKey(arr))
    }
    pub(crate) fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }
    /// Parses 64 hex digits; a key that cannot work (all zeros, the shipped placeholder, or
    /// another low-order X25519 point) is refused.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let k = PublicKey(from_hex(s)?);
        k.check_usable()?;
        Ok(k)
    }

    /// Refuses a key no secure key exchange can be made with: all zeros (the placeholder in
    /// `deploy/terminal.toml`) or another point of small order.
    pub(crate) fn check_usable(&self) -> Result<(), KeyError> {
        if self.0 == [0; KEY_LEN] {
            return Err(KeyError::Unusable(
                "all zeros: a placeholder, not a key (put the content of the peer's .pub file \
                 from `satstp keygen` here)"
                    .into(),
            ));
        }
        let mut masked = self.0;
        masked[KEY_LEN - 1] &= 0x7f;
        if LOW_ORDER_POINTS.contains(&masked) {
            return Err(KeyError::Unusable(
                "a low-order X25519 point, not a key: no key exchange with it is secret".into(),
            ));
        }
        Ok(())
    }

    /// A short form for logs: the first 16 hex digits.
    pub(crate) fn fingerprint(&self) -> String {
        let mut h = self.to_hex();
        h.truncate(16);
        h
    }
}

/// Refuses a terminal configured with its own public key as the gateway's (`own` is its
/// private key): the handshake would be with itself, and no gateway could answer.
pub(crate) fn check_not_own_key(own: &PrivateKey, peer: &PublicKey) -> Result<(), KeyError> {
    if own.public_key()? == *peer {
        return Err(KeyError::Unusable(
            "is this side's own public key (from its private_key_file); it must be the \
             gateway's public key"
                .into(),
        ));
    }
    Ok(())
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

/// A fresh key pair from the operating system's random source (through `snow`).
pub fn generate_keypair() -> Result<(PrivateKey, PublicKey), KeyError> {
    let params = crate::tunnel::noise_params().map_err(|e| KeyError::Generate(e.to_string()))?;
    let mut kp = snow::Builder::new(params)
        .generate_keypair()
        .map_err(|e| KeyError::Generate(e.to_string()))?;
    let private: Result<[u8; KEY_LEN], _> = kp.private.as_slice().try_into();
    kp.private.zeroize();
    let private =
        private.map_err(|_| KeyError::Generate("unexpected private key length".into()))?;
    Ok((PrivateKey(private), PublicKey::from_slice(&kp.public)?))
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    s
}

fn from_hex(s: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let s = s.trim();
    let digits = s.as_bytes();
    if digits.len() != KEY_LEN * 2 {
        return Err(KeyError::Format(format!("{} characters", digits.len())));
    }
    let nibble = |c: u8| -> Result<u8, KeyError> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(KeyError::Format(format!(
                "the non-hexadecimal character {:?}",
                char::from(c)
            ))),
        }
    };
    let mut out = [0u8; KEY_LEN];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (hi, lo) = match pair {
            [hi, lo] => (*hi, *lo),
            _ => return Err(KeyError::Format("an odd number of digits".into())),
        };
        *o = (nibble(hi)? << 4) | nibble(lo)?;
    }
    Ok(out)
}

fn read_key_text(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Loads a private key file (`PREFIX.key`); errors name the file. A file that group or others
/// may read is loaded with a warning in the log (`satstp keygen` writes mode 0600).
pub fn load_private_key(path: &Path) -> Result<PrivateKey, KeyError> {
    let text = Zeroizing::new(read_key_text(path)?);
    if let Some(mode) = loose_permissions(path) {
        tracing::warn!(
            file = %path.display(),
            "private key file has mode {mode:04o}: group or others may read it; \
             `chmod 600 {}`",
            path.display()
        );
    }
    PrivateKey::from_hex(&text).map_err(|e| KeyError::File {
        path: path.to_path_buf(),
        reason: format!("not a private key: {e}"),
    })
}

/// The file's permission bits when group or others have any access to it.
pub(crate) fn loose_permissions(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Loads a public key file (`PREFIX.pub`); errors name the file.
pub fn load_public_key(path: &Path) -> Result<PublicKey, KeyError> {
    let text = read_key_text(path)?;
    PublicKey::from_hex(&text).map_err(|e| KeyError::File {
        path: path.to_path_buf(),
        reason: format!("not a public key: {e}"),
    })
}

/// The two file names for a key pair: `PREFIX.key` and `PREFIX.pub`.
pub(crate) fn keypair_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let mut private = prefix.as_os_str().to_owned();
    private.push(".key");
    let mut public = prefix.as_os_str().to_owned();
    public.push(".pub");
    (PathBuf::from(private), PathBuf::from(public))
}

/// Writes `PREFIX.key` (mode 0600, created new) and `PREFIX.pub`. Neither file may exist already.
/// Returns the two paths.
pub fn write_keypair(
    prefix: &Path,
    private: &PrivateKey,
    public: &PublicKey,
) -> Result<(PathBuf, PathBuf), KeyError> {
    let (private_path, public_path) = keypair_paths(prefix);
    for p in [&private_path, &public_path] {
        if p.exists() {
            return Err(KeyError::Exists { path: p.clone() });
        }
    }
    write_new(&private_path, &Zeroizing::new(private.to_hex()), true)?;
    write_new(&public_path, &public.to_hex(), false)?;
    Ok((private_path, public_path))
}

fn write_new(path: &Path, hex: &str, secret: bool) -> Result<(), KeyError> {
    let io = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            KeyError::Exists {
                path: path.to_path_buf(),
            }
        } else {
            KeyError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut f = options.open(path).map_err(io)?;
    f.write_all(hex.as_bytes()).map_err(io)?;
    f.write_all(b"\n").map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let (sk, pk) = generate_keypair().unwrap();
        assert_eq!(PublicKey::from_hex(&pk.to_hex()).unwrap(), pk);
        assert_eq!(
            PrivateKey::from_hex(&sk.to_hex().to_uppercase()).unwrap(),
            sk
        );
        assert_eq!(sk.public_key().unwrap(), pk);
        assert!(PublicKey::from_hex("abcd").is_err());
        assert!(PublicKey::from_hex(&"zz".repeat(32)).is_err());
        assert!(!format!("{sk:?}").contains(&sk.to_hex()));
    }

    #[test]
    fn keys_that_cannot_work_are_refused() {
        let e = PublicKey::from_hex(&"0".repeat(64))
            .unwrap_err()
            .to_string();
        assert!(e.contains("placeholder"), "{e}");
        assert!(PrivateKey::from_hex(&"0".repeat(64)).is_err());
        for p in LOW_ORDER_POINTS {
            let e = PublicKey::from_hex(&to_hex(&p)).unwrap_err().to_string();
            assert!(e.contains("low-order") || e.contains("placeholder"), "{e}");
            // X25519 ignores bit 255: the same point with it set is refused too.
            let mut high = p;
            high[KEY_LEN - 1] |= 0x80;
            assert!(PublicKey::from_hex(&to_hex(&high)).is_err());
        }
        let (sk, pk) = generate_keypair().unwrap();
        assert!(PublicKey::from_hex(&pk.to_hex()).is_ok());
        let e = check_not_own_key(&sk, &pk).unwrap_err().to_string();
        assert!(e.contains("own public key"), "{e}");
        let (_, other) = generate_keypair().unwrap();
        assert!(check_not_own_key(&sk, &other).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn loose_private_key_permissions_are_seen() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pep-keys-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (sk, pk) = generate_keypair().unwrap();
        let (kp, _) = write_keypair(&dir.join("t"), &sk, &pk).unwrap();
        assert_eq!(loose_permissions(&kp), None, "keygen writes 0600");
        std::fs::set_permissions(&kp, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(loose_permissions(&kp), Some(0o644));
        // Still loaded: a warning, not an error.
        assert_eq!(load_private_key(&kp).unwrap(), sk);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_round_trip_and_name_the_file() {
        let dir = std::env::temp_dir().join(format!("pep-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (sk, pk) = generate_keypair().unwrap();
        let (kp, pp) = write_keypair(&dir.join("t"), &sk, &pk).unwrap();
        assert_eq!(load_private_key(&kp).unwrap(), sk);
        assert_eq!(load_public_key(&pp).unwrap(), pk);
        assert!(matches!(
            write_keypair(&dir.join("t"), &sk, &pk),
            Err(KeyError::Exists { .. })
        ));
        std::fs::write(dir.join("bad.pub"), "hello\n").unwrap();
        let e = load_public_key(&dir.join("bad.pub"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.pub"), "{e}");
        let e = load_private_key(&dir.join("missing.key"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.key"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
