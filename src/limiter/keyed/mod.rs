//! [`KeyedLimiter`]: a strict limiter per key (per client, user, API key),
//! with bounded memory.
//!
//! One engine for everything per key: the per-key map of
//! [`KeyedWindows`](crate::KeyedWindows) (`crate::map`: sharded
//! open-addressing tables, lock-free lookups, inserts and moves under a
//! shard lock, `max_keys`, a rolling sweep of idle keys), each slot holding
//! its key's [`AdmissionState`] inline. Per key, the semantics are exactly
//! [`RateLimiter`](crate::RateLimiter)'s (or
//! [`MultiLimiter`](crate::MultiLimiter)'s, with several quotas).
//!
//! # Files
//! - `slot.rs`: the slot's life (new, moved, evicted) and why no grant is
//!   lost or doubled by a move or an eviction; the eviction floor.
//! - `quota.rs`: default limits and per-key overrides, changed at run time
//!   without ever over-admitting.
//! - `acquire.rs`: requests, the retry on a sealed state, and the key-flood
//!   policy; `batch.rs`: batches of requests; `read.rs`: reads (peeks,
//!   availability, retry times).
//! - `refusals.rs`: the count of refused requests, a cell per thread;
//!   `pace.rs`: how often requests sweep idle keys, and how much.
//! - `keys.rs`: the keys held: the bound, the flood policy, eviction,
//!   memory; `limits.rs`: the limits, windows and per-key overrides as the
//!   public API shows them.
//!
//! # Invariants
//! 1. A key is in the map at most once, and its slot's state holds every
//!    grant of the key's current windows (`slot.rs`); so per key, no window
//!    ever holds more than the limit its last grant was judged against.
//! 2. [`KeyedLimiter::len`] never exceeds `max_keys`. A request for a key
//!    the map cannot hold (full of keys that are not idle) is decided by
//!    the [`FloodPolicy`] and counted.
//! 3. A request on a key the map holds takes no lock; it retries only
//!    after another thread's CAS, or while its key is being moved or
//!    evicted (a lock holder's work on that one key).

mod acquire;
mod batch;
mod builder;
mod keys;
mod limits;
mod pace;
mod quota;
mod read;
mod refusals;
mod slot;

pub use self::builder::KeyedLimiterBuilder;
use self::pace::{SweepPace, PARTS};
use self::quota::Quotas;
use self::refusals::Refusals;
use self::slot::Shared;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::Key;
use crate::limiter::config::{Config, MAX_LIMITS};
use crate::limiter::quota::Quota;
use crate::limiter::state::AdmissionState;
use crate::map::Map;
use crate::reclaim::Graveyard;
use crate::stripes::default_cap;
use crate::sync::AtomicU64;
use std::fmt;
use std::hash::BuildHasher;
use strength_reduce::StrengthReducedU64;

/// What a [`KeyedLimiter`] does with a request for a new key when it holds
/// `max_keys` keys and none of them is idle (a flood of distinct keys).
/// Either way the decision is counted
/// ([`KeyedLimiter::untracked_decisions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FloodPolicy {
    /// Refuse it ([`Denied::TooManyKeys`](crate::Denied::TooManyKeys)):
    /// memory stays bounded and no key is ever over-admitted. The default.
    #[default]
    Refuse,
    /// Admit it (if `n` fits the key's limit at all) without counting it:
    /// availability over strictness, for keys the limiter cannot track.
    AdmitUntracked,
}

/// A strict rate limiter per key: for every key, never more than its limit
/// in any window, under any concurrency; a refusal only when the request
/// did not fit at the moment it was decided. Keys are held in a bounded map
/// and evicted when idle, as part of normal operation.
///
/// Per key it behaves exactly as a [`RateLimiter`](crate::RateLimiter) of
/// its [`Quota`] (of one slice: a fixed window), or, built with several
/// quotas, as a [`MultiLimiter`](crate::MultiLimiter): several limits, all
/// or nothing, in one CAS. A request on a held key costs one lookup (no
/// lock, nothing shared written) and one CAS on the key's 24-byte state,
/// which lives in the key's map slot.
///
/// `K` is the key type; methods take any borrowed form of it (`&str` for a
/// `String` key, see [`KeyRef`](crate::keyed::KeyRef)). The hasher `S`
/// defaults to [`RandomState`] (see "Keys from clients").
///
/// # Keys from clients
/// Keys are hashed under a seed drawn from the operating system for this
/// limiter, so clients cannot choose keys that collide. They can invent
/// keys: with `max_keys` at most that many are held, and while all are
/// busy a new key is decided by the [`FloodPolicy`] and counted; memory
/// stays bounded. Under a known seed (a fixed hasher) crafted keys all
/// collide and a request compares its key with each of them held (at most
/// `max_keys`); no key is ever over-admitted. The
/// [guide](crate::guide#keys-from-untrusted-clients) has the whole
/// picture.
///
/// # Time never runs backwards for a key
/// An evicted key forgets its grants, so a request for it stamped before
/// the eviction's time must not be judged in a window that held them: a key
/// the limiter takes in (a new one, or one evicted before) starts at the
/// *eviction floor*, the newest time any eviction judged idleness at,
/// rounded down to its slice. A request stamped earlier than the floor
/// (with [`try_acquire_at`](Self::try_acquire_at), or a clock that lags
/// another thread's) is judged, and its grant counted, in the floor's
/// slice: later than its stamp, never earlier, so nothing is over-admitted
/// (its [`Decision::reset_after`](crate::Decision::reset_after) counts from
/// that slice). With one clock and requests in time order the floor is
/// never ahead of a request.
///
/// ```
/// use std::time::Duration;
/// use stripecount::{KeyedLimiter, Quota, Timestamp};
///
/// let lim = KeyedLimiter::new(Quota::per(2, Duration::from_secs(2)).slices(2))?;
/// let sec = Duration::from_secs(1);
/// lim.try_acquire_at(&"old", Timestamp::ZERO, 1);
/// // Evicted at 10 s: the floor is the slice of 10 s.
/// assert_eq!(lim.evict_idle_at(Timestamp::ZERO + 10 * sec), 1);
/// // A new key stamped at 5 s is judged in the slice of 10 s: its window
/// // then empties 2 s after 10 s, 7 s after its stamp.
/// let d = lim.decide_at(&"new", Timestamp::ZERO + 5 * sec, 1);
/// assert!(d.is_granted());
/// assert_eq!(d.reset_after(), 7 * sec);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// ```
/// use std::time::Duration;
/// use stripecount::clock::ManualClock;
/// use stripecount::{KeyedLimiter, Quota};
///
/// let clock = ManualClock::new();
/// // 2 requests per second per client, the second cut into 10 slices.
/// let lim: KeyedLimiter<String, _> = KeyedLimiter::builder(Quota::per_second(2))
///     .clock(clock.clone())
///     .build()?;
/// assert!(lim.try_acquire("alice", 1));
/// assert!(lim.try_acquire("alice", 1));
/// assert!(!lim.try_acquire("alice", 1)); // alice's window is full...
/// assert!(lim.try_acquire("bob", 1)); // ...bob's is his own
/// assert_eq!(lim.len(), 2);
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire("alice", 1));
/// assert_eq!(lim.len(), 1); // bob, idle for a whole window, was evicted
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct KeyedLimiter<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    map: Map<K, AdmissionState, S>,
    /// Where the maps' replaced tables wait: every guard on `map` and on
    /// the quotas' overrides is pinned on it (`crate::reclaim`).
    graveyard: Graveyard,
    shared: Shared,
    quotas: Quotas<K, S>,
    /// A state never written: what a key the map does not hold reads as.
    empty: AdmissionState,
    /// The quotas as built (their limits are the defaults as built;
    /// `quotas` holds them as they are now).
    specs: [Quota; MAX_LIMITS],
    /// The finest slice length, for the epoch of the sweep step.
    divisor: StrengthReducedU64,
    /// The time (ns) from which a request may open a sweep step the map's
    /// automatic sweep has not seen: below it the sweep step is one load
    /// and a compare, without a division (`acquire.rs`).
    sweep_due: AtomicU64,
    /// A sweep step's length (ns; `pace.rs`).
    sweep_nanos: u64,
    clock: C,
    flood: FloodPolicy,
    untracked: AtomicU64,
    /// Requests refused, whatever the reason (`acquire.rs`), counted in a
    /// cell per thread (`refusals.rs`), off the grant path.
    refused: Refusals,
}

impl<K: Key> KeyedLimiter<K> {
    /// A limiter of `quotas` for every key (one [`Quota`], or several
    /// enforced together: a request is granted only if every quota of its
    /// key has room, and takes its permits from all of them in one atomic
    /// step), on the monotonic clock, with a [`RandomState`] hasher and no
    /// bound on the keys held (see [`builder`](Self::builder) for those).
    ///
    /// Errors: an invalid quota ([`Quota::validate`]); no quota
    /// ([`ConfigError::NoLevels`]); more than
    /// [`MAX_LIMITS`](crate::limiter::MAX_LIMITS) ([`ConfigError::Invalid`]);
    /// slice lengths that are not whole multiples of the shortest
    /// ([`ConfigError::LevelSliceMismatch`]).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u64>::new(Quota::per_second(100))?;
    /// assert!(lim.try_acquire(&7, 1));
    /// // 10 a second and 1000 an hour, per key.
    /// let both = KeyedLimiter::<u64>::new([Quota::per_second(10), Quota::per_hour(1000)])?;
    /// assert_eq!(both.limit_count(), 2);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn new(quotas: impl AsRef<[Quota]>) -> Result<Self, ConfigError> {
        Self::builder(quotas).build()
    }

    /// A builder: the clock, the hasher, the bound on keys held, the flood
    /// policy and the automatic eviction.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::limiter::FloodPolicy;
    /// use stripecount::{KeyedLimiter, Quota};
    ///
    /// let lim: KeyedLimiter<String, _> = KeyedLimiter::builder(Quota::per_second(5))
    ///     .clock(ManualClock::new())
    ///     .max_keys(100_000)
    ///     .flood_policy(FloodPolicy::Refuse)
    ///     .build()?;
    /// assert!(lim.try_acquire("alice", 5));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder(quotas: impl AsRef<[Quota]>) -> KeyedLimiterBuilder<K> {
        KeyedLimiterBuilder::new(quotas.as_ref())
    }
}

impl<K: Key, C: Clock> KeyedLimiter<K, C> {
    /// A builder on `clock`: [`KeyedLimiter::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](KeyedLimiterBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{Clock, ConfigError, KeyedLimiter, Quota};
    ///
    /// let lim = KeyedLimiter::<u64, ManualClock>::builder_with_clock(
    ///     Quota::per_second(5),
    ///     ManualClock::new(),
    /// )
    /// .max_keys(1_000)
    /// .build()?;
    /// assert!(lim.try_acquire(&7, 5));
    /// assert!(!lim.try_acquire(&7, 1));
    ///
    /// fn per_user<C: Clock>(clock: C) -> Result<KeyedLimiter<String, C>, ConfigError> {
    ///     KeyedLimiter::builder_with_clock(Quota::per_second(5), clock).build()
    /// }
    /// assert!(per_user(ManualClock::new())?.try_acquire("alice", 1));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn builder_with_clock(quotas: impl AsRef<[Quota]>, clock: C) -> KeyedLimiterBuilder<K, C> {
        KeyedLimiter::builder(quotas).clock(clock)
    }
}

impl<K: Key, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    pub(super) fn build(quotas: &[Quota], clock: C, hasher: S) -> Result<Self, ConfigError> {
        let cfg = Config::for_quotas(quotas)?;
        let limits: Vec<u64> = quotas.iter().map(Quota::limit).collect();
        let pace = SweepPace::of(&cfg);
        Ok(KeyedLimiter {
            map: {
                let mut map = Map::new(hasher.clone());
                map.set_sweep(pace.units, PARTS);
                map
            },
            graveyard: Graveyard::default(),
            quotas: Quotas::new(&limits, hasher),
            empty: AdmissionState::new(&cfg, 0),
            divisor: StrengthReducedU64::new(cfg.slice_nanos()),
            sweep_due: AtomicU64::new(0),
            sweep_nanos: pace.nanos,
            shared: Shared::new(cfg),
            specs: Quota::array(quotas),
            clock,
            flood: FloodPolicy::Refuse,
            untracked: AtomicU64::new(0),
            refused: Refusals::new(default_cap()),
        })
    }
}

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// The clock.
    ///
    /// ```
    /// # use stripecount::clock::ManualClock;
    /// # use stripecount::{Clock, KeyedLimiter, Quota};
    /// # use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let lim: KeyedLimiter<u8, _> =
    ///     KeyedLimiter::builder(Quota::per_second(5)).clock(clock.clone()).build()?;
    /// clock.advance(Duration::from_secs(3));
    /// assert_eq!(lim.clock().now().as_nanos(), 3_000_000_000);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The epoch (slice number, of the shortest slice length) of `now`
    /// nanoseconds.
    #[allow(dead_code)]
    pub(crate) fn epoch_of(&self, now: u64) -> u64 {
        self.shared.cfg.epoch_of(now)
    }

    /// The epoch of `now` by multiply and shift (the map's time).
    #[inline]
    fn epoch(&self, now: u64) -> u64 {
        (now / self.divisor).min(crate::limiter::state::MAX_EPOCH)
    }

    /// Loom models only: moves every key of `key`'s shard to a new table,
    /// as an insert into a full table would.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __move_shard_of<Q: crate::key::KeyRef<K> + ?Sized>(&self, key: &Q) {
        let guard = crate::reclaim::Guard::pin(&self.graveyard);
        self.map
            .rebuild_shard(self.map.hash(key), &self.shared, &guard);
    }

    /// Loom models only: counts refusals with `cells` per-token cells (the
    /// threads with later tokens count in the striped rest).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __loom_refusal_cells(mut self, cells: usize) -> Self {
        self.refused = Refusals::new(cells);
        self
    }
}

impl<K: 'static, C: Clock, S> KeyedLimiter<K, C, S> {
    /// Default quota `i` as built, with its limit as it is now.
    pub(super) fn quota_at(&self, i: usize) -> Quota {
        self.specs[i].with_limit(self.quotas.default_of(i))
    }
}

impl<K: 'static, C: Clock, S> fmt::Debug for KeyedLimiter<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.shared.cfg.len();
        let quotas: Vec<Quota> = (0..k).map(|i| self.quota_at(i)).collect();
        f.debug_struct("KeyedLimiter")
            .field("quotas", &quotas)
            .field("keys", &self.map.len())
            .field("flood", &self.flood)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + fmt::Debug>() {}
    is::<KeyedLimiter<String>>();
    is::<KeyedLimiter<u64, crate::clock::ManualClock>>();
}
