//! The byte pattern every transfer carries, and its checker.
//!
//! Byte `i` of object `key` is a function of both (a mixed 64-bit word per 8-byte position),
//! so loss, duplication, reordering and mixing up two objects all show, and the generator fills
//! eight bytes per multiply (fast enough not to limit a multi-Gbit/s benchmark).

/// The splitmix64 finalizer: a bijection on u64 that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 8 bytes at word position `w` of object `key` (whose mixed key is `k`).
fn word(k: u64, w: u64) -> [u8; 8] {
    mix(w ^ k).to_le_bytes()
}

fn key_of(key: u64) -> u64 {
    mix(key.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// Byte `i` of object `key`.
pub fn byte(key: u64, i: u64) -> u8 {
    word(key_of(key), i / 8)[(i % 8) as usize]
}

/// Fills `out` with object `key`'s bytes from stream offset `offset` on.
pub fn fill(key: u64, offset: u64, out: &mut [u8]) {
    let k = key_of(key);
    let mut i = offset;
    let mut rest = out;
    // Up to the next word boundary.
    let head = ((8 - i % 8) % 8).min(rest.len() as u64) as usize;
    let (first, tail) = rest.split_at_mut(head);
    for b in first {
        *b = word(k, i / 8)[(i % 8) as usize];
        i += 1;
    }
    rest = tail;
    let mut chunks = rest.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word(k, i / 8));
        i += 8;
    }
    for b in chunks.into_remainder() {
        *b = word(k, i / 8)[(i % 8) as usize];
        i += 1;
    }
}

/// The first `n` bytes of object `key`.
pub fn bytes(key: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    fill(key, 0, &mut v);
    v
}

/// The stream offset of the first byte of `data` (which starts at `offset`) that differs from
/// object `key`'s pattern, if any.
pub fn first_wrong(key: u64, offset: u64, data: &[u8]) -> Option<u64> {
    let mut want = [0u8; 4096];
    let mut at = offset;
    for piece in data.chunks(want.len()) {
        let w = &mut want[..piece.len()];
        fill(key, at, w);
        if piece != w {
            let i = piece.iter().zip(w.iter()).position(|(a, b)| a != b)?;
            return Some(at + i as u64);
        }
        at += piece.len() as u64;
    }
    None
}

/// Checks a stream of object `key` piece by piece, remembering the first wrong byte.
#[derive(Debug, Clone)]
pub struct Checker {
    key: u64,
    offset: u64,
    wrong: Option<u64>,
}

impl Checker {
    pub fn new(key: u64) -> Checker {
        Checker {
            key,
            offset: 0,
            wrong: None,
        }
    }

    /// The next piece of the stream.
    pub fn update(&mut self, data: &[u8]) {
        if self.wrong.is_none() {
            self.wrong = first_wrong(self.key, self.offset, data);
        }
        self.offset += data.len() as u64;
    }

    /// Bytes seen so far.
    pub fn len(&self) -> u64 {
        self.offset
    }

    pub fn is_empty(&self) -> bool {
        self.offset == 0
    }

    /// The offset of the first wrong byte seen, if any.
    pub fn first_wrong(&self) -> Option<u64> {
        self.wrong
    }

    /// `Ok` if every byte so far was right and there were `len` of them.
    pub fn finish(&self, len: u64) -> Result<(), crate::Error> {
        if let Some(offset) = self.wrong {
            return Err(crate::Error::WrongByte {
                key: self.key,
                offset,
                len,
            });
        }
        if self.offset != len {
            return Err(crate::Error::Short {
                got: self.offset,
                len,
            });
        }
        Ok(())
    }
}

/// The 64-bit FNV-1a hash of `data`: the raw origin's answer to an upload of arbitrary bytes.
pub fn fnv(data: &[u8]) -> u64 {
    fnv_update(FNV_START, data)
}

/// FNV-1a's starting value.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a hash `h` over `data`.
pub fn fnv_update(h: u64, data: &[u8]) -> u64 {
    data.iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_split_of_the_stream_gives_the_same_bytes() {
        let whole = bytes(5, 1000);
        for at in [0usize, 1, 7, 8, 9, 500, 999] {
            let mut tail = vec![0u8; 1000 - at];
            fill(5, at as u64, &mut tail);
            assert_eq!(&whole[at..], &tail[..], "split at {at}");
            assert_eq!(whole[at], byte(5, at as u64));
        }
    }

    #[test]
    fn the_checker_finds_the_first_wrong_byte() {
        let mut b = bytes(7, 10_000);
        assert_eq!(first_wrong(7, 0, &b), None);
        assert!(first_wrong(8, 0, &b).is_some(), "objects differ");
        b[6123] ^= 1;
        b[9000] ^= 1;
        assert_eq!(first_wrong(7, 0, &b), Some(6123));
        let mut c = Checker::new(7);
        c.update(&b[..5000]);
        c.update(&b[5000..]);
        assert_eq!(c.first_wrong(), Some(6123));
        assert!(matches!(
            c.finish(10_000),
            Err(crate::Error::WrongByte { offset: 6123, .. })
        ));
    }

    #[test]
    fn a_shifted_stream_is_wrong() {
        // A lost byte early on shifts everything after it.
        let b = bytes(1, 100);
        assert_eq!(first_wrong(1, 0, &b[1..]), Some(0));
        let mut c = Checker::new(1);
        c.update(&b[..50]);
        assert!(matches!(
            c.finish(100),
            Err(crate::Error::Short { got: 50, len: 100 })
        ));
    }

    #[test]
    fn fnv_matches_its_reference_values() {
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
