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
//! # Bounds
//! Counts of slices that have left the window are dropped from `staged`
//! (no window includes them) and added to `dropped_old`; a new key is not
//! staged when `staged` holds `max_keys` keys (its counts are added to
//! `dropped_full`). A batch in flight holds at most `max_batch_keys`.
//! All of it is guarded by the node's state lock.

use crate::ring::MAX_EXACT;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Batches in flight at most: the one sent and the next, cut while Redis
/// runs the first.
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// One key's counts per slice, oldest first, at most one entry a slice,
/// and the key's name as written when it was staged (`RedisKey::write_key`
/// runs once, at the take: encoding a batch calls no code of the key).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Deltas {
    pub(crate) slices: Vec<(u64, u64)>,
    pub(crate) name: Box<[u8]>,
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
    pub(crate) deltas: HashMap<K, Deltas>,
    /// `(key, slice)` entries.
    pub(crate) key_deltas: u64,
    /// Sum of the counts.
    pub(crate) counts: u64,
}

/// Taken, unacknowledged counts.
pub(crate) struct Pending<K> {
    staged: HashMap<K, Deltas>,
    /// Oldest first, at most [`MAX_IN_FLIGHT`].
    inflight: VecDeque<Batch<K>>,
    next_seq: u64,
    max_keys: usize,
}

impl<K: Hash + Eq + Clone> Pending<K> {
    pub(crate) fn new(max_keys: usize) -> Self {
        Pending {
            staged: HashMap::new(),
            inflight: VecDeque::with_capacity(MAX_IN_FLIGHT),
            next_seq: 1,
            max_keys,
        }
    }

    /// Stages a taken count of `key`, written `name`; `false` if the key
    /// could not be staged (`staged` is full).
    pub(crate) fn stage(&mut self, key: &K, name: &[u8], e: u64, c: u64) -> bool {
        if let Some(d) = self.staged.get_mut(key) {
            d.add(e, c);
            return true;
        }
        if self.staged.len() >= self.max_keys {
            return false;
        }
        let mut d = Deltas {
            slices: Vec::new(),
            name: name.into(),
        };
        d.add(e, c);
        self.staged.insert(key.clone(), d);
        true
    }

    /// Drops staged slices at or before `floor` and merges those after
    /// `cap` into `cap`; returns the counts dropped.
    pub(crate) fn prune(&mut self, floor: u64, cap: u64) -> u64 {
        let mut gone = 0u64;
        self.staged.retain(|_, d| {
            gone = gone.saturating_add(d.prune(floor));
            d.cap(cap);
            !d.slices.is_empty()
        });
        gone
    }

    /// This node's unacknowledged counts of `key` in slices
    /// `floor + 1 ..= e`.
    pub(crate) fn sum<Q>(&self, key: &Q, floor: u64, e: u64) -> u64
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let s = self.staged.get(key).map_or(0, |d| d.sum(floor, e));
        self.inflight
            .iter()
            .filter_map(|b| b.deltas.get(key))
            .fold(s, |s, d| s.saturating_add(d.sum(floor, e)))
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
            .fold(0u64, |s, d| s.saturating_add(d.total()));
        self.inflight
            .iter()
            .fold(s, |s, b| s.saturating_add(b.counts))
    }

    /// Whether a batch is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// Cuts the next batch from `staged` (at most `max` keys) unless
    /// [`MAX_IN_FLIGHT`] are in flight or nothing is staged; `encode(order,
    /// deltas, seq)` builds its request. Returns the new batch's sequence,
    /// key order and request.
    ///
    /// The key's `Clone`, `Hash` and `Eq` run here (user code): if one of
    /// them or `encode` panics, the counts taken out of `staged` are put
    /// back before the panic goes on (with the key's `Hash` again when only
    /// part of `staged` was taken; a second panic there drops them), and no
    /// sequence is used.
    pub(crate) fn cut<R>(
        &mut self,
        max: usize,
        encode: impl FnOnce(&[K], &HashMap<K, Deltas>, u64) -> R,
    ) -> Option<(u64, Vec<K>, R)> {
        if self.inflight.len() >= MAX_IN_FLIGHT || self.staged.is_empty() {
            return None;
        }
        let whole = self.staged.len() <= max;
        // Cloned before anything moves.
        let order: Vec<K> = self.staged.keys().take(max).cloned().collect();
        let mut deltas = if whole {
            std::mem::take(&mut self.staged)
        } else {
            HashMap::with_capacity(order.len())
        };
        let seq = self.next_seq;
        let built = catch_unwind(AssertUnwindSafe(|| {
            if !whole {
                for k in &order {
                    if let Some((k, d)) = self.staged.remove_entry(k) {
                        deltas.insert(k, d);
                    }
                }
            }
            encode(&order, &deltas, seq)
        }));
        let request = match built {
            Ok(r) => r,
            Err(p) => {
                if whole {
                    self.staged = deltas;
                } else {
                    for (k, d) in deltas {
                        self.staged.insert(k, d);
                    }
                }
                resume_unwind(p);
            }
        };
        self.next_seq += 1;
        let (key_deltas, counts) = deltas.values().fold((0u64, 0u64), |(n, c), d| {
            (n + d.slices.len() as u64, c.saturating_add(d.total()))
        });
        self.inflight.push_back(Batch {
            seq,
            deltas,
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

    #[test]
    fn a_batch_stays_in_flight_until_acknowledged() {
        let mut p: Pending<u32> = Pending::new(10);
        for k in 0..5 {
            assert!(p.stage(&k, b"k", 1, 1));
        }
        assert_eq!(p.sum(&3, 0, 1), 1);
        let (seq, order, ()) = p
            .cut(3, |o, d, s| assert_eq!((o.len(), d.len(), s), (3, 3, 1)))
            .unwrap();
        assert_eq!((seq, order.len()), (1, 3));
        // In flight: counted by reads; a second batch may be cut.
        assert_eq!((0..5).map(|k| p.sum(&k, 0, 1)).sum::<u64>(), 5);
        assert!(p.in_flight());
        assert!(p.stage(&0, b"k", 1, 1)); // a key may be in a batch and staged
        let (seq, _, ()) = p.cut(5, |_, _, _| ()).unwrap();
        assert_eq!(seq, 2);
        assert_eq!((0..5).map(|k| p.sum(&k, 0, 1)).sum::<u64>(), 6);
        assert_eq!(p.counts(), 6);
        assert_eq!(p.staged_keys(), 0);
        // Two in flight: no third.
        assert!(p.stage(&9, b"k", 1, 1));
        assert!(p.cut(3, |_, _, _| unreachable!()).is_none());
        // Acknowledged oldest first only.
        assert!(p.acknowledge(2).is_none());
        let b = p.acknowledge(1).unwrap();
        assert_eq!((b.key_deltas, b.counts), (3, 3));
        assert_eq!(p.counts(), 4); // batch 2 and key 9
        assert!(p.acknowledge(1).is_none());
        let (seq, order, ()) = p.cut(3, |_, _, _| ()).unwrap();
        assert_eq!((seq, order.len()), (3, 1));
        assert_eq!(p.acknowledge(2).unwrap().counts, 3);
        assert_eq!(p.acknowledge(3).unwrap().counts, 1);
        assert!(!p.in_flight());
        assert_eq!(p.counts(), 0);
        assert_eq!(p.staged_keys(), 0);
    }

    #[test]
    fn staging_is_bounded() {
        let mut p: Pending<u32> = Pending::new(2);
        assert!(p.stage(&1, b"k", 1, 1));
        assert!(p.stage(&2, b"k", 1, 1));
        assert!(!p.stage(&3, b"k", 1, 1));
        assert!(p.stage(&1, b"k", 2, 1));
        assert_eq!(p.prune(1, 10), 2);
        assert_eq!(p.staged_keys(), 1);
    }

    /// A key whose `Hash` panics at the `ARMED`-th call from now (on this
    /// thread; 0: never).
    #[derive(Clone, PartialEq, Eq)]
    struct Touchy(u32);
    thread_local!(static ARMED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });
    impl Hash for Touchy {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            let n = ARMED.with(|a| a.get());
            if n > 0 {
                ARMED.with(|a| a.set(n - 1));
                assert_ne!(n, 1, "Hash panics");
            }
            self.0.hash(h)
        }
    }

    #[test]
    fn a_panic_while_cutting_puts_every_count_back() {
        let mut p: Pending<Touchy> = Pending::new(10);
        for k in 0..5 {
            assert!(p.stage(&Touchy(k), b"k", 1, u64::from(k) + 1));
        }
        // Part of `staged`: one key moved into the batch (a `Hash` to take
        // it out, one to put it in), then the next key's `Hash` panics.
        ARMED.with(|a| a.set(3));
        let r = catch_unwind(AssertUnwindSafe(|| p.cut(3, |_, _, _| ())));
        ARMED.with(|a| a.set(0));
        assert!(r.is_err());
        assert_eq!((p.counts(), p.staged_keys(), p.in_flight()), (15, 5, false));
        // All of it (`encode` panics).
        let r = catch_unwind(AssertUnwindSafe(|| {
            p.cut(10, |_, _, _| -> () { panic!("encode panics") })
        }));
        assert!(r.is_err());
        assert_eq!((p.counts(), p.staged_keys(), p.in_flight()), (15, 5, false));
        // No sequence was used.
        let (seq, order, ()) = p.cut(10, |_, _, _| ()).unwrap();
        assert_eq!((seq, order.len()), (1, 5));
        assert_eq!(p.acknowledge(1).unwrap().counts, 15);
    }
}
