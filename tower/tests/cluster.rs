//! The layer on a fleet-wide limit: two real axum servers, each with its
//! own `ClusterLimiter` on one real `redis-server`, and one client
//! spreading its requests over both. Every grant is counted per key: never
//! more than the limit in total, whichever server granted it. The same
//! router function takes a local `KeyedLimiter` or a `ClusterLimiter`.

#[path = "../../redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use axum::routing::get;
use axum::Router;
use http::StatusCode;
use redis_support::RedisServer;
use std::time::Duration;
use stripecount::{KeyedLimiter, Quota};
use stripecount_redis::{ClusterLimiter, OutagePolicy};
use stripecount_tower::{Header, KeyedRateLimitLayer, LayerLimiter};
use support::{api_key, Reply, Stack};
use tokio::task::JoinSet;

/// One service, whatever limits it: the line that picks the limiter is
/// the only one that differs between a local and a fleet-wide limit.
fn app<L: LayerLimiter<str>>(limiter: L) -> Router {
    let layer: KeyedRateLimitLayer<Header, L> =
        KeyedRateLimitLayer::new(limiter, api_key()).fields_on_grant(true);
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// A node of the fleet: its own limiter on the shared Redis.
fn node(url: &str, ns: &str, quota: Quota, max_batch: u64) -> ClusterLimiter<String> {
    ClusterLimiter::builder(url, ns, quota)
        .max_batch(max_batch)
        .build()
        .unwrap()
}

/// `per_key` requests for each of `keys`, alternating between the
/// servers, 16 at a time; the replies per key.
async fn spread(servers: &[Stack], keys: &[&str], per_key: usize) -> Vec<Vec<(usize, Reply)>> {
    let mut out = vec![Vec::new(); keys.len()];
    let mut set = JoinSet::new();
    let mut i = 0;
    for round in 0..per_key {
        for (k, key) in keys.iter().enumerate() {
            let s = (round + k) % servers.len();
            let (client, addr) = (servers[s].client.clone(), servers[s].addr);
            let key = (*key).to_owned();
            set.spawn(async move {
                let reply = support::send(client, addr, "/".into(), Some(key)).await;
                (k, s, reply)
            });
            i += 1;
            if i % 16 == 0 {
                while let Some(r) = set.join_next().await {
                    let (k, s, reply) = r.unwrap();
                    out[k].push((s, reply));
                }
            }
        }
    }
    while let Some(r) = set.join_next().await {
        let (k, s, reply) = r.unwrap();
        out[k].push((s, reply));
    }
    out
}

fn granted(replies: &[(usize, Reply)]) -> usize {
    replies
        .iter()
        .filter(|(_, r)| r.status == StatusCode::OK)
        .count()
}

/// Leases of one permit: every grant is a round trip awaited by the layer
/// (the layer's pending path) and nothing is left unused on a node, so
/// each key gets exactly its limit across the two servers, and both serve
/// some of it. The window is an hour: the test cannot outlast it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_redis_grant_exactly_the_limit_in_total() {
    let redis = RedisServer::start();
    let quota = Quota::per_hour(12).slices(6);
    let servers = [
        Stack::start(app(node(&redis.url(), "fleet", quota, 1))).await,
        Stack::start(app(node(&redis.url(), "fleet", quota, 1))).await,
    ];
    let keys = ["alice", "bob", "carol"];
    let replies = spread(&servers, &keys, 30).await;
    for (key, r) in keys.iter().zip(&replies) {
        assert_eq!(r.len(), 30);
        assert_eq!(granted(r), 12, "{key}: the fleet grants its limit, no more");
        // The first 16 requests (at most 6 of a key, half to each server)
        // all fit in the limit and are answered before more are sent.
        for s in 0..2 {
            let mine: Vec<_> = r.iter().filter(|(from, _)| *from == s).cloned().collect();
            assert!(granted(&mine) > 0, "{key}: server {s} granted some");
        }
        for (_, reply) in r {
            let policy = reply.field("ratelimit-policy");
            assert_eq!(policy, Some("\"1h\";q=12;w=3600"), "{key}: {reply:?}");
            if reply.status == StatusCode::OK {
                // A fleet-wide grant does not know the permits left.
                assert_eq!(reply.field("ratelimit"), None);
            } else {
                assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
                let rl = reply.field("ratelimit").unwrap();
                assert!(rl.starts_with("\"1h\";r=0;t="), "{rl}");
                let retry: u64 = reply.field("retry-after").unwrap().parse().unwrap();
                assert!(retry > 0 && retry <= 3600, "{retry}");
            }
        }
    }
}

/// Leases of many permits: most grants come from a held lease, decided
/// in `call` without a round trip. Permits leased by one server and unused
/// count against the key until returned, so the fleet may grant less than
/// the limit, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_batches_never_exceed_the_limit_across_the_fleet() {
    let redis = RedisServer::start();
    let quota = Quota::per_hour(100).slices(6).strict();
    let servers = [
        Stack::start(app(node(&redis.url(), "batched", quota, 16))).await,
        Stack::start(app(node(&redis.url(), "batched", quota, 16))).await,
    ];
    let keys = ["k1", "k2"];
    let replies = spread(&servers, &keys, 150).await;
    for (key, r) in keys.iter().zip(&replies) {
        let g = granted(r);
        assert!(g <= 100, "{key}: {g} granted of a limit of 100");
        // At a refusal, the permits leased and unused are at most a batch
        // on each server (one of them, of a slice just ended, on its way
        // back).
        assert!(g >= 100 - 2 * 16, "{key}: {g} granted");
    }
}

/// The same router on a local limiter: what the fleet test checks, on one
/// process.
#[tokio::test]
async fn the_same_router_takes_a_local_limiter() {
    let local = KeyedLimiter::<String>::new(Quota::per_hour(12).slices(6)).unwrap();
    let server = [Stack::start(app(local)).await];
    let replies = spread(&server, &["alice"], 20).await;
    assert_eq!(granted(&replies[0]), 12);
    let last = &replies[0]
        .iter()
        .find(|(_, r)| r.status == StatusCode::OK)
        .unwrap()
        .1;
    // A local grant knows the permits left.
    assert!(last.field("ratelimit").unwrap().contains(";r="));
}

/// Redis unreachable: the limiter's outage policy decides. Refusing is a
/// `503` without rate-limit fields (nothing was counted); admitting is a
/// grant.
#[tokio::test]
async fn an_unreachable_redis_follows_the_outage_policy() {
    let url = format!("redis://127.0.0.1:{}/", redis_support::free_port());
    let short = Duration::from_millis(50);
    let closed = ClusterLimiter::<String>::builder(&url, "down", Quota::per_second(10))
        .outage(OutagePolicy::FailClosed)
        .timeouts(short, short)
        .build()
        .unwrap();
    let open = ClusterLimiter::<String>::builder(&url, "down", Quota::per_second(10))
        .outage(OutagePolicy::FailOpen)
        .timeouts(short, short)
        .build()
        .unwrap();
    let (closed, open) = (
        Stack::start(app(closed)).await,
        Stack::start(app(open)).await,
    );
    for _ in 0..3 {
        let r = closed.get("/", Some("alice")).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.field("ratelimit"), None);
        assert_eq!(r.field("retry-after"), None);
        assert_eq!(open.get("/", Some("alice")).await.status, StatusCode::OK);
    }
}

/// More requests waiting for Redis than the limiter queues: the excess is
/// answered at once, `503` with `Retry-After` and no rate-limit fields
/// (nothing was counted), while the queued ones wait (as futures, no
/// thread each) and are granted once Redis answers. Made certain by
/// freezing the server (SIGSTOP) with the first request in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_queue_a_request_is_shed_with_503_and_retry_after() {
    let redis = RedisServer::start();
    let limiter = std::sync::Arc::new(
        ClusterLimiter::<String>::builder(&redis.url(), "shed", Quota::per_hour(100))
            .max_queue(2)
            .timeouts(Duration::from_secs(5), Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let server = Stack::start(app(std::sync::Arc::clone(&limiter))).await;
    assert_eq!(server.get("/", Some("warm")).await.status, StatusCode::OK);
    redis.pause();
    let mut set = JoinSet::new();
    let spawn = |set: &mut JoinSet<Reply>, key: &str| {
        let (client, addr, key) = (server.client.clone(), server.addr, key.to_owned());
        set.spawn(async move { support::send(client, addr, "/".into(), Some(key)).await });
    };
    spawn(&mut set, "k0");
    while !limiter.health().batch_in_flight {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    spawn(&mut set, "k1");
    spawn(&mut set, "k2");
    while limiter.waiting() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let shed = server.get("/", Some("k3")).await;
    assert_eq!(shed.status, StatusCode::SERVICE_UNAVAILABLE);
    let retry: u64 = shed.field("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    assert_eq!(shed.field("ratelimit"), None);
    assert_eq!(limiter.stats().shed, 1);
    redis.resume();
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap().status, StatusCode::OK);
    }
}
