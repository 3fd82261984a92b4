//! Where Redis keeps the rings: in bucket hashes, one field a key, so that
//! the flush script reads and writes a batch's rings with a few commands a
//! bucket rather than one command a key, and no key needs an expiry of its
//! own.
//!
//! # The layout
//! - A key's ring (`ring.rs`) is the field named after the key (the bytes
//!   `write_key` wrote, escaped: below) of bucket `ns:b:<r>:<m>`:
//!   - `m` = [`sub_bucket`] of the field, one of `M` = [`sub_buckets`]:
//!     16 on a single instance, `ceil(16 / groups)` a group on a Redis
//!     Cluster (whose groups already divide the keys). They bound one
//!     hash's size; more of them would cost a batch more commands (a
//!     bucket's keys take one `HMGET` and one `HSET` whatever their
//!     number: a cluster's flush of 1,000 keys over 16 groups, cut into 16
//!     sub-buckets a group, cost Redis 20% more time than one string a
//!     key);
//!   - `r` = the *slot* of the generation of the ring's newest slice:
//!     generation `g = newest / G` with `G = ceil(slices / 2)`
//!     ([`generation_len`]), slot `g % SLOTS`.
//! - `ns:bg`: the generation each slot holds (`SLOTS` doubles, -1: none).
//!   Once a slot's generation is older than the window (its newest
//!   possible slice left it), the next applied batch deletes the slot's
//!   buckets (`UNLINK`: a big hash is freed off Redis's main thread) and
//!   frees the slot. `G >= slices / 2` makes the generation `SLOTS = 4`
//!   back dead by the time a generation begins, so the slot a new
//!   generation needs is free.
//! - A bucket expires (`PEXPIREAT`) a generation later than that,
//!   `((g + 2) G - 1 + slices) * slice_ms`, so that a namespace no node
//!   flushes to any more disappears by itself; `ns:bg` with its newest
//!   bucket.
//!
//! # Invariants
//! - A key has at most one ring among the live slots (those whose
//!   generation may hold a slice of the window): the script looks a key up
//!   in every live slot before it writes, and moves a ring whose newest
//!   slice enters a new generation (`HSET` in the new slot, `HDEL` in the
//!   old, in the same script). A ring left in a slot that died is never
//!   counted again: all of its slices are older than the window (and the
//!   next applied batch deletes it with its slot's buckets).
//! - Every bucket holds the field [`MARKER`] with a value longer than
//!   Redis's `hash-max-listpack-value` (64 bytes by default), so buckets
//!   are hash tables from their first write: a listpack finds a field by a
//!   linear scan, which made Redis's time per key-delta 1.5x with 64 keys
//!   a bucket and 2.5x with 256. No key's field is [`MARKER`]: a name starting with
//!   byte `0xff` gets one more in front ([`escape`]).

use crate::key::RedisKey;
use crate::script::{Names, Request};

/// Bucket slots: consecutive generations rotate through them.
pub(crate) const SLOTS: usize = 4;

/// Sub-buckets a slot on a single instance, and over all the groups of a
/// Redis Cluster.
const SUB_BUCKETS: usize = 16;

/// Sub-buckets a slot of each of `groups` groups.
pub(crate) fn sub_buckets(groups: usize) -> usize {
    SUB_BUCKETS.div_ceil(groups.max(1))
}

/// The field of every bucket that no key's field can be (see [`escape`]).
#[cfg(test)]
pub(crate) const MARKER: &[u8] = b"\xff";

/// Slices a generation: half the window, rounded up.
#[cfg(test)]
pub(crate) fn generation_len(slices: usize) -> u64 {
    (slices as u64).div_ceil(2)
}

/// The field of the key written `name`: `name` itself, unless it starts
/// with `0xff` (then `0xff` and `name`), so that no field is [`MARKER`].
fn escape(name: &mut Vec<u8>) {
    if name.first() == Some(&0xff) {
        name.insert(0, 0xff);
    }
}

/// Writes the field of `key` into `out` (cleared first): the bytes
/// `write_key` writes, [`escape`]d. Runs the key's own code.
pub(crate) fn write_field<K: RedisKey>(key: &K, out: &mut Vec<u8>) {
    out.clear();
    key.write_key(out);
    escape(out);
}

/// The key name of a field ([`escape`] undone).
pub(crate) fn unescape(field: &[u8]) -> &[u8] {
    match field {
        [0xff, rest @ ..] if !rest.is_empty() => rest,
        _ => field,
    }
}

/// The sub-bucket of a field: FNV-1a (32 bits) of its bytes, modulo `m`
/// (the namespace's [`sub_buckets`]). Every node computes the same one.
pub(crate) fn sub_bucket(field: &[u8], m: usize) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for &b in field {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h % m as u32) as usize
}

/// The names of a namespace's buckets, `m` sub-buckets a slot: slot `r`'s
/// sub-bucket `s` at `r * m + s`, after `prefix` (`ns:` or `ns:{tag}:`).
pub(crate) fn bucket_names(prefix: &str, m: usize) -> Vec<Vec<u8>> {
    (0..SLOTS)
        .flat_map(|r| (0..m).map(move |s| format!("{prefix}b:{r}:{s}").into_bytes()))
        .collect()
}

/// The `EVALSHA` of the read of one key's ring (`ring_read.lua`).
pub(crate) fn ring_read_request(sha: &str, names: &Names, field: &[u8]) -> Request {
    let n = names.buckets.len() / SLOTS;
    let m = sub_bucket(field, n);
    let mut r = Request::new(3 + 2 + SLOTS + 1);
    r.arg(b"EVALSHA")
        .arg(sha.as_bytes())
        .num(2 + SLOTS as u64)
        .arg(&names.cfg)
        .arg(&names.gens);
    for slot in 0..SLOTS {
        r.arg(&names.buckets[slot * n + m]);
    }
    r.arg(field);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_every_name_apart_from_the_marker() {
        for name in [&b""[..], b"a", b"\xff", b"\xff\xff", b"\xffa", b"a\xff"] {
            let mut f = name.to_vec();
            escape(&mut f);
            assert_ne!(f, MARKER, "{name:?}");
            assert_eq!(unescape(&f), name, "{name:?}");
        }
        let mut f = b"k1".to_vec();
        escape(&mut f);
        assert_eq!(f, b"k1");
    }

    #[test]
    fn sub_buckets_are_fixed_and_spread() {
        // FNV-1a of "a" is 0xe40c292c.
        assert_eq!(sub_bucket(b"a", 16), 0xe40c_292c % 16);
        assert_eq!(sub_bucket(b"a", 3), 0xe40c_292c % 3);
        let mut seen = [0usize; SUB_BUCKETS];
        for i in 0..16_000 {
            seen[sub_bucket(i.to_string().as_bytes(), SUB_BUCKETS)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(
            [1, 2, 3, 16, 17, 1000].map(sub_buckets),
            [16, 8, 6, 1, 1, 1]
        );
    }

    #[test]
    fn a_generation_is_half_the_window_and_slots_outlast_it() {
        for s in 1..100usize {
            let g = generation_len(s);
            assert!(2 * g >= s as u64);
            // A generation SLOTS back is dead once the next one begins:
            // its newest slice plus the window ends by then.
            assert!(s as u64 - 1 <= (SLOTS as u64 - 1) * g);
        }
        assert_eq!(bucket_names("ns:", 16).len(), SLOTS * 16);
        assert_eq!(bucket_names("ns:", 16)[16 + 2], b"ns:b:1:2");
        assert_eq!(bucket_names("ns:{t}:", 1)[3], b"ns:{t}:b:3:0");
    }
}
