//! [`ResponseFuture`]: the inner service's response (with the rate-limit
//! fields of its grant added, when asked for), a refusal ready at once, or
//! a decision on its way (then either of those).

use crate::body::LimitBody;
use crate::key::KeyExtractor;
use crate::layer::State;
use crate::limit::LayerLimiter;
use crate::service::{outcome_owned, Outcome};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Fields added to a response (`RateLimit-Policy`, and `RateLimit` when
/// the limiter knows the permits left).
pub(crate) type Fields = [Option<(HeaderName, HeaderValue)>; 2];

/// What a pending decision resumes with: the readied inner service, the
/// request, its key, the layer's state.
pub(crate) struct Resume<Svc, ReqB, X: KeyExtractor, L> {
    pub(crate) svc: Svc,
    pub(crate) req: Request<ReqB>,
    pub(crate) key: X::Key,
    pub(crate) state: Arc<State<X, L>>,
}

pin_project! {
    /// The future of a [`KeyedRateLimit`](crate::KeyedRateLimit)'s
    /// response. Like most futures, it panics if polled again after it
    /// returned `Ready`.
    pub struct ResponseFuture<Svc, ReqB, X, L>
    where
        Svc: Service<Request<ReqB>>,
        X: KeyExtractor,
        L: LayerLimiter<X::Ref>,
    {
        #[pin]
        kind: Kind<Svc, ReqB, X, L>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<Svc, ReqB, X, L>
    where
        Svc: Service<Request<ReqB>>,
        X: KeyExtractor,
        L: LayerLimiter<X::Ref>,
    {
        Deciding { #[pin] pending: L::Pending, resume: Option<Resume<Svc, ReqB, X, L>> },
        Inner { #[pin] future: Svc::Future, fields: Option<Fields> },
        Refused { response: Option<Response<Bytes>> },
    }
}

impl<Svc, ReqB, X, L> ResponseFuture<Svc, ReqB, X, L>
where
    Svc: Service<Request<ReqB>>,
    X: KeyExtractor,
    L: LayerLimiter<X::Ref>,
{
    pub(crate) fn inner(future: Svc::Future, fields: Option<Fields>) -> Self {
        ResponseFuture {
            kind: Kind::Inner { future, fields },
        }
    }

    pub(crate) fn refused(response: Response<Bytes>) -> Self {
        ResponseFuture {
            kind: Kind::Refused {
                response: Some(response),
            },
        }
    }

    pub(crate) fn deciding(pending: L::Pending, resume: Resume<Svc, ReqB, X, L>) -> Self {
        ResponseFuture {
            kind: Kind::Deciding {
                pending,
                resume: Some(resume),
            },
        }
    }
}

impl<Svc, ReqB, ResB, X, L> Future for ResponseFuture<Svc, ReqB, X, L>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>>,
    X: KeyExtractor,
    L: LayerLimiter<X::Ref>,
{
    type Output = Result<Response<LimitBody<ResB>>, Svc::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        loop {
            match kind.as_mut().project() {
                KindProj::Deciding { pending, resume } => {
                    let verdict = std::task::ready!(pending.poll(cx));
                    let Resume {
                        mut svc,
                        req,
                        key,
                        state,
                    } = resume
                        .take()
                        .expect("ResponseFuture polled after completion");
                    let next = match outcome_owned(&state, &key, &verdict) {
                        Outcome::Call(fields) => Kind::Inner {
                            future: svc.call(req),
                            fields,
                        },
                        Outcome::Refuse(response) => Kind::Refused {
                            response: Some(response),
                        },
                    };
                    kind.set(next);
                }
                KindProj::Inner { future, fields } => {
                    let mut response = std::task::ready!(future.poll(cx))?;
                    if let Some(fields) = fields.take() {
                        let headers = response.headers_mut();
                        for (name, value) in fields.into_iter().flatten() {
                            headers.insert(name, value);
                        }
                    }
                    return Poll::Ready(Ok(response.map(LimitBody::inner)));
                }
                KindProj::Refused { response } => {
                    // Polled again after completion: a refusal is not re-sent.
                    let response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(response.map(LimitBody::refused)));
                }
            }
        }
    }
}

impl<Svc, ReqB, X, L> std::fmt::Debug for ResponseFuture<Svc, ReqB, X, L>
where
    Svc: Service<Request<ReqB>>,
    X: KeyExtractor,
    L: LayerLimiter<X::Ref>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}
