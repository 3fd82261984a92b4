//! [`ClusterWindows`]: per-key sliding windows shared by every node that
//! names the same Redis and namespace.
//!
//! # Where a count is
//! An add lands in the node's local [`KeyedWindows`] (lock-free, no I/O),
//! stamped with server time ([`ServerTime`]). A flush *takes* the local
//! counts into the pending buffer (`pending.rs`) and sends them to Redis in
//! batches, one in flight at a time, each applied exactly once
//! (`script.rs`). The reply carries every touched key's cluster ring, which
//! the node caches. So each count is, at every instant, in exactly one of:
//! the local windows, the pending buffer (staged or in flight), or Redis.
//!
//! # Reads
//! `sum_at(key)` = the key's cached cluster ring (as Redis last returned it,
//! counting this node's acknowledged counts) + its pending counts + its
//! local counts. The take and the acknowledgement (which moves a batch from
//! pending into the cache) hold the state lock for writing, and a read holds
//! it for reading, so a read sees each count exactly once. Counts other
//! nodes flushed after this node's last flush of the key are not included
//! until its next flush of the key, or a [`fresh_sum`](ClusterWindows::fresh_sum).
//!
//! # Locks
//! `sender` (the connection and the batch in flight) serializes flushes and
//! fresh reads; it is held across round trips. `state` (pending and cache)
//! and `hot` are held only for memory work, never across I/O. Order:
//! `sender`, then `state`, then `hot`. Adds take none of them.

use crate::config::{Builder, HotCallback};
use crate::error::ClusterError;
use crate::flusher::Flusher;
use crate::health::{bump, Counters, Health, Stats};
use crate::hot::HotSet;
use crate::key::RedisKey;
use crate::link::{Backoff, Link};
use crate::pending::{Deltas, Pending};
use crate::ring::Ring;
use crate::script::{
    hot_read_request, int, time_us, BatchWriter, FlushReply, HotReply, Lua, Names, Request, Shape,
    FLUSH, HOT_READ,
};
use crate::timeline::{ServerTime, WallClock};
use redis::Value;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};
use stripecount::{Clock, KeyRef, KeyedWindows};

/// A node's share of cluster-wide per-key sliding windows on Redis.
///
/// Adds are local and lock-free (a [`KeyedWindows`] add, stamped with
/// Redis server time); a background flusher (and [`flush`](Self::flush))
/// sends each key's per-slice deltas to Redis, exactly once, and brings
/// back the cluster sums of the keys it sent. See the crate docs for the
/// guarantees and their bounds.
///
/// ```no_run
/// use stripecount_redis::ClusterWindows;
/// use std::time::Duration;
///
/// let node = ClusterWindows::<String>::builder("redis://127.0.0.1:6379/", "api")
///     .window(Duration::from_secs(60), 60)
///     .hot_threshold(10_000)
///     .build()?;
/// node.add("client-42", 1); // local: no round trip
/// let cluster = node.sum("client-42"); // every node's counts, as of the last flush
/// let exact = node.fresh_sum("client-42")?; // one round trip
/// let hot = node.cluster_hot_keys();
/// # Ok::<(), stripecount_redis::ClusterError>(())
/// ```
pub struct ClusterWindows<K: RedisKey, C: Clock = WallClock> {
    inner: Arc<Inner<K, C>>,
    flusher: Option<Flusher>,
}

/// The parts of a key's window sum as one node sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SumParts {
    /// From the key's cluster ring as Redis last returned it to this node.
    pub cluster: u64,
    /// This node's counts taken by a flush and not yet acknowledged.
    pub pending: u64,
    /// This node's counts not yet taken by a flush.
    pub local: u64,
}

impl SumParts {
    /// The sum of the parts.
    pub fn total(&self) -> u64 {
        self.cluster
            .saturating_add(self.pending)
            .saturating_add(self.local)
    }
}

/// What one [`flush`](ClusterWindows::flush) did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlushReport<K> {
    /// Batches acknowledged (applied now or, for `replayed`, earlier).
    pub batches: u64,
    /// Batches Redis had already applied (a lost reply, resent).
    pub replayed: u64,
    /// `(key, slice)` deltas acknowledged.
    pub key_deltas: u64,
    /// Counts acknowledged.
    pub counts: u64,
    /// Counts Redis dropped as older than the window.
    pub dropped_old: u64,
    /// Crossings this node reported: each key that a batch of this node
    /// made hot in the cluster, with its cluster window sum then. A flush
    /// that failed after some batches were acknowledged hands their
    /// crossings to the next flush that succeeds.
    pub crossings: Vec<(K, u64)>,
}

impl<K> FlushReport<K> {
    fn new() -> Self {
        FlushReport {
            batches: 0,
            replayed: 0,
            key_deltas: 0,
            counts: 0,
            dropped_old: 0,
            crossings: Vec::new(),
        }
    }
}

/// Everything a node shares with its flusher thread.
pub(crate) struct Inner<K: 'static, C: Clock> {
    /// Local unflushed counts; its clock is the node's [`ServerTime`].
    windows: KeyedWindows<K, ServerTime<C>>,
    slices: usize,
    slice_nanos: u64,
    max_batch_keys: usize,
    shape: Shape,
    names: Names,
    flush_lua: Lua,
    hot_lua: Lua,
    node_id: String,
    state: RwLock<State<K>>,
    sender: Mutex<Sender<K>>,
    hot: RwLock<HotSet<K>>,
    counters: Counters,
    on_hot: Option<HotCallback<K>>,
}

/// Pending counts and cached rings, read together.
struct State<K> {
    pending: Pending<K>,
    cache: HashMap<K, Ring>,
    /// The epoch the cache and hot set were last pruned at.
    pruned_at: u64,
}

/// The connection and the batch in flight's request.
struct Sender<K> {
    link: Link,
    outbox: Option<Outbox<K>>,
    /// Crossings acknowledged by a flush that then failed.
    stash: Vec<(K, u64)>,
}

/// The batch in flight, as sent: resent byte for byte until acknowledged.
struct Outbox<K> {
    seq: u64,
    order: Vec<K>,
    request: Request,
    sends: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}
fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

impl<K: RedisKey> ClusterWindows<K> {
    /// A builder for a node of namespace `namespace` on the Redis at `url`
    /// (e.g. `redis://127.0.0.1:6379/0`).
    pub fn builder(url: &str, namespace: &str) -> Builder<K> {
        Builder::new(url, namespace)
    }
}

impl<K: RedisKey, C: Clock> ClusterWindows<K, C> {
    pub(crate) fn from_builder(b: Builder<K, C>) -> Result<Self, ClusterError> {
        // Eviction runs right after a take (`stage`), never on its own: an
        // automatic sweep would evict a key holding only counts older than
        // the window before a take could count them as dropped.
        let mut windows = KeyedWindows::with_clock(b.window, b.slices, ServerTime::new(b.clock))?
            .with_auto_evict(false);
        if let Some(m) = b.max_keys {
            windows = windows.with_max_keys(m);
        }
        let slice_nanos = u64::try_from(windows.slice_len().as_nanos())
            .map_err(|_| ClusterError::Config("the slice is too long".into()))?;
        let slice_ms = slice_nanos / 1_000_000;
        let window_ms = slice_ms * b.slices as u64;
        let node_id = format!("{:032x}", rand::random::<u128>());
        let link = Link::new(
            &b.url,
            b.connect_timeout,
            b.io_timeout,
            Backoff::new(b.backoff.0, b.backoff.1),
        )?;
        let inner = Arc::new(Inner {
            windows,
            slices: b.slices,
            slice_nanos,
            max_batch_keys: b.max_batch_keys,
            shape: Shape {
                slices: b.slices,
                slice_ms,
                threshold: b.hot_threshold.unwrap_or(0),
                record_ttl_ms: window_ms + slice_ms + 300_000,
            },
            names: Names::new(&b.namespace, &node_id),
            flush_lua: Lua::new(FLUSH),
            hot_lua: Lua::new(HOT_READ),
            node_id,
            state: RwLock::new(State {
                pending: Pending::new(b.max_pending_keys),
                cache: HashMap::new(),
                pruned_at: 0,
            }),
            sender: Mutex::new(Sender {
                link,
                outbox: None,
                stash: Vec::new(),
            }),
            hot: RwLock::new(HotSet::new()),
            counters: Counters::new(),
            on_hot: b.on_hot,
        });
        {
            let mut s = lock(&inner.sender);
            let r = inner.probe(&mut s);
            inner.settle(&mut s, &r);
        }
        let flusher = match b.flush_interval {
            Some(every) => Some(
                Flusher::start(Arc::clone(&inner), every)
                    .map_err(|e| ClusterError::Config(format!("no flusher thread: {e}")))?,
            ),
            None => None,
        };
        Ok(ClusterWindows { inner, flusher })
    }

    /// Adds `n` to `key` now (server time); `true` if counted (see
    /// [`KeyedWindows::add_at`]). Local and lock-free: no I/O, ever.
    #[inline]
    pub fn add<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.inner.windows.add(key, n)
    }

    /// Adds one to `key` now.
    #[inline]
    pub fn increment<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.add(key, 1)
    }

    /// Adds `n` to `key` at `now`, a time on the server timeline (see
    /// [`now`](Self::now)): for callers that stamp many adds with one read.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> bool {
        self.inner.windows.add_at(key, now, n)
    }

    /// The server time now, as this node estimates it (Unix nanoseconds).
    #[inline]
    pub fn now(&self) -> u64 {
        self.inner.time().now()
    }

    /// The key's cluster window sum now (see [`sum_parts_at`](Self::sum_parts_at)).
    pub fn sum<Q>(&self, key: &Q) -> u64
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.sum_at(key, self.now())
    }

    /// The key's cluster window sum at `now` (server timeline).
    pub fn sum_at<Q>(&self, key: &Q, now: u64) -> u64
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.sum_parts_at(key, now).total()
    }

    /// The key's window sum at `now` in its three parts: the cluster ring
    /// Redis last returned to this node (every node's flushed counts as of
    /// then, this node's acknowledged ones included), this node's pending
    /// counts, and its local unflushed counts. Each of this node's counts is
    /// in exactly one part. Needs no round trip.
    pub fn sum_parts_at<Q>(&self, key: &Q, now: u64) -> SumParts
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let i = &*self.inner;
        let e = now / i.slice_nanos;
        let floor = e.saturating_sub(i.slices as u64);
        let st = read(&i.state);
        SumParts {
            cluster: st.cache.get(key).map_or(0, |r| r.sum_at(e, i.slices)),
            pending: st.pending.sum(key, floor, e),
            local: i.windows.sum_at(key, now),
        }
    }

    /// The key's cluster window sum now, read from Redis (one round trip,
    /// after resending the batch in flight if there is one): every count
    /// any node had flushed by then, plus this node's unflushed counts.
    pub fn fresh_sum<Q>(&self, key: &Q) -> Result<u64, ClusterError>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let i = &*self.inner;
        let mut s = lock(&i.sender);
        let r = i.fresh_ring(&mut s, key);
        i.settle(&mut s, &r);
        drop(s);
        r?;
        Ok(self.sum(key))
    }

    /// Sends everything this node holds to Redis, now: takes the local
    /// counts and sends them in batches, each acknowledged before the next
    /// (a batch in flight from an earlier failure goes first). On error the
    /// counts not acknowledged stay held and are sent by the next flush;
    /// none is lost or doubled.
    pub fn flush(&self) -> Result<FlushReport<K>, ClusterError> {
        let i = &*self.inner;
        let mut s = lock(&i.sender);
        i.flush_locked(&mut s)
    }

    /// Whether `key` is hot in the cluster now, as of this node's last
    /// flush (see the crate docs on cluster hot keys).
    pub fn is_cluster_hot<Q>(&self, key: &Q) -> bool
    where
        Q: Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let e = self.now() / self.inner.slice_nanos;
        read(&self.inner.hot).is_hot(key, e)
    }

    /// The keys hot in the cluster now, as of this node's last flush (in
    /// unspecified order).
    pub fn cluster_hot_keys(&self) -> Vec<K> {
        let e = self.now() / self.inner.slice_nanos;
        read(&self.inner.hot).keys_at(e)
    }

    /// Reads the cluster hot set's changes from Redis now (one or two
    /// round trips) instead of waiting for the next flush.
    pub fn refresh_hot(&self) -> Result<(), ClusterError> {
        let i = &*self.inner;
        let mut s = lock(&i.sender);
        let r = i.probe(&mut s).and_then(|v| i.read_hot_if(&mut s, v));
        i.settle(&mut s, &r);
        r
    }

    /// The link's state, the last error, what is held for Redis and the
    /// time bound.
    pub fn health(&self) -> Health {
        let i = &*self.inner;
        let mut h = i.counters.health();
        let st = read(&i.state);
        h.pending_counts = st.pending.counts();
        h.staged_keys = st.pending.staged_keys();
        h.batch_in_flight = st.pending.in_flight();
        h.time_uncertainty = i.time().uncertainty().map(Duration::from_nanos);
        h
    }

    /// Counters of this node's flushes.
    pub fn stats(&self) -> Stats {
        self.inner.counters.stats()
    }

    /// The local windows (unflushed counts, on the server timeline).
    pub fn local(&self) -> &KeyedWindows<K, ServerTime<C>> {
        &self.inner.windows
    }

    /// The server timeline this node stamps its adds with.
    pub fn time(&self) -> &ServerTime<C> {
        self.inner.time()
    }

    /// The node's id in Redis (random per node: a restarted process is a
    /// new node with a new flush sequence).
    pub fn node_id(&self) -> &str {
        &self.inner.node_id
    }

    /// The slice number of server time `now`.
    pub fn epoch_at(&self, now: u64) -> u64 {
        now / self.inner.slice_nanos
    }

    /// Stops the background flusher and flushes what is held.
    pub fn shutdown(mut self) -> Result<FlushReport<K>, ClusterError> {
        if let Some(mut f) = self.flusher.take() {
            f.stop();
        }
        self.flush()
    }
}

impl<K: RedisKey, C: Clock> Inner<K, C> {
    fn time(&self) -> &ServerTime<C> {
        self.windows.clock()
    }

    /// The background flusher's step: take the local counts (always, so
    /// the local ring never reuses a slot that holds unflushed counts),
    /// then flush unless another flush is running or the backoff says wait.
    pub(crate) fn tick(&self) {
        self.stage();
        let Ok(mut s) = self.sender.try_lock() else {
            return;
        };
        if s.link.backoff.ready(Instant::now()) {
            let _ = self.flush_locked(&mut s);
        }
    }

    fn flush_locked(&self, s: &mut Sender<K>) -> Result<FlushReport<K>, ClusterError> {
        let mut report = FlushReport::new();
        let r = self.try_flush(s, &mut report);
        self.settle(s, &r);
        match r {
            Ok(()) => {
                self.counters.flushed();
                let mut stash = std::mem::take(&mut s.stash);
                stash.append(&mut report.crossings);
                report.crossings = stash;
                Ok(report)
            }
            Err(e) => {
                bump(&self.counters.flush_errors, 1);
                s.stash.append(&mut report.crossings);
                Err(e)
            }
        }
    }

    /// Records the outcome of a round trip in the health and the backoff.
    fn settle<T>(&self, s: &mut Sender<K>, r: &Result<T, ClusterError>) {
        match r {
            Ok(_) => {
                self.counters.up();
                s.link.backoff.succeeded();
            }
            Err(e) => {
                self.counters.down(e);
                s.link.backoff.failed(Instant::now());
            }
        }
    }

    fn try_flush(
        &self,
        s: &mut Sender<K>,
        report: &mut FlushReport<K>,
    ) -> Result<(), ClusterError> {
        // Take first: even when Redis is unreachable the local counts move
        // to the pending buffer, where they are held (and pruned) safely.
        self.stage();
        let mut version = self.probe(s)?;
        loop {
            if s.outbox.is_none() {
                let cut = write(&self.state)
                    .pending
                    .cut(self.max_batch_keys, |o, d, seq| self.encode(o, d, seq));
                let Some((seq, order, request)) = cut else {
                    break;
                };
                s.outbox = Some(Outbox {
                    seq,
                    order,
                    request,
                    sends: 0,
                });
            }
            version = self.send_outbox(s, report)?;
        }
        self.read_hot_if(s, version)
    }

    /// Takes the local windows' counts into the pending buffer, drops what
    /// left the window, and prunes the cache and hot set once an epoch.
    pub(crate) fn stage(&self) {
        let now = self.time().now();
        let e = now / self.slice_nanos;
        let s = self.slices as u64;
        let floor = e.saturating_sub(s);
        let mut full = 0u64;
        let mut guard = write(&self.state);
        let st = &mut *guard;
        self.windows.take_all(|k, ep, c| {
            if !st.pending.stage(k, ep, c) {
                full = full.saturating_add(c);
            }
        });
        let old = st.pending.prune(floor, e.saturating_add(s));
        let new_epoch = e != st.pruned_at;
        if new_epoch {
            // Once a slice: drop the local keys the take emptied (an add
            // racing the eviction is never lost: it inserts the key again).
            self.windows.evict_idle_at(now);
            st.cache.retain(|_, r| r.newest() > floor);
            st.pruned_at = e;
        }
        drop(guard);
        if new_epoch {
            write(&self.hot).prune(e);
        }
        bump(&self.counters.dropped_full, full);
        bump(&self.counters.dropped_old, old);
    }

    fn encode(&self, order: &[K], deltas: &HashMap<K, Deltas>, seq: u64) -> Request {
        let mut w = BatchWriter::new(&self.flush_lua.sha, &self.names, order.len());
        for k in order {
            w.key(&self.names, k, &deltas[k].0);
        }
        w.finish(&self.names, &self.shape, seq)
    }

    /// Sends the batch in flight and files its reply; returns the hot
    /// version the reply carries.
    fn send_outbox(
        &self,
        s: &mut Sender<K>,
        report: &mut FlushReport<K>,
    ) -> Result<u64, ClusterError> {
        let ob = s.outbox.as_mut().expect("a batch in flight");
        if ob.sends > 0 {
            bump(&self.counters.resends, 1);
        }
        ob.sends += 1;
        let v = s.link.eval(&self.flush_lua, &ob.request.bytes)?;
        let reply = FlushReply::decode(v, ob.order.len())?;
        let ob = s.outbox.take().expect("a batch in flight");
        let e = self.time().now() / self.slice_nanos;
        let mut crossings = Vec::with_capacity(reply.crossings.len());
        for &(i, sum) in &reply.crossings {
            crossings.push((ob.order[i].clone(), sum));
        }
        let mut hot = Vec::new();
        let batch = {
            let mut guard = write(&self.state);
            let st = &mut *guard;
            let batch = st.pending.acknowledge(ob.seq);
            for (k, &(at, len)) in ob.order.into_iter().zip(&reply.rings) {
                // Validated by `decode`. Into the key's cached ring, reusing
                // its buffer.
                let bytes = &reply.blob[at..at + len];
                let until = match st.cache.get_mut(&k) {
                    Some(r) => {
                        r.decode_into(bytes);
                        r.until()
                    }
                    None => {
                        let r = Ring::decode(bytes).unwrap_or_default();
                        let u = r.until();
                        st.cache.insert(k.clone(), r);
                        u
                    }
                };
                if until > e {
                    hot.push((k, until));
                }
            }
            batch
        };
        let Some(batch) = batch else {
            return Err(ClusterError::Protocol(
                "acknowledged a batch that was not in flight".into(),
            ));
        };
        if !hot.is_empty() {
            let mut h = write(&self.hot);
            for (k, u) in hot {
                h.insert(k, u);
            }
        }
        let c = &self.counters;
        if reply.replayed {
            bump(&c.batches_replayed, 1);
            report.replayed += 1;
        } else {
            bump(&c.batches_applied, 1);
        }
        let counts = batch.counts.saturating_sub(reply.dropped);
        bump(&c.key_deltas_flushed, batch.key_deltas);
        bump(&c.counts_flushed, counts);
        bump(&c.dropped_old, reply.dropped);
        bump(&c.hot_crossings, crossings.len() as u64);
        report.batches += 1;
        report.key_deltas += batch.key_deltas;
        report.counts += counts;
        report.dropped_old += reply.dropped;
        if let Some(f) = &self.on_hot {
            for (k, sum) in &crossings {
                f(k, *sum);
            }
        }
        report.crossings.extend(crossings);
        Ok(reply.hot_version)
    }

    /// Connects if needed (sampling the server's time three times on a new
    /// connection), then one round trip: `TIME` (a sample) and the hot
    /// version.
    fn probe(&self, s: &mut Sender<K>) -> Result<u64, ClusterError> {
        if s.link.ensure()? {
            bump(&self.counters.connects, 1);
            self.time().reset_bound();
            let mut t = Request::new(1);
            t.arg(b"TIME");
            for _ in 0..3 {
                let t0 = self.time().node_clock().now();
                let v = s.link.request(&t.bytes)?;
                self.sample(t0, &v)?;
            }
        }
        let mut req = Request::new(1);
        req.arg(b"TIME");
        let mut get = Request::new(2);
        get.arg(b"GET").arg(&self.names.hotver);
        req.then(&get);
        let t0 = self.time().node_clock().now();
        let vs = s.link.pipeline(&req.bytes, 2)?;
        self.sample(t0, &vs[0])?;
        match &vs[1] {
            Value::Nil => Ok(0),
            v => int(v),
        }
    }

    /// Files a `TIME` reply received now for a request sent at `t0`.
    fn sample(&self, t0: u64, v: &Value) -> Result<(), ClusterError> {
        let t1 = self.time().node_clock().now();
        let Value::Array(a) = v else {
            return Err(ClusterError::Protocol("TIME is not an array".into()));
        };
        if a.len() != 2 {
            return Err(ClusterError::Protocol("TIME has the wrong length".into()));
        }
        let us = time_us(&a[0], &a[1])?;
        if self.time().sample(t0, t1, us.saturating_mul(1_000)) {
            bump(&self.counters.time_samples, 1);
        }
        Ok(())
    }

    /// Reads the hot set's changes if Redis's version differs from ours.
    fn read_hot_if(&self, s: &mut Sender<K>, version: u64) -> Result<(), ClusterError> {
        if self.shape.threshold == 0 {
            return Ok(());
        }
        let since = read(&self.hot).version();
        if version == since {
            return Ok(());
        }
        let req = hot_read_request(&self.hot_lua.sha, &self.names, since);
        let v = s.link.eval(&self.hot_lua, &req.bytes)?;
        let r = HotReply::decode(&v)?;
        write(&self.hot).apply(&r);
        Ok(())
    }

    /// Reads `key`'s ring from Redis into the cache (after resolving the
    /// batch in flight, whose counts the ring may already hold).
    fn fresh_ring<Q>(&self, s: &mut Sender<K>, key: &Q) -> Result<(), ClusterError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.probe(s)?;
        if s.outbox.is_some() {
            let mut report = FlushReport::new();
            self.send_outbox(s, &mut report)?;
            s.stash.append(&mut report.crossings);
        }
        let k = key.to_key();
        let mut b = Vec::new();
        k.write_key(&mut b);
        let mut req = Request::new(2);
        req.arg(b"GET").arg(&self.names.cfg);
        let mut get = Request::new(2);
        get.arg(b"GET").arg2(&self.names.data, &b);
        req.then(&get);
        let vs = s.link.pipeline(&req.bytes, 2)?;
        // A ring filed by nodes of another shape would be misread.
        if let Value::BulkString(cfg) = &vs[0] {
            let ours = self.shape.config_string();
            if cfg != ours.as_bytes() {
                return Err(ClusterError::ShapeMismatch(format!(
                    "the namespace is configured as {}, this node as {ours}",
                    String::from_utf8_lossy(cfg)
                )));
            }
        }
        let ring = match &vs[1] {
            Value::Nil => Ring::default(),
            Value::BulkString(b) => Ring::decode(b)
                .ok_or_else(|| ClusterError::Protocol("a key's value is not a ring".into()))?,
            _ => {
                return Err(ClusterError::Protocol(
                    "a key's value is not a string".into(),
                ))
            }
        };
        write(&self.state).cache.insert(k, ring);
        Ok(())
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
