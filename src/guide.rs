//! A guide to stripecount: which type to use, how time works, what each
//! method returns and guarantees, and how to use it in a service.
//!
//! # Which type
//! | you want | use | built with |
//! |---|---|---|
//! | a total, added to from many threads | [`StripedCounter`](crate::StripedCounter) | `new()` |
//! | a count over the last window | [`SlidingWindow`](crate::SlidingWindow) | `new(window, slices)` |
//! | counts over several spans (minute, hour, day) | [`MultiWindow`](crate::MultiWindow) | `new(&[(window, slices), ..])` |
//! | at most N per window, for everyone | [`RateLimiter`](crate::RateLimiter) | `new(Quota)` |
//! | several limits at once, all or nothing | [`MultiLimiter`](crate::MultiLimiter) | `new([Quota, ..])` |
//! | at most N per window, per client | [`KeyedLimiter`](crate::KeyedLimiter) | `new(Quota)` or `new([Quota, ..])` |
//! | a count per key over the last window | [`KeyedWindows`](crate::KeyedWindows) | `new(window, slices)` |
//! | the keys that cross a threshold in the window | [`HotKeyDetector`](crate::HotKeyDetector) | `new(window, slices, threshold)` |
//! | the same among more keys than memory holds | [`HotKeySketch`](crate::HotKeySketch) | `new(window, slices, threshold, memory)` |
//!
//! Every type has one constructor for the common case, `new`, and a
//! `builder` for the rest: the clock, and for the per-key types the hasher,
//! the most keys held, and what happens when they are all busy. A builder
//! validates in `build()`; both return [`ConfigError`](crate::ConfigError)
//! for a configuration that cannot work (a window that cannot be cut into
//! equal slices, zero slices, ...).
//!
//! ```
//! use stripecount::clock::ManualClock;
//! use stripecount::limiter::FloodPolicy;
//! use stripecount::{KeyedLimiter, Quota};
//!
//! let limiter: KeyedLimiter<u64, _> = KeyedLimiter::builder([Quota::per_second(10), Quota::per_hour(1000)])
//!     .clock(ManualClock::new())
//!     .max_keys(1_000_000)
//!     .flood_policy(FloodPolicy::Refuse)
//!     .build()?;
//! assert!(limiter.try_acquire(&42, 10));
//! assert!(!limiter.try_acquire(&42, 1)); // the per-second quota
//! # Ok::<(), stripecount::ConfigError>(())
//! ```
//!
//! # Method names
//! One rule everywhere:
//! - **Every operation that reads the clock has an `_at` twin** that takes
//!   the time instead, and every `_at` method has its clock-reading twin:
//!   `add`/`add_at`, `sum`/`sum_at`, `try_acquire`/`try_acquire_at`,
//!   `top`/`top_at`, `evict_idle`/`evict_idle_at`. The time comes right after
//!   the key, before the count: `add_at(&key, now, n)`.
//! - **A request has a bool form and a full form**: `try_acquire(n)` says
//!   granted or not; `decide(n)` returns the [`Decision`](crate::Decision)
//!   (why a refusal, the permits left, when to retry, when the window
//!   empties: the `Retry-After` and `RateLimit` header values). `peek(n)`
//!   is a decision that takes nothing. The count is always explicit.
//! - **An add returns what the add decided, never a read** (the table
//!   below); a method that also reads says so (`add_and_sum`).
//! - **Many keys at once**: the per-key types' `add_many_at(items, now)`
//!   and [`KeyedLimiter`](crate::KeyedLimiter)'s `try_acquire_many_at`
//!   take `(key, n)` items and one time, and do exactly what the single
//!   calls on each item in order would (a callback hears each key that
//!   became hot, or each request's verdict); with many keys on a large
//!   map they are faster, as the keys' cache misses overlap.
//! - No public method returns an internal value (slice numbers, epochs).
//!
//! | type | `add` / `add_at` returns |
//! |---|---|
//! | `StripedCounter` | `()` |
//! | `SlidingWindow`, `MultiWindow`, `KeyedWindows` | `bool`: counted (`false`: older than the window, or a key the structure could not track) |
//! | `HotKeyDetector` | `bool`: this add made the key hot (exactly one add per crossing) |
//! | `HotKeySketch` | `bool`: this add made the key hot (one add per crossing of its reported count) |
//! | limiters (`try_acquire`) | `bool`: granted |
//!
//! # Time
//! A time is a [`Timestamp`](crate::Timestamp): nanoseconds on a clock's
//! timeline. Every structure reads its [`Clock`](crate::Clock), and every
//! `_at` method takes a `Timestamp`, so that a time and a count cannot be
//! swapped. Callers that keep their own time convert with
//! [`Timestamp::from_nanos`](crate::Timestamp::from_nanos) or
//! `Timestamp::from(duration_since_origin)`.
//!
//! The clocks ([`crate::clock`]):
//! - [`MonotonicClock`](crate::clock::MonotonicClock), the default: the
//!   CPU's time-stamp counter where it is one clock for the whole machine
//!   (on Linux when the kernel's clocksource is `tsc`; elsewhere on x86_64
//!   when CPUID reports an invariant TSC), calibrated once per process
//!   against `Instant` (a 2 ms wait in the first `new()`), and `Instant`
//!   otherwise or without the default `tsc` feature. About 10 ns a read
//!   (`Instant::now()`: about 25 ns). On one thread it never goes back;
//!   across threads a read lags one it follows by less than
//!   [`MonotonicClock::MAX_LAG`](crate::clock::MonotonicClock::MAX_LAG).
//! - [`CoarseClock`](crate::clock::CoarseClock): the same timeline cached
//!   about every millisecond by one shared ticker thread; a read is one
//!   atomic load. For the hottest paths, where the clock read would cost
//!   more than the add (a window add is about 1-2 ns).
//! - [`ManualClock`](crate::clock::ManualClock): moved by hand, for tests.
//!
//! A builder starts on the default clock and `.clock(c)` changes it:
//! `KeyedLimiter::builder(q).clock(ManualClock::new())` builds a
//! `KeyedLimiter<K, ManualClock>`. `builder` itself exists on the
//! default-clock type only (a default type parameter does not pick an
//! impl), so a type named with its clock, or code generic over the clock,
//! starts from `builder_with_clock`, which every type with a clock
//! parameter has:
//!
//! ```
//! use stripecount::clock::ManualClock;
//! use stripecount::{Clock, ConfigError, KeyedLimiter, Quota};
//!
//! let lim = KeyedLimiter::<u64, ManualClock>::builder_with_clock(
//!     Quota::per_second(5),
//!     ManualClock::new(),
//! )
//! .build()?;
//! assert!(lim.try_acquire(&7, 5));
//!
//! fn limiter<C: Clock>(clock: C) -> Result<KeyedLimiter<u64, C>, ConfigError> {
//!     KeyedLimiter::builder_with_clock(Quota::per_second(5), clock).build()
//! }
//! assert!(limiter(ManualClock::new())?.try_acquire(&7, 1));
//! # Ok::<(), ConfigError>(())
//! ```
//!
//! A clock that steps back is survived: a window files an add in the slice
//! of its time (or refuses it if that slice has left the window); a
//! limiter never lets its time run backwards (a late request is judged at
//! the newest time it has seen).
//!
//! # What a limit promises
//! A [`Quota`](crate::Quota) is a limit per window, the window cut into
//! slices (10 unless set). A limiter judges a request against the permits
//! of the last slices:
//! - by default, at most `limit` in any `slices` consecutive slices, so in
//!   any span of `window - slice`; an arbitrary span of a whole window
//!   touches `slices + 1` slices and can hold up to their permits;
//! - with [`Quota::strict`](crate::Quota::strict), at most `limit` in
//!   **every** span of `window`: each request is judged against
//!   `slices + 1` slices. A client sending steadily then gets `limit` per
//!   `window + slice` (91% of the nominal rate with 10 slices, 50% with a
//!   fixed window).
//!
//! A quota of one slice is a fixed window (`[k * window, (k + 1) *
//! window)`). Many slices follow a sliding window closely and cost a word
//! of history each per key.
//!
//! # Per-key limits under pressure
//! - **Eviction never loses a grant.** An idle key (nothing in any window)
//!   is evicted by a rolling sweep that the requests themselves run (no
//!   background thread, a small share of the map per step): check idle,
//!   seal the key's state for good, check again; a grant that slipped in
//!   keeps the key. An evicted key's next state starts at the eviction's
//!   time, so no request is judged in a window that forgot its grants.
//! - **Bounded memory under a flood of keys.** `builder(..).max_keys(m)`
//!   caps the keys; when the map is full and nothing is idle, a request for
//!   a new key is refused ([`Denied::TooManyKeys`](crate::Denied::TooManyKeys):
//!   answer 503 rather than 429) or, with
//!   [`FloodPolicy::AdmitUntracked`](crate::limiter::FloodPolicy::AdmitUntracked),
//!   admitted without being counted. Either is counted
//!   (`untracked_decisions()`).
//! - **Limits per key, changed at run time.** `set_limit`, `set_key_limit`
//!   and `set_key_limits` apply to the requests that read them: a request
//!   is judged against the limits it read by the same CAS that takes its
//!   permits, so a change never over-admits and never resets a window.
//!   Overrides are operator data: not evicted, not counted in `max_keys`.
//!
//! # Keys from untrusted clients
//! The per-key structures hash keys with
//! [`hash::RandomState`](crate::hash::RandomState) unless given another
//! hasher: foldhash, about ten times SipHash's speed on small keys, under
//! seeds drawn from the operating system, a new one for every structure.
//! Client addresses, API keys and URLs are chosen by whoever sends them;
//! this is what such a sender can and cannot do to a structure bounded by
//! `max_keys` (a [`KeyedLimiter`](crate::KeyedLimiter)'s keys, a
//! [`KeyedWindows`](crate::KeyedWindows) slice's keys, a
//! [`HotKeySketch`](crate::HotKeySketch)'s memory).
//!
//! What it can do, whatever the hash:
//! - **Fill the bound.** New keys cost nothing to invent: `max_keys` of
//!   them fill a limiter, or a window's slice, and then a new key is not
//!   tracked (a limiter refuses it with
//!   [`Denied::TooManyKeys`](crate::Denied::TooManyKeys) or, with
//!   [`FloodPolicy::AdmitUntracked`](crate::limiter::FloodPolicy::AdmitUntracked),
//!   admits it uncounted; a window's add returns `false`), counted in
//!   `untracked_decisions()` and `untracked_adds()`, until the flood's keys
//!   are idle for a window (evicted) or their slice leaves it. It costs the
//!   sender one request a key a window (a slice, for windows). Memory
//!   stays at the bound. Set `max_keys` above what your own traffic holds
//!   and watch those counts.
//! - **Crowd a sketch's exact part.** A key that reaches the admission
//!   level in a slice (`admission_level()` requests) takes one of the
//!   slice's exact places; enough of them fill it, and the adds of other
//!   keys new to that slice are not tracked (`untracked_adds()`). No
//!   reported count is ever above a key's true count, whatever is sent.
//!   Size a sketch for its stream: `HotKeySketch::memory_for(window,
//!   slices, threshold, adds_per_second)` gives the memory that holds
//!   every key that can reach the threshold at that rate, and the
//!   builder's `adds_per_second` refuses less (`ConfigError::SketchMemory`).
//!   `ScrapeCollector::hot_key_sketch` exports `_untracked_total`: alert on
//!   its rate.
//! - **See the order of walks.** `take_all`, `top` among equal counts and
//!   the other walks visit keys shard by shard, an order the seed decides:
//!   do not show it to clients unsorted.
//!
//! What it cannot do with the default hasher:
//! - **Choose keys that collide.** Without the seeds, which shard, which
//!   probe group and which doorkeeper word a key lands in cannot be
//!   predicted, so lookups stay one or two control groups long (tables are
//!   at most 7/8 full) and a doorkeeper word holds its share of keys.
//! - **Carry collisions over.** Each structure has its own seed: keys found
//!   to collide in one (by timing it) do not collide in another, nor after
//!   a restart.
//!
//! foldhash is not a cryptographic hash: a sender able to time very many
//! requests and adapt its keys could learn more about a seed than SipHash
//! would ever let it. Where that is the threat, pass std's
//! `RandomState` (`.hasher(std::hash::RandomState::new())`): SipHash-1-3,
//! about 15 ns more a hash of a small key.
//!
//! With a known seed (a fixed hasher such as
//! `BuildHasherDefault<DefaultHasher>`, or foldhash's `FixedState`), keys
//! can be crafted whose hashes are equal: they all land in one shard and
//! one probe sequence, so each operation on one of them compares it with
//! every one of them held, up to `max_keys` comparisons an operation (and
//! without a bound, as many as the flood has keys). Counts, limits and
//! memory bounds still hold exactly (`tests/keyed_hash_flood.rs` floods
//! each structure so). Never give a fixed or guessable seed to a structure
//! whose keys come from clients.
//!
//! # Waiting for a permit
//! Every limiter can wait instead of refusing: a loop of one `decide(n)`
//! (all `n` permits or none) and one sleep for the refusal's
//! `retry_after`, returning the granting [`Decision`](crate::Decision).
//! - `until_ready_with(n, jitter, sleep)` on any runtime: `sleep(d)` is the
//!   runtime's timer (`tokio::time::sleep`, `async_io::Timer::after`,
//!   `futures_timer::Delay::new`, ...). Per key: `until_ready_with(&key,
//!   n, jitter, sleep)`.
//! - With the `tokio` feature: `until_ready(n)` and
//!   `until_ready_jittered(n, jitter)` sleep on tokio's timer, and
//!   `clock::TokioClock` puts the limiter on tokio's time, so tests on
//!   tokio's paused clock are exact and take no time.
//!
//! A wait is cancel-safe: a grant returns from the poll that took it, so a
//! waiter dropped at any await point (a timeout, a `select!`) has taken
//! nothing. There is no queue and no fairness: waiters woken together
//! compete for the room, and the limit decides. A request that can never
//! fit (`n` above the limit) or a key the limiter cannot track
//! ([`Denied::TooManyKeys`](crate::Denied::TooManyKeys)) is an error at
//! once, not a wait. A [`Jitter`](crate::limiter::Jitter) adds a random
//! delay to each sleep, so waiters refused together do not all wake
//! together. There is no `_at` twin: a wait reads the limiter's clock after
//! each sleep.
//!
//! ```
//! use std::time::Duration;
//! use stripecount::clock::ManualClock;
//! use stripecount::limiter::Jitter;
//! use stripecount::{Clock, Quota, RateLimiter};
//!
//! let clock = ManualClock::new();
//! let lim = RateLimiter::builder(Quota::per_second(10).slices(1)).clock(clock.clone()).build()?;
//! assert!(lim.try_acquire(10));
//! // Any executor and any timer; here the sleep moves the manual clock.
//! let sleep = |d: Duration| {
//!     clock.advance(d);
//!     std::future::ready(())
//! };
//! let jitter = Jitter::up_to(Duration::from_millis(50));
//! let d = futures_executor::block_on(lim.until_ready_with(5, jitter, sleep)).unwrap();
//! assert_eq!(d.remaining(), 5);
//! // The window emptied at 1 s; the jitter added up to 50 ms.
//! assert!(clock.now().as_duration() < Duration::from_millis(1050));
//! # Ok::<(), stripecount::ConfigError>(())
//! ```
//!
//! # Guarantees
//! - **Exact.** `sum_at(now)` counts the adds whose slice is one of the
//!   `slices` ending at now's: exact at or after the newest add, also when
//!   adds raced the recycling of a slot.
//! - **Nothing lost, doubled or misfiled.** An add older than the window is
//!   refused and reported (`add_at` returns `false`), never filed under
//!   another slice.
//! - **Lock-free adds.** No lock and no waiting on any add path of the
//!   counters, windows and limiters; a retry only follows another thread's
//!   successful CAS. Per-key adds and requests on a held key take no lock;
//!   a key's first add in a slice inserts it under one shard lock. Some
//!   reads wait briefly: a `MultiWindow` sum over a coarse level, and a
//!   per-key read while the key moves to a bigger table.
//! - **Saturating.** Counters saturate at `u64::MAX`; a slice's count per
//!   stripe at [`MAX_COUNT_PER_SLICE`](crate::window::MAX_COUNT_PER_SLICE).
//! - **Your code may panic.** A key's `Hash`, `Eq`, `Clone` or `Drop`, a
//!   hasher, a clock or a `take`/`take_all` callback that panics leaves
//!   every structure whole: no key leaked, every `max_keys` place given
//!   back, every count delivered or still held, never both. Two places
//!   cannot be left half done and abort the process instead, saying why: a
//!   `Clone` or `Hash` that panics while a shard moves to a bigger table,
//!   and an `Eq` that panics while a `HotKeyDetector` marks a heavy key's
//!   slices. Callbacks run under no lock: they may call back in.
//! - **Walks end.** A walk (`take_all`, `top`, `hot_keys`, and the
//!   detectors' and sketch's reads) visits the keys held when it started,
//!   each once, and no other: keys its callback, the key type's code or
//!   other threads add meanwhile are left for the next walk, so a callback
//!   that adds keys cannot make it run forever.
//! - **Bounded memory.** An uncontended window holds 16 bytes per slice
//!   plus a small header; stripes are added only under contention. Per-key
//!   structures keep one map per live slice, about 43 bytes a key for 1M
//!   `u64` keys, and drop a slice whole when it leaves the window.
//!
//! # In a service
//! ## Metrics: the `metrics` facade (feature `metrics`)
//! A [`StripedCounter`](crate::StripedCounter) is a `metrics` counter: a
//! recorder can hand it out where it would hand out an `Arc<AtomicU64>`
//! (see `stripecount::metrics`).
//!
//! ## Prometheus: `prometheus-client` (feature `prometheus`)
//! `Counter<u64, StripedCounter>` registers like any counter, and a
//! `ScrapeCollector` exports windows' sums and rates and a
//! `KeyedLimiter`'s keys, refusals and untracked decisions, read at scrape
//! time. Serve the body with the OpenMetrics content type,
//! `stripecount::prometheus::CONTENT_TYPE`
//! (`application/openmetrics-text; version=1.0.0; charset=utf-8`): served
//! as classic text, Prometheus reads the counters as untyped. See
//! `stripecount::prometheus` and `examples/prometheus_server.rs`.
//!
//! ## HTTP and gRPC: `stripecount-tower`
//! A tower layer for axum, hyper and tonic: a key extractor (`PeerIp`,
//! `ClientIp` for the client behind trusted proxies, a `Header`, `Global`,
//! a closure), `429 Too Many Requests` with `Retry-After` and the IETF
//! `RateLimit` / `RateLimit-Policy` fields (or, with `grpc_response`,
//! gRPC's `RESOURCE_EXHAUSTED` and its retry delay), and `skip_if` for
//! requests that pass unlimited. The limiter behind it is a
//! `KeyedLimiter`, a `RateLimiter` for the whole service, or (feature
//! `redis`) a `ClusterLimiter` for a limit across the fleet: one line to
//! change. Its `RateLimit-Policy` `w` is the quota's window: with a strict
//! quota the limit holds in every span of `w`. Callers who would rather
//! queue wait on the limiter itself ([below](#waiting-for-a-permit)). See
//! <https://docs.rs/stripecount-tower>.
//!
//! ## Across a fleet: `stripecount-redis`
//! `ClusterWindows` (per-key windows whose adds stay local and lock-free,
//! flushed to Redis exactly once, on Redis server time, with cluster hot
//! keys) and `ClusterLimiter` (a per-key limit across every node, leasing
//! permits from Redis; never over the limit in a window whatever the
//! nodes' clocks say). Settings the server cannot serve fail the build
//! with a typed error: a Redis Cluster node without `redis_cluster(n)`
//! (`ClusterNode`), a master with fewer replicas than `wait_for_replicas`
//! asks (`TooFewReplicas`; later it shows in `health().replicas_short`).
//! After a failover the promoted replica has none until one rejoins it:
//! keep a spare replica a master with `wait_for_replicas`. See
//! <https://docs.rs/stripecount-redis>.
//!
//! # Why not the usual sliding window
//! The usual window is a ring of time slices (a "leap array"). The
//! published versions lose or misfile counts under concurrency:
//!
//! | the naive design | what goes wrong | what stripecount does |
//! |---|---|---|
//! | publish a slot's new start time, then zero its count | an add that saw the new start is wiped by the zeroing | a slot's epoch and count change in one CAS |
//! | zero the count, then publish the start | an add of the old slice lands in the new one | the same |
//! | zero striped cells in place (`load`, then `store(0)`) | an add between the two is lost | `swap(0)` per cell |
//! | a lock per slot, tryLock and yield | the hottest keys get the most contended locks | CAS only; the CAS winner cleans, everyone else carries on |
//! | a limiter that checks the sum and adds later | it overshoots the limit under load | one CAS reserves |
//! | an add that reads `Instant::now()` | the clock read costs 20 times the add | a TSC clock, a coarse clock and `add_at(now)` |
//!
//! Each naive design is kept in the loom suite as a model loom is required
//! to catch, so the suites are known to be able to fail.
