//! [`SlidingWindow`]: an exact, lock-free sliding time window.
//!
//! # Model
//! The window of length `W` is cut into `S` slices of length `L = W / S`.
//! The epoch of time `t` is `t / L`. `sum_at(now)` is the total of the adds
//! whose epoch `e` satisfies `epoch(now) - S < e <= epoch(now)`: now's
//! partial slice and the `S - 1` before it.
//!
//! The engine is a striped ring of epoch-tagged slices (`ring.rs`): a row
//! of `S` cells per writing thread, each cell recycling itself
//! (`crate::slice`), so there is no global "current epoch" and no lock.

// Design notes (for maintainers; not part of the public docs).
//
// # Invariants
// - Every add is counted in exactly one cell, under its own epoch, or is
//   dropped as older than the ring ([`SlidingWindow::add_at`] returns
//   `false`); never filed under another epoch.
// - A sum reads each cell's `(epoch, count)` atomically and keeps the cells
//   whose epoch is in its window, so it never counts an add outside its
//   window or twice, and sees every add that happened before it.
//
// # Files
// `ring.rs` is the engine; `builder.rs` the [`WindowBuilder`]. This module
// also names the limits of every window type ([`MAX_SLICES`],
// [`MAX_LEVELS`], [`MAX_COUNT_PER_SLICE`]) and re-exports [`MultiWindow`]
// and its builder from `crate::multi`.
//
// # Memory
// A window holds no row until its first add, then one row per writing
// thread: `16 * S` bytes rounded up to a multiple of 128, plus a fixed
// header of about 150 bytes and three words per possible stripe (CPU count
// rounded up to a power of two).

mod builder;
mod ring;

use ring::Ring;

pub use crate::multi::{MultiWindow, MultiWindowBuilder, MAX_LEVELS};
pub use crate::slice::MAX_COUNT_PER_SLICE;
pub use builder::WindowBuilder;

use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::error::ConfigError;
use std::fmt;
use std::time::Duration;

/// The most slices a window may have. Sums read every slice of every
/// stripe, so a ring much longer than this makes reads slow; the slice
/// protocol itself supports up to 65,535. For long windows at fine
/// resolution use [`MultiWindow`].
pub const MAX_SLICES: usize = 4096;

/// Validates `(window, slices)` and returns the slice length in nanoseconds.
pub(crate) fn slice_nanos(window: Duration, slices: usize) -> Result<u64, ConfigError> {
    if window.is_zero() {
        return Err(ConfigError::ZeroWindow);
    }
    if slices == 0 {
        return Err(ConfigError::ZeroSlices);
    }
    if slices > MAX_SLICES {
        return Err(ConfigError::TooManySlices {
            slices,
            max: MAX_SLICES,
        });
    }
    let nanos =
        u64::try_from(window.as_nanos()).map_err(|_| ConfigError::WindowTooLong { window })?;
    if nanos % slices as u64 != 0 {
        return Err(ConfigError::UnevenSlices { window, slices });
    }
    Ok(nanos / slices as u64)
}

/// An exact sliding time window: the total of what was added in the last
/// `window`, updated lock-free from many threads.
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{SlidingWindow, Timestamp};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // The last 10 seconds, in 10 slices of 1 second.
/// let w = SlidingWindow::builder(Duration::from_secs(10), 10)
///     .clock(clock.clone())
///     .build()?;
/// assert!(w.add(3)); // counted
/// clock.advance(Duration::from_secs(4));
/// w.add(2);
/// assert_eq!(w.sum(), 5);
/// clock.advance(Duration::from_secs(6)); // the first add is now 10 s old
/// assert_eq!(w.sum(), 2);
///
/// // Callers that already know the time skip the clock read:
/// let t = Timestamp::from_duration(Duration::from_secs(12));
/// assert!(w.add_at(t, 1));
/// assert_eq!(w.sum_at(t), 3);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct SlidingWindow<C: Clock = MonotonicClock> {
    ring: Ring,
    window: Duration,
    clock: C,
}

impl SlidingWindow {
    /// A window of `window` cut into `slices` slices, on the monotonic clock.
    ///
    /// Errors: zero window, zero slices, more than [`MAX_SLICES`] slices, a
    /// window whose nanoseconds are not a whole multiple of `slices`, or one
    /// longer than `u64::MAX` nanoseconds.
    ///
    /// ```
    /// use stripecount::SlidingWindow;
    /// use std::time::Duration;
    ///
    /// let w = SlidingWindow::new(Duration::from_secs(60), 60)?;
    /// w.add(1);
    /// assert_eq!(w.sum(), 1);
    /// assert!(SlidingWindow::new(Duration::from_secs(1), 7).is_err()); // uneven
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn new(window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::builder(window, slices).build()
    }

    /// The builder of a window of `window` cut into `slices` slices, for
    /// the options of [`WindowBuilder`] (a clock); checked by its
    /// [`build`](WindowBuilder::build), with the errors of
    /// [`new`](Self::new).
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{SlidingWindow, Timestamp};
    /// use std::time::Duration;
    ///
    /// let w = SlidingWindow::builder(Duration::from_secs(1), 10)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(w.add_at(Timestamp::ZERO, 2));
    /// assert_eq!(w.sum(), 2); // the manual clock reads 0
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder(window: Duration, slices: usize) -> WindowBuilder {
        WindowBuilder::new(window, slices)
    }
}

impl Default for SlidingWindow {
    /// The last second, in 10 slices of 100 ms, on the monotonic clock.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), 10).expect("1 s / 10 slices is valid")
    }
}

impl<C: Clock> SlidingWindow<C> {
    /// A builder on `clock`: [`SlidingWindow::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](WindowBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{Clock, ConfigError, SlidingWindow};
    /// use std::time::Duration;
    ///
    /// let w = SlidingWindow::<ManualClock>::builder_with_clock(
    ///     Duration::from_secs(1),
    ///     10,
    ///     ManualClock::new(),
    /// )
    /// .build()?;
    /// w.add(2);
    /// assert_eq!(w.sum(), 2);
    ///
    /// fn per_second<C: Clock>(clock: C) -> Result<SlidingWindow<C>, ConfigError> {
    ///     SlidingWindow::builder_with_clock(Duration::from_secs(1), 10, clock).build()
    /// }
    /// assert_eq!(per_second(ManualClock::new())?.sum(), 0);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn builder_with_clock(window: Duration, slices: usize, clock: C) -> WindowBuilder<C> {
        SlidingWindow::builder(window, slices).clock(clock)
    }

    /// Loom models only: every thread adds to shared rows (written by
    /// CAS), as threads beyond the owned rows do, so that a model can race
    /// writers on one row.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __loom_shared(mut self) -> Self {
        self.ring.share_all();
        self
    }

    /// Adds `n` now. Returns whether the add was counted, as
    /// [`add_at`](Self::add_at) (always, unless the clock stepped back by
    /// more than the ring).
    #[inline]
    pub fn add(&self, n: u64) -> bool {
        self.add_at(self.clock.now(), n)
    }

    /// Adds `n` at time `now` (on this window's clock's timeline). Returns
    /// `false` if the add was dropped because it is older than the ring (its
    /// slot already holds an epoch at least `slices` later); `true` if it was recorded
    /// (an add of 0 is trivially recorded). It reads nothing else: a sum is
    /// [`sum_at`](Self::sum_at).
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub fn add_at(&self, now: Timestamp, n: u64) -> bool {
        let now = now.as_nanos();
        self.ring.add(now, n)
    }

    /// The window's total now.
    pub fn sum(&self) -> u64 {
        self.sum_at(self.clock.now())
    }

    /// The total of the adds whose epoch is within the `slices` epochs ending
    /// at `epoch(now)`. Exact for any `now` at or after the newest add.
    pub fn sum_at(&self, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        self.ring.sum_last(self.ring.epoch(now), self.ring.slices())
    }

    /// The total of the last `k` slices now (see
    /// [`sum_last_at`](Self::sum_last_at)).
    pub fn sum_last(&self, k: usize) -> u64 {
        self.sum_last_at(self.clock.now(), k)
    }

    /// The total of the last `k` slices ending with now's (partial) slice;
    /// `k` is clamped to `slices`.
    pub fn sum_last_at(&self, now: Timestamp, k: usize) -> u64 {
        let now = now.as_nanos();
        self.ring.sum_last(self.ring.epoch(now), k)
    }

    /// The window's total per second at `now`: `sum_at(now) / window`.
    /// (The current slice is partial, so this slightly under-reads.)
    pub fn rate_per_sec_at(&self, now: Timestamp) -> f64 {
        self.sum_at(now) as f64 / self.window.as_secs_f64()
    }

    /// The window's total per second now.
    pub fn rate_per_sec(&self) -> f64 {
        self.rate_per_sec_at(self.clock.now())
    }

    /// The count of each slice of the window now, oldest first (see
    /// [`slice_counts_at`](Self::slice_counts_at)).
    pub fn slice_counts(&self) -> Vec<u64> {
        self.slice_counts_at(self.clock.now())
    }

    /// The count of each of the `slices` epochs ending at `epoch(now)`,
    /// oldest first; the last entry is now's slice.
    pub fn slice_counts_at(&self, now: Timestamp) -> Vec<u64> {
        let now = now.as_nanos();
        self.ring.slice_counts(self.ring.epoch(now))
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The number of slices.
    pub fn slices(&self) -> usize {
        self.ring.slices()
    }

    /// The slice length.
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.ring.slice_nanos())
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Stripes (rows of slices) allocated now: 1 until contention is seen.
    pub fn stripes(&self) -> usize {
        self.ring.stripes()
    }

    /// Bytes held now by the window's rows and header (not the clock).
    pub fn memory_bytes(&self) -> usize {
        self.ring.memory_bytes() + std::mem::size_of::<Self>() - std::mem::size_of::<Ring>()
    }
}

impl<C: Clock> fmt::Debug for SlidingWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("window", &self.window)
            .field("slices", &self.ring.slices())
            .field("stripes", &self.ring.stripes())
            .finish_non_exhaustive()
    }
}
