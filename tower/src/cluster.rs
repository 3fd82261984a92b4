//! The layer on a fleet-wide limit (feature `redis`):
//! [`LayerLimiter`] for stripecount-redis's [`ClusterLimiter`].
//!
//! # Never blocking the executor, no thread per request
//! A `ClusterLimiter` grants most requests from a lease this node holds:
//! one compare-and-swap, no lock, no I/O ([`Check::Ready`]). A request the
//! lease cannot serve needs Redis: [`ClusterLimiter::decide_async`] queues
//! it in its group's batch and [`ClusterPending`] awaits the batch's reply,
//! which the limiter's own thread for that group sends and files. No
//! executor thread blocks and no thread is taken per waiting request (a
//! flood of new keys costs one batch per round trip, not a blocking-pool
//! thread per request). Dropping the future (a client gone) gives the
//! request up: not sent if its batch has not gone yet, and permits leased
//! for it after that stay in this node's lease for the key's next request.
//!
//! # The fields
//! A fleet-wide grant does not say how many permits the key has left
//! across the fleet, so a granted response carries `RateLimit-Policy`
//! only (with `fields_on_grant`); a refusal carries `RateLimit` with
//! `r=0` and `t` when Redis said when the request would fit. An outage
//! refused by the limiter's `OutagePolicy` is a `503`
//! ([`Refusal::Unavailable`](crate::Refusal::Unavailable)); an outage
//! admitted by it is a grant. A request shed because the node's queue of
//! requests waiting for Redis is full
//! ([`Grant::Overloaded`](stripecount_redis::Grant::Overloaded)) is a `503`
//! with `Retry-After`.

use crate::limit::{Check, LayerLimiter, Verdict};
use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use stripecount::keyed::KeyRef;
use stripecount::limiter::MAX_LIMITS;
use stripecount::{Clock, Denied};
use stripecount_redis::{ClusterLimiter, Grant, GrantFuture, RedisKey};

/// A decision of a [`ClusterLimiter`] that waits for Redis: the limiter's
/// [`GrantFuture`], read as a [`Verdict`]. Runtime-agnostic (the limiter's
/// thread wakes it).
#[derive(Debug)]
pub struct ClusterPending {
    grant: GrantFuture,
    limit: u64,
}

impl Future for ClusterPending {
    type Output = Verdict;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Verdict> {
        let limit = self.limit;
        Pin::new(&mut self.grant)
            .poll(cx)
            .map(|grant| verdict(grant, limit))
    }
}

fn verdict(grant: Grant, limit: u64) -> Verdict {
    match grant {
        Grant::Granted { .. } | Grant::OutageAdmitted => Verdict::granted(0, limit, None, None),
        Grant::Refused { retry_after } => {
            Verdict::refused(0, limit, Denied::Exhausted, retry_after)
        }
        Grant::OutageRefused => Verdict::unavailable(limit),
        Grant::Overloaded { retry_after } => Verdict::overloaded(limit, retry_after),
        // Grant is non-exhaustive: an outcome this layer does not know is
        // not a grant.
        _ => Verdict::unavailable(limit),
    }
}

impl<K, C, Q> LayerLimiter<Q> for ClusterLimiter<K, C>
where
    K: RedisKey + Borrow<Q>,
    C: Clock,
    Q: KeyRef<K> + Hash + Eq + ?Sized,
{
    type Pending = ClusterPending;

    #[inline]
    fn check(this: &Arc<Self>, key: &Q) -> Check<ClusterPending> {
        let limit = this.limit();
        if let Some(grant) = this.decide_from_lease(key, 1) {
            return Check::Ready(verdict(grant, limit));
        }
        let grant = this.decide_async(key, 1);
        Check::Pending(ClusterPending { grant, limit })
    }

    fn windows(&self) -> Vec<Duration> {
        vec![self.quota().window()]
    }

    fn policy_limits(&self, _: &Q, _: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        out[0] = self.limit();
        1
    }
}
