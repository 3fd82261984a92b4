//! [`FixedWindowLimiter`]: one limit per fixed window.

use super::direct::{Fixed, Limiter};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::time::Duration;

/// A strict fixed-window rate limiter: at most `limit` permits in each
/// window `[k * window, (k + 1) * window)`.
///
/// The window's identity and its count change in one CAS, so a new window
/// never wipes the grants that raced its start (the bug of "CAS the next
/// start, then store count = 1"). The shared methods are on [`Limiter`].
///
/// ```
/// use stripecount::{FixedWindowLimiter, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let lim = FixedWindowLimiter::with_clock(2, Duration::from_secs(1), clock.clone())?;
/// assert!(lim.try_acquire());
/// assert!(lim.try_acquire());
/// assert!(!lim.try_acquire());
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire_n(2));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub type FixedWindowLimiter<C = MonotonicClock> = Limiter<Fixed, C>;

impl Limiter<Fixed> {
    /// `limit` permits per `window`, on the monotonic clock. Any `limit` is
    /// valid (0 denies everything).
    ///
    /// Errors: zero window, or one longer than `u64::MAX` ns.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        Self::with_clock(limit, window, MonotonicClock::new())
    }
}

impl<C: Clock> Limiter<Fixed, C> {
    /// A limiter on the given clock (see [`FixedWindowLimiter::new`]).
    pub fn with_clock(limit: u64, window: Duration, clock: C) -> Result<Self, ConfigError> {
        Self::one(limit, window, 1, clock)
    }
}
