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
//!   updates existing rings (the steady state).
//!
//! ```text
//! cargo bench -p stripecount-redis --bench cluster -- --warm-up-time 1 --measurement-time 2
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::{Duration, Instant};
use stripecount::KeyedWindows;
use stripecount_redis::{ClusterWindows, WallClock};
use support::RedisServer;

const KEYS: u64 = 4096;

fn node(url: &str, ns: &str, flush: Option<Duration>) -> ClusterWindows<u64> {
    ClusterWindows::builder(url, ns)
        .window(Duration::from_secs(600), 10)
        .flush_interval(flush)
        .build()
        .expect("a node")
}

fn add(c: &mut Criterion) {
    let redis = RedisServer::start();
    let mut g = c.benchmark_group("redis_add");
    g.throughput(Throughput::Elements(1));
    let local: KeyedWindows<u64, WallClock> =
        KeyedWindows::with_clock(Duration::from_secs(600), 10, WallClock::new()).unwrap();
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
        g.throughput(Throughput::Elements(n));
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
    g.finish();
}

criterion_group!(benches, add, flush);
criterion_main!(benches);
