//! [`Quota`]: a limit per window, the window cut into slices, and how
//! strictly the limit holds. One value, taken by every limiter.
//!
//! # What a limit promises
//! A limiter cuts time into slices of `L = window / slices` and judges a
//! request against the permits granted in the last few slices. Which spans
//! of time the limit then covers:
//!
//! | quota | at most `limit` permits in |
//! |---|---|
//! | default (`S` slices) | any `S` consecutive slices; so any span of `window - L` |
//! | [`strict`](Quota::strict) | **every** span of `window` (any start, closed or open) |
//!
//! An arbitrary span of one window touches `S + 1` slices (it starts inside
//! one), so by default a span of `window` can hold up to the permits of
//! `S + 1` slices: with 10 slices, a client can get `limit` permits in the
//! last slice of one window and `limit` again in the first of the next, in
//! `L` of each other, which is what `window - L` bounds. A strict quota
//! judges each request against `S + 1` slices, so that every span of
//! `window` holds at most `limit`. The cost is under-admission: a client
//! sending steadily gets `limit` permits per `window + L` (with 10 slices,
//! about 91% of the nominal rate; with 1 slice, a fixed window, 50%).
//!
//! Why slices at all: an exact span check needs every grant's time (memory
//! grows with the limit); slices keep a fixed history per key.

use crate::error::ConfigError;
use crate::window::slice_nanos;
use std::time::Duration;

/// The most limits (quotas) one limiter enforces at once.
pub const MAX_LIMITS: usize = 8;

/// A limit of permits per window, the window cut into slices, validated
/// when a limiter is built from it.
///
/// ```
/// use stripecount::Quota;
/// use std::time::Duration;
///
/// let q = Quota::per_second(100);
/// assert_eq!((q.limit(), q.window(), q.slice_count()), (100, Duration::from_secs(1), 10));
/// assert_eq!(q.slice_len(), Duration::from_millis(100));
///
/// // 5000 a minute, judged on 60 one-second slices, in every span of a minute.
/// let q = Quota::per_minute(5000).slices(60).strict();
/// assert!(q.is_strict());
///
/// // A fixed window: one slice.
/// let q = Quota::per(10, Duration::from_millis(250)).slices(1);
/// assert!(q.validate().is_ok());
/// assert!(Quota::per(10, Duration::ZERO).validate().is_err());
/// ```
///
/// Several limits enforced together (all or nothing) are a slice of quotas:
/// `[Quota::per_second(10), Quota::per_hour(1000)]`. A single `Quota` is
/// `AsRef<[Quota]>`, so constructors take either.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    window: Duration,
    slices: usize,
    strict: bool,
}

impl Quota {
    /// The slices a window is cut into unless [`slices`](Self::slices) says
    /// otherwise.
    pub const DEFAULT_SLICES: usize = 10;

    /// `limit` permits per `window`, in [`DEFAULT_SLICES`](Self::DEFAULT_SLICES)
    /// slices. Any `limit` is valid (0 refuses everything).
    pub const fn per(limit: u64, window: Duration) -> Quota {
        Quota {
            limit,
            window,
            slices: Self::DEFAULT_SLICES,
            strict: false,
        }
    }

    /// `limit` permits per second.
    pub const fn per_second(limit: u64) -> Quota {
        Self::per(limit, Duration::from_secs(1))
    }

    /// `limit` permits per minute.
    pub const fn per_minute(limit: u64) -> Quota {
        Self::per(limit, Duration::from_secs(60))
    }

    /// `limit` permits per hour.
    pub const fn per_hour(limit: u64) -> Quota {
        Self::per(limit, Duration::from_secs(3600))
    }

    /// The same quota with the window cut into `slices` slices (1: a fixed
    /// window). More slices follow the window more closely and cost a word
    /// of history each.
    #[must_use]
    pub const fn slices(self, slices: usize) -> Quota {
        Quota { slices, ..self }
    }

    /// The same quota holding in **every** span of its window, not only in
    /// whole slices: each request is judged against `slices + 1` slices (see
    /// the module docs for the cost).
    #[must_use]
    pub const fn strict(self) -> Quota {
        Quota {
            strict: true,
            ..self
        }
    }

    /// The permits per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The slices the window is cut into.
    pub const fn slice_count(&self) -> usize {
        self.slices
    }

    /// A slice's length (`window / slices`; zero for an invalid quota).
    pub fn slice_len(&self) -> Duration {
        slice_nanos(self.window, self.slices)
            .map(Duration::from_nanos)
            .unwrap_or(Duration::ZERO)
    }

    /// Whether the limit holds in every span of the window
    /// ([`strict`](Self::strict)).
    pub const fn is_strict(&self) -> bool {
        self.strict
    }

    /// Whether a limiter can be built from this quota: the same checks every
    /// constructor makes.
    ///
    /// Errors: a zero window, zero slices, more than
    /// [`MAX_SLICES`](crate::window::MAX_SLICES) (one fewer when strict), a
    /// window whose nanoseconds are not a whole multiple of the slices, or
    /// one longer than `u64::MAX` ns.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.judged().map(|_| ())
    }

    /// The same quota with another limit (window, slices and strictness
    /// kept): a limiter's quota with its limit as it is now.
    pub(crate) const fn with_limit(self, limit: u64) -> Quota {
        Quota { limit, ..self }
    }

    /// The first [`MAX_LIMITS`] of `quotas` in a fixed array (the rest
    /// unused), as the limiters and their builders keep them.
    pub(crate) fn array(quotas: &[Quota]) -> [Quota; MAX_LIMITS] {
        let mut a = [Quota::per(0, Duration::ZERO); MAX_LIMITS];
        let k = quotas.len().min(MAX_LIMITS);
        a[..k].copy_from_slice(&quotas[..k]);
        a
    }

    /// What requests are judged against: `(slice nanoseconds, slices)`;
    /// one slice more when strict.
    pub(crate) fn judged(&self) -> Result<(u64, usize), ConfigError> {
        let nanos = slice_nanos(self.window, self.slices)?;
        if !self.strict {
            return Ok((nanos, self.slices));
        }
        let slices = self.slices + 1;
        if slices > crate::window::MAX_SLICES {
            return Err(ConfigError::TooManySlices {
                slices,
                max: crate::window::MAX_SLICES,
            });
        }
        Ok((nanos, slices))
    }
}

impl AsRef<[Quota]> for Quota {
    fn as_ref(&self) -> &[Quota] {
        std::slice::from_ref(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn strict_judges_one_slice_more() {
        let q = Quota::per_second(5);
        assert_eq!(q.judged(), Ok((100_000_000, 10)));
        assert_eq!(q.strict().judged(), Ok((100_000_000, 11)));
        assert_eq!(q.slices(1).strict().judged(), Ok((1_000_000_000, 2)));
        let max = crate::window::MAX_SLICES;
        let q = Quota::per(1, Duration::from_nanos(max as u64)).slices(max);
        assert!(q.validate().is_ok());
        assert_eq!(
            q.strict().validate(),
            Err(ConfigError::TooManySlices {
                slices: max + 1,
                max
            })
        );
        assert_eq!(
            Quota::per(1, Duration::from_nanos(10)).slices(3).validate(),
            Err(ConfigError::UnevenSlices {
                window: Duration::from_nanos(10),
                slices: 3
            })
        );
        assert_eq!(
            Quota::per_hour(1).slices(0).validate(),
            Err(ConfigError::ZeroSlices)
        );
        assert_eq!(Quota::per_hour(1).slice_count(), 10);
        assert_eq!(Quota::per_minute(1).as_ref(), &[Quota::per_minute(1)]);
    }
}
