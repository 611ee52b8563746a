//! Cache hints for the bulk paths: the payload bytes an SD is built from, and the block an
//! arriving SD is copied into, are asked for one datagram ahead of their copy.
//!
//! Both copies otherwise meet memory that has left the cache. A sender's unsent bytes were read
//! from its application (a relay's TCP socket) well before STP sends them: the copy into the
//! datagram waited on them (11-13 % of a gateway's samples, `docs/scaling.md`). A receiver's
//! ready bytes go into a block freshly allocated: each store waited for its line, and the next
//! load the store buffer could not serve waited behind them all (13 % of a terminal's samples,
//! on the move of the AEAD's nonce just after).
//!
//! A hint changes nothing the program computes, only when memory moves into the cache.

/// Asks the CPU to bring the `len` bytes from `start` into its cache. Any address may be given:
/// a prefetch never faults.
#[inline]
pub(crate) fn prefetch(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        // Every line the bytes touch: from the line `start` is in.
        let lead = start as usize % 64;
        let lines = (lead.saturating_add(len)).div_ceil(64);
        let first = start.wrapping_sub(lead);
        for k in 0..lines {
            // SAFETY: a prefetch reads no memory the program sees, never faults and changes
            // nothing; `wrapping_add` makes no claim about the address either.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    first.wrapping_add(k * 64).cast(),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    /// Any address and length, with or without memory behind it, is only a hint.
    #[test]
    fn a_hint_never_faults() {
        prefetch(std::ptr::null(), 0);
        prefetch(std::ptr::null(), 4096);
        let v = vec![7u8; 300];
        for start in 0..70 {
            for len in [0, 1, 63, 64, 65, 129, 230] {
                prefetch(v[start..].as_ptr(), len);
            }
        }
        let gone = v.as_ptr();
        drop(v);
        prefetch(gone, 300);
        prefetch(usize::MAX as *const u8, 64);
    }
}
