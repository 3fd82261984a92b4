//! [`HotKeyDetector`]: keys whose window sum crossed a threshold `T`, each
//! crossing reported by exactly one add.
//!
//! # Heavy keys, and everyone else
//! A window of `S` slices reaches `T` only if one of its slices holds at
//! least `H = ceil(T / S)` (otherwise it holds at most `S (H - 1) < T`).
//! A key whose slices in the window all hold less than `H` cannot be hot,
//! and needs nothing but its counts; only a *heavy* key (a slice at `H` or
//! more) gets a [`Home`] (`home.rs`) with the hot rule's state. So an add
//! on a key far from the threshold costs what a [`KeyedWindows::add_at`]
//! costs plus one load of its entry's word (same line): the entry's count
//! after the add's CAS is below `H` and the key has no home.
//!
//! # The entry's hot flags (the `hot` word of `entry.rs`)
//! - `CHECKED`: whether the key has a home was looked up (see below);
//!   `HAS_HOME`: it had one, or got one since.
//! - `HOT_HERE`: the key is hot at this entry's epoch: later adds here
//!   change nothing and stop at once, while this epoch is the newest (an
//!   add at a later one may have cooled the key since: then the home says).
//! - `NOTED`: this slice reached `H` and the home knows it (its
//!   `last_heavy`, which keeps it from being retired while the slice is in
//!   a window).
//!
//! # Why the check runs under the slice's shard lock
//! An add that makes a slice heavy creates the home, then marks `HAS_HOME`
//! on the key's entries in the slices whose window holds that slice, each
//! under its map's shard lock for the key. An entry created meanwhile must
//! not miss both: the add that inserts it checks for the home under the
//! same shard lock, in the same lock hold as the insert (`add.rs`, the
//! `fresh` callback), and the entry is born `CHECKED` (plus `HAS_HOME`).
//! Whichever lock hold comes second sees the other's work: the home
//! (created before the marker took the lock), or the entry to mark. A
//! slice whose map the marker does not find yet is covered by the ring:
//! the marker reads every slot by an RMW (`Ring::for_each_map_synced`), so
//! a map installed later is installed by a CAS that reads from it, and
//! whoever finds that map sees the home. The check is a lock-free lookup
//! of the home map inside a lock the insert holds anyway, so a key's
//! first add in a slice takes no lock of its own. An entry created by an add of the plain windows (through
//! [`HotKeyDetector::windows`]) is born unchecked; its first detector add
//! checks under the home map's shard lock, which the home's creation
//! holds before the marking starts: the same argument with that lock.
//!
//! # The exact step (heavy keys)
//! Unless the key is hot at this epoch already: an RMW on the home's word,
//! the exact window sum `after` (a lookup in each live slice), `before =
//! after - n`, and the rule's transition as one CAS (`home::decide`): of
//! racing adds across one crossing exactly one CAS reports. An add whose
//! epoch has left the newest slice's window decides nothing (as the ring
//! drops such adds).
//!
//! # What can wait
//! The exact step reads the window, which waits while the key moves to a
//! bigger table in one slice's map (a few instructions per key, under a
//! lock hold). Only heavy keys that are not yet hot at their epoch take
//! it.

use super::entry::Entry;
use super::home::{Dead, Home, HomeCfg};
use super::key::KeyHasher;
use super::key::{Key, KeyRef};
use super::map::Map;
use super::reclaim::Guard;
use super::windows::KeyedWindows;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::sync::Ordering;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::time::Duration;

const CHECKED: u64 = 1;
const HAS_HOME: u64 = 1 << 1;
const HOT_HERE: u64 = 1 << 2;
const NOTED: u64 = 1 << 3;

/// Keys whose count in the last window crossed a threshold, reported once
/// per crossing.
///
/// # The hot rule
/// On an add of `n` at `t`, let `before` be the key's window sum at `t`
/// without this add. If the key is hot and `before < threshold`, it cools.
/// Then, if it is not hot and `before + n >= threshold`, it becomes hot and
/// the add returns `true`. [`is_hot_at`](Self::is_hot_at) and
/// [`hot_keys_at`](Self::hot_keys_at) report keys that are hot by this rule
/// and whose window sum at `now` is still at least the threshold.
///
/// # What `before` means under concurrency
/// Racing adds see each other through one RMW of the key's hot word before
/// they read the window, so the last of them sees the whole crossing; the
/// hot transition is one CAS of that word, which records the epoch of the
/// latest add that saw the key at or above the threshold. Within one epoch
/// the window only grows, so an add whose `before` is below the threshold
/// at an epoch where the key was already seen above it is a stale view and
/// changes nothing. Consequences:
/// - among adds racing across one crossing, exactly one returns `true`
///   (model-checked with loom);
/// - at most one add per key per epoch returns `true`;
/// - with times that never go backwards, a single thread gets exactly the
///   rule above.
///
/// # Cost
/// An add on a key far from the threshold costs what a
/// [`KeyedWindows::add_at`] costs plus one load of a word beside its
/// count. Once a key is hot at the add's epoch, the same. In between (a
/// key with a slice at `ceil(threshold / slices)` or more that is not hot
/// yet at this epoch), an add reads the key's whole window.
///
/// ```
/// use stripecount::{HotKeyDetector, ManualClock};
/// use std::time::Duration;
///
/// let d = HotKeyDetector::with_clock(Duration::from_secs(10), 10, 3, ManualClock::new())?;
/// assert!(!d.add_at(&"k", 0, 2));
/// assert!(d.add_at(&"k", 0, 1)); // 3 reaches the threshold: newly hot
/// assert!(!d.add_at(&"k", 0, 1)); // already hot
/// assert!(d.is_hot_at(&"k", 0));
/// assert_eq!(d.hot_keys_at(0), vec!["k"]);
/// assert!(!d.is_hot_at(&"k", 10_000_000_000)); // its adds left the window
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct HotKeyDetector<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    /// Declared before `windows`: dropped first (it shares the windows'
    /// collector, `Map::new_in`).
    homes: Map<K, Home, S>,
    home_cfg: HomeCfg,
    pub(super) windows: KeyedWindows<K, C, S>,
    threshold: u64,
    /// `H`: a slice count that makes a key heavy.
    heavy: u64,
}

impl<K: Key> HotKeyDetector<K> {
    /// A detector over windows of `window` in `slices` slices, on the
    /// monotonic clock. Errors as [`KeyedWindows::new`], and a zero
    /// threshold.
    pub fn new(window: Duration, slices: usize, threshold: u64) -> Result<Self, ConfigError> {
        Self::with_clock(window, slices, threshold, MonotonicClock)
    }
}

impl<K: Key, C: Clock> HotKeyDetector<K, C> {
    /// A detector on the given clock (see [`HotKeyDetector::new`]).
    pub fn with_clock(
        window: Duration,
        slices: usize,
        threshold: u64,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::over(KeyedWindows::with_clock(window, slices, clock)?, threshold)
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetector<K, C, S> {
    /// A detector over the given per-key windows, e.g. built with
    /// [`KeyedWindows::with_hasher`]. Errors on a zero threshold.
    pub fn over(windows: KeyedWindows<K, C, S>, threshold: u64) -> Result<Self, ConfigError> {
        if threshold == 0 {
            return Err(ConfigError::Invalid("the hot threshold must be at least 1"));
        }
        let slices = windows.slices() as u64;
        // SAFETY: `homes` is declared before `windows` (dropped first), and
        // the windows' collector is boxed: its address outlives every move
        // of the detector.
        let homes = unsafe {
            Map::new_in_sweeping(
                windows.ring.hasher().clone(),
                windows.ring.graveyard(),
                super::map::SHARDS.div_ceil(slices as usize).max(1),
            )
        };
        Ok(HotKeyDetector {
            homes,
            home_cfg: HomeCfg { slices },
            windows,
            threshold,
            heavy: threshold.div_ceil(slices),
        })
    }

    /// Bounds the keys each slice holds (see
    /// [`KeyedWindows::with_max_keys`]); an add that is not tracked
    /// returns `false`.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.windows = self.windows.with_max_keys(max_keys);
        self
    }

    /// The threshold.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The per-key windows (sums, top-k, eviction, memory).
    pub fn windows(&self) -> &KeyedWindows<K, C, S> {
        &self.windows
    }

    /// Adds `n` to `key` now; `true` if this add made the key hot.
    #[inline]
    pub fn add<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.add_at(key, self.windows.clock.now(), n)
    }

    /// Adds `n` to `key` at `now`; `true` if this add made the key hot.
    /// An add of 0, an add older than the ring and an untracked add return
    /// `false`.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> bool {
        self.became_hot_at(key, now, n).is_some()
    }

    /// As [`add_at`](Self::add_at), returning the key's window sum after
    /// this add (as the add saw it) when this add made the key hot.
    #[inline]
    pub fn became_hot_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> Option<u64> {
        let hash = self.windows.ring.hash(key);
        self.became_hot_in(hash, key, now, n)
    }

    /// The engine of every detector add (see the module docs).
    #[inline]
    pub(super) fn became_hot_in<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        now: u64,
        n: u64,
    ) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let w = &self.windows;
        let guard = Guard::pin(w.ring.graveyard());
        let at = w.locate(now, &guard);
        let e = at.0;
        let (en, after) = w.add_in(hash, key, at, n, &guard, |en| {
            // A new entry, under its shard's lock ("Why the check runs
            // under the slice's shard lock").
            let has = self.homes.get(hash, |k| key.is(k), &guard).is_some();
            en.hot()
                .fetch_or(CHECKED | if has { HAS_HOME } else { 0 }, Ordering::AcqRel);
        })?;
        let flags = en.hot().load(Ordering::Acquire);
        if flags & HOT_HERE != 0
            && (flags & NOTED != 0 || after.is_some_and(|c| c < self.heavy))
            && w.ring.newest() == e
        {
            // Hot at this epoch, and no later slice exists whose adds could
            // have cooled the key since; a heavy crossing still notes itself.
            return None;
        }
        if flags & (CHECKED | HAS_HOME) == CHECKED && after.is_some_and(|c| c < self.heavy) {
            return None;
        }
        self.heavy_step(hash, key, e, n, en, after, &guard)
    }

    /// The rest of an add that the flags did not settle.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn heavy_step<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        en: &Entry,
        after: Option<u64>,
        guard: &Guard<'_>,
    ) -> Option<u64> {
        let mut flags = en.hot().load(Ordering::Acquire);
        if flags & CHECKED == 0 {
            // An entry the plain windows created: under the home map's
            // shard lock (see "Why the check runs under the slice's shard
            // lock").
            let has = self
                .homes
                .with_locked(hash, |k| key.is(k), |_| ())
                .is_some();
            let set = CHECKED | if has { HAS_HOME } else { 0 };
            flags = en.hot().fetch_or(set, Ordering::AcqRel) | set;
        }
        // A striped entry's count is not known here: treat it as heavy.
        let heavy_here = !matches!(after, Some(c) if c < self.heavy);
        if heavy_here && flags & NOTED == 0 {
            self.make_home(hash, key, e, guard);
            en.hot().fetch_or(NOTED, Ordering::AcqRel);
        } else if flags & HAS_HOME == 0 {
            return None;
        }
        self.exact_step(hash, key, e, n, en, heavy_here, guard)
    }

    /// Creates the key's home (or finds it) with `last_heavy >= e`, then
    /// marks `HAS_HOME` on its entries whose window holds slice `e`, each
    /// under its map's shard lock (the lock a new entry's check runs in).
    fn make_home<Q: KeyRef<K> + ?Sized>(&self, hash: u64, key: &Q, e: u64, guard: &Guard<'_>) {
        let made = self.homes.upsert(
            hash,
            |k| key.is(k),
            || key.to_key(),
            &self.home_cfg,
            e,
            guard,
            |h, _| h.note_heavy(e),
        );
        debug_assert!(made.is_some(), "the home map is unbounded");
        let s = self.home_cfg.slices;
        self.windows.ring.for_each_map_synced(guard, |m| {
            if m.epoch >= e && m.epoch - e < s {
                m.map.with_locked(
                    hash,
                    |k| key.is(k),
                    |x| x.hot().fetch_or(CHECKED | HAS_HOME, Ordering::AcqRel),
                );
            }
        });
    }

    /// The exact step of a heavy key (see the module docs).
    #[allow(clippy::too_many_arguments)]
    fn exact_step<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        en: &Entry,
        heavy_here: bool,
        guard: &Guard<'_>,
    ) -> Option<u64> {
        let w = &self.windows;
        self.homes.maybe_sweep(e, &self.home_cfg);
        loop {
            if w.ring.too_old(e) {
                return None;
            }
            let Some(home) = self.homes.get(hash, |k| key.is(k), guard) else {
                // Retired: no heavy slice is left in this epoch's window
                // (home.rs, "Lifetime"), unless this add's own is.
                if !heavy_here {
                    return None;
                }
                self.make_home(hash, key, e, guard);
                continue;
            };
            match self.decide(home, hash, key, e, n, guard) {
                Ok((report, since)) => {
                    if since {
                        en.hot().fetch_or(HOT_HERE, Ordering::AcqRel);
                    }
                    return report;
                }
                Err(Dead) => continue,
            }
        }
    }

    fn decide<Q: KeyRef<K> + ?Sized>(
        &self,
        home: &Home,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &Guard<'_>,
    ) -> Result<(Option<u64>, bool), Dead> {
        if home.hot_since(e)? {
            return Ok((None, true));
        }
        home.sync()?;
        let after = self.windows.read_in(hash, key, e, guard);
        let before = after.saturating_sub(n);
        let (report, since) = home.transition(e, before, after, self.threshold)?;
        Ok((report.then_some(after), since))
    }

    /// Whether `key` is hot by the rule and its window sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64) -> bool {
        let hash = self.windows.ring.hash(key);
        self.is_hot_in(hash, key, now)
    }

    pub(super) fn is_hot_in<Q: KeyRef<K> + ?Sized>(&self, hash: u64, key: &Q, now: u64) -> bool {
        let w = &self.windows;
        let guard = Guard::pin(w.ring.graveyard());
        let sum = w.read_in(hash, key, w.epoch(now), &guard);
        sum >= self.threshold
            && self
                .homes
                .get(hash, |k| key.is(k), &guard)
                .is_some_and(|h| h.state().is_ok_and(|s| s.0))
    }

    /// Whether `key` is hot now.
    pub fn is_hot<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.is_hot_at(key, self.windows.clock.now())
    }

    /// Every key that [`is_hot_at`](Self::is_hot_at) `now` (in unspecified
    /// order; a scan of every live slice, one shard at a time).
    pub fn hot_keys_at(&self, now: u64) -> Vec<K> {
        let guard = Guard::pin(self.windows.ring.graveyard());
        let mut out: Vec<K> = self
            .windows
            .sums_at(now)
            .into_iter()
            .filter(|(k, s)| {
                *s >= self.threshold
                    && self
                        .homes
                        .get(self.windows.ring.hash(k), |x| x == k, &guard)
                        .is_some_and(|h| h.state().is_ok_and(|s| s.0))
            })
            .map(|(k, _)| k)
            .collect();
        out.shrink_to_fit();
        out
    }

    /// Drops the slices that left the window at `now` (see
    /// [`KeyedWindows::evict_idle_at`]) and the hot state of keys with no
    /// heavy slice left; returns the slice entries dropped.
    pub fn evict_idle_at(&self, now: u64) -> usize {
        // Homes are retired against the newest slice at most (home.rs,
        // "Lifetime": adds up to a window older than the newest still
        // decide).
        let e = self.windows.epoch(now).min(self.windows.ring.newest());
        self.homes.evict_idle(e, &self.home_cfg);
        self.windows.evict_idle_at(now)
    }

    /// Heavy keys holding hot state now (keys with a slice at
    /// `ceil(threshold / slices)` or more within about two windows).
    pub fn heavy_keys(&self) -> usize {
        self.homes.len()
    }
}

impl<K: 'static, C: Clock, S> fmt::Debug for HotKeyDetector<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeyDetector")
            .field("threshold", &self.threshold)
            .field("windows", &self.windows)
            .finish()
    }
}
