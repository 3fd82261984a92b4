//! [`KeyedRateLimit`]: the service. `poll_ready` is the inner service's;
//! `call` extracts the key, takes one permit from the shared limiter, and
//! either calls the inner service or answers the refusal at once.
//!
//! # Why the permit is taken in `call`
//! `poll_ready` may be called without a `call` following (a load balancer
//! probing readiness, a request dropped before it is sent) and does not see
//! the request, so it cannot know the key. Taking the permit in `call`
//! means every permit taken belongs to a request that was sent, and a
//! refused request costs the inner service nothing. (The inner service's
//! readiness, reserved by `poll_ready`, is kept for the next `call`, as
//! with any tower service that answers some requests itself.)

use crate::future::{Fields, ResponseFuture};
use crate::headers::{retry_after, RATELIMIT, RATELIMIT_POLICY};
use crate::key::KeyExtractor;
use crate::layer::State;
use crate::refusal::{MissingKey, Refusal};
use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::task::{Context, Poll};
use stripecount::clock::MonotonicClock;
use stripecount::limiter::MAX_LIMITS;
use stripecount::{Clock, Decision, Denied, KeyedLimiter};
use tower_service::Service;

/// A service limited per key by a [`KeyedRateLimitLayer`]; clones share
/// the layer's limiter and configuration.
///
/// [`KeyedRateLimitLayer`]: crate::KeyedRateLimitLayer
pub struct KeyedRateLimit<Svc, X: KeyExtractor, C: Clock = MonotonicClock, S = RandomState> {
    inner: Svc,
    state: Arc<State<X, C, S>>,
}

impl<Svc, X: KeyExtractor, C: Clock, S> KeyedRateLimit<Svc, X, C, S> {
    pub(crate) fn new(inner: Svc, state: Arc<State<X, C, S>>) -> Self {
        KeyedRateLimit { inner, state }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &Svc {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut Svc {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> Svc {
        self.inner
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &Arc<KeyedLimiter<X::Key, C, S>> {
        &self.state.limiter
    }
}

impl<Svc: Clone, X: KeyExtractor, C: Clock, S> Clone for KeyedRateLimit<Svc, X, C, S> {
    fn clone(&self) -> Self {
        KeyedRateLimit {
            inner: self.inner.clone(),
            state: Arc::clone(&self.state),
        }
    }
}

impl<Svc: fmt::Debug, X: KeyExtractor, C: Clock, S> fmt::Debug for KeyedRateLimit<Svc, X, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimit")
            .field("inner", &self.inner)
            .field("layer", &self.state)
            .finish()
    }
}

/// A request's fate.
enum Outcome {
    /// Call the inner service (adding these fields to its response).
    Call(Option<Fields>),
    /// Answer at once.
    Refuse(Response<Bytes>),
}

impl<Svc, ReqB, ResB, X, C, S> Service<Request<ReqB>> for KeyedRateLimit<Svc, X, C, S>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>>,
    X: KeyExtractor,
    C: Clock,
    S: BuildHasher + Send + Sync + 'static,
{
    type Response = Response<crate::LimitBody<ResB>>;
    type Error = Svc::Error;
    type Future = ResponseFuture<Svc::Future>;

    /// The inner service's readiness; takes no permit.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let st = &*self.state;
        let outcome = match st.extractor.extract(&parts) {
            Some(key) => {
                let d = st.limiter.decide(&*key, 1);
                if d.is_granted() {
                    Outcome::Call(st.on_grant.then(|| fields(st, &key, &d)))
                } else {
                    Outcome::Refuse(refusal(st, &key, &d))
                }
            }
            None => match st.missing {
                MissingKey::Refuse(status) => {
                    Outcome::Refuse((st.respond)(&Refusal::MissingKey(status)))
                }
                MissingKey::Pass => Outcome::Call(None),
            },
        };
        match outcome {
            Outcome::Call(fields) => {
                let future = self.inner.call(Request::from_parts(parts, body));
                ResponseFuture::inner(future, fields)
            }
            Outcome::Refuse(response) => ResponseFuture::refused(response),
        }
    }
}

/// A refusal's response: the responder's, with the decision's fields
/// (none for a key the limiter cannot track: it has no window to report).
fn refusal<X: KeyExtractor, C: Clock, S: BuildHasher>(
    st: &State<X, C, S>,
    key: &X::Ref,
    d: &Decision,
) -> Response<Bytes> {
    let mut response = (st.respond)(&Refusal::Limited(d));
    if d.denied() != Some(Denied::TooManyKeys) {
        let headers = response.headers_mut();
        for (name, value) in fields(st, key, d) {
            headers.insert(name, value);
        }
        if let Some((name, value)) = retry_after(d) {
            headers.insert(name, value);
        }
    }
    response
}

/// `RateLimit-Policy` and `RateLimit` for `key`'s decision.
fn fields<X: KeyExtractor, C: Clock, S: BuildHasher>(
    st: &State<X, C, S>,
    key: &X::Ref,
    d: &Decision,
) -> Fields {
    let policy = policy(st, key, d);
    let ratelimit = st.policies.ratelimit(d);
    [(RATELIMIT_POLICY, policy), (RATELIMIT, ratelimit)]
}

/// `RateLimit-Policy` with the key's limits: the decision's for the limit
/// it describes, the limiter's for the others (per-key ones if it has
/// overrides: one more lookup).
fn policy<X: KeyExtractor, C: Clock, S: BuildHasher>(
    st: &State<X, C, S>,
    key: &X::Ref,
    d: &Decision,
) -> HeaderValue {
    let lim = &st.limiter;
    let k = lim.limit_count().min(MAX_LIMITS);
    let mut limits = [0u64; MAX_LIMITS];
    if k > 1 && lim.key_overrides() > 0 {
        for (slot, l) in limits.iter_mut().zip(lim.limits_for(key)) {
            *slot = l;
        }
    } else {
        for (i, slot) in limits.iter_mut().enumerate().take(k) {
            *slot = lim.limit_of(i).unwrap_or(0);
        }
    }
    if let Some(slot) = limits.get_mut(d.limit_index()) {
        *slot = d.limit();
    }
    st.policies.policy(&limits[..k])
}
