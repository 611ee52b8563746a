//! 24-bit sequence numbers on the wire, 64-bit extended sequence numbers inside the engine.
//!
//! SDs are numbered modulo 2^24. The engine never compares wire values directly: each side keeps
//! a 64-bit counter that never wraps and expands a received 24-bit value to the extended value
//! nearest a reference point (serial-number arithmetic, RFC 1982 style, half range 2^23).

/// Number of distinct wire sequence numbers.
pub const SEQ_MODULUS: u64 = 1 << 24;
/// Mask selecting the 24 wire bits.
pub const SEQ_MASK: u32 = (1 << 24) - 1;
/// Half the sequence space: two sequence numbers further apart than this cannot be ordered.
pub const SEQ_HALF: u64 = 1 << 23;

/// The 24-bit wire form of an extended sequence number.
pub fn to_wire(seq: u64) -> u32 {
    (seq as u32) & SEQ_MASK
}

/// Expands a 24-bit wire sequence number to the extended value closest to `reference`.
///
/// Returns `None` if the result would be negative (a value "before" sequence 0).
pub fn expand(wire: u32, reference: u64) -> Option<u64> {
    let wire = u64::from(wire & SEQ_MASK);
    let base = reference & !(SEQ_MODULUS - 1);
    let candidate = base | wire;
    // Choose among candidate - M, candidate, candidate + M the one nearest to reference.
    let result = if candidate + SEQ_HALF <= reference {
        candidate + SEQ_MODULUS
    } else if candidate > reference + SEQ_HALF {
        candidate.checked_sub(SEQ_MODULUS)?
    } else {
        candidate
    };
    Some(result)
}

/// Serial-number comparison of two 24-bit values: true if `a` precedes `b`.
#[cfg(test)]
pub fn wire_lt(a: u32, b: u32) -> bool {
    let d = b.wrapping_sub(a) & SEQ_MASK;
    d != 0 && u64::from(d) < SEQ_HALF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_near_reference() {
        assert_eq!(expand(5, 0), Some(5));
        assert_eq!(expand(SEQ_MASK, 3), None, "before zero is rejected");
        let r = 3 * SEQ_MODULUS + 10;
        assert_eq!(expand(12, r), Some(r + 2));
        assert_eq!(expand(SEQ_MASK, r), Some(3 * SEQ_MODULUS - 1));
        let near_top = 4 * SEQ_MODULUS - 2;
        assert_eq!(expand(1, near_top), Some(4 * SEQ_MODULUS + 1));
    }

    #[test]
    fn expand_roundtrips_within_half_range() {
        for reference in [
            0u64,
            77,
            SEQ_MODULUS - 1,
            SEQ_MODULUS,
            9 * SEQ_MODULUS + 12345,
        ] {
            for delta in [-((SEQ_HALF as i64) - 1), -1, 0, 1, (SEQ_HALF as i64) - 1] {
                let v = reference as i64 + delta;
                if v < 0 {
                    continue;
                }
                let v = v as u64;
                assert_eq!(
                    expand(to_wire(v), reference),
                    Some(v),
                    "ref {reference} delta {delta}"
                );
            }
        }
    }

    #[test]
    fn serial_order_wraps() {
        assert!(wire_lt(SEQ_MASK, 0));
        assert!(wire_lt(1, 2));
        assert!(!wire_lt(2, 2));
        assert!(!wire_lt(0, SEQ_MASK));
    }
}
