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
//! after the add's CAS is below `H` and the key has no home. A striped
//! entry (a key contended in this slice) adds a fence and a load of that
//! word (see "Striped entries").
//!
//! # Striped entries
//! An add to a striped entry (a key contended in this slice) learns no
//! count from its add. If the key is hot at this epoch (`HOT_HERE` and
//! `NOTED`, and no later slice), the add ends as any other such add
//! does, with no read. Else the entry tells whether its count is below
//! `H` from the add's own stripe, while every stripe is below its share
//! of `H` (`entry.rs`, "The mark of a striped entry"), and reads the
//! whole count only past that: a key far from `H` that has no home ends
//! there, with no read of the stripes other threads write.
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
//! - `NEAR`: a striped entry's adds read its whole count (see "Striped
//!   entries").
//!
//! # The rest of a heavy key's add (`exact.rs`)
//! The home check of a key's first add in a slice, the marking of a new
//! home, and the exact step.
//!
//! # The bound (`bound.rs`)
//! An exact step that leaves the key cold stores in the entry's hot word
//! how far the entry's count can grow before the window could reach the
//! threshold; later adds at the same epoch below it skip the exact step.
//! A late add (older than the newest slice) clears the bounds of the
//! key's newer entries.
//!
//! # What can wait
//! The exact step reads the window, which waits while the key moves to a
//! bigger table in one slice's map (a few instructions per key, under a
//! lock hold). Only heavy keys that are not yet hot at their epoch take
//! it.

use super::add::{STRIPED_ADD, UNKNOWN};
use super::bound;
use super::builder::HotKeyDetectorBuilder;
use super::entry::{Entry, Striped};
use super::home::{Home, HomeCfg};
use super::slice_map::SliceMap;
use super::windows::KeyedWindows;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::KeyHasher;
use crate::key::{Key, KeyRef};
use crate::map::{Map, Now, Probe};
use crate::pack::EntryHot;
use crate::reclaim::Guard;
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::time::Duration;

/// Homes a shard of a bounded detector's home map (`bound_homes`): the
/// shards of a map that holds few keys would each hold a mostly empty table.
pub(super) const HOMES_PER_SHARD: usize = 2048;

// The entry's hot word: `crate::pack::EntryHot`.
pub(super) const CHECKED: u64 = EntryHot::CHECKED.mask();
pub(super) const HAS_HOME: u64 = EntryHot::HAS_HOME.mask();
pub(super) const HOT_HERE: u64 = EntryHot::HOT_HERE.mask();
pub(super) const NOTED: u64 = EntryHot::NOTED.mask();

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
/// # Keys from clients
/// As [`KeyedWindows`]' ("Keys from clients"): a seed per instance, so
/// keys cannot be chosen to collide; `max_keys` bounds the keys a slice
/// holds. A sender makes a key hot only with that key's own adds.
///
/// # Cost
/// An add on a key far from the threshold costs what a
/// [`KeyedWindows::add_at`] costs plus one load of a word beside its
/// count (and a fence, on a key contended in the slice: it reads no other
/// thread's stripes). Once a key is hot at the add's epoch, the same. In
/// between (a key with a slice at `ceil(threshold / slices)` or more that
/// is not hot yet at this epoch), an add reads the key's whole window
/// about once a slice, and on every add once it is close enough to the
/// threshold to cross with the slice's next adds (or after a late add, one
/// at an older epoch than the newest slice).
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{HotKeyDetector, Timestamp};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let d = HotKeyDetector::builder(Duration::from_secs(10), 10, 3)
///     .clock(clock.clone())
///     .build()?;
/// let t = Timestamp::ZERO;
/// assert!(!d.add_at(&"k", t, 2));
/// assert!(d.add_at(&"k", t, 1)); // 3 reaches the threshold: newly hot
/// assert!(!d.add_at(&"k", t, 1)); // already hot
/// assert!(d.is_hot(&"k"));
/// assert_eq!(d.hot_keys(), vec!["k"]);
/// clock.advance(Duration::from_secs(10));
/// assert!(!d.is_hot(&"k")); // its adds left the window
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct HotKeyDetector<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    /// Every guard on it is pinned on the windows' graveyard.
    pub(super) homes: Map<K, Home, S>,
    pub(super) home_cfg: HomeCfg,
    pub(super) windows: KeyedWindows<K, C, S>,
    pub(super) threshold: u64,
    /// `H`: a slice count that makes a key heavy.
    pub(super) heavy: u64,
    /// Adds that made a slice heavy when `homes` was full (a bounded
    /// detector's: [`bound_homes`](Self::bound_homes)): counted, not
    /// judged by the hot rule (`HotKeySketch::unjudged_adds`).
    pub(super) homeless: AtomicU64,
}

impl<K: Key> HotKeyDetector<K> {
    /// A detector of keys whose sum over windows of `window` in `slices`
    /// slices reaches `threshold`, on the monotonic clock. Errors as
    /// [`KeyedWindows::new`], and a zero threshold.
    ///
    /// ```
    /// use stripecount::HotKeyDetector;
    /// use std::time::Duration;
    ///
    /// let d = HotKeyDetector::new(Duration::from_secs(10), 10, 100)?;
    /// assert!(!d.add(&"k", 99));
    /// assert!(d.add(&"k", 1)); // 100 in the last 10 s: newly hot
    /// assert!(HotKeyDetector::<u64>::new(Duration::from_secs(10), 10, 0).is_err());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn new(window: Duration, slices: usize, threshold: u64) -> Result<Self, ConfigError> {
        Self::builder(window, slices, threshold).build()
    }

    /// The builder of a detector (see [`new`](Self::new)), for the options
    /// of [`HotKeyDetectorBuilder`] (a clock, a hasher, a bound on the keys
    /// of each slice); checked by its
    /// [`build`](HotKeyDetectorBuilder::build), with the errors of `new`.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{HotKeyDetector, Timestamp};
    /// use std::time::Duration;
    ///
    /// let d = HotKeyDetector::builder(Duration::from_secs(1), 10, 3)
    ///     .clock(ManualClock::new())
    ///     .max_keys(10_000)
    ///     .build()?;
    /// assert_eq!(d.became_hot_at(&7u64, Timestamp::ZERO, 5), Some(5));
    /// assert!(d.is_hot(&7)); // the manual clock reads 0
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder(window: Duration, slices: usize, threshold: u64) -> HotKeyDetectorBuilder<K> {
        HotKeyDetectorBuilder::new(window, slices, threshold)
    }
}

impl<K: Key, C: Clock> HotKeyDetector<K, C> {
    /// A builder on `clock`: [`HotKeyDetector::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](HotKeyDetectorBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::HotKeyDetector;
    /// use std::time::Duration;
    ///
    /// let d = HotKeyDetector::<u64, ManualClock>::builder_with_clock(
    ///     Duration::from_secs(10),
    ///     10,
    ///     100,
    ///     ManualClock::new(),
    /// )
    /// .build()?;
    /// assert!(!d.add(&7, 99));
    /// assert!(d.add(&7, 1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder_with_clock(
        window: Duration,
        slices: usize,
        threshold: u64,
        clock: C,
    ) -> HotKeyDetectorBuilder<K, C> {
        HotKeyDetector::builder(window, slices, threshold).clock(clock)
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetector<K, C, S> {
    /// A detector over the given per-key windows (a builder's `build`).
    /// Errors on a zero threshold.
    pub(super) fn from_windows(
        windows: KeyedWindows<K, C, S>,
        threshold: u64,
    ) -> Result<Self, ConfigError> {
        if threshold == 0 {
            return Err(ConfigError::Invalid("the hot threshold must be at least 1"));
        }
        let slices = windows.slices() as u64;
        // Guards on the homes are pinned on the windows' graveyard, which
        // the detector owns with them.
        let mut homes = Map::new(windows.ring.hasher().clone());
        homes.set_sweep(crate::map::SHARDS.div_ceil(slices as usize).max(1), 1);
        Ok(HotKeyDetector {
            homes,
            home_cfg: HomeCfg { slices },
            windows,
            threshold,
            heavy: threshold.div_ceil(slices),
            homeless: AtomicU64::new(0),
        })
    }

    /// Holds hot state for at most `max` keys at once, in a map of as few
    /// shards as that needs (a sketch's, whose memory is fixed: `sketch.rs`,
    /// "Memory"). A key that turns heavy while it is full (after a sweep of
    /// the homes left idle) gets none: its add is counted in `homeless`, and
    /// the key is not judged by the hot rule until an add of it finds room.
    /// On a new detector, before any add.
    pub(super) fn bound_homes(&mut self, max: usize) {
        let shards = max.div_ceil(HOMES_PER_SHARD);
        let mut homes = Map::with_shards(self.windows.ring.hasher().clone(), shards);
        let slices = self.home_cfg.slices as usize;
        homes.set_sweep(homes.shards().div_ceil(slices).max(1), 1);
        homes.set_max_keys(max);
        self.homes = homes;
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
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> bool {
        self.became_hot_at(key, now, n).is_some()
    }

    /// As [`add`](Self::add), returning the key's window sum after this add
    /// (as the add saw it) when this add made the key hot.
    #[inline]
    pub fn became_hot<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> Option<u64> {
        self.became_hot_at(key, self.windows.clock.now(), n)
    }

    /// As [`add_at`](Self::add_at), returning the key's window sum after
    /// this add (as the add saw it) when this add made the key hot.
    #[inline]
    pub fn became_hot_at<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        now: Timestamp,
        n: u64,
    ) -> Option<u64> {
        let now = now.as_nanos();
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
        let guard = Guard::pin(self.windows.ring.graveyard());
        let at = self.windows.locate(now, &guard);
        self.became_hot_with(hash, key, at, n, &guard)
    }

    /// [`became_hot_in`](Self::became_hot_in) once the add's map was found
    /// (`at`, from [`KeyedWindows::locate`]) under `guard`: a batch finds
    /// it once for a group of adds (`batch.rs`). `n > 0`.
    #[inline(always)]
    pub(super) fn became_hot_with<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        at: (u64, Option<&'g SliceMap<K, S>>),
        n: u64,
        guard: &'g Guard<'_>,
    ) -> Option<u64> {
        self.became_hot_looked(hash, key, at, n, guard, Now)
    }

    /// [`became_hot_with`](Self::became_hot_with) with the key's lookup
    /// in the slice's map made by `probe` (`KeyedWindows::add_with`).
    #[inline(always)]
    pub(super) fn became_hot_looked<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        at: (u64, Option<&'g SliceMap<K, S>>),
        n: u64,
        guard: &'g Guard<'_>,
        probe: impl Probe<'g, K, Entry>,
    ) -> Option<u64> {
        let w = &self.windows;
        let e = at.0;
        let fresh = || {
            // A new entry, under its shard's lock ("Why the check runs
            // under the slice's shard lock"): its hot word, stored before
            // the key is published.
            let has = self.homes.get(hash, |k| key.is(k), guard).is_some();
            CHECKED | if has { HAS_HOME } else { 0 }
        };
        // The entry's count after the add; for a striped entry, see
        // "Striped entries". If it moved meanwhile, not known (`UNKNOWN`,
        // above every count): treated as heavy.
        let (en, mut c) = w.add_with(hash, key, at, n, guard, fresh, probe)?;
        if c & STRIPED_ADD != 0 && c != UNKNOWN {
            c = self.striped_count(en, e, c & !STRIPED_ADD)?;
        }
        let flags = en.hot().load(Ordering::Acquire);
        let light = c < self.heavy;
        // Each of these ends the add (none needs the others).
        // A key with no home whose count here is below `H`: first, and
        // alone, so that an add on a key far from the threshold tests
        // nothing else.
        if light & (flags & (CHECKED | HAS_HOME) == CHECKED) {
            return None;
        }
        // A heavy crossing (a count reaching `H`) still notes itself.
        let noted = (flags & NOTED != 0) | light;
        // Hot at this epoch, and no later slice exists whose adds could
        // have cooled the key since.
        if (flags & HOT_HERE != 0) & noted & (w.ring.newest() == e) {
            return None;
        }
        if noted && c < bound::bound(flags) {
            // Cold, and this add cannot reach the threshold (`bound.rs`).
            return None;
        }
        self.heavy_step(hash, key, e, n, en, (c != UNKNOWN).then_some(c), guard)
    }

    /// The count of striped entry `en` (epoch `e`) after an add that left
    /// its stripe at `cell`, or `None` when the add ends there (see
    /// "Striped entries"); `UNKNOWN` if the entry moved.
    #[inline]
    fn striped_count(&self, en: &Entry, e: u64, cell: u64) -> Option<u64> {
        let flags = en.hot().load(Ordering::Acquire);
        if flags & (HOT_HERE | NOTED) == HOT_HERE | NOTED && self.windows.ring.newest() == e {
            return None; // hot here: what follows would end the add
        }
        match en.after_striped_add(cell, self.heavy) {
            (Striped::Count(c), _) => Some(c),
            (Striped::Moved, _) => Some(UNKNOWN),
            // Light, with no home: what follows would end the add.
            (Striped::Below, h) if h & (CHECKED | HAS_HOME) == CHECKED => None,
            // With a home: the count, read after the fence above.
            (Striped::Below, _) => Some(en.read().unwrap_or(UNKNOWN)),
        }
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
