//! [`Timestamp`]: a reading of a [`Clock`](super::Clock), and the time every
//! `*_at` method takes.
//!
//! A plain `u64` would do for the arithmetic, but `limiter.try_acquire_at(now,
//! n)` and `windows.add_at(&key, now, n)` put a time and a count side by
//! side: as two `u64`s, swapping them compiles and runs. As a `Timestamp` and
//! a `u64` it does not compile. The type is a transparent `u64` of
//! nanoseconds: it costs nothing at run time.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

/// A point in time: nanoseconds since the origin of a clock's timeline.
///
/// Every [`Clock`](super::Clock) returns one, and every `*_at` method takes
/// one, so that a time and a count cannot be swapped:
///
/// ```compile_fail
/// use stripecount::limiter::{Quota, RateLimiter};
/// use stripecount::Timestamp;
/// let lim = RateLimiter::new(Quota::per_second(10)).unwrap();
/// let now = Timestamp::from_nanos(1_000);
/// lim.try_acquire_at(1, now); // the count where the time goes: an error
/// ```
///
/// Callers that keep their own time convert in and out: from nanoseconds
/// ([`from_nanos`](Self::from_nanos), [`as_nanos`](Self::as_nanos)) or from
/// the time elapsed since the origin ([`from_duration`](Self::from_duration),
/// `From<Duration>`, [`as_duration`](Self::as_duration)). A time is only
/// meaningful on the timeline it came from: two clocks' readings do not
/// compare.
///
/// ```
/// use stripecount::Timestamp;
/// use std::time::Duration;
///
/// let t = Timestamp::from_duration(Duration::from_millis(1500));
/// assert_eq!(t.as_nanos(), 1_500_000_000);
/// assert_eq!(t + Duration::from_millis(500), Timestamp::from_nanos(2_000_000_000));
/// assert_eq!((t + Duration::from_secs(1)) - t, Duration::from_secs(1));
/// assert_eq!(t - (t + Duration::from_secs(1)), Duration::ZERO); // saturates
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin of the timeline (nanosecond 0).
    pub const ZERO: Timestamp = Timestamp(0);
    /// The last representable time (`u64::MAX` ns, about 584 years).
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// The time `nanos` nanoseconds after the origin.
    #[inline]
    pub const fn from_nanos(nanos: u64) -> Timestamp {
        Timestamp(nanos)
    }

    /// The time `since_origin` after the origin, saturating at
    /// [`Timestamp::MAX`].
    #[inline]
    pub const fn from_duration(since_origin: Duration) -> Timestamp {
        let nanos = since_origin.as_nanos();
        Timestamp(if nanos > u64::MAX as u128 {
            u64::MAX
        } else {
            nanos as u64
        })
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time elapsed since the origin.
    #[inline]
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    #[inline]
    pub const fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    #[inline]
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(Timestamp::from_duration(d).0))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    #[inline]
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(Timestamp::from_duration(d).0))
    }
}

impl From<Duration> for Timestamp {
    /// The time `d` after the origin (see [`Timestamp::from_duration`]).
    #[inline]
    fn from(d: Duration) -> Timestamp {
        Timestamp::from_duration(d)
    }
}

impl From<Timestamp> for Duration {
    /// The time elapsed since the origin.
    #[inline]
    fn from(t: Timestamp) -> Duration {
        t.as_duration()
    }
}

/// Later by a duration, saturating at [`Timestamp::MAX`] (a time never wraps).
impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    #[inline]
    fn add(self, d: Duration) -> Timestamp {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Timestamp {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

/// Earlier by a duration, saturating at [`Timestamp::ZERO`].
impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    #[inline]
    fn sub(self, d: Duration) -> Timestamp {
        self.saturating_sub(d)
    }
}

impl SubAssign<Duration> for Timestamp {
    #[inline]
    fn sub_assign(&mut self, d: Duration) {
        *self = *self - d;
    }
}

/// The time between two readings, saturating at zero (see
/// [`Timestamp::saturating_duration_since`]).
impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    #[inline]
    fn sub(self, earlier: Timestamp) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ns)", self.0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_and_saturate() {
        let t = Timestamp::from_nanos(42);
        assert_eq!(t.as_nanos(), 42);
        assert_eq!(Timestamp::from(Duration::from_nanos(42)), t);
        assert_eq!(Duration::from(t), Duration::from_nanos(42));
        assert_eq!(Timestamp::from_duration(Duration::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(Timestamp::ZERO - Duration::from_secs(1), Timestamp::ZERO);
        let mut u = t;
        u += Duration::from_nanos(8);
        assert_eq!(u.as_nanos(), 50);
        u -= Duration::from_nanos(50);
        assert_eq!(u, Timestamp::ZERO);
        assert_eq!(t - u, Duration::from_nanos(42));
        assert_eq!(u - t, Duration::ZERO);
        assert!(u < t);
        assert_eq!(format!("{t:?}"), "Timestamp(42ns)");
    }
}
