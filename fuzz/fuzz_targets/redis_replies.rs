//! The replies the Redis layer decodes: the flush script's, the lease
//! script's, the hot-set read's, a stored ring, a `TIME` sample; and the
//! requests it writes in RESP.
//!
//! Input: a first line `<decoder> <n> <a> <b>` (decoder `flush`, `lease`,
//! `hot`, `ring`, `time` or `request`; the numbers default to 0), then the
//! reply: RESP bytes as Redis sends them (read by the Redis client's own
//! parser), or, when they are not RESP, a tree of values built from the
//! bytes ([`tree`]). For `ring` the rest is the stored value's bytes, for
//! `request` the arguments ([`args`]).
//!
//! Checked (in `stripecount_redis::__fuzz`): a reply is decoded or refused
//! as a protocol error, never a panic or an overflow, and what a decoder
//! accepts holds together (rings inside their blob, one answer a key); a
//! request reads back, with the Redis client's parser, as its arguments.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis::Value;
use stripecount_redis::__fuzz;

/// Values from bytes: a tag byte then its content, recursively (depth at
/// most 8, arrays of at most 16).
fn tree(b: &mut &[u8], depth: u32) -> Value {
    let Some((&tag, rest)) = b.split_first() else {
        return Value::Nil;
    };
    *b = rest;
    let mut take = |n: usize| {
        let n = n.min(b.len());
        let (h, t) = b.split_at(n);
        *b = t;
        h
    };
    match tag % 10 {
        0 => Value::Nil,
        1 => {
            let mut w = [0u8; 8];
            let h = take(8);
            w[..h.len()].copy_from_slice(h);
            Value::Int(i64::from_le_bytes(w))
        }
        2 => Value::Int(i64::from(take(1).first().copied().unwrap_or(0))),
        3 => {
            let n = usize::from(take(1).first().copied().unwrap_or(0));
            Value::BulkString(take(n).to_vec())
        }
        4 => {
            // A blob of doubles, as the scripts write rings and crossings.
            let n = usize::from(take(1).first().copied().unwrap_or(0) % 16);
            let mut blob = Vec::new();
            for _ in 0..n {
                let x = take(1).first().copied().unwrap_or(0);
                let d = match x % 4 {
                    0 => f64::from(x / 4),
                    1 => -f64::from(x),
                    2 => [
                        f64::NAN,
                        f64::INFINITY,
                        1e300,
                        0.5,
                        9.007_199_254_740_993e15,
                    ][usize::from(x / 4) % 5],
                    _ => (u64::from(x) << 56) as f64,
                };
                blob.extend_from_slice(&d.to_le_bytes());
            }
            Value::BulkString(blob)
        }
        5 | 6 if depth < 8 => {
            let n = usize::from(take(1).first().copied().unwrap_or(0) % 17);
            Value::Array((0..n).map(|_| tree(b, depth + 1)).collect())
        }
        7 => Value::SimpleString(String::from_utf8_lossy(take(4)).into_owned()),
        8 => Value::Okay,
        _ => Value::Double(f64::from(take(1).first().copied().unwrap_or(0)) - 100.0),
    }
}

/// A request's arguments from bytes: a tag byte, then a length and that
/// many bytes (tag 0), two of those (tag 1, one argument of both parts),
/// or eight bytes of a little-endian number (tag 2).
fn args(mut b: &[u8]) -> Vec<__fuzz::Arg<'_>> {
    fn part<'a>(b: &mut &'a [u8]) -> &'a [u8] {
        let n = b
            .first()
            .map_or(0, |&n| usize::from(n))
            .min(b.len().saturating_sub(1));
        let (p, rest) = b[b.len().min(1)..].split_at(n);
        *b = rest;
        p
    }
    let mut out = Vec::new();
    while let Some((&tag, rest)) = b.split_first() {
        b = rest;
        out.push(match tag % 3 {
            0 => __fuzz::Arg::Bytes(part(&mut b)),
            1 => __fuzz::Arg::Two(part(&mut b), part(&mut b)),
            _ => {
                let mut w = [0u8; 8];
                let n = b.len().min(8);
                w[..n].copy_from_slice(&b[..n]);
                b = &b[n..];
                __fuzz::Arg::Num(u64::from_le_bytes(w))
            }
        });
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let (head, rest) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let head = String::from_utf8_lossy(head);
    let mut words = head.split_ascii_whitespace();
    let decoder = words.next().unwrap_or("");
    let mut num = || {
        words
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (n, a, b) = (num(), num(), num());
    // A batch or a lease request holds at most a few thousand keys.
    let n = (n % 4096) as usize;
    if decoder == "request" {
        __fuzz::request(&args(rest));
        return;
    }
    if decoder == "ring" {
        __fuzz::ring(rest, a, b as usize);
        return;
    }
    let value = match redis::parse_redis_value(rest) {
        Ok(v) => v,
        Err(_) => tree(&mut &rest[..], 0),
    };
    let _ = match decoder {
        "flush" => __fuzz::flush_reply(value, n),
        "lease" => __fuzz::lease_reply(&value, n),
        "hot" => __fuzz::hot_reply(&value),
        "time" => __fuzz::time_reply(&value, a, b),
        _ => {
            // All of them on the same value.
            let _ = __fuzz::lease_reply(&value, n);
            let _ = __fuzz::hot_reply(&value);
            let _ = __fuzz::time_reply(&value, a, b);
            __fuzz::flush_reply(value, n)
        }
    };
});
