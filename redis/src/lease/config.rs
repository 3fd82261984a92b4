//! [`ClusterLimiterBuilder`]: a cluster limiter's configuration, and the
//! [`OutagePolicy`] it applies while Redis is unreachable.

use super::limiter::ClusterLimiter;
use super::word::MAX_LEASE;

/// The most keys one request to Redis may lease
/// ([`ClusterLimiterBuilder::max_batch_keys`]).
pub const MAX_BATCH_KEYS: usize = 4096;
use crate::config::MAX_CLUSTER_SLICES;
use crate::error::ClusterError;
use crate::group::ClusterOptions;
use crate::key::RedisKey;
use crate::link::LinkConfig;
use crate::timeline::WallClock;
use std::marker::PhantomData;
use std::time::Duration;
use stripecount::{Clock, Quota};

/// What a [`ClusterLimiter`] does with a request its held leases cannot
/// serve while Redis is unreachable (a connection, timeout or server
/// error, or the backoff after one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutagePolicy {
    /// Refuse (held leases still grant until their deadlines): the limit
    /// holds through any outage.
    FailClosed,
    /// Admit: availability first, the limit is not enforced meanwhile.
    FailOpen,
    /// Admit up to `limit / expected_nodes` (at least 1) per window on this
    /// node, by a local [`KeyedLimiter`](stripecount::KeyedLimiter) of the
    /// same quota (window, slices, strictness) on the server timeline: the
    /// cluster admits about the limit if `expected_nodes` nodes share it
    /// (more if more nodes are cut off, on top of the permits granted
    /// through Redis in the same window).
    LocalShare {
        /// The nodes expected to share the limit (at least 1).
        expected_nodes: u64,
    },
}

/// What a request gets when its group's queue of requests waiting for
/// Redis is full ([`ClusterLimiterBuilder::max_queue`]): it is shed at
/// once, before any round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// [`Grant::Overloaded`](crate::Grant::Overloaded) with the time this
    /// node expects to need to drain the queue (the default): not
    /// decided, nothing counted; a tower layer answers `503` with
    /// `Retry-After`.
    Overloaded,
    /// The [`OutagePolicy`] decides, as if Redis were unreachable
    /// ([`Grant::OutageAdmitted`](crate::Grant::OutageAdmitted) or
    /// [`Grant::OutageRefused`](crate::Grant::OutageRefused)).
    Outage,
}

/// Builds a [`ClusterLimiter`] ([`ClusterLimiter::builder`]). Every node of
/// a namespace must use the same quota: limit, window, slices and
/// strictness (checked by Redis: a node that differs gets
/// [`ClusterError::ShapeMismatch`], and its requests the outage policy).
///
/// ```
/// use stripecount::Quota;
/// use stripecount_redis::{ClusterLimiter, OutagePolicy};
/// use std::time::Duration;
///
/// // Nothing listens on port 1: building works (the failure is recorded in
/// // the health), requests get the outage policy.
/// let quota = Quota::per_second(100).slices(4);
/// let limiter = ClusterLimiter::<String>::builder("redis://127.0.0.1:1/", "doc", quota)
///     .outage(OutagePolicy::LocalShare { expected_nodes: 4 })
///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
///     .build()?;
/// let admitted = (0..50).filter(|_| limiter.try_acquire("alice", 1)).count();
/// assert_eq!(admitted, 25); // 100 / 4 nodes, locally
/// # Ok::<(), stripecount_redis::ClusterError>(())
/// ```
///
/// # Other clocks
/// [`ClusterLimiter::builder`](crate::ClusterLimiter::builder) makes a builder on the wall clock
/// and [`clock`](ClusterLimiterBuilder::clock) changes its clock (and type). For a type named with
/// another clock (`ClusterLimiter::<String, WallClock<CoarseClock>>`), or code generic over the
/// clock, start from
/// [`ClusterLimiter::builder_with_clock`](crate::ClusterLimiter::builder_with_clock): `builder`
/// itself is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build`"]
pub struct ClusterLimiterBuilder<K, C = WallClock> {
    pub(crate) url: String,
    pub(crate) namespace: String,
    pub(crate) quota: Quota,
    pub(crate) policy: OutagePolicy,
    pub(crate) max_batch: u64,
    pub(crate) max_batch_keys: usize,
    pub(crate) max_queue: usize,
    pub(crate) shed: Shed,
    pub(crate) margin: Duration,
    pub(crate) link: LinkConfig,
    pub(crate) sweep_interval: Duration,
    pub(crate) refusal_memo: bool,
    pub(crate) renew_early: bool,
    pub(crate) cluster: ClusterOptions,
    pub(crate) clock: C,
    _k: PhantomData<fn() -> K>,
}

impl<K: RedisKey> ClusterLimiterBuilder<K> {
    pub(crate) fn new(url: &str, namespace: &str, quota: Quota) -> Self {
        ClusterLimiterBuilder {
            url: url.to_owned(),
            namespace: namespace.to_owned(),
            quota,
            policy: OutagePolicy::FailClosed,
            max_batch: 1024,
            max_batch_keys: 256,
            max_queue: 4096,
            shed: Shed::Overloaded,
            margin: Duration::from_millis(1),
            link: LinkConfig::default(),
            sweep_interval: Duration::from_millis(100),
            refusal_memo: true,
            renew_early: false,
            cluster: ClusterOptions::default(),
            clock: WallClock::new(),
            _k: PhantomData,
        }
    }
}

impl<K: RedisKey, C: Clock> ClusterLimiterBuilder<K, C> {
    /// What to do while Redis is unreachable (default
    /// [`OutagePolicy::FailClosed`]).
    pub fn outage(mut self, policy: OutagePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The most permits one lease asks for (default 1024, at most
    /// [`MAX_LEASE`]): the bound on what one node holds unused, and so on
    /// the under-admission (see the crate docs).
    pub fn max_batch(mut self, permits: u64) -> Self {
        self.max_batch = permits;
        self
    }

    /// The most keys one request to Redis leases (default 256, at most
    /// [`MAX_BATCH_KEYS`](crate::MAX_BATCH_KEYS)). A request that misses
    /// its lease while its group's previous request is in flight waits for
    /// the next one, which carries every key queued meanwhile up to this
    /// many (each key once, whatever its requests); more wait for the one
    /// after. Larger batches cost Redis less a key (its fixed work per
    /// call is paid once) and make each round trip longer.
    pub fn max_batch_keys(mut self, keys: usize) -> Self {
        self.max_batch_keys = keys;
        self
    }

    /// The most requests of one group waiting for Redis on this node
    /// (default 4096): a request that would be one more is shed at once
    /// (see [`shed`](Self::shed)), so a flood of new keys faster than Redis
    /// answers them gets a quick answer instead of an ever longer wait.
    /// Requests a held lease serves never wait.
    pub fn max_queue(mut self, requests: usize) -> Self {
        self.max_queue = requests;
        self
    }

    /// What a request shed by a full queue gets (default
    /// [`Shed::Overloaded`]).
    pub fn shed(mut self, shed: Shed) -> Self {
        self.shed = shed;
        self
    }

    /// How long before its estimate of a slice's end (already less the
    /// bound on its error against server time) a node stops granting from
    /// that slice's lease (default 1 ms).
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The connect timeout and the per-request I/O timeout (defaults 500 ms
    /// and 1 s): how long a request that misses its lease may wait.
    pub fn timeouts(mut self, connect: Duration, io: Duration) -> Self {
        self.link.connect_timeout = connect;
        self.link.io_timeout = io;
        self
    }

    /// The backoff between failed attempts: from `min`, doubling up to
    /// `max`, ±25% jitter (defaults 50 ms and 5 s). While it runs, a
    /// request that misses its lease gets the outage policy at once.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.link.backoff = (min, max);
        self
    }

    /// How often each group's thread returns the unused permits of leases
    /// whose slice ended (default 100 ms).
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = every;
        self
    }

    /// Whether a key Redis refused is refused locally until its retry time
    /// (default on). When Redis refuses a request with a retry time (the
    /// window has no room until its oldest slices leave it), the node
    /// remembers it: until then, the key's requests of at least as many
    /// permits are refused without a round trip and without the sender
    /// lock, with the time left
    /// ([`Grant::Refused`](crate::Grant::Refused)), also by
    /// [`decide_from_lease`](ClusterLimiter::decide_from_lease). This saves
    /// a round trip per refused request (a flood of requests for a refused
    /// key loads neither Redis nor the other keys' misses), and it never
    /// admits more. The cost: until the retry time, permits other nodes
    /// return for that key are not seen by this node, which under-admits
    /// the key at most until the time Redis said the request would fit
    /// anyway. Entries expire at their retry time and the sweeper drops
    /// them. Only Redis's refusals are remembered, never the outage
    /// policy's; while Redis is unreachable, a remembered refusal still
    /// refuses until its time (it is Redis's last word on the key, as a
    /// held lease still grants). Off: every refused request makes a round
    /// trip.
    pub fn refusal_memo(mut self, on: bool) -> Self {
        self.refusal_memo = on;
        self
    }

    /// Whether a lease running low asks for the next one before it runs out
    /// (default off). On: a lease of at least 8 permits marks a quarter of
    /// them, and the grant that takes it below the mark queues a renewal
    /// (in the warm keys' queue, ahead of new keys) while the lease still
    /// grants; the renewal's lease replaces it, and what it still held is
    /// returned. So a busy key's requests do not wait for Redis when its
    /// lease runs out, only when its slice ends (then every lease ends).
    /// The cost: a renewal a lease, and up to a quarter of a lease returned
    /// to Redis a step later than it would have been used. Counted in
    /// [`LeaseStats::renewals`](crate::LeaseStats::renewals). Off: a lease
    /// is renewed by the request that finds it empty.
    pub fn renew_early(mut self, on: bool) -> Self {
        self.renew_early = on;
        self
    }

    /// Keeps the limits on a Redis Cluster, like
    /// [`ClusterWindowsBuilder::redis_cluster`](crate::ClusterWindowsBuilder::redis_cluster):
    /// every key's counts, and this node's exactly-once record for the
    /// keys of its group, carry the hash tag of one of `groups` groups, so
    /// every lease touches one slot. Each group has its own sequence,
    /// connection and queued returns; a miss locks only its key's group.
    /// Every node of the namespace must use the same number (checked).
    /// Without this call, a build against a Redis Cluster node fails with
    /// [`ClusterError::ClusterNode`](crate::ClusterError::ClusterNode).
    pub fn redis_cluster(mut self, groups: usize) -> Self {
        self.cluster.groups = Some(groups);
        self
    }

    /// More nodes of the Redis Cluster to ask where a group's slot went
    /// when its master cannot be reached (see
    /// [`ClusterWindowsBuilder::seeds`](crate::ClusterWindowsBuilder::seeds):
    /// the masters redirections named are asked too).
    pub fn seeds<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.cluster.set_seeds(urls);
        self
    }

    /// Uses a lease only once `replicas` replicas of its master have it
    /// (`WAIT replicas timeout` after each request; default: off). Redis
    /// replicates asynchronously: without this, a lease a master granted
    /// and then lost in a failover (it died before its replica had it) is
    /// not counted by the promoted replica, which may lease the same
    /// permits again: up to those permits over the limit in that window.
    /// With it, a request short of replicas after `timeout` is not used
    /// (the caller gets the [`OutagePolicy`]; counted in
    /// [`LeaseStats::not_replicated`](crate::LeaseStats::not_replicated))
    /// and is resent by the next miss: the limit holds through a failover
    /// unless all `replicas` lose the lease too. Costs a round trip a miss
    /// (plus the replication delay). `timeout` must be below the I/O
    /// timeout.
    ///
    /// A master with fewer than `replicas` replicas connected could
    /// acknowledge no lease: `build` fails with
    /// [`ClusterError::TooFewReplicas`](crate::ClusterError::TooFewReplicas)
    /// if a group's master has too few when the limiter is built, and
    /// later such a master's groups get the outage policy and are counted
    /// in [`Health::replicas_short`](crate::Health::replicas_short) until
    /// enough replicas are connected. After a failover the promoted
    /// replica has no replica of its own until one rejoins it: its groups'
    /// leases are not used meanwhile (`TooFewReplicas` on a new
    /// connection, `NotReplicated` on one open before). A spare replica a
    /// master (two, with `replicas` 1) avoids that pause.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.cluster.durability = Some((replicas, timeout));
        self
    }

    /// The node clock, read as Unix time (default [`WallClock`]). Lease
    /// deadlines are measured on it from each lease's round trip, so its
    /// offset from server time does not matter; only its rate (within
    /// [`DRIFT_PPM`](crate::DRIFT_PPM)).
    pub fn clock<C2: Clock>(self, clock: C2) -> ClusterLimiterBuilder<K, C2> {
        ClusterLimiterBuilder {
            url: self.url,
            namespace: self.namespace,
            quota: self.quota,
            policy: self.policy,
            max_batch: self.max_batch,
            max_batch_keys: self.max_batch_keys,
            max_queue: self.max_queue,
            shed: self.shed,
            margin: self.margin,
            link: self.link,
            sweep_interval: self.sweep_interval,
            refusal_memo: self.refusal_memo,
            renew_early: self.renew_early,
            cluster: self.cluster,
            clock,
            _k: PhantomData,
        }
    }

    /// Validates the configuration and builds the limiter: tries to connect
    /// and sample the server's time once (a failure is recorded in its
    /// health, not returned) and starts a thread for each group (its
    /// batches and its sweeps). Errors only on an
    /// invalid configuration.
    pub fn build(self) -> Result<ClusterLimiter<K, C>, ClusterError> {
        self.validate()?;
        ClusterLimiter::from_builder(self)
    }

    pub(crate) fn validate(&self) -> Result<(), ClusterError> {
        let bad = |m: String| Err(ClusterError::Config(m));
        self.cluster
            .validate(&self.namespace, self.link.io_timeout)
            .or_else(bad)?;
        if self.namespace.is_empty() {
            return bad("the namespace is empty".into());
        }
        let q = &self.quota;
        if q.limit() == 0 {
            return bad("the limit is 0".into());
        }
        let (window, slices) = (q.window(), q.slice_count());
        if slices == 0 || slices > MAX_CLUSTER_SLICES {
            return bad(format!(
                "{slices} slices: a cluster window has 1 to {MAX_CLUSTER_SLICES}"
            ));
        }
        q.validate()?;
        let slice = q.slice_len();
        if slice.is_zero()
            || !slice.as_nanos().is_multiple_of(1_000_000)
            || slice > Duration::from_secs(86_400)
        {
            return bad(format!(
                "a window of {window:?} in {slices} slices: the slice must be a whole number of milliseconds, at most a day"
            ));
        }
        if self.max_batch == 0 || self.max_batch > MAX_LEASE {
            return bad(format!("max_batch must be 1 to {MAX_LEASE}"));
        }
        if self.max_batch_keys == 0 || self.max_batch_keys > MAX_BATCH_KEYS {
            return bad(format!("max_batch_keys must be 1 to {MAX_BATCH_KEYS}"));
        }
        if self.max_queue == 0 {
            return bad("max_queue is 0".into());
        }
        if let OutagePolicy::LocalShare { expected_nodes: 0 } = self.policy {
            return bad("LocalShare needs expected_nodes >= 1".into());
        }
        self.link.validate().or_else(bad)?;
        if self.sweep_interval.is_zero() {
            return bad("the sweep interval is 0".into());
        }
        Ok(())
    }
}
