//! Waiting for permits instead of being refused: `until_ready` on every
//! limiter ([`Limiter`], so [`RateLimiter`](super::RateLimiter) and
//! [`MultiLimiter`](super::MultiLimiter), and [`KeyedLimiter`]), on any
//! runtime, with an optional [`Jitter`].
//!
//! # A wait
//! A loop of one attempt and one sleep:
//! 1. `decide(n)`: all `n` permits or none, decided in one step;
//! 2. granted: return that decision, from the poll that took it;
//! 3. refused for [`Denied::Exhausted`] with a `retry_after`: sleep for it
//!    plus one draw of the jitter, then 1 again;
//! 4. refused for anything else ([`Denied::ExceedsLimit`]: the request never
//!    fits; [`Denied::TooManyKeys`]: the per-key map is full of busy keys):
//!    return the reason at once.
//!
//! The sleep is the caller's (`until_ready_with`) or `tokio::time::sleep`
//! (feature `tokio`); the time the limiter judges by is its own clock's, so
//! with a clock on another time than the sleep's a waiter may wake early
//! (and sleeps again) or late (and is granted late), never over the limit.
//!
//! # Invariants
//! 1. A wait takes permits only through `decide`, and only in its last
//!    attempt: every other attempt was refused, and a refusal takes nothing.
//! 2. A wait owns no shared state: no queue, no reservation, no count. The
//!    limiter decides every attempt, so its guarantees (never over the
//!    limit, under any concurrency) hold for waiters as for any caller.
//! 3. A waiter never sleeps less than the refusal's `retry_after` plus the
//!    jitter's `min`: it does not retry before its request could first
//!    fit (if nothing else were granted meanwhile).
//! 4. Nothing here panics or overflows: sleeps saturate at `Duration::MAX`
//!    and the jitter's draw is a multiply and shift of 64-bit values.
//!
//! # Cancel safety
//! The future's only await points are the sleeps, and at each one the wait
//! holds nothing (its last attempt was refused). A grant returns from the
//! poll that took it, with no await in between. So a future dropped at any
//! point (a timeout, a `select!`, a client gone) has taken nothing and has
//! nothing to give back or to leave. What a dropped wait leaves behind is
//! statistics only: its refused attempts stay counted in
//! [`KeyedLimiter::refusals`].
//!
//! # No new atomic protocol
//! Waiting only calls `decide`, whose protocol is documented and model
//! checked where it lives (`state.rs`, `keyed/acquire.rs`); the jitter's
//! generator is a per-thread `Cell`, shared with no other thread. So there
//! is no loom model of this file.
//!
//! # The jitter's randomness
//! splitmix64 (one add, two multiplies, three shifts per draw), a state per
//! thread, seeded on the thread's first draw from std's `RandomState` (keys
//! the OS's randomness seeds once per thread). Statistical quality far
//! beyond spreading wake-ups, no dependency, no lock, no shared word. A
//! draw in `[0, interval)` is Lemire's multiply and shift (`x * span >>
//! 64`): its bias is below `span / 2^64`, under a nanosecond.

use super::decision::Decision;
use super::denied::Denied;
use super::direct::{Limiter, Shape};
use super::keyed::KeyedLimiter;
use crate::clock::Clock;
use crate::key::{Key, KeyRef};
use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::time::Duration;

/// A random extra delay added to each sleep of a wait, so that waiters
/// refused together do not all wake together: each sleep is the refusal's
/// `retry_after` plus a draw uniform in `[min, min + interval)`, at whole
/// nanoseconds (intervals above 584 years are drawn from their first 584
/// years). [`Jitter::NONE`], the default, adds nothing.
///
/// ```
/// use std::time::Duration;
/// use stripecount::limiter::Jitter;
///
/// let ms = Duration::from_millis;
/// // 10 to 30 ms more than each refusal's retry time.
/// let jitter = Jitter::new(ms(10), ms(20));
/// let sleep = jitter.add_to(ms(100));
/// assert!(ms(110) <= sleep && sleep < ms(130));
/// // Up to 50 ms more.
/// assert!(Jitter::up_to(ms(50)).add_to(ms(100)) < ms(150));
/// assert_eq!(Jitter::NONE.add_to(ms(100)), ms(100));
/// // Never an overflow: a sleep saturates.
/// assert_eq!(Jitter::up_to(Duration::MAX).add_to(Duration::MAX), Duration::MAX);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Jitter {
    min: Duration,
    interval: Duration,
}

impl Jitter {
    /// No jitter: a waiter sleeps exactly the refusal's `retry_after`.
    pub const NONE: Jitter = Jitter::new(Duration::ZERO, Duration::ZERO);

    /// An extra delay uniform in `[min, min + interval)` (`min` exactly when
    /// `interval` is zero).
    pub const fn new(min: Duration, interval: Duration) -> Jitter {
        Jitter { min, interval }
    }

    /// An extra delay uniform in `[0, max)`.
    pub const fn up_to(max: Duration) -> Jitter {
        Jitter::new(Duration::ZERO, max)
    }

    /// `d` plus one draw of this jitter, saturating at `Duration::MAX`: the
    /// sleep a wait takes after a refusal whose `retry_after` is `d`. For
    /// retry loops of your own (a client honouring `Retry-After`).
    pub fn add_to(&self, d: Duration) -> Duration {
        let span = u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX);
        let extra = if span == 0 {
            0
        } else {
            ((u128::from(next_u64()) * u128::from(span)) >> 64) as u64
        };
        d.saturating_add(self.min)
            .saturating_add(Duration::from_nanos(extra))
    }
}

thread_local! {
    /// This thread's splitmix64 state; 0 until the first draw seeds it.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// splitmix64's increment (2^64 / the golden ratio, odd).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A seed: 64 bits hashed under std's per-thread random keys.
fn seed() -> u64 {
    RandomState::new().hash_one(0x5EED_u64)
}

/// splitmix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The next draw of this thread's generator (seeded on its first use; a
/// thread being torn down draws from a fresh seed).
fn next_u64() -> u64 {
    RNG.try_with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = seed();
        }
        x = x.wrapping_add(GAMMA);
        s.set(x);
        mix(x)
    })
    .unwrap_or_else(|_| mix(seed()))
}

/// The wait: `attempt` until it grants, sleeping after each refusal for its
/// `retry_after` plus a draw of `jitter` (see the module docs).
async fn wait<F, Fut>(
    mut attempt: impl FnMut() -> Decision,
    jitter: Jitter,
    mut sleep: F,
) -> Result<Decision, Denied>
where
    F: FnMut(Duration) -> Fut,
    Fut: Future,
{
    loop {
        let d = attempt();
        if d.is_granted() {
            return Ok(d);
        }
        match (d.denied(), d.retry_after()) {
            (Some(Denied::Exhausted), Some(after)) => {
                sleep(jitter.add_to(after)).await;
            }
            (reason, _) => return Err(reason.unwrap_or(Denied::Exhausted)),
        }
    }
}

/// What every `until_ready_with` does, on either kind of limiter.
macro_rules! wait_docs {
    () => {
        "The sleep is the caller's: `sleep(d)` must return a future that \
         completes after about `d` (its output is ignored), such as \
         `tokio::time::sleep`, `async_io::Timer::after` (smol, async-std) \
         or `futures_timer::Delay::new`; any runtime will do. With the \
         `tokio` feature, `until_ready` and `until_ready_jittered` pass \
         `tokio::time::sleep`.\n\n\
         # Cancel safety\n\
         A wait is a loop of one attempt (`decide`: all `n` permits or none, \
         decided in one step) and one sleep for the refusal's `retry_after` \
         plus a draw of `jitter`. Permits exist only in the limiter: a grant \
         returns from the same poll that took it, with no await in between, \
         so a waiter dropped at any await point (a timeout, a `select!`, a \
         client gone) holds nothing and has taken nothing. There is no queue \
         to leave either.\n\n\
         # Order\n\
         Waiters are not served in arrival order: each sleeps until its \
         request would fit if nothing else were granted, then tries again; \
         when several wake for the same room, the limit decides who gets it \
         (never more than the limit), and the others sleep again. A waiter is \
         granted at the first of its attempts that finds room; with more \
         demand than the limit it may wait through several windows (no \
         fairness is promised). A [`Jitter`] spreads the wake-ups of waiters \
         refused together.\n\n"
    };
}

impl<S: Shape, C: Clock> Limiter<S, C> {
    /// Waits until `n` permits are granted, all at once, sleeping with
    /// `sleep` (any runtime's timer) for each refusal's `retry_after` plus
    /// a draw of `jitter`; returns the granting [`Decision`].
    ///
    #[doc = wait_docs!()]
    /// # Errors
    /// At once, without waiting: [`Denied::ExceedsLimit`] when `n` is above
    /// a limit (it never fits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::clock::ManualClock;
    /// use stripecount::limiter::Jitter;
    /// use stripecount::{Clock, Denied, Quota, RateLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let lim = RateLimiter::builder(Quota::per_second(2).slices(1)).clock(clock.clone()).build()?;
    /// // Any executor and any sleep: here a sleep that moves the manual clock.
    /// let sleep = |d: Duration| {
    ///     clock.advance(d);
    ///     std::future::ready(())
    /// };
    /// futures_executor::block_on(async {
    ///     for _ in 0..5 {
    ///         lim.until_ready_with(1, Jitter::NONE, sleep).await.unwrap();
    ///     }
    ///     // 2 at 0 s, 2 at 1 s, the fifth at 2 s.
    ///     assert_eq!(clock.now().as_duration(), Duration::from_secs(2));
    ///     let never = lim.until_ready_with(3, Jitter::NONE, sleep).await;
    ///     assert_eq!(never.unwrap_err(), Denied::ExceedsLimit);
    /// });
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub async fn until_ready_with<F, Fut>(
        &self,
        n: u64,
        jitter: Jitter,
        sleep: F,
    ) -> Result<Decision, Denied>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future,
    {
        wait(|| self.decide(n), jitter, sleep).await
    }

    /// Waits until `n` permits are granted, sleeping on tokio's timer (see
    /// [`until_ready_with`](Self::until_ready_with): cancel-safe, errors at
    /// once for `n` above a limit).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::clock::TokioClock;
    /// use stripecount::{Quota, RateLimiter};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
    /// // 2 per second, on tokio's clock (here paused: sleeps take no time).
    /// let lim = RateLimiter::builder(Quota::per_second(2).slices(1)).clock(TokioClock::new()).build()?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..5 {
    ///     lim.until_ready(1).await.unwrap();
    /// }
    /// // 2 at 0 s, 2 at 1 s, the fifth at 2 s.
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready(&self, n: u64) -> Result<Decision, Denied> {
        self.until_ready_with(n, Jitter::NONE, tokio::time::sleep)
            .await
    }

    /// [`until_ready`](Self::until_ready) with each sleep lengthened by a
    /// draw of `jitter`.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready_jittered(&self, n: u64, jitter: Jitter) -> Result<Decision, Denied> {
        self.until_ready_with(n, jitter, tokio::time::sleep).await
    }
}

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// Waits until `n` permits for `key` are granted, all at once, sleeping
    /// with `sleep` (any runtime's timer) for each refusal's `retry_after`
    /// plus a draw of `jitter`; returns the granting [`Decision`]. Other
    /// keys are never held up. Each attempt that does not fit is a refusal
    /// in [`refusals`](Self::refusals).
    ///
    #[doc = wait_docs!()]
    /// # Errors
    /// At once, without waiting: [`Denied::ExceedsLimit`] when `n` is above
    /// one of the key's limits (it never fits); [`Denied::TooManyKeys`]
    /// when the limiter cannot track the key now (full of keys that are not
    /// idle, with the default [flood policy](super::FloodPolicy)): a flood
    /// is an overload to report, not a queue to join.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::clock::ManualClock;
    /// use stripecount::limiter::Jitter;
    /// use stripecount::{Clock, KeyedLimiter, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let lim: KeyedLimiter<String, _> =
    ///     KeyedLimiter::builder(Quota::per_second(2).slices(1)).clock(clock.clone()).build()?;
    /// let sleep = |d: Duration| {
    ///     clock.advance(d);
    ///     std::future::ready(())
    /// };
    /// futures_executor::block_on(async {
    ///     lim.until_ready_with("job", 2, Jitter::NONE, sleep).await.unwrap();
    ///     // The key's window is full until 1 s; waiting is 1 s plus 0-100 ms.
    ///     let jitter = Jitter::up_to(Duration::from_millis(100));
    ///     lim.until_ready_with("job", 1, jitter, sleep).await.unwrap();
    ///     let waited = clock.now().as_duration();
    ///     assert!(Duration::from_secs(1) <= waited && waited < Duration::from_millis(1100));
    /// });
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub async fn until_ready_with<Q, F, Fut>(
        &self,
        key: &Q,
        n: u64,
        jitter: Jitter,
        sleep: F,
    ) -> Result<Decision, Denied>
    where
        Q: KeyRef<K> + ?Sized,
        F: FnMut(Duration) -> Fut,
        Fut: Future,
    {
        wait(|| self.decide(key, n), jitter, sleep).await
    }

    /// Waits until `n` permits for `key` are granted, sleeping on tokio's
    /// timer (see [`until_ready_with`](Self::until_ready_with): cancel-safe,
    /// errors at once for `n` above the key's limit and for a key the
    /// limiter cannot track).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::clock::TokioClock;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
    /// // 2 per second per key (on tokio's clock, here paused: sleeps take no time).
    /// let lim: KeyedLimiter<String, _> = KeyedLimiter::builder(Quota::per_second(2).slices(1))
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..5 {
    ///     lim.until_ready("job-queue", 1).await.unwrap();
    /// }
    /// // 2 at 0 s, 2 at 1 s, the fifth at 2 s.
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// // A request above the limit never fits: an error, not an endless wait.
    /// assert!(lim.until_ready("job-queue", 3).await.is_err());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready<Q>(&self, key: &Q, n: u64) -> Result<Decision, Denied>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.until_ready_with(key, n, Jitter::NONE, tokio::time::sleep)
            .await
    }

    /// [`until_ready`](Self::until_ready) with each sleep lengthened by a
    /// draw of `jitter`.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready_jittered<Q>(
        &self,
        key: &Q,
        n: u64,
        jitter: Jitter,
    ) -> Result<Decision, Denied>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.until_ready_with(key, n, jitter, tokio::time::sleep)
            .await
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_saturate() {
        let ms = Duration::from_millis;
        let j = Jitter::new(ms(5), ms(10));
        for _ in 0..crate::sized(10_000, 100) {
            let d = j.add_to(ms(1));
            assert!(ms(6) <= d && d < ms(16), "{d:?}");
        }
        assert_eq!(Jitter::new(ms(5), Duration::ZERO).add_to(ms(1)), ms(6));
        let huge = Jitter::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.add_to(Duration::MAX), Duration::MAX);
        assert!(Jitter::up_to(Duration::MAX).add_to(Duration::ZERO) < Duration::MAX);
        assert_eq!(Jitter::default(), Jitter::NONE);
    }

    /// Threads seed differently (two threads drawing the same 8 values in a
    /// row would be a 2^-512 coincidence).
    #[test]
    fn threads_draw_differently() {
        let draws = || (0..8).map(|_| next_u64()).collect::<Vec<_>>();
        let a = std::thread::spawn(draws).join().unwrap();
        let b = std::thread::spawn(draws).join().unwrap();
        assert_ne!(a, b);
    }
}
