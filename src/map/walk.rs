//! Walks over the per-key map: every key held at one instant, the walk's
//! start, and no other, whatever the caller's code or other threads
//! insert while it runs.
//!
//! # Why the start is marked
//! A walk hands each shard's keys to the caller's code (a callback, the
//! key's `Hash` and `Eq`) under no lock, then goes on to the next shard.
//! Visiting "whatever each shard holds when the walk gets there" visits
//! the keys that code inserted into the shards not reached yet: a callback
//! that inserts keys feeds the walk (each call's keys bring more calls)
//! and it never ends; keys that other threads insert meanwhile are visited
//! or not by where they hash. So a walk first *marks* what every shard
//! holds, and then visits only marked keys.
//!
//! # The mark
//! [`Map::mark_all`] takes every shard lock of every map it is given, in
//! order (maps in the order given, a map's shards in index order). The
//! moment the last lock is taken is the walk's start. Then, shard after
//! shard, it records the shard's current table and which of that table's
//! slots are `FULL` (a copy of the control words' high bits: one byte a
//! slot, about 1/32 of the table), and releases that shard's lock. A shard
//! stays locked from the start until it is marked, so no key is inserted
//! or removed in it meanwhile: the marks are the keys held at the start.
//! The maps are marked in the order the caller names (a ring's newest
//! slice first: the map that takes most inserts waits least); the visits
//! come after.
//!
//! No deadlock: every other holder of a shard lock holds one shard lock of
//! one map and takes no other shard lock while holding it (inserts,
//! removals, moves, sweeps, `with_locked`: `insert.rs`, `grow.rs`,
//! `sweep.rs`, `mod.rs`), and two walks take the locks they share in the
//! same order (a slice map stays in its slot of the ring, and walks list
//! the ring's maps by slot).
//!
//! # The visit
//! Shard by shard, under the shard's lock (no move or sweep runs, so
//! `read` sees each state once and final):
//! - if the shard's current table is the marked one, a slot `FULL` then
//!   and `FULL` now holds the same key (a slot is never reused: `table/`,
//!   invariant 1): it is read. A slot `TOMB` now was removed since (not
//!   visited); a slot `FULL` now but not marked holds a key inserted after
//!   the start (not visited).
//! - if the table was replaced (a move to a bigger table, or a sweep's
//!   rebuild, after the start), the marked keys that are still `FULL` in
//!   the marked table (a move leaves its keys there; it stays allocated,
//!   since tables are freed only through the collector and the walk's
//!   guard was pinned before the mark) are looked up again after the lock
//!   is released, one at a time ([`Map::read_found`]): a lock-free lookup
//!   (the key's `Hash` and `Eq`, under no lock), then the shard lock, and
//!   the slot found is read if it is still `FULL` in the current table
//!   (else the key moved again, and is looked up again; or it is gone).
//!
//! Then, the lock released, the batch goes to the caller's `f`. What `f`
//! inserts lands in slots that were `EMPTY` at the start, never marked,
//! and a move it causes sends the shard's marked keys down the second
//! path: the walk visits each marked key at most once, and ends after
//! one pass over the marks.
//!
//! # Cost
//! Inserts of new keys into a shard wait from the start until the shard
//! is marked: the time to take every lock, plus the copies of the control
//! words marked before (adds to held keys take no lock and never wait).
//! Measured on the 2-core machine (load average 7) with 10 slice maps of
//! 1M keys each: every lock taken in 10-26 us, the newest map marked
//! 0.3-0.8 ms later, all of them 3-17 ms later; with 100k keys a map,
//! 5-14 us, 33-121 us and 0.2-1.3 ms. So inserts into the newest slice
//! wait at most about one map's copy. The marks are freed with the walk.

use super::table::{Slot, Table};
use super::{Map, Value};
use crate::reclaim::Guard;
use crate::sync::{lock_whole, Ordering};
use std::hash::{BuildHasher, Hash};

/// Which keys a walk visits: for each shard of one map, the table current
/// at the walk's start and which of its slots were `FULL` (see the module
/// docs). Valid while the guard it was made under is.
pub(crate) struct Marks<'g, K, V> {
    /// Per shard: its table at the start and where its bits begin in
    /// `full`.
    shards: Box<[Option<Marked<'g, K, V>>]>,
    /// Per control group of each marked table, in shard order, the high
    /// bit of each byte that was `FULL` (`Table::full_bits`): one buffer
    /// for the map.
    full: Vec<u64>,
}

/// One shard's table at a walk's start, and where its bits begin in the
/// map's [`Marks`].
type Marked<'g, K, V> = (&'g Table<K, V>, usize);

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// Marks the keys each of `maps` holds at one instant (module docs,
    /// "The mark"): every shard lock of every map taken, in the order of
    /// `maps`; then each map's shards marked, the maps in the order of
    /// `first` (indices into `maps`, each once: the map that receives
    /// most inserts first), each shard's lock released as soon as it is
    /// marked. Returns the marks in the order of `maps`.
    pub(crate) fn mark_all<'g>(
        maps: &[&'g Self],
        first: &[usize],
        guard: &'g Guard<'g>,
    ) -> Vec<Marks<'g, K, V>> {
        let _ = guard;
        debug_assert_eq!(first.len(), maps.len());
        let mut held: Vec<Vec<Option<_>>> = maps
            .iter()
            .map(|m| m.locks.iter().map(|l| Some(lock_whole(l))).collect())
            .collect();
        // Every lock is held: this is the walk's start.
        let mut marks: Vec<Option<Marks<'g, K, V>>> = maps.iter().map(|_| None).collect();
        for &mi in first {
            let m = maps[mi];
            let mut full = Vec::new();
            let shards = m
                .ptrs
                .iter()
                .zip(held[mi].iter_mut())
                .map(|(p, lock)| {
                    debug_assert!(lock.is_some());
                    // SAFETY: under the shard lock (held since the start),
                    // and a table is freed only through the collector,
                    // after `guard` (as in `upsert`, `insert.rs`).
                    let t = unsafe { p.current.load(Ordering::Acquire).as_ref() };
                    let marked = t.map(|t| {
                        let at = full.len();
                        t.full_bits(&mut full);
                        (t, at)
                    });
                    // Marked: this shard may take inserts again.
                    drop(lock.take());
                    marked
                })
                .collect();
            marks[mi] = Some(Marks { shards, full });
        }
        marks
            .into_iter()
            .map(|m| m.expect("`first` names every map"))
            .collect()
    }

    /// Visits every key of `marks` (made by [`mark_all`](Self::mark_all)
    /// for this map, under `guard`) that the map still holds, once, one
    /// shard at a time: under the shard's lock `read(state)`, keeping the
    /// `Some` results with the key; then, the lock released, `f(batch)`
    /// (left empty for the next batch). A marked key whose shard moved to
    /// a new table since the mark is read by itself, after its shard's
    /// batch, in a batch of one (module docs, "The visit").
    ///
    /// The caller's code (the key's `Hash` and `Eq` when a key is looked
    /// up again, and whatever `f` runs) runs under no lock: it may call
    /// back into the map, and a panic there leaves the map whole. Keys it
    /// inserts are not visited. The keys are valid while `guard` is:
    /// tables are freed only through the collector, and a key is never
    /// written or dropped while its table lives (`table/`, invariant 1).
    pub(crate) fn for_each_batch<'g, T>(
        &'g self,
        marks: &Marks<'g, K, V>,
        guard: &'g Guard<'g>,
        mut read: impl FnMut(&V) -> Option<T>,
        mut f: impl FnMut(&mut Vec<(&'g K, T)>),
    ) {
        debug_assert_eq!(marks.shards.len(), self.shards);
        let mut batch = Vec::new();
        let mut again: Vec<&'g K> = Vec::new();
        for (i, marked) in marks.shards.iter().enumerate() {
            let &Some((table, at)) = marked else { continue };
            let full = &marks.full[at..at + table.groups()];
            {
                let _st = lock_whole(&self.locks[i]);
                let cur = self.ptrs[i].current.load(Ordering::Acquire);
                let moved = !std::ptr::eq(cur, table);
                table.for_each_marked(full, |s: &'g Slot<K, V>| {
                    // SAFETY: `FULL` slot (`for_each_marked`), loaded with
                    // `Acquire`; the table lives as long as `guard`.
                    let key = unsafe { s.key() };
                    if moved {
                        again.push(key);
                    } else if let Some(x) = read(s.value()) {
                        batch.push((key, x));
                    }
                });
            }
            if !batch.is_empty() {
                f(&mut batch);
                batch.clear();
            }
            for key in again.drain(..) {
                if let Some(x) = self.read_found(key, guard, &mut read) {
                    batch.push((key, x));
                    f(&mut batch);
                    batch.clear();
                }
            }
        }
    }

    /// `read(state)` of `key` under its shard's lock, if the map holds
    /// it: the key is found lock-free (its `Hash` and `Eq` under no lock),
    /// then read under the lock if its slot is still `FULL` in the shard's
    /// current table; otherwise it moved (or was removed) meanwhile, and is
    /// looked up again. Ends once the key is read or absent: each retry
    /// follows a move of the shard.
    fn read_found<T>(
        &self,
        key: &K,
        guard: &Guard<'_>,
        read: &mut impl FnMut(&V) -> Option<T>,
    ) -> Option<T> {
        let hash = self.hash(key);
        let i = self.shard(hash);
        loop {
            let v = self.get(hash, |k| k == key, guard)?;
            let _st = lock_whole(&self.locks[i]);
            // SAFETY: as in `upsert` (`insert.rs`): under the lock.
            let cur = unsafe { self.ptrs[i].current.load(Ordering::Acquire).as_ref() };
            if cur.is_some_and(|t| t.holds(v)) {
                return read(v);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::Graveyard;
    use crate::sync::AtomicU64;
    use std::collections::hash_map::RandomState;
    use std::collections::BTreeMap;

    /// A count that a move carries over (the slot values' protocol is
    /// not what these tests are about).
    struct Count(AtomicU64);

    impl Value for Count {
        type Cfg = ();
        fn vacant() -> Self {
            Count(AtomicU64::new(0))
        }
        fn init(&self, _: &(), _: bool) {}
        fn move_into(&self, to: &Self, _: &(), _: &Guard<'_>) {
            to.0.store(self.0.swap(0, Ordering::AcqRel), Ordering::Release);
        }
        fn try_retire(&self, _: u64, _: &(), _: &Guard<'_>) -> bool {
            false
        }
        fn is_dead(&self) -> bool {
            false
        }
        fn heap_bytes(&self, _: &()) -> usize {
            0
        }
    }

    type M = Map<u64, Count, RandomState>;

    fn insert(m: &M, k: u64, n: u64, guard: &Guard<'_>) {
        let h = m.hash(&k);
        let made = m.upsert(
            h,
            |x| *x == k,
            crate::map::Miss::NONE,
            || (k, ()),
            &(),
            0,
            guard,
            |c, ()| c.0.store(n, Ordering::Relaxed),
            |_, inserted| inserted,
        );
        assert_eq!(made, Some(true));
    }

    fn walk(m: &M, marks: &Marks<'_, u64, Count>, guard: &Guard<'_>) -> BTreeMap<u64, u64> {
        let mut seen = BTreeMap::new();
        m.for_each_batch(
            marks,
            guard,
            |c| Some(c.0.load(Ordering::Acquire)),
            |batch| {
                for &(k, c) in batch.iter() {
                    assert!(seen.insert(*k, c).is_none(), "{k} twice");
                }
            },
        );
        seen
    }

    /// Shards moved to new tables after the mark (every one of them, some
    /// twice), keys removed and keys inserted meanwhile: the walk reads
    /// every marked key still held, once, from its new table, and no
    /// other; unmoved shards are read from the marked tables.
    #[test]
    fn a_walk_finds_marked_keys_in_the_tables_they_moved_to() {
        let g = Graveyard::default();
        let guard = Guard::pin(&g);
        let m = M::with_shards(RandomState::new(), 8);
        for k in 0..200 {
            insert(&m, k, k + 1, &guard);
        }
        let marks = M::mark_all(&[&m], &[0], &guard).pop().unwrap();
        for k in 1000..1400 {
            insert(&m, k, 1, &guard);
        }
        for k in (0..200).step_by(7) {
            assert!(m.remove_if(m.hash(&k), |x| *x == k, |_| true));
        }
        for i in 0..m.shards() {
            let mut st = lock_whole(&m.locks[i]);
            m.rebuild(i, &mut st, &(), &guard);
            if i % 2 == 0 {
                m.rebuild(i, &mut st, &(), &guard);
            }
        }
        let mut want: BTreeMap<u64, u64> = (0..200)
            .filter(|k| k % 7 != 0)
            .map(|k| (k, k + 1))
            .collect();
        assert_eq!(walk(&m, &marks, &guard), want);
        let marks = M::mark_all(&[&m], &[0], &guard).pop().unwrap();
        for k in 2000..2100 {
            insert(&m, k, 1, &guard);
        }
        want.extend((1000..1400).map(|k| (k, 1)));
        assert_eq!(walk(&m, &marks, &guard), want);
    }
}
