//! The receiver's sliding replay window over 64-bit datagram nonces (the bitmap scheme of
//! RFC 6479, as in WireGuard and IPsec): a nonce is accepted once, and only if it is at most
//! [`WINDOW`] − 1 below the highest nonce accepted so far. Fixed size, no allocation.

/// How far behind the highest accepted nonce a datagram may still arrive (reordering tolerance).
pub(crate) const WINDOW: u64 = 2048;

const WORD_BITS: u64 = 64;
/// One word more than the window, so advancing never clears bits still inside it.
const WORDS: usize = (WINDOW / WORD_BITS) as usize + 1;
const RING_BITS: u64 = WORDS as u64 * WORD_BITS;

#[derive(Debug, Clone)]
pub(crate) struct ReplayWindow {
    /// Highest nonce accepted so far (0 before any; nonce 0 is still accepted once).
    top: u64,
    bits: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: 0,
            bits: [0; WORDS],
        }
    }
}

impl ReplayWindow {
    fn slot(n: u64) -> (usize, u64) {
        let bit = n % RING_BITS;
        ((bit / WORD_BITS) as usize, 1u64 << (bit % WORD_BITS))
    }

    /// Would `n` be accepted? Does not change the window: call before authenticating.
    pub(crate) fn check(&self, n: u64) -> bool {
        if n > self.top {
            return true;
        }
        if self.top - n >= WINDOW {
            return false;
        }
        let (w, mask) = Self::slot(n);
        self.bits.get(w).is_some_and(|word| word & mask == 0)
    }

    /// Records `n` as seen; call only after the datagram authenticated. Returns false (and changes
    /// nothing) if `n` is a replay or too old.
    pub(crate) fn update(&mut self, n: u64) -> bool {
        if !self.check(n) {
            return false;
        }
        if n > self.top {
            let current = self.top / WORD_BITS;
            let new = n / WORD_BITS;
            let advance = (new - current).min(WORDS as u64);
            for i in 1..=advance {
                let w = ((current + i) % WORDS as u64) as usize;
                if let Some(word) = self.bits.get_mut(w) {
                    *word = 0;
                }
            }
            self.top = n;
        }
        let (w, mask) = Self::slot(n);
        if let Some(word) = self.bits.get_mut(w) {
            *word |= mask;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_reordered_duplicate_and_old() {
        let mut w = ReplayWindow::default();
        assert!(w.update(0));
        assert!(!w.update(0));
        assert!(w.update(5));
        assert!(w.update(3));
        assert!(!w.update(3));
        assert!(w.update(1));
        assert!(w.update(5000));
        assert!(!w.update(5000 - WINDOW));
        assert!(w.update(5000 - WINDOW + 1));
        assert!(!w.update(5000 - WINDOW + 1));
        assert!(!w.update(5));
    }

    #[test]
    fn matches_a_reference_set_model() {
        use std::collections::BTreeSet;
        // Deterministic pseudo-random walk of nonces around a moving top.
        let mut seen = BTreeSet::new();
        let mut top = 0u64;
        let mut w = ReplayWindow::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = match x % 4 {
                0 => top + x % 3000,
                _ => top.saturating_sub(x % 2200),
            };
            let want = !seen.contains(&n) && (n > top || top - n < WINDOW);
            assert_eq!(w.update(n), want, "nonce {n} top {top}");
            if want {
                seen.insert(n);
                top = top.max(n);
            }
        }
    }
}
