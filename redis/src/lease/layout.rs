//! Where Redis keeps the cluster limiter's counts: each key's permits per
//! slice as one field of a bucket hash, so that the lease script reads a
//! batch's keys with one `HMGET` a live bucket and writes them with one
//! `HSET`, and no key needs an expiry of its own. The flush of
//! `ClusterWindows` keeps its rings the same way (`src/bucket.rs`).
//!
//! # Keys of a namespace `ns`
//! On a single instance the prefix `P` is `ns:`; on a Redis Cluster each
//! group has its own, `ns:{tag}:` (`group.rs`), so that a request's keys
//! share a hash slot.
//! - `P lb:<r>`, `r` in `0..4`: bucket slot `r`. Field: a key's name as
//!   `write_key` writes it, with one `0xff` more in front of a name that
//!   starts with `0xff` (so that no field is the marker below). Value: the
//!   key's *ring*, one pair of little-endian doubles `(slice, permits
//!   leased in it less those returned)` for each slice with permits.
//! - `P lg`: the generation each slot holds (4 doubles, -1: none).
//! - `P ln:<node id>`: a node's record (`script.rs`).
//! - `P lcfg`: the quota every node must share (`LeaseShape::config_string`),
//!   which expires with the newest bucket, so that no count outlives it.
//!
//! # Generations
//! A generation is `G = ceil(J / 2)` slices (`J`: the slices a request is
//! judged against); generation `g` lives in slot `g % 4`. A ring is kept in
//! the slot of its newest slice's generation. The window's `J` slices span
//! at most three generations, so when a generation begins, the one that
//! held its slot four generations before is older than the window: the
//! script deletes the buckets of every slot whose generation left the
//! window (`UNLINK`, freed off Redis's main thread) before it reads, and
//! gives the slot to the new generation.
//!
//! # Invariants
//! - A key has at most one ring among the live slots (every slot whose
//!   generation has not left the window, including one ahead of this
//!   server's clock): the script reads a request's keys in every live
//!   slot, and when it writes a ring to another slot (its newest slice
//!   entered a new generation) it deletes the field from the slot it came
//!   from, in the same script.
//! - A slot's generation is at least that of every ring it holds, and only
//!   rises: a ring whose generation is later than its slot's (written after
//!   a server's clock stepped back, or by a master whose clock was ahead)
//!   raises the slot's generation and its bucket's expiry. So no bucket is
//!   deleted while a ring in it still has a slice in the window, and a
//!   ring ahead of the server's clock counts as it did when written.
//! - A ring holds only slices with permits; the script drops the slices
//!   that left the window whenever it writes a ring, and deletes a ring
//!   left with none.
//! - A slot is given its generation by the script's first write to it
//!   (not when a request merely could write there), and that write gives
//!   the bucket two things, so every bucket of a slot that `P lg` lists
//!   has them:
//!   - the field `0xff` with a value longer than Redis's
//!     `hash-max-listpack-value` (64 bytes by default), so buckets are
//!     hash tables from their first write (a listpack finds a field by a
//!     linear scan);
//!   - an expiry a generation after the newest slice its generation can
//!     hold left the window, so that a namespace no node leases from any
//!     more disappears by itself; `P lg` expires with its newest bucket.
//!
//! # Why buckets
//! With a hash of its own a key, a new key cost the script three commands
//! (`HGETALL`, `HINCRBY`, `PEXPIREAT`), each about 3,000 instructions
//! before its own work: 21.7k instructions of Redis a new key (callgrind
//! on redis-server 7.0, calls of 64 new keys). In buckets it costs 10.6k.
//! A call pays 10-16k more fixed work (the slots' generations, an `HMGET`
//! a live slot, less the config's write, now once a generation), so the
//! layouts break even near 3 keys a call; batches of a flood carry tens.
//! Redis's memory for the same keys is 27% less.

use crate::bucket::SLOTS;
use crate::key::RedisKey;

/// The Redis key names of a limiter's namespace (of one group on a
/// cluster).
#[derive(Debug, Clone)]
pub(crate) struct LeaseNames {
    /// The node's record.
    pub(crate) record: Vec<u8>,
    /// The namespace's config string.
    pub(crate) cfg: Vec<u8>,
    /// The generation each slot holds.
    pub(crate) gens: Vec<u8>,
    /// The buckets, slot 0 first.
    pub(crate) buckets: [Vec<u8>; SLOTS],
}

impl LeaseNames {
    /// The names on a single instance (`tag` `None`), or of one group on a
    /// cluster (`ns:{tag}:lb:0` and so on, `group.rs`).
    pub(crate) fn new(ns: &str, tag: Option<&str>, node_id: &str) -> LeaseNames {
        let ns = match tag {
            Some(t) => format!("{ns}:{{{t}}}"),
            None => ns.to_owned(),
        };
        LeaseNames {
            record: format!("{ns}:ln:{node_id}").into_bytes(),
            cfg: format!("{ns}:lcfg").into_bytes(),
            gens: format!("{ns}:lg").into_bytes(),
            buckets: std::array::from_fn(|r| format!("{ns}:lb:{r}").into_bytes()),
        }
    }
}

/// A key's field in the buckets: the bytes `write_key` writes, with one
/// `0xff` more in front when they start with `0xff`. Runs the key's own
/// code.
pub(crate) fn name_of<K: RedisKey>(k: &K) -> Box<[u8]> {
    let mut b = Vec::with_capacity(32);
    crate::bucket::write_field(k, &mut b);
    b.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_single_instance_and_of_a_group() {
        let n = LeaseNames::new("ns", None, "id");
        assert_eq!(n.record, b"ns:ln:id");
        assert_eq!(n.gens, b"ns:lg");
        assert_eq!(n.buckets[3], b"ns:lb:3");
        let g = LeaseNames::new("ns", Some("7"), "id");
        assert_eq!(g.cfg, b"ns:{7}:lcfg");
        assert_eq!(g.buckets[0], b"ns:{7}:lb:0");
        assert_eq!(&*name_of(&"k".to_owned()), b"k");
        assert_eq!(&*name_of(&b"\xffk".to_vec()), b"\xff\xffk");
    }
}
