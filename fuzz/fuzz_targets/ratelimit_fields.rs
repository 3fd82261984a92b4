//! The response fields of the tower layer, from arbitrary verdicts,
//! windows and policy names, read back as a client reads them.
//!
//! Input (text lines): the limiter's windows in nanoseconds; the policy
//! names separated by `|` (an empty line: the default names); the verdict,
//! `<kind> <index> <limit> <remaining or -> <retry or -> <reset or ->`
//! (kind `granted`, `refused`, `never`, `keys`, `unavailable`,
//! `overloaded`; durations in nanoseconds, seconds with an `s`, or `max`);
//! the key's limits.
//!
//! Checked: through the real layer (a limiter that answers that verdict),
//! `RateLimit-Policy` and `RateLimit` parse as Structured Fields (RFC
//! 9651, the `sfv` crate) and carry the values (names, limits, windows in
//! whole seconds, remaining, times rounded up to whole seconds, each at
//! most the largest sf-integer), `Retry-After` is the same seconds as
//! `t`; `grpc_response`'s `grpc-status-details-bin` decodes (base64, then
//! protobuf with prost) to the `google.rpc.Status` it claims, whose
//! `RetryInfo` holds the delay.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sfv::{BareItem, ListEntry, Parser};
use std::future::{ready, Future, Ready};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use stripecount::limiter::MAX_LIMITS;
use stripecount::Denied;
use stripecount_tower::{
    grpc_response, Check, Global, KeyedRateLimitLayer, LayerLimiter, Refusal, Verdict,
};
use tower_layer::Layer;
use tower_service::Service;

/// The largest sf-integer (15 digits).
const SF_MAX: u64 = 999_999_999_999_999;
/// The largest `google.protobuf.Duration`, in seconds.
const MAX_DURATION_SECS: u64 = 315_576_000_000;

struct Fixed {
    windows: Vec<Duration>,
    verdict: Verdict,
    limits: Vec<u64>,
}

impl LayerLimiter<()> for Fixed {
    type Pending = Ready<Verdict>;

    fn check(this: &Arc<Self>, _: &()) -> Check<Ready<Verdict>> {
        Check::Ready(this.verdict)
    }

    fn windows(&self) -> Vec<Duration> {
        self.windows.clone()
    }

    fn policy_limits(&self, _: &(), _: &Verdict, out: &mut [u64; MAX_LIMITS]) -> usize {
        for (o, l) in out.iter_mut().zip(&self.limits) {
            *o = *l;
        }
        self.limits.len()
    }
}

#[derive(Clone)]
struct Ok200;

impl Service<http::Request<()>> for Ok200 {
    type Response = http::Response<()>;
    type Error = std::convert::Infallible;
    type Future = Ready<Result<http::Response<()>, std::convert::Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        ready(Ok(http::Response::new(())))
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

fn int(item: &BareItem) -> u64 {
    match item {
        BareItem::Integer(i) => u64::try_from(*i).expect("a non-negative sf-integer"),
        other => panic!("not an sf-integer: {other:?}"),
    }
}

fn string(item: &BareItem) -> String {
    match item {
        BareItem::String(s) => s.to_string(),
        other => panic!("not an sf-string: {other:?}"),
    }
}

fn window_label(d: Duration) -> Option<String> {
    let nanos = d.as_nanos();
    let units: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let (unit, suffix) = units
        .into_iter()
        .find(|&(u, _)| nanos > 0 && nanos % u == 0)?;
    Some(format!("{}{suffix}", nanos / unit))
}

/// `google.rpc.Status` and the messages it holds (field numbers of the
/// googleapis protos).
#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

#[derive(Clone, PartialEq, Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// Standard base64, padded or not (what gRPC clients accept).
fn base64(s: &[u8]) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let s: Vec<u8> = s.iter().copied().filter(|&c| c != b'=').collect();
    assert_ne!(s.len() % 4, 1, "a base64 length");
    let mut out = Vec::new();
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        out.extend(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

fn check_grpc(v: &Verdict) {
    let r = grpc_response(&Refusal::Limited(v));
    assert_eq!(r.status(), http::StatusCode::OK);
    let h = r.headers();
    let code: i32 = h["grpc-status"].to_str().unwrap().parse().unwrap();
    let message = h["grpc-message"].to_str().unwrap().to_owned();
    let pushback = h
        .get("grpc-retry-pushback-ms")
        .map(|p| p.to_str().unwrap().to_owned());
    let details = h.get("grpc-status-details-bin");
    match (v.denied(), v.retry_after()) {
        (Some(Denied::TooManyKeys), _) => {
            assert_eq!(code, 14);
            assert!(pushback.is_none() && details.is_none());
        }
        (Some(Denied::ExceedsLimit), _) => {
            assert_eq!((code, pushback.as_deref()), (8, Some("-1")));
            assert!(details.is_none());
        }
        (_, None) => assert!(pushback.is_none() && details.is_none()),
        (_, Some(delay)) => {
            assert_eq!(code, 8);
            let ms = delay.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128);
            assert_eq!(pushback.unwrap().parse::<u128>().unwrap(), ms);
            let bytes = base64(details.unwrap().as_bytes());
            let status = Status::decode(&bytes[..]).expect("a google.rpc.Status");
            assert_eq!((status.code, &status.message), (code, &message));
            assert_eq!(status.details.len(), 1);
            let any = &status.details[0];
            assert_eq!(any.type_url, "type.googleapis.com/google.rpc.RetryInfo");
            let info = RetryInfo::decode(&any.value[..]).expect("a google.rpc.RetryInfo");
            let d = info.retry_delay.expect("a retry_delay");
            if delay.as_secs() <= MAX_DURATION_SECS {
                assert_eq!(d.seconds as u64, delay.as_secs());
                assert_eq!(d.nanos as u32, delay.subsec_nanos());
            } else {
                assert_eq!((d.seconds as u64, d.nanos), (MAX_DURATION_SECS, 0));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let mut line = || lines.next().unwrap_or("");
    let nums = |l: &str| -> Vec<u64> {
        l.split_ascii_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    // Nanoseconds, whole seconds with an `s` (past u64 nanoseconds), or
    // `max` (`Duration::MAX`, seconds and a fraction).
    let duration = |w: &str| match w.strip_suffix('s') {
        _ if w == "max" => Some(Duration::MAX),
        Some(s) => s.parse().ok().map(Duration::from_secs),
        None => w.parse().ok().map(Duration::from_nanos),
    };
    let windows: Vec<Duration> = line()
        .split_ascii_whitespace()
        .filter_map(duration)
        .collect();
    if windows.is_empty() || windows.len() > MAX_LIMITS {
        return;
    }
    let names_line = line();
    let names: Vec<&str> = names_line.split('|').collect();
    let verdict_line = line();
    let mut w = verdict_line.split_ascii_whitespace();
    let kind = w.next().unwrap_or("granted");
    let mut next = || w.next().unwrap_or("-");
    let (index, limit, remaining, retry, reset) = (next(), next(), next(), next(), next());
    let index = index.parse().unwrap_or(0usize) % windows.len();
    let limit = limit.parse().unwrap_or(0);
    let remaining = remaining.parse().ok();
    let (retry, reset) = (duration(retry), duration(reset));
    let verdict = match kind {
        "refused" => Verdict::refused(index, limit, Denied::Exhausted, retry),
        "never" => Verdict::refused(index, limit, Denied::ExceedsLimit, None),
        "keys" => Verdict::refused(index, limit, Denied::TooManyKeys, None),
        "unavailable" => Verdict::unavailable(limit),
        "overloaded" => Verdict::overloaded(limit, retry.unwrap_or_default()),
        _ => Verdict::granted(index, limit, remaining, reset),
    };
    let limits = nums(line());
    if verdict.is_unavailable() || verdict.denied().is_some() {
        check_grpc(&verdict);
    }

    let layer = KeyedRateLimitLayer::new(
        Fixed {
            windows: windows.clone(),
            verdict,
            limits: limits.clone(),
        },
        Global,
    )
    .fields_on_grant(true);
    let named = !names_line.is_empty();
    let layer = if named {
        match layer.policy_names(&names) {
            Ok(l) => l,
            Err(_) => {
                let printable = names
                    .iter()
                    .all(|n| !n.is_empty() && n.bytes().all(|b| (0x20..=0x7e).contains(&b)));
                assert!(
                    !printable || names.len() != windows.len(),
                    "{names:?} refused"
                );
                return;
            }
        }
    } else {
        layer
    };
    let mut svc = layer.layer(Ok200);
    let mut fut = std::pin::pin!(svc.call(http::Request::new(())));
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(response)) = fut.as_mut().poll(&mut cx) else {
        panic!("a ready verdict answers at once");
    };
    let h = response.headers();

    if verdict.is_unavailable() {
        assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
        let ra = h
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        assert_eq!(ra, verdict.retry_after().map(ceil_secs));
        return;
    }
    if verdict.denied() == Some(Denied::TooManyKeys) {
        assert!(h.get("ratelimit").is_none() && h.get("retry-after").is_none());
        return;
    }

    // RateLimit-Policy: one item per limit, in order.
    let policy = h["ratelimit-policy"].as_bytes();
    let list = Parser::parse_list(policy).expect("RateLimit-Policy is an sf-list");
    assert_eq!(list.len(), windows.len());
    let mut policy_names = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let ListEntry::Item(item) = entry else {
            panic!("an inner list in RateLimit-Policy");
        };
        let name = string(&item.bare_item);
        if named {
            assert_eq!(name, names[i]);
        } else if let Some(label) = window_label(windows[i]) {
            let twice = windows
                .iter()
                .filter(|&&w| window_label(w) == Some(label.clone()))
                .count()
                > 1;
            assert_eq!(name, if twice { format!("{label}-{i}") } else { label });
        }
        policy_names.push(name);
        let q = limits
            .get(i)
            .copied()
            .filter(|_| i < MAX_LIMITS)
            .unwrap_or(0);
        assert_eq!(int(&item.params["q"]), q.min(SF_MAX), "q of {i}");
        let w = windows[i];
        match item.params.get("w") {
            Some(sw) => {
                assert_eq!(w.subsec_nanos(), 0);
                assert_eq!(int(sw), w.as_secs().min(SF_MAX));
            }
            None => assert!(w.subsec_nanos() != 0 || w.is_zero()),
        }
    }

    // RateLimit: the limit the verdict names, the permits left, `t`.
    let Some(remaining) = verdict.remaining() else {
        assert!(h.get("ratelimit").is_none());
        return;
    };
    let item = Parser::parse_item(h["ratelimit"].as_bytes()).expect("RateLimit is an sf-item");
    assert_eq!(string(&item.bare_item), policy_names[index]);
    assert_eq!(int(&item.params["r"]), remaining.min(SF_MAX));
    let t = match (verdict.is_granted(), verdict.retry_after()) {
        (false, Some(retry)) => Some(retry),
        _ => verdict.reset_after(),
    };
    let got_t = item.params.get("t").map(int);
    assert_eq!(got_t, t.map(|t| ceil_secs(t).min(SF_MAX)));
    if !verdict.is_granted() {
        assert_eq!(response.status(), http::StatusCode::TOO_MANY_REQUESTS);
        let ra = h
            .get("retry-after")
            .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        assert_eq!(ra, verdict.retry_after().map(ceil_secs));
        if let (Some(ra), Some(t)) = (ra, got_t) {
            assert!(ra >= t, "Retry-After {ra} names a time before t={t}");
        }
    }
});
