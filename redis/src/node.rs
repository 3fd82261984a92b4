//! [`ClusterWindows`]: per-key sliding windows shared by every node that
//! names the same Redis and namespace.
//!
//! # Where a count is
//! An add lands in the node's local [`KeyedWindows`] (lock-free, no I/O),
//! stamped with server time ([`ServerTime`]). A flush *takes* the local
//! counts into the pending buffer (`pending.rs`) and sends them to Redis in
//! batches, one at a time, each applied exactly once (`script.rs`); the
//! next batch is cut while Redis runs the current one (`flush.rs`), so at
//! most two are in flight. The reply carries every touched key's cluster ring, which
//! the node caches. So each count is, at every instant, in exactly one of:
//! the local windows, the pending buffer (staged or in flight), or Redis;
//! a read adds the three up (`reads.rs`).
//!
//! # Locks
//! A group's `sender` (its connection and batches in flight) serializes the
//! group's flushes and fresh reads; it is held across round trips, and
//! never two at once. `state` (pending and cache) and `hot` are held only
//! for memory work, never across I/O. Order: a `sender`, then `state`,
//! then `hot`. Adds take none of them.

use crate::acked::Acked;
use crate::config::{ClusterWindowsBuilder, HotCallback};
use crate::error::ClusterError;
use crate::flusher::Flusher;
use crate::group::Groups;
use crate::health::{Counters, Health, Stats};
use crate::hot::HotSet;
use crate::key::RedisKey;
use crate::link::Link;
use crate::pending::{Name, Pending};
use crate::results::FlushReport;
use crate::ring::Ring;
use crate::script::{Lua, Names, Request, Shape};
use crate::sync::read;
use crate::timeline::{ServerTime, WallClock};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use stripecount::keyed::KeyRef;
use stripecount::{Clock, KeyedWindows, Timestamp};

/// A node's share of cluster-wide per-key sliding windows on Redis.
///
/// Adds are local and lock-free (a [`KeyedWindows`] add, stamped with
/// Redis server time); a background flusher (and [`flush`](Self::flush))
/// sends each key's per-slice deltas to Redis, exactly once, and brings
/// back the cluster sums of the keys it sent. See the crate docs for the
/// guarantees and their bounds.
///
/// Dropping a node stops its flusher without a last flush: what it holds
/// is lost with it. [`shutdown`](Self::shutdown) flushes first.
///
/// ```no_run
/// use stripecount_redis::ClusterWindows;
/// use std::time::Duration;
///
/// let minute = Duration::from_secs(60);
/// let node = ClusterWindows::<String>::builder("redis://127.0.0.1:6379/", "api", minute, 60)
///     .hot_threshold(10_000)
///     .build()?;
/// node.add("client-42", 1); // local: no round trip
/// let cluster = node.sum("client-42"); // every node's counts, as of the last flush
/// let exact = node.fresh_sum("client-42")?; // one round trip
/// let hot = node.cluster_hot_keys();
/// # Ok::<(), stripecount_redis::ClusterError>(())
/// ```
pub struct ClusterWindows<K: RedisKey, C: Clock = WallClock> {
    pub(crate) inner: Arc<Inner<K, C>>,
    pub(crate) flusher: Option<Flusher>,
}

/// Everything a node shares with its flusher thread.
pub(crate) struct Inner<K: 'static, C: Clock> {
    /// Local unflushed counts; its clock is the node's [`ServerTime`].
    pub(crate) windows: KeyedWindows<K, ServerTime<C>>,
    pub(crate) slices: usize,
    pub(crate) slice_nanos: u64,
    pub(crate) max_batch_keys: usize,
    pub(crate) shape: Shape,
    /// How keys spread over a cluster's slots (one group on a single
    /// instance).
    pub(crate) groups: Groups,
    /// `(replicas, timeout)` a batch waits for before it counts as
    /// acknowledged (`wait_for_replicas`).
    pub(crate) durability: Option<(u32, Duration)>,
    /// Each group's key names.
    pub(crate) names: Vec<Names>,
    pub(crate) flush_lua: Lua,
    pub(crate) hot_lua: Lua,
    pub(crate) ring_lua: Lua,
    pub(crate) node_id: String,
    pub(crate) state: RwLock<State<K>>,
    /// One a group, in group order.
    pub(crate) senders: Vec<Mutex<Sender<K>>>,
    pub(crate) hot: RwLock<HotSet<K>>,
    pub(crate) counters: Counters,
    pub(crate) on_hot: Option<HotCallback<K>>,
}

/// Pending counts and cached rings, read together.
pub(crate) struct State<K> {
    /// One a group: each has its own flush sequence and batches in flight.
    pub(crate) pending: Vec<Pending<K>>,
    pub(crate) cache: HashMap<K, Ring>,
    /// The epoch the cache and hot set were last pruned at.
    pub(crate) pruned_at: u64,
}

/// One group's connection and the requests of its batches in flight.
pub(crate) struct Sender<K> {
    /// The group whose batches this sender carries.
    pub(crate) group: usize,
    /// The connection to the group's Redis (on a cluster: the master of
    /// the group's slot, as redirections taught it).
    pub(crate) link: Link,
    /// The oldest batch in flight: the one sent (or to send first).
    pub(crate) outbox: Option<Outbox>,
    /// The next, cut and encoded while Redis runs `outbox`'s; never sent
    /// before `outbox` is acknowledged. `Some` only while `outbox` is.
    pub(crate) next: Option<Outbox>,
    /// This group's batches acknowledged recently (to count what Redis
    /// loses after acknowledging it).
    pub(crate) acked: Acked,
    /// Crossings acknowledged by a flush that then failed.
    pub(crate) stash: Vec<(K, u64)>,
}

/// A batch in flight, as sent: resent byte for byte until acknowledged.
pub(crate) struct Outbox {
    pub(crate) seq: u64,
    /// The keys' names, in the request's order.
    pub(crate) order: Vec<Name>,
    pub(crate) request: Request,
    pub(crate) sends: u32,
}

impl<K: RedisKey> ClusterWindows<K> {
    /// A node of namespace `namespace` on the Redis at `url` (e.g.
    /// `redis://127.0.0.1:6379/0`), sharing per-key windows of `window` cut
    /// into `slices` slices, with the default options (a flush every 100
    /// ms, no hot-key detection). Every node of the namespace must use the
    /// same window and slices. The slice length must be a whole number of
    /// milliseconds (Redis time and expiry are in milliseconds) and there
    /// are at most [`MAX_CLUSTER_SLICES`](crate::MAX_CLUSTER_SLICES)
    /// slices; the flush interval plus the timeouts (1.6 s by default)
    /// must fit in the window less a slice.
    ///
    /// Building needs no Redis: the node tries to connect once (a failure
    /// is recorded in its [`health`](Self::health), not returned) and its
    /// flusher keeps trying. Errors only on an invalid configuration.
    ///
    /// ```
    /// use stripecount_redis::ClusterWindows;
    /// use std::time::Duration;
    ///
    /// // Nothing listens on port 1: the node counts locally and holds the
    /// // counts for Redis.
    /// let ten_s = Duration::from_secs(10);
    /// let node = ClusterWindows::<String>::new("redis://127.0.0.1:1/", "doc", ten_s, 10)?;
    /// assert!(node.add("alice", 1));
    /// assert_eq!(node.sum("alice"), 1);
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn new(
        url: &str,
        namespace: &str,
        window: Duration,
        slices: usize,
    ) -> Result<Self, ClusterError> {
        Self::builder(url, namespace, window, slices).build()
    }

    /// The builder of a node like [`new`](Self::new)'s, for the options of
    /// [`ClusterWindowsBuilder`] (flush interval, hot threshold, bounds,
    /// timeouts, clock); checked by its
    /// [`build`](ClusterWindowsBuilder::build), with the errors of `new`.
    pub fn builder(
        url: &str,
        namespace: &str,
        window: Duration,
        slices: usize,
    ) -> ClusterWindowsBuilder<K> {
        ClusterWindowsBuilder::new(url, namespace, window, slices)
    }
}

impl<K: RedisKey, C: Clock> ClusterWindows<K, C> {
    /// A builder on `clock`: [`ClusterWindows::builder`] (defined on the
    /// wall-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](ClusterWindowsBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```no_run
    /// use stripecount::clock::CoarseClock;
    /// use stripecount_redis::{ClusterWindows, WallClock};
    /// use std::time::Duration;
    ///
    /// let clock = WallClock::over(CoarseClock::new());
    /// let node = ClusterWindows::<String, WallClock<CoarseClock>>::builder_with_clock(
    ///     "redis://127.0.0.1:6379/",
    ///     "api",
    ///     Duration::from_secs(10),
    ///     10,
    ///     clock,
    /// )
    /// .build()?;
    /// node.add("k", 1);
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn builder_with_clock(
        url: &str,
        namespace: &str,
        window: Duration,
        slices: usize,
        clock: C,
    ) -> ClusterWindowsBuilder<K, C> {
        ClusterWindows::builder(url, namespace, window, slices).clock(clock)
    }

    /// Adds `n` to `key` now (server time); `true` if counted (see
    /// [`KeyedWindows::add_at`]). Local and lock-free: no I/O, ever.
    #[inline]
    pub fn add<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.inner.windows.add(key, n)
    }

    /// Adds `n` to `key` at `now`, a time on the server timeline (see
    /// [`now`](Self::now)): for callers that stamp many adds with one read.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> bool {
        self.inner.windows.add_at(key, now, n)
    }

    /// The server time now, as this node estimates it (Unix time): the
    /// time the `*_at` methods take.
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.inner.time().now()
    }

    /// Sends everything this node holds to Redis, now: takes the local
    /// counts and sends them in batches, each acknowledged before the next
    /// (a batch in flight from an earlier failure goes first). On error the
    /// counts not acknowledged stay held and are sent by the next flush;
    /// none is lost or doubled. On a cluster every group is flushed (the
    /// groups of one master one after another, the masters at once); the
    /// first error is returned after all were tried, and the report counts
    /// the groups that succeeded. The hot crossings are delivered to the
    /// [`on_hot_crossing`](crate::ClusterWindowsBuilder::on_hot_crossing)
    /// callback after the flush, with no lock of the node held; if a call
    /// panics, the others are still made and the first panic is then
    /// resumed here (nothing held is lost: the counts were filed). A panic
    /// of the key type's own code (`write_key`, `Hash`, `Eq`, `Clone`) is
    /// resumed the same way, after every group was flushed (see
    /// [`Stats::key_panics`](crate::Stats::key_panics)).
    pub fn flush(&self) -> Result<FlushReport<K>, ClusterError> {
        self.inner.flush_all()
    }

    /// The link's state, the last error, what is held for Redis and the
    /// time bound.
    pub fn health(&self) -> Health {
        let i = &*self.inner;
        let mut h = i.counters.health();
        let st = read(&i.state);
        for p in &st.pending {
            h.pending_counts = h.pending_counts.saturating_add(p.counts());
            h.staged_keys += p.staged_keys();
            h.batch_in_flight |= p.in_flight();
        }
        h.time_uncertainty = i.time().uncertainty();
        h
    }

    /// Counters of this node's flushes.
    pub fn stats(&self) -> Stats {
        self.inner.counters.stats()
    }

    /// The server timeline this node stamps its adds with.
    pub fn time(&self) -> &ServerTime<C> {
        self.inner.time()
    }

    /// The window length: [`slices`](Self::slices) slices of
    /// [`slice_len`](Self::slice_len).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use stripecount_redis::ClusterWindows;
    ///
    /// let node = ClusterWindows::<String>::new("redis://127.0.0.1:6379/", "api", Duration::from_secs(10), 5)?;
    /// assert_eq!(node.window(), Duration::from_secs(10));
    /// assert_eq!((node.slices(), node.slice_len()), (5, Duration::from_secs(2)));
    /// # Ok::<(), stripecount_redis::ClusterError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(
            self.inner
                .slice_nanos
                .saturating_mul(self.inner.slices as u64),
        )
    }

    /// The number of slices per window.
    pub fn slices(&self) -> usize {
        self.inner.slices
    }

    /// The slice length (on the server's timeline).
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.inner.slice_nanos)
    }

    /// The node's id in Redis (random per node: a restarted process is a
    /// new node with a new flush sequence).
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// Stops the background flusher and flushes what is held (one
    /// attempt: on error the counts not acknowledged are lost with the
    /// node; call [`flush`](Self::flush) until it succeeds first to be sure).
    pub fn shutdown(mut self) -> Result<FlushReport<K>, ClusterError> {
        if let Some(mut f) = self.flusher.take() {
            f.stop();
        }
        self.flush()
    }
}

impl<K: RedisKey, C: Clock> fmt::Debug for ClusterWindows<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &*self.inner;
        f.debug_struct("ClusterWindows")
            .field("node_id", &i.node_id)
            .field("slices", &i.slices)
            .field("slice", &Duration::from_nanos(i.slice_nanos))
            .field("flusher", &self.flusher.is_some())
            .finish_non_exhaustive()
    }
}
