//! [`HotKeyDetector`]: keys whose window sum crossed a threshold, each
//! crossing reported by exactly one add.
//!
//! # The step after an add ([`hot_step`])
//! 1. **Filter.** An add counted in the key's head learns the head's count
//!    `after_head` from its own CAS. Unless the key is striped or a move is
//!    filling its slot, `after_head + up` (with `up` read by an RMW, see
//!    `state.rs`) bounds the key's window from above with no read of its
//!    out-of-line window: below the threshold, the add cannot have made the
//!    key hot, and the step ends there. This is the path of nearly every
//!    add on a key far from its threshold.
//! 2. **Already hot.** Otherwise read the key's hot word (in its `Ext`,
//!    installed if needed): hot at this epoch or later, the add changes
//!    nothing (within an epoch a window only grows).
//! 3. **Exact.** Otherwise an RMW on the hot word (`hot_sync`: of racing
//!    adds, the later one's read sees the earlier one's write), the exact
//!    window sum `after` (fold marks), `before = after - n`, and the rule's
//!    transition as one CAS of the hot word (`ext::decide`): of racing adds
//!    across one crossing exactly one CAS reports.
//!
//! # What can wait
//! Step 3 reads the key's exact window, which waits while a count is in
//! flight between two cells of the key (another add folding the key's
//! newest slice into its window, once per slice per key) or while the map
//! is moving the key to a bigger table (step 2 first waits for the move to
//! finish, so the hot word it reads is the moved one). Both are a few
//! instructions long; the wait spins, then yields, in case the other
//! thread was descheduled. Only adds near the threshold take step 3, and
//! only until the key is hot at their epoch. Deciding on a partial view
//! instead would change which add reports a crossing.

use super::key::{Key, KeyRef};
use super::reclaim::Guard;
use super::state::{Cfg, KeyState, Outcome, Read};
use super::windows::KeyedWindows;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::time::Duration;

/// The key moved to another table while its hot step read it: the caller
/// looks it up again and runs [`exact_step`] on its new state.
pub(super) struct Moved;

/// The hot rule's step after an add landed (see the module docs):
/// `Ok(Some(after))` if this add made the key hot.
#[inline]
pub(super) fn hot_step(
    st: &KeyState,
    o: Outcome,
    e: u64,
    n: u64,
    threshold: u64,
    cfg: &Cfg,
) -> Result<Option<u64>, Moved> {
    match o {
        Outcome::Head(after_head) => {
            if !st.is_striped()
                && !st.is_incoming()
                && after_head.saturating_add(st.up_synced()) < threshold
            {
                return Ok(None);
            }
        }
        Outcome::Elsewhere => {}
        Outcome::TooOld | Outcome::Retry => return Ok(None),
    }
    exact_step(st, e, n, threshold, cfg)
}

/// Steps 2 and 3 of the module docs.
#[cold]
pub(super) fn exact_step(
    st: &KeyState,
    e: u64,
    n: u64,
    threshold: u64,
    cfg: &Cfg,
) -> Result<Option<u64>, Moved> {
    st.wait_incoming();
    let Some(x) = st.ensure_ext(cfg) else {
        return Ok(None); // evicted meanwhile: its adds were older than the window
    };
    let (hot, he) = x.hot_state();
    if hot && he >= e {
        return Ok(None);
    }
    x.hot_sync();
    let after = match st.sum_tightening(e, cfg) {
        Read::Sum(s) => s,
        Read::Moved => return Err(Moved),
    };
    let before = after.saturating_sub(n);
    Ok(x.hot_transition(e, before, after, threshold)
        .then_some(after))
}

/// One counted add, as the hot step sees it: `n` at epoch `e`, against
/// `threshold`.
#[derive(Clone, Copy)]
pub(super) struct HotAdd {
    pub(super) e: u64,
    pub(super) n: u64,
    pub(super) threshold: u64,
}

/// [`hot_step`], following the key if it moves: runs the exact step again
/// on the key's new state (the add itself was counted before the move, and
/// the move carried it).
#[inline]
pub(super) fn hot_step_following<K: Key, C: Clock, S: BuildHasher>(
    w: &KeyedWindows<K, C, S>,
    hash: u64,
    is: impl Fn(&K) -> bool,
    st: &KeyState,
    o: Outcome,
    add: HotAdd,
) -> Option<u64> {
    let HotAdd { e, n, threshold } = add;
    let mut r = hot_step(st, o, e, n, threshold, &w.cfg);
    while r.is_err() {
        let guard = Guard::pin(w.map.graveyard());
        let st = w.map.get(hash, &is, &guard)?;
        r = exact_step(st, e, n, threshold, &w.cfg);
    }
    r.ok().flatten()
}

/// Whether a key's state is hot by the rule with a window sum at epoch `e`
/// of at least `threshold`.
pub(super) fn is_hot(st: &KeyState, sum: u64, threshold: u64) -> bool {
    sum >= threshold && st.ext().is_some_and(|x| x.hot_state().0)
}

/// Keys whose count in the last window crossed a threshold, reported once
/// per crossing.
///
/// # The hot rule
/// On an add of `n` at `t`, let `before` be the key's window sum at `t`
/// without this add. If the key is hot and `before < threshold`, it cools.
/// Then, if it is not hot and `before + n >= threshold`, it becomes hot and
/// the add returns `true`. [`is_hot_at`](Self::is_hot_at) and
/// [`hot_keys_at`](Self::hot_keys_at) report keys that are hot by this rule
/// and whose window sum at `now` is still at least the threshold.
///
/// # What `before` means under concurrency
/// Racing adds see each other through one RMW of the key's hot word before
/// they read the window, so the last of them sees the whole crossing; the
/// hot transition is one CAS of that word, which records the epoch of the
/// latest add that saw the key at or above the threshold. Within one epoch
/// the window only grows, so an add whose `before` is below the threshold
/// at an epoch where the key was already seen above it is a stale view and
/// changes nothing. Consequences:
/// - among adds racing across one crossing, exactly one returns `true`
///   (model-checked with loom);
/// - at most one add per key per epoch returns `true`;
/// - with times that never go backwards, a single thread gets exactly the
///   rule above.
///
/// # Cost
/// An add on a key far from the threshold costs what a
/// [`KeyedWindows::add_at`] costs plus one RMW on the key's own slot: the
/// key's state carries an upper bound of its window, so the add reads
/// nothing else. Once a key is hot at the add's epoch, an add reads one
/// more word (its hot word) and nothing else.
///
/// ```
/// use stripecount::{HotKeyDetector, ManualClock};
/// use std::time::Duration;
///
/// let d = HotKeyDetector::with_clock(Duration::from_secs(10), 10, 3, ManualClock::new())?;
/// assert!(!d.add_at(&"k", 0, 2));
/// assert!(d.add_at(&"k", 0, 1)); // 3 reaches the threshold: newly hot
/// assert!(!d.add_at(&"k", 0, 1)); // already hot
/// assert!(d.is_hot_at(&"k", 0));
/// assert_eq!(d.hot_keys_at(0), vec!["k"]);
/// assert!(!d.is_hot_at(&"k", 10_000_000_000)); // its adds left the window
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct HotKeyDetector<K: 'static, C: Clock = MonotonicClock, S = RandomState> {
    pub(super) windows: KeyedWindows<K, C, S>,
    pub(super) threshold: u64,
}

impl<K: Key> HotKeyDetector<K> {
    /// A detector over windows of `window` in `slices` slices, on the
    /// monotonic clock. Errors as [`KeyedWindows::new`], and a zero
    /// threshold.
    pub fn new(window: Duration, slices: usize, threshold: u64) -> Result<Self, ConfigError> {
        Self::with_clock(window, slices, threshold, MonotonicClock)
    }
}

impl<K: Key, C: Clock> HotKeyDetector<K, C> {
    /// A detector on the given clock (see [`HotKeyDetector::new`]).
    pub fn with_clock(
        window: Duration,
        slices: usize,
        threshold: u64,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::over(KeyedWindows::with_clock(window, slices, clock)?, threshold)
    }
}

impl<K: Key, C: Clock, S: BuildHasher> HotKeyDetector<K, C, S> {
    /// A detector over the given (empty) per-key windows, e.g. built
    /// with [`KeyedWindows::with_hasher`]. Errors on a zero threshold.
    pub fn over(windows: KeyedWindows<K, C, S>, threshold: u64) -> Result<Self, ConfigError> {
        if threshold == 0 {
            return Err(ConfigError::Invalid("the hot threshold must be at least 1"));
        }
        Ok(HotKeyDetector { windows, threshold })
    }

    /// Bounds the keys held (see [`KeyedWindows::with_max_keys`]); an add
    /// that is not tracked returns `false`.
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.windows = self.windows.with_max_keys(max_keys);
        self
    }

    /// See [`KeyedWindows::with_auto_evict`].
    pub fn with_auto_evict(mut self, on: bool) -> Self {
        self.windows = self.windows.with_auto_evict(on);
        self
    }

    /// The threshold.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The per-key windows (sums, top-k, eviction, memory).
    pub fn windows(&self) -> &KeyedWindows<K, C, S> {
        &self.windows
    }

    /// Adds `n` to `key` now; `true` if this add made the key hot.
    #[inline]
    pub fn add<Q: KeyRef<K> + ?Sized>(&self, key: &Q, n: u64) -> bool {
        self.add_at(key, self.windows.clock.now(), n)
    }

    /// Adds `n` to `key` at `now`; `true` if this add made the key hot.
    /// An add of 0, an add older than the ring and an untracked add return
    /// `false`.
    #[inline]
    pub fn add_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> bool {
        self.became_hot_at(key, now, n).is_some()
    }

    /// As [`add_at`](Self::add_at), returning the key's window sum after
    /// this add (as the add saw it) when this add made the key hot.
    #[inline]
    pub fn became_hot_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64, n: u64) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let w = &self.windows;
        let e = w.epoch(now);
        let guard = Guard::pin(w.map.graveyard());
        let hash = w.map.hash(key);
        let (st, o) = w.add_in(hash, key, e, n, &guard)?;
        hot_step_following(
            w,
            hash,
            |k| key.is(k),
            st,
            o,
            HotAdd {
                e,
                n,
                threshold: self.threshold,
            },
        )
    }

    /// Whether `key` is hot by the rule and its window sum at `now` is at
    /// least the threshold.
    pub fn is_hot_at<Q: KeyRef<K> + ?Sized>(&self, key: &Q, now: u64) -> bool {
        let w = &self.windows;
        let guard = Guard::pin(w.map.graveyard());
        let sum = w.read_at(key, w.epoch(now));
        sum >= self.threshold
            && w.map
                .get(w.map.hash(key), |k| key.is(k), &guard)
                .is_some_and(|st| is_hot(st, sum, self.threshold))
    }

    /// Whether `key` is hot now.
    pub fn is_hot<Q: KeyRef<K> + ?Sized>(&self, key: &Q) -> bool {
        self.is_hot_at(key, self.windows.clock.now())
    }

    /// Every key that [`is_hot_at`](Self::is_hot_at) `now` (in unspecified
    /// order; a scan one shard at a time).
    pub fn hot_keys_at(&self, now: u64) -> Vec<K> {
        let mut out = Vec::new();
        self.windows
            .for_each_state(self.windows.epoch(now), |key, sum, st| {
                if is_hot(st, sum, self.threshold) {
                    out.push(key.clone());
                }
            });
        out
    }
}

impl<K: 'static, C: Clock, S> fmt::Debug for HotKeyDetector<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeyDetector")
            .field("threshold", &self.threshold)
            .field("windows", &self.windows)
            .finish()
    }
}
