//! [`KeyedWindows`]: an exact sliding window per key, with bounded memory.
//!
//! The engine: a lookup in the per-key map (`map.rs`, lock-free for keys it
//! holds), then an add on the key's inline state (`state.rs`), then the
//! automatic sweep step (one load unless the epoch is new). A key the map
//! does not hold is inserted under its shard's lock; if the map is full of
//! keys that are not idle, the add is not tracked and is counted in
//! [`untracked_adds`](KeyedWindows::untracked_adds).

use super::key::{Key, KeyRef};
use super::map::{Map, Value};
use super::reclaim::Guard;
use super::state::{Cfg, KeyState, Outcome, Read};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::stripes::default_cap;
use crate::sync::{AtomicU64, Ordering};
use crate::window::slice_nanos;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// Sliding windows per key, with bounded memory.
///
/// Each key's window follows the rules of
/// [`SlidingWindow`](crate::SlidingWindow): `sum_at(key, now)` counts the
/// key's adds whose slice is one of the `slices` ending at `now`'s, exactly
/// at or after the key's newest add; an add older than the ring is dropped
/// (its add returns `false`), never misfiled.
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
/// assert_eq!(w.evict_idle_at(clock.now()), 1); // bob is idle
/// assert_eq!(w.len(), 1);
/// # use stripecount::Clock;
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyedWindows<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    pub(super) map: Map<K, KeyState, S>,
    pub(super) cfg: Cfg,
    slice_nanos: u64,
    divisor: StrengthReducedU64,
    window: Duration,
    pub(super) clock: C,
    untracked: AtomicU64,
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

impl<K: Key, C: Clock, S: BuildHasher> KeyedWindows<K, C, S> {
    /// Windows on the given clock whose map hashes keys with `hasher`
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
            map: Map::new(hasher, sweep_per_epoch(slices)),
            cfg: Cfg {
                slices,
                stripes: default_cap(),
            },
            slice_nanos,
            divisor: StrengthReducedU64::new(slice_nanos),
            window,
            clock,
            untracked: AtomicU64::new(0),
        })
    }

    /// Holds at most `max_keys` keys: when full, idle keys are evicted
    /// first; if none is idle, adds for new keys are not tracked (they
    /// return `false` and are counted by
    /// [`untracked_adds`](Self::untracked_adds)). A `max_keys` of 0 tracks
    /// nothing.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.map.set_max_keys(max_keys);
        self
    }

    /// Turns the automatic eviction of idle keys on (the default) or off.
    /// On, the first add of each new slice sweeps a share of the map, so
    /// that every key idle for a whole window is evicted within about one
    /// more window. Off suits callers that evict with
    /// [`evict_idle_at`](Self::evict_idle_at) themselves, e.g. when adds
    /// arrive with times from sources that lag each other.
    pub fn with_auto_evict(mut self, on: bool) -> Self {
        self.map.set_sweep_per_epoch(if on {
            sweep_per_epoch(self.cfg.slices)
        } else {
            0
        });
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
    /// was counted; `false` if it was older than the key's ring (dropped,
    /// as by [`SlidingWindow::add_at`](crate::SlidingWindow::add_at)) or
    /// the key could not be tracked (see
    /// [`with_max_keys`](Self::with_max_keys)). An add of 0 records nothing
    /// and returns `true`. The cheapest add: it writes the key's own state
    /// and reads nothing else.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let guard = Guard::pin(self.map.graveyard());
        let hash = self.map.hash(key);
        matches!(
            self.add_in(hash, key, self.epoch(now), n, &guard),
            Some((_, Outcome::Head(_) | Outcome::Elsewhere))
        )
    }

    /// Adds `n` to `key` now and returns its window sum after the add (see
    /// [`add_and_sum_at`](Self::add_and_sum_at)).
    #[inline]
    pub fn add_and_sum<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> u64 {
        self.add_and_sum_at(key, self.clock.now(), n)
    }

    /// Adds `n` to `key` at `now`, then reads the key's whole window: the
    /// sum at `now` right after this add (adds racing on other threads may
    /// or may not be included); 0 if the key could not be tracked. It costs
    /// an exact read on top of the add: every cell of the key, and on a key
    /// that several threads add to at once (striped), lines those threads
    /// are writing. Use [`add_at`](Self::add_at) on hot paths.
    pub fn add_and_sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> u64 {
        if n == 0 {
            return self.sum_at(key, now);
        }
        let guard = Guard::pin(self.map.graveyard());
        let hash = self.map.hash(key);
        let e = self.epoch(now);
        match self.add_in(hash, key, e, n, &guard) {
            Some((st, _)) => match st.sum(e, &self.cfg) {
                Read::Sum(s) => s,
                Read::Moved => self.sum_at(key, now),
            },
            None => 0,
        }
    }

    /// The engine of every add: finds or inserts the key's state and adds
    /// to it; `None` if the key could not be tracked. The common case (a
    /// held key whose head holds this epoch) is inlined: one lookup and one
    /// CAS; everything else is out of line.
    #[inline]
    pub(super) fn add_in<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &'g Guard<'g>,
    ) -> Option<(&'g KeyState, Outcome)> {
        if let Some(st) = self.map.get(hash, |k| key.is(k), guard) {
            if let Some(after) = st.try_add(e, n) {
                self.map.maybe_sweep(e, &self.cfg);
                return Some((st, Outcome::Head(after)));
            }
        }
        self.add_slow(hash, key, e, n, guard)
    }

    #[inline(never)]
    fn add_slow<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &'g Guard<'g>,
    ) -> Option<(&'g KeyState, Outcome)> {
        loop {
            let st = match self.map.get(hash, |k| key.is(k), guard) {
                Some(st) if !st.is_dead() => st,
                _ => self.insert(hash, key, e, guard)?,
            };
            let o = st.add(e, n, &self.cfg);
            if !matches!(o, Outcome::Retry) {
                self.map.maybe_sweep(e, &self.cfg);
                return Some((st, o));
            }
        }
    }

    #[cold]
    fn insert<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        e: u64,
        guard: &'g Guard<'g>,
    ) -> Option<&'g KeyState> {
        match self
            .map
            .get_or_insert(hash, |k| key.is(k), || key.to_key(), &self.cfg, e, guard)
        {
            Some(st) => Some(st),
            None => {
                self.untracked.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The key's state, if held and not moving (readers wait out a move).
    pub(super) fn read_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, e: u64) -> u64 {
        let guard = Guard::pin(self.map.graveyard());
        let hash = self.map.hash(key);
        loop {
            match self.map.get(hash, |k| key.is(k), &guard) {
                None => return 0,
                Some(st) => match st.sum(e, &self.cfg) {
                    Read::Sum(s) => return s,
                    Read::Moved => continue,
                },
            }
        }
    }

    /// The key's window sum now (0 for keys never seen or evicted).
    pub fn sum<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> u64 {
        self.sum_at(key, self.clock.now())
    }

    /// The key's window sum at `now`: exact for any `now` at or after the
    /// key's newest add (as [`SlidingWindow::sum_at`](crate::SlidingWindow::sum_at)).
    /// Waits, briefly, while the key is moving to a bigger table.
    pub fn sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64) -> u64 {
        self.read_at(key, self.epoch(now))
    }

    /// The `k` keys with the largest non-zero window sums at `now`,
    /// largest first (ties in unspecified order). A scan of the map one
    /// shard at a time: keys added or evicted in other shards meanwhile may
    /// be missed.
    pub fn top_at(&self, now: u64, k: usize) -> Vec<(K, u64)> {
        if k == 0 {
            return Vec::new();
        }
        let e = self.epoch(now);
        let mut best: Vec<(K, u64)> = Vec::new();
        let mut floor = 0u64;
        self.for_each_sum(e, |key, s| {
            if s == 0 || (best.len() >= k && s <= floor) {
                return;
            }
            best.push((key.clone(), s));
            if best.len() >= k.saturating_mul(2) {
                best.sort_unstable_by_key(|x| std::cmp::Reverse(x.1));
                best.truncate(k);
                floor = best[k - 1].1;
            }
        });
        best.sort_unstable_by_key(|x| std::cmp::Reverse(x.1));
        best.truncate(k);
        best
    }

    /// Calls `f(key, sum at epoch e, state)` for every key held.
    pub(super) fn for_each_state(&self, e: u64, mut f: impl FnMut(&K, u64, &KeyState)) {
        self.map.for_each(|key, st| {
            // Under the shard lock no move is in progress: never `Moved`.
            if let Read::Sum(s) = st.sum(e, &self.cfg) {
                f(key, s, st);
            }
        });
    }

    fn for_each_sum(&self, e: u64, mut f: impl FnMut(&K, u64)) {
        self.for_each_state(e, |k, s, _| f(k, s));
    }

    /// Keys held now (never more than `max_keys`).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose window at `now` is empty (no count at an epoch
    /// inside the window or after it) and that no add is touching; returns
    /// how many were dropped. Racing adds are never lost: an add that finds
    /// its key evicted inserts it afresh.
    pub fn evict_idle_at(&self, now: u64) -> usize {
        self.map.evict_idle(self.epoch(now), &self.cfg)
    }

    /// Adds that were not tracked because the map was full of keys that
    /// were not idle.
    pub fn untracked_adds(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Heap bytes held for `key` outside its map slot (its out-of-line
    /// window and stripe rows; 0 for a key seen in one slice per window,
    /// or absent).
    pub fn key_memory_bytes<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> usize {
        let guard = Guard::pin(self.map.graveyard());
        let hash = self.map.hash(key);
        self.map
            .get(hash, |k| key.is(k), &guard)
            .map_or(0, |st| st.heap_bytes(&self.cfg))
    }

    /// Bytes held by the whole structure: the map's tables (control bytes
    /// and slots, each holding a key and its inline state) and every key's
    /// out-of-line window. Keys' own heap data (e.g. a `String`'s buffer)
    /// is not included.
    pub fn memory_bytes(&self) -> usize {
        self.map.memory_bytes(&self.cfg)
    }

    /// Whether `key` has stripe rows (several threads added to it at once).
    pub fn is_striped<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        let guard = Guard::pin(self.map.graveyard());
        let hash = self.map.hash(key);
        self.map
            .get(hash, |k| key.is(k), &guard)
            .is_some_and(|st| st.is_striped())
    }

    /// Loom models only: gives `key` its stripe rows as if it had seen
    /// contention (a model cannot force a failed CAS). `false` if absent.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __stripe<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        let guard = Guard::pin(self.map.graveyard());
        let hash = self.map.hash(key);
        self.map
            .get(hash, |k| key.is(k), &guard)
            .map(|st| st.stripe(&self.cfg))
            .is_some()
    }

    /// Takes every count held, for every key: calls `f(key, epoch, count)`
    /// for each non-zero slice count (`epoch` = time / slice length) and
    /// leaves that slice at zero. An add racing the take lands either in
    /// what is taken or in what stays, never both, never neither. For
    /// callers that ship counts elsewhere (a flush), one shard at a time.
    pub fn take_all(&self, mut f: impl FnMut(&K, u64, u64)) {
        self.map
            .for_each(|key, st| st.take(&self.cfg, &mut |e, c| f(key, e, c)));
    }

    /// [`take_all`](Self::take_all) for one key.
    pub fn take<Q: KeyRef<K> + ?Sized>(&self, key: &Q, mut f: impl FnMut(u64, u64)) {
        self.map.for_each_in_shard(self.map.hash(key), |k, st| {
            if key.is(k) {
                st.take(&self.cfg, &mut f);
            }
        });
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The number of slices per key.
    pub fn slices(&self) -> usize {
        self.cfg.slices
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

/// Shards swept at each new epoch so the whole map is swept about once
/// per window.
fn sweep_per_epoch(slices: usize) -> usize {
    super::map::SHARDS.div_ceil(slices).max(1)
}

impl<K: 'static, C: Clock, S> fmt::Debug for KeyedWindows<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedWindows")
            .field("window", &self.window)
            .field("slices", &self.cfg.slices)
            .field("keys", &self.map.len())
            .finish_non_exhaustive()
    }
}
