//! Moving a shard of the per-key map to a bigger table (`mod.rs` has
//! the lookups this must never mislead).
//!
//! # Growth
//! An insert that would take a table over 7/8 used (`FULL` + `TOMB`)
//! first sweeps the shard's idle keys, then rebuilds: a table sized for
//! 1.5 times the live keys (never below one group; any number of groups,
//! `table/`), so removals are compacted away and tables stay between
//! 7/12 and 7/8 full; or for a presized map, for 10% over its hint.
//!
//! # A panic in the middle of a move aborts
//! A move runs the key's own code: `K::clone` and the hasher, for every
//! key. Once `current` is the new table, a panic there would leave the
//! shard half moved (some keys only in `old`, with `old` set at a moment
//! the lock is free), against invariant 3 of `mod.rs`: the next insert
//! would add a second copy of an unmoved key, and the next move would
//! drop `old` unfreed with the keys still in it (lost counts). The move
//! cannot be undone either (undoing it runs the same code). So a panic
//! that unwinds out of a move aborts the process ([`AbortOnUnwind`]),
//! as std does where an invariant cannot be restored; everywhere else a
//! panic under a shard lock leaves the shard whole (`mod.rs`, "Panics").

use super::table::{Table, GROUP};
use super::{Map, ShardState, Value};
use crate::reclaim::Guard;
use crate::sync::Ordering;
use crate::unwind::AbortOnUnwind;
use std::hash::{BuildHasher, Hash};
use std::ptr;

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// The shard's current table `cur` (as loaded under the shard lock),
    /// with room for one more key: allocated, swept or rebuilt as needed.
    /// The common case, a table with room, is inlined into the insert.
    #[inline]
    pub(super) fn room_for_one<'g>(
        &'g self,
        i: usize,
        st: &mut ShardState,
        cur: Option<&'g Table<K, V>>,
        cfg: &V::Cfg,
        now: u64,
        guard: &'g Guard<'g>,
    ) -> &'g Table<K, V> {
        match cur {
            Some(t) if st.len + st.tombs < t.max_used() => t,
            _ => self.make_room(i, st, cur, cfg, now, guard),
        }
    }

    /// [`room_for_one`](Self::room_for_one) when `cur` is full or absent.
    #[cold]
    fn make_room<'g>(
        &'g self,
        i: usize,
        st: &mut ShardState,
        cur: Option<&'g Table<K, V>>,
        cfg: &V::Cfg,
        now: u64,
        guard: &'g Guard<'g>,
    ) -> &'g Table<K, V> {
        if let Some(t) = cur {
            if self.sweep_per_step > 0 {
                // Idle keys become tombstones, which the rebuild drops:
                // the new table is sized for the keys still live (and
                // moves any key a retire left closed).
                self.sweep_locked(t, st, now, cfg, guard);
            }
        }
        self.rebuild(i, st, cfg, guard)
    }

    /// Replaces the shard's table by a bigger one (see "Growth"),
    /// moving every key (invariants 1, 2). Called under the shard lock.
    pub(super) fn rebuild<'g>(
        &'g self,
        i: usize,
        st: &mut ShardState,
        cfg: &V::Cfg,
        guard: &'g Guard<'g>,
    ) -> &'g Table<K, V> {
        let p = &self.ptrs[i];
        // Room for 1.5 times the live keys (growth by half: tables stay
        // between 7/12 and 7/8 full), or 10% over the hint; a group may
        // hold 7 keys (`Table::max_used`).
        let keys = ((st.len + 1) * 3 / 2 + 1).max(st.hint + st.hint / 10);
        let want = keys.div_ceil(GROUP - 1);
        let spare = self.spares.as_ref().and_then(|s| s.take(want));
        let fresh = Box::into_raw(spare.unwrap_or_else(|| Box::new(Self::new_table(want))));
        let old = p.current.load(Ordering::Acquire);
        if old.is_null() {
            p.current.store(fresh, Ordering::Release);
            // SAFETY: just allocated; freed only through the collector.
            return unsafe { &*fresh };
        }
        p.old.store(old, Ordering::Release);
        p.current.store(fresh, Ordering::Release);
        // SAFETY: `old` and `fresh` stay valid: `old` is freed below only
        // through the collector, `fresh` is the shard's current table.
        let (o, n) = unsafe { (&*old, &*fresh) };
        let mut moved = 0;
        let bomb = AbortOnUnwind(
            "a key's Clone or Hash panicked while its shard moved (the move cannot be undone)",
        );
        o.for_each(|s| {
            let v = s.value();
            if v.is_dead() {
                return;
            }
            // SAFETY: `for_each` yields `FULL` slots loaded with `Acquire`.
            let key = unsafe { s.key() }.clone();
            let h = self.hash(&key);
            let to = n.insert(h, key, |to| to.init(cfg, true));
            v.move_into(to.value(), cfg, guard);
            moved += 1;
        });
        std::mem::forget(bomb);
        p.old.store(ptr::null_mut(), Ordering::Release);
        // SAFETY: `old` is unlinked (neither `current` nor `old` holds it),
        // so only guards pinned before now can reach it.
        unsafe { guard.defer_free(old, o.memory_bytes()) };
        st.len = moved;
        st.tombs = 0;
        n
    }

    /// A new table of `groups` groups, every slot vacant.
    fn new_table(groups: usize) -> Table<K, V> {
        #[cfg(not(loom))]
        if V::ZEROED_VACANT {
            // SAFETY: `V` says its vacant state is all zero bytes.
            return unsafe { Table::new_zeroed(groups) };
        }
        Table::new(groups, V::vacant)
    }
}
