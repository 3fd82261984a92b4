//! [`HotKeySketch`]: the hot-key detector in memory fixed at construction,
//! whatever the number of distinct keys.
//!
//! # Design
//! A [`Doorkeeper`] (`doorkeeper.rs`: a quarter of the memory, at most
//! 512 KiB a shard, one shard a core up to 8) in front of
//! an exact [`HotKeyDetector`] whose slices each hold at most `max_keys`
//! keys (the rest of the memory). An add passes the doorkeeper once the
//! key's adds in its slice reach the *admission level* `a`; only admitted
//! adds reach the exact detector, which applies the hot rule to them. The
//! long tail (keys seen a few times a slice) stays in the doorkeeper's
//! words and costs no entry; a key that reached `a` in one slice is
//! admitted from its first add in the next (carry-over), so a key that
//! stays hot is counted exactly.
//!
//! # Invariants
//! - Every admitted add is counted exactly as [`HotKeyDetector`] counts
//!   it (or not tracked, when its slice's map is full, and counted in
//!   `untracked_adds`); every other add is counted in `filtered_adds` and
//!   nowhere else.
//! - The adds of one key in one slice that are not admitted total at most
//!   `a - 1` a doorkeeper shard (`doorkeeper.rs`, "The guarantee").
//! - Memory: the doorkeeper's words are allocated once; the exact
//!   detector holds at most `max_keys` keys a slice, and hot state for at
//!   most `max_keys` keys (`HotKeyDetector::bound_homes`), sized from the
//!   memory given (`max_keys_for`), checked by the tests with keys that
//!   never repeat (and turn heavy in every slice).
//!
//! # What a reported count means
//! See [`HotKeySketch`]'s docs ("Error bound").

use super::doorkeeper::Doorkeeper;
use super::home::Home;
use super::hot::{HotKeyDetector, HOMES_PER_SHARD};
pub use super::sketch_builder::HotKeySketchBuilder;
use super::slice_map::{self, SliceMap};
use super::windows::KeyedWindows;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::counter::StripedCounter;
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::{Key, KeyHasher, KeyRef};
use crate::map::Map;
use crate::reclaim::Guard;
use crate::sync::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

/// Keys whose count in the last window crossed a threshold, found in
/// memory fixed at construction: the fixed-memory twin of
/// [`HotKeyDetector`], for key spaces too large to hold (cache keys, URLs,
/// object ids).
///
/// The methods are [`HotKeyDetector`]'s, with the same hot rule (a report
/// once per crossing, and cooling), applied to the *admitted* adds: an add
/// is admitted once the key's adds in its slice reach the admission level
/// `a` (by default `h / 16` for `h = ceil(threshold / slices)`, but at least
/// 16 or `h / 2`, at most 255), and
/// from its first add in a slice after one in which it reached `a`.
///
/// # Error bound
/// A reported count (a window sum of [`sum_at`](Self::sum_at),
/// [`top_at`](Self::top_at), [`became_hot_at`](Self::became_hot_at)) is
/// the sum of the key's admitted adds in the window, so:
/// - it never exceeds the key's true window count: a key reported hot
///   truly reached the threshold (no false positive);
/// - it falls short of the true count only in slices of the window in
///   which the key was not admitted from its first add (the slice where it
///   rose, or one after a slice below `a`), by at most `a - 1` in each for
///   each doorkeeper shard that counted its adds (a thread counts in one
///   shard; there is one shard a core, at most 8): in all at most
///   [`undercount_bound`](Self::undercount_bound), `slices * shards * (a -
///   1)`, less than the threshold on one thread with the default level, so
///   a key at twice the threshold is always reported (about `threshold /
///   16` for thresholds of 256 a slice or more); none for a key that stayed
///   at `a` or more in every slice of the window;
/// - plus any adds that found their slice's map full (counted by
///   [`untracked_adds`](Self::untracked_adds): zero when the memory holds
///   every key that reaches `a` in a slice).
///
/// A key is judged by the hot rule once one of its slices reaches
/// `ceil(threshold / slices)`; the memory holds that state for as many
/// keys as a slice holds. Past that (many keys turning heavy within two
/// windows, as with a threshold below the slices), an add that makes a
/// key heavy is counted but not judged
/// ([`unjudged_adds`](Self::unjudged_adds)), and its key is not reported.
///
/// These hold under any concurrency (the doorkeeper's gate is one CAS,
/// model checked with loom). The structure is not mergeable as it stands
/// (two nodes' exact parts hold different keys); summing two nodes'
/// reported counts gives a count with the sum of their bounds.
///
/// # Keys from clients
/// Hashed as [`KeyedWindows`] hashes (a seed per instance, so keys cannot
/// be chosen to share a doorkeeper word or a probe sequence). A sender can
/// still crowd the exact part: a key it sends `a` times in a slice takes
/// one of the slice's places, and once they are taken the adds of keys new
/// to the slice are not tracked ([`untracked_adds`](Self::untracked_adds)).
/// Memory and the error bound hold whatever is sent: no count is ever
/// reported above the truth.
///
/// # Memory
/// [`memory_bytes`](Self::memory_bytes) never exceeds the memory given,
/// however many distinct keys arrive. A key's own heap data (a `String`'s
/// buffer) is not counted: at most `slices * max_keys` keys are held.
/// Too little memory for the stream fails quietly: keys of a few adds
/// fill the exact part and the adds of keys at the threshold go
/// untracked. Size it with [`memory_for`](Self::memory_for) (the memory a
/// rate of adds needs), or state the rate with
/// [`adds_per_second`](HotKeySketchBuilder::adds_per_second) and `build`
/// refuses less; watch [`untracked_adds`](Self::untracked_adds) (exported
/// by `prometheus::ScrapeCollector::hot_key_sketch` with the feature
/// `prometheus`).
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{HotKeySketch, Timestamp};
/// use std::time::Duration;
///
/// // Keys seen 1,000 times in 10 s, in 8 MiB whatever the key space.
/// let d = HotKeySketch::<u64, _>::builder(Duration::from_secs(10), 10, 1_000)
///     .memory(8 << 20)
///     .clock(ManualClock::new())
///     .build()?;
/// assert_eq!(d.admission_level(), 16);
/// let t = Timestamp::ZERO;
/// for id in 0..100_000u64 {
///     d.add_at(&id, t, 1); // the long tail: kept back
/// }
/// // At most a - 1 = 15 of a key's adds in a slice are kept back.
/// let became = (0..1_015).filter(|_| d.add_at(&7, t, 1)).count();
/// assert_eq!(became, 1); // newly hot once
/// assert!((1_000..=1_015).contains(&d.sum_at(&7, t)));
/// assert!(d.memory_bytes() <= 8 << 20);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct HotKeySketch<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    pub(super) door: Doorkeeper,
    pub(super) exact: HotKeyDetector<K, C, S>,
    pub(super) filtered: StripedCounter,
    pub(super) memory: usize,
    pub(super) max_keys: usize,
}

impl<K: Key> HotKeySketch<K> {
    /// A detector of keys whose sum over windows of `window` in `slices`
    /// slices reaches `threshold`, in at most `memory` bytes, on the
    /// monotonic clock. Errors as [`HotKeyDetector::new`], and on a memory
    /// too small to hold the doorkeeper and a few keys a slice.
    ///
    /// ```
    /// use stripecount::HotKeySketch;
    /// use std::time::Duration;
    ///
    /// let d = HotKeySketch::<String>::new(Duration::from_secs(10), 10, 100, 4 << 20)?;
    /// assert!(!d.add("k", 99));
    /// assert!(HotKeySketch::<u64>::new(Duration::from_secs(10), 10, 100, 1_000).is_err());
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn new(
        window: Duration,
        slices: usize,
        threshold: u64,
        memory: usize,
    ) -> Result<Self, ConfigError> {
        Self::builder(window, slices, threshold)
            .memory(memory)
            .build()
    }

    /// The builder of a detector (see [`new`](Self::new)): a clock, a
    /// hasher, the memory (8 MiB unless given), the admission level.
    pub fn builder(window: Duration, slices: usize, threshold: u64) -> HotKeySketchBuilder<K> {
        HotKeySketchBuilder::new(window, slices, threshold)
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeySketch<K, C, S> {
    /// Adds `n` to `key` now; `true` if this add made the key hot.
    #[inline]
    pub fn add<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.add_at(key, self.exact.windows.clock.now(), n)
    }

    /// Adds `n` to `key` at `now`; `true` if this add made the key hot.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp, n: u64) -> bool {
        self.became_hot_at(key, now, n).is_some()
    }

    /// As [`add`](Self::add), returning the key's reported window sum after
    /// this add when this add made the key hot.
    #[inline]
    pub fn became_hot<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> Option<u64> {
        self.became_hot_at(key, self.exact.windows.clock.now(), n)
    }

    /// As [`add_at`](Self::add_at), returning the key's reported window sum
    /// after this add when this add made the key hot. An add of 0 and an
    /// add older than the window of the newest slice return `None` and
    /// count nowhere.
    #[inline]
    pub fn became_hot_at<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        now: Timestamp,
        n: u64,
    ) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let now = now.as_nanos();
        let w = &self.exact.windows;
        let e = w.epoch(now);
        if w.ring.too_old(e) {
            return None;
        }
        let hash = w.ring.hash(key);
        if !self.door.admit(hash, e, n) {
            self.filtered.add(n);
            return None;
        }
        self.exact.became_hot_in(hash, key, now, n)
    }

    /// The rest of an add of `n > 0` at epoch `e` once its key is hashed and
    /// its map found (`at`, under `guard`): a batch's step (`batch.rs`).
    #[inline(always)]
    pub(super) fn add_hashed<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        e: u64,
        at: (u64, Option<&'g SliceMap<K, S>>),
        n: u64,
        guard: &'g Guard<'_>,
    ) -> Option<u64> {
        if self.exact.windows.ring.too_old(e) {
            return None;
        }
        if !self.door.admit(hash, e, n) {
            self.filtered.add(n);
            return None;
        }
        self.exact.became_hot_with(hash, key, at, n, guard)
    }

    /// The key's reported window sum now (its admitted adds).
    pub fn sum<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> u64 {
        self.exact.windows.sum(key)
    }

    /// The key's reported window sum at `now` (its admitted adds).
    pub fn sum_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> u64 {
        self.exact.windows.sum_at(key, now)
    }

    /// The `k` keys with the largest reported sums now (see
    /// [`KeyedWindows::top_at`]).
    pub fn top(&self, k: usize) -> Vec<(K, u64)> {
        self.exact.windows.top(k)
    }

    /// The `k` keys with the largest reported sums at `now`, largest first.
    pub fn top_at(&self, now: Timestamp, k: usize) -> Vec<(K, u64)> {
        self.exact.windows.top_at(now, k)
    }

    /// Whether `key` is hot now (see [`HotKeyDetector::is_hot_at`]).
    pub fn is_hot<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.exact.is_hot(key)
    }

    /// Whether `key` is hot by the rule and its reported sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: Timestamp) -> bool {
        self.exact.is_hot_at(key, now)
    }

    /// Every key that is hot now.
    pub fn hot_keys(&self) -> Vec<K> {
        self.exact.hot_keys()
    }

    /// Every key that [`is_hot_at`](Self::is_hot_at) `now`.
    pub fn hot_keys_at(&self, now: Timestamp) -> Vec<K> {
        self.exact.hot_keys_at(now)
    }

    /// Drops the slices that left the window now (see
    /// [`HotKeyDetector::evict_idle_at`]).
    pub fn evict_idle(&self) -> usize {
        self.exact.evict_idle()
    }

    /// Drops the slices that left the window at `now` and the hot state of
    /// keys with no heavy slice left; returns the slice entries dropped.
    pub fn evict_idle_at(&self, now: Timestamp) -> usize {
        self.exact.evict_idle_at(now)
    }

    /// The threshold.
    pub fn threshold(&self) -> u64 {
        self.exact.threshold()
    }

    /// The admission level `a` (see the type's docs).
    pub fn admission_level(&self) -> u64 {
        self.door.level()
    }

    /// The most a reported window count can fall short of the key's true
    /// count, untracked adds aside: `slices * shards * (a - 1)`, where
    /// `shards` is the doorkeeper's (one a core, at most 8; a key added by
    /// one thread only falls short by at most `slices * (a - 1)`).
    pub fn undercount_bound(&self) -> u64 {
        let slices = self.exact.windows.slices() as u64;
        slices * self.door.shards() as u64 * (self.door.level() - 1)
    }

    /// The most keys each slice holds exactly.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Adds kept back by the doorkeeper (counted nowhere else).
    pub fn filtered_adds(&self) -> u64 {
        self.filtered.sum()
    }

    /// Admitted adds that were not tracked because their slice was full.
    pub fn untracked_adds(&self) -> u64 {
        self.exact.windows.untracked_adds()
    }

    /// Adds that made their key heavy in a slice (a count of
    /// `ceil(threshold / slices)`) while the hot state of as many keys as a
    /// slice holds was taken: counted, but not judged by the hot rule (the
    /// key is not reported until an add of it finds room). Zero unless
    /// more keys than that turn heavy within about two windows.
    pub fn unjudged_adds(&self) -> u64 {
        self.exact.homeless.load(Ordering::Relaxed)
    }

    /// The memory given at construction: [`memory_bytes`](Self::memory_bytes)
    /// never exceeds it.
    pub fn memory_limit(&self) -> usize {
        self.memory
    }

    /// Bytes held now: the doorkeeper's words, the exact part's tables
    /// (see [`KeyedWindows::memory_bytes`]) and its hot state.
    pub fn memory_bytes(&self) -> usize {
        self.door.bytes()
            + self.exact.windows.memory_bytes()
            + self.exact.homes.memory_bytes(&self.exact.home_cfg)
    }

    /// The exact part's per-key windows (of admitted adds).
    pub fn windows(&self) -> &KeyedWindows<K, C, S> {
        &self.exact.windows
    }
}

impl<K: 'static, C: Clock, S> fmt::Debug for HotKeySketch<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeySketch")
            .field("memory", &self.memory)
            .field("door", &self.door)
            .field("max_keys", &self.max_keys)
            .field("exact", &self.exact)
            .finish()
    }
}

/// The doorkeeper's shards: one a core, rounded up to a power of two, at
/// most `MAX_SHARDS`.
pub(super) fn sketch_shards() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.next_power_of_two().min(MAX_SHARDS)
}

/// The default admission level for `h = ceil(threshold / slices)`:
/// `ceil(h / 16)`, but at least 16 (or `ceil(h / 2)` when that is less),
/// at most 255. Below about 16, the long tail sharing a shard's counters
/// raises them to the level within a slice and admits keys of a few adds
/// until the exact part is full (measured: threshold 500 in 10 slices,
/// level 4, Zipf 0.8 over 10M keys: 16M of 20M adds not tracked, recall
/// 0.58; level 16: none, exact once a key is steady). A level above `h`
/// would never admit a key steadily at the threshold.
pub(super) fn default_level(h: u64) -> u64 {
    h.div_ceil(16).max(16.min(h.div_ceil(2))).clamp(1, 255)
}

/// The fewest keys a slice must hold for a sketch to be built.
pub(super) const MIN_KEYS: usize = 16;

/// Keys a slice may hold in `bytes` of exact state: each held key costs a
/// slot (the key and its 24-byte entry) in each of the `slices` live maps,
/// the map being filled and the cleared tables kept for the next slices,
/// counted at 1.5 slots (tables are between half and seven eighths full;
/// measured 1.2-1.5 on the benchmark's streams, and the tests fill every
/// slice with keys that never repeat and check the limit); and hot state
/// (a home) for as many keys (`HotKeyDetector::bound_homes`). Besides the
/// keys, each of those maps and the home map hold their shards' fixed
/// parts ([`exact_bytes`]).
pub(super) fn max_keys_for<K, S>(bytes: usize, slices: usize) -> usize
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher,
{
    let first = bytes / key_bytes::<K>(slices);
    // The fixed parts grow with the keys (more shards): those of `first`
    // keys, at least those of fewer, leave room for the keys that fit.
    let fixed = exact_bytes::<K, S>(first, slices) - first * key_bytes::<K>(slices);
    bytes.saturating_sub(fixed) / key_bytes::<K>(slices)
}

/// The exact part's bytes for `keys` keys a slice: `key_bytes` each, and
/// the fixed parts of its `slices + 2` slice maps and of its home map.
pub(super) fn exact_bytes<K, S>(keys: usize, slices: usize) -> usize
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher,
{
    let homes = std::mem::size_of::<Map<K, Home, S>>()
        + keys.div_ceil(HOMES_PER_SHARD).max(1).next_power_of_two()
            * Map::<K, Home, S>::shard_bytes();
    keys.saturating_mul(key_bytes::<K>(slices))
        .saturating_add((slices + 2).saturating_mul(slice_map::fixed_bytes::<K, S>(keys)))
        .saturating_add(homes)
}

/// The exact part's bytes a key costs (see `max_keys_for`).
pub(super) fn key_bytes<K>(slices: usize) -> usize {
    let slot = std::mem::size_of::<K>() + 24 + 1;
    3 * slot * (slices + 2) / 2 + 2 * (std::mem::size_of::<K>() + 17)
}

/// The most bytes of one doorkeeper shard: a thread's shard is read on
/// every add and should mostly stay in its core's L2 cache, yet hold a
/// slice's long tail without raising counters to the level by sharing.
/// Measured (one thread, 20M adds, IMPLEMENTATION.md): one 2 MiB array,
/// 8-12 M adds/s on Zipf 1.0 over 10M keys; 256 KiB, 15-19 M/s, but on Zipf
/// 0.8 it admitted keys of a few adds a slice by sharing until the exact
/// part was full (hot keys' adds not counted, errors to 9%); 512 KiB
/// neither.
pub(super) const SHARD_MAX: usize = 512 << 10;

/// The most doorkeeper shards (one a core up to it; `doorkeeper.rs`,
/// "Shards").
const MAX_SHARDS: usize = 8;
