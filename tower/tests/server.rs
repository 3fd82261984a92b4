//! The layer in a real stack: an axum server on a free loopback port and
//! hyper's client sending concurrent requests over real connections. The
//! limiters run on a `ManualClock` the test moves between rounds, so every
//! window, count and header value is exact.

mod support;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Response, StatusCode};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{KeyedRateLimitLayer, MissingKey, PeerIp, Refusal};
use support::{api_key, t, Reply, Stack, SEC};

/// A limiter of `limit` per `window` in `slices` on `clock`.
fn limiter_on<K: stripecount::keyed::Key>(
    limit: u64,
    window: Duration,
    slices: usize,
    clock: &ManualClock,
) -> KeyedLimiter<K, ManualClock> {
    KeyedLimiter::builder(Quota::per(limit, window).slices(slices))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The handler behind every route; counts its calls.
fn counting_handler(calls: &Arc<AtomicU64>) -> axum::routing::MethodRouter {
    let calls = Arc::clone(calls);
    get(move || {
        calls.fetch_add(1, Ordering::Relaxed);
        async { "ok\n" }
    })
}

/// The core claim: per key and per window, exactly the limit succeed,
/// whatever the concurrency, and every field carries the exact numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_and_window_exactly_the_limit_succeed_with_exact_fields() {
    let clock = ManualClock::new();
    // 5 per 10 s per key, in 5 slices of 2 s.
    let limiter = Arc::new(limiter_on(5, 10 * SEC, 5, &clock));
    let layer = KeyedRateLimitLayer::new(Arc::clone(&limiter), api_key()).fields_on_grant(true);
    let calls = Arc::new(AtomicU64::new(0));
    let stack =
        Stack::start(Router::new().route("/api", counting_handler(&calls).layer(layer))).await;
    let keys = ["alice", "bob", "carol", "dave"];
    // 12 requests per key, all keys at once: 48 in flight.
    let round = || async {
        let reqs: Vec<_> = (0..12)
            .flat_map(|_| keys.map(|k| ("/api", Some(k))))
            .collect();
        stack.burst(&reqs).await
    };
    const POLICY: &str = "\"10s\";q=5;w=10";

    // Round at 0 s: 5 of 12 per key; each grant saw a distinct remaining.
    // `t` on a grant: its slice (0) leaves the window at 10 s.
    let replies = round().await;
    for key in keys {
        let r = &replies[&("/api".to_owned(), Some(key.to_owned()))];
        let (ok, refused): (Vec<_>, Vec<_>) = r.iter().partition(|r| r.status == StatusCode::OK);
        assert_eq!((ok.len(), refused.len()), (5, 7), "{key}");
        let mut remaining: Vec<String> = ok
            .iter()
            .map(|r| r.field("ratelimit").unwrap().to_owned())
            .collect();
        remaining.sort();
        let want: Vec<String> = (0..5).map(|r| format!("\"10s\";r={r};t=10")).collect();
        assert_eq!(remaining, want, "{key}");
        for r in &ok {
            assert_eq!(r.field("ratelimit-policy"), Some(POLICY));
            assert_eq!(r.field("retry-after"), None);
            assert_eq!(r.body, "ok\n");
        }
        for r in &refused {
            assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(r.field("retry-after"), Some("10"));
            assert_eq!(r.field("ratelimit"), Some("\"10s\";r=0;t=10"));
            assert_eq!(r.field("ratelimit-policy"), Some(POLICY));
            assert_eq!(r.field("content-type"), Some("text/plain; charset=utf-8"));
            assert_eq!(r.body, "too many requests\n");
        }
    }
    // Refused requests never reached the handler.
    assert_eq!(calls.load(Ordering::Relaxed), 20);
    assert_eq!(limiter.refusals(), 28);

    // 5 s: the window still holds 5 per key; the first slice leaves at 10 s.
    clock.set(t(5_000_000_000));
    for (_, r) in round().await {
        for r in &r {
            assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(r.field("retry-after"), Some("5"));
            assert_eq!(r.field("ratelimit"), Some("\"10s\";r=0;t=5"));
        }
    }
    // 10 s: slice 0 left; 5 again per key, counted in slice 5 (leaves at 20 s).
    clock.set(t(10_000_000_000));
    for (k, r) in round().await {
        let ok = r.iter().filter(|r| r.status == StatusCode::OK).count();
        assert_eq!(ok, 5, "{k:?}");
        for r in r.iter().filter(|r| r.status != StatusCode::OK) {
            assert_eq!(r.field("retry-after"), Some("10"));
        }
    }
    // 13.5 s: 6.5 s to wait, rounded up to 7.
    clock.set(t(13_500_000_000));
    let r = stack.get("/api", Some("alice")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("7"));
    assert_eq!(r.field("ratelimit"), Some("\"10s\";r=0;t=7"));
    // A key never seen has its whole budget; its grant's slice (12-14 s)
    // leaves the window at 22 s: 8.5 s on, rounded up.
    let r = stack.get("/api", Some("erin")).await;
    assert_eq!(r.field("ratelimit"), Some("\"10s\";r=4;t=9"));
    assert_eq!(calls.load(Ordering::Relaxed), 41);
    assert_eq!(limiter.len(), 5);
}

/// Two routes layered with clones of one layer, requests spread over both
/// and over many connections: one budget per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_of_the_service_share_one_budget() {
    let clock = ManualClock::new();
    let limiter = limiter_on(6, 60 * SEC, 6, &clock);
    let layer = KeyedRateLimitLayer::new(limiter, api_key());
    let calls = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/a", counting_handler(&calls).layer(layer.clone()))
        .route("/b", counting_handler(&calls).layer(layer.clone()));
    let stack = Stack::start(app).await;
    let mut reqs = Vec::new();
    for i in 0..40 {
        let path = if i % 2 == 0 { "/a" } else { "/b" };
        reqs.push((path, Some("shared")));
        reqs.push((path, Some(if i % 4 < 2 { "k1" } else { "k2" })));
    }
    let replies = stack.burst(&reqs).await;
    for key in ["shared", "k1", "k2"] {
        let ok: usize = ["/a", "/b"]
            .iter()
            .map(|p| {
                let r = &replies[&(p.to_string(), Some(key.to_owned()))];
                r.iter().filter(|r| r.status == StatusCode::OK).count()
            })
            .sum();
        assert_eq!(ok, 6, "{key}");
    }
    assert_eq!(calls.load(Ordering::Relaxed), 18);
    assert_eq!(layer.limiter().refusals(), 80 - 18);
}

/// A request without a key: refused with the configured status (no
/// rate-limit fields), or passed through unlimited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_gets_the_configured_outcome() {
    let clock = ManualClock::new();
    let limiter = || limiter_on(1, SEC, 1, &clock);
    let strict = KeyedRateLimitLayer::new(limiter(), api_key())
        .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED));
    let open = KeyedRateLimitLayer::new(limiter(), api_key()).missing_key(MissingKey::Pass);
    let default = KeyedRateLimitLayer::new(limiter(), api_key());
    let calls = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/strict", counting_handler(&calls).layer(strict))
        .route("/open", counting_handler(&calls).layer(open.clone()))
        .route("/default", counting_handler(&calls).layer(default));
    let stack = Stack::start(app).await;
    let replies = stack
        .burst(
            &[("/strict", None); 5]
                .into_iter()
                .chain([("/open", None); 5])
                .chain([("/default", None); 5])
                .collect::<Vec<_>>(),
        )
        .await;
    for r in &replies[&("/strict".to_owned(), None)] {
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(r.body, "no rate-limit key in the request\n");
        assert_eq!(r.field("ratelimit"), None);
        assert_eq!(r.field("retry-after"), None);
    }
    for r in &replies[&("/default".to_owned(), None)] {
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }
    for r in &replies[&("/open".to_owned(), None)] {
        assert_eq!(
            (r.status, r.body.as_str(), r.field("ratelimit")),
            (StatusCode::OK, "ok\n", None)
        );
    }
    assert_eq!(calls.load(Ordering::Relaxed), 5);
    // Requests with a key are still limited on the passing route.
    assert_eq!(stack.get("/open", Some("k")).await.status, StatusCode::OK);
    assert_eq!(
        stack.get("/open", Some("k")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(open.limiter().len(), 1);
}

/// The peer's address from axum's connect info; a custom refusal keeps the
/// fields; several limits with names and a per-key quota; a key flood
/// against `max_keys` is a 503 without fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_ip_custom_refusals_several_limits_and_floods() {
    let clock = ManualClock::new();
    let by_ip = KeyedRateLimitLayer::new(limiter_on::<IpAddr>(3, SEC, 1, &clock), PeerIp::new())
        .refusal(|r: &Refusal<'_>| {
            let Refusal::Limited(d) = r else {
                unreachable!("every request has a peer")
            };
            let body = format!(
                "{{\"limit\":{},\"remaining\":{}}}",
                d.limit(),
                d.remaining().unwrap_or(0)
            );
            Response::builder()
                .status(StatusCode::IM_A_TEAPOT)
                .header("content-type", "application/json")
                .body(Bytes::from(body))
                .unwrap()
        });
    let multi = KeyedLimiter::<String>::builder([
        Quota::per(3, SEC).slices(1),
        Quota::per(4, 60 * SEC).slices(60),
    ])
    .clock(clock.clone())
    .max_keys(2)
    .build()
    .unwrap();
    multi.set_key_limits("gold", &[5, 100]).unwrap();
    let multi = KeyedRateLimitLayer::new(multi, api_key())
        .policy_names(&["burst", "minute"])
        .unwrap()
        .fields_on_grant(true);
    let calls = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/ip", counting_handler(&calls).layer(by_ip.clone()))
        .route("/multi", counting_handler(&calls).layer(multi.clone()));
    let stack = Stack::start(app).await;

    let replies = stack.burst(&[("/ip", None); 10]).await;
    let r = &replies[&("/ip".to_owned(), None)];
    assert_eq!(r.iter().filter(|r| r.status == StatusCode::OK).count(), 3);
    for r in r.iter().filter(|r| r.status != StatusCode::OK) {
        assert_eq!(r.status, StatusCode::IM_A_TEAPOT);
        assert_eq!(r.body, "{\"limit\":3,\"remaining\":0}");
        assert_eq!(r.field("content-type"), Some("application/json"));
        assert_eq!(r.field("retry-after"), Some("1"));
        assert_eq!(r.field("ratelimit"), Some("\"1s\";r=0;t=1"));
    }
    assert_eq!(by_ip.limiter().len(), 1);
    assert_eq!(by_ip.limiter().available(&IpAddr::from([127, 0, 0, 1])), 0);

    // Several limits: `RateLimit` reports the one with the fewest permits
    // left (or the one that refused); the policy lists both, with the
    // key's own quotas.
    let rl = |r: &Reply| r.field("ratelimit").unwrap().to_owned();
    let r = stack.get("/multi", Some("basic")).await;
    assert_eq!(rl(&r), "\"burst\";r=2;t=1");
    assert_eq!(
        r.field("ratelimit-policy"),
        Some("\"burst\";q=3;w=1, \"minute\";q=4;w=60")
    );
    let r = stack.get("/multi", Some("gold")).await;
    assert_eq!(rl(&r), "\"burst\";r=4;t=1");
    assert_eq!(
        r.field("ratelimit-policy"),
        Some("\"burst\";q=5;w=1, \"minute\";q=100;w=60")
    );
    stack.get("/multi", Some("basic")).await;
    assert_eq!(
        rl(&stack.get("/multi", Some("basic")).await),
        "\"burst\";r=0;t=1"
    );
    clock.set(t(1_000_000_000));
    // A new second: the minute binds (its grant's slice leaves at 61 s).
    assert_eq!(
        rl(&stack.get("/multi", Some("basic")).await),
        "\"minute\";r=0;t=60"
    );
    let r = stack.get("/multi", Some("basic")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // The 3 of second 0 leave the minute at 60 s.
    assert_eq!(rl(&r), "\"minute\";r=0;t=59");
    assert_eq!(r.field("retry-after"), Some("59"));

    // Two keys held, both busy: a third is refused as an overload.
    let r = stack.get("/multi", Some("intruder")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body, "the rate limiter cannot track more clients now\n");
    assert_eq!((r.field("ratelimit"), r.field("retry-after")), (None, None));
    assert_eq!(multi.limiter().untracked_decisions(), 1);
}
