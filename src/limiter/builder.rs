//! [`RateLimiterBuilder`]: a direct limiter on a clock of the caller's.

use super::config::MAX_LIMITS;
use super::direct::{Limiter, Shape};
use super::quota::Quota;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::marker::PhantomData;

/// Builds a [`RateLimiter`](super::RateLimiter) or a
/// [`MultiLimiter`](super::MultiLimiter) (from their `builder`): the
/// quotas, and the clock (the monotonic clock unless set). The quotas are
/// validated by [`build`](Self::build).
///
/// ```
/// use stripecount::clock::CoarseClock;
/// use stripecount::{Quota, RateLimiter};
///
/// let lim = RateLimiter::builder(Quota::per_second(100)).clock(CoarseClock::new()).build()?;
/// assert!(lim.try_acquire(1));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// # Other clocks
/// [`RateLimiter::builder`](crate::RateLimiter::builder) makes a builder on the monotonic clock and
/// [`clock`](RateLimiterBuilder::clock) changes its clock (and type). For a type named with another
/// clock (`RateLimiter::<ManualClock>`), or code generic over the clock, start from
/// [`RateLimiter::builder_with_clock`](crate::RateLimiter::builder_with_clock)
/// ([`MultiLimiter::builder_with_clock`](crate::MultiLimiter::builder_with_clock) for a
/// [`MultiLimiter`](crate::MultiLimiter)): `builder` itself is defined on the default-clock type
/// only.
#[must_use = "a builder does nothing until `build`"]
#[derive(Debug, Clone)]
pub struct RateLimiterBuilder<S: Shape, C: Clock = MonotonicClock> {
    quotas: [Quota; MAX_LIMITS],
    /// Quotas given; more than `MAX_LIMITS` is an error at `build`.
    len: usize,
    clock: C,
    _shape: PhantomData<S>,
}

impl<S: Shape> RateLimiterBuilder<S> {
    pub(super) fn new(quotas: &[Quota]) -> Self {
        RateLimiterBuilder {
            quotas: Quota::array(quotas),
            len: quotas.len(),
            clock: MonotonicClock::new(),
            _shape: PhantomData,
        }
    }
}

impl<S: Shape, C: Clock> RateLimiterBuilder<S, C> {
    /// The clock the limiter reads (the `*_at` methods take the time
    /// instead).
    pub fn clock<C2: Clock>(self, clock: C2) -> RateLimiterBuilder<S, C2> {
        RateLimiterBuilder {
            quotas: self.quotas,
            len: self.len,
            clock,
            _shape: PhantomData,
        }
    }

    /// The limiter.
    ///
    /// Errors: an invalid quota ([`Quota::validate`]); for a multi-limit,
    /// no quota, more than [`MAX_LIMITS`](super::MAX_LIMITS), or slice
    /// lengths that are not whole multiples of the shortest.
    pub fn build(self) -> Result<Limiter<S, C>, ConfigError> {
        if self.len > MAX_LIMITS {
            return Err(ConfigError::Invalid("a multi-limit takes at most 8 limits"));
        }
        Limiter::build(&self.quotas[..self.len], self.clock)
    }
}
