//! The per-key map: shards of open-addressing [`Table`]s whose slots hold
//! each key's state inline, with lock-free lookups. It knows nothing of
//! windows or limits: the state in a slot is a [`Value`], and what it
//! unlinks goes to the collector of the guard it is given
//! (`crate::reclaim`).
//!
//! # Why our own map
//! Measured on a Zipf stream over 1M keys on a 2-core machine
//! (IMPLEMENTATION.md keeps the numbers): a map that returns a pointer to a
//! per-key allocation (`scc::HashIndex` of entries) costs a second and
//! often a third cache miss per add, and a map with a lock per shard
//! (`DashMap`) makes every lookup of a hot key an atomic write on a line
//! all threads share. Here a lookup reads one control group and one slot,
//! writes nothing shared, and the slot holds the key's state.
//!
//! # Structure
//! `SHARDS` shards, picked by bits 32.. of the key's hash. Each shard has a
//! `current` table pointer and an `old` one (non-null only while the shard
//! moves its keys to a bigger table), read lock-free, and a lock taken by
//! every change of structure: inserts, removals, moves, sweeps. A key's
//! *state* changes only through its value's atomics ([`Value`]), never
//! under the lock.
//!
//! # Invariants
//! 1. `current` and `old` change only under the shard lock. A move stores
//!    `old = T` (the table being replaced), then `current = N` (the new,
//!    empty one), moves every key of `T` into `N` (see below), then stores
//!    `old = null` and hands `T` to the collector. `T` keeps every key it
//!    had during the move (moved keys stay `FULL` in `T`, their value
//!    marked moved), so a key present when a lookup starts is in `N` or
//!    `T`, whichever the lookup probes.
//! 2. Moving one key: insert it in `N` with a value prepared for a state
//!    that is moving in ([`Value::init`] with `incoming`), *then* call
//!    [`Value::move_into`], which closes the old value to new writes and
//!    hands its state over. A writer that finds the old value closed looks
//!    the key up again and finds it in `N` (probed first).
//! 3. Under the lock no move is in progress (moves run inside one lock
//!    hold), so `old` is null for every lock holder but the mover.
//! 4. A slot is removed (`TOMB`) only under the lock, after its value was
//!    retired ([`Value::try_retire`]); a `FULL` slot's value is never dead
//!    at a moment the lock is free.
//! 5. Every guard given to a map's methods is pinned on its owner's
//!    graveyard (`crate::reclaim`, "Ownership"): a replaced table goes
//!    there, and is freed only once no guard can reach it.
//!
//! # Lookups
//! Load `current` then `old` (`Acquire`; a move stores them in the other
//! order, so a lookup that sees the new `current` sees `old = T` or the
//! final null), probe `current`, then `old`; if both miss, reload both
//! pointers and return "absent" only if neither changed: a lookup that
//! raced a move starting or ending retries, so a key present throughout is
//! never reported absent. Tables are freed only through the collector
//! (invariant 5), so a pointer a guard has loaded stays valid.
//!
//! # The caller's code (`crate::unwind`)
//! Shard locks are taken poisoned or not (`sync::lock_whole`): the caller's
//! code under a lock (the key's `Eq`, `Clone`, `Hash`) runs in an insert
//! before anything is written (`insert.rs`), and in a move, which cannot be
//! undone halfway, a panic aborts (`grow.rs`). Walks
//! ([`Map::for_each_batch`], `walk.rs`) run it under no lock. A key's `Drop` runs when
//! a table is freed: at the start of an insert (`Graveyard::free_one`) or
//! when the map is dropped, every key dropped even if one panics. The rest
//! of the map does not panic.
//!
//! # Walks
//! `walk.rs`: a walk marks the keys every shard holds at one instant (all
//! shard locks held at once), then visits those and no others, so that
//! keys inserted during it (by its own callback or by other threads) are
//! not visited and it ends after one pass.
//!
//! # Changes of structure
//! `insert.rs`: inserts and removals of one key. `grow.rs`: moving a shard
//! to a bigger table. `sweep.rs`: the bound on keys, and sweeps of idle
//! keys. All run under the shard lock. `teardown.rs`: how a map's own
//! tables are freed, with it or a table at a time.
//! `model.rs` (loom only): the map behind the real collector, for the
//! models that race lookups against the frees of its tables.

mod grow;
mod insert;
pub(crate) mod lines;
#[cfg(loom)]
pub mod model;
mod prefetch;
pub(crate) use prefetch::{Ahead, Now, Probe};
pub(crate) mod spares;
mod sweep;
pub(crate) mod table;
mod teardown;
mod value;
mod walk;

pub(crate) use value::Value;
pub(crate) use walk::Marks;

use self::spares::Spares;
use self::table::{Table, Vacancy};
use crate::reclaim::Guard;
use crate::sync::{lock_whole, Arc, AtomicPtr, AtomicU64, AtomicUsize, Exclusive, Mutex, Ordering};
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::ptr;

/// Shards per map: inserts into different shards do not wait for each
/// other, and a rebuild moves 1/`SHARDS` of the keys at a time.
#[cfg(not(any(loom, miri)))]
pub(crate) const SHARDS: usize = 128;
/// Miri interprets every shard a sweep, a `len` or a drop visits: eight
/// keep the same paths (several shards, tables grown and moved) at a
/// sixteenth of the cost.
#[cfg(all(miri, not(loom)))]
pub(crate) const SHARDS: usize = 8;
/// Loom models use a handful of keys: two shards keep their tables tiny.
#[cfg(loom)]
pub(crate) const SHARDS: usize = 2;

/// A shard's table pointers, read by every lookup.
struct Ptrs<K, V> {
    current: AtomicPtr<Table<K, V>>,
    old: AtomicPtr<Table<K, V>>,
}

/// A shard's bookkeeping, owned by its lock.
#[derive(Default)]
struct ShardState {
    /// `FULL` slots of `current`.
    len: usize,
    /// `TOMB` slots of `current`.
    tombs: usize,
    /// Keys the shard's first table is sized for ([`Map::presize`]).
    hint: usize,
}

/// Where a [`Map::lookup`] that missed would have found its key: the
/// shard's current table as it probed it, and the vacancy its probe ended
/// at (`table::Vacancy`). Valid under the guard of the lookup, which keeps
/// that table alive; `upsert` uses it only if, under the shard lock, the
/// table is still current and the vacancy unchanged.
pub(crate) struct Miss<'g, K, V> {
    table: *const Table<K, V>,
    at: Vacancy,
    _guard: PhantomData<&'g Table<K, V>>,
}

impl<K, V> Clone for Miss<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for Miss<'_, K, V> {}

impl<K, V> Miss<'_, K, V> {
    /// Nothing known: `upsert` probes.
    pub(crate) const NONE: Self = Miss {
        table: ptr::null(),
        at: Vacancy::NONE,
        _guard: PhantomData,
    };

    #[inline(always)]
    pub(super) fn at(table: *const Table<K, V>, at: Vacancy) -> Self {
        Miss {
            table,
            at,
            _guard: PhantomData,
        }
    }
}

/// The per-key map (see the module docs).
pub(crate) struct Map<K, V, S> {
    ptrs: Box<[Ptrs<K, V>]>,
    locks: Box<[Mutex<ShardState>]>,
    hasher: S,
    /// Keys held (see "Bounds and eviction"); counted only when
    /// `max_keys` bounds them (an unbounded map sums its shards instead,
    /// so that inserts do not share one contended counter).
    len: AtomicUsize,
    max_keys: usize,
    /// Shard parts swept at each new sweep step (0: no automatic
    /// sweeping), and the parts a shard is swept in (`sweep.rs`).
    sweep_per_step: usize,
    sweep_parts: usize,
    /// The latest automatic sweep step, and the cursor over the parts.
    swept: AtomicU64,
    cursor: AtomicUsize,
    /// `1 + epoch` of the last sweep forced by a full map (0: none).
    full_swept: AtomicU64,
    /// Shards of this map (a power of two, at most [`SHARDS`]).
    shards: usize,
    /// Where its tables are taken from and go back to (a ring's slice
    /// maps, `spares.rs`); none: allocated and freed.
    spares: Option<Arc<Spares<K, V>>>,
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// The bytes a shard of this map holds besides its table's slots and
    /// control words: its pointers, its lock, and its table's header (what
    /// [`memory_bytes`](Self::memory_bytes) counts for it).
    pub(crate) fn shard_bytes() -> usize {
        std::mem::size_of::<Ptrs<K, V>>()
            + std::mem::size_of::<Mutex<ShardState>>()
            + std::mem::size_of::<Table<K, V>>()
    }

    /// An empty map of every shard, without automatic sweeping
    /// ([`set_sweep`](Self::set_sweep) turns it on).
    pub(crate) fn new(hasher: S) -> Self {
        Self::with_shards(hasher, SHARDS)
    }

    /// An empty map of `shards` shards, rounded up to a power of two, at
    /// most [`SHARDS`]: a map that will hold few keys needs few locks.
    pub(crate) fn with_shards(hasher: S, shards: usize) -> Self {
        let shards = shards.clamp(1, SHARDS).next_power_of_two();
        Map {
            shards,
            len: AtomicUsize::new(0),
            max_keys: usize::MAX,
            sweep_per_step: 0,
            sweep_parts: 1,
            swept: AtomicU64::new(0),
            cursor: AtomicUsize::new(0),
            full_swept: AtomicU64::new(0),
            ptrs: (0..shards)
                .map(|_| Ptrs {
                    current: AtomicPtr::new(ptr::null_mut()),
                    old: AtomicPtr::new(ptr::null_mut()),
                })
                .collect(),
            locks: (0..shards)
                .map(|_| Mutex::new(ShardState::default()))
                .collect(),
            hasher,
            spares: None,
        }
    }

    /// Sweeps automatically `per_step` parts at each new sweep step (0:
    /// off), a shard's table being swept in `parts` parts (at least 1).
    pub(crate) fn set_sweep(&mut self, per_step: usize, parts: usize) {
        self.sweep_parts = parts.max(1);
        self.sweep_per_step = per_step.min(self.shards * self.sweep_parts);
    }

    /// Sizes each shard's first table for `hint(shard)` keys (a map that
    /// knows how many keys it will get skips the rebuilds of growing to
    /// them). Before any insert.
    pub(crate) fn presize(&mut self, hint: impl Fn(usize) -> usize) {
        for (i, l) in self.locks.iter_mut().enumerate() {
            l.get_mut().unwrap_or_else(|e| e.into_inner()).hint = hint(i);
        }
    }

    /// Takes new tables from `spares` when one fits, and hands its tables
    /// to them when the collector frees the map (`take_tables`).
    pub(crate) fn set_spares(&mut self, spares: Arc<Spares<K, V>>) {
        self.spares = Some(spares);
    }

    /// The number of shards.
    pub(crate) fn shards(&self) -> usize {
        self.shards
    }

    /// Bounds the keys held.
    pub(crate) fn set_max_keys(&mut self, max_keys: usize) {
        // The count is kept only while bounded: take it up from the shards.
        let held = self
            .locks
            .iter_mut()
            .map(|l| l.get_mut().unwrap_or_else(|e| e.into_inner()).len)
            .sum();
        self.len.write_mut(held);
        self.max_keys = max_keys;
    }

    /// The hash every lookup of `key` uses (a borrowed form hashes as its
    /// owned key: `Borrow`'s contract).
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards - 1)
    }

    /// The key's state, if the key is held. Lock-free. Always inlined:
    /// it is most of an add, and a call frame costs an add ~16
    /// instructions (callgrind, the benchmarks' Zipf stream).
    #[inline(always)]
    pub(crate) fn get<'g>(
        &'g self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        guard: &'g Guard<'g>,
    ) -> Option<&'g V> {
        self.lookup(hash, is, guard).ok()
    }

    /// [`get`](Self::get), saying on a miss where the key would go in the
    /// shard's current table ([`Miss`]), so that an insert right after
    /// (`upsert`) need not probe again.
    #[inline(always)]
    pub(crate) fn lookup<'g>(
        &'g self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        _guard: &'g Guard<'g>,
    ) -> Result<&'g V, Miss<'g, K, V>> {
        let p = &self.ptrs[self.shard(hash)];
        loop {
            // Both pointers before either probe (the module docs): loading
            // `old` only after a miss in `current` would let a lookup probe
            // the new table before the key moved in, then see the move's
            // final null `old`, and report a present key absent
            // (`loom-tests/tests/keyed.rs`, read_racing_a_table_move).
            let cur = p.current.load(Ordering::Acquire);
            let old = p.old.load(Ordering::Acquire);
            let mut miss = Miss::NONE;
            // SAFETY: a non-null table pointer loaded under a guard stays
            // valid until the guard is dropped (tables are freed through
            // the collector, invariant 1).
            if let Some(t) = unsafe { cur.as_ref() } {
                match t.search(hash, &is) {
                    Ok(s) => return Ok(s.value()),
                    Err(v) => miss = Miss::at(cur.cast_const(), v),
                }
            }
            // SAFETY: as above.
            if let Some(t) = unsafe { old.as_ref() } {
                if let Some(s) = t.find(hash, &is) {
                    return Ok(s.value());
                }
            }
            if p.current.load(Ordering::Acquire) == cur && p.old.load(Ordering::Acquire) == old {
                return Err(miss);
            }
        }
    }

    /// Starts fetching the slot a [`get`](Self::get) of `hash` most likely
    /// reads, in the shard's current table (`Table::prefetch`). A hint;
    /// nothing under loom.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn prefetch(&self, hash: u64, guard: &Guard<'_>) {
        #[cfg(not(loom))]
        {
            let cur = self.ptrs[self.shard(hash)].current.load(Ordering::Acquire);
            // SAFETY: as in `get`: loaded under a guard.
            if let Some(t) = unsafe { cur.as_ref() } {
                t.prefetch(hash);
            }
        }
    }

    /// Loom models only: moves every key of `hash`'s shard to a new table,
    /// as an insert into a full table would.
    #[cfg(loom)]
    pub(crate) fn rebuild_shard(&self, hash: u64, cfg: &V::Cfg, guard: &Guard<'_>) {
        let i = self.shard(hash);
        let mut st = lock_whole(&self.locks[i]);
        self.rebuild(i, &mut st, cfg, guard);
    }

    /// Calls `f` on the key's state under its shard's lock (no move or
    /// sweep of the shard runs meanwhile); `None` if the key is absent.
    pub(crate) fn with_locked<T>(
        &self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        f: impl FnOnce(&V) -> T,
    ) -> Option<T> {
        let i = self.shard(hash);
        let _st = lock_whole(&self.locks[i]);
        // SAFETY: as in `upsert` (`insert.rs`): under the lock.
        let t = unsafe { self.ptrs[i].current.load(Ordering::Acquire).as_ref() }?;
        t.find(hash, is).map(|s| f(s.value()))
    }

    /// Bytes held by the tables and the states' heap parts.
    pub(crate) fn memory_bytes(&self, cfg: &V::Cfg) -> usize {
        let mut b = std::mem::size_of::<Self>()
            + self.shards
                * (std::mem::size_of::<Ptrs<K, V>>() + std::mem::size_of::<Mutex<ShardState>>());
        for i in 0..self.shards {
            let _st = lock_whole(&self.locks[i]);
            // SAFETY: as in `upsert` (`insert.rs`): under the lock.
            if let Some(t) = unsafe { self.ptrs[i].current.load(Ordering::Acquire).as_ref() } {
                b += t.memory_bytes();
                t.for_each(|s| b += s.value().heap_bytes(cfg));
            }
        }
        b
    }
}

impl<K, V, S> Map<K, V, S> {
    /// Keys held now (never more than `max_keys`).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        if self.max_keys != usize::MAX {
            return self.len.load(Ordering::Acquire);
        }
        self.locks.iter().map(|l| lock_whole(l).len).sum()
    }
}
