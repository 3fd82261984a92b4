//! [`KeyedRateLimit`]: the service. `poll_ready` is the inner service's;
//! `call` extracts the key, takes one permit from the shared limiter, and
//! either calls the inner service or answers the refusal at once. When the
//! limiter's decision needs a round trip ([`Check::Pending`]), the readied
//! inner service moves into the response future (a clone stays for the
//! next request), which calls it once the decision is a grant.
//!
//! # Why the permit is taken in `call`
//! `poll_ready` may be called without a `call` following (a load balancer
//! probing readiness, a request dropped before it is sent) and does not see
//! the request, so it cannot know the key. Taking the permit in `call`
//! means every permit taken belongs to a request that was sent, and a
//! refused request costs the inner service nothing. (The inner service's
//! readiness, reserved by `poll_ready`, is kept for the next `call`, as
//! with any tower service that answers some requests itself.)

use crate::future::{Fields, ResponseFuture, Resume};
use crate::headers::{retry_after, RATELIMIT, RATELIMIT_POLICY};
use crate::key::KeyExtractor;
use crate::layer::State;
use crate::limit::{Check, LayerLimiter, Verdict};
use crate::refusal::{MissingKey, Refusal};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use stripecount::limiter::MAX_LIMITS;
use stripecount::{Denied, KeyedLimiter};
use tower_service::Service;

/// A service limited per key by a [`KeyedRateLimitLayer`]; clones share
/// the layer's limiter and configuration.
///
/// [`KeyedRateLimitLayer`]: crate::KeyedRateLimitLayer
pub struct KeyedRateLimit<Svc, X: KeyExtractor, L = KeyedLimiter<<X as KeyExtractor>::Key>> {
    inner: Svc,
    state: Arc<State<X, L>>,
}

impl<Svc, X: KeyExtractor, L> KeyedRateLimit<Svc, X, L> {
    pub(crate) fn new(inner: Svc, state: Arc<State<X, L>>) -> Self {
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
    pub fn limiter(&self) -> &Arc<L> {
        &self.state.limiter
    }
}

impl<Svc: Clone, X: KeyExtractor, L> Clone for KeyedRateLimit<Svc, X, L> {
    fn clone(&self) -> Self {
        KeyedRateLimit {
            inner: self.inner.clone(),
            state: Arc::clone(&self.state),
        }
    }
}

impl<Svc: fmt::Debug, X: KeyExtractor, L: fmt::Debug> fmt::Debug for KeyedRateLimit<Svc, X, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimit")
            .field("inner", &self.inner)
            .field("layer", &self.state)
            .finish()
    }
}

/// A request's fate.
pub(crate) enum Outcome {
    /// Call the inner service (adding these fields to its response).
    Call(Option<Fields>),
    /// Answer at once.
    Refuse(Response<Bytes>),
}

impl<Svc, ReqB, ResB, X, L> Service<Request<ReqB>> for KeyedRateLimit<Svc, X, L>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    X: KeyExtractor,
    L: LayerLimiter<X::Ref>,
{
    type Response = Response<crate::LimitBody<ResB>>;
    type Error = Svc::Error;
    type Future = ResponseFuture<Svc, ReqB, X, L>;

    /// The inner service's readiness; takes no permit.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let st = &*self.state;
        let outcome = if st.skip.as_ref().is_some_and(|skip| skip(&parts)) {
            Outcome::Call(None)
        } else {
            match st.extractor.extract(&parts) {
                Some(key) => match L::check(&st.limiter, &*key) {
                    Check::Ready(v) => outcome(st, &*key, &v),
                    Check::Pending(pending) => {
                        let key = key.into_owned();
                        // The readied service goes with the request; a clone
                        // (not yet ready) stays for the next one.
                        let ready = self.inner.clone();
                        let svc = std::mem::replace(&mut self.inner, ready);
                        return ResponseFuture::deciding(
                            pending,
                            Resume {
                                svc,
                                req: Request::from_parts(parts, body),
                                key,
                                state: Arc::clone(&self.state),
                            },
                        );
                    }
                },
                None => match st.missing {
                    MissingKey::Refuse(status) => {
                        Outcome::Refuse((st.respond)(&Refusal::MissingKey(status)))
                    }
                    MissingKey::Pass => Outcome::Call(None),
                },
            }
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

/// What the layer does with `key`'s verdict.
pub(crate) fn outcome<X: KeyExtractor, L: LayerLimiter<X::Ref>>(
    st: &State<X, L>,
    key: &X::Ref,
    v: &Verdict,
) -> Outcome {
    if v.is_granted() {
        Outcome::Call(st.on_grant.then(|| fields(st, key, v)))
    } else {
        Outcome::Refuse(refusal(st, key, v))
    }
}

/// [`outcome`] for a key owned by a response future.
pub(crate) fn outcome_owned<X: KeyExtractor, L: LayerLimiter<X::Ref>>(
    st: &State<X, L>,
    key: &X::Key,
    v: &Verdict,
) -> Outcome {
    outcome(st, key.borrow(), v)
}

/// A refusal's response: the responder's, with the decision's fields
/// (none for a key the limiter cannot track, or a limiter that could not
/// decide: there is no window to report).
fn refusal<X: KeyExtractor, L: LayerLimiter<X::Ref>>(
    st: &State<X, L>,
    key: &X::Ref,
    v: &Verdict,
) -> Response<Bytes> {
    if v.is_unavailable() {
        // No rate-limit fields (nothing was counted); a `Retry-After` if
        // the limiter said when it expects to decide again (overloaded).
        let mut response = (st.respond)(&Refusal::Unavailable);
        if let Some((name, value)) = retry_after(v) {
            response.headers_mut().insert(name, value);
        }
        return response;
    }
    let mut response = (st.respond)(&Refusal::Limited(v));
    if v.denied() != Some(Denied::TooManyKeys) {
        let headers = response.headers_mut();
        for (name, value) in fields(st, key, v).into_iter().flatten() {
            headers.insert(name, value);
        }
        if let Some((name, value)) = retry_after(v) {
            headers.insert(name, value);
        }
    }
    response
}

/// `RateLimit-Policy` and `RateLimit` for `key`'s decision (`RateLimit`
/// left out when the limiter does not know the permits left).
fn fields<X: KeyExtractor, L: LayerLimiter<X::Ref>>(
    st: &State<X, L>,
    key: &X::Ref,
    v: &Verdict,
) -> Fields {
    let mut limits = [0u64; MAX_LIMITS];
    let k = st
        .limiter
        .policy_limits(key, v, &mut limits)
        .min(MAX_LIMITS);
    let policy: (HeaderName, HeaderValue) = (RATELIMIT_POLICY, st.policies.policy(&limits[..k]));
    let ratelimit = st.policies.ratelimit(v).map(|r| (RATELIMIT, r));
    [Some(policy), ratelimit]
}
