//! The lease script (`lease.lua`): its keys, how a request is encoded and
//! how its reply is read.
//!
//! # The exactly-once protocol
//! The flush's (`src/script.rs`), for leases and returns: a node numbers
//! each group's requests `1, 2, ...` (its id is random per limiter, so a
//! new limiter starts a new sequence), sends one at a time, and keeps a
//! request until a reply acknowledges it, resending it unchanged (same
//! sequence) after any failure and before any other request. A request
//! carries the returns and a lease of each of up to `max_batch_keys` keys
//! (the callers queued in the group's lane, `lane.rs`; each key once).
//! Redis keeps, per node and group, `(last applied sequence, its slice,
//! what each of its leases granted)`. The script, atomically:
//! - `seq > last` (or no record): applies the returns, then each lease
//!   in order, stores the record, and answers `(0, slice, us left in it,
//!   server time, grants, then per refused key with a retry time: its
//!   index from 1, us until its lease would fit)`, the grants as the
//!   record keeps them (one little-endian double a key: a bulk string, so
//!   a batch of granted keys costs the reply nothing a key);
//! - `seq == last`: applied before and its reply lost: changes nothing and
//!   answers `(1, slice, us left in that slice now, server time, grants)`
//!   from the record, so each lease it made is used (or returned) once and
//!   its returns are not applied twice;
//! - `seq < last`: refuses (`SSEQ`; a node never does this).
//!
//! The record expires after the judged slices (the window, plus a slice
//! when the quota is strict) plus a slice plus 5 minutes. A request resent
//! after that would be applied again, but its returns are of slices that
//! left the judged window by then (the script ignores them) and its lease
//! would be a fresh one: still never a double return.
//!
//! # Strict quotas
//! The script judges a request against the last `J` server slices of the
//! key, `J` = the quota's slices, or one more for a strict quota; the node
//! sends `J` and everything that depends on the window's length follows
//! it (the sum, the key's expiry, which returns still count, the retry
//! time). The protocol above does not depend on `J`.
//!
//! # Keys
//! Where the counts, the record and the config live: `layout.rs`.

use super::layout::LeaseNames;
use crate::error::ClusterError;
use crate::script::{int, time_us, Request};
use redis::Value;

/// The lease script's source.
pub(crate) const LEASE: &str = include_str!("lease.lua");

/// The script's fixed arguments.
#[derive(Debug, Clone)]
pub(crate) struct LeaseShape {
    /// The quota's slices.
    pub(crate) slices: u64,
    /// The slices a request is judged against: `slices`, one more when
    /// `strict` (the script's `J`).
    pub(crate) judged: u64,
    pub(crate) strict: bool,
    pub(crate) slice_ms: u64,
    pub(crate) limit: u64,
    pub(crate) record_ttl_ms: u64,
    /// Groups on a cluster, 0 on a single instance.
    pub(crate) cluster_groups: usize,
}

impl LeaseShape {
    /// The arguments every request of the namespace carries after its
    /// sequence, encoded once: the slices judged, the slice length, the
    /// limit, the record's lifetime and the config string.
    pub(crate) fn fixed_args(&self) -> Vec<u8> {
        let mut r = Request::new(5);
        r.num(self.judged)
            .num(self.slice_ms)
            .num(self.limit)
            .num(self.record_ttl_ms)
            .arg(self.config_string().as_bytes());
        r.args().to_vec()
    }

    /// What every node of a namespace must agree on:
    /// `slices:slice_ms:limit`, with `:strict` after it for a strict
    /// quota, `:g<groups>` on a cluster, and `:b` for the layout of the
    /// counts (`layout.rs`): a node that keeps them another way is refused.
    pub(crate) fn config_string(&self) -> String {
        let strict = if self.strict { ":strict" } else { "" };
        let groups = match self.cluster_groups {
            0 => String::new(),
            g => format!(":g{g}"),
        };
        format!(
            "{}:{}:{}{strict}{groups}:b",
            self.slices, self.slice_ms, self.limit
        )
    }
}

/// Permits of a key (its field `name`, written by `layout::name_of` when
/// the return was queued) leased in slice `epoch`, given back.
#[derive(Debug, Clone)]
pub(crate) struct Return {
    pub(crate) name: Box<[u8]>,
    pub(crate) epoch: u64,
    pub(crate) permits: u64,
}

/// One key leased by a request: its field `name` (`layout::name_of`), at
/// least `need` permits (or none), `want` if there is room.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) need: u64,
    pub(crate) want: u64,
}

/// Encodes request `seq`: a lease of each key of `asks` (each key once),
/// and the returns; `fixed` is the namespace's
/// [`fixed_args`](LeaseShape::fixed_args). Runs no code of the key type:
/// every name is written before.
pub(crate) fn lease_request(
    sha: &str,
    names: &LeaseNames,
    fixed: &[u8],
    seq: u64,
    asks: &[Ask<'_>],
    returns: &[Return],
) -> Request {
    let (m, n) = (asks.len(), returns.len());
    let keys = 3 + names.buckets.len();
    let mut req = Request::new(3 + keys + 8 + m + 3 * n);
    req.arg(b"EVALSHA")
        .arg(sha.as_bytes())
        .num(keys as u64)
        .arg(&names.record)
        .arg(&names.cfg)
        .arg(&names.gens);
    for b in &names.buckets {
        req.arg(b);
    }
    req.num(seq).raw(fixed).num(m as u64);
    // Each lease's need and want as two little-endian doubles in one
    // argument: the script reads them with `struct.unpack`, where two
    // decimal arguments a key cost it two `tonumber` (strtod) calls. A
    // double holds every permit count below 2^53 exactly, as Lua's numbers
    // (doubles) would anyway.
    let mut packed = Vec::with_capacity(16 * m);
    for a in asks {
        packed.extend_from_slice(&(a.need as f64).to_le_bytes());
        packed.extend_from_slice(&(a.want as f64).to_le_bytes());
    }
    req.arg(&packed);
    for a in asks {
        req.arg(a.name);
    }
    for r in returns {
        req.arg(&r.name).num(r.epoch).num(r.permits);
    }
    req
}

/// What the lease script answered of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leased {
    /// Permits leased (0: no room for the need).
    pub(crate) granted: u64,
    /// Refused: server microseconds until enough of the window's slices
    /// leave it for the need to fit (`None`: not refused, or a replay).
    pub(crate) retry_us: Option<u64>,
}

/// What the lease script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseReply {
    /// Applied before; this is the stored answer.
    pub(crate) replayed: bool,
    /// The server slice the leases are in.
    pub(crate) epoch: u64,
    /// Server microseconds left in that slice when the script ran (<= 0:
    /// the slice is over).
    pub(crate) left_us: i64,
    /// The server's time then (Unix microseconds): a `TIME` sample.
    pub(crate) server_us: u64,
    /// Each leased key's answer, in the request's order.
    pub(crate) leases: Vec<Leased>,
}

/// The largest count a double holds exactly (2^53).
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

fn protocol(what: &str) -> ClusterError {
    ClusterError::Protocol(what.to_owned())
}

impl LeaseReply {
    /// Reads the reply to a request that leased `m` keys.
    pub(crate) fn decode(v: &Value, m: usize) -> Result<LeaseReply, ClusterError> {
        let Value::Array(a) = v else {
            return Err(protocol("the lease reply is not an array"));
        };
        if a.len() < 6 || a.len() % 2 != 0 {
            return Err(protocol("the lease reply has the wrong length"));
        }
        let Value::Int(left_us) = a[2] else {
            return Err(protocol("the lease reply's time left is not an integer"));
        };
        let Value::BulkString(grants) = &a[5] else {
            return Err(protocol("the lease reply's grants are not a string"));
        };
        if grants.len() != 8 * m {
            return Err(protocol("the lease reply's grants are not one a key"));
        }
        let mut leases = grants
            .chunks_exact(8)
            .map(|g| {
                let g = f64::from_le_bytes(g.try_into().expect("8 bytes"));
                // A grant is a whole number of permits below 2^53.
                if !(0.0..=MAX_EXACT).contains(&g) || g.fract() != 0.0 {
                    return Err(protocol("a lease reply's grant is not a count"));
                }
                Ok(Leased {
                    granted: g as u64,
                    retry_us: None,
                })
            })
            .collect::<Result<Vec<_>, ClusterError>>()?;
        for p in a[6..].chunks_exact(2) {
            let i = int(&p[0])?;
            let lease = usize::try_from(i)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| leases.get_mut(i))
                .ok_or_else(|| protocol("a lease reply's retry names no key"))?;
            if lease.granted > 0 || lease.retry_us.is_some() {
                return Err(protocol(
                    "a lease reply's retry is of a granted or retried key",
                ));
            }
            lease.retry_us = Some(int(&p[1])?);
        }
        Ok(LeaseReply {
            replayed: int(&a[0])? == 1,
            epoch: int(&a[1])?,
            left_us,
            server_us: time_us(&a[3], &a[4])?,
            leases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(strict: bool) -> LeaseShape {
        LeaseShape {
            slices: 4,
            judged: 4 + u64::from(strict),
            strict,
            slice_ms: 250,
            limit: 100,
            record_ttl_ms: 9,
            cluster_groups: 0,
        }
    }

    #[test]
    fn a_request_names_the_leased_keys_then_the_returned_ones() {
        let names = LeaseNames::new("ns", None, "id");
        let rets = [Return {
            name: (*b"b").into(),
            epoch: 7,
            permits: 3,
        }];
        let asks = [
            Ask {
                name: b"a",
                need: 1,
                want: 8,
            },
            Ask {
                name: b"c",
                need: 2,
                want: 2,
            },
        ];
        let r = lease_request("sha", &names, &shape(false).fixed_args(), 5, &asks, &rets);
        let mut packed = Vec::new();
        for x in [1.0f64, 8.0, 2.0, 2.0] {
            packed.extend_from_slice(&x.to_le_bytes());
        }
        let bytes = r.bytes.clone();
        let s = String::from_utf8_lossy(&r.bytes).into_owned();
        assert!(s.starts_with(
            "*23\r\n$7\r\nEVALSHA\r\n$3\r\nsha\r\n$1\r\n7\r\n$8\r\nns:ln:id\r\n\
             $7\r\nns:lcfg\r\n$5\r\nns:lg\r\n$7\r\nns:lb:0\r\n$7\r\nns:lb:1\r\n\
             $7\r\nns:lb:2\r\n$7\r\nns:lb:3\r\n$1\r\n5\r\n"
        ));
        // The settings, m, the packed asks, the leased keys' fields, then
        // each return's field, slice and permits.
        let mut tail = b"$11\r\n4:250:100:b\r\n$1\r\n2\r\n$32\r\n".to_vec();
        tail.extend_from_slice(&packed);
        tail.extend_from_slice(b"\r\n$1\r\na\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\n7\r\n$1\r\n3\r\n");
        assert!(bytes.ends_with(&tail));
        let grants =
            |g: &[f64]| Value::BulkString(g.iter().flat_map(|x| x.to_le_bytes()).collect());
        let reply = |g: &[f64], retries: &[i64]| {
            let mut a = vec![
                Value::Int(0),
                Value::Int(77),
                Value::Int(-5),
                Value::BulkString(b"12".to_vec()),
                Value::BulkString(b"345".to_vec()),
                grants(g),
            ];
            a.extend(retries.iter().map(|&r| Value::Int(r)));
            Value::Array(a)
        };
        let v = reply(&[8.0, 0.0], &[2, 250]);
        assert_eq!(
            LeaseReply::decode(&v, 2).unwrap(),
            LeaseReply {
                replayed: false,
                epoch: 77,
                left_us: -5,
                server_us: 12_000_345,
                leases: vec![
                    Leased {
                        granted: 8,
                        retry_us: None
                    },
                    Leased {
                        granted: 0,
                        retry_us: Some(250)
                    },
                ],
            }
        );
        assert!(LeaseReply::decode(&v, 1).is_err());
        assert!(LeaseReply::decode(&v, 3).is_err());
        // A refusal without a retry time: no pair.
        let none = LeaseReply::decode(&reply(&[0.0], &[]), 1).unwrap();
        assert_eq!(
            none.leases,
            [Leased {
                granted: 0,
                retry_us: None
            }]
        );
        // Malformed: a retry of no key, of key 0, of a granted key, twice,
        // a pair cut short; a grant not a count.
        for (g, r) in [
            (&[8.0, 0.0][..], &[3, 250][..]),
            (&[8.0, 0.0], &[0, 250]),
            (&[8.0, 0.0], &[1, 250]),
            (&[8.0, 0.0], &[2, 250, 2, 250]),
            (&[8.0, 0.0], &[2]),
            (&[8.5, 0.0], &[]),
            (&[-1.0, 0.0], &[]),
            (&[f64::NAN, 0.0], &[]),
        ] {
            assert!(LeaseReply::decode(&reply(g, r), 2).is_err(), "{g:?} {r:?}");
        }
    }

    #[test]
    fn a_strict_quota_is_judged_on_one_slice_more_and_says_so() {
        let shape = shape(true);
        assert_eq!(shape.config_string(), "4:250:100:strict:b");
        let names = LeaseNames::new("ns", None, "id");
        let r = lease_request("sha", &names, &shape.fixed_args(), 7, &[], &[]);
        let s = String::from_utf8(r.bytes).unwrap();
        // The sequence, then the slices judged, then the slice length.
        assert!(s.contains("$1\r\n7\r\n$1\r\n5\r\n$3\r\n250\r\n$3\r\n100\r\n"));
        assert!(s.ends_with("$18\r\n4:250:100:strict:b\r\n$1\r\n0\r\n$0\r\n\r\n"));
    }
}
