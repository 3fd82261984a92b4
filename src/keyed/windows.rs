//! [`KeyedWindows`]: an exact sliding window per key, with bounded memory.
//!
//! The engine (`ring.rs`): one map of keys per live slice. An add finds the
//! map of its slice (one load while the slice is current), looks its key up
//! there (lock-free for keys the map holds) and adds to the key's entry
//! with one CAS (`entry.rs`). A key the slice's map does not hold yet is
//! inserted under one of the map's shard locks; a slice whose map is full
//! does not track the add and counts it in
//! [`untracked_adds`](KeyedWindows::untracked_adds). A read of a key's
//! window looks the key up in each live slice's map (`reads.rs`). The
//! builder is `builder.rs`.

use super::builder::KeyedWindowsBuilder;
use super::ring::Ring;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::KeyHasher;
use crate::key::{Key, KeyRef};
use crate::reclaim::Guard;
use crate::sync::{AtomicU64, Ordering};
use crate::window::slice_nanos;
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
/// holds nothing. [`KeyedWindowsBuilder::max_keys`] bounds the keys of
/// each slice.
///
/// # Keys from clients
/// The hasher `S` defaults to [`RandomState`](crate::hash::RandomState):
/// foldhash under a seed drawn from the operating system for this instance,
/// so keys sent by clients (addresses, API keys, URLs) cannot be chosen to
/// collide. A sender can still invent keys: with
/// [`max_keys`](KeyedWindowsBuilder::max_keys) a slice holds at most that
/// many, a later new key's adds in it are not tracked
/// ([`untracked_adds`](Self::untracked_adds)) and memory stays bounded;
/// without it, every invented key holds a slot until its slice leaves the
/// window. Under a known seed (a fixed hasher) crafted keys all collide,
/// and an add compares its key with each of them the slice holds (at most
/// `max_keys`); counts stay exact. The
/// [guide](crate::guide#keys-from-untrusted-clients) has the whole
/// picture; [`KeyedWindowsBuilder::hasher`] takes another hasher (std's
/// SipHash `RandomState` for the strongest guarantee, at ~15 ns more an
/// add).
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::KeyedWindows;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // The last 10 seconds, in 10 slices of 1 second, per key.
/// let w = KeyedWindows::builder(Duration::from_secs(10), 10)
///     .clock(clock.clone())
///     .build()?;
/// assert!(w.add(&"alice", 3));
/// assert!(w.add(&"bob", 1));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(w.add_and_sum(&"alice", 2), 5);
/// assert_eq!(w.top(1), vec![("alice", 5)]);
/// clock.advance(Duration::from_secs(5)); // the first adds are 10 s old
/// assert_eq!(w.sum(&"alice"), 2);
/// assert_eq!(w.sum(&"bob"), 0);
/// // The slice of the first adds left the window: dropped with its 2 keys.
/// assert_eq!(w.evict_idle(), 2);
/// assert_eq!(w.len(), 1); // alice, in the slice of the second add
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
    ///
    /// ```
    /// use stripecount::KeyedWindows;
    /// use std::time::Duration;
    ///
    /// let w = KeyedWindows::new(Duration::from_secs(10), 10)?;
    /// w.add("alice", 2);
    /// assert_eq!(w.sum("alice"), 2);
    /// assert_eq!(w.sum("bob"), 0);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn new(window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::builder(window, slices).build()
    }

    /// The builder of windows of `window` cut into `slices` slices, for the
    /// options of [`KeyedWindowsBuilder`] (a clock, a hasher, a bound on
    /// the keys of each slice); checked by its
    /// [`build`](KeyedWindowsBuilder::build), with the errors of
    /// [`new`](Self::new).
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{KeyedWindows, Timestamp};
    /// use std::time::Duration;
    ///
    /// let w = KeyedWindows::builder(Duration::from_secs(1), 10)
    ///     .clock(ManualClock::new())
    ///     .max_keys(10_000)
    ///     .build()?;
    /// assert!(w.add_at(&7u64, Timestamp::ZERO, 1));
    /// assert_eq!(w.sum(&7), 1); // the manual clock reads 0
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder(window: Duration, slices: usize) -> KeyedWindowsBuilder<K> {
        KeyedWindowsBuilder::new(window, slices)
    }
}

impl<K: Key, C: Clock> KeyedWindows<K, C> {
    /// A builder on `clock`: [`KeyedWindows::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](KeyedWindowsBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::KeyedWindows;
    /// use std::time::Duration;
    ///
    /// let w = KeyedWindows::<u64, ManualClock>::builder_with_clock(
    ///     Duration::from_secs(1),
    ///     10,
    ///     ManualClock::new(),
    /// )
    /// .build()?;
    /// w.add(&7, 2);
    /// assert_eq!(w.sum(&7), 2);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder_with_clock(
        window: Duration,
        slices: usize,
        clock: C,
    ) -> KeyedWindowsBuilder<K, C> {
        KeyedWindows::builder(window, slices).clock(clock)
    }
}

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindows<K, C, S> {
    /// The windows a builder describes (its `build`).
    pub(super) fn from_parts(
        window: Duration,
        slices: usize,
        clock: C,
        hasher: S,
        max_keys: usize,
    ) -> Result<Self, ConfigError> {
        let slice_nanos = slice_nanos(window, slices)?;
        let mut ring = Ring::new(slices, slice_nanos, hasher);
        ring.set_max_keys(max_keys);
        Ok(KeyedWindows {
            ring,
            slices,
            slice_nanos,
            divisor: StrengthReducedU64::new(slice_nanos),
            window,
            clock,
            untracked: AtomicU64::new(0),
        })
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

    /// Adds `n` to `key` at `now` (on this structure's clock's timeline).
    /// `true` if it was counted; `false` if it was older than the ring
    /// (dropped, as by
    /// [`SlidingWindow::add_at`](crate::SlidingWindow::add_at)) or its
    /// slice could not track the key (see
    /// [`KeyedWindowsBuilder::max_keys`]). An add of 0 records nothing
    /// and returns `true`. The cheapest add: one lookup in the current
    /// slice's map and one CAS on the key's entry, which nothing else
    /// shares.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> bool {
        let now = now.as_nanos();
        if n == 0 {
            return true;
        }
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        self.add_in(hash, key, self.locate(now, &guard), n, &guard, || 0)
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
    pub fn add_and_sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> u64 {
        let now = now.as_nanos();
        let guard = Guard::pin(self.ring.graveyard());
        let hash = self.ring.hash(key);
        let at = self.locate(now, &guard);
        if n > 0 && self.add_in(hash, key, at, n, &guard, || 0).is_none() {
            return 0;
        }
        let e = at.0;
        self.read_in(hash, key, e, &guard)
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

    /// Drops every slice that left the window now; returns the entries
    /// they held (see [`evict_idle_at`](Self::evict_idle_at)).
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_at(self.clock.now())
    }

    /// Drops every slice that left the window at `now`; returns the entries
    /// they held. Slices are also dropped as time moves (the first add of
    /// a slice replaces the map of the slice a window before it); this
    /// frees the rest when adds stop. Adds racing it are never lost: an
    /// add is dropped only if its own slice is out of the window.
    pub fn evict_idle_at(&self, now: Timestamp) -> usize {
        let now = now.as_nanos();
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

    /// The start of slice `e` (an epoch reached from a time, so no
    /// overflow).
    pub(super) fn slice_start(&self, e: u64) -> Timestamp {
        Timestamp::from_nanos(e * self.slice_nanos)
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
