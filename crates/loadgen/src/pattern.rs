//! The byte pattern every transfer carries, and its checker.
//!
//! Byte `i` of object `key` is a function of both (a mixed 64-bit word per 8-byte position),
//! so loss, duplication, reordering and mixing up two objects all show. The generator fills
//! whole words with the widest vectors the CPU has (eight words per instruction with AVX-512):
//! a benchmark's origin and client run it over every byte, on the cores the daemons they
//! measure share.

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
    let whole = rest.len() / 8 * 8;
    let (body, last) = rest.split_at_mut(whole);
    fill_words(k, i / 8, body);
    i += whole as u64;
    for b in last {
        *b = word(k, i / 8)[(i % 8) as usize];
        i += 1;
    }
}

/// Words `w0`, `w0 + 1`, … of the object whose mixed key is `k`, into `out` (whole words): each
/// word a function of its position alone, so compilers turn the loop into vector multiplies.
#[inline(always)]
fn words(k: u64, w0: u64, out: &mut [u8]) {
    for (j, c) in out.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(k, w0.wrapping_add(j as u64)));
    }
}

/// [`words`] compiled for AVX-512 (eight 64-bit multiplies per instruction): 4-5× the plain
/// loop's rate on the build host (0.055 against 0.25 s per GiB), which matters because the load
/// generator shares the benchmark's cores with the daemons it measures.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
unsafe fn words_avx512(k: u64, w0: u64, out: &mut [u8]) {
    words(k, w0, out)
}

/// [`words`] compiled for AVX2 (four lanes; the 64-bit multiply built from 32-bit ones): about
/// twice the plain loop's rate.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn words_avx2(k: u64, w0: u64, out: &mut [u8]) {
    words(k, w0, out)
}

/// Whether the CPU runs [`words_avx512`].
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// [`words`] with the widest vectors the CPU has; the same bytes on every path.
fn fill_words(k: u64, w0: u64, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx512() {
            // SAFETY: the CPU supports these extensions, checked just above.
            return unsafe { words_avx512(k, w0, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { words_avx2(k, w0, out) };
        }
    }
    words(k, w0, out)
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
    fn every_vector_path_gives_the_bytes_of_the_definition() {
        // `byte` is the definition, one word at a time; `fill` takes the widest path the CPU
        // has, and each path this CPU can run is checked on its own too.
        for offset in [0u64, 1, 5, 8, 13, 1 << 33] {
            for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 1000, 4099] {
                let mut got = vec![0u8; len];
                fill(11, offset, &mut got);
                let want: Vec<u8> = (0..len as u64).map(|i| byte(11, offset + i)).collect();
                assert_eq!(got, want, "offset {offset}, {len} bytes");
            }
        }
        let k = key_of(3);
        let mut plain = vec![0u8; 8 * 515];
        words(k, 77, &mut plain);
        #[cfg(target_arch = "x86_64")]
        {
            let mut v = vec![0u8; plain.len()];
            if has_avx512() {
                // SAFETY: checked just above.
                unsafe { words_avx512(k, 77, &mut v) };
                assert_eq!(v, plain, "AVX-512");
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                v.fill(0);
                // SAFETY: checked just above.
                unsafe { words_avx2(k, 77, &mut v) };
                assert_eq!(v, plain, "AVX2");
            }
        }
        // The pattern itself is fixed: a stream written by one version checks with another.
        assert_eq!(
            bytes(0, 12),
            [0xbf, 0xd4, 0x3c, 0xff, 0x26, 0x82, 0x21, 0x48, 0xf7, 0xaa, 0x33, 0x3a]
        );
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
