//! Waiting instead of refusing (feature `tokio`): [`UntilReady`] on a
//! [`KeyedLimiter`], and [`TokioClock`], a limiter clock on tokio's time.
//!
//! The guarantees are on [`UntilReady`]'s docs.

use std::future::Future;
use std::hash::BuildHasher;
use stripecount::keyed::{Key, KeyRef};
use stripecount::{Clock, Decision, Denied, KeyedLimiter, Timestamp};

/// `until_ready` for a [`KeyedLimiter`]: wait for a key's permits instead
/// of being refused (governor's `until_ready`, per key).
///
/// # Cancel safety
/// A wait is a loop of one attempt ([`KeyedLimiter::decide`], all `n`
/// permits or none, decided in one step) and one sleep for the refusal's
/// `retry_after`. Permits exist only in the limiter: a grant returns from
/// the same poll that took it, with no await in between, so a waiter
/// dropped at any await point (a timeout, a `select!`, a client gone) holds
/// nothing and has taken nothing. There is no queue to leave either.
///
/// # Order
/// Waiters are not served in arrival order: each sleeps until its request
/// would fit if nothing else were granted, then tries again; when several
/// wake for the same room, the limit decides who gets it (never more than
/// the limit), and the others sleep again. A waiter is granted at the first
/// of its attempts that finds room; with more demand than the limit it may
/// wait through several windows (no fairness is promised).
/// Each attempt that does not fit is a refusal in
/// [`KeyedLimiter::refusals`].
///
/// ```
/// use std::time::Duration;
/// use stripecount::{KeyedLimiter, Quota};
/// use stripecount_tower::{TokioClock, UntilReady};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// // 2 per second per key (on tokio's clock, here paused: sleeps take no time).
/// let lim: KeyedLimiter<String, _> = KeyedLimiter::builder(Quota::per_second(2).slices(1))
///     .clock(TokioClock::new())
///     .build()?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..5 {
///     lim.until_ready("job-queue").await.unwrap();
/// }
/// // 2 at 0 s, 2 at 1 s, the fifth at 2 s.
/// assert_eq!(start.elapsed(), Duration::from_secs(2));
/// // A request above the limit never fits: an error, not an endless wait.
/// assert!(lim.until_ready_n("job-queue", 3).await.is_err());
/// # Ok::<(), stripecount::ConfigError>(())
/// # }).unwrap();
/// ```
pub trait UntilReady<K> {
    /// Waits until one permit for `key` is granted (see
    /// [`until_ready_n`](Self::until_ready_n)).
    fn until_ready<'a, Q>(
        &'a self,
        key: &'a Q,
    ) -> impl Future<Output = Result<Decision, Denied>> + Send + 'a
    where
        Q: KeyRef<K> + Sync + ?Sized;

    /// Waits until `n` permits for `key` are granted, all at once, and
    /// returns the grant's decision. Cancel-safe: dropping the future at
    /// any point takes nothing (see the [trait docs](UntilReady)).
    ///
    /// Errors, at once: the request can never fit
    /// ([`Denied::ExceedsLimit`]: `n` above the key's limit), or the
    /// limiter cannot track the key now ([`Denied::TooManyKeys`]: full of
    /// keys that are not idle, with the default flood policy): a flood is an
    /// overload to report, not a queue to join.
    fn until_ready_n<'a, Q>(
        &'a self,
        key: &'a Q,
        n: u64,
    ) -> impl Future<Output = Result<Decision, Denied>> + Send + 'a
    where
        Q: KeyRef<K> + Sync + ?Sized;
}

impl<K, C, S> UntilReady<K> for KeyedLimiter<K, C, S>
where
    K: Key,
    C: Clock,
    S: BuildHasher + Send + Sync + 'static,
{
    fn until_ready<'a, Q>(
        &'a self,
        key: &'a Q,
    ) -> impl Future<Output = Result<Decision, Denied>> + Send + 'a
    where
        Q: KeyRef<K> + Sync + ?Sized,
    {
        self.until_ready_n(key, 1)
    }

    async fn until_ready_n<'a, Q>(&'a self, key: &'a Q, n: u64) -> Result<Decision, Denied>
    where
        Q: KeyRef<K> + Sync + ?Sized,
    {
        loop {
            let d = self.decide(key, n);
            if d.is_granted() {
                return Ok(d);
            }
            match (d.denied(), d.retry_after()) {
                (Some(Denied::Exhausted), Some(wait)) => tokio::time::sleep(wait).await,
                (reason, _) => return Err(reason.unwrap_or(Denied::Exhausted)),
            }
        }
    }
}

/// A [`Clock`] on tokio's time ([`tokio::time::Instant`]), from the moment
/// it was made: the same time `until_ready`'s sleeps run on. In a runtime
/// with paused time (tokio's `test-util`), a limiter on this clock sees
/// the paused clock, so tests of waiting code are exact and take no time;
/// otherwise it reads the monotonic clock as `std::time::Instant` does.
///
/// ```
/// use stripecount::Clock;
/// use stripecount_tower::TokioClock;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let clock = TokioClock::new();
/// tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
/// assert_eq!(clock.now().as_nanos(), 1_500_000_000);
/// # });
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock at 0 now.
    pub fn new() -> TokioClock {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> Timestamp {
        let d = tokio::time::Instant::now().saturating_duration_since(self.origin);
        Timestamp::from_duration(d)
    }
}
