//! [`ClusterWindowsBuilder`]: a node's configuration, validated by
//! [`build`](ClusterWindowsBuilder::build).

use crate::error::ClusterError;
use crate::group::ClusterOptions;
use crate::key::RedisKey;
use crate::link::LinkConfig;
use crate::node::ClusterWindows;
use crate::timeline::WallClock;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use stripecount::Clock;

/// The most slices a cluster window may have (the flush script handles a
/// key's slices as Lua values on its stack).
pub const MAX_CLUSTER_SLICES: usize = 1024;

/// Called with each crossing this node reports: the key and its cluster
/// window sum after the batch that made it hot.
pub type HotCallback<K> = Arc<dyn Fn(&K, u64) + Send + Sync>;

/// Builds a [`ClusterWindows`] node ([`ClusterWindows::builder`]). Every
/// node of a namespace must use the same window and slice count (checked
/// by Redis: a node whose shape differs gets
/// [`ClusterError::ShapeMismatch`] from its flushes).
///
/// ```
/// use stripecount_redis::ClusterWindows;
/// use std::time::Duration;
///
/// // No Redis needed to build: the node connects when it flushes (here it
/// // tries once and records the failure in its health).
/// let minute = Duration::from_secs(60);
/// let node = ClusterWindows::<String>::builder("redis://127.0.0.1:1/", "doc", minute, 12)
///     .flush_interval(None) // explicit flushes only
///     .hot_threshold(1_000)
///     .timeouts(Duration::from_millis(50), Duration::from_millis(50))
///     .build()?;
/// assert!(node.add("alice", 2));
/// assert_eq!(node.sum("alice"), 2); // local, unflushed
/// assert!(node.flush().is_err()); // nothing listens on port 1: held, not lost
/// assert_eq!(node.sum("alice"), 2);
/// # Ok::<(), stripecount_redis::ClusterError>(())
/// ```
///
/// # Other clocks
/// [`ClusterWindows::builder`](crate::ClusterWindows::builder) makes a builder on the wall clock
/// and [`clock`](ClusterWindowsBuilder::clock) changes its clock (and type). For a type named with
/// another clock (`ClusterWindows::<String, WallClock<CoarseClock>>`), or code generic over the
/// clock, start from
/// [`ClusterWindows::builder_with_clock`](crate::ClusterWindows::builder_with_clock): `builder`
/// itself is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build`"]
pub struct ClusterWindowsBuilder<K, C = WallClock> {
    pub(crate) url: String,
    pub(crate) namespace: String,
    pub(crate) window: Duration,
    pub(crate) slices: usize,
    pub(crate) flush_interval: Option<Duration>,
    pub(crate) hot_threshold: Option<u64>,
    pub(crate) on_hot: Option<HotCallback<K>>,
    pub(crate) max_keys: Option<usize>,
    pub(crate) max_pending_keys: usize,
    pub(crate) max_batch_keys: usize,
    pub(crate) cluster: ClusterOptions,
    pub(crate) link: LinkConfig,
    pub(crate) clock: C,
    _k: PhantomData<fn() -> K>,
}

impl<K: RedisKey> ClusterWindowsBuilder<K> {
    pub(crate) fn new(url: &str, namespace: &str, window: Duration, slices: usize) -> Self {
        ClusterWindowsBuilder {
            url: url.to_owned(),
            namespace: namespace.to_owned(),
            window,
            slices,
            flush_interval: Some(Duration::from_millis(100)),
            hot_threshold: None,
            on_hot: None,
            max_keys: None,
            max_pending_keys: 1 << 20,
            max_batch_keys: 1024,
            cluster: ClusterOptions::default(),
            link: LinkConfig::default(),
            clock: WallClock::new(),
            _k: PhantomData,
        }
    }
}

impl<K: RedisKey, C: Clock> ClusterWindowsBuilder<K, C> {
    /// How often the background flusher flushes (default 100 ms); `None`
    /// starts no flusher (flush with [`ClusterWindows::flush`]). The
    /// interval plus both timeouts must fit in the window less one slice,
    /// so that the flusher takes every count from the local ring before
    /// the ring could reuse its slot. With explicit flushes only, the
    /// caller keeps that pace: an add opens a new slice by dropping the
    /// local slice a window older, for every key, with whatever it still
    /// holds untaken (not counted in `dropped_old`).
    pub fn flush_interval(mut self, every: Option<Duration>) -> Self {
        self.flush_interval = every;
        self
    }

    /// Detect cluster hot keys: a key whose cluster window sum reaches
    /// `threshold` (at least 1). Off by default.
    pub fn hot_threshold(mut self, threshold: u64) -> Self {
        self.hot_threshold = Some(threshold);
        self
    }

    /// Calls `f(key, sum)` once for each crossing this node reports, on the
    /// thread that flushed, after the flush and with no lock of the node
    /// held: `f` may use the node, flush included. Each crossing is
    /// reported by exactly one node of the cluster. A panic in `f` loses
    /// nothing: the background flusher catches it, counts it
    /// ([`Stats::callback_panics`](crate::Stats::callback_panics)) and goes
    /// on; [`flush`](crate::ClusterWindows::flush) resumes it in its caller
    /// after delivering the other crossings.
    pub fn on_hot_crossing(mut self, f: impl Fn(&K, u64) + Send + Sync + 'static) -> Self {
        self.on_hot = Some(Arc::new(f));
        self
    }

    /// Bounds the keys the local windows hold (see
    /// [`KeyedWindowsBuilder::max_keys`](stripecount::keyed::KeyedWindowsBuilder::max_keys)).
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = Some(n);
        self
    }

    /// Bounds the keys held for Redis while it is unreachable (default
    /// 2^20; on a cluster, split evenly over the groups); counts of further
    /// keys are dropped and counted
    /// ([`Stats::dropped_full`](crate::Stats::dropped_full)).
    pub fn max_pending_keys(mut self, n: usize) -> Self {
        self.max_pending_keys = n;
        self
    }

    /// Stores the namespace on a Redis Cluster: every Redis key carries the
    /// hash tag of one of `groups` groups (a key's group is the CRC16 of
    /// its bytes modulo `groups`), each group's keys, records and hot set
    /// in one slot, so that every script call touches one slot. The groups'
    /// slots are spread evenly over the 16,384 slots: use at least a few
    /// groups a master (16 for 3 to 5 masters; more groups spread the load
    /// more evenly, at one script call a group a flush). Each group is
    /// flushed over its own connection to the master of its slot,
    /// following `MOVED` and `ASK`. Every node of the namespace must use
    /// the same number (checked: `ShapeMismatch`). The URL is any node of
    /// the cluster; see [`seeds`](Self::seeds) for more. Without this
    /// call, a build against a Redis Cluster node fails with
    /// [`ClusterError::ClusterNode`](crate::ClusterError::ClusterNode)
    /// (`INFO cluster` on each new connection).
    ///
    /// ```no_run
    /// use stripecount_redis::ClusterWindows;
    /// use std::time::Duration;
    ///
    /// let node = ClusterWindows::<String>::builder("redis://10.0.0.1:6379/", "api", Duration::from_secs(10), 10)
    ///     .redis_cluster(16)
    ///     .seeds(["redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"])
    ///     .build()?;
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn redis_cluster(mut self, groups: usize) -> Self {
        self.cluster.groups = Some(groups);
        self
    }

    /// More nodes of the Redis Cluster (URLs like the builder's): a group
    /// whose master cannot be reached asks these in turn (after the
    /// builder's URL) where its slot went. The masters that `MOVED` or
    /// `ASK` sent any of the node's groups to are asked too (after these;
    /// they inherit the builder's URL's database, user, password and
    /// TLS), so a node built with one master's URL and no seeds still
    /// finds that master's replacement after a failover; seeds matter for
    /// a node whose builder's node is down before it met the others. Only
    /// with [`redis_cluster`](Self::redis_cluster).
    pub fn seeds<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.cluster.set_seeds(urls);
        self
    }

    /// Acknowledges a batch only once `replicas` replicas of its master have
    /// it (`WAIT replicas timeout` after each batch; default: off). Redis
    /// replicates asynchronously: without this, a batch a master applied
    /// and acknowledged is lost if the master dies before a replica has it
    /// and the replica is promoted. The node then learns of the loss at its
    /// next batch to the group (the record's sequence went back) and counts
    /// it in [`Stats::lost_batches`](crate::Stats::lost_batches) and
    /// [`Stats::lost_counts`](crate::Stats::lost_counts). With it, a batch
    /// short of replicas after `timeout` is held and resent
    /// ([`ClusterError::NotReplicated`], counted in
    /// [`Stats::not_replicated`](crate::Stats::not_replicated)): answered as
    /// a replay, or applied by a promoted replica that never had it; lost
    /// only if all `replicas` lose it too. Costs a round trip a batch (plus
    /// the replication delay). `timeout` must be below the I/O timeout.
    ///
    /// A master with fewer than `replicas` replicas connected could
    /// acknowledge nothing: `build` fails with
    /// [`ClusterError::TooFewReplicas`](crate::ClusterError::TooFewReplicas)
    /// if a group's master has too few when the node is built (`INFO
    /// replication`, on each new connection), and later such a master's
    /// groups are held (their batches stay pending, the flush fails with
    /// that error) and counted in
    /// [`Health::replicas_short`](crate::Health::replicas_short) until
    /// enough replicas are connected. After a failover the promoted
    /// replica has no replica of its own until one rejoins it (the old
    /// master restarted, say): its groups' batches are held meanwhile
    /// (`TooFewReplicas` on a new connection, `NotReplicated` on one open
    /// before). A spare replica a master (two, with `replicas` 1) avoids
    /// that pause.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.cluster.durability = Some((replicas, timeout));
        self
    }

    /// The most keys one flush round trip carries (default 1024): Redis
    /// runs a batch as one script, so this bounds how long it is busy.
    pub fn max_batch_keys(mut self, n: usize) -> Self {
        self.max_batch_keys = n;
        self
    }

    /// The connect timeout and the per-request I/O timeout (defaults 500
    /// ms and 1 s).
    pub fn timeouts(mut self, connect: Duration, io: Duration) -> Self {
        self.link.connect_timeout = connect;
        self.link.io_timeout = io;
        self
    }

    /// The flusher's backoff between failed attempts: from `min`, doubling
    /// up to `max`, ±25% jitter (defaults 50 ms and 5 s).
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.link.backoff = (min, max);
        self
    }

    /// The node clock, read as Unix time (default [`WallClock`]). Slices
    /// come from Redis time once sampled; this clock only measures the time
    /// since the sample (and stands in for Redis time before the first
    /// one).
    pub fn clock<C2: Clock>(self, clock: C2) -> ClusterWindowsBuilder<K, C2> {
        ClusterWindowsBuilder {
            url: self.url,
            namespace: self.namespace,
            window: self.window,
            slices: self.slices,
            flush_interval: self.flush_interval,
            hot_threshold: self.hot_threshold,
            on_hot: self.on_hot,
            max_keys: self.max_keys,
            max_pending_keys: self.max_pending_keys,
            max_batch_keys: self.max_batch_keys,
            cluster: self.cluster,
            link: self.link,
            clock,
            _k: PhantomData,
        }
    }

    /// Validates the configuration and builds the node: tries to connect
    /// and sample the server's time once (a failure is recorded in its
    /// [`health`](ClusterWindows::health), not returned), and starts the
    /// flusher. Errors only on an invalid configuration.
    pub fn build(self) -> Result<ClusterWindows<K, C>, ClusterError> {
        self.validate()?;
        ClusterWindows::from_builder(self)
    }

    pub(crate) fn validate(&self) -> Result<(), ClusterError> {
        let bad = |m: String| Err(ClusterError::Config(m));
        if self.namespace.is_empty() {
            return bad("the namespace is empty".into());
        }
        if self.slices == 0 || self.slices > MAX_CLUSTER_SLICES {
            return bad(format!(
                "{} slices: a cluster window has 1 to {MAX_CLUSTER_SLICES}",
                self.slices
            ));
        }
        let slice = self.window / self.slices as u32;
        if slice * self.slices as u32 != self.window
            || slice.is_zero()
            || !slice.as_nanos().is_multiple_of(1_000_000)
        {
            return bad(format!(
                "a window of {:?} in {} slices: the slice length must be a whole number of milliseconds",
                self.window, self.slices
            ));
        }
        self.cluster
            .validate(&self.namespace, self.link.io_timeout)
            .or_else(bad)?;
        if self.max_batch_keys == 0 {
            return bad("max_batch_keys is 0".into());
        }
        if self.hot_threshold == Some(0) {
            return bad("the hot threshold must be at least 1".into());
        }
        self.link.validate().or_else(bad)?;
        if let Some(every) = self.flush_interval {
            let slack = self.window - slice;
            // Checked: durations near `Duration::MAX` would overflow the sum.
            let needs = every
                .checked_add(self.link.connect_timeout)
                .and_then(|d| d.checked_add(self.link.io_timeout));
            let fits = matches!(needs, Some(d) if d <= slack);
            if every.is_zero() || !fits {
                return bad(format!(
                    "a flush interval of {every:?} plus the timeouts ({:?}, {:?}) must be > 0 and fit in the window less a slice ({slack:?})",
                    self.link.connect_timeout, self.link.io_timeout
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flush interval near `Duration::MAX` is refused with a typed error,
    /// not a panic adding it to the timeouts (a fuzz finding of
    /// `quota_builders`).
    #[test]
    fn a_huge_flush_interval_is_a_config_error() {
        let window = Duration::from_secs(10);
        for every in [
            Duration::MAX,
            Duration::from_secs(u64::MAX),
            Duration::from_secs(9),
        ] {
            let b = ClusterWindowsBuilder::<u64>::new("redis://127.0.0.1/", "ns", window, 10)
                .flush_interval(Some(every));
            assert!(
                matches!(b.validate(), Err(ClusterError::Config(_))),
                "{every:?}"
            );
        }
        let b = ClusterWindowsBuilder::<u64>::new("redis://127.0.0.1/", "ns", window, 10)
            .flush_interval(Some(Duration::from_millis(100)));
        assert!(b.validate().is_ok());
    }
}
