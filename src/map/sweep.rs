//! The per-key map's bound on keys, and sweeps of idle keys.
//!
//! # Bounds and eviction
//! `len` counts keys held (reserved before an insert, released when the
//! key turned out present, decremented by removals): the map never holds
//! more than `max_keys`. An insert into a full map first sweeps every shard
//! (at most once per epoch: no key can turn idle before time moves), and
//! fails if that frees nothing. With automatic sweeping on, the first
//! caller of each new *sweep step* sweeps the next `sweep_per_step`
//! *parts* (a cursor over the shards' parts: a shard's table is cut into
//! `sweep_parts` runs of its groups), so that every key idle for a whole
//! window is removed within about one more window: a bounded amount of
//! work per step and no background thread. (A jump of `k` steps sweeps
//! `k` times as many parts, up to all of them.)
//!
//! The owner says what a step is and how many parts a shard has. The
//! per-key windows' heavy keys step once an epoch, a shard a part. The
//! per-key limiter cuts a shard in 16 and steps 16 x `ceil(SHARDS / S)`
//! times an epoch, a part each (`src/limiter/keyed/pace.rs`): sweeping an
//! epoch's shards at its first request stalled that request for
//! milliseconds on a 1M-key map, and a whole shard for half of one.
//!
//! A value whose retire closes it for good before its second idle check
//! (the per-key limiter's sealed state, `src/limiter/keyed/slot.rs`) may
//! find the key live again: it stays `FULL`, closed
//! ([`Value::must_move`]), and the sweep rebuilds the shard before it
//! releases the lock, which moves the key into a fresh, open slot. Writers
//! that meet the closed state look the key up again (they wait for the
//! lock holder, a rare event: a write landing between the two checks).

use super::{Map, ShardState, Table, Value};
use crate::reclaim::Guard;
use crate::sync::{lock_whole, Ordering};
use std::hash::{BuildHasher, Hash};

impl<K, V, S> Map<K, V, S> {
    /// Gives back `n` reservations: keys [`reserve`](Self::reserve) counted
    /// that the map no longer holds (removed), or never came to hold (the
    /// key was found already there, or its insert unwound).
    #[inline]
    pub(super) fn unreserve(&self, n: usize) {
        if self.max_keys != usize::MAX {
            self.len.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// Reserves room for one more key, sweeping every shard (at most once
    /// per epoch) when full.
    #[inline]
    pub(super) fn reserve(&self, now: u64, cfg: &V::Cfg, guard: &Guard<'_>) -> bool {
        self.max_keys == usize::MAX || self.reserve_bounded(now, cfg, guard)
    }

    fn reserve_bounded(&self, now: u64, cfg: &V::Cfg, guard: &Guard<'_>) -> bool {
        for attempt in 0..2 {
            let mut c = self.len.load(Ordering::Acquire);
            while c < self.max_keys {
                match self
                    .len
                    .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return true,
                    Err(actual) => c = actual,
                }
            }
            let mark = now.saturating_add(1);
            let last = self.full_swept.load(Ordering::Acquire);
            if attempt == 1
                || last == mark
                || self
                    .full_swept
                    .compare_exchange(last, mark, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                return false;
            }
            self.evict_idle(now, cfg, guard);
        }
        false
    }

    /// The automatic sweep step: the first caller at each new `step` (a
    /// count the owner advances with time) sweeps the next `sweep_per_step`
    /// shards of the keys idle at epoch `now`. One load otherwise.
    #[inline]
    pub(crate) fn maybe_sweep(&self, step: u64, now: u64, cfg: &V::Cfg, guard: &Guard<'_>) {
        if self.sweep_per_step == 0 {
            return;
        }
        let last = self.swept.load(Ordering::Relaxed);
        if step > last
            && self
                .swept
                .compare_exchange(last, step, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.sweep_step(now, step - last, cfg, guard);
        }
    }

    /// The step [`maybe_sweep`](Self::maybe_sweep) has swept through: a
    /// call with a step at most this one does nothing (`u64::MAX` when
    /// automatic sweeping is off).
    #[inline]
    pub(crate) fn swept_through(&self) -> u64 {
        if self.sweep_per_step == 0 {
            return u64::MAX;
        }
        self.swept.load(Ordering::Relaxed)
    }

    /// Sweeps `sweep_per_step` parts for each of `steps` steps (up to
    /// every part of every shard), each the next in the cursor's order: a
    /// shard's parts in turn, then the next shard's.
    #[cold]
    pub(super) fn sweep_step(&self, now: u64, steps: u64, cfg: &V::Cfg, guard: &Guard<'_>) {
        let units = self.shards * self.sweep_parts;
        let todo = (self.sweep_per_step as u64).saturating_mul(steps);
        for _ in 0..todo.min(units as u64) {
            let c = self.cursor.fetch_add(1, Ordering::Relaxed) % units;
            let (i, part) = (c / self.sweep_parts, c % self.sweep_parts);
            self.sweep_part(i, part, self.sweep_parts, now, cfg, guard);
        }
    }

    /// Removes every key idle at epoch `now`; returns how many.
    pub(crate) fn evict_idle(&self, now: u64, cfg: &V::Cfg, guard: &Guard<'_>) -> usize {
        (0..self.shards)
            .map(|i| self.sweep_shard(i, now, cfg, guard))
            .sum()
    }

    /// Retires the idle keys of `t` (the current table); returns how many
    /// were removed and how many must move (see [`Value::must_move`]).
    pub(super) fn sweep_locked(
        &self,
        t: &Table<K, V>,
        st: &mut ShardState,
        now: u64,
        cfg: &V::Cfg,
        guard: &Guard<'_>,
    ) -> (usize, usize) {
        self.sweep_locked_part(t, 0, 1, st, now, cfg, guard)
    }

    /// [`sweep_locked`](Self::sweep_locked) over part `part` of `parts` of
    /// `t` ([`Table::for_each_in_part`]).
    #[allow(clippy::too_many_arguments)]
    fn sweep_locked_part(
        &self,
        t: &Table<K, V>,
        part: usize,
        parts: usize,
        st: &mut ShardState,
        now: u64,
        cfg: &V::Cfg,
        guard: &Guard<'_>,
    ) -> (usize, usize) {
        let (mut dropped, mut stuck) = (0, 0);
        t.for_each_in_part(part, parts, |s| {
            if s.value().try_retire(now, cfg, guard) {
                t.remove(s);
                dropped += 1;
            } else if s.value().must_move() {
                stuck += 1;
            }
        });
        st.len -= dropped;
        st.tombs += dropped;
        self.unreserve(dropped);
        (dropped, stuck)
    }

    /// Retires and removes every idle key of shard `i` (idle at epoch
    /// `now`); returns how many.
    pub(super) fn sweep_shard(&self, i: usize, now: u64, cfg: &V::Cfg, guard: &Guard<'_>) -> usize {
        self.sweep_part(i, 0, 1, now, cfg, guard)
    }

    /// [`sweep_shard`](Self::sweep_shard) over part `part` of `parts` of
    /// the shard's current table (its groups cut in `parts` runs): a part
    /// is a bounded pause under the lock. A table replaced between two
    /// parts of a round is cut afresh; its rebuild swept it whole (with
    /// automatic sweeping on, `grow.rs`), so nothing idle is missed for
    /// long.
    fn sweep_part(
        &self,
        i: usize,
        part: usize,
        parts: usize,
        now: u64,
        cfg: &V::Cfg,
        guard: &Guard<'_>,
    ) -> usize {
        let mut st = lock_whole(&self.locks[i]);
        // SAFETY: as in `upsert` (`insert.rs`): under the lock.
        let Some(t) = (unsafe { self.ptrs[i].current.load(Ordering::Acquire).as_ref() }) else {
            return 0;
        };
        let (dropped, stuck) = self.sweep_locked_part(t, part, parts, &mut st, now, cfg, guard);
        if stuck > 0 {
            // Keys closed by a retire that found them live again: moving
            // them reopens them (in fresh slots).
            self.rebuild(i, &mut st, cfg, guard);
        }
        dropped
    }
}
