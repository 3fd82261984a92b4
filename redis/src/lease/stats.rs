//! [`LeaseStats`]: what a cluster limiter's round trips have done.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a [`ClusterLimiter`](crate::ClusterLimiter) since it was
/// built ([`stats`](crate::ClusterLimiter::stats)). Grants from held
/// leases are not counted (the hot path counts nothing); refusals by the
/// refusal memo are (`memo_refusals`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Requests to Redis acknowledged (leases and returns). A request
    /// leases every key queued for its group meanwhile: `leases +
    /// refusals` over this is the keys a round trip.
    pub round_trips: u64,
    /// Requests that failed (connection, timeout, server or protocol).
    pub errors: u64,
    /// Requests resent after a failure (same sequence).
    pub resends: u64,
    /// Redirections followed on a Redis Cluster (`MOVED`, `ASK`): the
    /// request was resent unchanged to the node named.
    pub redirects: u64,
    /// Requests not used because fewer replicas than asked had them in
    /// time (`wait_for_replicas`): resent by the next miss.
    pub not_replicated: u64,
    /// Resent requests Redis had applied already (their reply was lost):
    /// answered from its record, not applied again.
    pub replays: u64,
    /// Keys Redis leased permits of (at least one permit each).
    pub leases: u64,
    /// Permits leased.
    pub leased_permits: u64,
    /// Keys whose lease Redis refused (no room in the window).
    pub refusals: u64,
    /// Renewals asked
    /// ([`renew_early`](crate::ClusterLimiterBuilder::renew_early)): a
    /// grant took a lease below a quarter of what it held, and the key's
    /// next lease was asked while this one still granted.
    pub renewals: u64,
    /// Requests refused by the refusal memo: without a round trip, because
    /// Redis refused the key until a retry time not yet reached
    /// ([`refusal_memo`](crate::ClusterLimiterBuilder::refusal_memo)).
    pub memo_refusals: u64,
    /// Permits returned unused (acknowledged by Redis).
    pub returned_permits: u64,
    /// Requests shed because their group's queue of requests waiting for
    /// Redis was full ([`Grant::Overloaded`](crate::Grant::Overloaded), or
    /// the outage policy with [`Shed::Outage`](crate::Shed::Outage)).
    pub shed: u64,
    /// Requests decided by the outage policy, admitted.
    pub outage_admitted: u64,
    /// Requests decided by the outage policy, refused.
    pub outage_refused: u64,
    /// Connections opened.
    pub connects: u64,
    /// Panics of the key type's own code (`RedisKey::write_key`, `Hash`,
    /// `Eq`, `Clone`) caught by a sweep or by a batch: either goes on with
    /// the other keys. A sweep leaves that key's unused permits
    /// unreturned: they count against the window until their slice leaves
    /// it (never over the limit); the lanes' threads count such panics and
    /// go on; [`sweep`](crate::ClusterLimiter::sweep) and
    /// [`release_all`](crate::ClusterLimiter::release_all) resume the first
    /// once every group was swept. A batch returns the permits it could not
    /// hand over and resumes the panic on the thread of a request of that
    /// key still waiting (the others are asked again), or only counts it
    /// if the key's requests were all answered before it.
    pub key_panics: u64,
}

#[derive(Debug, Default)]
pub(crate) struct LeaseCounters {
    pub(crate) round_trips: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) resends: AtomicU64,
    pub(crate) redirects: AtomicU64,
    pub(crate) not_replicated: AtomicU64,
    pub(crate) replays: AtomicU64,
    pub(crate) leases: AtomicU64,
    pub(crate) leased_permits: AtomicU64,
    pub(crate) refusals: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) memo_refusals: AtomicU64,
    pub(crate) returned_permits: AtomicU64,
    pub(crate) shed: AtomicU64,
    pub(crate) outage_admitted: AtomicU64,
    pub(crate) outage_refused: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) key_panics: AtomicU64,
}

impl LeaseCounters {
    pub(crate) fn snapshot(&self) -> LeaseStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LeaseStats {
            round_trips: l(&self.round_trips),
            errors: l(&self.errors),
            resends: l(&self.resends),
            redirects: l(&self.redirects),
            not_replicated: l(&self.not_replicated),
            replays: l(&self.replays),
            leases: l(&self.leases),
            leased_permits: l(&self.leased_permits),
            refusals: l(&self.refusals),
            renewals: l(&self.renewals),
            memo_refusals: l(&self.memo_refusals),
            returned_permits: l(&self.returned_permits),
            shed: l(&self.shed),
            outage_admitted: l(&self.outage_admitted),
            outage_refused: l(&self.outage_refused),
            connects: l(&self.connects),
            key_panics: l(&self.key_panics),
        }
    }
}
