//! Sizing a [`HotKeySketch`] for its stream: the memory its two parts
//! need at a rate of adds ([`HotKeySketch::memory_for`],
//! [`HotKeySketchBuilder::adds_per_second`]), and the refusal of memory
//! below it.
//!
//! # The rule
//! With `R` adds a second over windows of `W` in `S` slices, a window holds
//! `N = R * W` adds and a slice `A = ceil(N / S)`; `a` is the admission
//! level and `T` the threshold.
//! - **The exact part** holds, in every slice, every key that can be hot:
//!   at most `ceil(N / T)` keys reach `T` in one window (their adds would
//!   otherwise pass `N`), so a slice must hold at least that many keys (and
//!   at least 16). Below it, a stream of `N / T` keys each at the
//!   threshold fills the slices and leaves hot keys untracked: it cannot
//!   work for every stream of the rate.
//! - **The doorkeeper** keeps the long tail out only while its counters
//!   stay below `a` within a slice: a thread's shard must have at least
//!   `ceil(A / a)` words (rounded up to a power of two, as built), so that
//!   a slice's adds, spread over its words, average at most `a` a word.
//!   With fewer, keys of a few adds share counters that reach `a`, are
//!   admitted, and fill the exact part (measured: 1 MiB, threshold 500 in
//!   10 slices of 1 s, Zipf 0.8 over 100M keys at 1M adds a second: 17.9M
//!   of 20M adds untracked, recall 0.44 at the threshold; a shard there had
//!   16K words against the 62.5K this rule asks). The rule assumes every
//!   add can come from one thread (one shard): adds spread over threads
//!   need less. A shard has at most 512 KiB (`SHARD_MAX`), so a slice of
//!   more than `64Ki * a` adds cannot be held at any memory: refused with
//!   [`ConfigError::SketchRate`] (more slices, a higher threshold or
//!   admission level make a slice's adds fit).
//!
//! What the rule does not promise: a key that reaches `a` in a slice but
//! not `T` in the window also takes a place in the slice (at most `A / a`
//! keys reach `a`, more than `N / T` since `a <= T / S`). A stream with
//! many such keys a slice still fills the slices; what it leaves out is
//! counted in [`HotKeySketch::untracked_adds`] (exported, and warned of by
//! the `hotkeys` command). Holding every one of them would take `T / (S a)`
//! times the memory (16 times with the default level), for streams few
//! services see.
//!
//! The doorkeeper takes a quarter of the memory (at most `SHARD_MAX` a
//! shard, a shard a core up to 8), the exact part the rest: the memory
//! needed is the least `M` whose quarter holds the doorkeeper's words and
//! whose remainder holds the exact part's keys (`key_bytes` each).

use super::sketch::{
    default_level, exact_bytes, key_bytes, sketch_shards, HotKeySketchBuilder, MIN_KEYS, SHARD_MAX,
};
use super::HotKeySketch;
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::key::{Key, KeyHasher};
use std::time::Duration;

impl<K: Key> HotKeySketch<K> {
    /// The memory a sketch needs for windows of `window` in `slices`
    /// slices, threshold `threshold`, at `adds_per_second` adds a second
    /// (every key, every thread), with the default admission level: the
    /// least memory that [`build`](HotKeySketchBuilder::build) accepts with
    /// [`adds_per_second`](HotKeySketchBuilder::adds_per_second).
    ///
    /// It holds, in every slice, every key that can reach the threshold at
    /// that rate (at most `adds a window / threshold` of them), and a
    /// doorkeeper large enough that the long tail's adds do not raise its
    /// shared counters to the admission level (see `sizing.rs`, "The
    /// rule": the doorkeeper has one shard a core, up to 8, so the memory
    /// needed grows with the machine's cores). It says nothing of how
    /// skewed the stream is: a skewed stream often does well in less, but
    /// less cannot work for every stream of the rate. Nor is it enough for
    /// every stream: keys that reach the admission level in a slice and
    /// not the threshold take places too, and a stream of many of them
    /// leaves adds untracked ([`untracked_adds`](HotKeySketch::untracked_adds)
    /// says how many).
    ///
    /// Errors: a zero window, slices or threshold, a rate of zero, and
    /// [`ConfigError::SketchRate`] when a slice's adds are more than the
    /// doorkeeper can keep apart at any memory.
    ///
    /// ```
    /// use stripecount::{ConfigError, HotKeySketch};
    /// use std::time::Duration;
    ///
    /// // Keys seen 500 times in 10 s (10 slices), at a million adds a second.
    /// let (window, slices, threshold, rate) = (Duration::from_secs(10), 10, 500, 1_000_000);
    /// let needed = HotKeySketch::<u64>::memory_for(window, slices, threshold, rate)?;
    /// let sketch = HotKeySketch::<u64>::builder(window, slices, threshold)
    ///     .memory(needed)
    ///     .adds_per_second(rate)
    ///     .build()?;
    /// assert!(sketch.max_keys() >= 20_000); // 10M adds a window / 500
    ///
    /// // 1 MiB cannot hold that stream: refused, with the memory it needs.
    /// let small = HotKeySketch::<u64>::builder(window, slices, threshold)
    ///     .memory(1 << 20)
    ///     .adds_per_second(rate)
    ///     .build();
    /// assert_eq!(small.unwrap_err(), ConfigError::SketchMemory { memory: 1 << 20, needed });
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn memory_for(
        window: Duration,
        slices: usize,
        threshold: u64,
        adds_per_second: u64,
    ) -> Result<usize, ConfigError> {
        let level = default_level(threshold.div_ceil(slices.max(1) as u64));
        needed::<K, crate::hash::RandomState>(window, slices, threshold, level, adds_per_second)
    }
}

impl<K: Key, C: Clock, S: KeyHasher> HotKeySketchBuilder<K, C, S> {
    /// The stream's rate: adds a second, every key and every thread
    /// together. [`build`](Self::build) then refuses a
    /// [`memory`](Self::memory) below what the rate needs
    /// ([`ConfigError::SketchMemory`], with the memory needed; see
    /// [`HotKeySketch::memory_for`]), and without a `memory` sizes the
    /// sketch to that need instead of 8 MiB.
    ///
    /// ```
    /// use stripecount::HotKeySketch;
    /// use std::time::Duration;
    ///
    /// let d = HotKeySketch::<u64>::builder(Duration::from_secs(60), 60, 10_000)
    ///     .adds_per_second(50_000)
    ///     .build()?;
    /// assert!(d.max_keys() >= 300); // 3M adds a window / 10,000
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn adds_per_second(mut self, rate: u64) -> Self {
        self.rate = Some(rate);
        self
    }
}

/// The memory needed at `rate` adds a second (see "The rule"), for keys
/// of type `K` and admission level `level`.
pub(super) fn needed<K: Key, S: KeyHasher>(
    window: Duration,
    slices: usize,
    threshold: u64,
    level: u64,
    rate: u64,
) -> Result<usize, ConfigError> {
    if window.is_zero() {
        return Err(ConfigError::ZeroWindow);
    }
    if slices == 0 {
        return Err(ConfigError::ZeroSlices);
    }
    if threshold == 0 {
        return Err(ConfigError::Invalid("the threshold must be at least 1"));
    }
    if rate == 0 {
        return Err(ConfigError::Invalid(
            "the rate must be at least one add a second",
        ));
    }
    let too_big = || ConfigError::Invalid("the memory a sketch needs at this rate is above usize");
    let per_window = (u128::from(rate).checked_mul(window.as_nanos()))
        .ok_or_else(too_big)?
        .div_ceil(1_000_000_000);
    let per_window = u64::try_from(per_window).map_err(|_| too_big())?;
    let per_slice = per_window.div_ceil(slices as u64);
    // The doorkeeper: a shard of at least ceil(A / a) words.
    let words = (per_slice.div_ceil(level).max(1))
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    let most = (SHARD_MAX / 8) as u64;
    if words > most {
        return Err(ConfigError::SketchRate {
            adds_per_slice: per_slice,
            most: most * level,
        });
    }
    let shards = sketch_shards();
    let door = shards * words as usize * 8;
    // The exact part: every key that can reach the threshold, a slice.
    let keys = usize::try_from(per_window.div_ceil(threshold)).map_err(|_| too_big())?;
    let keys = keys.max(MIN_KEYS);
    let exact = keys
        .checked_mul(key_bytes::<K>(slices))
        .map(|_| exact_bytes::<K, S>(keys, slices))
        .ok_or_else(too_big)?;
    // The least memory whose quarter holds `door` (the doorkeeper is built
    // in the largest power of two of words within its share, so a share
    // of `door`, itself a power of two of words, holds `door`) and whose
    // rest holds `exact` even with the doorkeeper at its whole share (at
    // most a quarter, at most `SHARD_MAX` a shard): the least fixed point
    // of `m = min(m / 4, cap) + exact` from `4 * door` up.
    let cap = shards * SHARD_MAX;
    let mut memory = door.checked_mul(4).ok_or_else(too_big)?;
    loop {
        let want = (memory / 4)
            .min(cap)
            .checked_add(exact)
            .ok_or_else(too_big)?;
        if memory >= want {
            // A sketch is built with at least its least memory.
            return Ok(memory.max(super::HotKeySketch::<u64>::MIN_MEMORY));
        }
        memory = want;
    }
}
