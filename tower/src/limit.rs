//! What the layer asks of a limiter: [`LayerLimiter`], implemented by
//! stripecount's [`KeyedLimiter`], by the direct [`RateLimiter`] and
//! [`MultiLimiter`] (one budget for every request: the [`Global`] key), by
//! an `Arc` of any of them, and (feature `redis`) by stripecount-redis's
//! `ClusterLimiter`; and [`Verdict`], the decision the layer answers from.
//!
//! # Why a decision may be a future
//! A local limiter decides in a few atomic operations: [`Check::Ready`].
//! A fleet-wide one decides most requests from a lease it holds (as fast),
//! but a request the lease cannot serve needs a round trip to Redis, which
//! must not block the executor's thread: [`Check::Pending`], a future the
//! service's response future polls. The service then keeps its inner
//! service (a clone, readied by `poll_ready`) until the future resolves,
//! so the inner service is called only for a granted request.

use crate::key::KeyExtractor;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use stripecount::keyed::{Key, KeyRef};
use stripecount::limiter::MAX_LIMITS;
use stripecount::{Clock, Decision, Denied, KeyedLimiter, MultiLimiter, RateLimiter};

/// A limiter the layer can ask for one permit of a request's key.
///
/// `Q` is the form the key is looked up by (the extractor's
/// [`Ref`](KeyExtractor::Ref)). Implemented by [`KeyedLimiter`], by
/// [`RateLimiter`] and [`MultiLimiter`] (for `Q = ()`: the [`Global`]
/// key), by `Arc<L>` for any `L` it is implemented for, and with the
/// `redis` feature by `stripecount_redis::ClusterLimiter` (fleet-wide).
/// Implement it to put another limiter behind the layer.
pub trait LayerLimiter<Q: ?Sized>: Send + Sync + 'static {
    /// A decision that needs I/O ([`Check::Pending`]). A limiter that
    /// always decides at once can name any future here (e.g.
    /// `std::future::Ready<Verdict>`): the layer never polls one it was not
    /// given.
    type Pending: Future<Output = Verdict> + Send + 'static;

    /// Takes one permit of `key`, or refuses. Called once per request, on
    /// the executor's thread: it must not block. `this` is the layer's
    /// handle, for a pending decision to keep the limiter alive.
    fn check(this: &Arc<Self>, key: &Q) -> Check<Self::Pending>;

    /// The window of each limit, in order (`w` in `RateLimit-Policy`).
    fn windows(&self) -> Vec<Duration>;

    /// Writes `key`'s limits, in order, into `out` (`q` in
    /// `RateLimit-Policy`: per-key quotas included) and returns how many it
    /// wrote. Called only when a response carries the fields.
    fn policy_limits(&self, key: &Q, verdict: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize;
}

/// A decision now, or one on its way.
#[derive(Debug)]
pub enum Check<P> {
    /// Decided.
    Ready(Verdict),
    /// Decided when this future resolves.
    Pending(P),
}

/// A limiter's decision on one request, as the layer answers it: granted,
/// refused by the limit (with what the `RateLimit` fields report), or the
/// limiter could not decide (`503`).
///
/// The methods a refusal's response builder reads are those of
/// [`Decision`] ([`denied`](Self::denied), [`limit`](Self::limit),
/// [`retry_after`](Self::retry_after), ...); a fleet-wide limiter knows
/// less about a key than a local one, hence the `Option`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    denied: Option<Denied>,
    unavailable: bool,
    limit_index: usize,
    limit: u64,
    remaining: Option<u64>,
    retry_after: Option<Duration>,
    reset_after: Option<Duration>,
}

impl Verdict {
    /// A grant under the limit `limit` (the `limit_index`-th of the
    /// limiter's), with the permits left and the time until the window is
    /// empty if the limiter knows them.
    pub fn granted(
        limit_index: usize,
        limit: u64,
        remaining: Option<u64>,
        reset_after: Option<Duration>,
    ) -> Verdict {
        Verdict {
            denied: None,
            unavailable: false,
            limit_index,
            limit,
            remaining,
            retry_after: None,
            reset_after,
        }
    }

    /// A refusal by the limit `limit` (the `limit_index`-th), for
    /// `reason`, with the time until the request would fit if known.
    pub fn refused(
        limit_index: usize,
        limit: u64,
        reason: Denied,
        retry_after: Option<Duration>,
    ) -> Verdict {
        Verdict {
            denied: Some(reason),
            unavailable: false,
            limit_index,
            limit,
            remaining: Some(0),
            retry_after,
            reset_after: None,
        }
    }

    /// The limiter could not decide (a fleet-wide limiter's store is
    /// unreachable and its outage policy refuses): the request is refused
    /// as an outage of the service (`503`), without rate-limit fields.
    pub fn unavailable(limit: u64) -> Verdict {
        Verdict {
            unavailable: true,
            ..Verdict::refused(0, limit, Denied::Exhausted, None)
        }
    }

    /// The limiter could not decide now because it is overloaded (a
    /// fleet-wide limiter's queue of requests waiting for its store is
    /// full): refused as [`unavailable`](Self::unavailable) (`503`), with
    /// `Retry-After` from `retry_after`, when it expects to have room.
    pub fn overloaded(limit: u64, retry_after: Duration) -> Verdict {
        Verdict {
            unavailable: true,
            ..Verdict::refused(0, limit, Denied::Exhausted, Some(retry_after))
        }
    }

    /// Whether the request was granted.
    pub fn is_granted(&self) -> bool {
        self.denied.is_none()
    }

    /// Why the limit refused it (`None` if granted).
    pub fn denied(&self) -> Option<Denied> {
        self.denied
    }

    /// Whether the limiter could not decide (see
    /// [`unavailable`](Self::unavailable)).
    pub fn is_unavailable(&self) -> bool {
        self.unavailable
    }

    /// Which of the limiter's limits this describes: the one that refused,
    /// or after a grant the one with the fewest permits left.
    pub fn limit_index(&self) -> usize {
        self.limit_index
    }

    /// That limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits left under that limit (`Some(0)` on a refusal; `None` when
    /// the limiter does not know: a fleet-wide grant).
    pub fn remaining(&self) -> Option<u64> {
        self.remaining
    }

    /// On a refusal: when the request would fit if nothing else were
    /// granted meanwhile (`None`: never, or unknown).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// On a grant: when the key's window for that limit is empty again, if
    /// known.
    pub fn reset_after(&self) -> Option<Duration> {
        self.reset_after
    }
}

impl From<&Decision> for Verdict {
    fn from(d: &Decision) -> Verdict {
        match d.denied() {
            None => Verdict::granted(
                d.limit_index(),
                d.limit(),
                Some(d.remaining()),
                Some(d.reset_after()),
            ),
            Some(reason) => Verdict {
                reset_after: Some(d.reset_after()),
                ..Verdict::refused(d.limit_index(), d.limit(), reason, d.retry_after())
            },
        }
    }
}

impl From<Decision> for Verdict {
    fn from(d: Decision) -> Verdict {
        Verdict::from(&d)
    }
}

/// Every request under one key: a budget for the whole service, with a
/// direct [`RateLimiter`] or [`MultiLimiter`] (or a `KeyedLimiter<()>`).
///
/// ```
/// use stripecount::{Quota, RateLimiter};
/// use stripecount_tower::{Global, KeyedRateLimitLayer};
///
/// // At most 10,000 requests a second to this service, from everyone.
/// let layer = KeyedRateLimitLayer::new(RateLimiter::new(Quota::per_second(10_000))?, Global);
/// # let _ = layer;
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyExtractor for Global {
    type Key = ();
    type Ref = ();

    fn extract<'a>(&self, _: &'a http::request::Parts) -> Option<std::borrow::Cow<'a, ()>> {
        Some(std::borrow::Cow::Owned(()))
    }
}

impl<K, C, S, Q> LayerLimiter<Q> for KeyedLimiter<K, C, S>
where
    K: Key,
    C: Clock,
    S: std::hash::BuildHasher + Send + Sync + 'static,
    Q: KeyRef<K> + ?Sized,
{
    type Pending = std::future::Ready<Verdict>;

    #[inline]
    fn check(this: &Arc<Self>, key: &Q) -> Check<Self::Pending> {
        Check::Ready(Verdict::from(&this.decide(key, 1)))
    }

    fn windows(&self) -> Vec<Duration> {
        (0..self.limit_count())
            .filter_map(|i| self.window_of(i))
            .collect()
    }

    fn policy_limits(&self, key: &Q, v: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        let k = self.limit_count().min(MAX_LIMITS);
        if k > 1 && self.key_overrides() > 0 {
            for (slot, l) in out.iter_mut().zip(self.limits_for(key)) {
                *slot = l;
            }
        } else {
            for (i, slot) in out.iter_mut().enumerate().take(k) {
                *slot = self.limit_of(i).unwrap_or(0);
            }
        }
        // The decision's own limit is the one it was judged on.
        if let Some(slot) = out.get_mut(v.limit_index()) {
            *slot = v.limit();
        }
        k
    }
}

impl<C: Clock> LayerLimiter<()> for RateLimiter<C> {
    type Pending = std::future::Ready<Verdict>;

    #[inline]
    fn check(this: &Arc<Self>, _: &()) -> Check<Self::Pending> {
        Check::Ready(Verdict::from(&this.decide(1)))
    }

    fn windows(&self) -> Vec<Duration> {
        vec![self.window()]
    }

    fn policy_limits(&self, _: &(), v: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        out[0] = v.limit();
        1
    }
}

impl<C: Clock> LayerLimiter<()> for MultiLimiter<C> {
    type Pending = std::future::Ready<Verdict>;

    #[inline]
    fn check(this: &Arc<Self>, _: &()) -> Check<Self::Pending> {
        Check::Ready(Verdict::from(&this.decide(1)))
    }

    fn windows(&self) -> Vec<Duration> {
        (0..self.len()).filter_map(|i| self.window_of(i)).collect()
    }

    fn policy_limits(&self, _: &(), v: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        let k = self.len().min(MAX_LIMITS);
        for (i, slot) in out.iter_mut().enumerate().take(k) {
            *slot = self.limit_of(i).unwrap_or(0);
        }
        if let Some(slot) = out.get_mut(v.limit_index()) {
            *slot = v.limit();
        }
        k
    }
}

impl<L, Q> LayerLimiter<Q> for Arc<L>
where
    L: LayerLimiter<Q>,
    Q: ?Sized,
{
    type Pending = L::Pending;

    #[inline]
    fn check(this: &Arc<Self>, key: &Q) -> Check<Self::Pending> {
        L::check(&**this, key)
    }

    fn windows(&self) -> Vec<Duration> {
        (**self).windows()
    }

    fn policy_limits(&self, key: &Q, v: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        (**self).policy_limits(key, v, out)
    }
}
