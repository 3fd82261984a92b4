//! What a limiter tells its caller: [`Denied`] (why a request was refused)
//! and [`Decision`] (the verdict with everything an HTTP service needs for
//! `Retry-After` and the IETF `RateLimit` headers), computed from the state
//! the verdict was taken on, without a second lookup.
//!
//! # How the fields are computed
//! - A **grant** reports from the values its CAS was decided on: the
//!   remaining permits after it, and the full reset (when the slice it was
//!   counted in leaves the window). No extra read.
//! - A **refusal** and a **peek** report from a snapshot of the state (taken
//!   right after the refusal, so a window that rolled meanwhile is seen as
//!   it is now): the remaining permits, when the request would first fit
//!   if nothing else were granted, and when the window is empty.
//! - With several limits, `limit`, `remaining` and `reset_after` describe
//!   one limit, [`Decision::limit_index`]: the one that refused (the one
//!   that would hold the request longest), or after a grant the one with
//!   the fewest permits left; `retry_after` is when *every* limit has room.

use super::config::{Config, MAX_LIMITS};
use super::snapshot::Snapshot;
use super::state::{AdmissionState, Grant, Refused};
use std::fmt;
use std::time::Duration;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Denied {
    /// The request asks for more permits than the limit: it can never be
    /// granted (`n > limit`).
    ExceedsLimit,
    /// The window has no room for the request now; it may fit later (see
    /// `retry_after_at`).
    Exhausted,
    /// A per-key limiter holds its maximum number of keys, none of them
    /// idle, and refuses keys it cannot track (see the builder's
    /// [`max_keys`](crate::limiter::KeyedLimiterBuilder::max_keys)): an
    /// overload of the limiter, not of the key's quota.
    TooManyKeys,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::ExceedsLimit => write!(f, "the request asks for more permits than the limit"),
            Denied::Exhausted => write!(f, "the window has no room for the request now"),
            Denied::TooManyKeys => write!(f, "the limiter cannot track more keys now"),
        }
    }
}

impl std::error::Error for Denied {}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    verdict: Result<u64, Denied>,
    limit: u64,
    remaining: u64,
    retry_after: Option<Duration>,
    reset_after: Duration,
    limit_index: usize,
}

impl Decision {
    /// Whether the request was (for a peek: would be) granted.
    pub fn is_granted(&self) -> bool {
        self.verdict.is_ok()
    }

    /// Why it was refused, if it was.
    pub fn denied(&self) -> Option<Denied> {
        self.verdict.err()
    }

    /// The verdict as a `Result`: `Err` says why it was refused.
    pub fn result(&self) -> Result<(), Denied> {
        self.verdict.map(|_| ())
    }

    /// Tests and loom models only: the slice (`time / slice length`) a
    /// granted request was counted in.
    #[doc(hidden)]
    pub fn __slice(&self) -> Option<u64> {
        self.verdict.ok()
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
        self.retry_after
    }

    /// How long until the window holds no permit (the limit is fully
    /// available again), if nothing else is granted: after a grant, with
    /// the grant counted; for a peek, the window as it is (zero if empty).
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// Which limit `limit`, `remaining` and `reset_after` describe (0 for a
    /// single-limit limiter; see the module docs for several).
    pub fn limit_index(&self) -> usize {
        self.limit_index
    }
}

impl Decision {
    /// A refusal for a state that cannot decide (sealed or pending; never a
    /// direct limiter's).
    pub(crate) fn unavailable(limit: u64) -> Decision {
        Decision {
            verdict: Err(Denied::Exhausted),
            limit,
            remaining: 0,
            retry_after: None,
            reset_after: Duration::ZERO,
            limit_index: 0,
        }
    }

    /// The decision on a key a per-key limiter cannot track (its map is
    /// full of keys that are not idle): refused (`TooManyKeys`, with no
    /// known retry time), or admitted without being counted (`epoch`: now's
    /// slice; the limit stays whole as far as anyone knows).
    pub(crate) fn untracked(admit: bool, epoch: u64, limit: u64, n: u64) -> Decision {
        Decision {
            verdict: if admit {
                Ok(epoch)
            } else {
                Err(Denied::TooManyKeys)
            },
            limit,
            remaining: if admit { limit.saturating_sub(n) } else { 0 },
            retry_after: admit.then_some(Duration::ZERO),
            reset_after: Duration::ZERO,
            limit_index: 0,
        }
    }
}

/// The decision for a grant of `n > 0` permits, from the values it was
/// decided on.
#[inline]
pub(crate) fn granted<const ONE: bool>(
    cfg: &Config,
    now: u64,
    g: &Grant,
    frozen: &[u64; MAX_LIMITS],
    limits: &[u64],
) -> Decision {
    let left = |i: usize, used: u64| {
        let raw = limits[i];
        cfg.permits(cfg.budget(raw).saturating_sub(used), false, raw)
    };
    // The limit with the fewest permits left (the only one, usually).
    let (mut i, mut remaining) = (cfg.fold(), left(cfg.fold(), g.used));
    for c in (0..limits.len()).filter(|&c| !ONE && c != cfg.fold()) {
        let l = left(c, frozen[c].saturating_add(g.cur));
        if l < remaining || (l == remaining && c < i) {
            (i, remaining) = (c, l);
        }
    }
    // The slice the grant was counted in leaves the window `S` slices on.
    let lv = cfg.level(i);
    let slice = lv.index(g.epoch);
    let reset = slice.saturating_add(lv.slices).saturating_mul(lv.ratio);
    Decision {
        verdict: Ok(g.epoch),
        limit: limits[i],
        remaining,
        retry_after: Some(Duration::ZERO),
        reset_after: Duration::from_nanos(cfg.nanos_until(reset, now)),
        limit_index: i,
    }
}

/// The decision for `n` permits judged on `snap` at `now`. `verdict`:
/// the refusal already decided, or `None` for a peek (judged here).
pub(crate) fn judged(
    cfg: &Config,
    snap: &Snapshot<'_>,
    now: u64,
    n: u64,
    limits: &[u64],
    verdict: Option<(super::Denied, usize)>,
) -> Decision {
    let j = cfg.epoch_of(now).max(snap.epoch);
    let mut left = [0u64; MAX_LIMITS];
    let mut fits = [Some(j); MAX_LIMITS];
    let mut reset = [j; MAX_LIMITS];
    for (i, &raw) in limits.iter().enumerate() {
        let level = snap.level(cfg, i);
        let budget = cfg.budget(raw);
        let used = level.used_at(j);
        left[i] = cfg.permits(budget.saturating_sub(used), used == 0, raw);
        fits[i] = if n == 0 {
            Some(j)
        } else if n > raw {
            None
        } else {
            match cfg.charge(n, budget) {
                0 => None, // a lowered limit below one unit
                units => level.fits_from(j, units, budget),
            }
        };
        reset[i] = level.empty_from(j);
    }
    let k = limits.len();
    // The binding limit: the one that holds the request longest (never =
    // `None` first), else the one with the fewest permits left.
    let later = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, Some(_)) => true,
        (Some(x), Some(y)) => x > y,
        _ => false,
    };
    let mut i = 0;
    for c in 1..k {
        let worse = later(fits[c], fits[i]) || (fits[c] == fits[i] && left[c] < left[i]);
        if worse {
            i = c;
        }
    }
    let verdict = match verdict {
        Some((reason, level)) => {
            i = level;
            Err(reason)
        }
        None => match fits[i] {
            None => Err(super::Denied::ExceedsLimit),
            Some(at) if at > j => Err(super::Denied::Exhausted),
            Some(_) => Ok(j),
        },
    };
    let retry = (0..k).try_fold(j, |acc, c| fits[c].map(|at| acc.max(at)));
    // From `now`, or zero for "at the epoch the request is judged at" (a
    // request stamped before the state's newest epoch is judged there).
    let after = |at: u64| match at > j {
        true => Duration::from_nanos(cfg.nanos_until(at, now)),
        false => Duration::ZERO,
    };
    Decision {
        verdict,
        limit: limits[i],
        remaining: left[i],
        retry_after: retry.map(after),
        reset_after: after(reset[i]),
        limit_index: i,
    }
}

impl AdmissionState {
    /// Takes `n` permits at `now` against `limits`, as
    /// [`acquire`](Self::acquire), and returns the full [`Decision`].
    /// `None`: the state is sealed or pending (look the key up again).
    #[cfg_attr(not(any(test, loom)), allow(dead_code))] // tests and loom models
    pub fn decide(&self, cfg: &Config, now: u64, n: u64, limits: &[u64]) -> Option<Decision> {
        if cfg.len() == 1 {
            self.decide_with::<true>(cfg, now, n, limits)
        } else {
            self.decide_with::<false>(cfg, now, n, limits)
        }
    }

    /// [`decide`](Self::decide), specialized for one level (`ONE`) or not.
    #[inline]
    pub(crate) fn decide_with<const ONE: bool>(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
    ) -> Option<Decision> {
        let mut frozen = [0; MAX_LIMITS];
        match self.admit::<ONE>(cfg, now, n, limits, &mut frozen) {
            Ok(g) if n > 0 => Some(granted::<ONE>(cfg, now, &g, &frozen, limits)),
            Ok(_) => self.peek(cfg, now, 0, limits),
            Err(Refused::Denied { reason, level }) => self.read(cfg, |snap| {
                judged(cfg, snap, now, n, limits, Some((reason, level)))
            }),
            Err(Refused::Sealed) => None,
        }
    }

    /// Whether `n` permits would be granted at `now` against `limits`,
    /// consuming nothing and not moving the state's time. `None`: the state
    /// is pending.
    pub fn peek(&self, cfg: &Config, now: u64, n: u64, limits: &[u64]) -> Option<Decision> {
        self.read(cfg, |snap| judged(cfg, snap, now, n, limits, None))
    }

    /// The most permits one request could get at `now` (the smallest over
    /// the limits; a limit in an empty window). `None`: the state is
    /// pending.
    pub fn available(&self, cfg: &Config, now: u64, limits: &[u64]) -> Option<u64> {
        self.read(cfg, |snap| {
            let j = cfg.epoch_of(now).max(snap.epoch);
            let left = |(i, &raw): (usize, &u64)| {
                let used = snap.level(cfg, i).used_at(j);
                cfg.permits(cfg.budget(raw).saturating_sub(used), used == 0, raw)
            };
            limits.iter().enumerate().map(left).min().unwrap_or(0)
        })
    }
}
