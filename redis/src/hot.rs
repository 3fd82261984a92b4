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

use crate::bucket::unescape;
use crate::key::RedisKey;
use crate::script::HotReply;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Keys hot in the cluster, each with the epoch it cools at.
pub(crate) struct HotSet<K> {
    /// The version held of each group's set (`group.rs`).
    versions: Vec<u64>,
    /// Each hot key's until epoch and group.
    keys: HashMap<K, (u64, usize)>,
}

impl<K: RedisKey> HotSet<K> {
    /// An empty set of `groups` groups.
    pub(crate) fn new(groups: usize) -> Self {
        HotSet {
            versions: vec![0; groups],
            keys: HashMap::new(),
        }
    }

    /// The version held of group `g`'s set.
    pub(crate) fn version(&self, g: usize) -> u64 {
        self.versions[g]
    }

    /// Files what the hot-set read answered; returns the entries whose
    /// key bytes are not a `K` (skipped).
    pub(crate) fn apply(&mut self, g: usize, r: &HotReply<'_>) -> usize {
        if r.full {
            self.keys.retain(|_, &mut (_, group)| group != g);
        }
        let mut bad = 0;
        for &(b, until) in &r.entries {
            match K::read_key(unescape(b)) {
                Some(k) => {
                    self.keys.insert(k, (until, g));
                }
                None => bad += 1,
            }
        }
        self.versions[g] = r.version;
        bad
    }

    /// A key this node's flush made hot (or moved), before the read.
    pub(crate) fn insert(&mut self, g: usize, k: K, until: u64) {
        let u = self.keys.entry(k).or_insert((0, g));
        u.0 = u.0.max(until);
    }

    /// Whether `key` is hot at epoch `e`.
    pub(crate) fn is_hot<Q>(&self, key: &Q, e: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.keys.get(key).is_some_and(|&(u, _)| u > e)
    }

    /// The keys hot at epoch `e`.
    pub(crate) fn keys_at(&self, e: u64) -> Vec<K> {
        self.keys
            .iter()
            .filter(|(_, &(u, _))| u > e)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Forgets the keys cooled by epoch `e`.
    pub(crate) fn prune(&mut self, e: u64) {
        self.keys.retain(|_, &mut (u, _)| u > e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_changes_replaces_on_full_and_cools_by_epoch() {
        let mut h: HotSet<String> = HotSet::new(2);
        let r = HotReply {
            version: 3,
            full: true,
            entries: vec![(b"a", 10), (b"b", 12), (&[0xff], 12)],
        };
        assert_eq!(h.apply(0, &r), 1);
        assert_eq!((h.version(0), h.version(1)), (3, 0));
        assert!(h.is_hot("a", 9) && !h.is_hot("a", 10));
        let r = HotReply {
            version: 4,
            full: false,
            entries: vec![(b"a", 15)],
        };
        h.apply(0, &r);
        assert!(h.is_hot("a", 12));
        let mut k = h.keys_at(11);
        k.sort();
        assert_eq!(k, vec!["a".to_string(), "b".to_string()]);
        h.prune(12);
        assert_eq!(h.keys_at(0), vec!["a".to_string()]);
        // Another group's key (on a cluster): a full read of group 0
        // replaces group 0's keys only.
        h.insert(1, "c".to_string(), 20);
        let r = HotReply {
            version: 1,
            full: true,
            entries: vec![],
        };
        h.apply(0, &r);
        assert_eq!(h.keys_at(0), vec!["c".to_string()]);
        assert_eq!((h.version(0), h.version(1)), (1, 0));
    }
}
