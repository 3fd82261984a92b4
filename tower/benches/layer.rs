//! What the layer costs per request, on one thread, against the limiter
//! called directly with the same key.
//!
//! Rows (group `layer`), each one request on a key the limiter holds:
//! - `inner_alone`: building the request and calling the inner service
//!   (a ready response), polled to completion: the floor.
//! - `limiter_direct`: `decide` with the key as `&str`.
//! - `limiter_refused`: `decide` refused, turned into the layer's
//!   [`Verdict`] (what the layer reads of a refusal: the retry time).
//! - `global_refused`: the same with a direct `RateLimiter` (the
//!   [`Global`] key's limiter).
//! - `layer_granted`: the request through the layer (a `Header` key,
//!   borrowed), granted.
//! - `layer_granted_fields`: the same with `fields_on_grant(true)`
//!   (`RateLimit` and `RateLimit-Policy` formatted on every response).
//! - `layer_refused`: refused, with the 429 built and its three fields.
//! - `layer_refused_global`: the same with a `RateLimiter` behind the layer.
//!
//! The layer's overhead is `layer_granted - inner_alone`, compared with
//! `limiter_direct`. Run:
//! `cargo bench -p stripecount-tower --bench layer -- --warm-up-time 1 --measurement-time 2`

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderName, Request, Response};
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use stripecount::{KeyedLimiter, Quota, RateLimiter};
use stripecount_tower::{Global, Header, KeyedRateLimitLayer, Verdict};
use tower_layer::Layer;
use tower_service::Service;

/// An inner service answering at once.
#[derive(Clone)]
struct Hello;

impl Service<Request<()>> for Hello {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        ready(Ok(Response::new(String::new())))
    }
}

fn request() -> Request<()> {
    Request::get("/v1/items")
        .header("x-api-key", "k-0042")
        .header("accept", "application/json")
        .body(())
        .unwrap()
}

/// Calls `svc` once and polls the response to completion.
fn once<S>(svc: &mut S) -> S::Response
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let fut = pin!(svc.call(request()));
    match fut.poll(&mut cx) {
        Poll::Ready(r) => r.unwrap(),
        Poll::Pending => unreachable!("every future here is ready"),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer");
    let key = HeaderName::from_static("x-api-key");
    let limiter = || {
        Arc::new(
            KeyedLimiter::<String>::new(
                Quota::per(u32::MAX as u64, Duration::from_secs(3600)).slices(60),
            )
            .unwrap(),
        )
    };

    g.bench_function("inner_alone", |b| {
        let mut svc = Hello;
        b.iter(|| black_box(once(&mut svc)))
    });

    let direct = limiter();
    g.bench_function("limiter_direct", |b| {
        b.iter(|| black_box(direct.decide(black_box("k-0042"), 1)))
    });

    let lim = limiter();
    let mut svc = KeyedRateLimitLayer::new(Arc::clone(&lim), Header::new(key.clone())).layer(Hello);
    g.bench_function("layer_granted", |b| b.iter(|| black_box(once(&mut svc))));

    let mut svc = KeyedRateLimitLayer::new(limiter(), Header::new(key.clone()))
        .fields_on_grant(true)
        .layer(Hello);
    g.bench_function("layer_granted_fields", |b| {
        b.iter(|| black_box(once(&mut svc)))
    });

    let full = Arc::new(KeyedLimiter::<String>::new(Quota::per_hour(1).slices(60)).unwrap());
    assert!(full.try_acquire("k-0042", 1));
    g.bench_function("limiter_refused", |b| {
        b.iter(|| black_box(Verdict::from(full.decide(black_box("k-0042"), 1))))
    });
    let global = Arc::new(RateLimiter::new(Quota::per_hour(1).slices(60)).unwrap());
    assert!(global.try_acquire(1));
    g.bench_function("global_refused", |b| {
        b.iter(|| black_box(Verdict::from(global.decide(black_box(1)))))
    });
    let mut svc = KeyedRateLimitLayer::new(full, Header::new(key)).layer(Hello);
    g.bench_function("layer_refused", |b| {
        b.iter(|| {
            let r = once(&mut svc);
            debug_assert_eq!(r.status(), 429);
            black_box(r)
        })
    });
    let mut svc = KeyedRateLimitLayer::new(global, Global).layer(Hello);
    g.bench_function("layer_refused_global", |b| {
        b.iter(|| {
            let r = once(&mut svc);
            debug_assert_eq!(r.status(), 429);
            black_box(r)
        })
    });
    g.finish();
    assert!(lim.len() == 1, "the layer rows used one key");
}

criterion_group!(benches, bench);
criterion_main!(benches);
