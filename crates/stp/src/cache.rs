//! Cache hints for the bulk paths: the payload bytes an SD is built from, and the block an
//! arriving SD is copied into, are asked for one datagram ahead of their copy.
//!
//! Both copies otherwise meet memory that has left the cache. A sender's unsent bytes were read
//! from its application (a relay's TCP socket) well before STP sends them: the copy into the
//! datagram waited on them (11-13 % of a gateway's samples, `docs/scaling.md`). A receiver's
//! ready bytes go into a block freshly allocated: each store waited for its line, and the next
//! load the store buffer could not serve waited behind them all (about 15 % of a terminal's
//! samples, counted in the AEAD's own function).
//!
//! A hint changes nothing the program computes, only when memory moves into the cache.

/// Asks the CPU to bring the `len` bytes from `start` into its cache. Any address may be given:
/// a prefetch never faults.
#[inline]
pub(crate) fn prefetch(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut off = 0;
        while off < len {
            // SAFETY: a prefetch reads no memory the program sees, never faults and changes
            // nothing; `wrapping_add` makes no claim about the address either.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    start.wrapping_add(off).cast(),
                )
            };
            off += 64;
        }
        // The last line, when `start` is not at a line's start.
        if len > 0 && (start as usize + len - 1) / 64 != (start as usize + off - 64) / 64 {
            // SAFETY: as above.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    start.wrapping_add(len - 1).cast(),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}
