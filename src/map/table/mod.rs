//! One open-addressing hash table of the per-key map: control bytes in
//! groups of eight (the SwissTable layout) and slots that hold each key and
//! its per-key state **inline**, so that an add on a known key touches the
//! control group (1 byte a slot: a 1M-key map's control bytes fit in the
//! L2/L3 caches) and one slot, which holds everything the add writes.
//!
//! # Control bytes
//! `EMPTY`, `TOMB` or `FULL(h2)`, eight to a group, one `AtomicU64`
//! (`ctrl.rs`: the encoding and the match of a byte in a group). A lookup
//! prefetches its group's slots as it reads the control word
//! (`prefetch.rs`).
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

use self::ctrl::{first, h2, is_full, matches, EMPTY, TOMB};
use super::lines::LineSlice;
use crate::unwind::FirstPanic;

mod ctrl;
mod marks;
mod prefetch;

pub(crate) use self::ctrl::GROUP;

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

/// Where a probe that missed its key ended ([`Table::search`]): the first
/// group of the key's probe sequence with an `EMPTY` byte, and its word as
/// read.
///
/// If that word is unchanged when read again under the shard lock, the key
/// is still absent and an insert of it goes to that group's first `EMPTY`
/// slot: bytes only go `EMPTY -> FULL -> TOMB` (invariant 1), so the
/// groups the probe passed still have no `EMPTY` byte and the word cannot
/// return to a value it left; an insert of the key would have gone to this
/// group (the first of its sequence with an `EMPTY`) and changed the word;
/// and the `FULL` bytes the probe compared hold the same keys. The table
/// must be the one searched, kept alive by the searcher's guard (so its
/// address is not another table's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Vacancy {
    group: usize,
    word: u64,
}

impl Vacancy {
    /// No vacancy known (a probe that ran through every group: never, by
    /// invariant 3); [`Table::still_vacant`] is false for it.
    pub(crate) const NONE: Vacancy = Vacancy {
        group: usize::MAX,
        word: 0,
    };
}

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
    ///
    /// A key's `Drop` that panics does not stop the others: every key is
    /// dropped, every byte is `EMPTY`, and then the first panic goes on
    /// (`crate::unwind`).
    fn drain_keys(&mut self, mut f: impl FnMut(&mut V)) {
        let mut first = FirstPanic::default();
        for (g, word) in self.ctrl.iter_mut().enumerate() {
            let bytes = word.read_mut().to_ne_bytes();
            // `EMPTY` first: each key below is dropped once.
            word.write_mut(u64::from_ne_bytes([EMPTY; GROUP]));
            for (b, &c) in bytes.iter().enumerate() {
                if c == EMPTY {
                    continue;
                }
                let s = &mut self.slots[g * GROUP + b];
                f(&mut s.value);
                if std::mem::needs_drop::<K>() {
                    // SAFETY: a `FULL` or `TOMB` slot holds an initialized
                    // key (invariant 1), dropped once: the slot is `EMPTY`
                    // now.
                    first.run(|| unsafe { s.key.get_mut().assume_init_drop() });
                }
            }
        }
        first.resume();
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
    #[inline]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<&Slot<K, V>> {
        self.search(hash, eq).ok()
    }

    /// [`find`](Self::find), saying on a miss where the probe ended: the
    /// first group of the key's probe sequence with an `EMPTY` byte, and
    /// its word as the probe read it ([`Vacancy`]: an insert of the key
    /// under the shard lock can start there instead of probing again).
    ///
    /// The probe of every add: written out, without bounds checks (the
    /// indices are in range by construction), it is ~10 instructions an
    /// add shorter than the iterator form (callgrind, the benchmarks' Zipf
    /// stream).
    #[inline]
    pub(crate) fn search(
        &self,
        hash: u64,
        eq: impl FnMut(&K) -> bool,
    ) -> Result<&Slot<K, V>, Vacancy> {
        self.search_with::<true>(hash, eq)
    }

    /// [`search`](Self::search), prefetching the first group's slots
    /// (`PREFETCH`) or not (a batch fetched the slot already:
    /// `crate::keyed::batch`).
    #[inline(always)]
    pub(crate) fn search_with<const PREFETCH: bool>(
        &self,
        hash: u64,
        mut eq: impl FnMut(&K) -> bool,
    ) -> Result<&Slot<K, V>, Vacancy> {
        let tag = h2(hash);
        let n = self.ctrl.len();
        debug_assert_eq!(self.slots.len(), n * GROUP);
        let mut g = self.home(hash);
        if PREFETCH {
            self.prefetch_group(g);
        }
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
                    return Ok(slot);
                }
                m &= m - 1;
            }
            if matches(group, EMPTY) != 0 {
                return Err(Vacancy {
                    group: g,
                    word: group,
                });
            }
            g += 1;
            if g == n {
                g = 0;
            }
        }
        Err(Vacancy::NONE)
    }

    /// Whether `v`, from a [`search`](Self::search) of this table that
    /// missed, still says where the key would be inserted: the group's
    /// word is unchanged. Then the key is still absent, and its first
    /// `EMPTY` slot is the group's first (see [`Vacancy`]). The caller
    /// holds the shard lock.
    #[inline]
    pub(crate) fn still_vacant(&self, v: Vacancy) -> bool {
        self.ctrl
            .get(v.group)
            .is_some_and(|w| w.load(Ordering::Relaxed) == v.word)
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
            // The value first: if `init` unwinds, the key is still ours and
            // is dropped, and the slot holds none.
            init(&slot.value);
            // SAFETY: the slot is `EMPTY`, so no reader looks at its key,
            // and the shard lock makes us its only writer.
            unsafe { (*slot.key.get()).write(key) };
            let mut bytes = group.to_ne_bytes();
            bytes[i] = h2(hash);
            self.ctrl[g].store(u64::from_ne_bytes(bytes), Ordering::Release);
            return slot;
        }
        unreachable!("a table always keeps EMPTY slots (invariant 3)")
    }

    /// [`insert`](Self::insert) at a vacancy that
    /// [`still_vacant`](Self::still_vacant) confirmed under the shard lock:
    /// the group's first `EMPTY` slot, without a probe.
    #[inline]
    pub(crate) fn insert_at(
        &self,
        v: Vacancy,
        hash: u64,
        key: K,
        init: impl FnOnce(&V),
    ) -> &Slot<K, V> {
        let m = matches(v.word, EMPTY);
        debug_assert!(m != 0 && self.still_vacant(v));
        let i = first(m);
        let slot = &self.slots[v.group * GROUP + i];
        init(&slot.value);
        // SAFETY: as in `insert`: the slot is `EMPTY` (its group's word is
        // the one read, under the shard lock) and we are its only writer.
        unsafe { (*slot.key.get()).write(key) };
        let mut bytes = v.word.to_ne_bytes();
        bytes[i] = h2(hash);
        self.ctrl[v.group].store(u64::from_ne_bytes(bytes), Ordering::Release);
        slot
    }

    /// Turns `slot` (`FULL`, of this table) into `TOMB`. The caller holds
    /// the shard lock.
    pub(crate) fn remove(&self, slot: &Slot<K, V>) {
        let i = self.index_of(slot);
        let (g, b) = (i / GROUP, i % GROUP);
        let mut bytes = self.ctrl[g].load(Ordering::Relaxed).to_ne_bytes();
        debug_assert!(is_full(bytes[b]), "removing a slot that is not FULL");
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
    pub(crate) fn for_each<'t>(&'t self, f: impl FnMut(&'t Slot<K, V>)) {
        self.for_each_in_part(0, 1, f)
    }

    /// [`for_each`](Self::for_each) over part `part` of `parts` (`part <
    /// parts`): the groups cut into `parts` runs, `n * part / parts ..
    /// n * (part + 1) / parts` of the table's `n`. The parts of a table
    /// cover every group once; a part may be empty.
    pub(crate) fn for_each_in_part<'t>(
        &'t self,
        part: usize,
        parts: usize,
        mut f: impl FnMut(&'t Slot<K, V>),
    ) {
        let n = self.ctrl.len();
        let (start, end) = (n * part / parts, n * (part + 1) / parts);
        for (g, word) in self.ctrl[start..end].iter().enumerate() {
            let g = start + g;
            let bytes = word.load(Ordering::Acquire).to_ne_bytes();
            for (b, &c) in bytes.iter().enumerate() {
                if is_full(c) {
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
    fn insert_find_remove() {
        let t: Table<u64, AtomicU64> = Table::new(4, || AtomicU64::new(0));
        // Hashes chosen to collide on the group and on h2.
        let hashes: Vec<u64> = (0..t.max_used() as u64).map(|i| (i << 57) | 1).collect();
        for (i, &h) in hashes.iter().enumerate().take(t.max_used()) {
            let s = t.insert(h, i as u64, |v| v.store(i as u64 * 10, Ordering::Relaxed));
            // SAFETY: just inserted: `FULL`.
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
        for groups in [1usize, 3, 16, crate::sized(37, 5)] {
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
