//! [`KeyedLimiterBuilder`]: a [`KeyedLimiter`] with options beyond its
//! quotas.

use super::{FloodPolicy, KeyedLimiter};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::Key;
use crate::limiter::config::MAX_LIMITS;
use crate::limiter::quota::Quota;
use std::hash::BuildHasher;
use std::marker::PhantomData;

/// Builds a [`KeyedLimiter`] (from [`KeyedLimiter::builder`]): its quotas,
/// and the clock (monotonic unless set), the hasher ([`RandomState`] unless
/// set), the most keys held (unbounded unless set), the [`FloodPolicy`]
/// (refuse unless set) and the automatic eviction of idle keys (on unless
/// set). The quotas are validated by [`build`](Self::build).
///
/// # Other clocks
/// [`KeyedLimiter::builder`](crate::KeyedLimiter::builder) makes a builder on the monotonic clock
/// and [`clock`](KeyedLimiterBuilder::clock) changes its clock (and type). For a type named with
/// another clock (`KeyedLimiter::<u64, ManualClock>`), or code generic over the clock, start from
/// [`KeyedLimiter::builder_with_clock`](crate::KeyedLimiter::builder_with_clock): `builder` itself
/// is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build`"]
pub struct KeyedLimiterBuilder<K, C = MonotonicClock, S = RandomState> {
    quotas: [Quota; MAX_LIMITS],
    len: usize,
    clock: C,
    hasher: S,
    max_keys: Option<usize>,
    flood: FloodPolicy,
    auto_evict: bool,
    _key: PhantomData<fn(K)>,
}

impl<K: Key> KeyedLimiterBuilder<K> {
    pub(super) fn new(quotas: &[Quota]) -> Self {
        KeyedLimiterBuilder {
            quotas: Quota::array(quotas),
            len: quotas.len(),
            clock: MonotonicClock::new(),
            hasher: RandomState::new(),
            max_keys: None,
            flood: FloodPolicy::Refuse,
            auto_evict: true,
            _key: PhantomData,
        }
    }
}

impl<K: Key, C: Clock, S: BuildHasher + Clone> KeyedLimiterBuilder<K, C, S> {
    /// The clock the limiter reads (the `*_at` methods take the time
    /// instead).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedLimiterBuilder<K, C2, S> {
        KeyedLimiterBuilder {
            quotas: self.quotas,
            len: self.len,
            clock,
            hasher: self.hasher,
            max_keys: self.max_keys,
            flood: self.flood,
            auto_evict: self.auto_evict,
            _key: PhantomData,
        }
    }

    /// The hasher of the key map. Keys usually come from clients: the
    /// default, [`RandomState`], is seeded per instance from the operating
    /// system, so a flood of keys cannot be crafted to collide (the
    /// [guide](crate::guide#keys-from-untrusted-clients) says what a flood
    /// can still do, and what `max_keys` bounds).
    pub fn hasher<S2: BuildHasher + Clone>(self, hasher: S2) -> KeyedLimiterBuilder<K, C, S2> {
        KeyedLimiterBuilder {
            quotas: self.quotas,
            len: self.len,
            clock: self.clock,
            hasher,
            max_keys: self.max_keys,
            flood: self.flood,
            auto_evict: self.auto_evict,
            _key: PhantomData,
        }
    }

    /// Holds at most `max_keys` keys. When full, idle keys (nothing in any
    /// window) are evicted first; if none is, a request for a new key is
    /// decided by the [`FloodPolicy`] and counted by
    /// [`KeyedLimiter::untracked_decisions`].
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::builder(Quota::per_second(5)).max_keys(1).build()?;
    /// assert!(lim.try_acquire(&1u64, 1));
    /// assert!(!lim.try_acquire(&2, 1)); // full, and key 1 is not idle
    /// assert_eq!((lim.len(), lim.untracked_decisions()), (1, 1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// What happens to a request for a new key when the limiter holds
    /// `max_keys` keys and none is idle (see [`FloodPolicy`]).
    ///
    /// ```
    /// use stripecount::limiter::FloodPolicy;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::builder(Quota::per_second(5))
    ///     .max_keys(1)
    ///     .flood_policy(FloodPolicy::AdmitUntracked)
    ///     .build()?;
    /// assert!(lim.try_acquire(&1u64, 1));
    /// assert!(lim.try_acquire(&2, 1)); // admitted, not tracked
    /// assert!(!lim.try_acquire(&2, 6)); // more than the limit: never
    /// assert_eq!((lim.len(), lim.untracked_decisions()), (1, 1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn flood_policy(mut self, policy: FloodPolicy) -> Self {
        self.flood = policy;
        self
    }

    /// Turns the automatic eviction of idle keys on (the default) or off.
    /// On, the first request of each new slice sweeps a share of the map,
    /// so a key idle for its whole window is evicted within about one more
    /// window (no background thread). Off, keys are evicted only by
    /// [`KeyedLimiter::evict_idle`] and by inserts into a full map.
    pub fn auto_evict(mut self, on: bool) -> Self {
        self.auto_evict = on;
        self
    }

    /// The limiter.
    ///
    /// Errors: as [`KeyedLimiter::new`].
    pub fn build(self) -> Result<KeyedLimiter<K, C, S>, ConfigError> {
        if self.len > MAX_LIMITS {
            return Err(ConfigError::Invalid("a multi-limit takes at most 8 limits"));
        }
        let mut lim = KeyedLimiter::build(&self.quotas[..self.len], self.clock, self.hasher)?;
        if let Some(max) = self.max_keys {
            lim.set_max_keys(max);
        }
        lim.flood = self.flood;
        if !self.auto_evict {
            lim.set_auto_evict(false);
        }
        Ok(lim)
    }
}

impl<K, C: std::fmt::Debug, S> std::fmt::Debug for KeyedLimiterBuilder<K, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("quotas", &&self.quotas[..self.len.min(MAX_LIMITS)])
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field("flood", &self.flood)
            .field("auto_evict", &self.auto_evict)
            .finish_non_exhaustive()
    }
}
