//! [`ResponseFuture`]: the inner service's response (with the rate-limit
//! fields of its grant added, when asked for), or a refusal, ready at once.

use crate::body::LimitBody;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Fields added to a granted response.
pub(crate) type Fields = [(HeaderName, HeaderValue); 2];

pin_project! {
    /// The future of a [`KeyedRateLimit`](crate::KeyedRateLimit)'s
    /// response. Like most futures, it panics if polled again after it
    /// returned `Ready`.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Inner { #[pin] future: F, fields: Option<Fields> },
        Refused { response: Option<Response<Bytes>> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn inner(future: F, fields: Option<Fields>) -> Self {
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
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future, fields } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                if let Some(fields) = fields.take() {
                    let headers = response.headers_mut();
                    for (name, value) in fields {
                        headers.insert(name, value);
                    }
                }
                Poll::Ready(Ok(response.map(LimitBody::inner)))
            }
            KindProj::Refused { response } => {
                // Polled again after completion: a refusal is not re-sent.
                let response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                Poll::Ready(Ok(response.map(LimitBody::refused)))
            }
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}
