//! Reads and takes of [`KeyedWindows`]: a key's window sum (a lookup in
//! each live slice's map, their misses overlapped), the top keys, a key's
//! entry in one slice, and the takes that empty counts for a flush.
//!
//! # Invariants
//! - A read never writes a count and never moves time: it sums what each
//!   live slice's map holds for the key at the epoch asked for, waiting
//!   (briefly) while the key's entry moves to a bigger table, so a moving
//!   key is read once, in one of its tables (`entry.rs`).
//! - A take empties an entry under its shard's lock, where no move runs
//!   (the word's count by CAS, the stripes by `sum_and_reset`), so an add
//!   racing it lands either in what is taken or in what stays, never both,
//!   never neither (`entry.rs`, "Takes").
//! - Every read and take runs inside one guard (`reclaim.rs`): no map or
//!   table it reached is freed before it returns.

use super::entry::Entry;
use super::slice_map::SliceMap;
use super::windows::KeyedWindows;
use crate::clock::{Clock, Timestamp};
use crate::key::{Key, KeyHasher, KeyRef};
use crate::map::{Map, Marks};
use crate::reclaim::Guard;
use std::collections::HashMap;

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindows<K, C, S> {
    /// The key's count in one slice's map (following it if it moves to a
    /// bigger table, waiting while it moves in).
    #[inline]
    fn count_in(m: &SliceMap<K, S>, hash: u64, is: impl Fn(&K) -> bool, guard: &Guard<'_>) -> u64 {
        loop {
            match m.map.get(hash, &is, guard) {
                None => return 0,
                Some(en) => {
                    if let Some(c) = en.read() {
                        return c;
                    }
                }
            }
        }
    }

    /// The key's window sum at epoch `e`.
    pub(super) fn read_in<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        e: u64,
        guard: &Guard<'_>,
    ) -> u64 {
        // Every slice's slot is fetched first, so that the misses overlap
        // instead of following each other (a window of 10 slices on a key
        // whose slots are not cached waited for 10 misses in a row).
        self.ring
            .for_each_live(e, guard, |m| m.map.prefetch(hash, guard));
        let mut sum = 0u64;
        self.ring.for_each_live(e, guard, |m| {
            sum = sum.saturating_add(Self::count_in(m, hash, |k| key.is(k), guard));
        });
        sum
    }

    /// The key's window sum now (0 for keys never seen or whose adds left
    /// the window).
    pub fn sum<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> u64 {
        self.sum_at(key, self.clock.now())
    }

    /// The key's window sum at `now`: exact for any `now` at or after the
    /// newest add (as [`SlidingWindow::sum_at`](crate::SlidingWindow::sum_at)).
    /// A lookup in each live slice's map; waits, briefly, while the key is
    /// moving to a bigger table in one of them.
    pub fn sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        let guard = Guard::pin(self.ring.graveyard());
        self.read_in(self.ring.hash(key), key, self.epoch(now), &guard)
    }

    /// The `k` keys with the largest non-zero window sums now, largest
    /// first (see [`top_at`](Self::top_at)).
    pub fn top(&self, k: usize) -> Vec<(K, u64)> {
        self.top_at(self.clock.now(), k)
    }

    /// The `k` keys with the largest non-zero window sums at `now`,
    /// largest first (ties in unspecified order). A scan of the keys every
    /// live slice held at one instant (as [`take_all`](Self::take_all)
    /// takes them): adds racing it to those keys may or may not be seen,
    /// keys added after it started are not.
    pub fn top_at(&self, now: Timestamp, k: usize) -> Vec<(K, u64)> {
        let now = now.as_nanos();
        if k == 0 {
            return Vec::new();
        }
        let guard = Guard::pin(self.ring.graveyard());
        let mut all: Vec<(&K, u64)> = self.sums_at(now, &guard).into_iter().collect();
        all.retain(|x| x.1 > 0);
        let k = k.min(all.len());
        if k == 0 {
            return Vec::new();
        }
        all.select_nth_unstable_by_key(k - 1, |x| std::cmp::Reverse(x.1));
        all.truncate(k);
        all.sort_unstable_by_key(|x| std::cmp::Reverse(x.1));
        all.into_iter().map(|(k, c)| (k.clone(), c)).collect()
    }

    /// Every key with adds in the window at `now`, and its window sum. The
    /// keys are the maps' own (valid while `guard` is); the caller's code
    /// (the key's `Hash` and `Eq`, here) runs outside every shard lock.
    /// The keys are those the live slices held at one instant (`walk`):
    /// keys that code or other threads add meanwhile are not read.
    pub(super) fn sums_at<'g>(&'g self, now: u64, guard: &'g Guard<'g>) -> HashMap<&'g K, u64> {
        let mut maps = Vec::new();
        self.ring
            .for_each_live(self.epoch(now), guard, |m| maps.push(m));
        let mut sums: HashMap<&'g K, u64> = HashMap::new();
        for (m, marks) in Self::walk(&maps, guard) {
            m.map.for_each_batch(
                &marks,
                guard,
                // Under the shard lock no move runs: never `None`.
                |en| Some(en.read().unwrap_or(0)),
                |batch| {
                    for &(key, c) in batch.iter() {
                        let s = sums.entry(key).or_insert(0);
                        *s = s.saturating_add(c);
                    }
                },
            );
        }
        sums
    }

    /// The start of a walk over `maps` (slice maps in slot order): each
    /// map with the keys it holds at one instant, the same for all of them
    /// (`crate::map`, "Walks"). The walk visits those keys and no others.
    fn walk<'g>(maps: &[&'g SliceMap<K, S>], guard: &'g Guard<'g>) -> Vec<Walked<'g, K, S>> {
        let inner: Vec<_> = maps.iter().map(|m| &m.map).collect();
        // The newest slice first: it takes most of the inserts.
        let mut first: Vec<usize> = (0..maps.len()).collect();
        first.sort_unstable_by_key(|&i| std::cmp::Reverse(maps[i].epoch));
        let marks = Map::mark_all(&inner, &first, guard);
        maps.iter().copied().zip(marks).collect()
    }

    /// `key`'s entry in the slice of `now`, if that slice holds it.
    fn entry_at<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        key: &Q,
        now: u64,
        guard: &'g Guard<'g>,
    ) -> Option<&'g Entry> {
        let hash = self.ring.hash(key);
        self.ring
            .get(self.epoch(now), guard)
            .and_then(|m| m.map.get(hash, |k| key.is(k), guard))
    }

    /// Tests only: whether `key`'s entry in the slice of `now` is striped
    /// (several threads added to it at once).
    #[doc(hidden)]
    pub fn is_striped_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> bool {
        let now = now.as_nanos();
        let guard = Guard::pin(self.ring.graveyard());
        self.entry_at(key, now, &guard)
            .is_some_and(|en| en.is_striped())
    }

    /// Tests and loom models only: stripes `key`'s entry in the slice of
    /// `now` as if it had seen contention (neither can force a failed
    /// CAS). `false` if absent.
    #[doc(hidden)]
    pub fn __stripe<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> bool {
        let now = now.as_nanos();
        let guard = Guard::pin(self.ring.graveyard());
        self.entry_at(key, now, &guard)
            .map(|en| en.stripe())
            .is_some()
    }

    /// Takes every count held, for every key: calls `f(key, start, count)`
    /// for each non-zero slice count (`start`: the start of the slice the
    /// count was added in, a whole multiple of the slice length) and leaves
    /// that slice at zero. An add racing the take lands either in
    /// what is taken or in what stays, never both, never neither. For
    /// callers that ship counts elsewhere (a flush), one shard at a time.
    ///
    /// The walk takes what the structure held when it started, and only
    /// that: every key and slice held at one instant (all the slices'
    /// shard locks are held together for a moment, the time to note which
    /// slots are in use; adds to held keys do not wait, inserts of new keys
    /// do). Keys and slices added after that, by `f` or by other threads,
    /// are left for the next take; adds to a key that was held land in
    /// this take or stay for the next one.
    ///
    /// `f` runs under no lock: it may call any method of this structure
    /// (add, read, take). If it panics, the panic propagates, and the
    /// count of that call and those of the shard's keys it was not yet
    /// given are added back to their slices, as if never taken (the keys'
    /// `Hash` and `Eq` find them; a panic there, during the first one,
    /// aborts). While `f` runs, the memory that any per-key structure of
    /// the process retires waits (`f` runs inside the collector's guard):
    /// keep it quick (collect into a buffer, then ship).
    pub fn take_all(&self, mut f: impl FnMut(&K, Timestamp, u64)) {
        let guard = Guard::pin(self.ring.graveyard());
        let mut maps = Vec::new();
        self.ring.for_each_map(&guard, |m| maps.push(m));
        for (m, marks) in Self::walk(&maps, &guard) {
            m.map.for_each_batch(
                &marks,
                &guard,
                |en| Some(en.take()).filter(|&c| c > 0),
                |batch| {
                    let mut back = GiveBack {
                        windows: self,
                        map: m,
                        batch,
                        next: 0,
                        guard: &guard,
                    };
                    while let Some(&(key, c)) = back.batch.get(back.next) {
                        f(key, self.slice_start(m.epoch), c);
                        back.next += 1;
                    }
                },
            );
        }
    }

    /// [`take_all`](Self::take_all) for one key: `f(start, count)`, under
    /// no lock. If `f` panics, the count of that call is added back.
    pub fn take<Q: KeyRef<K> + ?Sized>(&self, key: &Q, mut f: impl FnMut(Timestamp, u64)) {
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        self.ring.for_each_map(&guard, |m| {
            let c = m
                .map
                .with_locked(hash, |k| key.is(k), |en| en.take())
                .unwrap_or(0);
            if c > 0 {
                let back = GiveBackOne(self, m, hash, key, c, &guard);
                f(self.slice_start(m.epoch), c);
                std::mem::forget(back);
            }
        });
    }
}

/// A slice map a walk visits, and the keys it held at the walk's start.
type Walked<'g, K, S> = (&'g SliceMap<K, S>, Marks<'g, K, Entry>);

/// The counts of a [`KeyedWindows::take_all`] batch from `next` on, taken
/// but not yet given to the callback: added back if it unwinds.
struct GiveBack<'a, 'g, K: Key, C: Clock, S: KeyHasher> {
    windows: &'a KeyedWindows<K, C, S>,
    map: &'g SliceMap<K, S>,
    batch: &'a mut Vec<(&'g K, u64)>,
    next: usize,
    guard: &'g Guard<'g>,
}

impl<K: Key, C: Clock, S: KeyHasher> Drop for GiveBack<'_, '_, K, C, S> {
    fn drop(&mut self) {
        for &(key, c) in &self.batch[self.next..] {
            let hash = self.windows.ring.hash(key);
            self.windows.add_back(self.map, hash, key, c, self.guard);
        }
    }
}

/// The count a [`KeyedWindows::take`] took from one slice, added back if
/// the callback it is given to unwinds.
struct GiveBackOne<'a, 'g, K: Key, C: Clock, S: KeyHasher, Q: KeyRef<K> + ?Sized>(
    &'a KeyedWindows<K, C, S>,
    &'g SliceMap<K, S>,
    u64,
    &'a Q,
    u64,
    &'g Guard<'g>,
);

impl<K: Key, C: Clock, S: KeyHasher, Q: KeyRef<K> + ?Sized> Drop
    for GiveBackOne<'_, '_, K, C, S, Q>
{
    fn drop(&mut self) {
        self.0.add_back(self.1, self.2, self.3, self.4, self.5);
    }
}
