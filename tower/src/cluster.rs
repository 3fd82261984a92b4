//! The layer on a fleet-wide limit (feature `redis`):
//! [`LayerLimiter`] for stripecount-redis's [`ClusterLimiter`].
//!
//! # Never blocking the executor
//! A `ClusterLimiter` grants most requests from a lease this node holds:
//! [`ClusterLimiter::decide_from_lease`], one compare-and-swap, no lock,
//! no I/O. That is the whole of [`LayerLimiter::check`] on a held lease:
//! the layer stays lock-free there. A request the lease cannot serve needs
//! a round trip (return unused permits, lease a new batch), made by the
//! limiter's blocking client: it runs on tokio's blocking pool
//! (`spawn_blocking`), never on an executor thread, and the request waits
//! for it in [`ClusterPending`]. Dropping that future (a client gone)
//! lets the round trip finish: what it leased stays this node's lease for
//! the next request, and what it granted was this request's (counted,
//! never lost or doubled; the limiter's own guarantees).
//!
//! # The fields
//! A fleet-wide grant does not say how many permits the key has left
//! across the fleet, so a granted response carries `RateLimit-Policy`
//! only (with `fields_on_grant`); a refusal carries `RateLimit` with
//! `r=0` and `t` when Redis said when the request would fit. An outage
//! refused by the limiter's `OutagePolicy` is a `503`
//! ([`Refusal::Unavailable`](crate::Refusal::Unavailable)); an outage
//! admitted by it is a grant.

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
use stripecount_redis::{ClusterLimiter, Grant, RedisKey};
use tokio::task::JoinHandle;

/// A decision of a [`ClusterLimiter`] that needed a round trip, made on
/// tokio's blocking pool. Needs a tokio runtime (the one serving the
/// requests).
#[derive(Debug)]
pub struct ClusterPending {
    join: JoinHandle<Grant>,
    limit: u64,
}

impl Future for ClusterPending {
    type Output = Verdict;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Verdict> {
        let limit = self.limit;
        Poll::Ready(match std::task::ready!(Pin::new(&mut self.join).poll(cx)) {
            Ok(grant) => verdict(grant, limit),
            // The decision panicked or the runtime is shutting down: no
            // decision, so no grant.
            Err(_) => Verdict::unavailable(limit),
        })
    }
}

fn verdict(grant: Grant, limit: u64) -> Verdict {
    match grant {
        Grant::Granted { .. } | Grant::OutageAdmitted => Verdict::granted(0, limit, None, None),
        Grant::Refused { retry_after } => {
            Verdict::refused(0, limit, Denied::Exhausted, retry_after)
        }
        Grant::OutageRefused => Verdict::unavailable(limit),
        // Grant is non-exhaustive: an outcome this layer does not know is
        // not a grant.
        _ => Verdict::unavailable(limit),
    }
}

impl<K, C, Q> LayerLimiter<Q> for ClusterLimiter<K, C>
where
    K: RedisKey + Borrow<Q>,
    C: Clock,
    Q: KeyRef<K> + Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    type Pending = ClusterPending;

    #[inline]
    fn check(this: &Arc<Self>, key: &Q) -> Check<ClusterPending> {
        let limit = this.limit();
        if let Some(grant) = this.decide_from_lease(key, 1) {
            return Check::Ready(verdict(grant, limit));
        }
        let (lim, key) = (Arc::clone(this), key.to_owned());
        let join = tokio::task::spawn_blocking(move || lim.decide::<K>(&key, 1));
        Check::Pending(ClusterPending { join, limit })
    }

    fn windows(&self) -> Vec<Duration> {
        vec![self.quota().window()]
    }

    fn policy_limits(&self, _: &Q, _: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        out[0] = self.limit();
        1
    }
}
