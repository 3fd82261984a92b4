//! The hot-key detector's queries: whether a key is hot, the hot keys,
//! the eviction of idle slices and hot state, the heavy keys held. The
//! hot rule they report is in `hot.rs`.

use super::hot::HotKeyDetector;
use crate::clock::{Clock, Timestamp};
use crate::key::{Key, KeyHasher, KeyRef};
use crate::reclaim::Guard;

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetector<K, C, S> {
    /// Whether `key` is hot by the rule and its window sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> bool {
        let now = now.as_nanos();
        let hash = self.windows.ring.hash(key);
        self.is_hot_in(hash, key, now)
    }

    pub(super) fn is_hot_in<Q: KeyRef<K> + ?Sized>(&self, hash: u64, key: &Q, now: u64) -> bool {
        let w = &self.windows;
        let guard = Guard::pin(w.ring.graveyard());
        let sum = w.read_in(hash, key, w.epoch(now), &guard);
        sum >= self.threshold
            && self
                .homes
                .get(hash, |k| key.is(k), &guard)
                .is_some_and(|h| h.state().is_ok_and(|s| s.0))
    }

    /// Whether `key` is hot now.
    pub fn is_hot<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.is_hot_at(key, self.windows.clock.now())
    }

    /// Every key that is hot now (see [`hot_keys_at`](Self::hot_keys_at)).
    pub fn hot_keys(&self) -> Vec<K> {
        self.hot_keys_at(self.windows.clock.now())
    }

    /// Every key that [`is_hot_at`](Self::is_hot_at) `now` (in unspecified
    /// order): a scan of the keys every live slice held when it started
    /// (keys added meanwhile, by other threads or by the key type's own
    /// code, are left for the next call).
    pub fn hot_keys_at(&self, now: Timestamp) -> Vec<K> {
        let now = now.as_nanos();
        let guard = Guard::pin(self.windows.ring.graveyard());
        self.windows
            .sums_at(now, &guard)
            .into_iter()
            .filter(|&(k, s)| {
                s >= self.threshold
                    && self
                        .homes
                        .get(self.windows.ring.hash(k), |x| x == k, &guard)
                        .is_some_and(|h| h.state().is_ok_and(|s| s.0))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Drops the slices that left the window now and the hot state of keys
    /// with no heavy slice left (see [`evict_idle_at`](Self::evict_idle_at)).
    pub fn evict_idle(&self) -> usize {
        self.evict_idle_at(self.windows.clock.now())
    }

    /// Drops the slices that left the window at `now` (see
    /// [`KeyedWindows::evict_idle_at`](crate::KeyedWindows::evict_idle_at)) and the hot state of keys with no
    /// heavy slice left; returns the slice entries dropped.
    pub fn evict_idle_at(&self, now: Timestamp) -> usize {
        let now = now.as_nanos();
        // Homes are retired against the newest slice at most (home.rs,
        // "Lifetime": adds up to a window older than the newest still
        // decide).
        let e = self.windows.epoch(now).min(self.windows.ring.newest());
        let guard = Guard::pin(self.windows.ring.graveyard());
        self.homes.evict_idle(e, &self.home_cfg, &guard);
        drop(guard);
        self.windows.evict_idle_at(Timestamp::from_nanos(now))
    }

    /// Heavy keys holding hot state now (keys with a slice at
    /// `ceil(threshold / slices)` or more within about two windows).
    pub fn heavy_keys(&self) -> usize {
        self.homes.len()
    }
}
