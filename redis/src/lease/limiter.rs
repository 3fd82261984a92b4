//! [`ClusterLimiter`]: a per-key limit across every node that names the
//! same Redis and namespace, granted locally from leases.

use super::config::{LimiterBuilder, OutagePolicy};
use super::grant::Grant;
use super::remote::{Sender, Shared, TimeRef};
use super::script::{LeaseNames, LeaseShape, LEASE};
use super::stats::{LeaseCounters, LeaseStats};
use crate::error::ClusterError;
use crate::flusher::Flusher;
use crate::health::{Counters, Health};
use crate::key::RedisKey;
use crate::link::Link;
use crate::script::Lua;
use crate::sync::lock;
use crate::timeline::{ServerTime, WallClock};
use scc::HashIndex;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount::{Clock, KeyRef, KeyedLimiter};

/// A per-key limit of `limit` permits per sliding window, shared by every
/// node that names the same Redis and namespace: in every window, the
/// permits granted across all nodes are at most the limit (see the crate
/// docs for why, and for the bound on what it leaves unused).
///
/// A node leases batches of a key's permits from Redis and grants from its
/// lease locally: one load and one compare-and-swap, no lock, no
/// allocation, no I/O. A request the lease cannot serve makes one round
/// trip (returning unused permits and leasing a new batch, sized to this
/// node's rate of the key), or gets the [`OutagePolicy`] when Redis is
/// unreachable.
///
/// ```no_run
/// use stripecount_redis::{ClusterLimiter, Grant};
/// use std::time::Duration;
///
/// let limiter = ClusterLimiter::<String>::builder("redis://127.0.0.1:6379/", "api", 100)
///     .window(Duration::from_secs(1), 10)
///     .build()?;
/// if limiter.try_acquire("client-42") {
///     // serve
/// }
/// match limiter.decide("client-42", 5) {
///     Grant::Granted { slice } => println!("5 permits of server slice {slice}"),
///     other => println!("not now: {other:?}"),
/// }
/// # Ok::<(), stripecount_redis::ClusterError>(())
/// ```
pub struct ClusterLimiter<K: RedisKey, C: Clock = WallClock> {
    inner: Arc<Shared<K, C>>,
    sweeper: Option<Flusher>,
}

impl<K: RedisKey> ClusterLimiter<K> {
    /// A builder for a limiter of `limit` permits per window, for a node of
    /// namespace `namespace` on the Redis at `url`.
    pub fn builder(url: &str, namespace: &str, limit: u64) -> LimiterBuilder<K> {
        LimiterBuilder::new(url, namespace, limit)
    }
}

impl<K: RedisKey, C: Clock> ClusterLimiter<K, C> {
    pub(crate) fn from_builder(b: LimiterBuilder<K, C>) -> Result<Self, ClusterError> {
        let slice = b.window / b.slices as u32;
        let slice_ns = u64::try_from(slice.as_nanos())
            .map_err(|_| ClusterError::Config("the slice is too long".into()))?;
        let slice_ms = slice_ns / 1_000_000;
        let time = Arc::new(ServerTime::new(b.clock));
        let local = match b.policy {
            OutagePolicy::LocalShare { expected_nodes } => Some(KeyedLimiter::with_clock(
                (b.limit / expected_nodes).max(1),
                b.window,
                b.slices,
                TimeRef(Arc::clone(&time)),
            )?),
            _ => None,
        };
        let node_id = format!("{:032x}", rand::random::<u128>());
        let link = Link::new(&b.url, &b.link)?;
        let inner = Arc::new(Shared {
            words: HashIndex::new(),
            time,
            slices: b.slices as u64,
            slice_ns,
            limit: b.limit,
            max_batch: b.max_batch,
            margin_ns: u64::try_from(b.margin.as_nanos()).unwrap_or(u64::MAX),
            policy: b.policy,
            local,
            names: LeaseNames::new(&b.namespace, &node_id),
            shape: LeaseShape {
                slices: b.slices as u64,
                slice_ms,
                limit: b.limit,
                record_ttl_ms: slice_ms * (b.slices as u64 + 1) + 300_000,
            },
            lua: Lua::new(LEASE),
            node_id,
            sender: Mutex::new(Sender {
                link,
                seq: 0,
                outbox: None,
                held: HashMap::new(),
                returns: Vec::new(),
                turn_at: None,
            }),
            link_health: Counters::new(),
            counters: LeaseCounters::default(),
            in_flight: AtomicBool::new(false),
        });
        {
            let mut s = lock(&inner.sender);
            match s.link.ensure_sampled(&inner.time) {
                Ok(_) => {
                    inner.link_health.up();
                    crate::health::bump(&inner.counters.connects, 1);
                }
                Err(e) => {
                    inner.link_health.down(&e);
                    s.link.backoff.failed(std::time::Instant::now());
                }
            }
        }
        let shared = Arc::clone(&inner);
        let sweeper = Flusher::spawn("stripecount-redis-sweeper", b.sweep_interval, move || {
            shared.tick()
        })
        .map_err(|e| ClusterError::Config(format!("no sweeper thread: {e}")))?;
        Ok(ClusterLimiter {
            inner,
            sweeper: Some(sweeper),
        })
    }

    /// One permit of `key`, now.
    ///
    /// ```no_run
    /// # let limiter = stripecount_redis::ClusterLimiter::<String>::builder("redis://127.0.0.1:6379/", "api", 10).build()?;
    /// if !limiter.try_acquire("alice") {
    ///     // 429
    /// }
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.try_acquire_at(key, self.now(), 1)
    }

    /// `n` permits of `key`, now, all or none.
    ///
    /// ```
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let limiter = ClusterLimiter::<String>::builder("redis://127.0.0.1:1/", "doc", 10)
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// assert!(limiter.try_acquire_n("alice", 3)); // admitted by FailOpen
    /// assert!(!limiter.try_acquire_n("alice", 11)); // more than the limit: never
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    #[inline]
    pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> bool
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
    pub fn try_acquire_at<Q>(&self, key: &Q, now: u64, n: u64) -> bool
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        if n == 0 || self.inner.take(key, now, n).is_some() {
            return true;
        }
        self.inner.miss(key, n).is_granted()
    }

    /// `n` permits of `key` now, with how the request was decided (for a
    /// grant, the server slice it is counted in).
    ///
    /// ```
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let limiter = ClusterLimiter::<String>::builder("redis://127.0.0.1:1/", "doc", 10)
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
    /// [`try_acquire_at`](Self::try_acquire_at)).
    pub fn decide_at<Q>(&self, key: &Q, now: u64, n: u64) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let i = &*self.inner;
        if n == 0 {
            return Grant::Granted {
                slice: i.time.now() / i.slice_ns,
            };
        }
        match i.take(key, now, n) {
            Some(tag) => Grant::Granted {
                slice: i.slice_of(tag),
            },
            None => i.miss(key, n),
        }
    }

    /// The node clock now (the time [`try_acquire_at`](Self::try_acquire_at)
    /// takes).
    #[inline]
    pub fn now(&self) -> u64 {
        self.inner.node_now()
    }

    /// This node's estimate of the server's time (for reading slices).
    pub fn time(&self) -> &ServerTime<C> {
        &self.inner.time
    }

    /// The limit per window.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// The length of a slice.
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.inner.slice_ns)
    }

    /// Returns the unused permits of leases whose deadline passed, now (the
    /// sweeper does this every `sweep_interval`); returns how many were
    /// revoked. On error they stay queued and go with the next request.
    pub fn sweep(&self) -> Result<u64, ClusterError> {
        let i = &*self.inner;
        let mut s = lock(&i.sender);
        i.sweep(&mut s, false)
    }

    /// Revokes every lease this node holds and returns its unused permits
    /// (the next requests lease again); returns how many were revoked.
    pub fn release_all(&self) -> Result<u64, ClusterError> {
        let i = &*self.inner;
        let mut s = lock(&i.sender);
        i.sweep(&mut s, true)
    }

    /// The link's state and last error; `batch_in_flight` says a request
    /// awaits its acknowledgement (the flush fields are 0).
    ///
    /// ```
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let limiter = ClusterLimiter::<String>::builder("redis://127.0.0.1:1/", "doc", 10)
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
        h.batch_in_flight = i.in_flight.load(Ordering::Relaxed);
        h.time_uncertainty = i.time.uncertainty().map(Duration::from_nanos);
        h
    }

    /// Counters of this node's round trips.
    ///
    /// ```
    /// use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: Redis is unreachable.
    /// let limiter = ClusterLimiter::<String>::builder("redis://127.0.0.1:1/", "doc", 10)
    ///     .outage(OutagePolicy::FailOpen)
    ///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
    ///     .build()?;
    /// limiter.try_acquire("alice");
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

    /// Stops the sweeper and returns every unused permit (one attempt).
    pub fn shutdown(mut self) -> Result<u64, ClusterError> {
        if let Some(mut f) = self.sweeper.take() {
            f.stop();
        }
        self.release_all()
    }
}

impl<K: RedisKey, C: Clock> fmt::Debug for ClusterLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &*self.inner;
        f.debug_struct("ClusterLimiter")
            .field("node_id", &i.node_id)
            .field("limit", &i.limit)
            .field("slices", &i.slices)
            .field("slice", &Duration::from_nanos(i.slice_ns))
            .field("policy", &i.policy)
            .finish_non_exhaustive()
    }
}
