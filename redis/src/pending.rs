//! [`Pending`]: counts taken from the local windows and not yet
//! acknowledged by Redis.
//!
//! A flush takes the local windows' counts into `staged` (merged per key
//! and slice), then cuts batches from it. A batch gets the next flush
//! sequence number and is *in flight* until a reply acknowledges it; it is
//! resent unchanged (same sequence, same encoded request) after any
//! failure. At most two batches are in flight, acknowledged in sequence
//! order: the one sent, and the next, cut and encoded while Redis runs the
//! first and sent only once the first is acknowledged (`flush.rs`). So
//! every count is, at every instant, in exactly one of: the local windows,
//! `staged`, a batch in flight, or Redis (and the node's cached rings, once
//! acknowledged).
//!
//! # No code of the key type runs here
//! Entries are keyed by the key's name in Redis (its field: the bytes
//! `RedisKey::write_key` wrote, escaped as `bucket.rs` says, once when the
//! count was taken), hashed by the standard
//! hasher: staging, cutting, acknowledging and reading run none of the
//! key's `Hash`, `Eq` or `Clone` (a key is cloned once, when it is first
//! staged, before anything changes). So no panic of the user's code can
//! leave a batch half cut or drop another key's counts (a `HashMap` whose
//! user `Hash` panics while it rehashes drops the entries it had not
//! rehashed yet).
//!
//! # Bounds
//! Counts of slices that have left the window are dropped from `staged`
//! (no window includes them) and added to `dropped_old`; a new key is not
//! staged when `staged` holds `max_keys` keys (its counts are added to
//! `dropped_full`). A batch in flight holds at most `max_batch_keys`.
//! All of it is guarded by the node's state lock.

use crate::bucket::sub_bucket;
use crate::ring::MAX_EXACT;
use std::collections::{HashMap, VecDeque};

/// Batches in flight at most: the one sent and the next, cut while Redis
/// runs the first.
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// A key's name in Redis (its field in its bucket): allocated once
/// when the key is staged, shared by the batch's order (a clone is a
/// count bump).
pub(crate) type Name = std::sync::Arc<[u8]>;

/// One key's counts per slice, oldest first, at most one entry a slice.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Deltas {
    pub(crate) slices: Vec<(u64, u64)>,
}

/// A key with counts pending: the key (for the cache, the hot set and the
/// crossings once acknowledged) and its counts.
#[derive(Debug, Clone)]
pub(crate) struct Entry<K> {
    pub(crate) key: K,
    pub(crate) deltas: Deltas,
}

impl Deltas {
    /// Adds `c` at epoch `e`.
    pub(crate) fn add(&mut self, e: u64, c: u64) {
        match self.slices.binary_search_by_key(&e, |d| d.0) {
            Ok(i) => self.slices[i].1 = self.slices[i].1.saturating_add(c).min(MAX_EXACT),
            Err(i) => self.slices.insert(i, (e, c.min(MAX_EXACT))),
        }
    }

    /// The counts of slices `floor + 1 ..= e`.
    pub(crate) fn sum(&self, floor: u64, e: u64) -> u64 {
        self.slices
            .iter()
            .filter(|d| d.0 > floor && d.0 <= e)
            .fold(0u64, |s, d| s.saturating_add(d.1))
    }

    /// Drops the slices at or before `floor`; returns their counts.
    fn prune(&mut self, floor: u64) -> u64 {
        let keep = self.slices.partition_point(|d| d.0 <= floor);
        let gone = self.slices[..keep]
            .iter()
            .fold(0u64, |s, d| s.saturating_add(d.1));
        self.slices.drain(..keep);
        gone
    }

    /// Merges the slices after `cap` into `cap` (bounds a key's entries
    /// when the node's time stepped back).
    fn cap(&mut self, cap: u64) {
        let over = self.slices.partition_point(|d| d.0 <= cap);
        if over < self.slices.len() {
            let c = self.slices[over..]
                .iter()
                .fold(0u64, |s, d| s.saturating_add(d.1));
            self.slices.truncate(over);
            self.add(cap, c);
        }
    }

    /// The total count.
    pub(crate) fn total(&self) -> u64 {
        self.slices.iter().fold(0u64, |s, d| s.saturating_add(d.1))
    }
}

/// A batch in flight, as reads see it (its encoded request and key
/// order live with the connection, see `node.rs`).
pub(crate) struct Batch<K> {
    pub(crate) seq: u64,
    pub(crate) entries: HashMap<Name, Entry<K>>,
    /// `(key, slice)` entries.
    pub(crate) key_deltas: u64,
    /// Sum of the counts.
    pub(crate) counts: u64,
}

/// Taken, unacknowledged counts.
pub(crate) struct Pending<K> {
    staged: HashMap<Name, Entry<K>>,
    /// Oldest first, at most [`MAX_IN_FLIGHT`].
    inflight: VecDeque<Batch<K>>,
    next_seq: u64,
    max_keys: usize,
}

impl<K: Clone> Pending<K> {
    pub(crate) fn new(max_keys: usize) -> Self {
        Pending {
            staged: HashMap::new(),
            inflight: VecDeque::with_capacity(MAX_IN_FLIGHT),
            next_seq: 1,
            max_keys,
        }
    }

    /// Stages a taken count of `key`, written `name`; `false` if the key
    /// could not be staged (`staged` is full). Clones `key` if it is new,
    /// before anything changes.
    pub(crate) fn stage(&mut self, key: &K, name: &[u8], e: u64, c: u64) -> bool {
        if let Some(en) = self.staged.get_mut(name) {
            en.deltas.add(e, c);
            return true;
        }
        if self.staged.len() >= self.max_keys {
            return false;
        }
        let mut en = Entry {
            key: key.clone(),
            deltas: Deltas::default(),
        };
        en.deltas.add(e, c);
        self.staged.insert(name.into(), en);
        true
    }

    /// Drops staged slices at or before `floor` and merges those after
    /// `cap` into `cap`; returns the counts dropped.
    pub(crate) fn prune(&mut self, floor: u64, cap: u64) -> u64 {
        let mut gone = 0u64;
        self.staged.retain(|_, en| {
            gone = gone.saturating_add(en.deltas.prune(floor));
            en.deltas.cap(cap);
            !en.deltas.slices.is_empty()
        });
        gone
    }

    /// This node's unacknowledged counts of the key written `name` in
    /// slices `floor + 1 ..= e`.
    pub(crate) fn sum(&self, name: &[u8], floor: u64, e: u64) -> u64 {
        let s = self
            .staged
            .get(name)
            .map_or(0, |en| en.deltas.sum(floor, e));
        self.inflight
            .iter()
            .filter_map(|b| b.entries.get(name))
            .fold(s, |s, en| s.saturating_add(en.deltas.sum(floor, e)))
    }

    /// Whether nothing is staged or in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.staged.is_empty() && self.inflight.is_empty()
    }

    /// Keys staged.
    pub(crate) fn staged_keys(&self) -> usize {
        self.staged.len()
    }

    /// Counts staged or in flight.
    pub(crate) fn counts(&self) -> u64 {
        let s = self
            .staged
            .values()
            .fold(0u64, |s, en| s.saturating_add(en.deltas.total()));
        self.inflight
            .iter()
            .fold(s, |s, b| s.saturating_add(b.counts))
    }

    /// Whether a batch is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// Cuts the next batch from `staged` (at most `max` keys, ordered by
    /// their sub-bucket of `sub_buckets`) unless [`MAX_IN_FLIGHT`] are in
    /// flight or nothing is staged; `encode(order, entries, seq)` builds its
    /// request (it must not panic: the batch is then lost). Returns the new
    /// batch's sequence, key order and request.
    pub(crate) fn cut<R>(
        &mut self,
        max: usize,
        sub_buckets: usize,
        encode: impl FnOnce(&[Name], &HashMap<Name, Entry<K>>, u64) -> R,
    ) -> Option<(u64, Vec<Name>, R)> {
        if self.inflight.len() >= MAX_IN_FLIGHT || self.staged.is_empty() {
            return None;
        }
        let entries = if self.staged.len() <= max {
            std::mem::take(&mut self.staged)
        } else {
            let names: Vec<Name> = self.staged.keys().take(max).cloned().collect();
            names
                .into_iter()
                .filter_map(|n| self.staged.remove_entry(&n))
                .collect()
        };
        // By sub-bucket: the script takes a bucket's keys together.
        let mut order: Vec<Name> = entries.keys().cloned().collect();
        order.sort_by_cached_key(|n| sub_bucket(n, sub_buckets));
        let seq = self.next_seq;
        self.next_seq += 1;
        let request = encode(&order, &entries, seq);
        let (key_deltas, counts) = entries.values().fold((0u64, 0u64), |(n, c), en| {
            (
                n + en.deltas.slices.len() as u64,
                c.saturating_add(en.deltas.total()),
            )
        });
        self.inflight.push_back(Batch {
            seq,
            entries,
            key_deltas,
            counts,
        });
        Some((seq, order, request))
    }

    /// The oldest batch in flight, `seq`, was acknowledged: it leaves (the
    /// caller files its rings in the same critical section). `None` if
    /// `seq` is not the oldest in flight.
    pub(crate) fn acknowledge(&mut self, seq: u64) -> Option<Batch<K>> {
        match self.inflight.front() {
            Some(b) if b.seq == seq => self.inflight.pop_front(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_merge_per_slice_and_prune_by_the_window() {
        let mut d = Deltas::default();
        d.add(5, 1);
        d.add(3, 2);
        d.add(5, 4);
        assert_eq!(d.slices, vec![(3, 2), (5, 5)]);
        assert_eq!(d.sum(3, 5), 5);
        assert_eq!(d.sum(2, 4), 2);
        assert_eq!(d.prune(3), 2);
        assert_eq!(d.slices, vec![(5, 5)]);
        d.add(9, 1);
        d.add(8, 1);
        d.cap(7);
        assert_eq!(d.slices, vec![(5, 5), (7, 2)]);
        d.add(1, u64::MAX);
        assert_eq!(d.slices[0], (1, MAX_EXACT));
    }

    fn name(k: u32) -> Vec<u8> {
        k.to_string().into_bytes()
    }

    #[test]
    fn a_batch_stays_in_flight_until_acknowledged() {
        let mut p: Pending<u32> = Pending::new(10);
        for k in 0..5 {
            assert!(p.stage(&k, &name(k), 1, 1));
        }
        assert_eq!(p.sum(&name(3), 0, 1), 1);
        let (seq, order, ()) = p
            .cut(3, 16, |o, d, s| {
                assert_eq!((o.len(), d.len(), s), (3, 3, 1))
            })
            .unwrap();
        assert_eq!((seq, order.len()), (1, 3));
        // In flight: counted by reads; a second batch may be cut.
        let sum = |p: &Pending<u32>| (0..5).map(|k| p.sum(&name(k), 0, 1)).sum::<u64>();
        assert_eq!(sum(&p), 5);
        assert!(p.in_flight());
        assert!(p.stage(&0, &name(0), 1, 1)); // a key may be in a batch and staged
        let (seq, _, ()) = p.cut(5, 16, |_, _, _| ()).unwrap();
        assert_eq!(seq, 2);
        assert_eq!(sum(&p), 6);
        assert_eq!(p.counts(), 6);
        assert_eq!(p.staged_keys(), 0);
        // Two in flight: no third.
        assert!(p.stage(&9, &name(9), 1, 1));
        assert!(p.cut(3, 16, |_, _, _| unreachable!()).is_none());
        // Acknowledged oldest first only.
        assert!(p.acknowledge(2).is_none());
        let b = p.acknowledge(1).unwrap();
        assert_eq!((b.key_deltas, b.counts), (3, 3));
        assert_eq!(p.counts(), 4); // batch 2 and key 9
        assert!(p.acknowledge(1).is_none());
        let (seq, order, ()) = p.cut(3, 16, |_, _, _| ()).unwrap();
        assert_eq!((seq, order.len()), (3, 1));
        assert_eq!(p.acknowledge(2).unwrap().counts, 3);
        assert_eq!(p.acknowledge(3).unwrap().counts, 1);
        assert!(!p.in_flight());
        assert!(p.is_empty());
        assert_eq!(p.counts(), 0);
        assert_eq!(p.staged_keys(), 0);
    }

    #[test]
    fn staging_is_bounded() {
        let mut p: Pending<u32> = Pending::new(2);
        assert!(p.stage(&1, &name(1), 1, 1));
        assert!(p.stage(&2, &name(2), 1, 1));
        assert!(!p.stage(&3, &name(3), 1, 1));
        assert!(p.stage(&1, &name(1), 2, 1));
        assert_eq!(p.prune(1, 10), 2);
        assert_eq!(p.staged_keys(), 1);
    }

    /// A key whose `Hash` and `Eq` panic while `ARMED` is set (on this
    /// thread).
    #[derive(Clone)]
    struct Touchy(u32);
    thread_local!(static ARMED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    impl PartialEq for Touchy {
        fn eq(&self, o: &Self) -> bool {
            assert!(!ARMED.with(|a| a.get()), "Eq panics");
            self.0 == o.0
        }
    }
    impl Eq for Touchy {}
    impl std::hash::Hash for Touchy {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            assert!(!ARMED.with(|a| a.get()), "Hash panics");
            self.0.hash(h)
        }
    }

    #[test]
    fn staging_cutting_reading_and_acknowledging_run_no_code_of_the_key() {
        let mut p: Pending<Touchy> = Pending::new(100);
        ARMED.with(|a| a.set(true));
        // Enough keys, cut in parts, for the map to grow and to rehash.
        for round in 0..4u64 {
            for k in 0..40 {
                assert!(p.stage(&Touchy(k), &name(k), round + 1, 1));
            }
            p.prune(round, round + 1);
            while let Some((seq, _, ())) = p.cut(7, 16, |_, _, _| ()) {
                let _ = p.sum(&name(3), 0, 9);
                assert_eq!(p.acknowledge(seq).unwrap().seq, seq);
            }
        }
        ARMED.with(|a| a.set(false));
        assert!(p.is_empty());
    }
}
