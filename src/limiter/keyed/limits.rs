//! The limits of a [`KeyedLimiter`] as its API shows them: the default
//! limits, per-key overrides and the windows. Every change takes effect for
//! the requests that start after it and never touches a count (why that
//! never over-admits: `quota.rs`).

use super::KeyedLimiter;
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::key::{Key, KeyRef};
use crate::limiter::config::MAX_LIMITS;
use crate::limiter::quota::Quota;
use crate::reclaim::Guard;
use std::hash::BuildHasher;
use std::time::Duration;

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// The number of limits every key has: one per quota the limiter was
    /// built with.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new(Quota::per_second(5))?;
    /// assert_eq!(lim.limit_count(), 1);
    /// let lim = KeyedLimiter::<u8>::new([Quota::per_second(10), Quota::per_minute(100)])?;
    /// assert_eq!(lim.limit_count(), 2);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limit_count(&self) -> usize {
        self.quotas.levels()
    }

    /// The default limit (limit 0 with several): permits per window for a
    /// key without an override.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new(Quota::per_second(5))?;
    /// assert_eq!(lim.limit(), 5);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.quotas.default_of(0)
    }

    /// Default limit `index`, or `None` past the last.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new([Quota::per_second(10), Quota::per_minute(100)])?;
    /// assert_eq!((lim.limit_of(1), lim.limit_of(2)), (Some(100), None));
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
    /// [`RateLimiter::set_limit`](crate::RateLimiter::set_limit).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_minute(5))?;
    /// assert!(lim.try_acquire(&"k", 3));
    /// lim.set_limit(2);
    /// assert!(!lim.try_acquire(&"k", 1)); // 3 already in the window: nothing resets
    /// assert!(lim.try_acquire(&"other", 2));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn set_limit(&self, limit: u64) {
        self.quotas.set_default(0, limit);
    }

    /// Changes default limit `index` at run time (see
    /// [`set_limit`](Self::set_limit)); `false` if there is no such limit.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new([Quota::per_second(10), Quota::per_minute(100)])?;
    /// assert!(lim.set_limit_of(1, 200));
    /// assert!(!lim.set_limit_of(2, 200));
    /// assert_eq!(lim.limit_of(1), Some(200));
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
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(1))?;
    /// lim.set_key_limits(&"premium", &[3])?;
    /// assert!(lim.try_acquire(&"premium", 3));
    /// assert!(!lim.try_acquire(&"basic", 3));
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
        let guard = Guard::pin(&self.graveyard);
        self.quotas.set(self.map.hash(key), key, limits, &guard);
        Ok(())
    }

    /// [`set_key_limits`](Self::set_key_limits) for a limiter of one limit.
    ///
    /// Errors: [`ConfigError::Invalid`] if the limiter has several limits.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(1))?;
    /// lim.set_key_limit(&7u64, 0)?; // blocked
    /// assert!(!lim.try_acquire(&7, 1));
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
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(1))?;
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
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(1))?;
    /// lim.set_key_limit(&"k", 9)?;
    /// assert_eq!((lim.limits_for(&"k"), lim.limits_for(&"j")), (vec![9], vec![1]));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn limits_for<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> Vec<u64> {
        let guard = Guard::pin(&self.graveyard);
        let mut buf = [0u64; MAX_LIMITS];
        self.quotas
            .read(self.map.hash(key), key, &guard, &mut buf)
            .to_vec()
    }

    /// Keys with their own limits.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(1))?;
    /// lim.set_key_limit(&"a", 2)?;
    /// lim.set_key_limit(&"a", 3)?;
    /// assert_eq!(lim.key_overrides(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn key_overrides(&self) -> usize {
        self.quotas.overrides()
    }

    /// Default quota `index` (its limit as it is now), or `None` past the
    /// last.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new([Quota::per_second(10), Quota::per_minute(100)])?;
    /// lim.set_limit_of(1, 200);
    /// assert_eq!(lim.quota_of(1), Some(Quota::per_minute(200)));
    /// assert_eq!(lim.quota_of(2), None);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn quota_of(&self, index: usize) -> Option<Quota> {
        (index < self.limit_count()).then(|| self.quota_at(index))
    }

    /// The window of the default limit (limit 0 with several).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new(Quota::per(1, Duration::from_secs(2)).slices(4))?;
    /// assert_eq!(lim.window(), Duration::from_secs(2));
    /// assert_eq!(lim.slice_len(), Duration::from_millis(500));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.specs[0].window()
    }

    /// Limit `index`'s window, or `None` past the last.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new([Quota::per_second(10), Quota::per_minute(100)])?;
    /// assert_eq!(lim.window_of(1), Some(Duration::from_secs(60)));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn window_of(&self, index: usize) -> Option<Duration> {
        (index < self.limit_count()).then(|| self.specs[index].window())
    }

    /// The shortest slice length (a request's time is counted in slices of
    /// this length).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u8>::new(Quota::per_second(1))?; // 10 slices
    /// assert_eq!(lim.slice_len(), Duration::from_millis(100));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.shared.cfg.slice_nanos())
    }
}
