//! [`MultiLimiter`]: several limits enforced together, all or nothing.
//!
//! # Why one state and not one limiter per limit
//! "Acquire from each limiter in turn, give back on refusal" is not atomic:
//! between the first grant and the give-back, another request sees the
//! permit and is refused although, in effect, nothing was taken (the loom
//! suite keeps that design as a counter-example that loom catches). Here
//! every limit is a *level* of one admission state (`state.rs`): a request
//! reads each level's frozen sum, checks them all, and takes its permits
//! with the one CAS on the shared admission word, so it is granted by every
//! limit at the same instant or by none. The rolls keep each level's
//! history at its own slice length (`roll_levels.rs`).

use super::builder::RateLimiterBuilder;
use super::direct::{Limiter, Multi};
use super::quota::Quota;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::time::Duration;

/// A strict limiter of several quotas at once (say 10 per second **and**
/// 1000 per day): a request is granted only if every quota has room, and
/// takes its permits from all of them in one atomic step; a refusal takes
/// nothing. Each quota behaves as a [`RateLimiter`](super::RateLimiter) of
/// it would. The methods shared with `RateLimiter` are on [`Limiter`];
/// [`Decision::limit_index`](super::Decision::limit_index) says which
/// quota refused.
///
/// Counts are exact permits: a limit above
/// [`MAX_EXACT_LIMIT`](super::MAX_EXACT_LIMIT) counts as that many. Slice
/// lengths must be whole multiples of the shortest one. A request costs a
/// few more loads than with one quota (the others' frozen sums).
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{MultiLimiter, Quota};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let sec = Duration::from_secs(1);
/// // 2 per second (a fixed window) and 3 per minute (in 60 one-second slices).
/// let quotas = [Quota::per_second(2).slices(1), Quota::per_minute(3).slices(60)];
/// let lim = MultiLimiter::builder(quotas).clock(clock.clone()).build()?;
/// assert!(lim.try_acquire(2));
/// assert!(!lim.try_acquire(1)); // the per-second quota
/// clock.advance(sec);
/// assert!(!lim.try_acquire(2)); // 2 would break the per-minute quota...
/// assert!(lim.try_acquire(1)); // ...and took nothing, so 1 still fits
/// let d = lim.decide(1);
/// assert_eq!(d.limit_index(), 1);
/// assert_eq!(d.retry_after(), Some(59 * sec));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub type MultiLimiter<C = MonotonicClock> = Limiter<Multi, C>;

impl Limiter<Multi> {
    /// A limiter of `quotas`, on the monotonic clock.
    ///
    /// Errors: as [`Quota::validate`] for each quota; no quota
    /// ([`ConfigError::NoLevels`]); more than
    /// [`MAX_LIMITS`](super::MAX_LIMITS) ([`ConfigError::Invalid`]); a slice
    /// length that is not a whole multiple of the shortest one
    /// ([`ConfigError::LevelSliceMismatch`]).
    pub fn new(quotas: impl AsRef<[Quota]>) -> Result<Self, ConfigError> {
        Self::builder(quotas).build()
    }

    /// A builder, for a limiter on another clock.
    pub fn builder(quotas: impl AsRef<[Quota]>) -> RateLimiterBuilder<Multi> {
        RateLimiterBuilder::new(quotas.as_ref())
    }
}

impl<C: Clock> Limiter<Multi, C> {
    /// A builder on `clock`: [`MultiLimiter::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](RateLimiterBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{MultiLimiter, Quota};
    ///
    /// let quotas = [Quota::per_second(10), Quota::per_hour(1000)];
    /// let lim = MultiLimiter::<ManualClock>::builder_with_clock(quotas, ManualClock::new()).build()?;
    /// assert!(lim.try_acquire(10));
    /// assert!(!lim.try_acquire(1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder_with_clock(
        quotas: impl AsRef<[Quota]>,
        clock: C,
    ) -> RateLimiterBuilder<Multi, C> {
        MultiLimiter::builder(quotas).clock(clock)
    }

    /// The number of quotas.
    pub fn len(&self) -> usize {
        self.limit_count()
    }

    /// Always `false`: a multi-limit has at least one quota.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Quota `index`, with its limit as it is now; `None` past the last.
    pub fn quota_of(&self, index: usize) -> Option<Quota> {
        (index < self.len()).then(|| self.quota_at(index))
    }

    /// Limit `index` (permits per its window), or `None` past the last.
    pub fn limit_of(&self, index: usize) -> Option<u64> {
        (index < self.len()).then(|| self.limit_at(index))
    }

    /// Limit `index`'s window, or `None` past the last.
    pub fn window_of(&self, index: usize) -> Option<Duration> {
        (index < self.len()).then(|| self.quotas_window(index))
    }

    /// Changes limit `index` at run time, as
    /// [`RateLimiter::set_limit`](Limiter::set_limit) does (limits above
    /// [`MAX_EXACT_LIMIT`](super::MAX_EXACT_LIMIT) count as that many
    /// permits). `false` if there is no limit `index`.
    pub fn set_limit_of(&self, index: usize, limit: u64) -> bool {
        let ok = index < self.len();
        if ok {
            self.set_limit_at(index, limit);
        }
        ok
    }
}
