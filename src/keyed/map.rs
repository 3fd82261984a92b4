//! The concurrent map from keys to entries, behind a small facade.
//!
//! # Why `scc::HashIndex`
//! Chosen by measurement (a map of `AtomicU64`, 4M adds, this repository's
//! 2-core machine; M adds/s, 1 thread / 2 threads):
//!
//! | map                 | Zipf over 1M keys | one hot key, read only |
//! |---------------------|-------------------|------------------------|
//! | `scc::HashIndex`    | 7.8 / 8.4         | 50.9 / 47.9 (with add) |
//! | `scc::HashMap`      | 12.1 / 12.1       | 32.9 / 36.6            |
//! | `dashmap` 6         | 16.0 / 17.4       | 59.0 / 47.7            |
//! | `papaya` 0.2        | 1.2 / 1.8         | 57.5 / 65.9            |
//!
//! `dashmap` is the fastest on a spread-out stream but every lookup takes
//! its shard's reader lock (an atomic RMW on a shared word), so a hot key's
//! lookups serialize on that word: at 2 threads it fell from 59 to 48 M/s
//! and in a second run to 20 M/s, which rules it out for the hot path.
//! `papaya` reads lock-free but was an order of magnitude slower on the
//! Zipf stream. `scc::HashIndex` reads lock-free (epoch-based reclamation,
//! no shared write on lookup), so a hot key's lookups scale, and it is
//! within 2x of `dashmap` on the Zipf stream; its values must be `Clone`,
//! which `EntryRef` is.
//!
//! Under `--cfg loom`, `scc` is not built (a `cfg(not(loom))` dependency:
//! its reclamation crate switches to loom atomics of its own under that
//! cfg, which would drag the map's internals into every model). The facade
//! is then a loom `Mutex<HashMap>`: loom models our per-key protocol
//! around the map, not the map.

use super::entry::EntryRef;
use std::borrow::Borrow;
use std::hash::Hash;

#[cfg(not(loom))]
pub(crate) struct Map<K: 'static> {
    inner: scc::HashIndex<K, EntryRef>,
}

#[cfg(not(loom))]
impl<K: Hash + Eq + Clone + Send + Sync + 'static> Map<K> {
    pub(crate) fn new() -> Self {
        Map {
            inner: scc::HashIndex::new(),
        }
    }

    /// Runs `f` on the key's entry, if present.
    #[inline]
    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(&EntryRef) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.peek_with(key, |_, v| f(v))
    }

    /// Inserts `entry` for `key` unless the key is present; returns the
    /// entry now in the map and whether it is ours.
    pub(crate) fn insert(&self, key: K, entry: EntryRef) -> Result<(), K> {
        self.inner.insert(key, entry).map_err(|(k, _)| k)
    }

    /// Removes the key if it maps to exactly `entry`.
    pub(crate) fn remove_if_same<Q>(&self, key: &Q, entry: &EntryRef) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.remove_if(key, |v| EntryRef::ptr_eq(v, entry))
    }

    /// Calls `f(key, entry)` for every entry (a weakly consistent scan).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &EntryRef)) {
        let guard = scc::ebr::Guard::new();
        for (k, v) in self.inner.iter(&guard) {
            f(k, v);
        }
    }
}

#[cfg(loom)]
pub(crate) struct Map<K: 'static> {
    inner: crate::sync::Mutex<std::collections::HashMap<K, EntryRef>>,
}

#[cfg(loom)]
impl<K: Hash + Eq + Clone + Send + Sync + 'static> Map<K> {
    pub(crate) fn new() -> Self {
        Map {
            inner: crate::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(&EntryRef) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let e = self.inner.lock().unwrap().get(key).cloned();
        e.map(|e| f(&e))
    }

    pub(crate) fn insert(&self, key: K, entry: EntryRef) -> Result<(), K> {
        let mut m = self.inner.lock().unwrap();
        if m.contains_key(&key) {
            return Err(key);
        }
        m.insert(key, entry);
        Ok(())
    }

    pub(crate) fn remove_if_same<Q>(&self, key: &Q, entry: &EntryRef) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut m = self.inner.lock().unwrap();
        if m.get(key).is_some_and(|v| EntryRef::ptr_eq(v, entry)) {
            m.remove(key);
            true
        } else {
            false
        }
    }

    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &EntryRef)) {
        let all: Vec<(K, EntryRef)> = self
            .inner
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in &all {
            f(k, v);
        }
    }
}
