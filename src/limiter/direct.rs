//! The direct limiters: one [`AdmissionState`] shared by every caller,
//! with its limits in atomics beside it and its own clock.
//!
//! [`Limiter<S, C>`] is one generic type; the shape `S` ([`Sliding`],
//! [`Fixed`], [`Multi`]) only chooses the constructors, the accessors and
//! the name, so every shared method is written once, on real code. The
//! names users know are aliases: [`SlidingWindowLimiter`](crate::SlidingWindowLimiter),
//! [`FixedWindowLimiter`](crate::FixedWindowLimiter), [`MultiLimiter`](crate::MultiLimiter).
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
use super::state::{AdmissionState, Refused};
use super::Denied;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

mod sealed {
    pub trait Sealed {}
}

/// The shape of a [`Limiter`]: [`Sliding`], [`Fixed`] or [`Multi`].
pub trait Shape: sealed::Sealed + Send + Sync + 'static {
    /// The name its `Debug` output uses.
    const NAME: &'static str;
    /// Whether it has exactly one limit (its grant path is then specialized
    /// at compile time).
    const ONE: bool;
}

/// The shape of a [`SlidingWindowLimiter`](crate::SlidingWindowLimiter): one limit over a sliding window.
#[derive(Debug)]
pub enum Sliding {}
/// The shape of a [`FixedWindowLimiter`](crate::FixedWindowLimiter): one limit per fixed window.
#[derive(Debug)]
pub enum Fixed {}
/// The shape of a [`MultiLimiter`](crate::MultiLimiter): several limits, all or nothing.
#[derive(Debug)]
pub enum Multi {}

impl sealed::Sealed for Sliding {}
impl sealed::Sealed for Fixed {}
impl sealed::Sealed for Multi {}
impl Shape for Sliding {
    const ONE: bool = true;
    const NAME: &'static str = "SlidingWindowLimiter";
}
impl Shape for Fixed {
    const ONE: bool = true;
    const NAME: &'static str = "FixedWindowLimiter";
}
impl Shape for Multi {
    const ONE: bool = false;
    const NAME: &'static str = "MultiLimiter";
}

/// A strict rate limiter of shape `S` on clock `C`: never more than its
/// limit in any window, under any concurrency; a refusal only when the
/// request did not fit at the moment it was decided. Lock-free; a refusal
/// costs a few loads, a grant one CAS. Use it through its aliases,
/// [`SlidingWindowLimiter`](crate::SlidingWindowLimiter), [`FixedWindowLimiter`](crate::FixedWindowLimiter) and [`MultiLimiter`](crate::MultiLimiter)
/// (the protocol is documented in `src/limiter/`).
pub struct Limiter<S: Shape, C: Clock = MonotonicClock> {
    hot: CachePadded<Hot>,
    cfg: Config,
    windows: [Duration; MAX_LIMITS],
    clock: C,
    _shape: PhantomData<S>,
}

/// The words every request reads, on their own cache line.
struct Hot {
    state: AdmissionState,
    limits: [AtomicU64; MAX_LIMITS],
}

impl<S: Shape, C: Clock> Limiter<S, C> {
    fn build(cfg: Config, limits: &[u64], windows: &[Duration], clock: C) -> Self {
        let mut w = [Duration::ZERO; MAX_LIMITS];
        w[..windows.len()].copy_from_slice(windows);
        Limiter {
            hot: CachePadded::new(Hot {
                state: AdmissionState::new(&cfg, 0),
                limits: std::array::from_fn(|i| {
                    AtomicU64::new(limits.get(i).copied().unwrap_or(0))
                }),
            }),
            cfg,
            windows: w,
            clock,
            _shape: PhantomData,
        }
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

    /// Takes one permit now; `true` if granted.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        self.try_acquire_at(self.clock.now(), 1)
    }

    /// Takes `n` permits now, all or none; `true` if granted. `n == 0` is
    /// granted and consumes nothing; `n > limit` is always refused.
    #[inline]
    pub fn try_acquire_n(&self, n: u64) -> bool {
        self.try_acquire_at(self.clock.now(), n)
    }

    /// Takes `n` permits at time `now` (nanoseconds on this limiter's
    /// clock). A `now` before the newest time the limiter has seen is judged
    /// at that newest time.
    #[inline]
    pub fn try_acquire_at(&self, now: Timestamp, n: u64) -> bool {
        self.try_acquire_verbose_at(now, n).is_ok()
    }

    /// Like [`try_acquire_n`](Self::try_acquire_n), but says why a request
    /// was refused. `Ok(epoch)`: the slice (`time / slice length`) the
    /// permits were counted in.
    #[inline]
    pub fn try_acquire_verbose(&self, n: u64) -> Result<u64, Denied> {
        self.try_acquire_verbose_at(self.clock.now(), n)
    }

    /// Like [`try_acquire_at`](Self::try_acquire_at), but says why a request
    /// was refused. `Ok(epoch)`: the slice the permits were counted in,
    /// which is at least `epoch_at(now)` (later when the limiter had already
    /// seen a later time).
    #[inline]
    pub fn try_acquire_verbose_at(&self, now: Timestamp, n: u64) -> Result<u64, Denied> {
        let now = now.as_nanos();
        let r = if S::ONE {
            let limit = self.hot.limits[0].load(Ordering::Relaxed);
            self.hot.state.acquire_one(&self.cfg, now, n, limit)
        } else {
            self.with_limits(|l| self.hot.state.acquire(&self.cfg, now, n, l))
        };
        r.map_err(|r| match r {
            Refused::Denied { reason, .. } => reason,
            Refused::Sealed => Denied::Exhausted, // a direct state is never sealed
        })
    }

    /// Takes `n` permits now and returns the whole [`Decision`]: the verdict,
    /// the limit, the permits left, when a refused request would fit, when
    /// the window empties.
    pub fn try_acquire_decision(&self, n: u64) -> Decision {
        self.try_acquire_decision_at(self.clock.now(), n)
    }

    /// [`try_acquire_decision`](Self::try_acquire_decision) at time `now`.
    pub fn try_acquire_decision_at(&self, now: Timestamp, n: u64) -> Decision {
        let now = now.as_nanos();
        self.with_limits(|l| {
            let d = if S::ONE {
                self.hot.state.decide_with::<true>(&self.cfg, now, n, l)
            } else {
                self.hot.state.decide_with::<false>(&self.cfg, now, n, l)
            };
            d.unwrap_or_else(|| Decision::unavailable(l[0]))
        })
    }

    /// Whether `n` permits would be granted now, consuming nothing: a
    /// [`Decision`] as [`try_acquire_decision`](Self::try_acquire_decision)
    /// would give, without its effect.
    ///
    /// ```
    /// use stripecount::{ManualClock, SlidingWindowLimiter};
    /// use std::time::Duration;
    ///
    /// let lim = SlidingWindowLimiter::with_clock(2, Duration::from_secs(1), 1, ManualClock::new())?;
    /// assert!(lim.peek(2).is_granted());
    /// assert!(lim.peek(2).is_granted()); // nothing was taken
    /// assert!(lim.try_acquire());
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

    /// The epoch (slice number, of the shortest slice length) of time `now`.
    pub fn epoch_at(&self, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        self.cfg.epoch_of(now)
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    pub(super) fn window_slices(&self) -> u64 {
        self.cfg.level(0).slices
    }

    pub(super) fn slice_nanos(&self) -> u64 {
        self.cfg.slice_nanos()
    }

    fn limit_at(&self, i: usize) -> u64 {
        self.hot.limits[i].load(Ordering::Relaxed)
    }

    fn set_limit_at(&self, i: usize, limit: u64) {
        self.hot.limits[i].store(limit, Ordering::Relaxed);
    }
}

/// The shapes with one limit: [`Sliding`] and [`Fixed`].
pub trait OneLimit: Shape {}
impl OneLimit for Sliding {}
impl OneLimit for Fixed {}

impl<S: OneLimit, C: Clock> Limiter<S, C> {
    /// A limiter of one limit over `window` in `slices` slices.
    pub(super) fn one(
        limit: u64,
        window: Duration,
        slices: usize,
        clock: C,
    ) -> Result<Self, crate::ConfigError> {
        let cfg = Config::single(limit, window, slices)?;
        Ok(Self::build(cfg, &[limit], &[window], clock))
    }

    /// The limit: permits per window.
    pub fn limit(&self) -> u64 {
        self.limit_at(0)
    }

    /// Changes the limit at run time, for the requests that start after the
    /// change (see "Limits that change at run time" in `src/limiter/direct.rs`).
    /// Permits already granted stay counted: after lowering the limit below
    /// what the current window holds, requests are refused until enough of
    /// it has expired.
    ///
    /// Units are fixed at construction: if the limiter was built with a
    /// limit above [`MAX_EXACT_LIMIT`](crate::MAX_EXACT_LIMIT), a new limit
    /// is accounted in the same units (a limit below one unit then grants
    /// nothing); a limiter built with an exact limit clamps a new limit
    /// above `MAX_EXACT_LIMIT` to that many units, except that a single
    /// request of up to the new limit is still granted in an empty window.
    pub fn set_limit(&self, limit: u64) {
        self.set_limit_at(0, limit);
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.windows[0]
    }
}

impl<C: Clock> Limiter<Multi, C> {
    /// A limiter of several limits: `limits[i] = (limit, window, slices)`.
    pub(super) fn multi(
        limits: &[(u64, Duration, usize)],
        clock: C,
    ) -> Result<Self, crate::ConfigError> {
        let windows: Vec<(Duration, usize)> = limits.iter().map(|l| (l.1, l.2)).collect();
        let cfg = Config::multi(&windows)?;
        let raw: Vec<u64> = limits.iter().map(|l| l.0).collect();
        let w: Vec<Duration> = limits.iter().map(|l| l.1).collect();
        Ok(Self::build(cfg, &raw, &w, clock))
    }

    /// The number of limits.
    pub fn len(&self) -> usize {
        self.cfg.len()
    }

    /// Always `false`: a multi-limit has at least one limit.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Limit `index` (permits per its window), or `None` past the last.
    pub fn limit_of(&self, index: usize) -> Option<u64> {
        (index < self.cfg.len()).then(|| self.limit_at(index))
    }

    /// Limit `index`'s window, or `None` past the last.
    pub fn window_of(&self, index: usize) -> Option<Duration> {
        (index < self.cfg.len()).then(|| self.windows[index])
    }

    /// Changes limit `index` at run time, as
    /// [`SlidingWindowLimiter::set_limit`](Limiter::set_limit) does (limits
    /// above [`MAX_EXACT_LIMIT`](crate::MAX_EXACT_LIMIT) count as that many
    /// permits). `false` if there is no limit `index`.
    pub fn set_limit_of(&self, index: usize, limit: u64) -> bool {
        let ok = index < self.cfg.len();
        if ok {
            self.set_limit_at(index, limit);
        }
        ok
    }
}

impl<S: Shape, C: Clock> fmt::Debug for Limiter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.cfg.len();
        let limits: Vec<u64> = (0..k).map(|i| self.limit_at(i)).collect();
        let windows: Vec<(Duration, u64)> = (0..k)
            .map(|i| (self.windows[i], self.cfg.level(i).slices))
            .collect();
        f.debug_struct(S::NAME)
            .field("limits", &limits)
            .field("windows", &windows)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + fmt::Debug>() {}
    is::<Limiter<Sliding>>();
    is::<Limiter<Fixed>>();
    is::<Limiter<Multi>>();
}
