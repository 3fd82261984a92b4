//! Clocks: where "now" comes from.
//!
//! Time is a [`Timestamp`]: nanoseconds on a clock's own monotonic
//! timeline. Every structure takes a [`Clock`] and also offers `*_at(now)`
//! methods, because
//! reading a clock can cost more than the add it stamps (`Instant::now` is
//! ~25 ns on the development machines, an uncontended atomic add ~2.5 ns).
//!
//! - [`MonotonicClock`] (`monotonic.rs`): the process timeline, read from
//!   the CPU's time-stamp counter where it is trusted (`tsc.rs`, ~10 ns,
//!   kept monotonic by `clamp.rs`), from `Instant` otherwise.
//! - [`CoarseClock`] (`coarse.rs`): the same timeline cached about every
//!   millisecond by one shared ticker thread; `now()` is one atomic load.
//! - [`ManualClock`] (`manual.rs`): moved by hand; for tests and
//!   simulations.
//! - `TokioClock` (`tokio.rs`, feature `tokio`): tokio's time, paused in
//!   tests with tokio's `test-util`, as the limiters' waits sleep on it.
//!
//! A clock that steps backwards is survived: windows tag each slice with
//! its epoch, so an add stamped in the past lands in its own (older) slice
//! or, if that slice has been recycled, is dropped and reported; limiters
//! never let their time run backwards.

#[doc(hidden)]
pub mod clamp;
mod coarse;
mod manual;
mod monotonic;
mod timestamp;
#[cfg(feature = "tokio")]
mod tokio;
mod tsc;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use self::tokio::TokioClock;
pub use coarse::CoarseClock;
pub use manual::ManualClock;
pub use monotonic::MonotonicClock;
pub use timestamp::Timestamp;

use crate::sync::Arc;
use std::time::Duration;

/// A source of monotonic time.
///
/// Implement it to drive the structures from a time of your own (a
/// simulation, a clock shared with other systems): `now` must not go
/// backwards by much, and readings of one clock must share one origin.
///
/// ```
/// use stripecount::{Clock, Timestamp};
///
/// struct Fixed(u64);
/// impl Clock for Fixed {
///     fn now(&self) -> Timestamp {
///         Timestamp::from_nanos(self.0)
///     }
/// }
/// assert_eq!(Fixed(7).now().as_nanos(), 7);
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The time since this clock's origin.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

#[cfg(loom)]
impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &'static C {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// Converts a duration to nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
