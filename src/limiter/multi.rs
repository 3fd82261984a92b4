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
//! history at its own slice length (`roll.rs`).

use super::direct::{Limiter, Multi};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::time::Duration;

/// A strict limiter of several limits at once (say 10 per second **and**
/// 1000 per day): a request is granted only if every limit has room, and
/// takes its permits from all of them in one atomic step; a refusal takes
/// nothing. Each limit is `(limit, window, slices)` and behaves as a
/// [`SlidingWindowLimiter`](crate::SlidingWindowLimiter) (one slice: a
/// fixed window). The shared methods are on [`Limiter`];
/// [`Decision::limit_index`](crate::Decision::limit_index) says which limit
/// refused.
///
/// Counts are exact permits: a limit above
/// [`MAX_EXACT_LIMIT`](crate::MAX_EXACT_LIMIT) counts as that many. Slice
/// lengths must be whole multiples of the shortest one. A request costs a
/// few more loads than with one limit (the other limits' frozen sums).
///
/// ```
/// use stripecount::{ManualClock, MultiLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let sec = Duration::from_secs(1);
/// // 2 per second and 3 per minute (a minute in 60 one-second slices).
/// let lim = MultiLimiter::with_clock(&[(2, sec, 1), (3, 60 * sec, 60)], clock.clone())?;
/// assert!(lim.try_acquire_n(2));
/// assert!(!lim.try_acquire()); // the per-second limit
/// clock.advance(sec);
/// assert!(!lim.try_acquire_n(2)); // 2 would break the per-minute limit...
/// assert!(lim.try_acquire()); // ...and took nothing, so 1 still fits
/// let d = lim.try_acquire_decision(1);
/// assert_eq!(d.limit_index(), 1);
/// assert_eq!(d.retry_after(), Some(59 * sec));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub type MultiLimiter<C = MonotonicClock> = Limiter<Multi, C>;

impl Limiter<Multi> {
    /// Limits `limits[i] = (limit, window, slices)`, on the monotonic clock.
    ///
    /// Errors: as [`SlidingWindowLimiter::new`](crate::SlidingWindowLimiter::new)
    /// for each window; no limit ([`ConfigError::NoLevels`]); more than
    /// [`MAX_LIMITS`](crate::MAX_LIMITS) ([`ConfigError::Invalid`]); a slice
    /// length that is not a whole multiple of the shortest one
    /// ([`ConfigError::LevelSliceMismatch`]).
    pub fn new(limits: &[(u64, Duration, usize)]) -> Result<Self, ConfigError> {
        Self::with_clock(limits, MonotonicClock::new())
    }
}

impl<C: Clock> Limiter<Multi, C> {
    /// A limiter on the given clock (see [`MultiLimiter::new`]).
    pub fn with_clock(limits: &[(u64, Duration, usize)], clock: C) -> Result<Self, ConfigError> {
        Self::multi(limits, clock)
    }
}
