//! A batch of lookups (`crate::keyed::batch`): for each key of a group,
//! load its shard's table pointers once and start fetching the control
//! word its lookup will read first ([`Map::prefetch_ctrl`]), then, once
//! those are on their way, the slot the word names
//! ([`Map::prefetch_slot`]), so that the group's misses overlap instead of
//! following each other; then each lookup probes the tables found then
//! ([`Map::lookup_ahead`]), without loading the pointers or fetching the
//! group again. The hints change nothing; a lookup ahead is a `lookup`
//! whose pointers were loaded earlier under the same guard, which the
//! protocol of `mod.rs` ("Lookups") allows: its argument does not depend
//! on when the probes follow the loads.

use super::table::Table;
use super::{Map, Miss, Ptrs, Value};
use crate::reclaim::Guard;
use crate::sync::Ordering;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;

/// What a batch's first pass found for one key ([`Map::prefetch_ctrl`]):
/// its shard's table pointers as loaded then, under the batch's guard.
/// [`Map::lookup_ahead`] probes those tables, as a [`Map::lookup`] that
/// loaded its pointers at that moment would.
pub(crate) struct Ahead<'g, K, V> {
    ptrs: *const Ptrs<K, V>,
    cur: *const Table<K, V>,
    old: *const Table<K, V>,
    _guard: PhantomData<&'g Table<K, V>>,
}

impl<K, V> Clone for Ahead<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for Ahead<'_, K, V> {}

impl<K, V> Ahead<'_, K, V> {
    /// A placeholder (an item that is not looked up); never probed.
    pub(crate) const NONE: Self = Ahead {
        ptrs: std::ptr::null(),
        cur: std::ptr::null(),
        old: std::ptr::null(),
        _guard: PhantomData,
    };
}

/// How a lookup finds its key's shard tables: loaded by the lookup itself
/// ([`Now`]: [`Map::lookup`]) or earlier by a batch ([`Ahead`]:
/// [`Map::lookup_ahead`]). A trait rather than a closure so that the
/// lookup is always inlined into the add or request that makes it (a
/// closure there was left out of line, a call on every request).
pub(crate) trait Probe<'g, K, V>: Copy {
    /// The key's state in `map`, or where the lookup missed it.
    fn lookup<S: BuildHasher>(
        self,
        map: &'g Map<K, V, S>,
        hash: u64,
        is: impl Fn(&K) -> bool,
        guard: &'g Guard<'g>,
    ) -> Result<&'g V, Miss<'g, K, V>>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        V: Value;
}

/// A lookup that loads its shard's tables itself ([`Map::lookup`]).
#[derive(Clone, Copy)]
pub(crate) struct Now;

impl<'g, K, V> Probe<'g, K, V> for Now {
    #[inline(always)]
    fn lookup<S: BuildHasher>(
        self,
        map: &'g Map<K, V, S>,
        hash: u64,
        is: impl Fn(&K) -> bool,
        guard: &'g Guard<'g>,
    ) -> Result<&'g V, Miss<'g, K, V>>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        V: Value,
    {
        map.lookup(hash, is, guard)
    }
}

impl<'g, K, V> Probe<'g, K, V> for Ahead<'g, K, V> {
    #[inline(always)]
    fn lookup<S: BuildHasher>(
        self,
        map: &'g Map<K, V, S>,
        hash: u64,
        is: impl Fn(&K) -> bool,
        guard: &'g Guard<'g>,
    ) -> Result<&'g V, Miss<'g, K, V>>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        V: Value,
    {
        map.lookup_ahead(self, hash, is, guard)
    }
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// Loads the shard's table pointers for a lookup of `hash` and starts
    /// fetching the control word it reads first in the current table
    /// (`Table::prefetch_ctrl`): no load of the table's own words.
    #[inline(always)]
    pub(crate) fn prefetch_ctrl<'g>(&'g self, hash: u64, _guard: &'g Guard<'g>) -> Ahead<'g, K, V> {
        let p = &self.ptrs[self.shard(hash)];
        let cur = p.current.load(Ordering::Acquire);
        let old = p.old.load(Ordering::Acquire);
        // SAFETY: a non-null table pointer loaded under a guard stays valid
        // until the guard is dropped (tables are freed through the
        // collector: `mod.rs`, invariant 1).
        if let Some(t) = unsafe { cur.as_ref() } {
            t.prefetch_ctrl(hash);
        }
        Ahead {
            ptrs: p,
            cur: cur.cast_const(),
            old: old.cast_const(),
            _guard: PhantomData,
        }
    }

    /// Starts fetching the slot the lookup of `hash` most likely reads, in
    /// the current table `a` found (`Table::prefetch`: loads its control
    /// word). A hint; nothing under loom.
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn prefetch_slot(&self, a: &Ahead<'_, K, V>, hash: u64) {
        #[cfg(not(loom))]
        // SAFETY: as in `prefetch_ctrl`: loaded under the batch's guard,
        // which outlives `a`.
        if let Some(t) = unsafe { a.cur.as_ref() } {
            t.prefetch(hash);
        }
    }

    /// [`lookup`](Map::lookup) of `hash` with the pointers `a` loaded
    /// (both, before either probe, as `lookup` does): probe them, and on a
    /// miss report "absent" only if neither pointer changed since, else
    /// look up afresh. The slots were prefetched: the probe does not fetch
    /// its group's lines again.
    #[inline(always)]
    pub(crate) fn lookup_ahead<'g>(
        &'g self,
        a: Ahead<'g, K, V>,
        hash: u64,
        is: impl Fn(&K) -> bool,
        guard: &'g Guard<'g>,
    ) -> Result<&'g V, Miss<'g, K, V>> {
        let mut miss = Miss::NONE;
        // SAFETY: as in `prefetch_ctrl`.
        if let Some(t) = unsafe { a.cur.as_ref() } {
            match t.search_with::<false>(hash, &is) {
                Ok(s) => return Ok(s.value()),
                Err(v) => miss = Miss::at(a.cur, v),
            }
        }
        // SAFETY: as above.
        if let Some(t) = unsafe { a.old.as_ref() } {
            if let Some(s) = t.find(hash, &is) {
                return Ok(s.value());
            }
        }
        // SAFETY: `ptrs` points into this map's shard array (`prefetch_ctrl`).
        let p = unsafe { &*a.ptrs };
        let cur = p.current.load(Ordering::Acquire).cast_const();
        if cur == a.cur && p.old.load(Ordering::Acquire).cast_const() == a.old {
            return Err(miss);
        }
        self.lookup(hash, is, guard)
    }
}
