//! [`LimitBody`]: the response body of a rate-limited service, either the
//! inner service's body or a refusal's.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The body of a [`KeyedRateLimit`](crate::KeyedRateLimit)'s responses:
    /// the inner service's body, passed through untouched, or a refusal's
    /// (one chunk of bytes).
    ///
    /// It is an [`http_body::Body`] whenever the inner body is one whose
    /// data is built from [`Bytes`] (axum's and hyper's bodies, `Full`,
    /// `String`...), so an axum `Router` or a hyper server serves it as it
    /// is.
    pub struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Refused { data: Option<Bytes> },
    }
}

impl<B> LimitBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        LimitBody {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn refused(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        LimitBody {
            kind: Kind::Refused { data },
        }
    }

    /// Whether this is a refusal's body (the inner service was not called).
    pub fn is_refusal(&self) -> bool {
        matches!(self.kind, Kind::Refused { .. })
    }
}

impl<B> Body for LimitBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Refused { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(d.into()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            // An empty refusal is at its end before it is polled: hyper's
            // HTTP/2 server then ends the stream with the headers (a gRPC
            // Trailers-Only response) and writes no `content-length`.
            Kind::Refused { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Refused { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> std::fmt::Debug for LimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("LimitBody::Inner"),
            Kind::Refused { data } => f.debug_tuple("LimitBody::Refused").field(data).finish(),
        }
    }
}
