//! Inserts and removals of one key: the per-key map's changes of
//! structure that are not moves (`grow.rs`) or sweeps (`sweep.rs`). Each
//! runs under the key's shard lock, checks the key against the shard's
//! `current` table there (a lock-free lookup may have missed an insert
//! that raced it), and keeps the shard's counts (`ShardState`) and the
//! map's bound (`len`, "Bounds and eviction" in `sweep.rs`) with it.
//!
//! The invariants are the map's (`mod.rs`) and the table's (`table/`):
//! a key is published in an `EMPTY` slot after its state is prepared
//! ([`Value::init`]), and removed (`TOMB`) only after its state retired.
//!
//! # The caller's code
//! The caller's code that runs under the lock (the key's `Eq` in a probe,
//! and `make`: the key's `Clone` and whatever else the caller computes
//! for a new key) runs before anything is written, so a panic there
//! leaves the shard as it was and gives back the key's place under the
//! bound (`Reservation`), which the key takes only once it is published.
//! `prepare`, which runs between a slot's [`Value::init`] and the key's
//! publication, is the crate's own code and does not panic; what it needs
//! from the caller's code comes from `make`.

use super::{Map, Miss, Value};
use crate::reclaim::Guard;
use crate::sync::{lock_whole, Ordering};
use std::hash::{BuildHasher, Hash};
use std::ptr;

/// One key's place under the map's bound ([`Map::reserve`]), given back
/// ([`Map::unreserve`]) when dropped: on a key found present, or when the
/// insert unwinds before the key is held. Forgotten once the key holds it.
struct Reservation<'m, K, V, S>(&'m Map<K, V, S>);

impl<K, V, S> Drop for Reservation<'_, K, V, S> {
    fn drop(&mut self) {
        self.0.unreserve(1);
    }
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// The key's state, inserting the key (built by `make`) with a fresh
    /// state if it is absent. `None`: the map is full of keys that are not
    /// idle at epoch `now` (see "Bounds and eviction").
    ///
    /// `miss`: as in [`upsert`](Self::upsert).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_or_insert<'g>(
        &'g self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        miss: Miss<'g, K, V>,
        make: impl FnOnce() -> K,
        cfg: &V::Cfg,
        now: u64,
        guard: &'g Guard<'g>,
    ) -> Option<&'g V> {
        self.upsert(
            hash,
            is,
            miss,
            || (make(), ()),
            cfg,
            now,
            guard,
            |_, ()| {},
            |v, _| v,
        )
    }

    /// [`get_or_insert`](Self::get_or_insert), then `f(state, inserted)`
    /// still under the shard lock (so no move runs while `f` writes the
    /// state). For a new key, `make` returns the key and what `prepare`
    /// needs (both under the lock, before anything is written); `prepare`
    /// then writes the new state after [`Value::init`] and before the key
    /// is published, so no other thread ever sees the key without that
    /// write (a key's first add lands with its insert: `keyed/add.rs`).
    /// `prepare` must not panic (module docs). `None`: the map is full.
    ///
    /// `miss`: what a [`lookup`](Map::lookup) of the key under the same
    /// guard found (or [`Miss::NONE`]). If its table is still the shard's
    /// current one and its vacancy unchanged, the key is absent and goes
    /// there, without probing again (`table::Vacancy` says why).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn upsert<'g, P, R>(
        &'g self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        miss: Miss<'g, K, V>,
        make: impl FnOnce() -> (K, P),
        cfg: &V::Cfg,
        now: u64,
        guard: &'g Guard<'g>,
        prepare: impl FnOnce(&V, P),
        f: impl FnOnce(&'g V, bool) -> R,
    ) -> Option<R> {
        // First, outside the lock and before anything is done: freeing a
        // ready table drops its keys, whose `Drop` may panic.
        guard.graveyard().free_one();
        if !self.reserve(now, cfg, guard) {
            return None;
        }
        // Given back if `is` or `make` (the key's `Eq`, `Clone`) panics.
        let reserved = Reservation(self);
        let i = self.shard(hash);
        let mut st = lock_whole(&self.locks[i]);
        let p = &self.ptrs[i];
        // SAFETY: under the lock `current` only changes by our hand, and a
        // table is freed only through the collector (invariants 1, 3).
        let cur = unsafe { p.current.load(Ordering::Acquire).as_ref() };
        if let Some(t) = cur {
            // The lookup's vacancy, if nothing was inserted there since and
            // the table has room: the key is absent and goes there.
            if ptr::eq(t, miss.table) && st.len + st.tombs < t.max_used() && t.still_vacant(miss.at)
            {
                let (key, p) = make();
                let s = t.insert_at(miss.at, hash, key, |v| {
                    v.init(cfg, false);
                    prepare(v, p);
                });
                std::mem::forget(reserved); // the key holds it from here
                st.len += 1;
                return Some(f(s.value(), true));
            }
            if let Some(s) = t.find(hash, &is) {
                debug_assert!(!s.value().is_dead(), "invariant 4");
                drop(reserved);
                return Some(f(s.value(), false));
            }
        }
        let t = self.room_for_one(i, &mut st, cur, cfg, now, guard);
        let (key, p) = make();
        let s = t.insert(hash, key, |v| {
            v.init(cfg, false);
            prepare(v, p);
        });
        std::mem::forget(reserved); // the key holds it from here
        st.len += 1;
        Some(f(s.value(), true))
    }

    /// Removes the key if it is held and `agree(state)` (called under the
    /// shard lock) says so; returns whether it was removed. The state must
    /// be one that lock-free readers may still read after its removal.
    pub(crate) fn remove_if(
        &self,
        hash: u64,
        is: impl Fn(&K) -> bool,
        agree: impl FnOnce(&V) -> bool,
    ) -> bool {
        let i = self.shard(hash);
        let mut st = lock_whole(&self.locks[i]);
        // SAFETY: as in `upsert`.
        let Some(t) = (unsafe { self.ptrs[i].current.load(Ordering::Acquire).as_ref() }) else {
            return false;
        };
        match t.find(hash, &is) {
            Some(s) if agree(s.value()) => {
                t.remove(s);
                st.len -= 1;
                st.tombs += 1;
                self.unreserve(1);
                true
            }
            _ => false,
        }
    }
}
