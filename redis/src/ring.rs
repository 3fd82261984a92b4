//! [`Ring`]: one key's cluster window as Redis stores it, and the node's
//! cached copy of it.
//!
//! # The stored value (one field of a bucket per key: `bucket.rs`)
//! Little-endian `f64`s: `until`, then `m` pairs `(epoch, count)` in
//! increasing epoch order, one per slice of the window that holds a count
//! (`m <= slices`). Epochs are slice numbers on the server's timeline
//! (Unix milliseconds / slice milliseconds). `until` is the first epoch at
//! which the window sum falls below the hot threshold if no count is added
//! (0: not hot). Doubles because Lua's numbers are doubles: epochs and
//! counts are exact below 2^53 (a count per slice of 9e15).
//!
//! Slices older than the window are never counted: they are dropped at
//! the ring's next write, and a ring none of whose slices is in the
//! window goes with its bucket (`bucket.rs`).

use std::fmt;

/// Counts are exact below this (Lua numbers are doubles); a delta above it
/// is sent as this.
pub(crate) const MAX_EXACT: u64 = 1 << 53;

/// One key's per-slice cluster counts and hot horizon.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Ring {
    until: u64,
    slots: Vec<(u64, u64)>,
}

impl Ring {
    /// Decodes a stored value (`None` if it is not one).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Ring> {
        let mut r = Ring::default();
        r.decode_into(bytes).then_some(r)
    }

    /// Whether `bytes` are a stored value.
    pub(crate) fn is_valid(bytes: &[u8]) -> bool {
        bytes.len() >= 8
            && (bytes.len() - 8).is_multiple_of(16)
            && bytes.chunks_exact(8).all(|w| {
                let mut a = [0u8; 8];
                a.copy_from_slice(w);
                to_u64(f64::from_le_bytes(a)).is_some()
            })
    }

    /// Decodes a stored value into `self`, reusing its buffer; `false`
    /// (and `self` unspecified) if `bytes` are not one.
    pub(crate) fn decode_into(&mut self, bytes: &[u8]) -> bool {
        self.slots.clear();
        if bytes.len() < 8 || !(bytes.len() - 8).is_multiple_of(16) {
            return false;
        }
        let mut words = bytes.chunks_exact(8).map(|w| {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            f64::from_le_bytes(a)
        });
        let Some(until) = words.next().and_then(to_u64) else {
            return false;
        };
        self.until = until;
        while let (Some(e), Some(c)) = (words.next(), words.next()) {
            match (to_u64(e), to_u64(c)) {
                (Some(e), Some(c)) => self.slots.push((e, c)),
                _ => return false,
            }
        }
        true
    }

    /// The window sum at epoch `e` of a window of `slices` slices: the
    /// counts of slices `e - slices + 1 ..= e`.
    pub(crate) fn sum_at(&self, e: u64, slices: usize) -> u64 {
        let floor = e.saturating_sub(slices as u64);
        self.slots
            .iter()
            .filter(|&&(se, _)| se > floor && se <= e)
            .fold(0u64, |s, &(_, c)| s.saturating_add(c))
    }

    /// The first epoch at which the key stops being hot if nothing is
    /// added (0: not hot when Redis last wrote it).
    pub(crate) fn until(&self) -> u64 {
        self.until
    }

    /// The `(epoch, count)` slices held, oldest first.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn slots(&self) -> &[(u64, u64)] {
        &self.slots
    }

    /// The newest epoch held (0 if none).
    pub(crate) fn newest(&self) -> u64 {
        self.slots.last().map_or(0, |s| s.0)
    }
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("until", &self.until)
            .field("slots", &self.slots)
            .finish()
    }
}

/// A non-negative whole double below 2^64, as a `u64`.
fn to_u64(x: f64) -> Option<u64> {
    (x >= 0.0 && x.fract() == 0.0 && x < 18_446_744_073_709_551_616.0).then_some(x as u64)
}

/// Appends `x` as the stored format's double (exact below 2^53).
#[inline]
pub(crate) fn put_f64(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&(x.min(MAX_EXACT) as f64).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(until: u64, slots: &[(u64, u64)]) -> Vec<u8> {
        let mut v = Vec::new();
        put_f64(&mut v, until);
        for &(e, c) in slots {
            put_f64(&mut v, e);
            put_f64(&mut v, c);
        }
        v
    }

    #[test]
    fn decodes_and_sums_the_window() {
        let r = Ring::decode(&encode(0, &[(7, 1), (9, 2), (10, 4)])).unwrap();
        assert_eq!(r.slots(), &[(7, 1), (9, 2), (10, 4)]);
        assert_eq!(r.sum_at(10, 3), 6); // slices 8..=10
        assert_eq!(r.sum_at(10, 4), 7);
        assert_eq!(r.sum_at(9, 3), 3); // 10 is after the window's end
        assert_eq!(r.sum_at(13, 3), 0);
        assert_eq!(r.newest(), 10);
    }

    #[test]
    fn rejects_what_is_not_a_ring() {
        assert_eq!(Ring::decode(b""), None);
        assert_eq!(Ring::decode(&[0; 12]), None);
        let mut v = encode(0, &[(1, 1)]);
        v[8..16].copy_from_slice(&(-1.0f64).to_le_bytes());
        assert_eq!(Ring::decode(&v), None);
        v[8..16].copy_from_slice(&(0.5f64).to_le_bytes());
        assert_eq!(Ring::decode(&v), None);
        assert_eq!(Ring::decode(&encode(3, &[])).unwrap().until(), 3);
    }

    #[test]
    fn counts_saturate_at_the_exact_limit() {
        let r = Ring::decode(&encode(0, &[(1, u64::MAX)])).unwrap();
        assert_eq!(r.slots(), &[(1, MAX_EXACT)]);
    }
}
