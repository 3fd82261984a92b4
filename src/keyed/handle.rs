//! Handles on one key: [`KeyHandle`] and [`HotKeyHandle`]. A handle keeps
//! the owned key and its hash, so its adds skip hashing the key (the
//! costliest step of a lookup with the default keyed hasher); the lookups
//! themselves are the slice maps', lock-free. Every method reading the
//! clock has its `_at` twin, as on the types they are handles of.

use super::windows::KeyedWindows;
use super::HotKeyDetector;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::hash::RandomState;
use crate::key::Key;
use crate::key::KeyHasher;
use crate::reclaim::Guard;

/// A handle on one key of a [`KeyedWindows`]: adds without hashing the key
/// again.
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{KeyedWindows, Timestamp};
/// use std::time::Duration;
///
/// let w = KeyedWindows::builder(Duration::from_secs(1), 10)
///     .clock(ManualClock::new())
///     .build()?;
/// let h = w.handle("hot");
/// for _ in 0..100 {
///     assert!(h.add_at(Timestamp::ZERO, 1));
/// }
/// assert_eq!(h.add_and_sum(1), 101); // the manual clock reads 0
/// assert_eq!(h.sum(), 101);
/// assert_eq!(w.sum("hot"), 101);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyHandle<'a, K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    windows: &'a KeyedWindows<K, C, S>,
    key: K,
    hash: u64,
}

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindows<K, C, S> {
    /// A handle on `key` (see [`KeyHandle`]).
    pub fn handle<Q: crate::key::KeyRef<K> + ?Sized>(&self, key: &Q) -> KeyHandle<'_, K, C, S> {
        KeyHandle {
            windows: self,
            key: key.to_key(),
            hash: self.ring.hash(key),
        }
    }
}

impl<K: Key, C: Clock, S: KeyHasher> KeyHandle<'_, K, C, S> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Adds `n` at `now`; `true` if it was counted (as
    /// [`KeyedWindows::add_at`]).
    #[inline]
    pub fn add_at(&self, now: Timestamp, n: u64) -> bool {
        let now = now.as_nanos();
        if n == 0 {
            return true;
        }
        let w = self.windows;
        let guard = Guard::pin(w.ring.graveyard());
        w.add_in(self.hash, &self.key, w.locate(now, &guard), n, &guard, || 0)
            .is_some()
    }

    /// Adds `n` now; `true` if it was counted.
    #[inline]
    pub fn add(&self, n: u64) -> bool {
        self.add_at(self.windows.clock.now(), n)
    }

    /// Adds `n` now and returns the key's window sum after it (see
    /// [`add_and_sum_at`](Self::add_and_sum_at)).
    pub fn add_and_sum(&self, n: u64) -> u64 {
        self.add_and_sum_at(self.windows.clock.now(), n)
    }

    /// Adds `n` at `now` and returns the key's window sum after it (as
    /// [`KeyedWindows::add_and_sum_at`], with its cost).
    pub fn add_and_sum_at(&self, now: Timestamp, n: u64) -> u64 {
        let now = now.as_nanos();
        let w = self.windows;
        let guard = Guard::pin(w.ring.graveyard());
        let at = w.locate(now, &guard);
        if n > 0
            && w.add_in(self.hash, &self.key, at, n, &guard, || 0)
                .is_none()
        {
            return 0;
        }
        let e = at.0;
        w.read_in(self.hash, &self.key, e, &guard)
    }

    /// The key's window sum now.
    pub fn sum(&self) -> u64 {
        self.sum_at(self.windows.clock.now())
    }

    /// The key's window sum at `now`.
    pub fn sum_at(&self, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        let w = self.windows;
        let guard = Guard::pin(w.ring.graveyard());
        w.read_in(self.hash, &self.key, w.epoch(now), &guard)
    }
}

/// A handle on one key of a [`HotKeyDetector`]: adds without hashing the
/// key again, with the same hot rule as [`HotKeyDetector::add_at`].
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{HotKeyDetector, Timestamp};
/// use std::time::Duration;
///
/// let d = HotKeyDetector::builder(Duration::from_secs(1), 10, 3)
///     .clock(ManualClock::new())
///     .build()?;
/// let h = d.handle("k");
/// assert!(!h.add_at(Timestamp::ZERO, 2));
/// assert_eq!(h.became_hot(2), Some(4)); // the manual clock reads 0
/// assert!(h.is_hot());
/// assert!(h.is_hot_at(Timestamp::ZERO));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct HotKeyHandle<'a, K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    detector: &'a HotKeyDetector<K, C, S>,
    key: K,
    hash: u64,
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetector<K, C, S> {
    /// A handle on `key` (see [`HotKeyHandle`]).
    pub fn handle<Q: crate::key::KeyRef<K> + ?Sized>(&self, key: &Q) -> HotKeyHandle<'_, K, C, S> {
        HotKeyHandle {
            detector: self,
            key: key.to_key(),
            hash: self.windows.ring.hash(key),
        }
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeyHandle<'_, K, C, S> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Adds `n` now; `Some(window sum after this add)` if this add made
    /// the key hot.
    #[inline]
    pub fn became_hot(&self, n: u64) -> Option<u64> {
        self.became_hot_at(self.detector.windows.clock.now(), n)
    }

    /// Adds `n` at `now`; `Some(window sum after this add)` if this add
    /// made the key hot.
    #[inline]
    pub fn became_hot_at(&self, now: Timestamp, n: u64) -> Option<u64> {
        let now = now.as_nanos();
        let d = self.detector;
        d.became_hot_in(self.hash, &self.key, now, n)
    }

    /// Adds `n` at `now`; `true` if this add made the key hot.
    #[inline]
    pub fn add_at(&self, now: Timestamp, n: u64) -> bool {
        self.became_hot_at(now, n).is_some()
    }

    /// Adds `n` now; `true` if this add made the key hot.
    #[inline]
    pub fn add(&self, n: u64) -> bool {
        self.add_at(self.detector.windows.clock.now(), n)
    }

    /// Whether the key is hot now (see [`is_hot_at`](Self::is_hot_at)).
    pub fn is_hot(&self) -> bool {
        self.is_hot_at(self.detector.windows.clock.now())
    }

    /// Whether the key is hot by the rule and its window sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at(&self, now: Timestamp) -> bool {
        let now = now.as_nanos();
        self.detector.is_hot_in(self.hash, &self.key, now)
    }
}
