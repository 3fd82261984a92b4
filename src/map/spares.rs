//! Spare tables: the tables of a ring's retired slice maps, cleared, kept
//! for the maps of later slices.
//!
//! # Why
//! Every slice opens a new map, and each of its shards makes a table on
//! its first insert. Allocated fresh, a table costs `calloc` its zeroing
//! and the page faults of memory the allocator reuses (on the benchmarks'
//! Zipf stream ~50 µs for each of a map's 128 first tables, ~6 ms a slice;
//! ~370 µs each in some runs), and its free walks every slot and unmaps
//! (BENCHMARKS.md, per-key engine: a retired slice map's tables reused).
//! Meanwhile the map that left the window frees tables of the same size.
//! Here its tables are cleared and handed to the new map instead: the
//! pages stay mapped, the zeroing is limited to the slots that held keys,
//! and nothing is unmapped.
//!
//! # The path of a table
//! A retired slice map is freed in parts (`limbo.rs`): each of its tables
//! goes to the ready list wrapped in a [`Spare`], whose drop (when the
//! collector frees that part, on some insert) clears the table and
//! [`keep`](Spares::keep)s it. A map that needs a table asks
//! [`take`](Spares::take) before allocating one (`map/grow.rs`).
//!
//! # Invariants
//! 1. A table enters the spares only through a [`Spare`]'s drop: a part of
//!    a slice map the collector freed, so no guard can reach it. It is
//!    cleared (`Table::clear`) before it is kept: a spare is a table as a
//!    new one is, every control byte `EMPTY` and every value vacant.
//! 2. A spare belongs to the list alone; `take` hands it to one map, which
//!    publishes it as it would a new table (the shard pointer's `Release`
//!    store after the table is written).
//! 3. At most as many tables as the newest map has shards (at most
//!    [`SHARDS`]) are kept, each of a size that would fit
//!    the latest request (`fits`); a table that does not fit is freed, and
//!    each request that finds no fit frees one spare that does not fit. So
//!    the spares hold about one map's tables at most, and a ring whose
//!    tables shrink lets its old ones go.

use super::table::Table;
use super::SHARDS;
use crate::sync::{lock_whole as lock, Arc, AtomicUsize, Mutex, Ordering};

/// The spare tables of one ring (module docs).
pub(crate) struct Spares<K, V> {
    /// Boxed: a map's shard points at its table's box (`Box::into_raw`),
    /// which is handed over and back as it is. Locked poisoned or not
    /// (`lock_whole`): a panic while holding it leaves the list whole (one
    /// push or removal).
    #[allow(clippy::vec_box)]
    list: Mutex<Vec<Box<Table<K, V>>>>,
    /// Groups the latest [`take`](Self::take) asked for (0: none yet).
    wanted: AtomicUsize,
    /// The most tables kept: the shards of the newest map
    /// ([`keep_at_most`](Self::keep_at_most)), at most [`SHARDS`].
    most: AtomicUsize,
    vacant: fn() -> V,
    /// Tables taken (tests).
    #[cfg(test)]
    taken: AtomicUsize,
}

/// Whether a table of `groups` groups serves a request for `want`: at
/// least as big, and at most half as big again (a bigger one would hold
/// memory the map did not ask for).
fn fits(groups: usize, want: usize) -> bool {
    want <= groups && groups <= want + want / 2
}

impl<K, V> Spares<K, V> {
    /// No spares; a cleared slot's value is `vacant()`.
    pub(crate) fn new(vacant: fn() -> V) -> Self {
        Spares {
            list: Mutex::new(Vec::new()),
            wanted: AtomicUsize::new(0),
            most: AtomicUsize::new(SHARDS),
            vacant,
            #[cfg(test)]
            taken: AtomicUsize::new(0),
        }
    }

    /// A spare table of at least `want` groups (at most half as many
    /// again), if one is kept. On a miss, frees one spare that does not
    /// fit (invariant 3).
    pub(crate) fn take(&self, want: usize) -> Option<Box<Table<K, V>>> {
        self.wanted.store(want, Ordering::Relaxed);
        let mut list = lock(&self.list);
        if let Some(i) = list.iter().position(|t| fits(t.groups(), want)) {
            #[cfg(test)]
            self.taken.fetch_add(1, Ordering::Relaxed);
            return Some(list.swap_remove(i));
        }
        let stale = list.pop();
        drop(list);
        drop(stale);
        None
    }

    /// Clears a retired table and keeps it, if it fits the latest request
    /// and there is room; frees it otherwise. The caller owns it: no guard
    /// can reach it (invariant 1).
    fn keep(&self, mut t: Box<Table<K, V>>) {
        let most = self.most.load(Ordering::Relaxed);
        if !fits(t.groups(), self.wanted.load(Ordering::Relaxed)) || lock(&self.list).len() >= most
        {
            return;
        }
        // Cleared outside the lock: it walks the table.
        t.clear(self.vacant);
        let mut list = lock(&self.list);
        if list.len() < most {
            list.push(t);
        }
    }

    /// Keeps at most `n` tables (at most [`SHARDS`]) from now on: a new
    /// map's shards, so that the spares hold one map's tables at most even
    /// when the collector frees several retired maps at once (a bounded
    /// ring's memory counts one map of spares, `keyed/sketch.rs`).
    pub(crate) fn keep_at_most(&self, n: usize) {
        self.most.store(n.min(SHARDS), Ordering::Relaxed);
    }

    /// Tables taken so far.
    #[cfg(test)]
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Relaxed)
    }

    /// Heap bytes of the spares.
    pub(crate) fn memory_bytes(&self) -> usize {
        lock(&self.list).iter().map(|t| t.memory_bytes()).sum()
    }
}

/// A retired table on its way to the spares: a part of a freed slice map
/// (`limbo.rs`), kept when the collector frees it.
pub(crate) struct Spare<K, V> {
    table: Option<Box<Table<K, V>>>,
    to: Arc<Spares<K, V>>,
}

impl<K, V> Spare<K, V> {
    /// `table` (which no guard can reach) for `to`.
    pub(crate) fn new(table: Box<Table<K, V>>, to: &Arc<Spares<K, V>>) -> Self {
        Spare {
            table: Some(table),
            to: Arc::clone(to),
        }
    }
}

impl<K, V> Drop for Spare<K, V> {
    fn drop(&mut self) {
        if let Some(t) = self.table.take() {
            self.to.keep(t);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;
    use std::sync::Arc;

    fn hash(k: u64) -> u64 {
        k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// A table holding `keys`, each slot's value set to its key + 1.
    fn table(groups: usize, keys: &[Arc<u64>]) -> Box<Table<Arc<u64>, AtomicU64>> {
        let t = Box::new(Table::new(groups, || AtomicU64::new(0)));
        for k in keys {
            t.insert(hash(**k), k.clone(), |v| {
                v.store(**k + 1, Ordering::Relaxed)
            });
        }
        t
    }

    #[test]
    fn a_spare_is_cleared_kept_and_taken_by_size() {
        let spares = Arc::new(Spares::new(|| AtomicU64::new(0)));
        let to = &spares;
        let keys: Vec<Arc<u64>> = (0..40).map(Arc::new).collect();
        // Nothing asked for yet: nothing fits, the table is freed.
        drop(Spare::new(table(10, &keys), to));
        assert!(keys.iter().all(|k| Arc::strong_count(k) == 1));
        assert!(spares.take(10).is_none());
        // Now 10 groups are wanted: 10 to 15 fit.
        for groups in [9, 10, 15, 16] {
            drop(Spare::new(table(groups, &keys), to));
        }
        assert!(
            keys.iter().all(|k| Arc::strong_count(k) == 1),
            "keys dropped"
        );
        let mut got: Vec<usize> = std::iter::from_fn(|| spares.take(10))
            .map(|t| t.groups())
            .collect();
        got.sort();
        assert_eq!(got, [10, 15]);
        // A taken table is as new: no key, every value vacant; every key
        // can be inserted and found.
        drop(Spare::new(table(10, &keys), to));
        let t = spares.take(10).expect("kept");
        for k in &keys {
            assert!(t.find(hash(**k), |x| x == k).is_none());
            let s = t.insert(hash(**k), k.clone(), |_| {});
            assert_eq!(s.value().load(Ordering::Relaxed), 0, "a vacant value");
        }
        assert!(keys.iter().all(|k| t.find(hash(**k), |x| x == k).is_some()));
        drop(t);
        assert!(keys.iter().all(|k| Arc::strong_count(k) == 1));
    }

    #[test]
    fn a_miss_frees_a_spare_that_does_not_fit_and_the_list_is_bounded() {
        let spares = Arc::new(Spares::new(|| AtomicU64::new(0)));
        let to = &spares;
        assert!(spares.take(4).is_none());
        for _ in 0..SHARDS + 3 {
            drop(Spare::new(table(4, &[]), to));
        }
        assert_eq!(lock(&spares.list).len(), SHARDS);
        // Tables shrink: each miss lets one old spare go.
        for n in 1..=3 {
            assert!(spares.take(2).is_none());
            assert_eq!(lock(&spares.list).len(), SHARDS - n);
        }
    }
}
