//! [`Sizes`]: what a node last leased of each key that holds no lease now,
//! in memory fixed at construction, for sizing the key's next lease.
//!
//! A key whose lease its requests used up exactly (a key seen once gets a
//! lease of one permit and uses it) holds nothing on the node: no lease
//! word, no per-key record. Its next lease still follows its rate (what it
//! was granted, and how long ago), read from here: a direct-mapped table
//! of `u64`s indexed by a hash of the key's name (random keys per limiter),
//! each `check (12 bits) | slice tag (4) | granted (20) | time (28)`: the
//! lease's server slice mod 16, and the node time it was filed, in units
//! of 2^16 ns (65.5 us) mod 2^28 (4.9 hours). A record another key overwrote,
//! or older than the window, reads as none: the key's next lease is sized
//! as a new key's (what waits for it). Sizing is only a guess of the next
//! lease's size, never part of what the limit guarantees, so a lost or
//! mistaken record costs at most a round trip more (or permits returned
//! later), never a wrong grant.
//!
//! So a flood of keys seen once costs the node nothing per key; keys that
//! hold permits keep their full record in the sender's `held` map.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

const TIME_SHIFT: u32 = 16;
const TIME_BITS: u32 = 28;
const GRANTED_BITS: u32 = 20;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
const GRANTED_MASK: u64 = (1 << GRANTED_BITS) - 1;
const TAG_SHIFT: u32 = TIME_BITS + GRANTED_BITS;
const CHECK_SHIFT: u32 = TAG_SHIFT + 4;

/// A key's last lease, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    /// Permits granted (at most 2^20 - 1).
    pub(crate) granted: u64,
    /// Node time it was filed, rounded down to the record's unit.
    pub(crate) at: u64,
    /// Its server slice mod 16.
    pub(crate) tag: u64,
}

/// One group's table (used under its sender lock).
pub(crate) struct Sizes {
    slots: Box<[u64]>,
    hasher: RandomState,
}

impl Sizes {
    /// A table of `n` records (rounded up to a power of two, at least 256).
    pub(crate) fn new(n: usize) -> Sizes {
        let n = n.max(256).next_power_of_two();
        Sizes {
            slots: vec![0; n].into_boxed_slice(),
            hasher: RandomState::new(),
        }
    }

    /// The slot of `name` and its check bits (never 0: 0 is an empty slot).
    fn locate(&self, name: &[u8]) -> (usize, u64) {
        let h = self.hasher.hash_one(name);
        let i = (h as usize) & (self.slots.len() - 1);
        let check = (h >> CHECK_SHIFT).max(1);
        (i, check)
    }

    /// `name`'s last lease, if recorded within `horizon` ns of node time
    /// `now`.
    pub(crate) fn get(&self, name: &[u8], now: u64, horizon: u64) -> Option<Record> {
        let (i, check) = self.locate(name);
        let r = self.slots[i];
        if r >> CHECK_SHIFT != check {
            return None;
        }
        let granted = (r >> TIME_BITS) & GRANTED_MASK;
        let tag = (r >> TAG_SHIFT) & 15;
        let now_units = now >> TIME_SHIFT;
        let ago = now_units.wrapping_sub(r) & TIME_MASK;
        // The record's unit, rounded down: never later than it was.
        let at = now_units.saturating_sub(ago) << TIME_SHIFT;
        (now.saturating_sub(at) <= horizon).then_some(Record { granted, at, tag })
    }

    /// Records that `name` was granted `granted` permits of server slice
    /// `slice` at node time `at`.
    pub(crate) fn put(&mut self, name: &[u8], granted: u64, slice: u64, at: u64) {
        let (i, check) = self.locate(name);
        self.slots[i] = check << CHECK_SHIFT
            | (slice & 15) << TAG_SHIFT
            | granted.min(GRANTED_MASK) << TIME_BITS
            | ((at >> TIME_SHIFT) & TIME_MASK);
    }

    /// Forgets `name`'s record (it holds a lease again: its record is the
    /// sender's).
    pub(crate) fn forget(&mut self, name: &[u8]) {
        let (i, check) = self.locate(name);
        if self.slots[i] >> CHECK_SHIFT == check {
            self.slots[i] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_within_its_horizon_and_not_after() {
        let mut s = Sizes::new(1000);
        assert_eq!(s.slots.len(), 1024);
        let t = 7_000_000_000u64;
        assert_eq!(s.get(b"a", t, 10_000_000_000), None);
        s.put(b"a", 3, 35, t);
        let Record { granted, at, tag } = s.get(b"a", t + 1_000_000, 10_000_000_000).unwrap();
        assert_eq!((granted, tag), (3, 3));
        // Rounded down to the unit, so no later than the true time.
        assert!(at <= t && t - at < 1 << TIME_SHIFT, "{at} vs {t}");
        // Older than the horizon: none.
        assert_eq!(s.get(b"a", t + 11_000_000_000, 10_000_000_000), None);
        // Another name in another slot (or its check bits differ).
        assert_eq!(s.get(b"b", t, 10_000_000_000), None);
        s.forget(b"a");
        assert_eq!(s.get(b"a", t, 10_000_000_000), None);
        // More than 20 bits of permits saturate.
        s.put(b"c", u64::MAX, 0, t);
        assert_eq!(
            s.get(b"c", t, 1 << TIME_SHIFT).unwrap().granted,
            GRANTED_MASK
        );
    }
}
