//! [`KeyedLimiter`]: a strict limiter per key (per client, user, API key),
//! with bounded memory.
//!
//! One engine for everything per key: the per-key map of
//! [`KeyedWindows`](crate::KeyedWindows) (`crate::map`: sharded
//! open-addressing tables, lock-free lookups, inserts and moves under a
//! shard lock, `max_keys`, a rolling sweep of idle keys), each slot holding
//! its key's [`AdmissionState`] inline. Per key, the semantics are exactly
//! [`SlidingWindowLimiter`](crate::SlidingWindowLimiter)'s (or
//! [`MultiLimiter`](crate::MultiLimiter)'s, with several limits).
//!
//! # Files
//! - `slot.rs`: the slot's life (new, moved, evicted) and why no grant is
//!   lost or doubled by a move or an eviction; the eviction floor.
//! - `quota.rs`: default limits and per-key overrides, changed at run time
//!   without ever over-admitting.
//! - `acquire.rs`: requests, the retry on a sealed state, and the key-flood
//!   policy; `read.rs`: reads (peeks, availability, retry times).
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
mod keys;
mod limits;
mod pace;
mod quota;
mod read;
mod refusals;
mod slot;

use self::pace::{SweepPace, PARTS};
use self::quota::Quotas;
use self::refusals::Refusals;
use self::slot::Shared;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::error::ConfigError;
use crate::key::Key;
use crate::limiter::config::{Config, MAX_LIMITS};
use crate::limiter::state::AdmissionState;
use crate::map::Map;
use crate::reclaim::Graveyard;
use crate::stripes::default_cap;
use crate::sync::AtomicU64;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::time::Duration;
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
/// Per key it behaves exactly as a
/// [`SlidingWindowLimiter`](crate::SlidingWindowLimiter) (one slice: a
/// fixed window), or with [`multi`](Self::multi) as a
/// [`MultiLimiter`](crate::MultiLimiter): several limits, all or nothing,
/// in one CAS. A request on a held key costs one lookup (no lock, nothing
/// shared written) and one CAS on the key's 24-byte state, which lives in
/// the key's map slot.
///
/// `K` is the key type; methods take any borrowed form of it (`&str` for a
/// `String` key, see [`KeyRef`](crate::KeyRef)). The hasher `S` defaults to
/// `RandomState` (keys come from clients: a keyed hash resists collision
/// floods).
///
/// ```
/// use stripecount::{KeyedLimiter, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // 2 requests per second per client, the second cut into 10 slices.
/// let lim: KeyedLimiter<String, _> =
///     KeyedLimiter::with_clock(2, Duration::from_secs(1), 10, clock.clone())?;
/// assert!(lim.try_acquire("alice"));
/// assert!(lim.try_acquire("alice"));
/// assert!(!lim.try_acquire("alice")); // alice's window is full...
/// assert!(lim.try_acquire("bob")); // ...bob's is his own
/// assert_eq!(lim.len(), 2);
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire("alice"));
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
    windows: [Duration; MAX_LIMITS],
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
    /// `limit` permits per `window` for every key, the window cut into
    /// `slices` slices, on the monotonic clock. Any `limit` is valid (0
    /// refuses everything).
    ///
    /// Errors: zero window, zero slices, more than
    /// [`MAX_SLICES`](crate::MAX_SLICES), a window whose nanoseconds are not
    /// a whole multiple of `slices`, or one longer than `u64::MAX` ns.
    ///
    /// ```
    /// use stripecount::{ConfigError, KeyedLimiter};
    /// use std::time::Duration;
    ///
    /// let lim = KeyedLimiter::<u64>::new(100, Duration::from_secs(1), 10)?;
    /// assert!(lim.try_acquire(&7));
    /// let bad = KeyedLimiter::<u64>::new(100, Duration::from_nanos(10), 3);
    /// assert!(matches!(bad, Err(ConfigError::UnevenSlices { .. })));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(limit: u64, window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::with_clock(limit, window, slices, MonotonicClock)
    }

    /// Several limits for every key, all or nothing: `limits[i] = (limit,
    /// window, slices)`, on the monotonic clock (see
    /// [`multi_with_clock`](Self::multi_with_clock)).
    ///
    /// ```
    /// use stripecount::KeyedLimiter;
    /// use std::time::Duration;
    ///
    /// let s = Duration::from_secs(1);
    /// let lim = KeyedLimiter::<u64>::multi(&[(10, s, 10), (1000, 3600 * s, 60)])?;
    /// assert_eq!(lim.limit_count(), 2);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn multi(limits: &[(u64, Duration, usize)]) -> Result<Self, ConfigError> {
        Self::multi_with_clock(limits, MonotonicClock)
    }
}

impl<K: Key, C: Clock> KeyedLimiter<K, C> {
    /// A limiter on the given clock (see [`new`](KeyedLimiter::new)).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, ManualClock};
    /// use std::time::Duration;
    ///
    /// let lim = KeyedLimiter::with_clock(1, Duration::from_secs(1), 1, ManualClock::new())?;
    /// assert!(lim.try_acquire(&"k"));
    /// assert!(!lim.try_acquire(&"k"));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn with_clock(
        limit: u64,
        window: Duration,
        slices: usize,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::with_hasher(limit, window, slices, clock, RandomState::new())
    }

    /// Several limits per key on the given clock: a request is granted only
    /// if every limit of its key has room, and takes its permits from all
    /// of them in one atomic step; a refusal takes nothing. Each limit is
    /// `(limit, window, slices)` and behaves as a sliding window (one slice:
    /// fixed); counts are exact permits (limits above
    /// [`MAX_EXACT_LIMIT`](crate::MAX_EXACT_LIMIT) count as that many).
    ///
    /// Errors: as [`new`](KeyedLimiter::new) for each window; no limit
    /// ([`ConfigError::NoLevels`]); more than [`MAX_LIMITS`](crate::MAX_LIMITS)
    /// ([`ConfigError::Invalid`]); a slice length that is not a whole
    /// multiple of the shortest one ([`ConfigError::LevelSliceMismatch`]).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let s = Duration::from_secs(1);
    /// // 2 per second and 3 per minute, per key.
    /// let lim = KeyedLimiter::multi_with_clock(&[(2, s, 1), (3, 60 * s, 60)], clock.clone())?;
    /// assert!(lim.try_acquire_n(&1u32, 2));
    /// clock.advance(s);
    /// assert!(!lim.try_acquire_n(&1, 2)); // the per-minute limit: nothing taken...
    /// assert!(lim.try_acquire(&1)); // ...so 1 still fits
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn multi_with_clock(
        limits: &[(u64, Duration, usize)],
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::multi_with_hasher(limits, clock, RandomState::new())
    }
}

impl<K: Key, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    /// A limiter whose map hashes keys with `hasher` (a faster one where
    /// keys are trusted; see the type's docs for why the default is
    /// `RandomState`). Errors as [`new`](KeyedLimiter::new).
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, ManualClock};
    /// use std::collections::hash_map::RandomState;
    /// use std::time::Duration;
    ///
    /// let lim = KeyedLimiter::with_hasher(
    ///     5, Duration::from_secs(1), 10, ManualClock::new(), RandomState::new())?;
    /// assert!(lim.try_acquire_n(&9u64, 5));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn with_hasher(
        limit: u64,
        window: Duration,
        slices: usize,
        clock: C,
        hasher: S,
    ) -> Result<Self, ConfigError> {
        let cfg = Config::single(limit, window, slices)?;
        Ok(Self::build(cfg, &[limit], &[window], clock, hasher))
    }

    /// [`multi_with_clock`](KeyedLimiter::multi_with_clock) with the given
    /// hasher.
    ///
    /// ```
    /// use stripecount::{KeyedLimiter, ManualClock};
    /// use std::collections::hash_map::RandomState;
    /// use std::time::Duration;
    ///
    /// let s = Duration::from_secs(1);
    /// let lim = KeyedLimiter::multi_with_hasher(
    ///     &[(1, s, 1), (2, 10 * s, 10)], ManualClock::new(), RandomState::new())?;
    /// assert!(lim.try_acquire(&"k") && !lim.try_acquire(&"k"));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn multi_with_hasher(
        limits: &[(u64, Duration, usize)],
        clock: C,
        hasher: S,
    ) -> Result<Self, ConfigError> {
        let windows: Vec<(Duration, usize)> = limits.iter().map(|l| (l.1, l.2)).collect();
        let cfg = Config::multi(&windows)?;
        let raw: Vec<u64> = limits.iter().map(|l| l.0).collect();
        let w: Vec<Duration> = limits.iter().map(|l| l.1).collect();
        Ok(Self::build(cfg, &raw, &w, clock, hasher))
    }

    fn build(cfg: Config, limits: &[u64], windows: &[Duration], clock: C, hasher: S) -> Self {
        let mut w = [Duration::ZERO; MAX_LIMITS];
        w[..windows.len()].copy_from_slice(windows);
        let pace = SweepPace::of(&cfg);
        KeyedLimiter {
            map: {
                let mut map = Map::new(hasher.clone());
                map.set_sweep(pace.units, PARTS);
                map
            },
            graveyard: Graveyard::default(),
            quotas: Quotas::new(limits, hasher),
            empty: AdmissionState::new(&cfg, 0),
            divisor: StrengthReducedU64::new(cfg.slice_nanos()),
            sweep_due: AtomicU64::new(0),
            sweep_nanos: pace.nanos,
            shared: Shared::new(cfg),
            windows: w,
            clock,
            flood: FloodPolicy::Refuse,
            untracked: AtomicU64::new(0),
            refused: Refusals::new(default_cap()),
        }
    }
}

impl<K: Key, C: Clock, S: BuildHasher> KeyedLimiter<K, C, S> {
    /// The clock.
    ///
    /// ```
    /// # use stripecount::{Clock, KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let lim = KeyedLimiter::<u8, _>::with_clock(5, Duration::from_secs(1), 1, clock.clone())?;
    /// clock.advance(Duration::from_secs(3));
    /// assert_eq!(lim.clock().now(), 3_000_000_000);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The epoch (slice number, of the shortest slice length) of time `now`.
    ///
    /// ```
    /// # use stripecount::{KeyedLimiter, ManualClock};
    /// # use std::time::Duration;
    /// let lim = KeyedLimiter::<u8, _>::with_clock(5, Duration::from_secs(1), 10, ManualClock::new())?;
    /// assert_eq!(lim.epoch_at(250_000_000), 2); // slices of 100 ms
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn epoch_at(&self, now: Timestamp) -> u64 {
        let now = now.as_nanos();
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

impl<K: 'static, C: Clock, S> fmt::Debug for KeyedLimiter<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.shared.cfg.len();
        let limits: Vec<u64> = (0..k).map(|i| self.quotas.default_of(i)).collect();
        let windows: Vec<(Duration, u64)> = (0..k)
            .map(|i| (self.windows[i], self.shared.cfg.level(i).slices))
            .collect();
        f.debug_struct("KeyedLimiter")
            .field("limits", &limits)
            .field("windows", &windows)
            .field("keys", &self.map.len())
            .field("flood", &self.flood)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + fmt::Debug>() {}
    is::<KeyedLimiter<String>>();
    is::<KeyedLimiter<u64, crate::ManualClock>>();
}
