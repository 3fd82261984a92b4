//! [`SlidingWindowLimiter`]: one limit over a sliding window of slices.

use super::direct::{Limiter, Sliding};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::time::Duration;

/// A strict sliding-window rate limiter: at most `limit` permits in any
/// window of `slices` consecutive slices (the current, partial, slice and
/// the `slices - 1` before it).
///
/// Lock-free; a refusal costs a few loads, a grant one CAS. The protocol,
/// its invariants and orderings are documented in `src/limiter/state.rs`
/// and `src/limiter/roll.rs`; the shared methods are on [`Limiter`].
///
/// ```
/// use stripecount::{ManualClock, SlidingWindowLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // 4 permits per 3 seconds, in slices of 1 second.
/// let lim = SlidingWindowLimiter::with_clock(4, Duration::from_secs(3), 3, clock.clone())?;
/// assert!(lim.try_acquire_n(2));
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire_n(2));
/// clock.advance(Duration::from_secs(1));
/// assert!(!lim.try_acquire_n(2)); // 4 granted in the last 3 slices
/// assert_eq!(lim.available(), 0);
/// assert_eq!(lim.retry_after(2), Some(Duration::from_secs(1)));
/// clock.advance(Duration::from_secs(1)); // the first 2 have expired
/// assert!(lim.try_acquire_n(2));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub type SlidingWindowLimiter<C = MonotonicClock> = Limiter<Sliding, C>;

impl Limiter<Sliding> {
    /// `limit` permits per `window`, the window cut into `slices` slices, on
    /// the monotonic clock. Any `limit` is valid (0 denies everything).
    ///
    /// Errors: zero window, zero slices, more than
    /// [`MAX_SLICES`](crate::MAX_SLICES), a window whose nanoseconds are not a
    /// whole multiple of `slices`, or one longer than `u64::MAX` ns.
    pub fn new(limit: u64, window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::with_clock(limit, window, slices, MonotonicClock::new())
    }
}

impl<C: Clock> Limiter<Sliding, C> {
    /// A limiter on the given clock (see [`SlidingWindowLimiter::new`]).
    pub fn with_clock(
        limit: u64,
        window: Duration,
        slices: usize,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::one(limit, window, slices, clock)
    }

    /// The number of slices.
    pub fn slices(&self) -> usize {
        self.window_slices() as usize
    }

    /// The slice length.
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.slice_nanos())
    }
}
