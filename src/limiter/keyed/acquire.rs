//! A per-key limiter's requests and reads.
//!
//! # A request
//! Hash the key (once: the overrides share it), read its limits
//! (`quota.rs`), look the key up (lock-free), and run the admission
//! state's grant (`src/limiter/state.rs`) with those limits: one CAS when
//! granted, loads only when refused. Then the sweep step: one load and a
//! compare against `sweep_due`, a time, so no division, unless the request
//! is in a sweep step (a shard's turn, `pace.rs`) the map has
//! not swept for. A request that cannot fit
//! (`n` above a limit) or asks for nothing is answered without inserting
//! its key.
//!
//! # Sealed and pending states
//! A state told `Refused::Sealed` is being evicted or moved (`slot.rs`).
//! The request looks the key up again: absent (evicted), it inserts the key
//! under its shard's lock; present, it retries on whatever slot holds it
//! now, pausing between rounds (`wait_hint`): a move completes each key's
//! copy right after publishing its slot, and a key a retire left closed is
//! moved before the sweep releases the lock. Reads do the same on a
//! pending state (a sealed one they can read: it is final).
//!
//! # Keys the map cannot hold
//! An insert refused because the map is full of keys that are not idle
//! leaves the decision to the [`FloodPolicy`]: refuse
//! ([`Denied::TooManyKeys`]) or admit untracked. Either is counted. Reads of
//! a key the map does not hold answer as for an empty window.
//!
//! # Refusals
//! Every refused request is counted ([`KeyedLimiter::refusals`]), whatever
//! the reason, after the verdict: a grant pays one test of its result; a
//! refusal, a load and a store to its thread's cell, inlined (`refusals.rs`:
//! a flood of refusals on one hot key shares no word).

use super::{FloodPolicy, KeyedLimiter};
use crate::clock::{Clock, Timestamp};
use crate::key::{Key, KeyRef};
use crate::limiter::config::MAX_LIMITS;
use crate::limiter::decision::Decision;
use crate::limiter::state::{AdmissionState, Refused};
use crate::limiter::Denied;
use crate::map::{Now, Probe};
use crate::reclaim::Guard;
use crate::sync::{wait_hint, Ordering};
use std::hash::BuildHasher;

/// A grant's verdict, `None` for a sealed state.
#[inline(always)]
fn verdict(r: Result<u64, Refused>) -> Option<Result<u64, Denied>> {
    match r {
        Ok(e) => Some(Ok(e)),
        Err(Refused::Denied { reason, .. }) => Some(Err(reason)),
        Err(Refused::Sealed) => None,
    }
}

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// Takes `n` permits for `key` now; `true` if granted.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<String>::new(Quota::per_minute(1))?;
    /// assert!(lim.try_acquire("ip:10.0.0.1", 1));
    /// assert!(!lim.try_acquire("ip:10.0.0.1", 1));
    /// assert!(lim.try_acquire("ip:10.0.0.2", 1)); // every key has its own quota
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.try_acquire_at(key, self.clock.now(), n)
    }

    /// Takes `n` permits for `key` at time `now` (on this limiter's clock's
    /// timeline). A `now` before the newest time the key has seen is
    /// judged at that newest time (a key's time never runs backwards).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::new(Quota::per(2, Duration::from_secs(2)).slices(2))?;
    /// let at = |secs| Timestamp::from_duration(Duration::from_secs(secs));
    /// assert!(lim.try_acquire_at(&1u64, at(0), 1));
    /// assert!(lim.try_acquire_at(&1, at(1), 1));
    /// assert!(!lim.try_acquire_at(&1, at(1), 1)); // 2 in the last 2 s
    /// assert!(lim.try_acquire_at(&1, at(2), 1)); // the first has expired
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    #[inline]
    pub fn try_acquire_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> bool {
        self.acquire(key, now.as_nanos(), n).is_ok()
    }

    /// Loom models and tests only: [`try_acquire_at`](Self::try_acquire_at)'s
    /// path, saying the slice the permits were counted in, or why not.
    #[doc(hidden)]
    pub fn __acquire_at<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        now: Timestamp,
        n: u64,
    ) -> Result<u64, Denied> {
        self.acquire(key, now.as_nanos(), n)
    }

    /// Takes `n` permits for `key` at `now` nanoseconds: `Ok(epoch)`, the
    /// slice the permits were counted in, or why they were refused.
    #[inline]
    pub(crate) fn acquire<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        now: u64,
        n: u64,
    ) -> Result<u64, Denied> {
        let guard = Guard::pin(&self.graveyard);
        let hash = self.map.hash(key);
        self.acquire_in(hash, key, now, n, &guard)
    }

    /// [`acquire`](Self::acquire) with the key hashed and a guard pinned
    /// (a batch's step, `batch.rs`).
    #[inline(always)]
    pub(super) fn acquire_in<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        now: u64,
        n: u64,
        guard: &'g Guard<'g>,
    ) -> Result<u64, Denied> {
        self.acquire_with(hash, key, now, n, guard, Now)
    }

    /// [`acquire_in`](Self::acquire_in) with the key's lookup done by
    /// `probe`: a plain lookup, or a batch's lookup ahead (`batch.rs`).
    #[inline(always)]
    pub(super) fn acquire_with<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        now: u64,
        n: u64,
        guard: &'g Guard<'g>,
        probe: impl Probe<'g, K, AdmissionState>,
    ) -> Result<u64, Denied> {
        let cfg = &self.shared.cfg;
        let r = if self.quotas.levels() == 1 {
            let limit = self.quotas.read_one(hash, key, guard);
            if let Some(r) = self.settled(now, n, n > limit) {
                return r;
            }
            self.on_state_looked(hash, key, now, guard, probe, |st| {
                verdict(st.acquire_one_whole(cfg, now, n, limit))
            })
        } else {
            let mut buf = [0u64; MAX_LIMITS];
            let limits = self.quotas.read(hash, key, guard, &mut buf);
            if let Some(r) = self.settled(now, n, limits.iter().any(|&l| n > l)) {
                return r;
            }
            self.on_state_looked(hash, key, now, guard, probe, |st| {
                verdict(st.acquire(cfg, now, n, limits))
            })
        };
        self.sweep_step(now);
        let r = r.unwrap_or_else(|| {
            self.untracked(|admit| match admit {
                true => Ok(self.epoch(now)),
                false => Err(Denied::TooManyKeys),
            })
        });
        if r.is_err() {
            self.count_refusal();
        }
        r
    }

    /// Takes `n` permits for `key` now and returns the whole [`Decision`]:
    /// the verdict, the key's limit, the permits left, when a refused
    /// request would fit and when the key's window empties (the IETF
    /// `RateLimit` and `Retry-After` fields), without a second lookup.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{Denied, KeyedLimiter, Quota};
    ///
    /// let quota = Quota::per(3, Duration::from_secs(3)).slices(3);
    /// let lim = KeyedLimiter::builder(quota).clock(ManualClock::new()).build()?;
    /// let d = lim.decide(&"alice", 3);
    /// assert!(d.is_granted());
    /// assert_eq!((d.limit(), d.remaining()), (3, 0));
    /// let d = lim.decide(&"alice", 1);
    /// assert_eq!(d.denied(), Some(Denied::Exhausted));
    /// assert_eq!(d.retry_after(), Some(Duration::from_secs(3)));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn decide<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> Decision {
        self.decide_at(key, self.clock.now(), n)
    }

    /// [`decide`](Self::decide) at time `now`.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(5).slices(1))?;
    /// let d = lim.decide_at(&7u64, Timestamp::ZERO, 2);
    /// assert_eq!((d.result(), d.remaining()), (Ok(()), 3));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn decide_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> Decision {
        let now = now.as_nanos();
        let guard = Guard::pin(&self.graveyard);
        let hash = self.map.hash(key);
        let mut buf = [0u64; MAX_LIMITS];
        let limits = self.quotas.read(hash, key, &guard, &mut buf);
        let cfg = &self.shared.cfg;
        if n == 0 || limits.iter().any(|&l| n > l) {
            // Nothing to take: the grant writes nothing (it decides on
            // `n` alone), so it runs as a read, and holds no key.
            let d = self.read_state(hash, key, &guard, |st| {
                st.decide_with::<false>(cfg, now, n, limits)
            });
            if !d.is_granted() {
                self.count_refusal();
            }
            return d;
        }
        let d = if limits.len() == 1 {
            // A held key's live state decides in place: the decision is
            // written once, where the caller keeps it (`on_state`'s
            // `Option`s copied it twice more: 36 of a refusal's 407
            // instructions).
            if let Ok(st) = self.map.lookup(hash, |k| key.is(k), &guard) {
                let d = st.decide_or_sealed::<true>(cfg, now, n, limits, None);
                if !d.is_sealed() {
                    self.decided(now, &d);
                    return d;
                }
            }
            // Absent, sealed or pending: the slow path, as `on_state`'s
            // after its first lookup (so a new key still probes three
            // times: this lookup, the slow path's, the insert's).
            self.on_state_slow(hash, key, now, &guard, &mut |st| {
                st.decide_with::<true>(cfg, now, n, limits)
            })
        } else {
            self.on_state(hash, key, now, &guard, |st| {
                st.decide_with::<false>(cfg, now, n, limits)
            })
        };
        let d = d.unwrap_or_else(|| {
            self.untracked(|admit| Decision::untracked(admit, self.epoch(now), limits[0], n))
        });
        self.decided(now, &d);
        d
    }

    /// What follows decision `d`, taken at `now`: the sweep step, and a
    /// refusal counted.
    #[inline(always)]
    fn decided(&self, now: u64, d: &Decision) {
        self.sweep_step(now);
        if !d.is_granted() {
            self.count_refusal();
        }
    }

    /// Runs `f` on the key's state, inserting the key if it is absent,
    /// until `f` decides (`Some`); `None` if the key cannot be tracked. The
    /// common case (a held, live key) is inlined: one lookup, one `f`.
    #[inline(always)]
    fn on_state<'g, Q, R>(
        &'g self,
        hash: u64,
        key: &Q,
        now: u64,
        guard: &'g Guard<'g>,
        f: impl FnMut(&'g AdmissionState) -> Option<R>,
    ) -> Option<R>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.on_state_looked(hash, key, now, guard, Now, f)
    }

    /// [`on_state`](Self::on_state) with the first lookup made by `probe`.
    /// A key the slow path finds absent is inserted where its lookup
    /// ended, if nothing was inserted there meanwhile (`Map::upsert`).
    #[inline(always)]
    fn on_state_looked<'g, Q, R>(
        &'g self,
        hash: u64,
        key: &Q,
        now: u64,
        guard: &'g Guard<'g>,
        probe: impl Probe<'g, K, AdmissionState>,
        mut f: impl FnMut(&'g AdmissionState) -> Option<R>,
    ) -> Option<R>
    where
        Q: KeyRef<K> + ?Sized,
    {
        if let Ok(st) = probe.lookup(&self.map, hash, |k| key.is(k), guard) {
            if let Some(r) = f(st) {
                return Some(r);
            }
        }
        self.on_state_slow(hash, key, now, guard, &mut f)
    }

    #[inline(never)]
    fn on_state_slow<'g, Q, R>(
        &'g self,
        hash: u64,
        key: &Q,
        now: u64,
        guard: &'g Guard<'g>,
        f: &mut impl FnMut(&'g AdmissionState) -> Option<R>,
    ) -> Option<R>
    where
        Q: KeyRef<K> + ?Sized,
    {
        let mut rounds = 0;
        loop {
            let st = match self.map.lookup(hash, |k| key.is(k), guard) {
                Ok(st) => st,
                Err(miss) => self.map.get_or_insert(
                    hash,
                    |k| key.is(k),
                    miss,
                    || key.to_key(),
                    &self.shared,
                    self.epoch(now),
                    guard,
                )?,
            };
            if let Some(r) = f(st) {
                return Some(r);
            }
            // Sealed or pending: another thread is evicting or moving it.
            wait_hint(&mut rounds);
        }
    }

    /// Decides for a key the map could not hold: `decide(admit)`, counted.
    #[cold]
    fn untracked<R>(&self, decide: impl FnOnce(bool) -> R) -> R {
        self.untracked.fetch_add(1, Ordering::Relaxed);
        decide(self.flood == FloodPolicy::AdmitUntracked)
    }

    /// Counts one refused request ([`refusals`](Self::refusals)). Not
    /// `#[cold]`: a refusal is the common case of a limiter under load,
    /// and a cold call moved it out of the request's path, which cost a
    /// refused Zipf request about 8 ns of 76 (`keyed_steady klr`, see
    /// BENCHMARKS.md) for ten instructions.
    #[inline(always)]
    fn count_refusal(&self) {
        self.refused.add_one();
    }

    /// A verdict no state is needed for: `n == 0` is granted in `now`'s
    /// slice, and `n` above one of the key's limits never fits
    /// (`exceeds`); `None` otherwise. Every request asks, so the answer
    /// `None` is one test in the request's path and the rest is out of it.
    #[inline(always)]
    fn settled(&self, now: u64, n: u64, exceeds: bool) -> Option<Result<u64, Denied>> {
        if n != 0 && !exceeds {
            return None;
        }
        self.settled_rare(now, n)
    }

    /// [`settled`](Self::settled) for `n == 0` or `n` above a limit.
    #[cold]
    #[inline(never)]
    fn settled_rare(&self, now: u64, n: u64) -> Option<Result<u64, Denied>> {
        if n == 0 {
            Some(Ok(self.epoch(now)))
        } else {
            self.count_refusal();
            Some(Err(Denied::ExceedsLimit))
        }
    }

    /// The automatic sweep step: one load and a compare unless `now` is
    /// in a sweep step the map's sweep has not seen.
    #[inline(always)]
    fn sweep_step(&self, now: u64) {
        if now < self.sweep_due.load(Ordering::Relaxed) {
            return;
        }
        self.sweep_step_slow(now);
    }

    /// The sweep step at a `now` past `sweep_due`: the map's own step (step
    /// `now / sweep_nanos`, idleness judged at `now`'s epoch), then
    /// `sweep_due` raised to the start of the step after the one the map
    /// has swept through. Raised, never lowered, and only past steps the
    /// map has swept: a request skipped by it has a step the map would not
    /// sweep for (`maybe_sweep` acts only on a later one).
    #[cold]
    #[inline(never)]
    fn sweep_step_slow(&self, now: u64) {
        let step = now / self.sweep_nanos;
        let guard = Guard::pin(&self.graveyard);
        self.map
            .maybe_sweep(step, self.epoch(now), &self.shared, &guard);
        let due = self
            .map
            .swept_through()
            .saturating_add(1)
            .saturating_mul(self.sweep_nanos);
        self.sweep_due.fetch_max(due, Ordering::Relaxed);
    }

    /// Loom models only: the sweep step the map's automatic sweep has swept
    /// through (`loom-tests/tests/keyed_sweep_due.rs`; with slices of 1 ns
    /// a step is an epoch).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __swept_through(&self) -> u64 {
        self.map.swept_through()
    }
}
