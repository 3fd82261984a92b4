//! # stripecount-redis
//!
//! Cluster-wide per-key sliding windows and hot keys on Redis, built on
//! [stripecount]'s [`KeyedWindows`](stripecount::KeyedWindows).
//! Nodes (processes) that name the same Redis and namespace share each
//! key's window: a client's rate over the whole fleet, a key's hotness
//! across every cache node. The hot path stays local: an add is a
//! `KeyedWindows` add, lock-free, with no I/O.
//!
//! ```no_run
//! use stripecount_redis::ClusterWindows;
//! use std::time::Duration;
//!
//! let ten_s = Duration::from_secs(10);
//! let node = ClusterWindows::<String>::builder("redis://127.0.0.1:6379/", "api", ten_s, 10)
//!     .flush_interval(Some(Duration::from_millis(100)))
//!     .hot_threshold(50_000)
//!     .on_hot_crossing(|key, sum| eprintln!("{key} is hot across the fleet ({sum})"))
//!     .build()?;
//! node.add("client-42", 1);
//! let fleet_rate = node.sum("client-42");
//! # Ok::<(), stripecount_redis::ClusterError>(())
//! ```
//!
//! # Guarantees
//! - **Adds never wait.** An add writes the node's local windows only;
//!   a background flusher (every `flush_interval`, 100 ms by default) and
//!   [`ClusterWindows::flush`] send each key's per-slice deltas to Redis in
//!   batches of up to `max_batch_keys` keys, one round trip each (a Lua
//!   script run by `EVALSHA`).
//! - **Exactly once.** Each batch carries the node's flush sequence; the
//!   script applies a sequence once and answers a resent one without
//!   applying it; the node keeps a batch until a reply acknowledges it and
//!   resends it unchanged after any failure (`script.rs` has the
//!   protocol). Whatever fails and when (the request lost, the reply lost,
//!   Redis killed and restarted from an `appendfsync always` file), every
//!   add is counted once in Redis, or dropped *and counted* in
//!   [`Stats::dropped_old`] when it left the window before Redis could
//!   have it (no window includes it then).
//! - **One timeline.** Slices come from Redis server time:
//!   each node samples `TIME` (on connect and at every flush) and keeps the
//!   offset to its own clock ([`ServerTime`]), so a node whose clock is off
//!   files its counts in the same slices as every other node, and the
//!   script files anything stamped later than its own time in its current
//!   slice. The node's error against server time is at most half the
//!   round trip of its best recent sample plus 100 ppm drift since
//!   ([`ServerTime::uncertainty`]); a count lands in another slice than
//!   server time would give only within that bound of a slice edge.
//! - **Freshness.** An add is in the cluster's sums in Redis within one
//!   flush interval plus a round trip (plus the backoff while Redis is
//!   unreachable). [`ClusterWindows::sum`] needs no round trip: the
//!   cluster ring Redis returned with the node's last flush of the key,
//!   plus the node's own unflushed counts ([`SumParts`]);
//!   [`ClusterWindows::fresh_sum`] reads Redis.
//! - **Cluster hot keys.** With a threshold, the flush script decides
//!   hotness on the cluster window: the batch that takes a key to the
//!   threshold reports the crossing (to its node's
//!   [`on_hot_crossing`](ClusterWindowsBuilder::on_hot_crossing) callback,
//!   called after the flush with no lock of the node held, and
//!   [`FlushReport::crossings`]), exactly once across the cluster per
//!   crossing, even when its reply is lost and it is resent. Every node
//!   learns the hot set at its next flush ([`ClusterWindows::cluster_hot_keys`]).
//! - **Outages.** Adds go on; counts are held locally (bounded: counts of
//!   slices that left the window are dropped and counted, and at most
//!   `max_pending_keys` keys are staged); the flusher reconnects with
//!   exponential backoff; errors are typed ([`ClusterError`]) and
//!   visible ([`ClusterWindows::health`], [`ClusterWindows::stats`]).
//! - **Your code may panic.** The hot-crossing callback runs with no lock
//!   held and may use the node; a panic in it loses nothing. A key type
//!   whose own code (`RedisKey::write_key`, `Hash`, `Eq`, `Clone`) panics
//!   inside a flush loses no batch and doubles none: a key whose code
//!   panics when its counts are taken is left out, its counts dropped
//!   *and counted* ([`Stats::dropped_panicked`]); the other keys are
//!   flushed. The background flusher (and the limiter's threads) count
//!   such panics and go on; [`ClusterWindows::flush`] resumes the first
//!   once every group was flushed.
//!
//! # The cluster limiter
//! [`ClusterLimiter`] holds a per-key [`Quota`](stripecount::Quota)
//! across the nodes of a namespace (the `KeyedLimiter` semantics,
//! fleet-wide), by leases:
//!
//! ```no_run
//! use stripecount::Quota;
//! use stripecount_redis::{ClusterLimiter, OutagePolicy};
//!
//! let url = "redis://127.0.0.1:6379/";
//! let limiter = ClusterLimiter::<String>::builder(url, "api", Quota::per_second(100))
//!     .outage(OutagePolicy::LocalShare { expected_nodes: 4 })
//!     .build()?;
//! if limiter.try_acquire("client-42", 1) { /* serve */ }
//! # Ok::<(), stripecount_redis::ClusterError>(())
//! ```
//!
//! - **Never over the limit.** The permits granted across all nodes are
//!   at most the limit in any `S` consecutive server slices of a quota of
//!   `S` slices (so in every span of the window less a slice), and, for a
//!   [`strict`](stripecount::Quota::strict) quota, in any `S + 1` (so in
//!   every span of the whole window). Redis counts, per key and server
//!   slice, the permits leased less those returned; the lease script (on
//!   the server's clock) adds a batch to the current slice only if the
//!   last `S` (strict: `S + 1`) slices plus the batch fit. A node grants a
//!   lease's permits only while its slice is current on the server's
//!   clock: after the script ran, and before a deadline the node computes
//!   from the lease's own round trip (the time the script said was left
//!   in the slice, less the node clock's drift over it and a margin), so a
//!   node's clock offset does not matter. Returns only lower a slice's
//!   count, by permits no grant can take any more. Hence the grants of
//!   any `S` (strict: `S + 1`) consecutive slices are at most the counts
//!   the last lease among them was checked against (the proof in full:
//!   `src/lease/mod.rs`). Each grant says which server slice counts it
//!   ([`Grant::Granted`]).
//! - **Local grants.** A grant from a held lease is one compare-and-swap
//!   on the key's lease word: no lock, no allocation, no I/O. A request
//!   the lease cannot serve goes to Redis (returns plus a new lease), or
//!   gets the [`OutagePolicy`] if Redis is unreachable.
//! - **Batched round trips.** Per group one request is in flight, and it
//!   leases every key whose requests queued meanwhile (up to
//!   [`max_batch_keys`](ClusterLimiterBuilder::max_batch_keys)): a flood
//!   of new keys costs a round trip per batch, and a lone request goes
//!   straight out. A request waits on its thread
//!   ([`decide`](ClusterLimiter::decide)) or as a future without a thread
//!   ([`decide_async`](ClusterLimiter::decide_async)); past
//!   [`max_queue`](ClusterLimiterBuilder::max_queue) waiting requests in
//!   a group it is shed at once ([`Grant::Overloaded`]). A new key's first
//!   lease is what waits for it (one permit for a key seen once), later
//!   ones follow the node's rate of the key.
//! - **Exactly once.** Leases and returns use the flush's sequence
//!   protocol: a lease whose reply was lost is granted once (the resend is
//!   answered from Redis's record), a return whose reply was lost is
//!   applied once.
//! - **What it leaves unused.** A request is refused only when the
//!   window's counted permits plus the request exceed the limit; counted =
//!   granted + leased and not yet used or returned. So a refusal
//!   under-admits by at most what the other nodes hold unused then: at
//!   most [`max_batch`](ClusterLimiterBuilder::max_batch) each, and less near the
//!   limit (a lease gets at most half the room left beyond the request).
//!   Permits of a lease whose slice ended count until returned (the next
//!   miss of the key, or its group's thread within the sweep interval). A key Redis
//!   refused is refused locally until the retry time Redis gave
//!   ([`refusal_memo`](ClusterLimiterBuilder::refusal_memo), on by
//!   default: no round trip per refused request), so permits returned for
//!   it meanwhile wait until then.
//!
//! ## Under a flood of new keys
//! Every request of a key the node holds no lease for needs Redis (a
//! crawler, a botnet, a cold start, a limit per client address). The node
//! keeps that cheap and bounded:
//! - **One round trip per batch, not per key.** A group's requests queue
//!   in its lane while its request is in flight; the next carries them all
//!   (up to [`max_batch_keys`](ClusterLimiterBuilder::max_batch_keys),
//!   each key once), so the more requests wait, the fewer round trips
//!   each costs; a lone request still goes straight out.
//! - **Waiting costs no thread.** [`decide`](ClusterLimiter::decide)
//!   parks its own thread; [`decide_async`](ClusterLimiter::decide_async)
//!   returns a future the group's thread wakes, on any runtime. The node
//!   runs one thread per group, whatever the load.
//! - **Nothing a key, for a key seen once.** A new key's first lease is
//!   what its waiting requests need (one permit for one request), so
//!   Redis counts no unused permits for it and the node keeps no lease and
//!   no record of it, only a size record in a fixed table (128 KiB).
//! - **Warm keys go first.** A request of a key whose lease this node
//!   holds or held (a renewal) joins a queue of its own, taken before the
//!   new keys', in batches of its own: a flood delays a renewal by at most
//!   the batch in flight, and never sheds it. With
//!   [`renew_early`](ClusterLimiterBuilder::renew_early) a busy key's lease
//!   asks for the next one when a quarter is left, so its requests do not
//!   wait at all until its slice ends.
//! - **A bounded queue, and a quick answer past it.** At most
//!   [`max_queue`](ClusterLimiterBuilder::max_queue) requests wait per
//!   group (per queue); the next gets [`Grant::Overloaded`] at once, with
//!   the time the node expects to need to drain the queue: it was not
//!   decided and nothing was counted (the tower layer answers `503` with
//!   `Retry-After`). With [`Shed::Outage`] the outage policy decides it
//!   instead. [`ClusterLimiter::waiting`] and
//!   [`LeaseStats::shed`] show how close a node runs to it.
//!
//! Nothing of this changes what is counted or granted: each batch is one
//! request of the exactly-once protocol, and each key in it is leased as
//! a lone request would be.
//!
//! # Redis Cluster
//! [`ClusterWindows`] and [`ClusterLimiter`] run on a Redis Cluster with
//! `redis_cluster(groups)` ([windows](ClusterWindowsBuilder::redis_cluster),
//! [limiter](ClusterLimiterBuilder::redis_cluster)): every
//! Redis key of the namespace carries the hash tag of one of `groups`
//! groups (a key's group: the CRC16 of its bytes modulo `groups`), and a
//! group's data keys, its per-node exactly-once records, its config key and
//! its hot set all hash to one slot. So every script call touches one slot
//! (Redis Cluster refuses any other), the keys spread over every master
//! (the groups' slots split the 16,384 evenly), and a record moves with the
//! keys it guards when its slot is resharded. Each group has its own flush
//! sequence, batches and connection to its slot's master:
//! - **Resharding.** `MOVED` points the group's connection at the new
//!   master and the batch is resent; `ASK` (the slot is migrating) sends it
//!   once to the importing master after `ASKING`; `TRYAGAIN` (its keys are
//!   split between the two) retries after the backoff. Redis runs a script
//!   only where all its keys are, record included, so a batch is applied
//!   once wherever it lands, and no count is lost or doubled.
//! - **Failover.** A group whose master cannot be reached asks the builder's
//!   URL, the [`seeds`](ClusterWindowsBuilder::seeds) and the masters
//!   redirections named (to any of the node's groups) where its slot
//!   went. Replication is asynchronous: a batch a master acknowledged and
//!   then lost (it died before its replica had it) is gone with the
//!   record's advance, and the node has let it go. The node learns of it
//!   at its next batch to the group (the record's sequence went back) and
//!   counts it in [`Stats::lost_batches`] and [`Stats::lost_counts`]: the
//!   cluster's windows are short by exactly those counts. With
//!   [`wait_for_replicas`](ClusterWindowsBuilder::wait_for_replicas) a
//!   batch counts as acknowledged only once that many replicas have it
//!   (`WAIT`); one short of them is held and resent (a replay where the
//!   record survived, applied once where it did not), so a failover loses
//!   nothing unless every one of those replicas loses it too. The same
//!   option works on a single instance with replicas. A master with fewer
//!   replicas connected than asked for fails the build
//!   ([`ClusterError::TooFewReplicas`]), and later holds its groups back
//!   ([`Health::replicas_short`]); a promoted replica has none until one
//!   rejoins it, so keep a spare replica a master.
//! - **Settings checked.** Each new connection asks `INFO`: a Redis
//!   Cluster node met by a node built without `redis_cluster` fails the
//!   build with [`ClusterError::ClusterNode`] (rather than `MOVED` on
//!   every flush).
//! - **Time.** The node stamps its adds with the first group's master's
//!   time; every master files counts by its own clock (a count stamped
//!   after the master's now goes to its current slice), so masters whose
//!   clocks differ by `d` move counts only within `d` of a slice edge.
//!
//! - **The limiter** keeps its invariant per key on the key's slot: a
//!   lease and the returns it carries touch the key's group only (its
//!   record per node, its config key). A miss locks its key's group
//!   only. A lease a master granted and lost in a failover is not counted
//!   by the promoted replica, which may lease those permits again: up to
//!   them over the limit in that window (shown by a test). With
//!   [`wait_for_replicas`](ClusterLimiterBuilder::wait_for_replicas) a
//!   lease is used only once replicated, and the limit holds through a
//!   failover (tested with a master killed while its replica was cut off).
//!
//! A flush sends to the masters at once (a thread each beyond the first)
//! and to one master's groups in turn (a round trip a batch; a group
//! probes first only when it is not connected or has nothing to send, and
//! the first group always, for the timeline), so a flush costs `groups /
//! masters` round trips a master at least: a few groups a master is
//! enough. With hot keys off, a group with nothing to send is skipped (an
//! idle node probes the first group only).
//!
//! # What a Redis restart loses
//! With `appendonly yes` and `appendfsync always`, Redis writes a batch's
//! effects to its file before it replies, so an acknowledged batch is never
//! lost, and a batch whose reply was lost is either in the file (the resend
//! is answered as a replay) or not (the resend applies it): nothing is lost
//! or doubled. With persistence off, a restart loses every count flushed
//! before it, the node records and the hot set: the cluster sums start over
//! from what nodes flush afterwards (nothing is doubled; the nodes notice
//! only a reconnect, and their hot sets are replaced at the next read since
//! the server's hot version went back).
//!
//! For the cluster limiter, a restart with persistence off forgets the
//! permits leased in the current window: up to another limit may be
//! granted in it (each node's held leases stay valid to their slice's
//! end, and the nodes' records start over, which the sequence protocol
//! accepts). With `appendfsync always` nothing is forgotten.
//!
//! Redis must not evict these keys (`maxmemory-policy noeviction`, the
//! default: a full server then refuses a batch before it runs, and the
//! node holds it). Every key of a namespace has an expiry, so a
//! `volatile-*` policy may evict them too: an evicted bucket loses its
//! keys' counts, an evicted `ns:bg` lets the next batches write over the
//! rings of the window, and an evicted node record lets a resent batch
//! apply twice.
//!
//! # Redis keys of a namespace `ns`
//! On a Redis Cluster `ns:` is `ns:{t}:` with `t` the key's group's tag
//! (`group.rs`), and each group has its own `cfg`, record and hot set.
//!
//! `ns:b:<slot>:<sub-bucket>` the buckets, hashes with one field a key
//! (named by its bytes): its slices in the window and its hot horizon
//! (`ring.rs`); a flush deletes a bucket once the newest slice it can hold
//! left the window, and its expiry cleans up after a namespace no node
//! flushes to, so no key has an expiry of its own (`bucket.rs`); `ns:bg`
//! which generation of slices each slot holds; `ns:n:<node id>` a node's
//! last applied batch; `ns:cfg` the window shape and layout every node
//! must share; `ns:hot`, `ns:hotv`, `ns:hotver` the hot set;
//! for the cluster limiter `ns:lb:<slot>` its buckets, hashes with one
//! field a key: its leased permits per slice, kept and deleted by
//! generation as the windows' buckets are (`lease/layout.rs`), `ns:lg`
//! which generation each slot holds, `ns:ln:<node id>` a node's last
//! request, `ns:lcfg` the quota (limit, window shape, strictness) and
//! layout every node must share.
//! Needs Redis 7.0 or later (scripts with flags, `SET ... PXAT`).
//!
//! # Modules
//! `node.rs` the node ([`ClusterWindows`]), its adds and shared state;
//! `reads.rs` its reads; `results.rs` what its reads and flushes report
//! ([`SumParts`], [`FlushReport`]); `flush.rs` the flush, `take.rs` its
//! take and cut, `probe.rs` its other round trips; `fanout.rs` a flush
//! over every group; `flusher.rs` its thread;
//! `link.rs` the connection and backoff, `sample.rs` its `TIME` samples;
//! `timeline.rs` server time; `script.rs` and `flush.lua`, `hot_read.lua`
//! the scripts and their protocol, `resp.rs` how requests are written;
//! `bucket.rs` and `ring_read.lua` where Redis keeps the rings; `pending.rs`
//! counts taken and not yet acknowledged; `ring.rs` a key's stored window;
//! `hot.rs` the cluster hot set;
//! `group.rs` how keys spread over a Redis Cluster's slots; `build.rs` a
//! node's construction; `backoff.rs` the retry backoff;
//! `health.rs` health and counters; `config.rs` the builder; `key.rs` how
//! keys are written; `lease/` the cluster limiter ([`ClusterLimiter`]);
//! `sync.rs` the lease word's loom switch and poison-tolerant locking.
#![warn(missing_docs)]

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
#[path = "fuzz.rs"]
pub mod __fuzz;
mod acked;
mod backoff;
mod bucket;
mod build;
mod checks;
mod config;
mod error;
mod fanout;
mod flush;
mod flusher;
mod group;
mod health;
mod hot;
mod key;
mod lease;
mod link;
mod node;
mod pending;
mod probe;
mod reads;
mod resp;
mod results;
mod ring;
mod sample;
mod script;
mod seeds;
mod sync;
mod take;
mod timeline;

pub use config::{ClusterWindowsBuilder, HotCallback, MAX_CLUSTER_SLICES};
pub use error::ClusterError;
pub use health::{Health, LinkState, Stats};
pub use key::RedisKey;
pub use lease::{
    ClusterLimiter, ClusterLimiterBuilder, Grant, GrantFuture, LeaseStats, OutagePolicy, Shed,
    MAX_BATCH_KEYS, MAX_LEASE,
};
pub use node::ClusterWindows;
pub use results::{FlushReport, SumParts};
pub use timeline::{ServerTime, WallClock, DRIFT_PPM};
