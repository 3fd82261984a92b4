//! The keys a [`KeyedLimiter`] holds: the bound (`max_keys`), what happens
//! to a new key when the bound is reached ([`FloodPolicy`]), eviction of
//! idle keys, and memory. The map's invariants (`crate::map`) and the
//! slot's (`slot.rs`) are what these rest on: `len` never exceeds
//! `max_keys`, and an eviction never loses a grant.

use super::pace::{SweepPace, PARTS};
use super::KeyedLimiter;
use crate::clock::{Clock, Timestamp};
use crate::key::Key;
use crate::reclaim::Guard;
use crate::sync::Ordering;
use std::hash::BuildHasher;

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// Holds at most `max_keys` keys (the builder's setting).
    pub(super) fn set_max_keys(&mut self, max_keys: usize) {
        self.map.set_max_keys(max_keys);
    }

    /// Turns the automatic eviction of idle keys on or off (the builder's
    /// setting).
    pub(super) fn set_auto_evict(&mut self, on: bool) {
        let units = if on {
            SweepPace::of(&self.shared.cfg).units
        } else {
            0
        };
        self.map.set_sweep(units, PARTS);
    }

    /// Keys held now (never more than `max_keys`).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(5))?;
    /// lim.try_acquire(&"a", 1);
    /// lim.peek(&"b", 1); // a read holds no key
    /// assert_eq!(lim.len(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new(Quota::per_second(5))?;
    /// assert!(lim.is_empty());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evicts every key idle now; returns how many (see
    /// [`evict_idle_at`](Self::evict_idle_at)).
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_at(self.clock.now())
    }

    /// Evicts every key idle at `now` (nothing granted in any of its
    /// windows at `now`); returns how many. Racing requests are never lost:
    /// a grant that lands during the eviction keeps its key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::new(Quota::per(5, Duration::from_secs(2)).slices(2))?;
    /// let (t0, sec) = (Timestamp::ZERO, Duration::from_secs(1));
    /// lim.try_acquire_at(&"a", t0, 1);
    /// assert_eq!(lim.evict_idle_at(t0 + sec), 0); // still in the window
    /// assert_eq!(lim.evict_idle_at(t0 + 2 * sec), 1);
    /// assert!(lim.is_empty());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn evict_idle_at(&self, now: Timestamp) -> usize {
        let now = now.as_nanos();
        let guard = Guard::pin(&self.graveyard);
        self.map.evict_idle(self.epoch(now), &self.shared, &guard)
    }

    /// Decisions made for keys the limiter could not track (full of keys
    /// that are not idle), whatever the
    /// [`FloodPolicy`](crate::limiter::FloodPolicy) decided.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::builder(Quota::per_second(5)).max_keys(0).build()?;
    /// assert!(!lim.try_acquire(&1u64, 1));
    /// assert_eq!(lim.untracked_decisions(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn untracked_decisions(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Requests refused so far, whatever the reason ([`Denied`]'s
    /// `Exhausted`, `ExceedsLimit` or `TooManyKeys`), by `try_acquire` and
    /// `decide` (and their `_at` twins); peeks and other reads are not
    /// requests. Counted in a cell per
    /// thread, off the grant path: read it for metrics, not for decisions
    /// (a read sums every cell).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_minute(2))?;
    /// assert!(lim.try_acquire(&"k", 2));
    /// assert!(!lim.try_acquire(&"k", 1)); // the window is full
    /// assert!(!lim.decide(&"k", 3).is_granted()); // more than the limit
    /// assert!(!lim.peek(&"k", 1).is_granted()); // a read: not counted
    /// assert_eq!(lim.refusals(), 2);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    ///
    /// [`Denied`]: crate::Denied
    pub fn refusals(&self) -> u64 {
        self.refused.sum()
    }

    /// Bytes held by the structure: the map's tables (each slot a key and
    /// its 24-byte state, whose history stays inline while each slice count
    /// fits its field: 31 for 10 slices), the history blocks of keys that
    /// outgrew it, the overrides and the refusal counter's cells. Keys' own
    /// heap data (a `String`'s buffer) is not included.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(5))?;
    /// let empty = lim.memory_bytes();
    /// lim.try_acquire(&1u64, 1);
    /// assert!(lim.memory_bytes() > empty);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.map.memory_bytes(&self.shared)
            + self.quotas.memory_bytes()
            + self.empty.heap_bytes(&self.shared.cfg)
            + self.refused.heap_bytes()
    }
}
