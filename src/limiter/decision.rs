//! What a limiter tells its caller: [`Decision`], the verdict with everything
//! an HTTP service needs for `Retry-After` and the IETF `RateLimit` headers,
//! from the state the verdict was taken on, without a second lookup.
//!
//! The verdict, the limit and the permits left are fields; the retry and
//! reset times are [`Times`] (`times.rs`): computed when decided, or, for
//! most refusals, kept as the values they follow from and computed when
//! read. Either way they are the answer true at the decision. Two decisions
//! are equal when every method answers the same. How each value is taken
//! is in `decide.rs`.

use super::denied::Denied;
use super::times::Times;
use std::fmt;
use std::time::Duration;

/// A limiter's decision on one request, with what a caller needs to tell
/// its own client (see the limiters' `decide` and `peek`).
///
/// ```
/// use std::time::Duration;
/// use stripecount::clock::ManualClock;
/// use stripecount::{Denied, Quota, RateLimiter};
///
/// let clock = ManualClock::new();
/// let quota = Quota::per(3, Duration::from_secs(3)).slices(3);
/// let lim = RateLimiter::builder(quota).clock(clock.clone()).build()?;
/// let d = lim.decide(2);
/// assert!(d.is_granted());
/// assert_eq!((d.limit(), d.remaining()), (3, 1));
/// assert_eq!(d.reset_after(), Duration::from_secs(3)); // when the window is empty
/// clock.advance(Duration::from_secs(1));
/// let d = lim.decide(2);
/// assert_eq!(d.denied(), Some(Denied::Exhausted));
/// assert_eq!(d.remaining(), 1);
/// assert_eq!(d.retry_after(), Some(Duration::from_secs(2))); // the first 2 expire
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// A refusal's [`retry_after`](Self::retry_after) and
/// [`reset_after`](Self::reset_after) are computed when they are called,
/// from the values the refusal was decided on (no read of the limiter: at
/// most a walk over the window's slices as the refusal saw them). The
/// answer is the one true at the decision, however late it is asked, and a
/// caller that only wants the verdict pays for little more than the
/// verdict.
#[derive(Clone, Copy)]
pub struct Decision {
    /// The slice a grant was counted in (0 for a refusal).
    slice: u64,
    limit: u64,
    remaining: u64,
    /// `SEALED | limit_index << 8 | verdict` (`verdict`: 0 for a grant,
    /// else [`code`] of the reason).
    code: u64,
    times: Times,
}

/// [`Decision::code`]: a state that could not decide (sealed or pending):
/// the caller looks its key up again.
const SEALED: u64 = 1 << 16;

/// A refusal's reason as a verdict code (1 and up; 0 is a grant).
#[inline]
fn code(reason: Denied) -> u64 {
    match reason {
        Denied::ExceedsLimit => 1,
        Denied::Exhausted => 2,
        Denied::TooManyKeys => 3,
    }
}

/// The reason of verdict code `c` (1 and up).
#[inline]
fn reason(c: u64) -> Denied {
    match c {
        1 => Denied::ExceedsLimit,
        3 => Denied::TooManyKeys,
        _ => Denied::Exhausted,
    }
}

impl Decision {
    /// Whether the request was (for a peek: would be) granted.
    pub fn is_granted(&self) -> bool {
        self.code & 0xff == 0
    }

    /// Why it was refused, if it was.
    pub fn denied(&self) -> Option<Denied> {
        self.verdict().err()
    }

    /// The verdict as a `Result`: `Err` says why it was refused.
    pub fn result(&self) -> Result<(), Denied> {
        self.verdict().map(|_| ())
    }

    /// `Ok(slice)` for a grant, else why not.
    #[inline]
    fn verdict(&self) -> Result<u64, Denied> {
        match self.code & 0xff {
            0 => Ok(self.slice),
            c => Err(reason(c)),
        }
    }

    /// Tests and loom models only: the slice (`time / slice length`) a
    /// granted request was counted in.
    #[doc(hidden)]
    pub fn __slice(&self) -> Option<u64> {
        self.verdict().ok()
    }

    /// The limit (permits per window) the request was judged against.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits left in the window after this decision (a peek consumes
    /// nothing: the permits one request could get now).
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until a request for the same number of permits would fit if
    /// nothing else were granted: `Some(ZERO)` when granted (or when it fits
    /// now), `None` if it never can (`n > limit`), or if no one can say
    /// (a per-key limiter refusing a key it cannot track,
    /// [`Denied::TooManyKeys`]).
    pub fn retry_after(&self) -> Option<Duration> {
        self.times.retry()
    }

    /// How long until the window holds no permit (the limit is fully
    /// available again), if nothing else is granted: after a grant, with
    /// the grant counted; for a peek, the window as it is (zero if empty).
    pub fn reset_after(&self) -> Duration {
        self.times.reset()
    }

    /// Which limit `limit`, `remaining` and `reset_after` describe (0 for a
    /// single-limit limiter; see the module docs for several).
    pub fn limit_index(&self) -> usize {
        (self.code >> 8 & 0xff) as usize
    }
}

impl Decision {
    /// A decision: `verdict` (`Ok(slice)` for a grant), on limit
    /// `limit_index` (`limit`), with `remaining` permits left and `times`.
    #[inline]
    pub(crate) fn new(
        verdict: Result<u64, Denied>,
        limit: u64,
        remaining: u64,
        limit_index: usize,
        times: Times,
    ) -> Decision {
        debug_assert!(limit_index < super::MAX_LIMITS);
        let (slice, c) = match verdict {
            Ok(slice) => (slice, 0),
            Err(why) => (0, code(why)),
        };
        Decision {
            slice,
            limit,
            remaining,
            code: (limit_index as u64) << 8 | c,
            times,
        }
    }

    /// A refusal for a state that cannot decide (sealed or pending; never a
    /// direct limiter's).
    pub(crate) fn unavailable(limit: u64) -> Decision {
        let times = Times::known(None, 0);
        Decision::new(Err(Denied::Exhausted), limit, 0, 0, times)
    }

    /// [`unavailable`](Self::unavailable), marked as the answer of a state
    /// sealed or pending (see [`is_sealed`](Self::is_sealed)).
    #[cold]
    pub(crate) fn sealed(limit: u64) -> Decision {
        let d = Decision::unavailable(limit);
        Decision {
            code: d.code | SEALED,
            ..d
        }
    }

    /// Whether this is the answer of a state that could not decide: the
    /// key's owner looks it up again.
    #[inline]
    pub(crate) fn is_sealed(&self) -> bool {
        self.code & SEALED != 0
    }

    /// The decision on a key a per-key limiter cannot track (its map is
    /// full of keys that are not idle): refused (`TooManyKeys`, with no
    /// known retry time), or admitted without being counted (`epoch`: now's
    /// slice; the limit stays whole as far as anyone knows).
    pub(crate) fn untracked(admit: bool, epoch: u64, limit: u64, n: u64) -> Decision {
        let verdict = if admit {
            Ok(epoch)
        } else {
            Err(Denied::TooManyKeys)
        };
        let remaining = if admit { limit.saturating_sub(n) } else { 0 };
        let times = Times::known(admit.then_some(0), 0);
        Decision::new(verdict, limit, remaining, 0, times)
    }
}

impl PartialEq for Decision {
    /// Equal when every method answers the same (the times as computed).
    fn eq(&self, other: &Decision) -> bool {
        self.verdict() == other.verdict()
            && self.limit == other.limit
            && self.remaining == other.remaining
            && self.limit_index() == other.limit_index()
            && self.retry_after() == other.retry_after()
            && self.reset_after() == other.reset_after()
    }
}

impl Eq for Decision {}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("verdict", &self.verdict())
            .field("limit", &self.limit)
            .field("remaining", &self.remaining)
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .field("limit_index", &self.limit_index())
            .finish()
    }
}
