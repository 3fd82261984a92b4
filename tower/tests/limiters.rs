//! The layer over any `LayerLimiter`, without a server: a decision that
//! arrives later (the inner service is called only once it is a grant,
//! and exactly once), a limiter that cannot decide (`503`, no fields), one
//! budget for every request (`Global` on a direct `RateLimiter`), and
//! requests that skip the limit.

use http::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::limiter::MAX_LIMITS;
use stripecount::{Denied, Quota, RateLimiter};
use stripecount_tower::{
    Check, Global, Header, KeyedRateLimitLayer, LayerLimiter, MissingKey, Verdict,
};
use tower::{Layer, Service, ServiceExt};

/// An inner service counting its calls.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicU64>);

impl Service<Request<()>> for Counting {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        self.0.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(Response::new("ok".into())))
    }
}

/// A verdict the test hands over when it chooses.
#[derive(Clone, Default)]
struct Slot(Arc<Mutex<(Option<Verdict>, Option<Waker>)>>);

impl Slot {
    fn set(&self, v: Verdict) {
        let mut s = self.0.lock().unwrap();
        s.0 = Some(v);
        if let Some(w) = s.1.take() {
            w.wake();
        }
    }
}

impl Future for Slot {
    type Output = Verdict;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Verdict> {
        let mut s = self.0.lock().unwrap();
        match s.0.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A limiter whose every decision is pending: it hands out the slots the
/// test resolves, in order.
#[derive(Default)]
struct Remote {
    slots: Mutex<Vec<Slot>>,
}

impl LayerLimiter<str> for Remote {
    type Pending = Slot;

    fn check(this: &Arc<Self>, _: &str) -> Check<Slot> {
        let slot = Slot::default();
        this.slots.lock().unwrap().push(slot.clone());
        Check::Pending(slot)
    }

    fn windows(&self) -> Vec<Duration> {
        vec![Duration::from_secs(60)]
    }

    fn policy_limits(&self, _: &str, _: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        out[0] = 5;
        1
    }
}

fn req(method: Method, path: &str, key: Option<&str>) -> Request<()> {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        b = b.header("x-api-key", k);
    }
    b.body(()).unwrap()
}

fn api_key() -> Header {
    Header::new(http::HeaderName::from_static("x-api-key"))
}

fn poll<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_pending_decision_calls_the_inner_service_only_on_a_grant() {
    let inner = Counting::default();
    let layer = KeyedRateLimitLayer::new(Remote::default(), api_key()).fields_on_grant(true);
    let remote = Arc::clone(layer.limiter());
    let mut svc = layer.layer(inner.clone());
    let call = |svc: &mut _| {
        let svc: &mut stripecount_tower::KeyedRateLimit<Counting, Header, Remote> = svc;
        assert!(poll(std::pin::pin!(svc.ready())).is_ready());
        Box::pin(svc.call(req(Method::GET, "/", Some("k"))))
    };
    let mut granted = call(&mut svc);
    let mut refused = call(&mut svc);
    // Nothing decided yet: nothing called, however often it is polled.
    for _ in 0..3 {
        assert!(poll(granted.as_mut()).is_pending());
        assert!(poll(refused.as_mut()).is_pending());
    }
    assert_eq!(inner.0.load(Ordering::Relaxed), 0);
    let slots = remote.slots.lock().unwrap().clone();
    assert_eq!(slots.len(), 2);
    // Refused first: answered without the inner service, with the fields.
    let retry = Duration::from_millis(2500);
    slots[1].set(Verdict::refused(0, 5, Denied::Exhausted, Some(retry)));
    let Poll::Ready(Ok(r)) = poll(refused.as_mut()) else {
        panic!("decided")
    };
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "3");
    assert_eq!(r.headers()["ratelimit"], "\"1m\";r=0;t=3");
    assert_eq!(r.headers()["ratelimit-policy"], "\"1m\";q=5;w=60");
    assert_eq!(inner.0.load(Ordering::Relaxed), 0);
    // Granted: the inner service is called once; a grant without the
    // permits left carries the policy only.
    slots[0].set(Verdict::granted(0, 5, None, None));
    let Poll::Ready(Ok(r)) = poll(granted.as_mut()) else {
        panic!("decided")
    };
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(inner.0.load(Ordering::Relaxed), 1);
    assert_eq!(r.headers()["ratelimit-policy"], "\"1m\";q=5;w=60");
    assert!(r.headers().get("ratelimit").is_none());
    // A limiter that cannot decide: 503, no fields, no call.
    let mut down = call(&mut svc);
    remote.slots.lock().unwrap()[2].set(Verdict::unavailable(5));
    let Poll::Ready(Ok(r)) = poll(down.as_mut()) else {
        panic!("decided")
    };
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().get("ratelimit").is_none());
    assert!(r.headers().get("retry-after").is_none());
    assert_eq!(inner.0.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn global_is_one_budget_for_every_request() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder(Quota::per_second(3).slices(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let inner = Counting::default();
    let svc = KeyedRateLimitLayer::new(limiter, Global).layer(inner.clone());
    let mut statuses = Vec::new();
    for key in ["a", "b", "c", "d", "e"] {
        let r = svc.clone().oneshot(req(Method::GET, "/", Some(key))).await;
        statuses.push(r.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(inner.0.load(Ordering::Relaxed), 3);
    clock.advance(Duration::from_secs(1));
    let r = svc.oneshot(req(Method::GET, "/", None)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn skipped_requests_take_no_permit_and_need_no_key() {
    let clock = ManualClock::new();
    let limiter = stripecount::KeyedLimiter::<String, _>::builder(Quota::per_minute(1))
        .clock(clock)
        .build()
        .unwrap();
    let inner = Counting::default();
    let layer = KeyedRateLimitLayer::new(limiter, api_key())
        .missing_key(MissingKey::Refuse(StatusCode::UNAUTHORIZED))
        .skip_if(|p| p.method == Method::OPTIONS || p.uri.path().starts_with("/health"));
    let svc = layer.layer(inner.clone());
    let send = |m: Method, path: &'static str, key: Option<&'static str>| {
        let svc = svc.clone();
        async move { svc.oneshot(req(m, path, key)).await.unwrap() }
    };
    for _ in 0..5 {
        let r = send(Method::OPTIONS, "/api", Some("k")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("ratelimit").is_none());
        assert_eq!(
            send(Method::GET, "/health", None).await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(layer.limiter().len(), 0, "no key was counted");
    assert_eq!(
        send(Method::GET, "/api", Some("k")).await.status(),
        StatusCode::OK
    );
    let r = send(Method::GET, "/api", Some("k")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let r = send(Method::GET, "/api", None).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(inner.0.load(Ordering::Relaxed), 11);
}
