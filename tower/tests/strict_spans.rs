//! What `RateLimit-Policy`'s `w` promises, end to end: an axum server and
//! hyper's client (`support`), the limiters on a `ManualClock` the test
//! moves between rounds.

mod support;

use axum::routing::get;
use axum::Router;
use http::StatusCode;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Clock, KeyedLimiter, Quota, Timestamp};
use stripecount_tower::KeyedRateLimitLayer;
use support::{api_key, t, Stack, SEC};

/// The most grants in one closed span of `span` (the fullest span starts
/// at a grant).
fn most_in_span(grants: &[Timestamp], span: Duration) -> usize {
    (grants.iter())
        .map(|&a| grants.iter().filter(|&&b| b >= a && b - a <= span).count())
        .max()
        .unwrap_or(0)
}

/// A parameter of a `RateLimit-Policy` with one policy (`"10s";q=4;w=10`).
fn policy_param(policy: &str, name: &str) -> u64 {
    (policy.split(';'))
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {policy:?}"))
}

/// What `w` promises, end to end: with a strict quota a client that reads
/// `q` and `w` from `RateLimit-Policy` finds at most `q` grants in every
/// span of `w` seconds, whatever its start. The same traffic on the
/// default quota stays within `q` in every span of `w - L` (`L` a slice)
/// but not in every span of `w`. Rounds of 3 concurrent requests per route,
/// 700 ms apart on the limiters' manual clock (so grants fall at every
/// phase of a slice), for 42 s; the handler, reached only by granted
/// requests, records each one's time on its layer's limiter clock (the
/// time the grant was decided at: the clock moves only between rounds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_quota_holds_in_every_span_of_w() {
    let clock = ManualClock::new();
    // 4 per 10 s, in 5 slices of 2 s.
    let quota = Quota::per(4, 10 * SEC).slices(5);
    let mut app = Router::new();
    let mut logs = BTreeMap::new();
    for (path, quota) in [("/strict", quota.strict()), ("/default", quota)] {
        let limiter = KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .build()
            .unwrap();
        let layer = KeyedRateLimitLayer::new(limiter, api_key()).fields_on_grant(true);
        let log: Arc<Mutex<Vec<Timestamp>>> = Arc::default();
        let handler = {
            let (limiter, log) = (Arc::clone(layer.limiter()), Arc::clone(&log));
            get(move || {
                log.lock().unwrap().push(limiter.clock().now());
                async { "ok\n" }
            })
        };
        app = app.route(path, handler.layer(layer));
        logs.insert(path.to_owned(), log);
    }
    let stack = Stack::start(app).await;
    let reqs = [("/strict", Some("k")), ("/default", Some("k"))].repeat(3);
    let mut policies = BTreeMap::new();
    let mut ok = BTreeMap::<String, usize>::new();
    for round in 0..60u64 {
        clock.set(t(round * 700_000_000));
        for ((path, _), replies) in stack.burst(&reqs).await {
            for r in replies.iter().filter(|r| r.status == StatusCode::OK) {
                *ok.entry(path.clone()).or_default() += 1;
                let policy = r.field("ratelimit-policy").unwrap().to_owned();
                assert_eq!(
                    policies.entry(path.clone()).or_insert(policy.clone()),
                    &policy
                );
            }
        }
    }
    let grants = |path: &str| {
        let g = logs[path].lock().unwrap().clone();
        assert_eq!(g.len(), ok[path], "{path}: one record per 200");
        g
    };
    let (strict, default) = (grants("/strict"), grants("/default"));
    for path in ["/strict", "/default"] {
        assert_eq!(policies[path], "\"10s\";q=4;w=10");
    }
    let q = policy_param(&policies["/strict"], "q") as usize;
    let w = Duration::from_secs(policy_param(&policies["/strict"], "w"));
    // Strict: at most q in every span of w, and q reached.
    assert_eq!(most_in_span(&strict, w), q, "{strict:?}");
    // Default: at most q in every span of w - L; more in some span of w
    // (at most the permits of S + 1 slices: 2q here).
    let l = quota.slice_len();
    assert_eq!(most_in_span(&default, w - l), q, "{default:?}");
    let most = most_in_span(&default, w);
    assert!(
        q < most && most <= 2 * q,
        "{most} in a span of w: {default:?}"
    );
    // The strict quota admitted less: what holding in every span costs.
    assert!(strict.len() < default.len());
}
