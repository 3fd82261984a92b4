//! What a refused request gets back: [`Refusal`] (why), [`MissingKey`]
//! (what a request without a key gets), and the default response.
//!
//! A refusal's response is built by a function of the [`Refusal`] (the
//! default, [`default_response`], or one given to
//! [`KeyedRateLimitLayer::refusal`](crate::KeyedRateLimitLayer::refusal));
//! the layer then adds the rate-limit fields of a
//! [`Refusal::Limited`] (`Retry-After`, `RateLimit`, `RateLimit-Policy`)
//! to whatever it returned, so a custom body cannot lose them.

use crate::limit::Verdict;
use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use stripecount::Denied;

/// Why the layer refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal<'a> {
    /// The limiter refused the request's key; its decision says why
    /// ([`Verdict::denied`]) and when a retry would fit.
    Limited(&'a Verdict),
    /// The limiter could not decide ([`Verdict::is_unavailable`]: a
    /// fleet-wide limiter's store unreachable, and its outage policy
    /// refuses). No rate-limit fields are added: nothing was counted.
    Unavailable,
    /// The request had no key and [`MissingKey::Refuse`] is in force, with
    /// this status.
    MissingKey(StatusCode),
}

/// What the layer does with a request whose key cannot be extracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Refuse it with this status (the default: `400 Bad Request`). The
    /// response is built as any refusal's ([`Refusal::MissingKey`]).
    Refuse(StatusCode),
    /// Pass it to the inner service, unlimited and without rate-limit
    /// fields.
    Pass,
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Refuse(StatusCode::BAD_REQUEST)
    }
}

/// The default response to a refusal, a short plain-text body:
/// - the limit refused the request: `429 Too Many Requests`;
/// - the limiter holds its maximum of keys, none idle, and refuses new ones
///   ([`Denied::TooManyKeys`]): `503 Service Unavailable` (an overload of
///   the service, not the client's quota), or cannot decide
///   ([`Refusal::Unavailable`]): `503` as well;
/// - no key: the [`MissingKey::Refuse`] status.
///
/// ```
/// use http::StatusCode;
/// use stripecount_tower::{default_response, Refusal};
///
/// let r = default_response(&Refusal::MissingKey(StatusCode::UNAUTHORIZED));
/// assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
/// assert_eq!(r.body().as_ref(), b"no rate-limit key in the request\n");
/// ```
pub fn default_response(refusal: &Refusal<'_>) -> Response<Bytes> {
    let (status, body) = match refusal {
        Refusal::Limited(d) if d.denied() == Some(Denied::TooManyKeys) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the rate limiter cannot track more clients now\n",
        ),
        Refusal::Limited(_) => (StatusCode::TOO_MANY_REQUESTS, "too many requests\n"),
        Refusal::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the rate limiter is unavailable\n",
        ),
        Refusal::MissingKey(status) => (*status, "no rate-limit key in the request\n"),
    };
    let mut r = Response::new(Bytes::from_static(body.as_bytes()));
    *r.status_mut() = status;
    let text = HeaderValue::from_static("text/plain; charset=utf-8");
    r.headers_mut().insert(header::CONTENT_TYPE, text);
    r
}
