//! [`HotKeySketchBuilder`]: the options of a [`HotKeySketch`] (clock,
//! hasher, memory, admission level, the stream's rate), checked by its
//! `build`, which sizes the doorkeeper and the exact part from the memory
//! (`sketch.rs`) and, given a rate, refuses a memory below what it needs
//! (`sizing.rs`).

use super::builder::HotKeyDetectorBuilder;
use super::doorkeeper::Doorkeeper;
use super::hot::HotKeyDetector;
use super::sketch::{
    default_level, max_keys_for, sketch_shards, HotKeySketch, MIN_KEYS, SHARD_MAX,
};
use crate::clock::{Clock, MonotonicClock};
use crate::counter::StripedCounter;
use crate::error::ConfigError;
use crate::hash::RandomState;
use crate::key::{Key, KeyHasher};
use std::fmt;
use std::time::Duration;

/// Builds a [`HotKeySketch`]; made by [`HotKeySketch::builder`].
///
/// # Other clocks
/// [`HotKeySketch::builder`](crate::HotKeySketch::builder) makes a builder on the monotonic clock
/// and [`clock`](HotKeySketchBuilder::clock) changes its clock (and type). For a type named with
/// another clock (`HotKeySketch::<u64, ManualClock>`), or code generic over the clock, start from
/// [`HotKeySketch::builder_with_clock`](crate::HotKeySketch::builder_with_clock): `builder` itself
/// is defined on the default-clock type only.
#[must_use = "a builder does nothing until `build` is called"]
pub struct HotKeySketchBuilder<K, C: Clock = MonotonicClock, S = RandomState> {
    exact: HotKeyDetectorBuilder<K, C, S>,
    window: Duration,
    slices: usize,
    threshold: u64,
    memory: Option<usize>,
    level: Option<u64>,
    /// The stream's adds a second, if given (`sizing.rs`).
    pub(super) rate: Option<u64>,
}

impl<K, C: Clock, S> HotKeySketch<K, C, S> {
    /// The least memory a sketch is built with (32 KiB): the exact part's
    /// smallest tables and the step they grow by overshot budgets below it
    /// (a sketch given 22-31 KiB held up to 38 KiB after adds).
    pub const MIN_MEMORY: usize = 32 << 10;
}
impl<K: Key> HotKeySketchBuilder<K> {
    /// The builder of [`HotKeySketch::builder`].
    pub(super) fn new(window: Duration, slices: usize, threshold: u64) -> Self {
        HotKeySketchBuilder {
            exact: HotKeyDetector::builder(window, slices, threshold),
            window,
            slices,
            threshold,
            memory: None,
            level: None,
            rate: None,
        }
    }
}

impl<K: Key, C: Clock> HotKeySketch<K, C> {
    /// A builder on `clock`: [`HotKeySketch::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](HotKeySketchBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::HotKeySketch;
    /// use std::time::Duration;
    ///
    /// let d = HotKeySketch::<u64, ManualClock>::builder_with_clock(
    ///     Duration::from_secs(10),
    ///     10,
    ///     1_000,
    ///     ManualClock::new(),
    /// )
    /// .memory(1 << 20)
    /// .build()?;
    /// assert!(!d.add(&7, 1));
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder_with_clock(
        window: Duration,
        slices: usize,
        threshold: u64,
        clock: C,
    ) -> HotKeySketchBuilder<K, C> {
        HotKeySketch::builder(window, slices, threshold).clock(clock)
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeySketchBuilder<K, C, S> {
    /// The clock read by the methods without `_at`.
    pub fn clock<C2: Clock>(self, clock: C2) -> HotKeySketchBuilder<K, C2, S> {
        HotKeySketchBuilder {
            exact: self.exact.clock(clock),
            window: self.window,
            slices: self.slices,
            threshold: self.threshold,
            memory: self.memory,
            level: self.level,
            rate: self.rate,
        }
    }

    /// The hasher of the keys ([`RandomState`] unless given: see
    /// [`KeyedWindows`](crate::KeyedWindows); the doorkeeper and the exact
    /// part use the same hash).
    pub fn hasher<S2: KeyHasher>(self, hasher: S2) -> HotKeySketchBuilder<K, C, S2> {
        HotKeySketchBuilder {
            exact: self.exact.hasher(hasher),
            window: self.window,
            slices: self.slices,
            threshold: self.threshold,
            memory: self.memory,
            level: self.level,
            rate: self.rate,
        }
    }

    /// The most bytes the detector holds (unless given: what
    /// [`adds_per_second`](Self::adds_per_second) needs, else 8 MiB).
    /// At least [`HotKeySketch::MIN_MEMORY`] (32 KiB): below it the exact part's
    /// least tables and their growth step would overshoot the budget, so
    /// [`build`](Self::build) refuses it.
    pub fn memory(mut self, bytes: usize) -> Self {
        self.memory = Some(bytes);
        self
    }

    /// The admission level `a` (`1..=255`; see [`HotKeySketch`]): lower
    /// makes the counts closer and holds more keys exactly.
    pub fn admission_level(mut self, a: u64) -> Self {
        self.level = Some(a);
        self
    }

    /// The detector. Errors as [`HotKeySketch::new`], on an admission
    /// level outside `1..=255`, and with
    /// [`adds_per_second`](Self::adds_per_second) on a memory below what
    /// that rate needs ([`ConfigError::SketchMemory`]; see
    /// [`HotKeySketch::memory_for`]) or a rate no memory holds
    /// ([`ConfigError::SketchRate`]).
    pub fn build(self) -> Result<HotKeySketch<K, C, S>, ConfigError> {
        // The window and slices first, as the exact part checks them: the
        // sizes below multiply by the slice count.
        crate::window::slice_nanos(self.window, self.slices)?;
        let slices = self.slices.max(1);
        let level = match self.level {
            Some(a) if (1..=255).contains(&a) => a,
            Some(_) => {
                return Err(ConfigError::Invalid(
                    "the admission level must be in 1..=255",
                ))
            }
            None => default_level(self.threshold.div_ceil(slices as u64)),
        };
        let needed = match self.rate {
            Some(rate) => Some(super::sizing::needed::<K, S>(
                self.window,
                self.slices,
                self.threshold,
                level,
                rate,
            )?),
            None => None,
        };
        let memory = self.memory.or(needed).unwrap_or(8 << 20);
        if let Some(needed) = needed.filter(|&n| memory < n) {
            return Err(ConfigError::SketchMemory { memory, needed });
        }
        let shards = sketch_shards();
        let door = Doorkeeper::new((memory / 4).min(shards * SHARD_MAX), shards, level);
        let max_keys = max_keys_for::<K, S>(memory.saturating_sub(door.bytes()), slices);
        if memory < HotKeySketch::<K, C, S>::MIN_MEMORY || max_keys < MIN_KEYS {
            return Err(ConfigError::Invalid(
                "the memory is too small for a hot-key sketch of this many slices (32 KiB at least)",
            ));
        }
        let mut exact = self.exact.max_keys(max_keys).build()?;
        // Hot state for as many keys as a slice holds (`max_keys_for`
        // counts their room).
        exact.bound_homes(max_keys);
        let sketch = HotKeySketch {
            door,
            exact,
            filtered: StripedCounter::new(),
            memory,
            max_keys,
        };
        // The exact part starts with tables of a fixed least size: a budget
        // of a few KiB can be below what the sketch holds when empty.
        if sketch.memory_bytes() > memory {
            return Err(ConfigError::Invalid(
                "the memory is too small for a hot-key sketch of this many slices",
            ));
        }
        Ok(sketch)
    }
}

impl<K, C: Clock, S> fmt::Debug for HotKeySketchBuilder<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HotKeySketchBuilder")
            .field("memory", &self.memory)
            .field("level", &self.level)
            .field("rate", &self.rate)
            .field("exact", &self.exact)
            .finish()
    }
}
