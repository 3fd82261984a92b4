//! The cluster hot set as one node sees it.
//!
//! Hotness is decided inside Redis, by the flush script, on the cluster
//! window (`flush.lua`): the batch that takes a key's window sum from below
//! the threshold to at or above it reports the crossing, and only that
//! batch (the script is atomic and each batch is applied once). The
//! rule is [`HotKeyDetector`](stripecount::HotKeyDetector)'s on cluster
//! sums: a hot key cools when its window falls below the threshold, and
//! crosses again after that. Redis keeps each hot key with its *until*:
//! the first epoch at which its window would fall below the threshold if
//! nothing more were added; a batch that adds to a hot key moves it later.
//!
//! Every change to the set bumps a version in Redis; each flush reads the
//! version (in its probe or the batch's reply) and, when it moved, the
//! changes since the version this node holds (`hot_read.lua`), or the whole
//! set if the server's version is behind the node's (the server lost its
//! data). So every node holds the cluster hot set as of its last flush: a
//! node learns of a crossing within one flush interval (plus a round trip).
//! A key leaves a node's set when its until passes (no announcement
//! needed: until only moves later while the key stays hot).

use crate::key::RedisKey;
use crate::script::HotReply;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Keys hot in the cluster, each with the epoch it cools at.
pub(crate) struct HotSet<K> {
    version: u64,
    keys: HashMap<K, u64>,
}

impl<K: RedisKey> HotSet<K> {
    pub(crate) fn new() -> Self {
        HotSet {
            version: 0,
            keys: HashMap::new(),
        }
    }

    /// The version held.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Files what the hot-set read answered; returns the entries whose
    /// key bytes are not a `K` (skipped).
    pub(crate) fn apply(&mut self, r: &HotReply<'_>) -> usize {
        if r.full {
            self.keys.clear();
        }
        let mut bad = 0;
        for &(b, until) in &r.entries {
            match K::read_key(b) {
                Some(k) => {
                    self.keys.insert(k, until);
                }
                None => bad += 1,
            }
        }
        self.version = r.version;
        bad
    }

    /// A key this node's flush made hot (or moved), before the read.
    pub(crate) fn insert(&mut self, k: K, until: u64) {
        let u = self.keys.entry(k).or_insert(0);
        *u = (*u).max(until);
    }

    /// Whether `key` is hot at epoch `e`.
    pub(crate) fn is_hot<Q>(&self, key: &Q, e: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.keys.get(key).is_some_and(|&u| u > e)
    }

    /// The keys hot at epoch `e`.
    pub(crate) fn keys_at(&self, e: u64) -> Vec<K> {
        self.keys
            .iter()
            .filter(|(_, &u)| u > e)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Forgets the keys cooled by epoch `e`.
    pub(crate) fn prune(&mut self, e: u64) {
        self.keys.retain(|_, u| *u > e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_changes_replaces_on_full_and_cools_by_epoch() {
        let mut h: HotSet<String> = HotSet::new();
        let r = HotReply {
            version: 3,
            full: true,
            entries: vec![(b"a", 10), (b"b", 12), (&[0xff], 12)],
        };
        assert_eq!(h.apply(&r), 1);
        assert_eq!(h.version(), 3);
        assert!(h.is_hot("a", 9) && !h.is_hot("a", 10));
        let r = HotReply {
            version: 4,
            full: false,
            entries: vec![(b"a", 15)],
        };
        h.apply(&r);
        assert!(h.is_hot("a", 12));
        let mut k = h.keys_at(11);
        k.sort();
        assert_eq!(k, vec!["a".to_string(), "b".to_string()]);
        h.prune(12);
        assert_eq!(h.keys_at(0), vec!["a".to_string()]);
        let r = HotReply {
            version: 1,
            full: true,
            entries: vec![],
        };
        h.apply(&r);
        assert!(h.keys_at(0).is_empty());
    }
}
