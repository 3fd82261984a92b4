//! The builders of the per-key types: [`KeyedWindowsBuilder`] and
//! [`HotKeyDetectorBuilder`]. Each holds the spec given to `builder` and
//! the options (a clock, a hasher, a bound on the keys of each slice); the
//! spec is checked by `build`, with the errors of the type's `new`.

use super::hot::HotKeyDetector;
use super::windows::KeyedWindows;
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::{Key, KeyHasher};
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

/// Builds a [`KeyedWindows`] with a clock, a hasher or a bound on the keys
/// of each slice; made by [`KeyedWindows::builder`].
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{KeyedWindows, Timestamp};
/// use std::collections::hash_map::RandomState;
/// use std::time::Duration;
///
/// let w = KeyedWindows::builder(Duration::from_secs(1), 10)
///     .clock(ManualClock::new())
///     .hasher(RandomState::new())
///     .max_keys(1)
///     .build()?;
/// assert!(w.add_at(&1u64, Timestamp::ZERO, 1));
/// assert!(!w.add_at(&2u64, Timestamp::ZERO, 1)); // the slice holds 1 key
/// assert_eq!(w.untracked_adds(), 1);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// # Other clocks
/// [`KeyedWindows::builder`](crate::KeyedWindows::builder) makes a builder on the monotonic clock
/// and [`clock`](KeyedWindowsBuilder::clock) changes its clock (and type). For a type named with
/// another clock (`KeyedWindows::<u64, ManualClock>`), or code generic over the clock, start from
/// [`KeyedWindows::builder_with_clock`](crate::KeyedWindows::builder_with_clock): `builder` itself
/// is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedWindowsBuilder<K, C: Clock = MonotonicClock, S = RandomState> {
    window: Duration,
    slices: usize,
    clock: C,
    hasher: S,
    max_keys: usize,
    key: PhantomData<fn() -> K>,
}

impl<K: Key> KeyedWindowsBuilder<K> {
    /// The builder of windows of `window` in `slices` slices, on the
    /// monotonic clock, hashing with [`RandomState`], with no bound on keys.
    pub(super) fn new(window: Duration, slices: usize) -> Self {
        KeyedWindowsBuilder {
            window,
            slices,
            clock: MonotonicClock::new(),
            hasher: RandomState::new(),
            max_keys: usize::MAX,
            key: PhantomData,
        }
    }
}

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindowsBuilder<K, C, S> {
    /// The clock the windows read in their methods without `_at` (the
    /// monotonic clock unless given).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedWindowsBuilder<K, C2, S> {
        KeyedWindowsBuilder {
            window: self.window,
            slices: self.slices,
            clock,
            hasher: self.hasher,
            max_keys: self.max_keys,
            key: PhantomData,
        }
    }

    /// The hasher of every slice's map ([`RandomState`] unless given: see
    /// [`KeyedWindows`] for why).
    pub fn hasher<S2: KeyHasher>(self, hasher: S2) -> KeyedWindowsBuilder<K, C, S2> {
        KeyedWindowsBuilder {
            window: self.window,
            slices: self.slices,
            clock: self.clock,
            hasher,
            max_keys: self.max_keys,
            key: PhantomData,
        }
    }

    /// Holds at most `max_keys` keys in each slice (no bound unless given):
    /// an add for a key its slice does not hold yet, when the slice already
    /// holds `max_keys`, is not tracked (it returns `false` and is counted
    /// by [`untracked_adds`](KeyedWindows::untracked_adds)). So the whole
    /// structure holds at most `slices * max_keys` entries. A `max_keys` of
    /// 0 tracks nothing.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The windows. Errors as [`KeyedWindows::new`].
    pub fn build(self) -> Result<KeyedWindows<K, C, S>, ConfigError> {
        KeyedWindows::from_parts(
            self.window,
            self.slices,
            self.clock,
            self.hasher,
            self.max_keys,
        )
    }
}

impl<K, C: Clock + Clone, S: Clone> Clone for KeyedWindowsBuilder<K, C, S> {
    fn clone(&self) -> Self {
        KeyedWindowsBuilder {
            window: self.window,
            slices: self.slices,
            clock: self.clock.clone(),
            hasher: self.hasher.clone(),
            max_keys: self.max_keys,
            key: PhantomData,
        }
    }
}

impl<K, C: Clock, S> fmt::Debug for KeyedWindowsBuilder<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedWindowsBuilder")
            .field("window", &self.window)
            .field("slices", &self.slices)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

/// Builds a [`HotKeyDetector`] with a clock, a hasher or a bound on the
/// keys of each slice; made by [`HotKeyDetector::builder`].
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{HotKeyDetector, Timestamp};
/// use std::time::Duration;
///
/// let d = HotKeyDetector::builder(Duration::from_secs(1), 10, 2)
///     .clock(ManualClock::new())
///     .max_keys(1_000)
///     .build()?;
/// assert!(d.add_at(&"k", Timestamp::ZERO, 2)); // reached 2: newly hot
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
///
/// # Other clocks
/// [`HotKeyDetector::builder`](crate::HotKeyDetector::builder) makes a builder on the monotonic
/// clock and [`clock`](HotKeyDetectorBuilder::clock) changes its clock (and type). For a type named
/// with another clock (`HotKeyDetector::<u64, ManualClock>`), or code generic over the clock, start
/// from [`HotKeyDetector::builder_with_clock`](crate::HotKeyDetector::builder_with_clock):
/// `builder` itself is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build` is called"]
pub struct HotKeyDetectorBuilder<K, C: Clock = MonotonicClock, S = RandomState> {
    windows: KeyedWindowsBuilder<K, C, S>,
    threshold: u64,
}

impl<K: Key> HotKeyDetectorBuilder<K> {
    /// The builder of a detector of `threshold` over windows of `window` in
    /// `slices` slices, with the defaults of [`KeyedWindowsBuilder`].
    pub(super) fn new(window: Duration, slices: usize, threshold: u64) -> Self {
        HotKeyDetectorBuilder {
            windows: KeyedWindowsBuilder::new(window, slices),
            threshold,
        }
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetectorBuilder<K, C, S> {
    /// The clock the detector reads in its methods without `_at` (the
    /// monotonic clock unless given).
    pub fn clock<C2: Clock>(self, clock: C2) -> HotKeyDetectorBuilder<K, C2, S> {
        HotKeyDetectorBuilder {
            windows: self.windows.clock(clock),
            threshold: self.threshold,
        }
    }

    /// The hasher of the windows' maps and of the hot state's (see
    /// [`KeyedWindowsBuilder::hasher`]).
    pub fn hasher<S2: KeyHasher>(self, hasher: S2) -> HotKeyDetectorBuilder<K, C, S2> {
        HotKeyDetectorBuilder {
            windows: self.windows.hasher(hasher),
            threshold: self.threshold,
        }
    }

    /// Holds at most `max_keys` keys in each slice (see
    /// [`KeyedWindowsBuilder::max_keys`]); an add that is not tracked
    /// returns `false`.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.windows = self.windows.max_keys(max_keys);
        self
    }

    /// The detector. Errors as [`HotKeyDetector::new`].
    pub fn build(self) -> Result<HotKeyDetector<K, C, S>, ConfigError> {
        HotKeyDetector::from_windows(self.windows.build()?, self.threshold)
    }
}

impl<K, C: Clock + Clone, S: Clone> Clone for HotKeyDetectorBuilder<K, C, S> {
    fn clone(&self) -> Self {
        HotKeyDetectorBuilder {
            windows: self.windows.clone(),
            threshold: self.threshold,
        }
    }
}

impl<K, C: Clock, S> fmt::Debug for HotKeyDetectorBuilder<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeyDetectorBuilder")
            .field("threshold", &self.threshold)
            .field("windows", &self.windows)
            .finish()
    }
}
