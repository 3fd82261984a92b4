//! [`grpc_response`]: refusals in gRPC form, for the layer on a tonic (or
//! any gRPC-over-HTTP/2) server.
//!
//! # Design
//! - **Trailers-Only.** A gRPC client reads the call's outcome from
//!   `grpc-status`, not from the HTTP status: a `429` without it reaches a
//!   tonic client as `UNAVAILABLE` at best (tonic's guess from the HTTP
//!   status), and with a text body as a protocol error (`INTERNAL`: the
//!   body is read as a gRPC message frame). A refusal is therefore what gRPC over HTTP/2 (PROTOCOL-HTTP2.md)
//!   calls a Trailers-Only response: HTTP `200`, `content-type:
//!   application/grpc`, `grpc-status` and `grpc-message` in the headers,
//!   and no body. The layer's body for it ([`LimitBody`](crate::LimitBody))
//!   is empty and says so (`is_end_stream`), so hyper's HTTP/2 server sends
//!   the headers with END_STREAM: one HEADERS frame, as the spec wants.
//! - **Codes.** A limited key: `RESOURCE_EXHAUSTED` (8), gRPC's code for an
//!   exhausted per-user quota. A limiter that holds its maximum of keys
//!   ([`Denied::TooManyKeys`]) or cannot decide
//!   ([`Refusal::Unavailable`]): `UNAVAILABLE` (14), an outage of the
//!   server as the HTTP `503` says, and the code gRPC clients retry. A
//!   request without a key: the [`MissingKey::Refuse`](crate::MissingKey)
//!   status turned into the code a gRPC server would answer for the same
//!   reason (the table on [`grpc_response`]); gRPC documents only the
//!   reverse mapping, for proxies, whose `400 -> INTERNAL` fits a broken
//!   proxy, not a request that lacks a credential.
//! - **Retry information**, for a limited key whose request can fit later
//!   ([`Verdict::retry_after`](crate::Verdict::retry_after)), in the two
//!   forms clients read:
//!   - `grpc-retry-pushback-ms` (gRPC's retry design, gRFC A6): the delay
//!     in milliseconds, rounded up. A client whose retry policy lists
//!     `RESOURCE_EXHAUSTED` as retryable waits that long before its next
//!     attempt. When the request can never fit
//!     ([`Denied::ExceedsLimit`]: a key whose limit is 0) it is `-1`, which
//!     A6 defines as "do not retry". A refusal whose delay the limiter does
//!     not know carries no retry information: the client's backoff decides.
//!   - `grpc-status-details-bin`: a `google.rpc.Status` (the rich error
//!     model: code, message, and a `google.rpc.RetryInfo` with the exact
//!     `retry_delay`), what `tonic-types`, grpc-go's `status.Details()` and
//!     Google's client libraries decode.
//! - **Encoding by hand.** The few protobuf fields of those messages
//!   (varints and length-delimited fields) and base64 are written here, so
//!   the crate takes no protobuf or base64 dependency. Base64 is the
//!   standard alphabet without padding: the spec says to emit `-bin` values
//!   unpadded and accept both, and tonic decodes either.
//! - **`grpc-message`** is percent-encoded as the spec says (every byte
//!   outside printable ASCII, and `%`, as `%XX`); the messages here are
//!   short ASCII text.
//! - **The layer's fields.** The layer adds `Retry-After`, `RateLimit` and
//!   `RateLimit-Policy` to a limited refusal (not to `TooManyKeys`),
//!   whatever the builder returned. In gRPC they are response metadata: clients that do not
//!   know them ignore them, and a client may read them as it reads any
//!   metadata (`status.metadata()` in tonic).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use std::time::Duration;
use stripecount::Denied;

use crate::refusal::Refusal;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");
const GRPC_RETRY_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// gRPC status codes (`google.rpc.Code`) used here.
mod code {
    pub const UNKNOWN: u8 = 2;
    pub const INVALID_ARGUMENT: u8 = 3;
    pub const DEADLINE_EXCEEDED: u8 = 4;
    pub const NOT_FOUND: u8 = 5;
    pub const PERMISSION_DENIED: u8 = 7;
    pub const RESOURCE_EXHAUSTED: u8 = 8;
    pub const FAILED_PRECONDITION: u8 = 9;
    pub const UNIMPLEMENTED: u8 = 12;
    pub const INTERNAL: u8 = 13;
    pub const UNAVAILABLE: u8 = 14;
    pub const UNAUTHENTICATED: u8 = 16;
}

const RETRY_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The largest pushback written: `i32::MAX` ms (about 24.8 days), so that
/// clients that parse the value as a 32-bit integer can read it (one that
/// cannot would take it as "do not retry").
const MAX_PUSHBACK_MS: u64 = i32::MAX as u64;

/// The largest `google.protobuf.Duration` (10,000 years, in seconds).
const MAX_DURATION_SECS: u64 = 315_576_000_000;

/// A refusal as a gRPC Trailers-Only response, for
/// [`KeyedRateLimitLayer::refusal`](crate::KeyedRateLimitLayer::refusal)
/// on a gRPC server (tonic's `Server::builder().layer(...)`).
///
/// HTTP `200`, `content-type: application/grpc`, an empty body, and:
///
/// | refusal | `grpc-status` |
/// | --- | --- |
/// | the key's limit | `8` `RESOURCE_EXHAUSTED` |
/// | the limiter cannot track more keys ([`Denied::TooManyKeys`]) | `14` `UNAVAILABLE` |
/// | the limiter cannot decide ([`Refusal::Unavailable`]) | `14` `UNAVAILABLE` |
/// | no key, [`MissingKey::Refuse`](crate::MissingKey) with `400` | `3` `INVALID_ARGUMENT` |
/// | ... `401` | `16` `UNAUTHENTICATED` |
/// | ... `403` | `7` `PERMISSION_DENIED` |
/// | ... `404` / `408` / `412` / `429` | `5` `NOT_FOUND` / `4` `DEADLINE_EXCEEDED` / `9` `FAILED_PRECONDITION` / `8` |
/// | ... any other `4xx` | `3` `INVALID_ARGUMENT` (the request lacks something) |
/// | ... `501` / `503` / `504` | `12` `UNIMPLEMENTED` / `14` / `4` |
/// | ... any other status | `13` `INTERNAL` for a `5xx`, else `2` `UNKNOWN` |
///
/// with a short `grpc-message`. A limited refusal also carries its retry
/// delay, when the limiter knows it: `grpc-retry-pushback-ms`
/// (milliseconds, rounded up) and `grpc-status-details-bin`, a
/// `google.rpc.Status` holding a `google.rpc.RetryInfo` with the exact
/// delay; a request that can never fit ([`Denied::ExceedsLimit`]) gets
/// `grpc-retry-pushback-ms: -1`, "do not retry". The layer adds its
/// `Retry-After` and `RateLimit` fields, which reach the client as
/// metadata.
///
/// ```
/// use std::time::Duration;
/// use stripecount::{Denied, KeyedLimiter, Quota};
/// use stripecount_tower::{grpc_response, Header, KeyedRateLimitLayer, Refusal, Verdict};
///
/// // On a tonic server: `Server::builder().layer(layer).add_service(...)`.
/// let limiter = KeyedLimiter::<String>::new(Quota::per_minute(100))?;
/// let api_key = Header::new(http::HeaderName::from_static("x-api-key"));
/// let layer = KeyedRateLimitLayer::new(limiter, api_key).refusal(grpc_response);
///
/// // A call refused by the limit of 100 until 1.5 s from now gets (before
/// // the layer adds its fields):
/// let limited = Verdict::refused(0, 100, Denied::Exhausted, Some(Duration::from_millis(1500)));
/// let r = grpc_response(&Refusal::Limited(&limited));
/// assert_eq!(r.status(), http::StatusCode::OK);
/// assert_eq!(r.headers()["content-type"], "application/grpc");
/// assert_eq!(r.headers()["grpc-status"], "8");
/// assert_eq!(r.headers()["grpc-message"], "too many requests");
/// assert_eq!(r.headers()["grpc-retry-pushback-ms"], "1500");
/// assert!(r.headers().contains_key("grpc-status-details-bin"));
/// assert!(r.body().is_empty());
///
/// let r = grpc_response(&Refusal::MissingKey(http::StatusCode::UNAUTHORIZED));
/// assert_eq!(r.headers()["grpc-status"], "16");
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub fn grpc_response(refusal: &Refusal<'_>) -> Response<Bytes> {
    let (code, message, retry) = match refusal {
        Refusal::Limited(v) => match v.denied() {
            Some(Denied::TooManyKeys) => (
                code::UNAVAILABLE,
                "the rate limiter cannot track more clients now",
                Retry::Unsaid,
            ),
            Some(Denied::ExceedsLimit) => {
                (code::RESOURCE_EXHAUSTED, "too many requests", Retry::Never)
            }
            _ => (
                code::RESOURCE_EXHAUSTED,
                "too many requests",
                v.retry_after().map_or(Retry::Unsaid, Retry::After),
            ),
        },
        Refusal::Unavailable => (
            code::UNAVAILABLE,
            "the rate limiter is unavailable",
            Retry::Unsaid,
        ),
        Refusal::MissingKey(status) => (
            code_of_status(*status),
            "no rate-limit key in the request",
            Retry::Unsaid,
        ),
    };
    let mut r = Response::new(Bytes::new());
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(u16::from(code)));
    headers.insert(GRPC_MESSAGE, percent_encode(message));
    match retry {
        Retry::After(delay) => {
            headers.insert(GRPC_RETRY_PUSHBACK, HeaderValue::from(pushback_ms(delay)));
            let details = status_with_retry_info(code, message, delay);
            headers.insert(GRPC_STATUS_DETAILS, base64_unpadded(&details));
        }
        Retry::Never => {
            headers.insert(GRPC_RETRY_PUSHBACK, HeaderValue::from_static("-1"));
        }
        Retry::Unsaid => {}
    }
    r
}

/// What a refusal tells the client about retrying.
enum Retry {
    /// The request fits after this delay.
    After(Duration),
    /// It never fits: "do not retry".
    Never,
    /// Nothing: the client's own policy decides.
    Unsaid,
}

/// The gRPC code for a missing-key refusal's HTTP status (see the table on
/// [`grpc_response`]).
fn code_of_status(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => code::INVALID_ARGUMENT,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        404 => code::NOT_FOUND,
        408 | 504 => code::DEADLINE_EXCEEDED,
        412 => code::FAILED_PRECONDITION,
        429 => code::RESOURCE_EXHAUSTED,
        501 => code::UNIMPLEMENTED,
        503 => code::UNAVAILABLE,
        _ if status.is_client_error() => code::INVALID_ARGUMENT,
        _ if status.is_server_error() => code::INTERNAL,
        _ => code::UNKNOWN,
    }
}

/// Milliseconds, rounded up, at most [`MAX_PUSHBACK_MS`].
fn pushback_ms(d: Duration) -> u64 {
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 > 0);
    u64::try_from(ms).unwrap_or(u64::MAX).min(MAX_PUSHBACK_MS)
}

/// `grpc-message`: bytes outside printable ASCII, and `%`, as `%XX`
/// (PROTOCOL-HTTP2.md, "Percent-Encoded").
fn percent_encode(message: &str) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend([b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    // Printable ASCII only: always a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A protobuf-encoded `google.rpc.Status { code, message, details: [Any {
/// RetryInfo { retry_delay } }] }`.
///
/// Field numbers: `Status` code 1 (int32), message 2 (string), details 3
/// (repeated Any); `Any` type_url 1, value 2 (bytes); `RetryInfo`
/// retry_delay 1 (Duration); `Duration` seconds 1 (int64), nanos 2
/// (int32). Fields at their default (0, empty) are left out, as proto3
/// encoders do; the `retry_delay` message is always written.
fn status_with_retry_info(code: u8, message: &str, delay: Duration) -> Vec<u8> {
    let secs = delay.as_secs().min(MAX_DURATION_SECS);
    let nanos = if secs == delay.as_secs() {
        delay.subsec_nanos()
    } else {
        0
    };
    let mut duration = Vec::with_capacity(12);
    if secs > 0 {
        varint_field(&mut duration, 1, secs);
    }
    if nanos > 0 {
        varint_field(&mut duration, 2, u64::from(nanos));
    }
    let mut retry_info = Vec::with_capacity(duration.len() + 2);
    bytes_field(&mut retry_info, 1, &duration);
    let mut any = Vec::with_capacity(RETRY_INFO_TYPE_URL.len() + retry_info.len() + 4);
    bytes_field(&mut any, 1, RETRY_INFO_TYPE_URL.as_bytes());
    bytes_field(&mut any, 2, &retry_info);
    let mut status = Vec::with_capacity(message.len() + any.len() + 8);
    if code > 0 {
        varint_field(&mut status, 1, u64::from(code));
    }
    if !message.is_empty() {
        bytes_field(&mut status, 2, message.as_bytes());
    }
    bytes_field(&mut status, 3, &any);
    status
}

/// A varint (wire type 0) field.
fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    varint(out, u64::from(field) << 3);
    varint(out, value);
}

/// A length-delimited (wire type 2) field.
fn bytes_field(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    varint(out, (u64::from(field) << 3) | 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A base-128 varint: 7 bits a byte, least significant first, the high
/// bit set on all but the last.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Standard base64 (RFC 4648 section 4), without padding, as a header
/// value.
fn base64_unpadded(data: &[u8]) -> HeaderValue {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // 2, 3 or 4 characters for 1, 2 or 3 bytes.
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]);
        }
    }
    // The base64 alphabet only: always a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors_unpadded() {
        let vectors = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64_unpadded(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64_unpadded(&[0xfb, 0xff, 0xbf]), "+/+/");
    }

    #[test]
    fn varints_and_fields() {
        let enc = |v: u64| {
            let mut out = Vec::new();
            varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(1), [1]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX).len(), 10);
        // The protobuf encoding guide's examples: field 1 = 150, field 2 =
        // "testing".
        let mut out = Vec::new();
        varint_field(&mut out, 1, 150);
        assert_eq!(out, [0x08, 0x96, 0x01]);
        let mut out = Vec::new();
        bytes_field(&mut out, 2, b"testing");
        assert_eq!(out, b"\x12\x07testing");
    }

    #[test]
    fn status_details_bytes() {
        let got = status_with_retry_info(8, "x", Duration::new(47, 500_000_000));
        // Duration { seconds: 47, nanos: 500000000 }.
        let duration = [0x08, 47, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01];
        let mut retry_info = vec![0x0a, duration.len() as u8];
        retry_info.extend(duration);
        let mut any = vec![0x0a, RETRY_INFO_TYPE_URL.len() as u8];
        any.extend(RETRY_INFO_TYPE_URL.as_bytes());
        any.extend([0x12, retry_info.len() as u8]);
        any.extend(&retry_info);
        let mut want = vec![0x08, 8, 0x12, 1, b'x', 0x1a, any.len() as u8];
        want.extend(&any);
        assert_eq!(got, want);
        // A zero delay: an empty Duration, still present.
        let got = status_with_retry_info(8, "", Duration::ZERO);
        assert!(got.ends_with(&[0x12, 2, 0x0a, 0]), "{got:?}");
    }

    #[test]
    fn pushback_rounds_up_and_saturates() {
        assert_eq!(pushback_ms(Duration::ZERO), 0);
        assert_eq!(pushback_ms(Duration::from_nanos(1)), 1);
        assert_eq!(pushback_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(pushback_ms(Duration::new(1, 500_000_001)), 1501);
        assert_eq!(
            pushback_ms(Duration::from_secs(30 * 86_400)),
            MAX_PUSHBACK_MS
        );
        assert_eq!(pushback_ms(Duration::MAX), MAX_PUSHBACK_MS);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("too many requests"), "too many requests");
        assert_eq!(
            percent_encode("100% \u{e9}t\u{e9}\n"),
            "100%25 %C3%A9t%C3%A9%0A"
        );
    }

    #[test]
    fn limited_refusals() {
        use crate::limit::Verdict;
        use stripecount::clock::ManualClock;
        use stripecount::{KeyedLimiter, Quota};
        let lim = KeyedLimiter::<String, _>::builder(Quota::per_minute(2).slices(6))
            .clock(ManualClock::new())
            .max_keys(1)
            .build()
            .unwrap();
        let verdict = |key: &str, n: u64| Verdict::from(lim.decide(key, n));
        assert!(verdict("a", 2).is_granted());
        let r = grpc_response(&Refusal::Limited(&verdict("a", 1)));
        assert_eq!(r.headers()[GRPC_STATUS], "8");
        assert_eq!(r.headers()[GRPC_RETRY_PUSHBACK], "60000");
        let details = status_with_retry_info(8, "too many requests", Duration::from_secs(60));
        assert_eq!(r.headers()[GRPC_STATUS_DETAILS], base64_unpadded(&details));
        // More than the limit can ever hold: "do not retry", no details.
        let never = verdict("a", 3);
        assert_eq!(never.denied(), Some(Denied::ExceedsLimit));
        let r = grpc_response(&Refusal::Limited(&never));
        assert_eq!(r.headers()[GRPC_STATUS], "8");
        assert_eq!(r.headers()[GRPC_RETRY_PUSHBACK], "-1");
        assert!(!r.headers().contains_key(GRPC_STATUS_DETAILS));
        // A second key, with the one slot busy: unavailable, no retry
        // information (the client's policy decides).
        let full = verdict("b", 1);
        assert_eq!(full.denied(), Some(Denied::TooManyKeys));
        let r = grpc_response(&Refusal::Limited(&full));
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[GRPC_STATUS], "14");
        assert!(!r.headers().contains_key(GRPC_RETRY_PUSHBACK));
        assert!(!r.headers().contains_key(GRPC_STATUS_DETAILS));
        // Limited with a delay the limiter does not know; undecided.
        let unknown = Verdict::refused(0, 2, Denied::Exhausted, None);
        let r = grpc_response(&Refusal::Limited(&unknown));
        assert_eq!(r.headers()[GRPC_STATUS], "8");
        assert!(!r.headers().contains_key(GRPC_RETRY_PUSHBACK));
        assert!(!r.headers().contains_key(GRPC_STATUS_DETAILS));
        let r = grpc_response(&Refusal::Unavailable);
        assert_eq!(r.headers()[GRPC_STATUS], "14");
        assert_eq!(r.headers()[GRPC_MESSAGE], "the rate limiter is unavailable");
        assert!(!r.headers().contains_key(GRPC_RETRY_PUSHBACK));
    }

    #[test]
    fn missing_key_codes() {
        let code = |s: u16| code_of_status(StatusCode::from_u16(s).unwrap());
        assert_eq!(code(400), code::INVALID_ARGUMENT);
        assert_eq!(code(401), code::UNAUTHENTICATED);
        assert_eq!(code(403), code::PERMISSION_DENIED);
        assert_eq!(code(404), code::NOT_FOUND);
        assert_eq!(code(418), code::INVALID_ARGUMENT);
        assert_eq!(code(429), code::RESOURCE_EXHAUSTED);
        assert_eq!(code(500), code::INTERNAL);
        assert_eq!(code(503), code::UNAVAILABLE);
        assert_eq!(code(302), code::UNKNOWN);
        let r = grpc_response(&Refusal::MissingKey(StatusCode::FORBIDDEN));
        assert_eq!(r.headers()[GRPC_STATUS], "7");
        assert_eq!(
            r.headers()[GRPC_MESSAGE],
            "no rate-limit key in the request"
        );
        assert!(!r.headers().contains_key(GRPC_RETRY_PUSHBACK));
        assert!(!r.headers().contains_key(GRPC_STATUS_DETAILS));
    }
}
