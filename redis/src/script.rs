//! The flush script (`flush.lua`) and the hot-set read (`hot_read.lua`):
//! the Redis keys a namespace uses, how a batch is encoded for the script,
//! and how its reply is read.
//!
//! # The exactly-once protocol
//! A node sends its batches one at a time, numbered `1, 2, ...` (its flush
//! sequence; the node's id is random per process, so a restarted node
//! starts a new sequence under a new id). Redis keeps, per node, a record
//! `(last applied sequence, the counts that batch dropped as too old, the
//! crossings it reported)`. The script, atomically:
//! - `seq > last` (or no record): applies the batch and stores `seq` and its
//!   crossings in the record;
//! - `seq == last`: the batch was applied and its reply lost: changes
//!   nothing and answers again, with the stored drops and crossings and
//!   the keys' current rings;
//! - `seq < last`: refuses (`SSEQ`; a node never does this).
//!
//! The node keeps a batch until a reply acknowledges it and resends the
//! same batch (same sequence) after any failure, so every batch is applied
//! exactly once. Every check runs before the first write (a script that
//! fails midway keeps its earlier writes), and the script starts with
//! `#!lua`, so Redis refuses it up front when out of memory rather than
//! midway.
//!
//! The record expires after the window plus a slice plus 5 minutes (the
//! record TTL). A batch resent after its record expired is applied again,
//! but all of its counts are older than the window by then (a batch holds
//! counts of slices that had begun when it was cut) and the script drops
//! counts older than the window: still counted once in every window. Only
//! its crossings, stored in the record, are then not reported a second
//! time (they had been reported to no one: the reply was lost).
//!
//! # Keys of a namespace `ns`
//! `ns:b:<slot>:<sub-bucket>` the buckets holding the keys' rings and
//! `ns:bg` their slots' generations (`bucket.rs`), `ns:n:<node id>` a
//! node's record, `ns:cfg` the window shape and layout every node must
//! share (`slices:slice_ms:b<sub-buckets>`), `ns:hot` the hot set (member:
//! the key's field, score: the epoch it cools at), `ns:hotv` (member: the
//! key's field, score: the hot version of its last change) and `ns:hotver`
//! the hot version (bumped by each batch that changes the hot set).

use crate::bucket::{bucket_names, sub_bucket, SLOTS};
use crate::error::ClusterError;
pub(crate) use crate::resp::Request;
use crate::ring::{put_f64, Ring};
use redis::Value;

/// The flush script's source.
pub(crate) const FLUSH: &str = include_str!("flush.lua");
/// The hot-set read's source.
pub(crate) const HOT_READ: &str = include_str!("hot_read.lua");
/// The source of the read of one key's ring.
pub(crate) const RING_READ: &str = include_str!("ring_read.lua");

/// A Lua script and its SHA1 (for `EVALSHA`).
#[derive(Debug)]
pub(crate) struct Lua {
    pub(crate) source: &'static str,
    pub(crate) sha: String,
}

impl Lua {
    pub(crate) fn new(source: &'static str) -> Lua {
        Lua {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }
}

/// The Redis key names of one namespace.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The buckets, slot `r`'s sub-bucket `m` at `r * sub_buckets + m`.
    pub(crate) buckets: Vec<Vec<u8>>,
    /// The slots' generations.
    pub(crate) gens: Vec<u8>,
    pub(crate) record: Vec<u8>,
    pub(crate) cfg: Vec<u8>,
    pub(crate) hot: Vec<u8>,
    pub(crate) hotv: Vec<u8>,
    pub(crate) hotver: Vec<u8>,
}

impl Names {
    /// The names of a namespace on a single instance (`tag` `None`: the
    /// layout above) or of one group of it on a cluster (`ns:{tag}:b:0:0`
    /// and so on: every name of the group in the tag's slot; `group.rs`).
    pub(crate) fn new(ns: &str, tag: Option<&str>, node_id: &str, sub_buckets: usize) -> Names {
        let pre = match tag {
            Some(t) => format!("{ns}:{{{t}}}"),
            None => ns.to_owned(),
        };
        let k = |s: &str| format!("{pre}:{s}").into_bytes();
        Names {
            buckets: bucket_names(&format!("{pre}:"), sub_buckets),
            gens: k("bg"),
            record: k(&format!("n:{node_id}")),
            cfg: k("cfg"),
            hot: k("hot"),
            hotv: k("hotv"),
            hotver: k("hotver"),
        }
    }
}

/// The shape of the windows and the script's fixed arguments.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) slices: usize,
    pub(crate) slice_ms: u64,
    /// 0: no hot detection.
    pub(crate) threshold: u64,
    pub(crate) record_ttl_ms: u64,
    /// Groups on a cluster (`group.rs`), 0 on a single instance.
    pub(crate) cluster_groups: usize,
    /// Sub-buckets a bucket slot (`bucket.rs`).
    pub(crate) sub_buckets: usize,
}

impl Shape {
    /// What every node of a namespace must agree on.
    pub(crate) fn config_string(&self) -> String {
        let (s, ms) = (self.slices, self.slice_ms);
        match self.cluster_groups {
            0 => format!("{s}:{ms}:b{}", self.sub_buckets),
            g => format!("{s}:{ms}:b{}:g{g}", self.sub_buckets),
        }
    }
}

/// Writes the `EVALSHA` of one batch: the fixed keys and arguments, the
/// deltas' blob, how many keys each sub-bucket has, then the keys' fields,
/// which must come by sub-bucket (`Pending::cut` orders them so).
pub(crate) struct BatchWriter {
    req: Request,
    blob: Vec<u8>,
    fields: Request,
    counts: Vec<u64>,
    last: usize,
}

impl BatchWriter {
    /// A batch of `n` keys.
    pub(crate) fn new(sha: &str, names: &Names, n: usize) -> BatchWriter {
        let keys = 6 + names.buckets.len();
        let mut req = Request::new(3 + keys + 8 + n);
        req.bytes.reserve(keys * 24 + 200 + n * 48);
        req.arg(b"EVALSHA").arg(sha.as_bytes()).num(keys as u64);
        req.arg(&names.record)
            .arg(&names.cfg)
            .arg(&names.hot)
            .arg(&names.hotv)
            .arg(&names.hotver)
            .arg(&names.gens);
        for b in &names.buckets {
            req.arg(b);
        }
        BatchWriter {
            req,
            blob: Vec::with_capacity(n * 24),
            fields: Request {
                bytes: Vec::with_capacity(n * 16),
            },
            counts: vec![0; names.buckets.len() / SLOTS],
            last: 0,
        }
    }

    /// One key (its field) and its deltas (`n` calls in all, in batch
    /// order: by sub-bucket).
    pub(crate) fn key(&mut self, field: &[u8], deltas: &[(u64, u64)]) {
        let m = sub_bucket(field, self.counts.len());
        debug_assert!(m >= self.last, "fields by sub-bucket");
        self.last = m;
        self.counts[m] += 1;
        self.fields.arg(field);
        put_f64(&mut self.blob, deltas.len() as u64);
        for &(e, c) in deltas {
            put_f64(&mut self.blob, e);
            put_f64(&mut self.blob, c);
        }
    }

    /// The request for batch `seq`.
    pub(crate) fn finish(mut self, shape: &Shape, seq: u64) -> Request {
        let mut counts = Vec::with_capacity(8 * self.counts.len());
        for &c in &self.counts {
            put_f64(&mut counts, c);
        }
        self.req
            .num(seq)
            .num(shape.slices as u64)
            .num(shape.slice_ms)
            .num(shape.threshold)
            .num(shape.record_ttl_ms)
            .arg(&self.blob)
            .arg(shape.config_string().as_bytes())
            .arg(&counts);
        self.req.then(&self.fields);
        self.req
    }
}

/// What the flush script answered.
#[derive(Debug)]
pub(crate) struct FlushReply {
    /// The batch had been applied already (its first reply was lost).
    pub(crate) replayed: bool,
    /// Counts the script dropped as older than the window.
    pub(crate) dropped: u64,
    /// Every key's ring after the batch, in batch order: `(offset, len)`
    /// of its stored value in `blob`.
    pub(crate) rings: Vec<(usize, usize)>,
    pub(crate) blob: Vec<u8>,
    /// `(index in the batch, window sum)` of each key this batch made hot.
    pub(crate) crossings: Vec<(usize, u64)>,
    /// The hot version after the batch.
    pub(crate) hot_version: u64,
    /// The node's last applied sequence Redis held before this call (`-1`:
    /// no record). Below the last one the node saw acknowledged, Redis lost
    /// the batches between (a failover before the replica had them).
    pub(crate) prev_seq: i64,
}

fn protocol(what: &str) -> ClusterError {
    ClusterError::Protocol(what.to_owned())
}

pub(crate) fn int(v: &Value) -> Result<u64, ClusterError> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| protocol("negative integer")),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol("not an integer")),
        _ => Err(protocol("expected an integer")),
    }
}

pub(crate) fn bytes(v: &Value) -> Result<&[u8], ClusterError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::Nil => Ok(&[]),
        _ => Err(protocol("expected a string")),
    }
}

fn f64_at(b: &[u8], at: usize) -> Option<f64> {
    let w = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(w);
    Some(f64::from_le_bytes(a))
}

/// The server time of a `TIME` reply (`[seconds, microseconds]`), or of
/// the script's copy of it.
pub(crate) fn time_us(secs: &Value, micros: &Value) -> Result<u64, ClusterError> {
    Ok(int(secs)?
        .saturating_mul(1_000_000)
        .saturating_add(int(micros)?))
}

impl FlushReply {
    /// Reads the reply to a batch of `n` keys.
    pub(crate) fn decode(v: Value, n: usize) -> Result<FlushReply, ClusterError> {
        let Value::Array(mut a) = v else {
            return Err(protocol("the flush reply is not an array"));
        };
        if a.len() != 8 {
            return Err(protocol("the flush reply has the wrong length"));
        }
        let prev_seq = match a[7] {
            Value::Int(i) => i,
            _ => return Err(protocol("the previous sequence is not an integer")),
        };
        let blob = match std::mem::take(&mut a[4]) {
            Value::BulkString(b) => b,
            _ => return Err(protocol("the rings are not a string")),
        };
        let mut rings = Vec::with_capacity(n);
        let mut at = 0;
        while at < blob.len() {
            let m = f64_at(&blob, at).ok_or_else(|| protocol("short ring"))?;
            // A count from the wire: checked, so a bad reply is an error,
            // never an overflow (a float casts to usize saturating).
            let len = (m as usize)
                .checked_mul(16)
                .and_then(|l| l.checked_add(8))
                .filter(|&l| l <= blob.len() - at)
                .ok_or_else(|| protocol("bad ring"))?;
            if at + 8 + len > blob.len() || !Ring::is_valid(&blob[at + 8..at + 8 + len]) {
                return Err(protocol("bad ring"));
            }
            rings.push((at + 8, len));
            at += 8 + len;
        }
        if rings.len() != n {
            return Err(protocol("the flush reply has the wrong number of rings"));
        }
        let hb = bytes(&a[5])?;
        if !hb.len().is_multiple_of(16) {
            return Err(protocol("bad crossings"));
        }
        let mut crossings = Vec::with_capacity(hb.len() / 16);
        for c in hb.chunks_exact(16) {
            let (Some(i), Some(s)) = (f64_at(c, 0), f64_at(c, 8)) else {
                unreachable!("16-byte chunk")
            };
            let i = i as usize;
            if i == 0 || i > n {
                return Err(protocol("crossing outside the batch"));
            }
            crossings.push((i - 1, s as u64));
        }
        Ok(FlushReply {
            replayed: int(&a[0])? == 1,
            dropped: int(&a[3])?,
            rings,
            blob,
            crossings,
            hot_version: int(&a[6])?,
            prev_seq,
        })
    }
}

/// The `EVALSHA` request of the hot-set read: changes since `since`.
pub(crate) fn hot_read_request(sha: &str, names: &Names, since: u64) -> Request {
    let mut r = Request::new(7);
    r.arg(b"EVALSHA")
        .arg(sha.as_bytes())
        .num(3)
        .arg(&names.hot)
        .arg(&names.hotv)
        .arg(&names.hotver)
        .num(since);
    r
}

/// What the hot-set read answered.
pub(crate) struct HotReply<'a> {
    pub(crate) version: u64,
    /// The changes are the whole set (replace, do not merge).
    pub(crate) full: bool,
    /// `(key bytes, until epoch)`.
    pub(crate) entries: Vec<(&'a [u8], u64)>,
}

impl HotReply<'_> {
    pub(crate) fn decode(v: &Value) -> Result<HotReply<'_>, ClusterError> {
        let Value::Array(a) = v else {
            return Err(protocol("the hot reply is not an array"));
        };
        if a.len() < 2 || !a.len().is_multiple_of(2) {
            return Err(protocol("the hot reply has the wrong length"));
        }
        let mut entries = Vec::with_capacity(a.len() / 2 - 1);
        for kv in a[2..].chunks_exact(2) {
            let until = std::str::from_utf8(bytes(&kv[1])?)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|u| *u >= 0.0)
                .ok_or_else(|| protocol("bad hot score"))?;
            entries.push((bytes(&kv[0])?, until as u64));
        }
        Ok(HotReply {
            version: int(&a[0])?,
            full: int(&a[1])? == 1,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply whose ring counts are wrong (huge, infinite, past the blob)
    /// is an error, never an overflow or a panic.
    #[test]
    fn a_flush_reply_with_bad_ring_counts_is_an_error() {
        for m in [1e300, f64::INFINITY, f64::MAX, 3.0, 1.8446744073709552e19] {
            let mut blob = m.to_le_bytes().to_vec();
            blob.extend_from_slice(&[0u8; 24]);
            let v = Value::Array(vec![
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
                Value::BulkString(blob),
                Value::BulkString(Vec::new()),
                Value::Int(0),
                Value::Int(0),
            ]);
            assert!(FlushReply::decode(v, 1).is_err(), "{m}");
        }
    }

    #[test]
    fn the_script_hashes_are_stable() {
        assert_eq!(Lua::new(FLUSH).sha.len(), 40);
        assert_ne!(Lua::new(FLUSH).sha, Lua::new(HOT_READ).sha);
    }
}
