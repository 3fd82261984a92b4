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
//! checked where it lives (`grant.rs`, `decide.rs`, `keyed/acquire.rs`);
//! the jitter's generator is a per-thread `Cell`, shared with no other
//! thread. So there is no loom model of this file.

use super::decision::Decision;
use super::denied::Denied;
use super::direct::{Limiter, Shape};
use super::jitter::Jitter;
use super::keyed::KeyedLimiter;
use crate::clock::Clock;
use crate::key::{Key, KeyRef};
use std::future::Future;
use std::hash::BuildHasher;
use std::time::Duration;

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
