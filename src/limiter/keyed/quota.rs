//! A per-key limiter's quotas: the default limits, and per-key overrides,
//! both changeable at run time.
//!
//! # Never over-admitting across a change
//! The admission state holds no limit: every request reads its key's limits
//! once (an override if the key has one, else the defaults) and is judged
//! against those values by the same CAS that takes its permits. A change
//! touches no count. So no window of any key ever holds more than the limit
//! its last grant was judged against: lowering a quota below what a key's
//! window holds refuses that key until enough expires (nothing resets, the
//! bug of swapping in a fresh limiter), and a request that starts after a
//! change returned (on a thread synchronized with it) is judged against the
//! new value. With several limits each is read on its own, as
//! [`MultiLimiter::set_limit_of`](crate::MultiLimiter::set_limit_of) does:
//! a request racing a change may see some new and some old values, each of
//! which the window honours.
//!
//! # Overrides
//! Overrides live in a second map of the same engine (`crate::keyed::map`),
//! keyed like the states, sharing their hash (the same hasher), so a
//! lookup costs no second hash. It is read only while it holds an override
//! (`count`), so a limiter without overrides pays one load of a word that
//! never changes. Overrides are operator data: they are not evicted when
//! idle and do not count towards `max_keys`.
//!
//! Writes (set, remove) take the key's shard lock, so no move of the
//! overrides' table runs while one writes, and a move copies final values.
//! An entry is published (`live`, release) after its limits are written;
//! readers load `live` (acquire) before the limits. A removed entry is
//! marked not live before its slot turns `TOMB`. `count` is raised after an
//! entry goes live and lowered after it is removed.

use super::KeyedLimiter;
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::keyed::map::{Map, Value};
use crate::keyed::reclaim::{Graveyard, Guard};
use crate::keyed::{Key, KeyRef};
use crate::limiter::config::MAX_LIMITS;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::hash::BuildHasher;
use std::time::Duration;

/// One key's override: its limits, one per level.
pub(crate) struct Override {
    live: AtomicBool,
    limits: [AtomicU64; MAX_LIMITS],
}

impl Value for Override {
    type Cfg = ();

    fn vacant() -> Self {
        Override {
            live: AtomicBool::new(false),
            limits: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn init(&self, _: &(), _: bool) {}

    fn move_into(&self, to: &Self, _: &(), _: &Guard<'_>, _: &Graveyard) {
        // Under the shard lock, which every writer takes: final values.
        for (a, b) in self.limits.iter().zip(&to.limits) {
            b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        to.live
            .store(self.live.load(Ordering::Relaxed), Ordering::Release);
    }

    fn try_retire(&self, _: u64, _: &(), _: &Guard<'_>, _: &Graveyard) -> bool {
        !self.live.load(Ordering::Relaxed)
    }

    fn is_dead(&self) -> bool {
        false
    }

    fn heap_bytes(&self, _: &()) -> usize {
        0
    }
}

/// The default limits and the overrides (module docs).
pub(crate) struct Quotas<K: 'static, S> {
    defaults: [AtomicU64; MAX_LIMITS],
    levels: usize,
    overrides: Map<K, Override, S>,
    count: AtomicUsize,
}

impl<K, S> Quotas<K, S> {
    /// Default limit `i`.
    pub(crate) fn default_of(&self, i: usize) -> u64 {
        self.defaults[i].load(Ordering::Relaxed)
    }

    /// Sets default limit `i`.
    pub(crate) fn set_default(&self, i: usize, limit: u64) {
        self.defaults[i].store(limit, Ordering::Relaxed);
    }
}

impl<K: Key, S: BuildHasher> Quotas<K, S> {
    /// `limits` as the defaults; overrides hashed by `hasher` (which must
    /// hash as the states' map does).
    pub(crate) fn new(limits: &[u64], hasher: S) -> Self {
        Quotas {
            defaults: std::array::from_fn(|i| AtomicU64::new(limits.get(i).copied().unwrap_or(0))),
            levels: limits.len(),
            overrides: Map::new(hasher, 0),
            count: AtomicUsize::new(0),
        }
    }

    /// The number of limits per key.
    #[inline]
    pub(crate) fn levels(&self) -> usize {
        self.levels
    }

    /// The limits of the key whose hash is `hash`, each read once, in
    /// `buf[..levels]`.
    #[inline]
    pub(crate) fn read<'b, Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        guard: &Guard<'_>,
        buf: &'b mut [u64; MAX_LIMITS],
    ) -> &'b [u64] {
        let k = self.levels;
        if self.count.load(Ordering::Acquire) == 0 || !self.read_override(hash, key, guard, buf) {
            for (b, l) in buf[..k].iter_mut().zip(&self.defaults) {
                *b = l.load(Ordering::Relaxed);
            }
        }
        &buf[..k]
    }

    /// The single limit of the key whose hash is `hash` (a limiter of one
    /// limit: no buffer to fill).
    #[inline]
    pub(crate) fn read_one<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        guard: &Guard<'_>,
    ) -> u64 {
        debug_assert_eq!(self.levels, 1);
        if self.count.load(Ordering::Acquire) == 0 {
            return self.defaults[0].load(Ordering::Relaxed);
        }
        let mut buf = [0u64; MAX_LIMITS];
        self.read(hash, key, guard, &mut buf)[0]
    }

    #[inline(never)]
    fn read_override<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        guard: &Guard<'_>,
        buf: &mut [u64; MAX_LIMITS],
    ) -> bool {
        match self.overrides.get(hash, |k| key.is(k), guard) {
            Some(o) if o.live.load(Ordering::Acquire) => {
                for (b, l) in buf[..self.levels].iter_mut().zip(&o.limits) {
                    *b = l.load(Ordering::Relaxed);
                }
                true
            }
            _ => false,
        }
    }

    /// Sets `key`'s override (`limits.len() == levels`, checked by the
    /// caller).
    pub(crate) fn set<Q: KeyRef<K> + ?Sized>(&self, hash: u64, key: &Q, limits: &[u64]) {
        debug_assert_eq!(limits.len(), self.levels);
        let guard = Guard::pin(self.overrides.graveyard());
        let is = |k: &K| key.is(k);
        let set = self.overrides.upsert(
            hash,
            is,
            || key.to_key(),
            &(),
            0,
            &guard,
            |o, _| {
                for (l, &v) in o.limits.iter().zip(limits) {
                    l.store(v, Ordering::Relaxed);
                }
                // Release: the limits before `live` (readers acquire it).
                !o.live.swap(true, Ordering::AcqRel)
            },
        );
        if set == Some(true) {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
        debug_assert!(set.is_some(), "the overrides map has no bound");
    }

    /// Removes `key`'s override; whether it had one.
    pub(crate) fn remove<Q: KeyRef<K> + ?Sized>(&self, hash: u64, key: &Q) -> bool {
        let removed = self.overrides.remove_if(
            hash,
            |k| key.is(k),
            |o| o.live.swap(false, Ordering::AcqRel),
        );
        if removed {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }

    /// Keys with an override.
    pub(crate) fn overrides(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Bytes held by the overrides' map.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.overrides.memory_bytes(&())
    }
}

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// The number of limits every key has (1 unless built with
    /// [`multi`](KeyedLimiter::multi)).
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::<u8, _>::with_clock(5, Duration::from_secs(1), 1, ManualClock::new())?;
    /// assert_eq!(lim.limit_count(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limit_count(&self) -> usize {
        self.quotas.levels()
    }

    /// The default limit (limit 0 with several): permits per window for a
    /// key without an override.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::<u8, _>::with_clock(5, Duration::from_secs(1), 1, ManualClock::new())?;
    /// assert_eq!(lim.limit(), 5);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.quotas.default_of(0)
    }

    /// Default limit `index`, or `None` past the last.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let s = Duration::from_secs(1);
    /// let lim = KeyedLimiter::<u8, _>::multi_with_clock(&[(2, s, 1), (9, 9 * s, 9)], ManualClock::new())?;
    /// assert_eq!((lim.limit_of(1), lim.limit_of(2)), (Some(9), None));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limit_of(&self, index: usize) -> Option<u64> {
        (index < self.limit_count()).then(|| self.quotas.default_of(index))
    }

    /// Changes the default limit (limit 0 with several) at run time, for
    /// the requests of keys without an override that start after the
    /// change. Permits already granted stay counted: a key whose window
    /// holds more than the new limit is refused until enough expires.
    /// Units are fixed at construction, as for
    /// [`SlidingWindowLimiter::set_limit`](crate::SlidingWindowLimiter::set_limit).
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::with_clock(5, Duration::from_secs(1), 1, ManualClock::new())?;
    /// assert!(lim.try_acquire_n(&"k", 3));
    /// lim.set_limit(2);
    /// assert!(!lim.try_acquire(&"k")); // 3 already in the window: nothing resets
    /// assert!(lim.try_acquire_n(&"other", 2));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn set_limit(&self, limit: u64) {
        self.quotas.set_default(0, limit);
    }

    /// Changes default limit `index` at run time (see
    /// [`set_limit`](Self::set_limit)); `false` if there is no such limit.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let s = Duration::from_secs(1);
    /// let lim = KeyedLimiter::<u8, _>::multi_with_clock(&[(2, s, 1), (9, 9 * s, 9)], ManualClock::new())?;
    /// assert!(lim.set_limit_of(1, 20));
    /// assert!(!lim.set_limit_of(2, 20));
    /// assert_eq!(lim.limit_of(1), Some(20));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn set_limit_of(&self, index: usize, limit: u64) -> bool {
        let ok = index < self.limit_count();
        if ok {
            self.quotas.set_default(index, limit);
        }
        ok
    }

    /// Gives `key` its own limits (one per limit of the limiter), replacing
    /// the defaults for it from the next request on; changeable at any
    /// time, never over-admitting (see [`set_limit`](Self::set_limit)).
    /// Overrides are kept until cleared: they are not evicted with idle
    /// keys and do not count towards `max_keys`.
    ///
    /// Errors: [`ConfigError::Invalid`] if `limits` does not have one value
    /// per limit.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::with_clock(1, Duration::from_secs(1), 1, ManualClock::new())?;
    /// lim.set_key_limits(&"premium", &[3])?;
    /// assert!(lim.try_acquire_n(&"premium", 3));
    /// assert!(!lim.try_acquire_n(&"basic", 3));
    /// assert!(lim.set_key_limits(&"premium", &[3, 4]).is_err());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn set_key_limits<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        limits: &[u64],
    ) -> Result<(), ConfigError> {
        if limits.len() != self.limit_count() {
            return Err(ConfigError::Invalid(
                "a key's limits need one value per limit of the limiter",
            ));
        }
        self.quotas.set(self.map.hash(key), key, limits);
        Ok(())
    }

    /// [`set_key_limits`](Self::set_key_limits) for a limiter of one limit.
    ///
    /// Errors: [`ConfigError::Invalid`] if the limiter has several limits.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::with_clock(1, Duration::from_secs(1), 1, ManualClock::new())?;
    /// lim.set_key_limit(&7u64, 0)?; // blocked
    /// assert!(!lim.try_acquire(&7));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn set_key_limit<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        limit: u64,
    ) -> Result<(), ConfigError> {
        self.set_key_limits(key, &[limit])
    }

    /// Removes `key`'s own limits (it gets the defaults again); whether it
    /// had any.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::with_clock(1, Duration::from_secs(1), 1, ManualClock::new())?;
    /// lim.set_key_limit(&"k", 9)?;
    /// assert!(lim.clear_key_limits(&"k"));
    /// assert!(!lim.clear_key_limits(&"k"));
    /// assert_eq!(lim.limits_for(&"k"), vec![1]);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn clear_key_limits<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.quotas.remove(self.map.hash(key), key)
    }

    /// The limits a request for `key` is judged against now: its own, or
    /// the defaults.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::with_clock(1, Duration::from_secs(1), 1, ManualClock::new())?;
    /// lim.set_key_limit(&"k", 9)?;
    /// assert_eq!((lim.limits_for(&"k"), lim.limits_for(&"j")), (vec![9], vec![1]));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limits_for<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> Vec<u64> {
        let guard = Guard::pin(self.map.graveyard());
        let mut buf = [0u64; MAX_LIMITS];
        self.quotas
            .read(self.map.hash(key), key, &guard, &mut buf)
            .to_vec()
    }

    /// Keys with their own limits.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::with_clock(1, Duration::from_secs(1), 1, ManualClock::new())?;
    /// lim.set_key_limit(&"a", 2)?;
    /// lim.set_key_limit(&"a", 3)?;
    /// assert_eq!(lim.key_overrides(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn key_overrides(&self) -> usize {
        self.quotas.overrides()
    }

    /// The window of the default limit (limit 0 with several).
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::<u8, _>::with_clock(1, Duration::from_secs(2), 4, ManualClock::new())?;
    /// assert_eq!((lim.window(), lim.slice_len()), (Duration::from_secs(2), Duration::from_millis(500)));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.windows[0]
    }

    /// Limit `index`'s window, or `None` past the last.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let s = Duration::from_secs(1);
    /// let lim = KeyedLimiter::<u8, _>::multi_with_clock(&[(2, s, 1), (9, 9 * s, 9)], ManualClock::new())?;
    /// assert_eq!(lim.window_of(1), Some(9 * s));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn window_of(&self, index: usize) -> Option<Duration> {
        (index < self.limit_count()).then(|| self.windows[index])
    }

    /// The shortest slice length (a request's time is counted in slices of
    /// this length).
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::<u8, _>::with_clock(1, Duration::from_secs(1), 10, ManualClock::new())?;
    /// assert_eq!(lim.slice_len(), Duration::from_millis(100));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.shared.cfg.slice_nanos())
    }
}
