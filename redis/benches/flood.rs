//! A fleet-wide limiter under a flood of new keys: `ClusterLimiter::decide`
//! from 1, 2, 8 and 64 caller threads, against a local `KeyedLimiter` on
//! the same key streams in the same run, on a redis-server the bench
//! starts (as the tests do). Not criterion: each row runs its callers for a
//! fixed time and records every request's latency.
//!
//! Shapes:
//! - `new`: every request a key never seen before (a crawler, a botnet, a
//!   cold start); 10^6 per 10 s per key, so each is granted (and a new
//!   key's lease is the one permit its request takes). Beside the callers
//!   a warm client decides on 8 keys of its own (primed), one request
//!   every ~100 us: its latencies (`warm` columns) are what a client the
//!   node already serves sees during the flood.
//! - `warm`: requests spread over 4,096 keys this node already leases
//!   (each asked twice before the run), a limit never reached, slices of
//!   a minute: the hot path, with a renewal when a lease runs out.
//!
//! Per row: decides a second, latency percentiles (each request timed on
//! its thread with `Instant`), round trips a request (`LeaseStats`), the
//! Redis time a key leased (the lease script's `INFO commandstats` time
//! over the keys it leased or refused), the node's threads (counted in
//! `/proc/self/task` during the run, less the callers and the bench's
//! own), and for `new` the heap the limiter holds per new key after the
//! run (a counting allocator; the limiter still alive).
//!
//! Callers start together at a barrier after their threads are up; the
//! time starts there. Each configuration runs `BENCH_FLOOD_RUNS` times
//! (default 2), cluster and local alternating.
//!
//! `BENCH_FLOOD_ONLY=cluster` (or `local`) runs one limiter only (for a
//! profile); `BENCH_FLOOD_RENEW=1` builds the cluster limiters with
//! `renew_early(true)`.
//!
//! ```text
//! cargo bench -p stripecount-redis --bench flood
//! BENCH_FLOOD_SECS=2 BENCH_FLOOD_CALLERS="1 64" BENCH_FLOOD_SHAPES=new cargo bench -p stripecount-redis --bench flood
//! ```

#[path = "../../benches/counting_alloc.rs"]
mod counting_alloc;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use stripecount::{KeyedLimiter, Quota};
use stripecount_redis::{ClusterLimiter, WallClock};
use support::RedisServer;

const WARM_KEYS: u64 = 4096;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not valid"))
        })
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    New,
    Warm,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::New => "new",
            Shape::Warm => "warm",
        }
    }

    fn quota(self) -> Quota {
        match self {
            Shape::New => Quota::per(1_000_000, Duration::from_secs(10)),
            Shape::Warm => Quota::per(1 << 40, Duration::from_secs(3600)).slices(60),
        }
    }

    /// Caller `t`'s `i`-th key.
    fn key(self, t: usize, i: u64) -> u64 {
        match self {
            Shape::New => ((t as u64 + 1) << 40) | i,
            Shape::Warm => (i.wrapping_mul(0x9E37_79B9) ^ t as u64) % WARM_KEYS,
        }
    }
}

/// Either limiter, deciding one permit.
enum Lim {
    Cluster(ClusterLimiter<u64>),
    Local(Box<KeyedLimiter<u64, WallClock>>),
}

impl Lim {
    fn decide(&self, k: &u64) -> bool {
        match self {
            Lim::Cluster(l) => l.decide(k, 1).is_granted(),
            Lim::Local(l) => l.decide(k, 1).is_granted(),
        }
    }
}

struct Row {
    shape: Shape,
    config: &'static str,
    callers: usize,
    decides: u64,
    granted: u64,
    secs: f64,
    lat_ns: Vec<u32>,
    round_trips: Option<u64>,
    keys_leased: Option<u64>,
    redis_us: Option<u64>,
    threads: usize,
    heap_per_key: Option<f64>,
    /// The warm client's latencies (ns, sorted), in `new`.
    warm: Vec<u32>,
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1_000.0
}

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Microseconds the lease script ran in Redis since the last reset.
fn evalsha_usec(redis: &RedisServer) -> u64 {
    let mut c = redis.conn();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec=")))
        .and_then(|u| u.parse().ok())
        .unwrap_or(0)
}

fn reset_stats(redis: &RedisServer) {
    let mut c = redis.conn();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
}

fn run_row(redis: &RedisServer, shape: Shape, cluster: bool, callers: usize, ns: &str) -> Row {
    let secs: f64 = env_or("BENCH_FLOOD_SECS", 2.0);
    let heap0 = counting_alloc::live_bytes();
    let lim = if cluster {
        Lim::Cluster(
            ClusterLimiter::builder(&redis.url(), ns, shape.quota())
                .renew_early(std::env::var("BENCH_FLOOD_RENEW").is_ok_and(|v| v == "1"))
                .build()
                .expect("a limiter"),
        )
    } else {
        Lim::Local(Box::new(
            KeyedLimiter::builder(shape.quota())
                .clock(WallClock::new())
                .build()
                .expect("a limiter"),
        ))
    };
    if shape == Shape::Warm {
        for k in 0..WARM_KEYS {
            assert!(lim.decide(&k) && lim.decide(&k));
        }
    }
    let lim = Arc::new(lim);
    let before = match &*lim {
        Lim::Cluster(l) => Some(l.stats()),
        Lim::Local(_) => None,
    };
    reset_stats(redis);
    let base_threads = threads_now();
    let start = Arc::new(Barrier::new(callers + 2));
    let stop = Arc::new(AtomicBool::new(false));
    let warm = {
        let (lim, start, stop) = (Arc::clone(&lim), Arc::clone(&start), Arc::clone(&stop));
        std::thread::spawn(move || {
            let keys: Vec<u64> = (0..8).map(|k| u64::MAX - k).collect();
            if shape == Shape::New {
                for _ in 0..3 {
                    for k in &keys {
                        lim.decide(k);
                    }
                }
            }
            let mut lat = Vec::new();
            start.wait();
            let mut i = 0;
            while shape == Shape::New && !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                lim.decide(&keys[i % keys.len()]);
                lat.push(u32::try_from(t0.elapsed().as_nanos()).unwrap_or(u32::MAX));
                i += 1;
                std::thread::sleep(Duration::from_micros(100));
            }
            lat
        })
    };
    let hs: Vec<_> = (0..callers)
        .map(|t| {
            let (lim, start, stop) = (Arc::clone(&lim), Arc::clone(&start), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(1 << 16);
                let mut granted = 0u64;
                let mut i = 0u64;
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let k = shape.key(t, i);
                    i += 1;
                    let t0 = Instant::now();
                    granted += u64::from(lim.decide(&k));
                    lat.push(u32::try_from(t0.elapsed().as_nanos()).unwrap_or(u32::MAX));
                }
                (lat, granted)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs / 2.0));
    // The limiter's threads: all but this one, the callers and the warm
    // client.
    let threads = threads_now()
        .saturating_sub(base_threads)
        .saturating_sub(callers + 1)
        + base_threads.saturating_sub(1);
    std::thread::sleep(Duration::from_secs_f64(secs / 2.0));
    stop.store(true, Ordering::Relaxed);
    let mut lat_ns = Vec::new();
    let mut granted = 0;
    for h in hs {
        let (l, g) = h.join().unwrap();
        lat_ns.extend(l);
        granted += g;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let mut warm = warm.join().unwrap();
    warm.sort_unstable();
    let decides = lat_ns.len() as u64;
    lat_ns.sort_unstable();
    let (round_trips, keys_leased, redis_us) = match (&*lim, before) {
        (Lim::Cluster(l), Some(b)) => {
            let s = l.stats();
            (
                Some(s.round_trips - b.round_trips),
                Some(s.leases - b.leases + s.refusals - b.refusals),
                Some(evalsha_usec(redis)),
            )
        }
        _ => (None, None, None),
    };
    let heap_per_key = (shape == Shape::New)
        .then(|| (counting_alloc::live_bytes() - heap0) as f64 / decides.max(1) as f64);
    drop(lim);
    Row {
        shape,
        config: if cluster { "cluster" } else { "local" },
        callers,
        decides,
        granted,
        secs: elapsed,
        lat_ns,
        round_trips,
        keys_leased,
        redis_us,
        threads,
        heap_per_key,
        warm,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The table's header: printed, and written to `$BENCH_MD` when set (the
/// file `scripts/bench-table.py` puts in BENCHMARKS.md).
const HEAD: &str = "| shape | callers | run | limiter | decides/s | granted | p50 us | p99 us | p99.9 us | max us | round trips / decide | keys / round trip | Redis us / key | threads | heap B / key | cluster / local | warm p50 / p99.9 / max us |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

fn print_row(r: &Row, run: usize, local_rate: f64, md: &mut String) {
    let rate = r.decides as f64 / r.secs;
    let cluster = r.config == "cluster";
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let per = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let line = format!(
        "| {} | {} | {} | {} | {:.0} | {:.4} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
        r.shape.name(),
        r.callers,
        run,
        r.config,
        rate,
        per(r.granted, r.decides),
        pct(&r.lat_ns, 0.50),
        pct(&r.lat_ns, 0.99),
        pct(&r.lat_ns, 0.999),
        pct(&r.lat_ns, 1.0),
        opt(r.round_trips.map(|t| format!("{:.4}", per(t, r.decides)))),
        opt(r.round_trips.zip(r.keys_leased).map(|(t, k)| format!("{:.1}", per(k, t)))),
        opt(r.redis_us.zip(r.keys_leased).map(|(u, k)| format!("{:.2}", per(u, k)))),
        if cluster { r.threads.to_string() } else { "-".into() },
        opt(r.heap_per_key.map(|h| format!("{h:.0}"))),
        if cluster { format!("{:.2}", rate / local_rate) } else { "-".into() },
        if r.warm.is_empty() {
            "-".into()
        } else {
            format!(
                "{:.1} / {:.1} / {:.1}",
                pct(&r.warm, 0.5),
                pct(&r.warm, 0.999),
                pct(&r.warm, 1.0)
            )
        },
    );
    println!("{line}");
    md.push_str(&line);
    md.push('\n');
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the
    // command line.
    let runs: usize = env_or("BENCH_FLOOD_RUNS", 2);
    let callers: Vec<usize> = std::env::var("BENCH_FLOOD_CALLERS")
        .unwrap_or_else(|_| "1 2 8 64".into())
        .split_whitespace()
        .map(|c| c.parse().expect("BENCH_FLOOD_CALLERS: numbers"))
        .collect();
    let shapes: Vec<Shape> = std::env::var("BENCH_FLOOD_SHAPES")
        .unwrap_or_else(|_| "new warm".into())
        .split_whitespace()
        .map(|s| match s {
            "new" => Shape::New,
            "warm" => Shape::Warm,
            _ => panic!("BENCH_FLOOD_SHAPES: new or warm"),
        })
        .collect();
    let redis = RedisServer::start();
    let before = loadavg();
    println!("load before: {before}");
    println!("{HEAD}");
    let mut md = format!("{HEAD}\n");
    let mut n = 0;
    for &shape in &shapes {
        for &c in &callers {
            for run in 1..=runs {
                let only = std::env::var("BENCH_FLOOD_ONLY").unwrap_or_default();
                let rows: Vec<Row> = [true, false]
                    .into_iter()
                    .filter(|&c| only.is_empty() || (only == "cluster") == c)
                    .map(|cluster| {
                        n += 1;
                        run_row(&redis, shape, cluster, c, &format!("flood{n}"))
                    })
                    .collect();
                let local = rows
                    .iter()
                    .find(|r| r.config == "local")
                    .map_or(f64::NAN, |r| r.decides as f64 / r.secs);
                for r in &rows {
                    print_row(r, run, local, &mut md);
                }
            }
        }
    }
    let after = loadavg();
    println!("load after: {after}");
    if let Ok(path) = std::env::var("BENCH_MD") {
        md.push_str(&format!(
            "\nLoad average (1, 5, 15 min) before: {before}; after: {after}.\n"
        ));
        std::fs::write(&path, md).expect("writing BENCH_MD");
    }
}
