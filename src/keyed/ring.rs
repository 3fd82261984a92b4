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
//! (a few hundred thousand on the issue-10 stream, about 16 MB), so it
//! stays cache-resident the way a `DashMap` of one counter per key does.
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
use super::key::KeyHasher;
use super::limbo::{InParts, Parts};
use super::map::{Map, Value, SHARDS};
use super::reclaim::{Graveyard, Guard};
use super::spares::Spares;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Exclusive, Ordering};
use std::hash::Hash;
use std::ptr;
use strength_reduce::StrengthReducedU64;

/// Keys a slice map's shard holds, about, before the ring gives the next
/// slice's map more shards.
const KEYS_PER_SHARD: usize = 2048;

/// The fewest shards a slice map has: twice the CPUs (rounded up to a
/// power of two), so that threads inserting at once rarely share a lock.
fn min_shards() -> usize {
    2 * crate::stripes::default_cap()
}

/// The map of one slice.
pub(crate) struct SliceMap<K, S> {
    /// The slice (epoch) this map counts.
    pub(crate) epoch: u64,
    /// The slice's first nanosecond (`epoch * slice_nanos`): a time is in
    /// this slice iff `now - start < slice_nanos` (no division).
    start: u64,
    /// Every key with adds in this slice, and its count.
    pub(crate) map: Map<K, Entry, S>,
}

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
    /// Boxed (maps keep its address, and the ring may move), and declared
    /// after the slots: dropped after the maps (`Map::new_in`'s contract).
    graveyard: Box<Graveyard>,
    /// The retired maps' tables, for later maps (`spares.rs`). Boxed, and
    /// declared last: the graveyard's drop may hand it the tables of the
    /// maps it frees (`SparesRef::new`'s contract).
    pub(super) spares: Box<Spares<K, Entry>>,
}

/// A retired slice map is freed a table at a time (`limbo.rs`, "Freed in
/// pieces"; freed whole, a map of a few hundred thousand keys held one
/// request for 7.7-10.8 ms), each table kept as a spare if it fits
/// (`spares.rs`).
impl<K: Send + Sync + 'static, S: Send + 'static> InParts for SliceMap<K, S> {
    fn take_parts(&mut self, parts: &mut Parts) {
        self.map.take_tables(parts);
    }
}

impl Value for Entry {
    type Cfg = ();

    fn vacant() -> Self {
        Entry::vacant()
    }

    // Two zero words and a null pointer (`Entry::vacant`).
    #[cfg(not(loom))]
    const ZEROED_VACANT: bool = true;

    fn init(&self, _cfg: &(), incoming: bool) {
        Entry::init(self, incoming);
    }

    fn move_into(&self, to: &Self, _cfg: &(), _guard: &Guard<'_>, _graveyard: &Graveyard) {
        Entry::move_into(self, to);
    }

    fn try_retire(&self, _now: u64, _cfg: &(), _guard: &Guard<'_>, _graveyard: &Graveyard) -> bool {
        false // whole slices retire, never one key
    }

    fn is_dead(&self) -> bool {
        false
    }

    fn heap_bytes(&self, _cfg: &()) -> usize {
        Entry::heap_bytes(self)
    }
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
            graveyard: Box::default(),
            spares: Box::new(Spares::new(Entry::vacant)),
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

    /// Raises `newest` to at least `e` (an epoch whose map is installed),
    /// by an RMW: whoever synchronizes with the caller afterwards sees it
    /// (the hot-key detector's bound, `bound.rs`).
    pub(crate) fn raise_newest(&self, e: u64) {
        self.newest.fetch_max(e, Ordering::AcqRel);
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
    /// with callgrind on the issue-10 stream). `None` says nothing: the
    /// caller takes the general path.
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
                        unsafe { guard.defer_free_in_parts(cur, &self.graveyard) };
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

    /// A map for epoch `e`, sized for the keys the newest map holds
    /// (slices of a steady stream see similar keys): as many shards as
    /// keep a shard's table small (at least enough that inserting threads
    /// rarely share a lock), each table presized so that filling the map
    /// needs no rebuild. With no newest map to go by (the ring's first),
    /// every shard: a busy first slice spread over `min_shards()` grew
    /// tables of 250K keys on the issue-10 stream, moved 190K keys on one
    /// request (7.8 ms) and took 1.3 ms a table to free; the other shards
    /// cost about 6 KB, once.
    fn fresh_map(&self, e: u64, guard: &Guard<'_>) -> SliceMap<K, S> {
        let newest = self.get(self.newest(), guard);
        let prev = newest.map_or(0, |m| m.map.len());
        let shards = match newest {
            None => SHARDS,
            Some(_) => (prev / KEYS_PER_SHARD).max(min_shards()),
        };
        // SAFETY: the ring's graveyard is dropped after every map: the
        // installed ones in `Drop`, the deferred ones by the collector's
        // own drop; neither drop uses it (field order, see `Ring`).
        let mut map = unsafe { Map::new_in(self.hasher.clone(), &self.graveyard, shards) };
        // SAFETY: the spares are dropped after the graveyard, hence after
        // every map and every part of one (field order, see `Ring`).
        unsafe { map.set_spares(&self.spares) };
        map.set_max_keys(self.max_keys);
        let per_shard = prev.div_ceil(map.shards());
        map.presize(|_| per_shard);
        SliceMap {
            epoch: e,
            start: e.saturating_mul(self.slice_nanos),
            map,
        }
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

    /// [`for_each_map`](Self::for_each_map), reading each slot by an RMW
    /// (a CAS of its value to itself): a map installed after that RMW is
    /// installed by a CAS that reads from it, so its installer, and every
    /// thread that finds the map through the slot, sees what the caller did
    /// before the call. The hot-key detector's marking needs it (`hot.rs`,
    /// "Why the check runs under the slice's shard lock"): a key's home,
    /// published before the call, is seen by a new slice's first add, or
    /// the new slice is seen here.
    pub(crate) fn for_each_map_synced<'g>(
        &self,
        _guard: &'g Guard<'_>,
        mut f: impl FnMut(&'g SliceMap<K, S>),
    ) {
        for s in self.slots.iter() {
            let mut p = s.load(Ordering::Acquire);
            while let Err(actual) = s.compare_exchange(p, p, Ordering::AcqRel, Ordering::Acquire) {
                p = actual;
            }
            // SAFETY: as in `load`.
            if let Some(m) = unsafe { p.as_ref() } {
                f(m);
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
                unsafe { guard.defer_free_in_parts(cur, &self.graveyard) };
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
    fn drop(&mut self) {
        for s in self.slots.iter_mut() {
            let p = s.read_mut();
            if !p.is_null() {
                // SAFETY: `&mut self`: no guard of this ring is alive, and an
                // installed map was never handed to the collector.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::hash_map::RandomState;
    use std::sync::Arc;

    #[test]
    fn a_slice_map_hands_every_table_to_its_parts_and_each_key_is_dropped_once() {
        let ring = Ring::new(2, 1, RandomState::new());
        let keys: Vec<Arc<u64>> = (0..5000).map(Arc::new).collect();
        let guard = Guard::pin(ring.graveyard());
        let mut m = ring.fresh_map(0, &guard);
        // Room from the start (twice a shard's even share): no move leaves
        // a key's clone in a retired table.
        let per_shard = 2 * keys.len() / m.map.shards() + 16;
        m.map.presize(|_| per_shard);
        for k in &keys {
            let h = ring.hash(k);
            m.map
                .get_or_insert(h, |x| x == k, || k.clone(), &(), 0, &guard);
        }
        assert_eq!(m.map.len(), keys.len());
        assert!(keys.iter().all(|k| Arc::strong_count(k) == 2));
        let mut parts = Parts::default();
        m.take_parts(&mut parts);
        // 5000 keys reach every shard: a table each.
        assert_eq!(parts.len(), m.map.shards());
        drop(m);
        assert!(
            keys.iter().all(|k| Arc::strong_count(k) == 2),
            "keys live in the parts"
        );
        drop(parts);
        assert!(
            keys.iter().all(|k| Arc::strong_count(k) == 1),
            "each key dropped once"
        );
    }
}
