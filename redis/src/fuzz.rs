//! The decoders of what Redis answers, and the builders' validation, for
//! the fuzz targets (`fuzz/` in the repository). Compiled only with the
//! non-default feature `fuzzing`; not part of the crate's API.
//!
//! Each function runs one decoder on a reply and, when it accepts the
//! reply, asserts what the rest of the crate relies on (a panic here is a
//! finding: the fuzzer reports it). A reply the decoder refuses must be
//! refused with [`ClusterError::Protocol`], never a panic.

use crate::config::ClusterWindowsBuilder;
use crate::error::ClusterError;
use crate::key::RedisKey;
use crate::lease::{ClusterLimiterBuilder, LeaseReply};
use crate::resp::Request;
use crate::ring::Ring;
use crate::sample::sample_time;
use crate::script::{FlushReply, HotReply};
use crate::timeline::ServerTime;
use redis::Value;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Clock, Timestamp};

fn protocol_only(r: Result<(), ClusterError>) -> Result<(), ClusterError> {
    if let Err(e) = &r {
        assert!(matches!(e, ClusterError::Protocol(_)), "{e:?}");
    }
    r
}

/// The flush script's reply to a batch of `n` keys: every ring it accepts
/// lies in its blob and decodes, every crossing names a key of the batch.
pub fn flush_reply(v: Value, n: usize) -> Result<(), ClusterError> {
    protocol_only(FlushReply::decode(v, n).map(|r| {
        assert_eq!(r.rings.len(), n);
        for &(at, len) in &r.rings {
            let ring = r.blob.get(at..at + len).expect("a ring inside the blob");
            assert!(Ring::decode(ring).is_some());
        }
        assert!(r.crossings.iter().all(|&(i, _)| i < n));
    }))
}

/// The lease script's reply to a request that leased `m` keys: one answer
/// a key.
pub fn lease_reply(v: &Value, m: usize) -> Result<(), ClusterError> {
    protocol_only(LeaseReply::decode(v, m).map(|r| assert_eq!(r.leases.len(), m)))
}

/// The hot-set read's reply: one entry a pair after the version and the
/// `full` flag.
pub fn hot_reply(v: &Value) -> Result<(), ClusterError> {
    let Value::Array(a) = v else {
        return protocol_only(HotReply::decode(v).map(|_| ()));
    };
    let pairs = a.len().saturating_sub(2) / 2;
    protocol_only(HotReply::decode(v).map(|r| assert_eq!(r.entries.len(), pairs)))
}

/// A key's stored ring: decoded and read at epoch `e` over `slices`
/// slices. `is_valid` agrees with `decode`; a sum is never more than the
/// saturated total of the counts held.
pub fn ring(bytes: &[u8], e: u64, slices: usize) -> bool {
    let decoded = Ring::decode(bytes);
    assert_eq!(decoded.is_some(), Ring::is_valid(bytes));
    let Some(r) = decoded else {
        return false;
    };
    assert_eq!(bytes.len(), 8 + 16 * r.slots().len());
    let total = (r.slots().iter()).fold(0u64, |s, &(_, c)| s.saturating_add(c));
    assert!(r.sum_at(e, slices) <= total);
    assert!(r.sum_at(r.newest(), usize::MAX) <= total);
    let _ = r.until();
    true
}

/// A `TIME` reply to a request sent at node time `t0` and answered
/// `rtt_ns` later, filed into a fresh timeline: accepted (the first sample
/// always is), the server's time is then the reply's, to the
/// microsecond, at the round trip's midpoint.
pub fn time_reply(v: &Value, t0: u64, rtt_ns: u64) -> Result<(), ClusterError> {
    let clock = ManualClock::starting_at(Timestamp::from_nanos(t0));
    let time = ServerTime::new(clock.clone());
    clock.advance(Duration::from_nanos(rtt_ns));
    let t1 = clock.now().as_nanos();
    protocol_only(
        sample_time(&time, Timestamp::from_nanos(t0), v).map(|accepted| {
            assert!(accepted, "the first sample is always accepted");
            let mid = t0 + (t1 - t0) / 2;
            let server = time.now().as_nanos().wrapping_sub(t1 - mid);
            // Whole microseconds, or saturated (a reply past 2^64 ns).
            assert!(
                server.is_multiple_of(1_000) || server == u64::MAX,
                "{server}"
            );
        }),
    )
}

/// One argument of a request as the crate writes it.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// A bulk string of the bytes (`Request::arg`).
    Bytes(&'a [u8]),
    /// One bulk string of both parts (`Request::arg2`: a key's name).
    Two(&'a [u8], &'a [u8]),
    /// A number in decimal (`Request::num`).
    Num(u64),
}

/// `args` written as a request, read back by the Redis client's own
/// parser: an array of exactly these bulk strings. The same arguments
/// copied with `Request::args` into another request (`raw`) give the same
/// bytes, and a pipeline (`then`) is the requests one after the other.
pub fn request(args: &[Arg<'_>]) {
    let mut req = Request::new(args.len());
    let mut want = Vec::with_capacity(args.len());
    for a in args {
        match *a {
            Arg::Bytes(b) => {
                req.arg(b);
                want.push(Value::BulkString(b.to_vec()));
            }
            Arg::Two(a, b) => {
                req.arg2(a, b);
                want.push(Value::BulkString([a, b].concat()));
            }
            Arg::Num(n) => {
                req.num(n);
                want.push(Value::BulkString(n.to_string().into_bytes()));
            }
        }
    }
    let got = redis::parse_redis_value(&req.bytes).expect("a request is RESP");
    assert_eq!(got, Value::Array(want));
    let mut copy = Request::new(args.len());
    copy.raw(req.args());
    assert_eq!(copy.bytes, req.bytes);
    let mut pipeline = Request::new(args.len());
    pipeline.raw(req.args()).then(&req);
    assert_eq!(pipeline.bytes, [&req.bytes[..], &req.bytes[..]].concat());
}

/// `ClusterWindowsBuilder`'s validation (what `build` checks before it
/// connects): an error is a [`ClusterError::Config`].
pub fn validate_windows<K: RedisKey, C: Clock>(
    b: &ClusterWindowsBuilder<K, C>,
) -> Result<(), ClusterError> {
    let r = b.validate();
    if let Err(e) = &r {
        assert!(matches!(e, ClusterError::Config(_)), "{e:?}");
    }
    r
}

/// `ClusterLimiterBuilder`'s validation (what `build` checks before it
/// connects): an error is a [`ClusterError::Config`].
pub fn validate_limiter<K: RedisKey, C: Clock>(
    b: &ClusterLimiterBuilder<K, C>,
) -> Result<(), ClusterError> {
    let r = b.validate();
    if let Err(e) = &r {
        assert!(matches!(e, ClusterError::Config(_)), "{e:?}");
    }
    r
}
