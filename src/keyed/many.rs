//! The batch methods of the per-key types: [`KeyedWindows::add_many_at`],
//! [`HotKeyDetector::add_many_at`], [`HotKeySketch::add_many_at`] and their
//! clock-reading twins. Each is its type's single add, item after item,
//! with the misses of a group of keys overlapped (`batch.rs`: the runner,
//! and why the results are the single calls').

use super::batch::{in_groups, prefetch};
use super::hot::HotKeyDetector;
use super::sketch::HotKeySketch;
use super::windows::KeyedWindows;
use crate::clock::{Clock, Timestamp};
use crate::key::{Key, KeyHasher, KeyRef};
use crate::reclaim::Guard;

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindows<K, C, S> {
    /// Adds each `(key, n)` of `items` now (the clock read once); the adds
    /// counted (see [`add_many_at`](Self::add_many_at)).
    pub fn add_many<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Q, u64)>,
    ) -> usize {
        self.add_many_at(items, self.clock.now())
    }

    /// Adds each `(key, n)` of `items` at `now`, in order: exactly what
    /// [`add_at`](Self::add_at) on each item, one after the other, would
    /// do, and returns how many of them returned `true`. Faster when the
    /// keys are many and the map large: the keys are hashed and their
    /// slots fetched a group at a time, so their cache misses overlap.
    ///
    /// The iterator and the keys' `Hash` run for a group of items before
    /// the group is added; if one of them panics, the items before it are
    /// added, then the panic goes on (nothing after it is added).
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{KeyedWindows, Timestamp};
    /// use std::time::Duration;
    ///
    /// let w = KeyedWindows::builder(Duration::from_secs(10), 10)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let lines = ["GET /a", "GET /b", "GET /a"];
    /// let counted = w.add_many_at(lines.iter().map(|l| (*l, 1)), Timestamp::ZERO);
    /// assert_eq!(counted, 3);
    /// assert_eq!(w.sum("GET /a"), 2);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn add_many_at<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Q, u64)>,
        now: Timestamp,
    ) -> usize {
        let now = now.as_nanos();
        let mut counted = 0;
        // An add of 0 is not hashed (`add_at` returns before it hashes).
        let hash = |k: &Q, n: u64| if n == 0 { 0 } else { self.ring.hash(k) };
        in_groups(items, hash, |group| {
            let guard = Guard::pin(self.ring.graveyard());
            let at = self.locate(now, &guard);
            let Some(m) = at.1 else {
                for it in group {
                    if it.n == 0
                        || self
                            .add_in(it.hash, it.key, at, it.n, &guard, || 0)
                            .is_some()
                    {
                        counted += 1;
                    }
                }
                return;
            };
            let ahead = prefetch(m, group, &guard);
            for (it, &a) in group.iter().zip(&ahead) {
                if it.n == 0 {
                    counted += 1;
                    continue;
                }
                if self
                    .add_with(it.hash, it.key, at, it.n, &guard, || 0, a)
                    .is_some()
                {
                    counted += 1;
                }
            }
        });
        counted
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetector<K, C, S> {
    /// Adds each `(key, n)` of `items` now (the clock read once); see
    /// [`add_many_at`](Self::add_many_at).
    pub fn add_many<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Q, u64)>,
        on_hot: impl FnMut(&'a Q, u64),
    ) {
        self.add_many_at(items, self.windows.clock.now(), on_hot)
    }

    /// Adds each `(key, n)` of `items` at `now`, in order: exactly what
    /// [`became_hot_at`](Self::became_hot_at) on each item, one after the
    /// other, would do, calling `on_hot(key, sum)` right after each add
    /// that made its key hot (`sum`: the key's window sum, as that add saw
    /// it). Faster when the keys are many and the map large: the keys are
    /// hashed and their slots fetched a group at a time, so their cache
    /// misses overlap.
    ///
    /// The iterator and the keys' `Hash` run for a group of items before
    /// the group is added; if one of them panics, the items before it are
    /// added, then the panic goes on. `on_hot` may call back in; if it
    /// panics, the add that made the key hot stays and nothing after it
    /// is added.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{HotKeyDetector, Timestamp};
    /// use std::time::Duration;
    ///
    /// let d = HotKeyDetector::builder(Duration::from_secs(10), 10, 3)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let keys = ["a", "b", "a", "a", "a"];
    /// let mut hot = Vec::new();
    /// d.add_many_at(keys.iter().map(|k| (*k, 1)), Timestamp::ZERO, |k, sum| {
    ///     hot.push((k.to_string(), sum))
    /// });
    /// assert_eq!(hot, vec![("a".to_string(), 3)]); // once, at the third "a"
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn add_many_at<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Q, u64)>,
        now: Timestamp,
        mut on_hot: impl FnMut(&'a Q, u64),
    ) {
        let now = now.as_nanos();
        let w = &self.windows;
        // `became_hot_at` hashes every key, an add of 0 included.
        in_groups(
            items,
            |k, _| w.ring.hash(k),
            |group| {
                let guard = Guard::pin(w.ring.graveyard());
                let at = w.locate(now, &guard);
                let Some(m) = at.1 else {
                    for it in group.iter().filter(|it| it.n != 0) {
                        if let Some(sum) = self.became_hot_with(it.hash, it.key, at, it.n, &guard) {
                            on_hot(it.key, sum);
                        }
                    }
                    return;
                };
                let ahead = prefetch(m, group, &guard);
                for (it, &a) in group.iter().zip(&ahead).filter(|(it, _)| it.n != 0) {
                    if let Some(sum) = self.became_hot_looked(it.hash, it.key, at, it.n, &guard, a)
                    {
                        on_hot(it.key, sum);
                    }
                }
            },
        );
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeySketch<K, C, S> {
    /// Adds each `(key, n)` of `items` now (the clock read once); see
    /// [`add_many_at`](Self::add_many_at).
    pub fn add_many<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Q, u64)>,
        on_hot: impl FnMut(&'a Q, u64),
    ) {
        self.add_many_at(items, self.exact.windows.clock.now(), on_hot)
    }

    /// Adds each `(key, n)` of `items` at `now`, in order: exactly what
    /// [`became_hot_at`](Self::became_hot_at) on each item, one after the
    /// other, would do, calling `on_hot(key, sum)` right after each add
    /// that made its key hot. Faster when the keys are many: their
    /// doorkeeper words and slots are fetched a group at a time.
    ///
    /// Panics of the caller's code: as
    /// [`HotKeyDetector::add_many_at`].
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{HotKeySketch, Timestamp};
    /// use std::time::Duration;
    ///
    /// let d = HotKeySketch::<u64, _>::builder(Duration::from_secs(10), 10, 100)
    ///     .memory(1 << 20)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let keys: Vec<u64> = (0..1_000).map(|i| if i % 2 == 0 { 7 } else { i }).collect();
    /// let mut hot = Vec::new();
    /// d.add_many_at(keys.iter().map(|k| (k, 1)), Timestamp::ZERO, |k, _| hot.push(*k));
    /// assert_eq!(hot, vec![7]);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn add_many_at<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        items: impl IntoIterator<Item = (&'a Q, u64)>,
        now: Timestamp,
        mut on_hot: impl FnMut(&'a Q, u64),
    ) {
        let now = now.as_nanos();
        let w = &self.exact.windows;
        let e = w.epoch(now);
        // `became_hot_at` hashes no add of 0.
        let hash = |k: &Q, n: u64| if n == 0 { 0 } else { w.ring.hash(k) };
        in_groups(items, hash, |group| {
            for it in group.iter().filter(|it| it.n != 0) {
                self.door.prefetch(it.hash);
            }
            let guard = Guard::pin(w.ring.graveyard());
            let at = w.locate(now, &guard);
            for it in group.iter().filter(|it| it.n != 0) {
                if let Some(sum) = self.add_hashed(it.hash, it.key, e, at, it.n, &guard) {
                    on_hot(it.key, sum);
                }
            }
        });
    }
}
