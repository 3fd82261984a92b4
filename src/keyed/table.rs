//! One open-addressing hash table of the per-key map: control bytes in
//! groups of eight (the SwissTable layout) and slots that hold each key and
//! its per-key state **inline**, so that an add on a known key touches the
//! control group (1 byte a slot: a 1M-key map's control bytes fit in the
//! L2/L3 caches) and one slot, which holds everything the add writes.
//!
//! # Control bytes
//! `EMPTY` (never used), `TOMB` (removed), or `FULL(h2)`: the top 7 bits of
//! the key's hash. A group of eight is one `AtomicU64`, so a probe reads a
//! group with one load and matches `h2` in all eight bytes at once.
//!
//! # Invariants
//! 1. Control words are written only by the owner of the table's shard
//!    lock (see `map/`), and only these transitions happen:
//!    `EMPTY -> FULL(h2)` (insert) and `FULL(h2) -> TOMB` (remove). A slot
//!    is never reused: a lock-free reader may still be comparing the key of
//!    a removed slot, so a key is written once, before its slot turns
//!    `FULL`, and dropped only with the table (itself freed only after
//!    every guard that could read it is gone, see `reclaim.rs`).
//! 2. A slot's key and its value's initial state are written before the
//!    `Release` store of the control word that makes it `FULL`; a reader
//!    reads them only after an `Acquire` load that saw `FULL`. After that
//!    the key is immutable and the value is only touched through its
//!    atomics.
//! 3. Every table keeps at least one `EMPTY` byte per probe sequence (the
//!    map rebuilds a table before `FULL + TOMB` exceeds 7/8 of its slots),
//!    so every probe ends.
//!
//! A table has any number of groups (not only powers of two, so a map
//! can size it close to its load limit). A probe starts at the group
//! `(low 32 bits of the hash * groups) >> 32` (bits independent of the
//! shard's and of `h2`), visits the following groups in order, wrapping,
//! and stops at the first group with an `EMPTY` byte.

use crate::sync::{AtomicU64, Exclusive, Ordering};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

use super::lines::{LineSlice, LINE};

/// Slots per control group.
pub(crate) const GROUP: usize = 8;
/// The most lines of a group's slots a lookup prefetches
/// ([`Table::prefetch_group`]): all of them with 32-byte slots.
const PREFETCH_LINES: usize = 4;
const EMPTY: u8 = 0x80;
const TOMB: u8 = 0xFE;
const LSB: u64 = 0x0101_0101_0101_0101;
const MSB: u64 = 0x8080_8080_8080_8080;

/// The 7-bit tag of a hash stored in its control byte (never `EMPTY` or
/// `TOMB`, whose high bit is set).
#[inline]
fn h2(hash: u64) -> u8 {
    (hash >> 57) as u8
}

/// Bytes of `group` equal to `b`, as the high bit of each matching byte.
/// The zero-byte test on `group ^ b` can also flag a byte equal to `b ^ 1`
/// just above a true match (a borrow). For `b = h2(..)` such a byte is a
/// `FULL` slot whose key is compared anyway; for `b = EMPTY` it would be
/// `0x81`, which no control byte is, so `EMPTY` matches are exact.
#[inline]
fn matches(group: u64, b: u8) -> u64 {
    let x = group ^ (LSB * u64::from(b));
    x.wrapping_sub(LSB) & !x & MSB
}

/// Byte index of the lowest set high bit of a match mask.
#[inline]
fn first(mask: u64) -> usize {
    (mask.trailing_zeros() / 8) as usize
}

/// One slot: a key (initialized once the slot has been `FULL`) and the
/// per-key state, which every slot holds from allocation on.
pub(crate) struct Slot<K, V> {
    key: UnsafeCell<MaybeUninit<K>>,
    value: V,
}

impl<K, V> Slot<K, V> {
    /// The slot's per-key state.
    #[inline]
    pub(crate) fn value(&self) -> &V {
        &self.value
    }

    /// The key.
    ///
    /// # Safety
    /// The slot's control byte was seen `FULL` or `TOMB` with `Acquire`
    /// (invariant 2).
    #[inline]
    pub(crate) unsafe fn key(&self) -> &K {
        // SAFETY: initialized before the slot was published (the caller's
        // contract) and never written again.
        unsafe { (*self.key.get()).assume_init_ref() }
    }
}

// SAFETY: a slot shares its key (immutable after publication) and its value
// (atomics) across threads; both must be shareable and sendable.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Slot<K, V> {}

/// One open-addressing table (see the module docs).
pub(crate) struct Table<K, V> {
    ctrl: Box<[AtomicU64]>,
    /// Line-aligned (`lines.rs`): a 32-byte slot never straddles two lines.
    slots: LineSlice<Slot<K, V>>,
}

impl<K, V> Table<K, V> {
    /// A table of `groups * GROUP` vacant slots (`groups >= 1`), each
    /// value built by `vacant`.
    pub(crate) fn new(groups: usize, vacant: impl Fn() -> V) -> Self {
        debug_assert!(groups >= 1);
        Table {
            ctrl: (0..groups)
                .map(|_| AtomicU64::new(u64::from_ne_bytes([EMPTY; GROUP])))
                .collect(),
            slots: LineSlice::from_fn(groups * GROUP, |_| Slot {
                key: UnsafeCell::new(MaybeUninit::uninit()),
                value: vacant(),
            }),
        }
    }

    /// [`new`](Self::new) for a value whose vacant state is all zero
    /// bytes: the slots come zeroed from the allocator (fresh pages of a
    /// large table are zero already, so nothing is written until a key
    /// arrives: a slice map's table of several MB is not written twice).
    ///
    /// # Safety
    /// An all-zero `V` is a valid value, the vacant one.
    #[cfg(not(loom))]
    pub(crate) unsafe fn new_zeroed(groups: usize) -> Self {
        debug_assert!(groups >= 1);
        // SAFETY: a zeroed `MaybeUninit` key is fine, and a zeroed `V` is
        // valid (the caller's contract).
        let slots = unsafe { LineSlice::zeroed(groups * GROUP) };
        Table {
            ctrl: (0..groups)
                .map(|_| AtomicU64::new(u64::from_ne_bytes([EMPTY; GROUP])))
                .collect(),
            slots,
        }
    }

    /// Control groups in the table.
    pub(crate) fn groups(&self) -> usize {
        self.ctrl.len()
    }

    /// Empties the table to be used again as a new one: every slot that
    /// held a key (`FULL` or `TOMB`) has its key dropped and its value
    /// replaced by `vacant()`, and every control byte becomes `EMPTY`. A
    /// slot that never held a key still holds its vacant value (`insert`
    /// writes a value only on its way to publishing the key). `&mut self`:
    /// no reader can reach the table (`spares.rs`).
    pub(crate) fn clear(&mut self, vacant: impl Fn() -> V) {
        self.drain_keys(|v| *v = vacant());
    }

    /// Drops the key of every slot that held one (`FULL` or `TOMB`),
    /// calls `f` on its value, and makes every control byte `EMPTY`: what
    /// `clear` and `drop` share.
    fn drain_keys(&mut self, mut f: impl FnMut(&mut V)) {
        for (g, word) in self.ctrl.iter_mut().enumerate() {
            let bytes = word.read_mut().to_ne_bytes();
            // `EMPTY` first: if a destructor below panics, the group's
            // remaining keys leak rather than being dropped twice.
            word.write_mut(u64::from_ne_bytes([EMPTY; GROUP]));
            for (b, &c) in bytes.iter().enumerate() {
                if c != EMPTY {
                    let s = &mut self.slots[g * GROUP + b];
                    // SAFETY: a `FULL` or `TOMB` slot holds an initialized
                    // key (invariant 1), dropped once: the slot is `EMPTY`
                    // from now on.
                    unsafe { s.key.get_mut().assume_init_drop() };
                    f(&mut s.value);
                }
            }
        }
    }

    /// Slots in the table.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The most slots that may be `FULL` or `TOMB` (invariant 3).
    #[inline]
    pub(crate) fn max_used(&self) -> usize {
        self.capacity() / 8 * 7
    }

    /// Bytes the table holds (control bytes and slots).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.ctrl.len() * std::mem::size_of::<AtomicU64>()
            + self.slots.len() * std::mem::size_of::<Slot<K, V>>()
    }

    /// The group a probe for `hash` starts at (module docs): always below
    /// the group count `n`, since it is `(x * n) >> 32` with `x < 2^32`.
    #[inline(always)]
    fn home(&self, hash: u64) -> usize {
        ((u64::from(hash as u32) * self.ctrl.len() as u64) >> 32) as usize
    }

    #[inline]
    fn probe(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let n = self.ctrl.len();
        let mut g = self.home(hash);
        std::iter::from_fn(move || {
            let at = g;
            g += 1;
            if g == n {
                g = 0;
            }
            Some(at)
        })
        .take(n)
    }

    /// The `FULL` slot holding a key for which `eq` is true, if any.
    /// Lock-free: callers hold a guard that keeps the table alive.
    ///
    /// The probe of every add: written out, without bounds checks (the
    /// indices are in range by construction), it is ~10 instructions an
    /// add shorter than the iterator form (callgrind, issue-10 stream).
    #[inline]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(&K) -> bool) -> Option<&Slot<K, V>> {
        let tag = h2(hash);
        let n = self.ctrl.len();
        debug_assert_eq!(self.slots.len(), n * GROUP);
        let mut g = self.home(hash);
        self.prefetch_group(g);
        for _ in 0..n {
            // SAFETY: `g < n`: the start is `home`'s, and the step wraps at
            // `n`.
            let group = unsafe { self.ctrl.get_unchecked(g) }.load(Ordering::Acquire);
            let mut m = matches(group, tag);
            while m != 0 {
                // SAFETY: `g < n` and `first(m) < GROUP`, and a table has
                // `n * GROUP` slots (`new`, `new_zeroed`).
                let slot = unsafe { self.slots.get_unchecked(g * GROUP + first(m)) };
                // SAFETY: the byte was `FULL` in a word loaded with
                // `Acquire` (invariant 2).
                if eq(unsafe { slot.key() }) {
                    return Some(slot);
                }
                m &= m - 1;
            }
            if matches(group, EMPTY) != 0 {
                return None;
            }
            g += 1;
            if g == n {
                g = 0;
            }
        }
        None
    }

    /// Starts fetching the slots of group `g` (up to [`PREFETCH_LINES`]
    /// lines, from its first slot: inserts fill a group from its first
    /// slot), before its control word is read.
    ///
    /// A lookup reads the control word, then the slot it names: two
    /// dependent loads. On a large table both miss the L2 (a 1M-key
    /// map's control bytes are 1.7 MB; its slots over 40 MB), so
    /// without this the slot's miss starts only when the control word's
    /// has ended. Fetching the group's lines alongside overlaps the two.
    /// On the issue-10 Zipf stream (1M keys, one thread, steady state) that
    /// took `KeyedLimiter`'s grant from 80.9 to 61.6 ns and `KeyedWindows`'s
    /// add from 57.1 to 45.9 ns (medians of five alternating runs,
    /// BENCHMARKS.md, issue 11, eighth session), for up to 3 lines a lookup
    /// fetches and does not use; a key past its first group gains nothing.
    /// A hint: it changes nothing.
    #[inline(always)]
    fn prefetch_group(&self, g: usize) {
        let first = self.slots.as_ptr().wrapping_add(g * GROUP).cast::<u8>();
        let bytes = GROUP * std::mem::size_of::<Slot<K, V>>();
        for line in 0..bytes.div_ceil(LINE).min(PREFETCH_LINES) {
            // `wrapping_add`: an address, never dereferenced here.
            crate::sync::prefetch(first.wrapping_add(line * LINE));
        }
    }

    /// Starts fetching the line of the slot a lookup of `hash` most likely
    /// ends at: the first tag match in its first group (or that group's
    /// last slot). Branch-free on the loaded control word, so that calls on
    /// several tables in a row overlap their misses (`KeyedWindows::read_in`
    /// reads one key in every slice). A hint: it changes nothing.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let g = self.home(hash);
        // SAFETY: `g < n`, the group count (`home`).
        let group = unsafe { self.ctrl.get_unchecked(g) }.load(Ordering::Relaxed);
        let i = g * GROUP + first(matches(group, h2(hash))).min(GROUP - 1);
        // The slot's address, computed without a bounds check or a branch
        // (`i < n * GROUP`; `wrapping_add` keeps it defined regardless).
        let p = self.slots.as_ptr().wrapping_add(i);
        crate::sync::prefetch(p);
    }

    /// Publishes `key` in the first `EMPTY` slot of its probe sequence,
    /// after `init` has prepared the slot's value; returns the slot.
    ///
    /// The caller holds the shard lock, has checked the key is absent, and
    /// has checked that one more used slot stays within [`max_used`].
    ///
    /// [`max_used`]: Table::max_used
    pub(crate) fn insert(&self, hash: u64, key: K, init: impl FnOnce(&V)) -> &Slot<K, V> {
        for g in self.probe(hash) {
            let group = self.ctrl[g].load(Ordering::Relaxed);
            let m = matches(group, EMPTY);
            if m == 0 {
                continue;
            }
            let i = first(m);
            let slot = &self.slots[g * GROUP + i];
            // SAFETY: the slot is `EMPTY`, so no reader looks at its key,
            // and the shard lock makes us its only writer.
            unsafe { (*slot.key.get()).write(key) };
            init(&slot.value);
            let mut bytes = group.to_ne_bytes();
            bytes[i] = h2(hash);
            self.ctrl[g].store(u64::from_ne_bytes(bytes), Ordering::Release);
            return slot;
        }
        unreachable!("a table always keeps EMPTY slots (invariant 3)")
    }

    /// Turns `slot` (`FULL`, of this table) into `TOMB`. The caller holds
    /// the shard lock.
    pub(crate) fn remove(&self, slot: &Slot<K, V>) {
        let i = self.index_of(slot);
        let (g, b) = (i / GROUP, i % GROUP);
        let mut bytes = self.ctrl[g].load(Ordering::Relaxed).to_ne_bytes();
        debug_assert!(bytes[b] & 0x80 == 0, "removing a slot that is not FULL");
        bytes[b] = TOMB;
        self.ctrl[g].store(u64::from_ne_bytes(bytes), Ordering::Release);
    }

    fn index_of(&self, slot: &Slot<K, V>) -> usize {
        let base = self.slots.as_ptr() as usize;
        let i = (slot as *const Slot<K, V> as usize - base) / std::mem::size_of::<Slot<K, V>>();
        debug_assert!(i < self.slots.len());
        i
    }

    /// Calls `f` on every `FULL` slot (a weakly consistent scan: slots
    /// published or removed during it may be missed).
    pub(crate) fn for_each(&self, f: impl FnMut(&Slot<K, V>)) {
        self.for_each_in_part(0, 1, f)
    }

    /// [`for_each`](Self::for_each) over part `part` of `parts` (`part <
    /// parts`): the groups cut into `parts` runs, `n * part / parts ..
    /// n * (part + 1) / parts` of the table's `n`. The parts of a table
    /// cover every group once; a part may be empty.
    pub(crate) fn for_each_in_part(
        &self,
        part: usize,
        parts: usize,
        mut f: impl FnMut(&Slot<K, V>),
    ) {
        let n = self.ctrl.len();
        let (start, end) = (n * part / parts, n * (part + 1) / parts);
        for (g, word) in self.ctrl[start..end].iter().enumerate() {
            let g = start + g;
            let bytes = word.load(Ordering::Acquire).to_ne_bytes();
            for (b, &c) in bytes.iter().enumerate() {
                if c & 0x80 == 0 {
                    f(&self.slots[g * GROUP + b]);
                }
            }
        }
    }
}

impl<K, V> Drop for Table<K, V> {
    fn drop(&mut self) {
        // The keys; the values go with the slots (`LineSlice`'s drop).
        self.drain_keys(|_| {});
    }
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
    fn insert_find_remove() {
        let t: Table<u64, AtomicU64> = Table::new(4, || AtomicU64::new(0));
        // Hashes chosen to collide on the group and on h2.
        let hashes: Vec<u64> = (0..t.max_used() as u64).map(|i| (i << 57) | 1).collect();
        for (i, &h) in hashes.iter().enumerate().take(t.max_used()) {
            let s = t.insert(h, i as u64, |v| v.store(i as u64 * 10, Ordering::Relaxed));
            assert_eq!(unsafe { *s.key() }, i as u64);
        }
        for (i, &h) in hashes.iter().enumerate().take(t.max_used()) {
            let s = t.find(h, |k| *k == i as u64).expect("present");
            assert_eq!(s.value().load(Ordering::Relaxed), i as u64 * 10);
        }
        assert!(t.find(hashes[0], |k| *k == 999).is_none());
        let s = t.find(hashes[3], |k| *k == 3).unwrap();
        t.remove(s);
        assert!(t.find(hashes[3], |k| *k == 3).is_none());
        // A removed slot does not end probes: keys after it are still found.
        assert!(t.find(hashes[7], |k| *k == 7).is_some());
        let mut n = 0;
        t.for_each(|_| n += 1);
        assert_eq!(n, t.max_used() - 1);
    }

    #[test]
    fn parts_of_the_groups_visit_every_slot_once() {
        // The sweep's parts (`map/sweep.rs`).
        for groups in [1usize, 3, 16, 37] {
            let t: Table<u64, AtomicU64> = Table::new(groups, || AtomicU64::new(0));
            for i in 0..t.max_used() as u64 {
                t.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15), i, |_| {});
            }
            for parts in [1usize, 2, 16] {
                let mut seen = Vec::new();
                for p in 0..parts {
                    t.for_each_in_part(p, parts, |s| {
                        // SAFETY: `for_each_in_part` yields `FULL` slots.
                        seen.push(unsafe { *s.key() })
                    });
                }
                seen.sort_unstable();
                let all: Vec<u64> = (0..t.max_used() as u64).collect();
                assert_eq!(seen, all, "{groups} groups in {parts} parts");
            }
        }
    }

    #[test]
    fn keys_are_dropped_with_the_table() {
        let marker = std::sync::Arc::new(());
        {
            let t: Table<std::sync::Arc<()>, AtomicU64> = Table::new(1, || AtomicU64::new(0));
            t.insert(5, marker.clone(), |_| {});
            let s = t.insert(6, marker.clone(), |_| {});
            t.remove(s);
            assert_eq!(std::sync::Arc::strong_count(&marker), 3);
        }
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }
}
