//! [`RateLimiter`]: one quota, shared by every caller.

use super::builder::RateLimiterBuilder;
use super::direct::{Limiter, One};
use super::quota::Quota;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::time::Duration;

/// A strict rate limiter of one [`Quota`]: never more than its limit in any
/// window (in every span of the window when the quota is
/// [`strict`](Quota::strict)), under any concurrency; a refusal only when
/// the request did not fit at the moment it was decided.
///
/// Lock-free; a refusal costs a few loads, a grant one CAS. A quota of one
/// slice is a fixed window: its window's identity and count change in one
/// CAS, so a new window never wipes the grants that raced its start. The
/// protocol, its invariants and orderings are documented in
/// `src/limiter/state.rs` and `src/limiter/roll.rs`; the methods shared
/// with [`MultiLimiter`](super::MultiLimiter) are on [`Limiter`].
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{Quota, RateLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // 4 permits per 3 seconds, in slices of 1 second.
/// let quota = Quota::per(4, Duration::from_secs(3)).slices(3);
/// let lim = RateLimiter::builder(quota).clock(clock.clone()).build()?;
/// assert!(lim.try_acquire(2));
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire(2));
/// clock.advance(Duration::from_secs(1));
/// assert!(!lim.try_acquire(2)); // 4 granted in the last 3 slices
/// assert_eq!(lim.available(), 0);
/// assert_eq!(lim.retry_after(2), Some(Duration::from_secs(1)));
/// clock.advance(Duration::from_secs(1)); // the first 2 have expired
/// assert!(lim.try_acquire(2));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub type RateLimiter<C = MonotonicClock> = Limiter<One, C>;

impl Limiter<One> {
    /// A limiter of `quota` on the monotonic clock.
    ///
    /// Errors: an invalid quota (see [`Quota::validate`]).
    ///
    /// ```
    /// use stripecount::{ConfigError, Quota, RateLimiter};
    /// use std::time::Duration;
    ///
    /// let lim = RateLimiter::new(Quota::per_second(100))?;
    /// assert!(lim.try_acquire(1));
    /// let bad = RateLimiter::new(Quota::per(100, Duration::from_nanos(10)).slices(3));
    /// assert!(matches!(bad, Err(ConfigError::UnevenSlices { .. })));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(quota: Quota) -> Result<Self, ConfigError> {
        Self::builder(quota).build()
    }

    /// A builder, for a limiter on another clock.
    pub fn builder(quota: Quota) -> RateLimiterBuilder<One> {
        RateLimiterBuilder::new(&[quota])
    }
}

impl<C: Clock> Limiter<One, C> {
    /// A builder on `clock`: [`RateLimiter::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](RateLimiterBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{Quota, RateLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let lim = RateLimiter::<ManualClock>::builder_with_clock(Quota::per_second(5), clock).build()?;
    /// assert!(lim.try_acquire(5));
    /// assert!(!lim.try_acquire(1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder_with_clock(quota: Quota, clock: C) -> RateLimiterBuilder<One, C> {
        RateLimiter::builder(quota).clock(clock)
    }

    /// The quota, with the limit as it is now.
    pub fn quota(&self) -> Quota {
        self.quota_at(0)
    }

    /// The limit: permits per window.
    pub fn limit(&self) -> u64 {
        self.limit_at(0)
    }

    /// Changes the limit at run time, for the requests that start after the
    /// change (see "Limits that change at run time" in
    /// `src/limiter/direct.rs`). Permits already granted stay counted: after
    /// lowering the limit below what the current window holds, requests are
    /// refused until enough of it has expired.
    ///
    /// Units are fixed at construction: if the limiter was built with a
    /// limit above [`MAX_EXACT_LIMIT`](super::MAX_EXACT_LIMIT), a new limit
    /// is accounted in the same units (a limit below one unit then grants
    /// nothing); a limiter built with an exact limit clamps a new limit
    /// above `MAX_EXACT_LIMIT` to that many units, except that a single
    /// request of up to the new limit is still granted in an empty window.
    pub fn set_limit(&self, limit: u64) {
        self.set_limit_at(0, limit);
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.quotas_window(0)
    }

    /// The number of slices of the window (the quota's, without the slice a
    /// strict quota adds).
    pub fn slices(&self) -> usize {
        self.quota_at(0).slice_count()
    }

    /// The slice length.
    pub fn slice_len(&self) -> Duration {
        self.quota_at(0).slice_len()
    }
}
