//! [`KeyedLimiter::try_acquire_many_at`]: a batch of requests, each
//! decided exactly as [`KeyedLimiter::try_acquire_at`] decides it, one
//! after the other, with the misses of a group of keys overlapped (the
//! runner, and why the verdicts are the single calls': `crate::keyed::batch`).

use super::KeyedLimiter;
use crate::clock::{Clock, Timestamp};
use crate::key::{Key, KeyRef};
use crate::keyed::batch::{in_groups, prefetch_map};
use crate::reclaim::Guard;
use std::hash::BuildHasher;

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// Takes `n` permits for each `(key, n)` of `requests` now (the clock
    /// read once); see [`try_acquire_many_at`](Self::try_acquire_many_at).
    pub fn try_acquire_many<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        requests: impl IntoIterator<Item = (&'a Q, u64)>,
        verdict: impl FnMut(usize, bool),
    ) {
        self.try_acquire_many_at(requests, self.clock.now(), verdict)
    }

    /// Takes `n` permits for each `(key, n)` of `requests` at `now`, in
    /// order: exactly what [`try_acquire_at`](Self::try_acquire_at) on each
    /// request, one after the other, would grant, calling `verdict(i,
    /// granted)` right after request `i` (counted from 0) is decided.
    /// Faster when the keys are many and the map large: the keys are
    /// hashed and their states fetched a group at a time, so their cache
    /// misses overlap.
    ///
    /// The iterator and the keys' `Hash` run for a group of requests before
    /// the group is decided; if one of them panics, the requests before it
    /// are decided (and given their verdicts), then the panic goes on.
    /// `verdict` may call back in; if it panics, the requests after it are
    /// not decided.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::builder(Quota::per_second(2)).clock(ManualClock::new()).build()?;
    /// let requests = ["alice", "bob", "alice", "alice"];
    /// let mut granted = vec![false; requests.len()];
    /// lim.try_acquire_many_at(requests.iter().map(|k| (*k, 1)), Timestamp::ZERO, |i, ok| {
    ///     granted[i] = ok
    /// });
    /// assert_eq!(granted, [true, true, true, false]); // alice's third is over 2
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn try_acquire_many_at<'a, Q: KeyRef<K> + ?Sized + 'a>(
        &self,
        requests: impl IntoIterator<Item = (&'a Q, u64)>,
        now: Timestamp,
        mut verdict: impl FnMut(usize, bool),
    ) {
        let now = now.as_nanos();
        let mut i = 0;
        // `try_acquire_at` hashes every key, a request of 0 included.
        in_groups(
            requests,
            |k, _| self.map.hash(k),
            |group| {
                let guard = Guard::pin(&self.graveyard);
                // Every request is prefetched, those of 0 too (never looked
                // up: settled first).
                let ahead = prefetch_map(&self.map, group, &guard, true);
                for (r, &a) in group.iter().zip(&ahead) {
                    let granted = self
                        .acquire_with(r.hash, r.key, now, r.n, &guard, a)
                        .is_ok();
                    verdict(i, granted);
                    i += 1;
                }
            },
        );
    }
}
