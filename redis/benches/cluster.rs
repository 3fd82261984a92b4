//! The cluster layer's costs, against a local redis-server the bench
//! starts (as the tests do):
//!
//! - `redis_add`: a node's add (`ClusterWindows::add`) against the local
//!   `KeyedWindows::add` it wraps, on the same clock and key stream
//!   (target: >= 0.9x). `cluster_flushing` runs the background flusher
//!   every 100 ms meanwhile (its takes race the adds).
//! - `redis_flush`: one `flush()` of N keys with one (key, slice) delta
//!   each, timed alone (the adds before it are not), in batches of the
//!   default 1024 keys: throughput in key-deltas per second (target: at
//!   least 500k/s). Each iteration flushes the same keys again, so Redis
//!   updates existing rings (the steady state). After each size, the bench
//!   prints the Redis time per key-delta: the flush script's time in
//!   Redis's `INFO commandstats` (`cmdstat_evalsha`, reset before the size)
//!   over the key-deltas the node flushed meanwhile.
//!
//! - `redis_cluster_flush`: the same flush to a Redis Cluster of 3 masters
//!   (no replicas) on this machine, the node in 16 groups (one batch a
//!   group a flush; the masters at once, a master's groups in turn).
//!   Printed after each size: Redis's time per key-delta summed over the
//!   masters, and each master's share: what N masters on N machines could
//!   take in parallel is about N times one master's rate (on this machine
//!   the masters and the node share its cores).
//!
//! - `redis_flush_script`: the flush script alone, the current one against
//!   the one it replaced, in the same run (`script/baseline.rs`).
//!
//! - `redis_lease`: a cluster limiter's grant from a held lease
//!   (`ClusterLimiter::try_acquire_at`) against the local
//!   `KeyedLimiter::try_acquire_at`, one permit at a time over the same
//!   4096 keys and a time read once (target: >= 0.8x). The limit is never
//!   reached and a lease lasts the day's slice, so the leases refill (one
//!   round trip per key every `MAX_LEASE` grants) but never refuse.
//!   `refused_from_memo`: a refusal of a key Redis refused for the day,
//!   from the refusal memo (no round trip, no lock); `refused_round_trip`:
//!   the same with the memo off (a round trip per refusal).
//!
//! ```text
//! cargo bench -p stripecount-redis --bench cluster -- --warm-up-time 1 --measurement-time 2
//! cargo bench -p stripecount-redis --bench cluster -- redis_lease --warm-up-time 1 --measurement-time 2
//! ```

#[path = "script/baseline.rs"]
mod script_baseline;
#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::{Duration, Instant};
use stripecount::{Clock, KeyedLimiter, KeyedWindows, Quota};
use stripecount_redis::{ClusterLimiter, ClusterWindows, WallClock, MAX_LEASE};
use support::cluster::RedisCluster;
use support::RedisServer;

const KEYS: u64 = 4096;

fn node(url: &str, ns: &str, flush: Option<Duration>) -> ClusterWindows<u64> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(flush)
        .build()
        .expect("a node")
}

fn add(c: &mut Criterion) {
    let redis = RedisServer::start();
    let mut g = c.benchmark_group("redis_add");
    g.throughput(Throughput::Elements(1));
    let local: KeyedWindows<u64, WallClock> = KeyedWindows::builder(Duration::from_secs(600), 10)
        .clock(WallClock::new())
        .build()
        .unwrap();
    let cluster = node(&redis.url(), "bench_add", None);
    let flushing = node(&redis.url(), "bench_add2", Some(Duration::from_millis(100)));
    for k in 0..KEYS {
        local.add(&k, 1);
        cluster.add(&k, 1);
        flushing.add(&k, 1);
    }
    let mut i = 0u64;
    g.bench_function("keyed_windows", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(local.add(&black_box(i), 1))
        })
    });
    g.bench_function("cluster", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(cluster.add(&black_box(i), 1))
        })
    });
    g.bench_function("cluster_flushing", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(flushing.add(&black_box(i), 1))
        })
    });
    g.finish();
}

fn flush(c: &mut Criterion) {
    let redis = RedisServer::start();
    let mut g = c.benchmark_group("redis_flush");
    g.sample_size(10);
    for n in [1_000u64, 20_000] {
        let node = node(&redis.url(), "bench_flush", None);
        let mut conn = redis.conn();
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(&mut conn)
            .expect("CONFIG RESETSTAT");
        let flushed = node.stats().key_deltas_flushed;
        g.throughput(Throughput::Elements(n));
        time_flushes(&mut g, &node, n);
        let usec = evalsha_usec(&mut conn);
        let key_deltas = node.stats().key_deltas_flushed - flushed;
        // Nothing ran if a filter skipped this size.
        if key_deltas > 0 {
            println!(
                "redis_flush/key_deltas_{n}: Redis time {:.3} us per key-delta (evalsha {usec} us / {key_deltas} key-deltas)",
                usec as f64 / key_deltas as f64
            );
        }
    }
    g.finish();
}

fn flush_script(c: &mut Criterion) {
    let redis = RedisServer::start();
    script_baseline::script(c, &redis);
}

fn lease(c: &mut Criterion) {
    let redis = RedisServer::start();
    let mut g = c.benchmark_group("redis_lease");
    g.throughput(Throughput::Elements(1));
    let day = Duration::from_secs(86_400);
    let limit = 1 << 50;
    let quota = Quota::per(limit, day).slices(1);
    let local: KeyedLimiter<u64, WallClock> = KeyedLimiter::builder(quota)
        .clock(WallClock::new())
        .build()
        .unwrap();
    let cluster: ClusterLimiter<u64> = ClusterLimiter::builder(&redis.url(), "bench_lease", quota)
        .max_batch(MAX_LEASE)
        .build()
        .expect("a limiter");
    // A full lease of every key: a first lease of 1 runs out at once, and
    // the next is sized to that rate (capped at MAX_LEASE).
    for k in 0..KEYS {
        assert!(cluster.try_acquire(&k, 1));
        assert!(cluster.try_acquire(&k, 1));
        assert!(local.try_acquire(&k, 1));
    }
    let mut i = 0u64;
    let now = local.clock().now();
    g.bench_function("keyed_limiter", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(local.try_acquire_at(&black_box(i), now, 1))
        })
    });
    let now = cluster.now();
    g.bench_function("cluster_lease", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(cluster.try_acquire_at(&black_box(i), now, 1))
        })
    });
    // A refused key (1 permit a day, taken): refused by the refusal memo,
    // and with the memo off, by a round trip each.
    let full = Quota::per(1, day).slices(1);
    let refused = |memo: bool| -> ClusterLimiter<u64> {
        ClusterLimiter::builder(&redis.url(), "bench_refused", full)
            .refusal_memo(memo)
            .build()
            .expect("a limiter")
    };
    let (memo, no_memo) = (refused(true), refused(false));
    assert!(memo.try_acquire(&0, 1));
    assert!(!memo.try_acquire(&0, 1));
    let now = memo.now();
    g.bench_function("refused_from_memo", |b| {
        b.iter(|| black_box(memo.try_acquire_at(&black_box(0), now, 1)))
    });
    g.bench_function("refused_round_trip", |b| {
        b.iter(|| black_box(no_memo.try_acquire_at(&black_box(0), now, 1)))
    });
    let (m, r) = (memo.stats(), no_memo.stats());
    println!(
        "redis_lease: refused by the memo {} times with {} round trips; without it, {} round trips",
        m.memo_refusals, m.round_trips, r.round_trips
    );
    g.finish();
}

/// Times `node.flush()` of `n` keys with one delta each (the adds before
/// it are not timed), as `key_deltas_{n}` in `g`.
fn time_flushes(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    node: &ClusterWindows<u64>,
    n: u64,
) {
    g.bench_function(format!("key_deltas_{n}"), |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let now = node.now();
                for k in 0..n {
                    node.add_at(&k, now, 1);
                }
                let t = Instant::now();
                let r = node.flush().expect("a flush");
                spent += t.elapsed();
                assert_eq!(r.key_deltas, n);
            }
            spent
        })
    });
}

/// Redis's `evalsha` time in microseconds, from `INFO commandstats` (0
/// if it ran none).
fn evalsha_usec(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec=")))
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
}

fn cluster_flush(c: &mut Criterion) {
    let cluster = RedisCluster::start(3, 0);
    let mut g = c.benchmark_group("redis_cluster_flush");
    g.sample_size(10);
    for n in [1_000u64, 20_000] {
        let node = ClusterWindows::<u64>::builder(
            &cluster.url(0),
            "bench_cluster_flush",
            Duration::from_secs(600),
            10,
        )
        .redis_cluster(16)
        .seeds([cluster.url(1), cluster.url(2)])
        .flush_interval(None)
        .build()
        .expect("a node");
        for i in 0..cluster.nodes.len() {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .exec(&mut cluster.conn(i))
                .expect("CONFIG RESETSTAT");
        }
        let flushed = node.stats().key_deltas_flushed;
        g.throughput(Throughput::Elements(n));
        time_flushes(&mut g, &node, n);
        let key_deltas = node.stats().key_deltas_flushed - flushed;
        if key_deltas > 0 {
            let per: Vec<u64> = (0..cluster.nodes.len())
                .map(|i| evalsha_usec(&mut cluster.conn(i)))
                .collect();
            let total: u64 = per.iter().sum();
            println!(
                "redis_cluster_flush/key_deltas_{n}: Redis time {:.3} us per key-delta over 3 masters (evalsha us per master: {per:?}, {key_deltas} key-deltas)",
                total as f64 / key_deltas as f64
            );
        }
    }
    g.finish();
}

criterion_group!(benches, add, flush, cluster_flush, flush_script, lease);
criterion_main!(benches);
