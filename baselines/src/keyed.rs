//! Per-key counting without windows: what services use today, a concurrent
//! map of `AtomicU64`. These count forever (no window, no eviction), so
//! they bound from above what a per-key window can cost.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `scc::HashIndex<K, Arc<AtomicU64>>`: lock-free lookups (the map
/// `stripecount`'s keyed windows use), one shared atomic per key.
pub struct AtomicMap<K: 'static> {
    inner: scc::HashIndex<K, Arc<AtomicU64>>,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Default for AtomicMap<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> AtomicMap<K> {
    /// An empty map.
    pub fn new() -> Self {
        AtomicMap {
            inner: scc::HashIndex::new(),
        }
    }

    /// Adds `n` to `key`'s total; returns the new total.
    #[inline]
    pub fn add(&self, key: &K, n: u64) -> u64 {
        loop {
            if let Some(v) = self
                .inner
                .peek_with(key, |_, c| c.fetch_add(n, Ordering::Relaxed) + n)
            {
                return v;
            }
            let _ = self.inner.insert(key.clone(), Arc::new(AtomicU64::new(0)));
        }
    }

    /// The key's total (0 if never seen).
    pub fn get(&self, key: &K) -> u64 {
        self.inner
            .peek_with(key, |_, c| c.load(Ordering::Relaxed))
            .unwrap_or(0)
    }
}

/// `DashMap<K, AtomicU64, S>`: the most common choice; every lookup takes
/// its shard's reader lock. `S` is DashMap's default, std's `RandomState`
/// (SipHash-1-3), unless built [`with_hasher`](Self::with_hasher).
pub struct DashCounter<K, S = std::collections::hash_map::RandomState> {
    inner: dashmap::DashMap<K, AtomicU64, S>,
}

impl<K: Hash + Eq + Clone> Default for DashCounter<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone> DashCounter<K> {
    /// An empty map on DashMap's default hasher.
    pub fn new() -> Self {
        DashCounter {
            inner: dashmap::DashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, S: BuildHasher + Clone> DashCounter<K, S> {
    /// An empty map hashing with `hasher`.
    pub fn with_hasher(hasher: S) -> Self {
        DashCounter {
            inner: dashmap::DashMap::with_hasher(hasher),
        }
    }

    /// Adds `n` to `key`'s total; returns the new total.
    #[inline]
    pub fn add(&self, key: &K, n: u64) -> u64 {
        if let Some(c) = self.inner.get(key) {
            return c.fetch_add(n, Ordering::Relaxed) + n;
        }
        self.inner
            .entry(key.clone())
            .or_insert_with(|| AtomicU64::new(0))
            .fetch_add(n, Ordering::Relaxed)
            + n
    }

    /// The key's total (0 if never seen).
    pub fn get(&self, key: &K) -> u64 {
        self.inner.get(key).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_count() {
        let a = AtomicMap::new();
        let d = DashCounter::new();
        for i in 0..100u64 {
            assert_eq!(a.add(&(i % 7), 2), 2 * (i / 7 + 1));
            assert_eq!(d.add(&(i % 7), 2), 2 * (i / 7 + 1));
        }
        assert_eq!(a.get(&3), d.get(&3));
        assert_eq!(a.get(&99), 0);
        assert_eq!(d.get(&99), 0);
    }
}
