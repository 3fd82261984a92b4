//! The control bytes of a per-key table (`mod.rs`): one byte a slot,
//! eight to a *group* held in one `AtomicU64`, so that a probe reads a
//! group with one load and compares a byte with all eight at once (the
//! SwissTable layout, in plain 64-bit arithmetic: no SIMD, so the same
//! code on every target and under loom).
//!
//! # Values
//! - `EMPTY` (`0x80`): never used. A probe sequence ends at a group with
//!   one.
//! - `TOMB` (`0xFE`): its key was removed; the slot is never used again
//!   (`mod.rs`, invariant 1).
//! - `FULL(h2)` (`0x00..=0x7F`): a key whose hash's top 7 bits are `h2`.
//!
//! `EMPTY` and `TOMB` have the high bit set and `FULL` bytes do not, so the
//! high bit alone tells used from unused slots ([`is_full`]).

/// Slots per control group.
pub(crate) const GROUP: usize = 8;
/// A slot never used.
pub(super) const EMPTY: u8 = 0x80;
/// A slot whose key was removed.
pub(super) const TOMB: u8 = 0xFE;
const LSB: u64 = 0x0101_0101_0101_0101;
const MSB: u64 = 0x8080_8080_8080_8080;

/// The 7-bit tag of a hash stored in its control byte (never `EMPTY` or
/// `TOMB`, whose high bit is set).
#[inline]
pub(super) fn h2(hash: u64) -> u8 {
    (hash >> 57) as u8
}

/// Bytes of `group` equal to `b`, as the high bit of each matching byte.
/// The zero-byte test on `group ^ b` can also flag a byte equal to `b ^ 1`
/// just above a true match (a borrow). For `b = h2(..)` such a byte is a
/// `FULL` slot whose key is compared anyway; for `b = EMPTY` it would be
/// `0x81`, which no control byte is, so `EMPTY` matches are exact.
#[inline]
pub(super) fn matches(group: u64, b: u8) -> u64 {
    let x = group ^ (LSB * u64::from(b));
    x.wrapping_sub(LSB) & !x & MSB
}

/// Byte index of the lowest set high bit of a match mask.
#[inline]
pub(super) fn first(mask: u64) -> usize {
    (mask.trailing_zeros() / 8) as usize
}

/// The high bit of every `FULL` byte of `group` (a `FULL` byte's high bit
/// is clear, `EMPTY`'s and `TOMB`'s set), in [`matches`]' format.
#[inline]
pub(super) fn full_mask(group: u64) -> u64 {
    !group & MSB
}

/// Whether a control byte is `FULL` (the slot holds a live key).
#[inline]
pub(super) fn is_full(c: u8) -> bool {
    c & 0x80 == 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn byte_matching_is_exact() {
        let group = u64::from_ne_bytes([1, 0x80, 1, 0x7F, 0xFE, 0, 1, 0x80]);
        assert_eq!(matches(group, 1), 0x0080_0000_0080_0080);
        assert_eq!(matches(group, EMPTY), 0x8000_0000_0000_8000);
        // Byte 6 (1 = 0 ^ 1, above the true match at byte 5) is a false
        // positive: a FULL byte, whose key the caller compares.
        assert_eq!(matches(group, 0), 0x0080_8000_0000_0000);
        assert_eq!(first(matches(group, 0x7F)), 3);
    }

    #[test]
    fn only_full_bytes_are_full() {
        assert!(is_full(h2(u64::MAX)) && is_full(h2(0)));
        assert!(!is_full(EMPTY) && !is_full(TOMB));
    }
}
