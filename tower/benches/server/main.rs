//! Requests a second through a real HTTP server, with and without a rate
//! limit layer, against tower-governor.
//!
//! One axum server on 127.0.0.1 (one route, `GET /` answering `ok`),
//! served by a tokio runtime of its own with 1 worker thread; a load
//! generator on another runtime with 1 worker thread: `C` HTTP/1.1
//! keep-alive connections (hyper's client connection, one each), each
//! sending requests back to back with an `x-api-key` header drawn from `K`
//! keys (a seeded xorshift per connection). First the connections open
//! and every key gets three requests (connection `i` sends keys `i`,
//! `i + C`, ..., three times over), then a warm-up, then responses are
//! counted by status for `D` seconds. Every run starts a new server and a
//! new limiter.
//!
//! Rows (configuration, each on the router `app` builds around its layer):
//! - `none`: no rate limit layer: the floor.
//! - `stripecount`: `KeyedRateLimitLayer` on a `KeyedLimiter<String>`,
//!   keyed by `Header` (borrowed from the request).
//! - `tower-governor`: tower-governor's `GovernorLayer` keyed by the same
//!   header (its `KeyExtractor`, an owned `String` a request), on the
//!   GCRA quota of the same rate (`period = window / limit`, `burst =
//!   limit`).
//! - `stripecount-cluster`: `KeyedRateLimitLayer` on a
//!   `stripecount_redis::ClusterLimiter<String>` (a fleet-wide limit), on a
//!   redis-server the bench starts (it fails if `redis-server` is not on
//!   the PATH).
//!
//! Shapes:
//! - `granted`: 10^9 per hour per key (60 slices of a minute): nothing is
//!   refused. The cluster limiter grants from its leases: the first of a
//!   key is one permit, the next ones sized to the key's rate (at most
//!   1024), so after the first requests a key needs a round trip only when
//!   its lease runs out or a new slice begins (every minute).
//! - `refusing`: 1 per minute per key: each key's first request (before
//!   the warm-up) is granted, every later one refused with a 429. The
//!   cluster limiter asks Redis once a key, then refuses from its memo
//!   until the retry time.
//! - `flood`: every request a key never seen before (a crawler, a
//!   botnet, a cold start; no priming), 10^6 per 10 s per key, so nothing
//!   is refused: for the cluster limiter, every request needs Redis. A
//!   warm client runs beside the load on a connection of its own (8 keys,
//!   primed), and its requests' latencies are reported, with the
//!   process's threads half-way through the run.
//!
//! A row is valid only if its shape held (`granted`: no refusal;
//! `refusing`: at least 99% refused; no other status in either); the
//! table says so. Each shape runs every configuration twice, interleaved
//! (none, ours, governor, cluster, none, ours, ...), and the ratios are
//! per run. Also written as JSON to `$BENCH_SERVER_JSON`, by default
//! `<target>/benchmarks/server.json` (what `scripts/bench-table.py`
//! renders).
//!
//! Run (`BENCH_SERVER_CONNECTIONS`, default 32; `BENCH_SERVER_KEYS`, 1000;
//! `BENCH_SERVER_SECS`, 2; `BENCH_SERVER_WARMUP`, 0.5; `BENCH_SERVER_SHAPES`,
//! `granted refusing flood`):
//! `cargo bench -p stripecount-tower --features redis --bench server`

mod load;
#[path = "../../../redis/tests/support/mod.rs"]
mod redis_support;

use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::{get, Route};
use axum::Router;
use http::{HeaderName, HeaderValue, Request};
use load::{measure, Counts};
use redis_support::RedisServer;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use stripecount::{KeyedLimiter, Quota};
use stripecount_redis::ClusterLimiter;
use stripecount_tower::{Header, KeyedRateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::{GovernorError, GovernorLayer};
use tower_layer::{Identity, Layer};
use tower_service::Service;

const KEY_HEADER: &str = "x-api-key";

/// The shapes, from `BENCH_SERVER_SHAPES` (default all three).
static SHAPES: std::sync::LazyLock<Vec<Shape>> = std::sync::LazyLock::new(|| {
    std::env::var("BENCH_SERVER_SHAPES")
        .unwrap_or_else(|_| "granted refusing flood".into())
        .split_whitespace()
        .map(|s| match s {
            "granted" => Shape::Granted,
            "refusing" => Shape::Refusing,
            "flood" => Shape::Flood,
            _ => panic!("BENCH_SERVER_SHAPES: granted, refusing or flood"),
        })
        .collect()
});

/// The load, from the environment.
struct Load {
    connections: usize,
    keys: usize,
    secs: f64,
    warmup: f64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a valid number")),
        Err(_) => default,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Granted,
    Refusing,
    Flood,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Granted => "granted",
            Shape::Refusing => "refusing",
            Shape::Flood => "flood",
        }
    }

    /// Every limiter's quota per key.
    fn quota(self) -> Quota {
        match self {
            Shape::Granted => Quota::per(1_000_000_000, Duration::from_secs(3600)).slices(60),
            Shape::Refusing => Quota::per_minute(1),
            Shape::Flood => Quota::per(1_000_000, Duration::from_secs(10)),
        }
    }

    /// Whether `c` is what this shape is meant to measure.
    fn holds(self, config: Config, c: &Counts) -> bool {
        if c.other > 0 || c.total() == 0 {
            return false;
        }
        match (self, config) {
            (Shape::Granted | Shape::Flood, _) | (Shape::Refusing, Config::None) => c.refused == 0,
            (Shape::Refusing, _) => c.refused as f64 >= 0.99 * c.total() as f64,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Config {
    None,
    Stripecount,
    Governor,
    Cluster,
}

const CONFIGS: [Config; 4] = [
    Config::None,
    Config::Stripecount,
    Config::Governor,
    Config::Cluster,
];

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::None => "none",
            Config::Stripecount => "stripecount",
            Config::Governor => "tower-governor",
            Config::Cluster => "stripecount-cluster",
        }
    }
}

/// The server every configuration runs: one trivial route, under `layer`.
fn app<L>(layer: L) -> Router
where
    L: Layer<Route> + Clone + Send + Sync + 'static,
    L::Service: Service<Request<Body>> + Clone + Send + Sync + 'static,
    <L::Service as Service<Request<Body>>>::Response: IntoResponse + 'static,
    <L::Service as Service<Request<Body>>>::Error: Into<Infallible> + 'static,
    <L::Service as Service<Request<Body>>>::Future: Send + 'static,
{
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

fn api_key() -> Header {
    Header::new(HeaderName::from_static(KEY_HEADER))
}

/// tower-governor's key: the same header, as an owned `String` (its
/// limiter looks keys up by `&K`).
#[derive(Clone)]
struct GovernorApiKey;

impl tower_governor::key_extractor::KeyExtractor for GovernorApiKey {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, GovernorError> {
        req.headers()
            .get(KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// The router of `config` in `shape`, on a new limiter (a new namespace
/// of `redis` for the cluster limiter).
fn router(config: Config, shape: Shape, redis: &RedisServer, namespace: &str) -> Router {
    let quota = shape.quota();
    match config {
        Config::None => app(Identity::new()),
        Config::Stripecount => {
            let limiter = KeyedLimiter::<String>::new(quota).expect("a valid quota");
            app(KeyedRateLimitLayer::new(limiter, api_key()))
        }
        Config::Governor => {
            // The same rate as a GCRA: one permit every window / limit,
            // bursts of the whole limit.
            let period = quota.window() / u32::try_from(quota.limit()).expect("a u32 limit");
            let config = GovernorConfigBuilder::default()
                .key_extractor(GovernorApiKey)
                .period(period)
                .burst_size(quota.limit() as u32)
                .finish()
                .expect("a valid governor quota");
            app(GovernorLayer::<_, _, Body>::new(config))
        }
        Config::Cluster => {
            let limiter = ClusterLimiter::<String>::builder(&redis.url(), namespace, quota)
                .build()
                .expect("a cluster limiter");
            app(KeyedRateLimitLayer::new(limiter, api_key()))
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

struct Row {
    shape: Shape,
    config: Config,
    run: usize,
    counts: Counts,
    /// The warm client's latencies (ns, sorted), in the flood.
    warm: Vec<u32>,
    threads: usize,
    load: String,
}

/// The `p`-quantile of sorted nanoseconds, in microseconds.
fn pct_us(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1_000.0
}

impl Row {
    fn rps(&self, secs: f64) -> f64 {
        self.counts.total() as f64 / secs
    }

    fn refused_share(&self) -> f64 {
        self.counts.refused as f64 / self.counts.total().max(1) as f64
    }
}

/// Where the JSON goes: `$BENCH_SERVER_JSON`, or `benchmarks/server.json`
/// in the target directory (three levels above this executable:
/// `target/release/deps/server-*`).
fn json_path() -> PathBuf {
    if let Ok(p) = std::env::var("BENCH_SERVER_JSON") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("the bench's path");
    let target = exe.ancestors().nth(3).expect("target/<profile>/deps/");
    target.join("benchmarks").join("server.json")
}

fn json(load: &Load, rows: &[Row], before: &str, after: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\n  \"connections\": {},\n  \"keys\": {},\n  \"secs\": {},\n  \"warmup\": {},\n  \
         \"load_before\": \"{before}\",\n  \"load_after\": \"{after}\",\n  \"rows\": [",
        load.connections, load.keys, load.secs, load.warmup
    );
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "{}\n    {{\"shape\": \"{}\", \"config\": \"{}\", \"run\": {}, \"ok\": {}, \
             \"refused\": {}, \"other\": {}, \"rps\": {:.1}, \"valid\": {}, \"load\": \"{}\", \
             \"threads\": {}, \"warm_p50_us\": {:.1}, \"warm_p99_us\": {:.1}, \
             \"warm_p999_us\": {:.1}, \"warm_max_us\": {:.1}}}",
            if i == 0 { "" } else { "," },
            r.shape.name(),
            r.config.name(),
            r.run,
            r.counts.ok,
            r.counts.refused,
            r.counts.other,
            r.rps(load.secs),
            r.shape.holds(r.config, &r.counts),
            r.load,
            r.threads,
            pct_us(&r.warm, 0.5),
            pct_us(&r.warm, 0.99),
            pct_us(&r.warm, 0.999),
            pct_us(&r.warm, 1.0),
        );
    }
    s.push_str("\n  ]\n}\n");
    s
}

fn main() {
    let load = Load {
        connections: env_or("BENCH_SERVER_CONNECTIONS", 32),
        keys: env_or("BENCH_SERVER_KEYS", 1000),
        secs: env_or("BENCH_SERVER_SECS", 2.0),
        warmup: env_or("BENCH_SERVER_WARMUP", 0.5),
    };
    assert!(load.connections > 0 && load.keys > 0 && load.secs > 0.0);
    let keys: Arc<[HeaderValue]> = (0..load.keys)
        .map(|k| HeaderValue::from_str(&format!("k-{k:05}")).unwrap())
        .collect();
    let redis = RedisServer::start();
    let runs = 2;

    let before = loadavg();
    println!(
        "server: {} connections, {} keys, {} s measured after {} s of warm-up; \
         server and load generator on 1 worker thread each",
        load.connections, load.keys, load.secs, load.warmup
    );
    println!("load average before: {before}");
    let mut rows = Vec::new();
    for &shape in SHAPES.iter() {
        for run in 1..=runs {
            for config in CONFIGS {
                let ns = format!("bench_server_{}_{run}", shape.name());
                let row_load = loadavg();
                let flood = shape == Shape::Flood;
                let m = measure(router(config, shape, &redis, &ns), &load, &keys, flood);
                rows.push(Row {
                    shape,
                    config,
                    run,
                    counts: m.counts,
                    warm: m.warm,
                    threads: m.threads,
                    load: row_load,
                });
            }
        }
    }
    let after = loadavg();

    println!();
    println!("| shape | configuration | run | requests/s | refused | shape held | load before |");
    println!("|---|---|---:|---:|---:|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.2}% | {} | {} |",
            r.shape.name(),
            r.config.name(),
            r.run,
            r.rps(load.secs),
            100.0 * r.refused_share(),
            if r.shape.holds(r.config, &r.counts) {
                "yes"
            } else {
                "NO (invalid)"
            },
            r.load
        );
    }
    let rps = |shape: Shape, config: Config, run: usize| {
        rows.iter()
            .find(|r| r.shape == shape && r.config == config && r.run == run)
            .map(|r| r.rps(load.secs))
            .unwrap()
    };
    println!();
    println!("requests/s over requests/s, run 1 / run 2 (above 1: the first is faster)");
    println!();
    println!("| shape | ratio | per run |");
    println!("|---|---|---|");
    let ratios = [
        (Config::Stripecount, Config::Governor),
        (Config::Stripecount, Config::None),
        (Config::Governor, Config::None),
        (Config::Cluster, Config::Governor),
        (Config::Cluster, Config::None),
    ];
    for &shape in SHAPES.iter() {
        for (a, b) in ratios {
            let per_run: Vec<String> = (1..=runs)
                .map(|run| format!("{:.2}x", rps(shape, a, run) / rps(shape, b, run)))
                .collect();
            println!(
                "| {} | {} / {} | {} |",
                shape.name(),
                a.name(),
                b.name(),
                per_run.join(" / ")
            );
        }
    }
    println!();
    println!("flood: the warm client's latency (us) and the process's threads");
    println!();
    println!("| configuration | run | p50 | p99 | p99.9 | max | threads |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows.iter().filter(|r| r.shape == Shape::Flood) {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            r.config.name(),
            r.run,
            pct_us(&r.warm, 0.5),
            pct_us(&r.warm, 0.99),
            pct_us(&r.warm, 0.999),
            pct_us(&r.warm, 1.0),
            r.threads
        );
    }
    println!();
    println!("load average before: {before}; after: {after}");

    let path = json_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("the JSON's directory");
    }
    std::fs::write(&path, json(&load, &rows, &before, &after)).expect("writing the JSON");
    println!("written: {}", path.display());
    let invalid = rows
        .iter()
        .filter(|r| !r.shape.holds(r.config, &r.counts))
        .count();
    if invalid > 0 {
        println!("{invalid} row(s) did not hold their shape: their figures are not comparable");
    }
}
