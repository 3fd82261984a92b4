//! [`ClusterLimiter`]: a per-key limit across every node that names the
//! same Redis and namespace, granted locally from leases.

use super::config::ClusterLimiterBuilder;
use super::driver::Drivers;
use super::future::GrantFuture;
use super::grant::Grant;
use super::remote::Shared;
use super::stats::LeaseStats;
use crate::error::ClusterError;
use crate::health::Health;
use crate::key::RedisKey;
use crate::timeline::{ServerTime, WallClock};
use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use stripecount::keyed::KeyRef;
use stripecount::{Clock, Quota, Timestamp};

/// A per-key [`Quota`] shared by every node that names the same Redis and
/// namespace: the permits granted across all nodes are at most the limit
/// in any `slices` consecutive server slices, or, for a
/// [`strict`](Quota::strict) quota, in every span of the window (see the
/// crate docs for why, and for the bound on what it leaves unused).
///
/// A node leases batches of a key's permits from Redis and grants from its
/// lease locally: one load and one compare-and-swap, no lock, no
/// allocation, no I/O. A request the lease cannot serve goes to Redis
/// (returning unused permits and leasing a new batch, sized to this
/// node's rate of the key), or gets the
/// [`OutagePolicy`](crate::OutagePolicy) when Redis is unreachable.
///
/// Requests that go to Redis are batched: per group (one on a single
/// instance), one request is in flight, and it carries every key whose
/// requests queued meanwhile (up to
/// [`max_batch_keys`](ClusterLimiterBuilder::max_batch_keys)), so a flood
/// of new keys costs one round trip per batch, not per key; a lone request
/// goes straight out. A request waits on its thread
/// ([`decide`](Self::decide)) or as a future
/// ([`decide_async`](Self::decide_async)), never longer than the batch in
/// flight and its own; past
/// [`max_queue`](ClusterLimiterBuilder::max_queue) waiting requests of a
/// group, more are shed at once ([`Grant::Overloaded`]). The node runs one
/// thread per group, which sends batches no caller is sending and returns
/// unused permits.
///
/// ```no_run
/// use stripecount::Quota;
/// use stripecount_redis::{ClusterLimiter, Grant};
///
/// let url = "redis://127.0.0.1:6379/";
/// let limiter = ClusterLimiter::<String>::new(url, "api", Quota::per_second(100))?;
/// if limiter.try_acquire("client-42", 1) {
///     // serve
/// }
/// match limiter.decide("client-42", 5) {
///     Grant::Granted { slice_start } => println!("5 permits, counted from {slice_start:?}"),
///     other => println!("not now: {other:?}"),
/// }
/// # Ok::<(), stripecount_redis::ClusterError>(())
/// ```
pub struct ClusterLimiter<K: RedisKey, C: Clock = WallClock> {
    pub(super) inner: Arc<Shared<K, C>>,
    pub(super) drivers: Option<Drivers>,
}

impl<K: RedisKey> ClusterLimiter<K> {
    /// A limiter of `quota` per key for a node of namespace `namespace` on
    /// the Redis at `url` (e.g. `redis://127.0.0.1:6379/0`), with the
    /// default options
    /// ([`OutagePolicy::FailClosed`](crate::OutagePolicy::FailClosed),
    /// leases of at most 1024 permits). Every node of the namespace must use the same quota.
    ///
    /// The quota's limit is at least 1, its slice a whole number of
    /// milliseconds (Redis time is in milliseconds), at most a day, and
    /// there are at most [`MAX_CLUSTER_SLICES`](crate::MAX_CLUSTER_SLICES)
    /// slices. A lease lives within one slice, so shorter slices mean more
    /// round trips. Building needs no Redis: the limiter tries to connect
    /// once (a failure is recorded in its [`health`](Self::health), not
    /// returned). Errors only on an invalid configuration.
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterError, ClusterLimiter};
    /// use std::time::Duration;
    ///
    /// let url = "redis://127.0.0.1:1/"; // nothing listens: FailClosed refuses
    /// let quota = Quota::per_second(100).strict();
    /// let limiter = ClusterLimiter::<String>::new(url, "doc", quota)?;
    /// assert_eq!(limiter.quota(), quota);
    /// // A slice of 1.5 ms: not a whole number of milliseconds.
    /// let bad = Quota::per(10, Duration::from_millis(3)).slices(2);
    /// assert!(matches!(ClusterLimiter::<String>::new(url, "doc", bad), Err(ClusterError::Config(_))));
    /// # Ok::<(), ClusterError>(())
    /// ```
    pub fn new(url: &str, namespace: &str, quota: Quota) -> Result<Self, ClusterError> {
        Self::builder(url, namespace, quota).build()
    }

    /// The builder of a limiter like [`new`](Self::new)'s, for the options
    /// of [`ClusterLimiterBuilder`] (outage policy, lease size, margin,
    /// timeouts, backoff, sweep interval, refusal memo, clock); checked by
    /// its [`build`](ClusterLimiterBuilder::build), with the errors of
    /// `new`.
    pub fn builder(url: &str, namespace: &str, quota: Quota) -> ClusterLimiterBuilder<K> {
        ClusterLimiterBuilder::new(url, namespace, quota)
    }
}

impl<K: RedisKey, C: Clock> ClusterLimiter<K, C> {
    /// A builder on `clock`: [`ClusterLimiter::builder`] (defined on the
    /// wall-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](ClusterLimiterBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```no_run
    /// use stripecount::clock::CoarseClock;
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, WallClock};
    ///
    /// let clock = WallClock::over(CoarseClock::new());
    /// let lim = ClusterLimiter::<String, WallClock<CoarseClock>>::builder_with_clock(
    ///     "redis://127.0.0.1:6379/",
    ///     "api",
    ///     Quota::per_second(100),
    ///     clock,
    /// )
    /// .build()?;
    /// lim.decide("k", 1);
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn builder_with_clock(
        url: &str,
        namespace: &str,
        quota: Quota,
        clock: C,
    ) -> ClusterLimiterBuilder<K, C> {
        ClusterLimiter::builder(url, namespace, quota).clock(clock)
    }

    /// `n` permits of `key`, now, all or none; `n` 0 is always granted.
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let url = "redis://127.0.0.1:1/";
    /// let limiter = ClusterLimiter::<String>::builder(url, "doc", Quota::per_second(10))
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// assert!(limiter.try_acquire("alice", 3)); // admitted by FailOpen
    /// assert!(!limiter.try_acquire("alice", 11)); // more than the limit: never
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, n: u64) -> bool
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.try_acquire_at(key, self.now(), n)
    }

    /// `n` permits of `key` at node time `now` (a reading of
    /// [`now`](Self::now) taken just before: a lease grants only before its
    /// deadline on this clock). From a held lease this is one atomic
    /// compare-and-swap; otherwise a round trip or the outage policy (the
    /// clock is read again then).
    #[inline]
    pub fn try_acquire_at<Q>(&self, key: &Q, now: Timestamp, n: u64) -> bool
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        if n == 0 || self.inner.take(key, now.as_nanos(), n).is_some() {
            return true;
        }
        self.inner.miss(key, n).is_granted()
    }

    /// `n` permits of `key` now, with how the request was decided (for a
    /// grant, the start of the server slice it is counted in; for a
    /// refusal, when the window frees enough).
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let url = "redis://127.0.0.1:1/";
    /// let limiter = ClusterLimiter::<String>::builder(url, "doc", Quota::per_second(10))
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// assert_eq!(limiter.decide("alice", 1), Grant::OutageAdmitted);
    /// assert_eq!(limiter.decide("alice", 11), Grant::Refused { retry_after: None });
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn decide<Q>(&self, key: &Q, n: u64) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.decide_at(key, self.now(), n)
    }

    /// [`decide`](Self::decide) at node time `now` (as
    /// [`try_acquire_at`](Self::try_acquire_at)). `n` 0 is granted in the
    /// server slice of `now`, counting nothing.
    pub fn decide_at<Q>(&self, key: &Q, now: Timestamp, n: u64) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        match self.decide_from_lease_at(key, now, n) {
            Some(grant) => grant,
            None => self.inner.miss(key, n),
        }
    }

    /// [`decide`](Self::decide) without blocking the calling thread: the
    /// decision at once when this node's held lease or refusal memo makes
    /// it (the future is ready at its first poll, no allocation), else a
    /// future that resolves when the batch carrying the request is
    /// answered (the group's thread sends it; no thread waits for it), or
    /// at once with [`Grant::Overloaded`] when the group's queue is full.
    /// For async services (the tower layer uses it): any executor, no
    /// blocking pool.
    ///
    /// Dropping the future gives the request up: not sent if its batch has
    /// not gone yet; permits Redis leases for it after that stay in the
    /// key's lease on this node for its next request.
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// let url = "redis://127.0.0.1:1/"; // nothing listens
    /// let limiter = ClusterLimiter::<String>::builder(url, "doc", Quota::per_second(10))
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// let grant = futures_executor::block_on(limiter.decide_async("alice", 1));
    /// assert_eq!(grant, Grant::OutageAdmitted);
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn decide_async<Q>(&self, key: &Q, n: u64) -> GrantFuture
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        match self.decide_from_lease(key, n) {
            Some(grant) => GrantFuture::ready(grant),
            None => self.inner.miss_async(key, n),
        }
    }

    /// `n` permits of `key` from this node's held lease only: no I/O, no
    /// lock, never blocks. `Some` is the decision (a grant from the lease,
    /// a refusal of a request above the limit, or a refusal Redis made of
    /// the key until a retry time not yet reached, with the time left: see
    /// [`refusal_memo`](ClusterLimiterBuilder::refusal_memo)); `None` when
    /// the lease cannot serve it (no lease, used up, or its slice over),
    /// and [`decide`](Self::decide) would make a round trip. Nothing is
    /// taken on `None`.
    ///
    /// For callers that must not block the thread they run on,
    /// [`decide_async`](Self::decide_async) decides here first and waits
    /// for Redis without a thread when this returns `None`.
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// let url = "redis://127.0.0.1:1/"; // nothing listens
    /// let limiter = ClusterLimiter::<String>::builder(url, "doc", Quota::per_second(10))
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// // No lease held: the request needs a round trip.
    /// assert_eq!(limiter.decide_from_lease("alice", 1), None);
    /// // More than the limit never fits, lease or not.
    /// assert_eq!(limiter.decide_from_lease("alice", 11), Some(Grant::Refused { retry_after: None }));
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    #[inline]
    pub fn decide_from_lease<Q>(&self, key: &Q, n: u64) -> Option<Grant>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.decide_from_lease_at(key, self.now(), n)
    }

    /// [`decide_from_lease`](Self::decide_from_lease) at node time `now`
    /// (as [`try_acquire_at`](Self::try_acquire_at)).
    pub fn decide_from_lease_at<Q>(&self, key: &Q, now: Timestamp, n: u64) -> Option<Grant>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let i = &*self.inner;
        let now = now.as_nanos();
        if n == 0 {
            return Some(i.granted(i.time.server_at(now) / i.slice_ns));
        }
        if n > i.quota.limit() {
            return Some(Grant::Refused { retry_after: None });
        }
        match i.take(key, now, n) {
            Some(tag) => Some(i.granted(i.slice_of(tag, now))),
            None => i.memo_refused(key, now, n),
        }
    }

    /// The node clock now: the time the `*_at` methods take. (Grants report
    /// server slices, on the server timeline: [`time`](Self::time).)
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.inner.time.node_clock().now()
    }

    /// This node's estimate of the server's time: the timeline of
    /// [`Grant::Granted`]'s `slice_start`.
    pub fn time(&self) -> &ServerTime<C> {
        &self.inner.time
    }

    /// The quota every node of the namespace enforces together.
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// The limit per window.
    pub fn limit(&self) -> u64 {
        self.inner.quota.limit()
    }

    /// The length of a slice.
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.inner.slice_ns)
    }

    /// Returns the unused permits of leases whose deadline passed, now (each
    /// group's thread does this every `sweep_interval`), and forgets the refusals
    /// whose retry time passed; returns how many permits were revoked. On
    /// error they stay queued and go with the next request. A panic of the
    /// key type's own code is resumed after every group was swept (see
    /// [`LeaseStats::key_panics`](crate::LeaseStats::key_panics)).
    pub fn sweep(&self) -> Result<u64, ClusterError> {
        self.sweep_at(self.now())
    }

    /// [`sweep`](Self::sweep) of the leases whose deadline passed by node
    /// time `now`. A `now` later than the clock's revokes leases early (their
    /// permits are returned, never lost); an earlier one leaves them to
    /// the next sweep. (Likewise it forgets remembered refusals early:
    /// their keys' next requests ask Redis.)
    pub fn sweep_at(&self, now: Timestamp) -> Result<u64, ClusterError> {
        let i = &*self.inner;
        i.memo_prune(now.as_nanos());
        let mut panicked = None;
        let r = i.each_group(|s| i.sweep(s, false, now.as_nanos(), &mut panicked));
        resume_if(panicked);
        r
    }

    /// Revokes every lease this node holds and returns its unused permits
    /// (the next requests lease again); returns how many were revoked. A
    /// panic of the key type's own code is resumed after every group was
    /// swept, as in [`sweep`](Self::sweep).
    pub fn release_all(&self) -> Result<u64, ClusterError> {
        let i = &*self.inner;
        let mut panicked = None;
        let r = i.each_group(|s| i.sweep(s, true, i.node_now(), &mut panicked));
        resume_if(panicked);
        r
    }

    /// The link's state and last error; `batch_in_flight` says a request
    /// awaits its acknowledgement (the flush fields are 0).
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let url = "redis://127.0.0.1:1/";
    /// let limiter = ClusterLimiter::<String>::builder(url, "doc", Quota::per_second(10))
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// use stripecount_redis::LinkState;
    ///
    /// assert_eq!(limiter.health().state, LinkState::Disconnected);
    /// assert!(limiter.health().last_error.is_some_and(|e| e.is_transient()));
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn health(&self) -> Health {
        let i = &*self.inner;
        let mut h = i.link_health.health();
        h.batch_in_flight = i.in_flight.iter().any(|f| f.load(Ordering::Relaxed));
        h.time_uncertainty = i.time.uncertainty();
        h
    }

    /// Requests waiting for Redis on this node now, in every group's queue
    /// (not counting those of the batches in flight): what
    /// [`max_queue`](ClusterLimiterBuilder::max_queue) bounds, per group.
    /// A gauge for metrics: it stays near 0 unless new keys come faster
    /// than one batch a round trip serves them.
    pub fn waiting(&self) -> usize {
        self.inner.lanes.iter().map(|l| l.queued()).sum()
    }

    /// Counters of this node's round trips.
    ///
    /// ```
    /// use stripecount::Quota;
    /// use stripecount_redis::{ClusterLimiter, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let url = "redis://127.0.0.1:1/";
    /// let limiter = ClusterLimiter::<String>::builder(url, "doc", Quota::per_second(10))
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// limiter.try_acquire("alice", 1);
    /// assert_eq!(limiter.stats().outage_admitted, 1);
    /// assert_eq!(limiter.stats().leases, 0);
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn stats(&self) -> LeaseStats {
        self.inner.counters.snapshot()
    }

    /// The node's id in Redis (random per limiter).
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// Stops the groups' threads (requests still waiting for Redis are
    /// refused, [`Grant::OutageRefused`]) and returns every unused permit
    /// (one attempt).
    pub fn shutdown(mut self) -> Result<u64, ClusterError> {
        if let Some(mut d) = self.drivers.take() {
            d.stop();
        }
        self.release_all()
    }
}

impl<K: RedisKey, C: Clock> fmt::Debug for ClusterLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &*self.inner;
        f.debug_struct("ClusterLimiter")
            .field("node_id", &i.node_id)
            .field("quota", &i.quota)
            .field("policy", &i.policy)
            .finish_non_exhaustive()
    }
}

/// Resumes a panic a sweep caught, once the sweep is over.
fn resume_if(panicked: Option<Box<dyn std::any::Any + Send>>) {
    if let Some(p) = panicked {
        std::panic::resume_unwind(p);
    }
}
