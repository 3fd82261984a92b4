//! [`KeyedWindows`]: an exact sliding window per key, with bounded memory.
//!
//! The engine (`ring.rs`): one map of keys per live slice. An add finds the
//! map of its slice (one load while the slice is current), looks its key up
//! there (lock-free for keys the map holds) and adds to the key's entry
//! with one CAS (`entry.rs`). A key the slice's map does not hold yet is
//! inserted under one of the map's shard locks; a slice whose map is full
//! does not track the add and counts it in
//! [`untracked_adds`](KeyedWindows::untracked_adds). A read of a key's
//! window looks the key up in each live slice's map.

use super::entry::Entry;
use super::key::KeyHasher;
use super::key::{Key, KeyRef};
use super::reclaim::Guard;
use super::ring::Ring;
use super::slice_map::SliceMap;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering};
use crate::window::slice_nanos;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// Sliding windows per key, with bounded memory.
///
/// Each key's window follows the rules of
/// [`SlidingWindow`](crate::SlidingWindow): `sum_at(key, now)` counts the
/// key's adds whose slice is one of the `slices` ending at `now`'s, exactly
/// at or after the newest add; an add older than the ring (a slice that
/// left the window of the newest slice added to) is dropped (its add
/// returns `false`), never misfiled.
///
/// Memory: each slice keeps the keys added to in it (32 bytes a key for a
/// `u64` key, in tables kept between 7/12 and 7/8 full); a slice that
/// leaves the window is dropped whole, so a key idle for a whole window
/// holds nothing. [`with_max_keys`](Self::with_max_keys) bounds the keys of
/// each slice.
///
/// The hasher `S` defaults to the standard library's `RandomState`
/// (SipHash-1-3, randomly keyed): keys often come from clients (IPs, API
/// keys, URLs), and a keyed hash keeps a crafted flood of colliding keys
/// from turning lookups into scans. A faster hasher can be given with
/// [`with_hasher`](Self::with_hasher) where keys are trusted.
///
/// ```
/// use stripecount::{KeyedWindows, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // The last 10 seconds, in 10 slices of 1 second, per key.
/// let w = KeyedWindows::with_clock(Duration::from_secs(10), 10, clock.clone())?;
/// assert!(w.add(&"alice", 3));
/// assert!(w.add(&"bob", 1));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(w.add_and_sum(&"alice", 2), 5);
/// assert_eq!(w.top_at(clock.now(), 1), vec![("alice", 5)]);
/// clock.advance(Duration::from_secs(5)); // the first adds are 10 s old
/// assert_eq!(w.sum(&"alice"), 2);
/// assert_eq!(w.sum(&"bob"), 0);
/// // The slice of the first adds left the window: dropped with its 2 keys.
/// assert_eq!(w.evict_idle_at(clock.now()), 2);
/// assert_eq!(w.len(), 1); // alice, in the slice of the second add
/// # use stripecount::Clock;
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyedWindows<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    pub(super) ring: Ring<K, S>,
    slices: usize,
    slice_nanos: u64,
    divisor: StrengthReducedU64,
    window: Duration,
    pub(super) clock: C,
    pub(super) untracked: AtomicU64,
}

impl<K: Key> KeyedWindows<K> {
    /// Windows of `window` cut into `slices` slices, on the monotonic clock.
    ///
    /// Errors as [`SlidingWindow::new`](crate::SlidingWindow::new).
    pub fn new(window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::with_clock(window, slices, MonotonicClock)
    }
}

impl<K: Key, C: Clock> KeyedWindows<K, C> {
    /// Windows on the given clock (errors as
    /// [`SlidingWindow::new`](crate::SlidingWindow::new)).
    pub fn with_clock(window: Duration, slices: usize, clock: C) -> Result<Self, ConfigError> {
        Self::with_hasher(window, slices, clock, RandomState::new())
    }
}

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindows<K, C, S> {
    /// Windows on the given clock whose maps hash keys with `hasher`
    /// (see the type's docs for why the default is `RandomState`).
    ///
    /// ```
    /// use stripecount::{KeyedWindows, ManualClock};
    /// use std::collections::hash_map::RandomState;
    /// use std::time::Duration;
    ///
    /// let w = KeyedWindows::with_hasher(
    ///     Duration::from_secs(1), 10, ManualClock::new(), RandomState::new())?;
    /// assert!(w.add_at(&7u64, 0, 1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn with_hasher(
        window: Duration,
        slices: usize,
        clock: C,
        hasher: S,
    ) -> Result<Self, ConfigError> {
        let slice_nanos = slice_nanos(window, slices)?;
        Ok(KeyedWindows {
            ring: Ring::new(slices, slice_nanos, hasher),
            slices,
            slice_nanos,
            divisor: StrengthReducedU64::new(slice_nanos),
            window,
            clock,
            untracked: AtomicU64::new(0),
        })
    }

    /// Holds at most `max_keys` keys in each slice: an add for a key its
    /// slice does not hold yet, when the slice already holds `max_keys`,
    /// is not tracked (it returns `false` and is counted by
    /// [`untracked_adds`](Self::untracked_adds)). So the whole structure
    /// holds at most `slices * max_keys` entries. A `max_keys` of 0 tracks
    /// nothing.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.ring.set_max_keys(max_keys);
        self
    }

    /// The epoch of `now`: a multiply by a precomputed reciprocal, not a
    /// 64-bit division (which costs ~40 cycles on common x86 parts, more
    /// than the rest of an add's arithmetic).
    #[inline]
    pub(super) fn epoch(&self, now: u64) -> u64 {
        now / self.divisor
    }

    /// Adds `n` to `key` now; `true` if the add was counted (see
    /// [`add_at`](Self::add_at)).
    #[inline]
    pub fn add<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.add_at(key, self.clock.now(), n)
    }

    /// Adds one to `key` now.
    #[inline]
    pub fn increment<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.add(key, 1)
    }

    /// Adds `n` to `key` at `now` (nanoseconds on this clock). `true` if it
    /// was counted; `false` if it was older than the ring (dropped, as by
    /// [`SlidingWindow::add_at`](crate::SlidingWindow::add_at)) or its
    /// slice could not track the key (see
    /// [`with_max_keys`](Self::with_max_keys)). An add of 0 records nothing
    /// and returns `true`. The cheapest add: one lookup in the current
    /// slice's map and one CAS on the key's entry, which nothing else
    /// shares.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        self.add_in(hash, key, self.locate(now, &guard), n, &guard, |_| {})
            .is_some()
    }

    /// Adds `n` to `key` now and returns its window sum after the add (see
    /// [`add_and_sum_at`](Self::add_and_sum_at)).
    #[inline]
    pub fn add_and_sum<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> u64 {
        self.add_and_sum_at(key, self.clock.now(), n)
    }

    /// Adds `n` to `key` at `now`, then reads the key's whole window: the
    /// sum at `now` right after this add (adds racing on other threads may
    /// or may not be included); 0 if the add was not counted. It costs a
    /// read of the window on top of the add: a lookup in every live
    /// slice's map, and on a key that several threads add to at once
    /// (striped), the lines those threads are writing. Use
    /// [`add_at`](Self::add_at) on hot paths.
    pub fn add_and_sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> u64 {
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        let at = self.locate(now, &guard);
        if n > 0 && self.add_in(hash, key, at, n, &guard, |_| {}).is_none() {
            return 0;
        }
        let e = at.0;
        self.read_in(hash, key, e, &guard)
    }

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
    pub fn sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64) -> u64 {
        let guard = Guard::pin(self.ring.graveyard());
        self.read_in(self.ring.hash(key), key, self.epoch(now), &guard)
    }

    /// The `k` keys with the largest non-zero window sums at `now`,
    /// largest first (ties in unspecified order). A scan of every live
    /// slice, one shard at a time: adds racing it may or may not be seen.
    pub fn top_at(&self, now: u64, k: usize) -> Vec<(K, u64)> {
        if k == 0 {
            return Vec::new();
        }
        let mut all: Vec<(K, u64)> = self.sums_at(now).into_iter().collect();
        all.retain(|x| x.1 > 0);
        let k = k.min(all.len());
        if k == 0 {
            return Vec::new();
        }
        all.select_nth_unstable_by_key(k - 1, |x| std::cmp::Reverse(x.1));
        all.truncate(k);
        all.sort_unstable_by_key(|x| std::cmp::Reverse(x.1));
        all
    }

    /// Every key with adds in the window at `now`, and its window sum.
    pub(super) fn sums_at(&self, now: u64) -> std::collections::HashMap<K, u64> {
        let guard = Guard::pin(self.ring.graveyard());
        let mut sums: std::collections::HashMap<K, u64> = std::collections::HashMap::new();
        self.ring.for_each_live(self.epoch(now), &guard, |m| {
            m.map.for_each(|key, en| {
                // Under the shard lock no move runs: never `None`.
                let c = en.read().unwrap_or(0);
                let s = sums.entry(key.clone()).or_insert(0);
                *s = s.saturating_add(c);
            });
        });
        sums
    }

    /// Entries held: a key counts once for each slice it has adds in, so
    /// this is what the structure's memory is proportional to (at most
    /// `slices * max_keys`).
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every slice that left the window at `now`; returns the entries
    /// they held. Slices are also dropped as time moves (the first add of
    /// a slice replaces the map of the slice a window before it); this
    /// frees the rest when adds stop. Adds racing it are never lost: an
    /// add is dropped only if its own slice is out of the window.
    pub fn evict_idle_at(&self, now: u64) -> usize {
        let guard = Guard::pin(self.ring.graveyard());
        self.ring.retire_before(self.epoch(now), &guard)
    }

    /// Adds that were not tracked because their slice was full.
    pub fn untracked_adds(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Heap bytes held for `key` outside its map slots (a contended key's
    /// stripes, in every slice that has them; 0 for most keys).
    pub fn key_memory_bytes<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> usize {
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        let mut b = 0;
        self.ring.for_each_map(&guard, |m| {
            b += m
                .map
                .get(hash, |k| key.is(k), &guard)
                .map_or(0, |en| en.heap_bytes());
        });
        b
    }

    /// Bytes held by the whole structure: every slice's tables (control
    /// bytes and slots, each holding a key and its entry), contended keys'
    /// stripes, and the tables of slices that left the window kept,
    /// cleared, for the next slices (at most about one slice's worth).
    /// Keys' own heap data (e.g. a `String`'s buffer) is not included.
    pub fn memory_bytes(&self) -> usize {
        self.ring.memory_bytes()
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

    /// Whether `key`'s entry in the slice of `now` is striped (several
    /// threads added to it at once).
    pub fn is_striped_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64) -> bool {
        let guard = Guard::pin(self.ring.graveyard());
        self.entry_at(key, now, &guard)
            .is_some_and(|en| en.is_striped())
    }

    /// Loom models only: stripes `key`'s entry in the slice of `now` as if
    /// it had seen contention (a model cannot force a failed CAS). `false`
    /// if absent.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __stripe<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64) -> bool {
        let guard = Guard::pin(self.ring.graveyard());
        self.entry_at(key, now, &guard)
            .map(|en| en.stripe())
            .is_some()
    }

    /// Takes every count held, for every key: calls `f(key, epoch, count)`
    /// for each non-zero slice count (`epoch` = time / slice length) and
    /// leaves that slice at zero. An add racing the take lands either in
    /// what is taken or in what stays, never both, never neither. For
    /// callers that ship counts elsewhere (a flush), one shard at a time.
    ///
    /// `f` runs inside the per-key collector's guard: while it runs, the
    /// memory that any per-key structure of the process retires is not
    /// freed. Keep it quick (collect into a buffer, then ship).
    pub fn take_all(&self, mut f: impl FnMut(&K, u64, u64)) {
        let guard = Guard::pin(self.ring.graveyard());
        self.ring.for_each_map(&guard, |m| {
            m.map.for_each(|key, en| {
                let c = en.take();
                if c > 0 {
                    f(key, m.epoch, c);
                }
            });
        });
    }

    /// [`take_all`](Self::take_all) for one key: `f(epoch, count)`.
    pub fn take<Q: KeyRef<K> + ?Sized>(&self, key: &Q, mut f: impl FnMut(u64, u64)) {
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        self.ring.for_each_map(&guard, |m| {
            let c = m
                .map
                .with_locked(hash, |k| key.is(k), |en| en.take())
                .unwrap_or(0);
            if c > 0 {
                f(m.epoch, c);
            }
        });
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The number of slices per window.
    pub fn slices(&self) -> usize {
        self.slices
    }

    /// The slice length.
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.slice_nanos)
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The epoch (slice number) of time `now`.
    pub fn epoch_at(&self, now: u64) -> u64 {
        self.epoch(now)
    }
}

impl<K: 'static, C: Clock, S> fmt::Debug for KeyedWindows<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedWindows")
            .field("window", &self.window)
            .field("slices", &self.slices)
            .finish_non_exhaustive()
    }
}
