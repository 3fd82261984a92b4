//! The service's contract with tower, without a server: readiness is the
//! inner service's and takes no permit; a refusal never reaches the inner
//! service; the inner service's errors and bodies pass through; a closure
//! keys by route and user.

use http::request::Parts;
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_tower::{KeyedRateLimit, KeyedRateLimitLayer, LimitBody, MissingKey};
use tower::{Layer, Service, ServiceExt};

/// An inner service whose readiness the test controls, counting its calls
/// and failing requests for `/fail`.
#[derive(Clone)]
struct Inner {
    ready: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
}

impl Service<Request<()>> for Inner {
    type Response = Response<String>;
    type Error = &'static str;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, &'static str>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self.ready.load(Ordering::Acquire) {
            true => Poll::Ready(Ok(())),
            false => Poll::Pending,
        }
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let fail = req.uri().path() == "/fail";
        Box::pin(async move {
            match fail {
                true => Err("inner failure"),
                false => Ok(Response::new(format!("hello {}", req.uri().path()))),
            }
        })
    }
}

/// Keyed by the path and the `x-user` header.
fn route_and_user(p: &Parts) -> Option<(String, String)> {
    let user = p.headers.get("x-user")?.to_str().ok()?;
    Some((p.uri.path().to_owned(), user.to_owned()))
}

fn req(path: &str, user: Option<&str>) -> Request<()> {
    let mut b = Request::get(path);
    if let Some(u) = user {
        b = b.header("x-user", u);
    }
    b.body(()).unwrap()
}

async fn body(r: Response<LimitBody<String>>) -> String {
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

type Extractor = fn(&Parts) -> Option<(String, String)>;
type Limited = KeyedRateLimit<Inner, Extractor, Limiter>;
type Limiter = Arc<KeyedLimiter<(String, String), ManualClock>>;

fn setup() -> (Limited, Limiter, Inner) {
    let clock = ManualClock::new();
    let quota = Quota::per(2, Duration::from_secs(1)).slices(1);
    let limiter = Arc::new(KeyedLimiter::builder(quota).clock(clock).build().unwrap());
    let inner = Inner {
        ready: Arc::new(AtomicBool::new(true)),
        calls: Arc::new(AtomicU64::new(0)),
    };
    let layer = KeyedRateLimitLayer::new(Arc::clone(&limiter), route_and_user as Extractor)
        .missing_key(MissingKey::Pass);
    (layer.layer(inner.clone()), limiter, inner)
}

#[tokio::test]
async fn readiness_is_the_inner_services_and_takes_no_permit() {
    let (mut svc, limiter, inner) = setup();
    // Ready many times over, no call: nothing taken.
    for _ in 0..100 {
        ServiceExt::<Request<()>>::ready(&mut svc).await.unwrap();
    }
    let key = ("/a".to_owned(), "u".to_owned());
    assert_eq!(limiter.available(&key), 2);
    assert_eq!(limiter.len(), 0);
    // Not ready inside: not ready outside.
    inner.ready.store(false, Ordering::Release);
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    assert!(svc.poll_ready(&mut cx).is_pending());
    inner.ready.store(true, Ordering::Release);
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    // The permit is taken by the call.
    let r = svc.call(req("/a", Some("u"))).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(limiter.available(&key), 1);
}

#[tokio::test]
async fn refusals_never_reach_the_inner_service_and_its_errors_pass_through() {
    let (svc, limiter, inner) = setup();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = svc.clone().oneshot(req("/a", Some("u"))).await.unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == StatusCode::OK {
            assert!(!r.body().is_refusal());
            assert_eq!(body(r).await, "hello /a");
        } else {
            let b = r.body();
            assert!(b.is_refusal() && !b.is_end_stream());
            assert_eq!(b.size_hint().exact(), Some(18));
            assert_eq!(body(r).await, "too many requests\n");
        }
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429]);
    assert_eq!(inner.calls.load(Ordering::Relaxed), 2);
    // Another route, another user: other keys. No user: passed, unlimited.
    for r in [
        req("/b", Some("u")),
        req("/a", Some("v")),
        req("/a", None),
        req("/a", None),
        req("/a", None),
    ] {
        assert_eq!(
            svc.clone().oneshot(r).await.unwrap().status(),
            StatusCode::OK
        );
    }
    assert_eq!(limiter.len(), 3);
    assert_eq!(limiter.refusals(), 3);
    // A granted request whose inner service fails: the error, unchanged.
    let err = svc
        .clone()
        .oneshot(req("/fail", Some("u")))
        .await
        .unwrap_err();
    assert_eq!(err, "inner failure");
    assert_eq!(inner.calls.load(Ordering::Relaxed), 8);
}

/// Requests from several threads, each through its own clone: one budget.
#[test]
fn clones_on_threads_share_one_budget() {
    let (svc, limiter, inner) = setup();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let svc = svc.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                (0..50)
                    .filter(|i| {
                        let user = ["u", "v", "w"][i % 3];
                        let r = rt.block_on(svc.clone().oneshot(req("/x", Some(user))));
                        r.unwrap().status() == StatusCode::OK
                    })
                    .count()
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, 6); // 2 per user, 3 users
    assert_eq!(inner.calls.load(Ordering::Relaxed), 6);
    assert_eq!(limiter.refusals(), 200 - 6);
}

/// The service is `Send + Sync + Clone` and its future `Send` whenever the
/// inner service's are (what axum and hyper need).
#[test]
fn the_service_and_its_future_are_send() {
    fn service<T: Send + Sync + Clone + 'static>(_: &T) {}
    fn future<T: Send>(_: &T) {}
    let (mut svc, _, _) = setup();
    service(&svc);
    future(&svc.call(req("/a", Some("u"))));
}
