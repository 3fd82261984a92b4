//! The slice ring: one map of keys per live slice of the window. The
//! per-key engine is *slice-major*: a key's count in slice `e` is an
//! [`Entry`] in the map of slice `e`, and an add touches only that map.
//!
//! # Why slice-major
//! A key-major design keeps each key's whole window (a ring of `S` slice
//! counts) together. On a skewed stream with time moving, nearly every key
//! recurs within the window, so every key ends up holding `S` slices, the
//! structure outgrows the last-level cache, and each key's first add in a
//! new slice touches its cold out-of-line window. Here the hot path only
//! touches the current slice's map, which holds the keys seen in one slice
//! (a few hundred thousand on the benchmarks' Zipf stream, about 16 MB),
//! so it stays cache-resident the way a `DashMap` of one counter per key
//! does.
//! A key's window sum reads `S` maps instead of one ring: reads pay, adds
//! do not. Measured in IMPLEMENTATION.md and BENCHMARKS.md.
//!
//! # Structure
//! `S` slots; slot `e mod S` holds the map of epoch `e` (or of an older
//! epoch of the same residue, or nothing). A map's epoch never changes.
//!
//! # Invariants
//! 1. A slot's map is replaced only by a map of a later epoch (CAS from
//!    the pointer read), so slot epochs only increase; the replaced map is
//!    handed to the collector, never freed while a guard can reach it.
//! 2. `newest` is at least the epoch of every installed map, and a map is
//!    installed for `e` only while `e + S > newest` (a slice already out of
//!    the newest window is never brought back).
//! 3. Every map shares the ring's hasher (so one hash serves every slice's
//!    lookup) and the ring's collector (so one guard covers them all).
//! 4. `head` is only a hint: a slot index, usually the newest map's. An
//!    add trusts the map it names only after checking that map's own
//!    epoch against `now` and against `newest`, exactly the checks of
//!    [`Ring::current`]; so a stale hint costs a division, never a
//!    misfiled add. (A pointer to the newest map would need its own
//!    reclamation rule: a map is freed once out of its slot, and a
//!    pointer elsewhere could outlive that.)
//!
//! # Adds racing a rotation
//! An add at `e` that loaded the map of `e` before it was replaced by the
//! map of `e + kS` counts in the replaced map: it is outside the window of
//! every epoch from `e + S` on, so no read at or after the newest add could
//! include it (exactly as a [`crate::SlidingWindow`] cell recycled under a
//! racing add). An add at an epoch whose slot holds a later one is older
//! than the ring: dropped and reported.
//!
//! # Orderings
//! Slot loads `Acquire`, installs `AcqRel` CAS (the map is built before it
//! is published). `newest` is a `fetch_max`, read `Acquire`. One reader
//! reads the slots by RMW instead (`for_each_map_synced`, a CAS of each
//! slot to itself), so that an install after it reads from it: the
//! hot-key detector's marking (`hot.rs`).

use super::entry::Entry;
use super::slice_map::SliceMap;
use crate::key::KeyHasher;
use crate::map::spares::Spares;
use crate::reclaim::{Graveyard, Guard};
use crate::sync::{Arc, AtomicPtr, AtomicU64, AtomicUsize, Exclusive, Ordering};
use crate::unwind::each_then_resume;
use std::hash::Hash;
use std::ptr;
use strength_reduce::StrengthReducedU64;

/// The ring of slice maps (see the module docs).
pub(crate) struct Ring<K, S> {
    slots: Box<[AtomicPtr<SliceMap<K, S>>]>,
    slices: u64,
    slice_nanos: u64,
    slot_of: StrengthReducedU64,
    /// The slot of the newest map, a hint for [`Ring::head`] (invariant 4).
    head: AtomicUsize,
    /// The newest epoch installed (0 before the first: no epoch is older
    /// than the window of 0).
    newest: AtomicU64,
    hasher: S,
    max_keys: usize,
    /// Where replaced maps and tables wait for the guards: every guard on
    /// the ring and its maps is pinned on it (`crate::reclaim`,
    /// "Ownership").
    graveyard: Graveyard,
    /// The retired maps' tables, for later maps (`crate::map::spares`):
    /// shared with every map and with the parts the collector frees.
    pub(super) spares: Arc<Spares<K, Entry>>,
}

impl<K, S> Ring<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: KeyHasher,
{
    /// An empty ring of `slices` slots of `slice_nanos` each.
    pub(crate) fn new(slices: usize, slice_nanos: u64, hasher: S) -> Self {
        Ring {
            slots: (0..slices)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            slices: slices as u64,
            slice_nanos,
            slot_of: StrengthReducedU64::new(slices as u64),
            head: AtomicUsize::new(0),
            newest: AtomicU64::new(0),
            hasher,
            max_keys: usize::MAX,
            graveyard: Graveyard::default(),
            spares: Arc::new(Spares::new(Entry::vacant)),
        }
    }

    /// Each slice holds at most `max_keys` keys.
    pub(crate) fn set_max_keys(&mut self, max_keys: usize) {
        self.max_keys = max_keys;
    }

    /// The collector every guard on this ring pins.
    #[inline]
    pub(crate) fn graveyard(&self) -> &Graveyard {
        &self.graveyard
    }

    /// The hasher every slice's map uses.
    pub(crate) fn hasher(&self) -> &S {
        &self.hasher
    }

    /// The hash every slice's lookup of `key` uses.
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn slot(&self, e: u64) -> &AtomicPtr<SliceMap<K, S>> {
        &self.slots[(e % self.slot_of) as usize]
    }

    #[inline]
    fn load<'g>(&self, e: u64, _guard: &'g Guard<'_>) -> Option<&'g SliceMap<K, S>> {
        // SAFETY: a map in a slot is freed only through the collector after
        // it was replaced (invariant 1), and the caller holds a guard.
        unsafe { self.slot(e).load(Ordering::Acquire).as_ref() }
    }

    /// The map of epoch `e`, if installed.
    #[inline]
    pub(crate) fn get<'g>(&self, e: u64, guard: &'g Guard<'_>) -> Option<&'g SliceMap<K, S>> {
        self.load(e, guard).filter(|m| m.epoch == e)
    }

    /// Whether `e` is older than the window of the newest slice installed
    /// (`e + S <= newest`: its adds are dropped, and no decision is made
    /// at it). In `u128`, so epochs near `u64::MAX` compare exactly.
    #[inline]
    pub(crate) fn too_old(&self, e: u64) -> bool {
        u128::from(e) + u128::from(self.slices) <= u128::from(self.newest())
    }

    /// Raises `newest` to at least `e` (an epoch whose map is installed):
    /// whoever synchronizes with the caller afterwards sees it (the
    /// hot-key detector's bound, `bound.rs`). An RMW only if it is below
    /// `e`: a line every add reads is not taken from the other cores when
    /// nothing changes. If the `Acquire` load reads `v >= e`, `v` was
    /// written by an RMW (`AcqRel`, as every write of `newest`), which
    /// therefore happens-before the caller's next steps: a thread that
    /// synchronizes with them reads `v` or later.
    pub(crate) fn raise_newest(&self, e: u64) {
        if self.newest.load(Ordering::Acquire) < e {
            self.newest.fetch_max(e, Ordering::AcqRel);
        }
    }

    /// The newest epoch installed.
    #[inline]
    pub(crate) fn newest(&self) -> u64 {
        self.newest.load(Ordering::Acquire)
    }

    /// The map an add at `e` writes, if it is installed and `e` is not
    /// older than the ring. Keeps the `head` hint on the newest map.
    #[inline]
    pub(crate) fn current<'g>(&self, e: u64, guard: &'g Guard<'_>) -> Option<&'g SliceMap<K, S>> {
        let m = self.get(e, guard)?;
        let newest = self.newest();
        if u128::from(e) + u128::from(self.slices) <= u128::from(newest) {
            return None;
        }
        if e == newest {
            self.point_head(e);
        }
        Some(m)
    }

    /// What [`current`](Self::current) returns for the epoch of `now`,
    /// when that is the map the `head` hint names: the common case of
    /// every add, found without dividing `now` (two multiplies of a
    /// reciprocal and their fix-ups, about 30 instructions an add, measured
    /// with callgrind on the benchmarks' Zipf stream). `None` says nothing:
    /// the caller takes the general path.
    #[inline(always)]
    pub(crate) fn head<'g>(&self, now: u64, _guard: &'g Guard<'_>) -> Option<&'g SliceMap<K, S>> {
        let i = self.head.load(Ordering::Relaxed);
        // SAFETY: as in `load` (`i` is only ever a slot index, and a map is
        // only ever in the slot of its epoch, invariant 1).
        let m = unsafe { self.slots[i].load(Ordering::Acquire).as_ref() }?;
        let live = self.newest().saturating_sub(m.epoch) < self.slices;
        (now.wrapping_sub(m.start) < self.slice_nanos && live).then_some(m)
    }

    /// Points the `head` hint at the slot of `e` (a plain store: a stale
    /// hint only sends adds down the general path, which mends it).
    #[inline]
    fn point_head(&self, e: u64) {
        let i = (e % self.slot_of) as usize;
        if self.head.load(Ordering::Relaxed) != i {
            self.head.store(i, Ordering::Relaxed);
        }
    }

    /// The map an add at `e` writes, installing it if needed; `None` if
    /// `e` is older than the ring (invariant 2).
    #[inline]
    pub(crate) fn for_add<'g>(&self, e: u64, guard: &'g Guard<'_>) -> Option<&'g SliceMap<K, S>> {
        match self.load(e, guard) {
            Some(m) if m.epoch == e => (!self.too_old(e)).then_some(m),
            _ => self.install(e, guard),
        }
    }

    #[cold]
    fn install<'g>(&self, e: u64, guard: &'g Guard<'_>) -> Option<&'g SliceMap<K, S>> {
        let slot = self.slot(e);
        let mut cur = slot.load(Ordering::Acquire);
        loop {
            // SAFETY: as in `load`.
            if let Some(m) = unsafe { cur.as_ref() } {
                if m.epoch == e {
                    return Some(m);
                }
                if m.epoch > e {
                    return None;
                }
            }
            if self.too_old(e) {
                return None;
            }
            let fresh = Box::into_raw(Box::new(self.fresh_map(e, guard)));
            match slot.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if self.newest.fetch_max(e, Ordering::AcqRel) <= e {
                        self.point_head(e);
                    }
                    if !cur.is_null() {
                        // SAFETY: `cur` is unlinked (the slot holds `fresh`),
                        // came from `Box::into_raw`, and only this CAS's
                        // winner hands it over.
                        unsafe { guard.defer_free_in_parts(cur) };
                    }
                    // SAFETY: just published; freed only through the
                    // collector.
                    return Some(unsafe { &*fresh });
                }
                Err(actual) => {
                    // SAFETY: never published.
                    drop(unsafe { Box::from_raw(fresh) });
                    cur = actual;
                }
            }
        }
    }

    /// A map for epoch `e`, sized from the newest map (`slice_map.rs`,
    /// "Sizing").
    fn fresh_map(&self, e: u64, guard: &Guard<'_>) -> SliceMap<K, S> {
        let prev = self.get(self.newest(), guard).map(|m| m.map.len());
        SliceMap::new(
            e,
            self.slice_nanos,
            prev,
            self.hasher.clone(),
            &self.spares,
            self.max_keys,
        )
    }

    /// Calls `f` on every map whose epoch is in the window ending at `e`
    /// (`e - S < epoch <= e`).
    #[inline]
    pub(crate) fn for_each_live<'g>(
        &self,
        e: u64,
        _guard: &'g Guard<'_>,
        mut f: impl FnMut(&'g SliceMap<K, S>),
    ) {
        for i in 0..self.slots.len() {
            // SAFETY: as in `load`.
            if let Some(m) = unsafe { self.slots[i].load(Ordering::Acquire).as_ref() } {
                if m.epoch <= e && e - m.epoch < self.slices {
                    f(m);
                }
            }
        }
    }

    /// Calls `f` on every installed map, whatever its epoch.
    pub(crate) fn for_each_map<'g>(
        &self,
        _guard: &'g Guard<'_>,
        mut f: impl FnMut(&'g SliceMap<K, S>),
    ) {
        for s in self.slots.iter() {
            // SAFETY: as in `load`.
            if let Some(m) = unsafe { s.load(Ordering::Acquire).as_ref() } {
                f(m);
            }
        }
    }

    /// Calls `f` on every installed map of an epoch in `lo..=hi` (fewer
    /// than `S` epochs), reading by an RMW (a CAS of its value to itself)
    /// every slot that could still receive a map of that range: a map
    /// installed after that RMW is installed by a CAS that reads from it,
    /// so its installer, and every thread that finds the map through the
    /// slot, sees what the caller did before the call. The hot-key
    /// detector's marking and bound need it (`exact.rs`, "Why the check
    /// runs under the slice's shard lock"; `bound.rs`): a key's home,
    /// published before the call, is seen by a new slice's first add, or
    /// the new slice is seen here.
    ///
    /// A slot that holds a map of epoch `lo` or later needs no RMW: a later
    /// map there is of its epoch plus `S` or more, past `hi` (slot epochs
    /// only increase, invariant 1). So the slot of the newest slice, which
    /// every add reads, is not written when the range holds it.
    pub(crate) fn for_each_map_synced<'g>(
        &self,
        lo: u64,
        hi: u64,
        _guard: &'g Guard<'_>,
        mut f: impl FnMut(&'g SliceMap<K, S>),
    ) {
        debug_assert!(lo <= hi && hi - lo < self.slices);
        for s in self.slots.iter() {
            let mut p = s.load(Ordering::Acquire);
            // SAFETY: as in `load`.
            if !unsafe { p.as_ref() }.is_some_and(|m| m.epoch >= lo) {
                while let Err(actual) =
                    s.compare_exchange(p, p, Ordering::AcqRel, Ordering::Acquire)
                {
                    p = actual;
                }
            }
            // SAFETY: as in `load`.
            if let Some(m) = unsafe { p.as_ref() } {
                if (lo..=hi).contains(&m.epoch) {
                    f(m);
                }
            }
        }
    }

    /// Drops every map older than the window ending at `e`; returns the
    /// entries they held.
    pub(crate) fn retire_before(&self, e: u64, guard: &Guard<'_>) -> usize {
        let mut dropped = 0;
        for s in self.slots.iter() {
            let cur = s.load(Ordering::Acquire);
            // SAFETY: as in `load`.
            let Some(m) = (unsafe { cur.as_ref() }) else {
                continue;
            };
            if u128::from(m.epoch) + u128::from(self.slices) <= u128::from(e)
                && s.compare_exchange(cur, ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                dropped += m.map.len();
                // SAFETY: unlinked by this CAS, handed over once.
                unsafe { guard.defer_free_in_parts(cur) };
            }
        }
        dropped
    }

    /// Entries held by every installed map.
    pub(crate) fn len(&self) -> usize {
        let guard = Guard::pin(&self.graveyard);
        let mut n = 0;
        self.for_each_map(&guard, |m| n += m.map.len());
        n
    }

    /// Heap bytes of the ring, its maps and its spare tables.
    pub(crate) fn memory_bytes(&self) -> usize {
        let guard = Guard::pin(&self.graveyard);
        let mut b = self.slots.len() * std::mem::size_of::<AtomicPtr<SliceMap<K, S>>>()
            + self.spares.memory_bytes();
        self.for_each_map(&guard, |m| {
            b += std::mem::size_of::<SliceMap<K, S>>() + m.map.memory_bytes(&());
        });
        b
    }
}

impl<K, S> Drop for Ring<K, S> {
    /// Frees every installed map, even if a key's `Drop` panics in one of
    /// them (then the first panic goes on: `crate::unwind`).
    fn drop(&mut self) {
        let maps = self.slots.iter_mut().map(|s| s.read_mut());
        each_then_resume(maps.filter(|p| !p.is_null()), |p| {
            // SAFETY: `&mut self`: no guard of this ring is alive, and an
            // installed map was never handed to the collector.
            drop(unsafe { Box::from_raw(p) });
        });
    }
}
