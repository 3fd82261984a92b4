//! The direct limiters: one [`AdmissionState`] shared by every caller,
//! with its limits in atomics beside it and its own clock.
//!
//! [`Limiter<S, C>`] is one generic type; the shape `S` ([`One`] or
//! [`Multi`]) only chooses the accessors and the name, so every shared
//! method is written once, on real code. The names users know are aliases:
//! [`RateLimiter`](super::RateLimiter) and [`MultiLimiter`](super::MultiLimiter).
//!
//! # Limits that change at run time
//! Each request reads the limits (`Relaxed`: a limit is an independent
//! fact) once, and is judged against the values it read, by the same CAS
//! that takes its permits; a change never touches the counts. So no window
//! ever holds more than the limit its last grant was judged against:
//! lowering a limit below what the window holds refuses every request until
//! enough has expired (nothing "resets", unlike swapping in a new limiter),
//! and a request that starts after `set_limit` returned (on any thread that
//! has synchronized with it) is judged against the new value. The loom
//! suite checks both, with the swap as its counter-example.

use super::config::{Config, MAX_LIMITS};
use super::decision::Decision;
use super::denied::Denied;
use super::memo;
use super::quota::Quota;
use super::state::{AdmissionState, Refused};
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

mod sealed {
    pub trait Sealed {}
}

/// The shape of a [`Limiter`]: [`One`] or [`Multi`]. Sealed: the shapes
/// are this crate's.
pub trait Shape: sealed::Sealed + Send + Sync + 'static {
    /// The name its `Debug` output uses.
    const NAME: &'static str;
    /// Whether it has exactly one limit (its grant path is then specialized
    /// at compile time).
    const ONE: bool;
}

/// The shape of a [`RateLimiter`](super::RateLimiter): one quota.
#[derive(Debug)]
pub enum One {}
/// The shape of a [`MultiLimiter`](super::MultiLimiter): several quotas,
/// all or nothing.
#[derive(Debug)]
pub enum Multi {}

impl sealed::Sealed for One {}
impl sealed::Sealed for Multi {}
impl Shape for One {
    const ONE: bool = true;
    const NAME: &'static str = "RateLimiter";
}
impl Shape for Multi {
    const ONE: bool = false;
    const NAME: &'static str = "MultiLimiter";
}

/// A strict rate limiter of shape `S` on clock `C`: never more than its
/// limit in any window, under any concurrency; a refusal only when the
/// request did not fit at the moment it was decided. Lock-free; a refusal
/// costs a few loads, a grant one CAS. Use it through its aliases,
/// [`RateLimiter`](super::RateLimiter) and
/// [`MultiLimiter`](super::MultiLimiter) (the protocol is documented in
/// `src/limiter/`).
pub struct Limiter<S: Shape, C: Clock = MonotonicClock> {
    hot: CachePadded<Hot>,
    cfg: Config,
    /// This limiter's identity, under which a thread remembers its last
    /// refusal walk (`memo.rs`).
    id: u64,
    quotas: [Quota; MAX_LIMITS],
    clock: C,
    _shape: PhantomData<S>,
}

/// The words every request reads, on their own cache line.
struct Hot {
    state: AdmissionState,
    limits: [AtomicU64; MAX_LIMITS],
}

impl<S: Shape, C: Clock> Limiter<S, C> {
    /// A limiter of `quotas` (validated here) on `clock`.
    pub(super) fn build(quotas: &[Quota], clock: C) -> Result<Self, crate::ConfigError> {
        let cfg = Config::for_quotas(quotas)?;
        Ok(Limiter {
            hot: CachePadded::new(Hot {
                state: AdmissionState::new(&cfg, 0),
                limits: std::array::from_fn(|i| {
                    AtomicU64::new(quotas.get(i).map_or(0, Quota::limit))
                }),
            }),
            cfg,
            id: memo::next_id(),
            quotas: Quota::array(quotas),
            clock,
            _shape: PhantomData,
        })
    }

    /// Calls `f` with the limits, each read once.
    #[inline]
    fn with_limits<R>(&self, f: impl FnOnce(&[u64]) -> R) -> R {
        if S::ONE {
            f(&[self.hot.limits[0].load(Ordering::Relaxed)])
        } else {
            let mut buf = [0u64; MAX_LIMITS];
            let k = self.cfg.len();
            for (b, l) in buf[..k].iter_mut().zip(&self.hot.limits) {
                *b = l.load(Ordering::Relaxed);
            }
            f(&buf[..k])
        }
    }

    /// Takes `n` permits now, all or none; `true` if granted. `n == 0` is
    /// granted and consumes nothing; `n > limit` is always refused.
    #[inline]
    pub fn try_acquire(&self, n: u64) -> bool {
        self.try_acquire_at(self.clock.now(), n)
    }

    /// [`try_acquire`](Self::try_acquire) at time `now` (on this limiter's
    /// clock). A `now` before the newest time the limiter has seen is judged
    /// at that newest time.
    #[inline]
    pub fn try_acquire_at(&self, now: Timestamp, n: u64) -> bool {
        self.acquire(now.as_nanos(), n).is_ok()
    }

    /// The grant path: `Ok(slice)` the permits were counted in.
    #[inline]
    fn acquire(&self, now: u64, n: u64) -> Result<u64, Refused> {
        if S::ONE {
            let limit = self.hot.limits[0].load(Ordering::Relaxed);
            self.hot.state.acquire_one(&self.cfg, now, n, limit)
        } else {
            self.with_limits(|l| self.hot.state.acquire(&self.cfg, now, n, l))
        }
    }

    /// Loom models and tests only: [`try_acquire_at`](Self::try_acquire_at)'s
    /// path, saying the slice the permits were counted in, or why not.
    #[doc(hidden)]
    pub fn __acquire_at(&self, now: Timestamp, n: u64) -> Result<u64, Denied> {
        self.acquire(now.as_nanos(), n).map_err(|r| match r {
            Refused::Denied { reason, .. } => reason,
            Refused::Sealed => Denied::Exhausted, // a direct state is never sealed
        })
    }

    /// Takes `n` permits now and returns the whole [`Decision`]: the verdict
    /// (and why a refusal), the limit, the permits left, when a refused
    /// request would fit, when the window empties. A refusal's times are
    /// the ones true when it was decided, computed when they are read: a
    /// refusal costs little more than [`try_acquire`](Self::try_acquire)'s
    /// unless they are.
    pub fn decide(&self, n: u64) -> Decision {
        self.decide_at(self.clock.now(), n)
    }

    /// [`decide`](Self::decide) at time `now`.
    pub fn decide_at(&self, now: Timestamp, n: u64) -> Decision {
        let now = now.as_nanos();
        // A direct state is never sealed: every answer is the decision.
        self.with_limits(|l| {
            if S::ONE {
                self.hot
                    .state
                    .decide_or_sealed::<true>(&self.cfg, now, n, l, Some(self.id))
            } else {
                self.hot
                    .state
                    .decide_or_sealed::<false>(&self.cfg, now, n, l, Some(self.id))
            }
        })
    }

    /// Whether `n` permits would be granted now, consuming nothing: the
    /// verdict [`decide`](Self::decide) would give, without its effect.
    ///
    /// The other fields describe the window as it is, the request *not*
    /// counted (a peek changes nothing): [`remaining`](Decision::remaining)
    /// is what one request could get now (a granted `decide` of `n` would
    /// leave `n` fewer), and [`reset_after`](Decision::reset_after) is when
    /// the window as it is empties (zero for an empty window; a granted
    /// `decide` would count its slice in). [`retry_after`](Decision::retry_after)
    /// is the same as `decide`'s.
    ///
    /// ```
    /// use stripecount::{Quota, RateLimiter};
    ///
    /// let lim = RateLimiter::new(Quota::per_second(2))?;
    /// assert!(lim.peek(2).is_granted());
    /// assert!(lim.peek(2).is_granted()); // nothing was taken
    /// assert!(lim.try_acquire(1));
    /// assert!(!lim.peek(2).is_granted());
    /// assert_eq!(lim.peek(1).remaining(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn peek(&self, n: u64) -> Decision {
        self.peek_at(self.clock.now(), n)
    }

    /// [`peek`](Self::peek) at time `now`. A read: it does not move the
    /// limiter's time.
    pub fn peek_at(&self, now: Timestamp, n: u64) -> Decision {
        let now = now.as_nanos();
        self.with_limits(|l| {
            let d = self.hot.state.peek(&self.cfg, now, n, l);
            d.unwrap_or_else(|| Decision::unavailable(l[0]))
        })
    }

    /// The most permits one request at `now` could get (the limit in an
    /// empty window). A read: it does not move the limiter's time.
    pub fn available_at(&self, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        self.with_limits(|l| self.hot.state.available(&self.cfg, now, l))
            .unwrap_or(0)
    }

    /// The most permits one request could get now.
    pub fn available(&self) -> u64 {
        self.available_at(self.clock.now())
    }

    /// How long after `now` a request for `n` permits would first fit if
    /// nothing else were granted: `Some(ZERO)` if it fits now, `None` if it
    /// never can (`n > limit`).
    pub fn retry_after_at(&self, now: Timestamp, n: u64) -> Option<Duration> {
        self.peek_at(now, n).retry_after()
    }

    /// [`retry_after_at`](Self::retry_after_at) now.
    pub fn retry_after(&self, n: u64) -> Option<Duration> {
        self.retry_after_at(self.clock.now(), n)
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Quota `i` as built, with its limit as it is now.
    pub(super) fn quota_at(&self, i: usize) -> Quota {
        self.quotas[i].with_limit(self.limit_at(i))
    }

    pub(super) fn quotas_window(&self, i: usize) -> Duration {
        self.quotas[i].window()
    }

    pub(super) fn limit_count(&self) -> usize {
        self.cfg.len()
    }

    pub(super) fn limit_at(&self, i: usize) -> u64 {
        self.hot.limits[i].load(Ordering::Relaxed)
    }

    pub(super) fn set_limit_at(&self, i: usize, limit: u64) {
        self.hot.limits[i].store(limit, Ordering::Relaxed);
    }
}

impl<S: Shape, C: Clock> fmt::Debug for Limiter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.cfg.len();
        let quotas: Vec<Quota> = (0..k).map(|i| self.quota_at(i)).collect();
        f.debug_struct(S::NAME)
            .field("quotas", &quotas)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + fmt::Debug>() {}
    is::<Limiter<One>>();
    is::<Limiter<Multi>>();
}
