//! Per-key sliding windows ([`KeyedWindows`]), hot-key detection
//! ([`HotKeyDetector`]) and per-key handles ([`KeyHandle`],
//! [`HotKeyHandle`]).
//!
//! # Structure
//! A concurrent map (`scc::HashIndex`, chosen by measurement: see
//! `map.rs`) from each key to a counted reference to its entry (header and
//! cells in one allocation). An entry is one key's
//! window: `S` packed 8-byte cells decoded against a per-key base epoch
//! (each key's window follows the rules of
//! [`SlidingWindow`](crate::SlidingWindow) at or after its newest add), a
//! hot word, and, once the key has seen contention,
//! striped rows so that a hot key does not serialize on one word. The
//! per-key protocol (striping, the eviction handshake, the hot word) and
//! why it is correct are documented at the top of `entry.rs`.
//!
//! # Invariants
//! - An add is counted in exactly one entry, or, when a key cannot be
//!   tracked (the `with_max_keys` bound is reached and no key is idle),
//!   counted in [`KeyedWindows::untracked_adds`]. An add never lands in a
//!   retired entry: it looks the key up again.
//! - An entry is retired (and then removed) only when it holds no count at
//!   an epoch inside or after the window at the evictor's time and no add
//!   is in flight on it.
//! - [`KeyedWindows::len`] counts reserved slots: the map never holds more
//!   entries than it says, and it never exceeds `max_keys`.
//!
//! # Eviction
//! Idle keys (window sum 0) are evicted by [`KeyedWindows::evict_idle_at`],
//! and automatically: once per window length, the first add whose epoch is a
//! whole window past the previous sweep runs a sweep of the map (amortized:
//! one pass per window, no background thread; turn it off with
//! [`KeyedWindows::with_auto_evict`]). With
//! [`with_max_keys`](KeyedWindows::with_max_keys), an add for a new key when
//! the map is full first sweeps idle keys (at most once per epoch: no key
//! can become idle before time moves on), and if none is idle, the add is
//! not tracked and is counted in [`KeyedWindows::untracked_adds`].
//!
//! # Memory (measured; 10 slices, x86-64)
//! A cold key holds one allocation: a 40-byte entry header and 10 packed
//! 8-byte cells (`tag:16 | count:48`, decoded against a per-key 64-bit
//! `base` epoch: see `entry.rs`) = 120 bytes, plus the map's own entry. A
//! key idle for any time holds the same 120 bytes (a long gap costs one
//! pass over its cells on the next add, never an aliased count). A striped
//! (hot) key adds 16 bytes plus one row of 384 bytes per stripe (CPUs
//! rounded up to a power of two; full-epoch 16-byte cells): 904 bytes in
//! all on a 2-CPU machine. See [`KeyedWindows::key_memory_bytes`].

mod entry;
mod map;

use self::entry::{Entry, EntryRef, Outcome};
use self::map::Map;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::stripes::default_cap;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use crate::window::slice_nanos;
use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

/// Sliding windows per key, with bounded memory.
///
/// ```
/// use stripecount::{KeyedWindows, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // The last 10 seconds, in 10 slices of 1 second, per key.
/// let w = KeyedWindows::with_clock(Duration::from_secs(10), 10, clock.clone())?;
/// assert_eq!(w.add(&"alice", 3), 3);
/// assert_eq!(w.add(&"bob", 1), 1);
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(w.add(&"alice", 2), 5);
/// assert_eq!(w.top_at(clock.now(), 1), vec![("alice", 5)]);
/// clock.advance(Duration::from_secs(5)); // the first adds are 10 s old
/// assert_eq!(w.sum(&"alice"), 2);
/// assert_eq!(w.sum(&"bob"), 0);
/// assert_eq!(w.evict_idle_at(clock.now()), 1); // bob is idle
/// assert_eq!(w.len(), 1);
/// # use stripecount::Clock;
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyedWindows<K: 'static, C: Clock = MonotonicClock> {
    map: Map<K>,
    slice_nanos: u64,
    slices: usize,
    stripes: usize,
    window: Duration,
    clock: C,
    max_keys: usize,
    auto_evict: bool,
    held: AtomicUsize,
    untracked: AtomicU64,
    /// Epoch of the last automatic sweep.
    swept: AtomicU64,
    /// `1 + epoch` of the last sweep forced by a full map (0: none).
    full_swept: AtomicU64,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedWindows<K> {
    /// Windows of `window` cut into `slices` slices, on the monotonic clock.
    ///
    /// Errors as [`SlidingWindow::new`](crate::SlidingWindow::new).
    pub fn new(window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::with_clock(window, slices, MonotonicClock)
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> KeyedWindows<K, C> {
    /// Windows on the given clock (errors as
    /// [`SlidingWindow::new`](crate::SlidingWindow::new)).
    pub fn with_clock(window: Duration, slices: usize, clock: C) -> Result<Self, ConfigError> {
        let slice_nanos = slice_nanos(window, slices)?;
        Ok(KeyedWindows {
            map: Map::new(),
            slice_nanos,
            slices,
            stripes: default_cap(),
            window,
            clock,
            max_keys: usize::MAX,
            auto_evict: true,
            held: AtomicUsize::new(0),
            untracked: AtomicU64::new(0),
            swept: AtomicU64::new(0),
            full_swept: AtomicU64::new(0),
        })
    }

    /// Holds at most `max_keys` keys: when full, idle keys are evicted
    /// first; if none is idle, adds for new keys are not tracked (they
    /// return 0 and are counted by [`untracked_adds`](Self::untracked_adds)).
    /// A `max_keys` of 0 tracks nothing.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Turns the automatic once-per-window sweep of idle keys on (the
    /// default) or off. Off suits callers that evict themselves with
    /// [`evict_idle_at`](Self::evict_idle_at), e.g. when adds arrive with
    /// times from several sources that lag each other.
    pub fn with_auto_evict(mut self, on: bool) -> Self {
        self.auto_evict = on;
        self
    }

    #[inline]
    fn epoch(&self, now: u64) -> u64 {
        now / self.slice_nanos
    }

    /// Adds `n` to `key` now; returns the key's window sum after this add.
    #[inline]
    pub fn add<Q>(&self, key: &Q, n: u64) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        self.add_at(key, self.clock.now(), n)
    }

    /// Adds `n` to `key` at `now` (nanoseconds on this clock); returns the
    /// key's window sum at `now` after this add, as read right after it
    /// (adds racing on other threads may or may not be included). An add
    /// older than the ring is dropped, as in
    /// [`SlidingWindow::add_at`](crate::SlidingWindow::add_at); an add of
    /// 0 records nothing. Returns 0 if the key could not be tracked (see
    /// [`with_max_keys`](Self::with_max_keys)).
    #[inline]
    pub fn add_at<Q>(&self, key: &Q, now: u64, n: u64) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        if n == 0 {
            return self.sum_at(key, now);
        }
        let e = self.epoch(now);
        let slices = self.slices;
        self.add_with(key, now, n, |entry, _| entry.sum(e, slices))
            .unwrap_or(0)
    }

    /// Adds `n` to `key` at `now` without reading the sum back: the
    /// cheapest add (it touches only the key's own row).
    #[inline]
    pub fn record_at<Q>(&self, key: &Q, now: u64, n: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        if n > 0 {
            let _ = self.add_with(key, now, n, |_, _| ());
        }
    }

    /// The engine of every add: finds or inserts the key's entry, adds,
    /// and runs `then` on the entry while it is reachable. `None`: the key
    /// could not be tracked.
    #[inline]
    fn add_with<Q, R>(
        &self,
        key: &Q,
        now: u64,
        n: u64,
        then: impl Fn(&Entry, Outcome) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        let e = self.epoch(now);
        let result = loop {
            let found = self.map.with(key, |entry| {
                match entry.add(e, n, self.slices, self.stripes) {
                    Outcome::Dead => Err(entry.clone()),
                    o => Ok(then(entry, o)),
                }
            });
            match found {
                Some(Ok(r)) => break Some(r),
                Some(Err(dead)) => self.remove_dead(key, &dead),
                None => {
                    if !self.insert(key, now) {
                        self.untracked.fetch_add(1, Ordering::Relaxed);
                        break None;
                    }
                }
            }
        };
        self.maybe_sweep(now, e);
        result
    }

    /// Inserts a fresh entry for `key` unless present. `false`: no room.
    fn insert<Q>(&self, key: &Q, now: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        if !self.reserve(now) {
            return false;
        }
        if self
            .map
            .insert(key.to_owned(), EntryRef::new(self.slices, self.epoch(now)))
            .is_err()
        {
            // Another thread inserted it first: use theirs.
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        true
    }

    /// Reserves room for one more key, sweeping idle keys (at most once per
    /// epoch) when full.
    fn reserve(&self, now: u64) -> bool {
        for attempt in 0..2 {
            let mut c = self.held.load(Ordering::Acquire);
            while c < self.max_keys {
                match self
                    .held
                    .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return true,
                    Err(actual) => c = actual,
                }
            }
            if attempt == 1 {
                break;
            }
            let mark = self.epoch(now).saturating_add(1);
            let last = self.full_swept.load(Ordering::Acquire);
            if last == mark
                || self
                    .full_swept
                    .compare_exchange(last, mark, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                return false;
            }
            self.evict_idle_at(now);
        }
        false
    }

    fn remove_dead<Q>(&self, key: &Q, dead: &EntryRef)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.map.remove_if_same(key, dead) {
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
    }

    #[inline]
    fn maybe_sweep(&self, now: u64, e: u64) {
        if !self.auto_evict {
            return;
        }
        let last = self.swept.load(Ordering::Relaxed);
        if e >= last.saturating_add(self.slices as u64)
            && self
                .swept
                .compare_exchange(last, e, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.evict_idle_at(now);
        }
    }

    /// The key's window sum now (0 for keys never seen or evicted).
    pub fn sum<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.sum_at(key, self.clock.now())
    }

    /// The key's window sum at `now`: exact for any `now` at or after the
    /// key's newest add (as [`SlidingWindow::sum_at`](crate::SlidingWindow::sum_at)).
    pub fn sum_at<Q>(&self, key: &Q, now: u64) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let e = self.epoch(now);
        self.map
            .with(key, |entry| entry.sum(e, self.slices))
            .unwrap_or(0)
    }

    /// The `k` keys with the largest non-zero window sums at `now`,
    /// largest first (ties in unspecified order). A weakly consistent scan
    /// of the map: keys inserted or evicted during it may be missed.
    pub fn top_at(&self, now: u64, k: usize) -> Vec<(K, u64)> {
        if k == 0 {
            return Vec::new();
        }
        let e = self.epoch(now);
        let mut best: Vec<(K, u64)> = Vec::new();
        let mut floor = 0u64;
        self.map.for_each(|key, entry| {
            let s = entry.sum(e, self.slices);
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

    /// Keys held now (never more than `max_keys`).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose window at `now` is empty (no count at an epoch
    /// inside the window or after it) and that no add is touching; returns
    /// how many were dropped. Racing adds are never lost: an add that finds
    /// its key's entry retired inserts a fresh one.
    pub fn evict_idle_at(&self, now: u64) -> usize {
        let e = self.epoch(now);
        let mut dropped = 0;
        self.map.for_each(|key, entry| {
            let retired = entry.try_retire(e, self.slices);
            if (retired || entry.is_dead()) && self.map.remove_if_same(key.borrow(), entry) {
                self.held.fetch_sub(1, Ordering::AcqRel);
            }
            dropped += usize::from(retired);
        });
        dropped
    }

    /// Adds that were not tracked because the map was full of non-idle keys.
    pub fn untracked_adds(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Bytes held for `key`: its entry (header and cells, one allocation)
    /// and its striped rows if any, not the map's own entry (0 if absent).
    pub fn key_memory_bytes<Q>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map
            .with(key, |entry| entry.memory_bytes(self.slices))
            .unwrap_or(0)
    }

    /// Whether `key` has striped rows (it saw contention).
    pub fn is_striped<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map
            .with(key, |entry| entry.is_striped())
            .unwrap_or(false)
    }

    /// Testing hook: gives an existing key its striped rows as if it had
    /// seen contention (loom models cannot force a failed CAS). `false` if
    /// the key is absent.
    #[doc(hidden)]
    pub fn __stripe<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map
            .with(key, |entry| entry.install(self.slices, self.stripes))
            .is_some()
    }

    /// A handle on `key` that adds without a map lookup (the entry is
    /// looked up once, and again only if it was evicted).
    pub fn handle<Q>(&self, key: &Q) -> KeyHandle<'_, K, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        KeyHandle {
            windows: self,
            key: key.to_owned(),
            entry: None,
        }
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The number of slices per key.
    pub fn slices(&self) -> usize {
        self.slices
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The epoch (slice number) of time `now`.
    pub fn epoch_at(&self, now: u64) -> u64 {
        self.epoch(now)
    }

    /// The entry for `key`, inserted if absent (`None`: no room).
    fn entry_for(&self, key: &K, now: u64) -> Option<EntryRef> {
        loop {
            if let Some(e) = self.map.with(key, |e| e.clone()) {
                if !e.is_dead() {
                    return Some(e);
                }
                self.remove_dead(key, &e);
                continue;
            }
            if !self.insert(key, now) {
                return None;
            }
        }
    }
}

impl<K: 'static, C: Clock> fmt::Debug for KeyedWindows<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedWindows")
            .field("window", &self.window)
            .field("slices", &self.slices)
            .field("keys", &self.held.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A handle on one key of a [`KeyedWindows`]: adds go straight to the
/// key's entry, without a map lookup. If the entry is evicted (its window
/// went empty), the next add looks the key up again, so nothing is lost.
///
/// ```
/// use stripecount::{KeyedWindows, ManualClock};
/// use std::time::Duration;
///
/// let w = KeyedWindows::with_clock(Duration::from_secs(1), 10, ManualClock::new())?;
/// let mut h = w.handle("hot");
/// for _ in 0..100 {
///     h.record_at(0, 1);
/// }
/// assert_eq!(h.add_at(0, 1), 101);
/// assert_eq!(w.sum_at("hot", 0), 101);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyHandle<'a, K: 'static, C: Clock = MonotonicClock> {
    windows: &'a KeyedWindows<K, C>,
    key: K,
    entry: Option<EntryRef>,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> KeyHandle<'_, K, C> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Adds `n` at `now`; `None` if the key could not be tracked.
    #[inline]
    fn add_raw(&mut self, now: u64, n: u64) -> Option<(&Entry, u64, Outcome)> {
        let w = self.windows;
        let e = w.epoch(now);
        loop {
            if self.entry.is_none() {
                match w.entry_for(&self.key, now) {
                    Some(en) => self.entry = Some(en),
                    None => {
                        w.untracked.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                }
            }
            let entry = self.entry.as_ref().expect("set above");
            let outcome = entry.add(e, n, w.slices, w.stripes);
            if outcome == Outcome::Dead {
                let dead = self.entry.take().expect("set above");
                w.remove_dead(&self.key, &dead);
                continue;
            }
            w.maybe_sweep(now, e);
            return self.entry.as_deref().map(|en| (en, e, outcome));
        }
    }

    /// Adds `n` at `now`; returns the key's window sum after this add (0 if
    /// the key could not be tracked).
    #[inline]
    pub fn add_at(&mut self, now: u64, n: u64) -> u64 {
        let slices = self.windows.slices;
        if n == 0 {
            return self.sum_at(now);
        }
        self.add_raw(now, n)
            .map_or(0, |(entry, e, _)| entry.sum(e, slices))
    }

    /// Adds `n` now; returns the key's window sum after this add.
    #[inline]
    pub fn add(&mut self, n: u64) -> u64 {
        let now = self.windows.clock.now();
        self.add_at(now, n)
    }

    /// Adds `n` at `now` without reading the sum back (the cheapest add).
    #[inline]
    pub fn record_at(&mut self, now: u64, n: u64) {
        if n > 0 {
            let _ = self.add_raw(now, n);
        }
    }

    /// The key's window sum at `now`.
    pub fn sum_at(&self, now: u64) -> u64 {
        self.windows.sum_at(&self.key, now)
    }
}

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
/// An add first lands in its cell, then does an atomic read-modify-write
/// of the key's hot word (changing nothing), then reads the key's window
/// (every row). Its `after` is that read; `before = after - n`. Of racing
/// adds, the one whose read-modify-write comes later sees every earlier
/// one's cell, so the last of them sees the whole crossing. A read of
/// several cells is not one atomic step, so two racing adds can both see a
/// `before` that includes the other; the hot transition is therefore
/// a single CAS on the key's hot word, which records the epoch of the
/// latest add that saw the key at or above the threshold. Within one epoch
/// the window sum only grows, so an add whose `before` is below the
/// threshold at an epoch where the key was already seen above it is a stale
/// view and changes nothing. Consequences:
/// - among adds racing across one crossing, exactly one returns `true`
///   (the CAS winner; model-checked with loom);
/// - at most one add per key per epoch returns `true`;
/// - a hot key that some add sees at or above the threshold in each epoch
///   stays hot; with times that never go backwards, a single thread gets
///   exactly the rule above.
///
/// Once a key is hot at the add's epoch, an add does not read the window at
/// all (nothing can change until the next epoch), so counting an already
/// hot key costs one cell add.
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
pub struct HotKeyDetector<K: 'static, C: Clock = MonotonicClock> {
    windows: KeyedWindows<K, C>,
    threshold: u64,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> HotKeyDetector<K> {
    /// A detector over windows of `window` in `slices` slices, on the
    /// monotonic clock. Errors as [`KeyedWindows::new`], and a zero
    /// threshold.
    pub fn new(window: Duration, slices: usize, threshold: u64) -> Result<Self, ConfigError> {
        Self::with_clock(window, slices, threshold, MonotonicClock)
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> HotKeyDetector<K, C> {
    /// A detector on the given clock (see [`HotKeyDetector::new`]).
    pub fn with_clock(
        window: Duration,
        slices: usize,
        threshold: u64,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if threshold == 0 {
            return Err(ConfigError::Invalid("the hot threshold must be at least 1"));
        }
        Ok(HotKeyDetector {
            windows: KeyedWindows::with_clock(window, slices, clock)?,
            threshold,
        })
    }

    /// Bounds the keys held (see [`KeyedWindows::with_max_keys`]); an add
    /// that is not tracked returns `false`.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.windows = self.windows.with_max_keys(max_keys);
        self
    }

    /// See [`KeyedWindows::with_auto_evict`].
    pub fn with_auto_evict(mut self, on: bool) -> Self {
        self.windows = self.windows.with_auto_evict(on);
        self
    }

    /// The threshold.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The per-key windows (sums, top-k, eviction, memory).
    pub fn windows(&self) -> &KeyedWindows<K, C> {
        &self.windows
    }

    /// Adds `n` to `key` now; `true` if this add made the key hot.
    #[inline]
    pub fn add<Q>(&self, key: &Q, n: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        self.add_at(key, self.windows.clock.now(), n)
    }

    /// Adds `n` to `key` at `now`; `true` if this add made the key hot.
    /// An add of 0, an add older than the ring and an untracked add return
    /// `false`.
    #[inline]
    pub fn add_at<Q>(&self, key: &Q, now: u64, n: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        self.became_hot_at(key, now, n).is_some()
    }

    /// As [`add_at`](Self::add_at), returning the key's window sum after
    /// this add (as the add saw it) when this add made the key hot.
    #[inline]
    pub fn became_hot_at<Q>(&self, key: &Q, now: u64, n: u64) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        if n == 0 {
            return None;
        }
        let w = &self.windows;
        let e = w.epoch(now);
        let threshold = self.threshold;
        w.add_with(key, now, n, |entry, outcome| {
            hot_step(entry, outcome, e, n, w.slices, threshold)
        })
        .flatten()
    }

    /// A handle on `key` that adds without a map lookup (see
    /// [`KeyHandle`]).
    pub fn handle<Q>(&self, key: &Q) -> HotKeyHandle<'_, K, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized + ToOwned<Owned = K>,
    {
        HotKeyHandle {
            inner: self.windows.handle(key),
            threshold: self.threshold,
        }
    }

    /// Whether `key` is hot by the rule and its window sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at<Q>(&self, key: &Q, now: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let w = &self.windows;
        let e = w.epoch(now);
        w.map
            .with(key, |entry| {
                entry.hot_state().0 && entry.sum(e, w.slices) >= self.threshold
            })
            .unwrap_or(false)
    }

    /// Every key that [`is_hot_at`](Self::is_hot_at) `now` (in unspecified
    /// order; a weakly consistent scan).
    pub fn hot_keys_at(&self, now: u64) -> Vec<K> {
        let w = &self.windows;
        let e = w.epoch(now);
        let mut out = Vec::new();
        w.map.for_each(|key, entry| {
            if entry.hot_state().0 && entry.sum(e, w.slices) >= self.threshold {
                out.push(key.clone());
            }
        });
        out
    }

    /// Whether `key` is hot now.
    pub fn is_hot<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.is_hot_at(key, self.windows.clock.now())
    }
}

/// The hot rule's step after an add landed (see [`HotKeyDetector`]):
/// `Some(after)` if this add made the key hot.
#[inline]
fn hot_step(
    entry: &Entry,
    outcome: Outcome,
    e: u64,
    n: u64,
    slices: usize,
    threshold: u64,
) -> Option<u64> {
    if outcome != Outcome::Recorded {
        return None;
    }
    let (hot, he) = entry.hot_state();
    if hot && he >= e {
        return None;
    }
    if entry.is_striped() {
        entry.hot_sync();
    }
    let after = entry.sum(e, slices);
    let before = after.saturating_sub(n);
    entry
        .hot_transition(e, before, after, threshold)
        .then_some(after)
}

/// A handle on one key of a [`HotKeyDetector`]: adds without a map lookup,
/// with the same hot rule as [`HotKeyDetector::add_at`].
///
/// ```
/// use stripecount::{HotKeyDetector, ManualClock};
/// use std::time::Duration;
///
/// let d = HotKeyDetector::with_clock(Duration::from_secs(1), 10, 3, ManualClock::new())?;
/// let mut h = d.handle("k");
/// assert!(!h.add_at(0, 2));
/// assert_eq!(h.became_hot_at(0, 2), Some(4));
/// assert!(h.is_hot_at(0));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct HotKeyHandle<'a, K: 'static, C: Clock = MonotonicClock> {
    inner: KeyHandle<'a, K, C>,
    threshold: u64,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock> HotKeyHandle<'_, K, C> {
    /// The key.
    pub fn key(&self) -> &K {
        self.inner.key()
    }

    /// Adds `n` at `now`; `Some(window sum after this add)` if this add
    /// made the key hot.
    #[inline]
    pub fn became_hot_at(&mut self, now: u64, n: u64) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let (slices, threshold) = (self.inner.windows.slices, self.threshold);
        let (entry, e, outcome) = self.inner.add_raw(now, n)?;
        hot_step(entry, outcome, e, n, slices, threshold)
    }

    /// Adds `n` at `now`; `true` if this add made the key hot.
    #[inline]
    pub fn add_at(&mut self, now: u64, n: u64) -> bool {
        self.became_hot_at(now, n).is_some()
    }

    /// Adds `n` now; `true` if this add made the key hot.
    #[inline]
    pub fn add(&mut self, n: u64) -> bool {
        let now = self.inner.windows.clock.now();
        self.add_at(now, n)
    }

    /// Whether the key is hot by the rule and its window sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at(&self, now: u64) -> bool {
        let w = self.inner.windows;
        let e = w.epoch(now);
        w.map
            .with(self.inner.key(), |entry| {
                entry.hot_state().0 && entry.sum(e, w.slices) >= self.threshold
            })
            .unwrap_or(false)
    }
}

impl<K: 'static, C: Clock> fmt::Debug for HotKeyDetector<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeyDetector")
            .field("threshold", &self.threshold)
            .field("windows", &self.windows)
            .finish()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync>() {}
    is::<KeyedWindows<String>>();
    is::<HotKeyDetector<u64>>();
}
