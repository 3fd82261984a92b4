//! Reads of a [`KeyedLimiter`]: peeks, availability and retry times. A read
//! takes nothing, moves no key's time and holds no key: a key the map does
//! not hold reads as an empty window (an unwritten state), and a read that
//! meets a pending state (a move in progress) looks the key up again. A
//! sealed state is final, so a read of it is exact.

use super::KeyedLimiter;
use crate::clock::{Clock, Timestamp};
use crate::key::{Key, KeyRef};
use crate::limiter::config::MAX_LIMITS;
use crate::limiter::decision::Decision;
use crate::limiter::state::AdmissionState;
use crate::reclaim::Guard;
use crate::sync::wait_hint;
use std::hash::BuildHasher;
use std::time::Duration;

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// Whether `n` permits for `key` would be granted now, taking nothing:
    /// the verdict [`decide`](Self::decide) would give, without its
    /// effect. A key the limiter does not hold reads as an empty window
    /// (and is not inserted).
    ///
    /// The other fields describe the window as it is, the request *not*
    /// counted (a peek changes nothing): [`remaining`](Decision::remaining)
    /// is what one request could get now (a granted `decide` of `n` would
    /// leave `n` fewer), and [`reset_after`](Decision::reset_after) is when
    /// the window as it is empties (zero for an empty window; a granted
    /// `decide` would count its slice in). [`retry_after`](Decision::retry_after)
    /// is the same as `decide`'s.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_minute(2))?;
    /// assert!(lim.peek(&"k", 2).is_granted());
    /// assert!(lim.try_acquire(&"k", 1));
    /// assert!(!lim.peek(&"k", 2).is_granted());
    /// assert_eq!(lim.peek(&"k", 1).remaining(), 1);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn peek<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> Decision {
        self.peek_at(key, self.clock.now(), n)
    }

    /// [`peek`](Self::peek) at time `now`. A read: it moves no key's time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_second(2))?;
    /// let t0 = Timestamp::ZERO;
    /// lim.try_acquire_at(&"k", t0, 2);
    /// assert!(!lim.peek_at(&"k", t0, 1).is_granted());
    /// assert!(lim.peek_at(&"k", t0 + Duration::from_secs(1), 1).is_granted());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn peek_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> Decision {
        let now = now.as_nanos();
        let guard = Guard::pin(&self.graveyard);
        let hash = self.map.hash(key);
        let mut buf = [0u64; MAX_LIMITS];
        let limits = self.quotas.read(hash, key, &guard, &mut buf);
        self.read_state(hash, key, &guard, |st| {
            st.peek(&self.shared.cfg, now, n, limits)
        })
    }

    /// The most permits one request for `key` could get now (its limit for
    /// a key the limiter does not hold).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::new(Quota::per_minute(5))?;
    /// lim.try_acquire(&"k", 2);
    /// assert_eq!((lim.available(&"k"), lim.available(&"new")), (3, 5));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn available<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> u64 {
        self.available_at(key, self.clock.now())
    }

    /// The most permits one request for `key` at `now` could get (the
    /// smallest over its limits; a limit in an empty window). A read.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::new(Quota::per(5, Duration::from_secs(2)).slices(2))?;
    /// let (t0, sec) = (Timestamp::ZERO, Duration::from_secs(1));
    /// lim.try_acquire_at(&1u64, t0, 2);
    /// lim.try_acquire_at(&1, t0 + sec, 1);
    /// assert_eq!(lim.available_at(&1, t0 + sec), 2);
    /// assert_eq!(lim.available_at(&1, t0 + 2 * sec), 4); // the 2 expired
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn available_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        let guard = Guard::pin(&self.graveyard);
        let hash = self.map.hash(key);
        let mut buf = [0u64; MAX_LIMITS];
        let limits = self.quotas.read(hash, key, &guard, &mut buf);
        self.read_state(hash, key, &guard, |st| {
            st.available(&self.shared.cfg, now, limits)
        })
    }

    /// How long until a request for `n` permits for `key` would fit if
    /// nothing else were granted: `Some(ZERO)` if it fits now, `None` if it
    /// never can (`n` above the key's limit).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let quota = Quota::per_second(1).slices(1); // a fixed window
    /// let lim = KeyedLimiter::builder(quota).clock(ManualClock::new()).build()?;
    /// lim.try_acquire(&"k", 1);
    /// assert_eq!(lim.retry_after(&"k", 1), Some(Duration::from_secs(1)));
    /// assert_eq!(lim.retry_after(&"k", 2), None);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn retry_after<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> Option<Duration> {
        self.retry_after_at(key, self.clock.now(), n)
    }

    /// [`retry_after`](Self::retry_after) from time `now`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stripecount::{KeyedLimiter, Quota, Timestamp};
    ///
    /// let lim = KeyedLimiter::new(Quota::per(2, Duration::from_secs(2)).slices(2))?;
    /// lim.try_acquire_at(&"k", Timestamp::ZERO, 2);
    /// let half = Timestamp::from_duration(Duration::from_millis(500));
    /// assert_eq!(lim.retry_after_at(&"k", half, 1), Some(Duration::from_millis(1500)));
    /// assert_eq!(lim.retry_after_at(&"new", half, 2), Some(Duration::ZERO));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn retry_after_at<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        now: Timestamp,
        n: u64,
    ) -> Option<Duration> {
        self.peek_at(key, now, n).retry_after()
    }

    /// Runs the read `f` on the key's state (an empty one if the key is not
    /// held), again while the state is pending.
    pub(super) fn read_state<'g, Q, R>(
        &'g self,
        hash: u64,
        key: &Q,
        guard: &'g Guard<'g>,
        f: impl Fn(&AdmissionState) -> Option<R>,
    ) -> R
    where
        Q: KeyRef<K> + ?Sized,
    {
        let mut rounds = 0;
        loop {
            let st = self
                .map
                .get(hash, |k| key.is(k), guard)
                .unwrap_or(&self.empty);
            if let Some(r) = f(st) {
                return r;
            }
            wait_hint(&mut rounds);
        }
    }
}
