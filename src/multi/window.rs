//! The public type [`MultiWindow`]: construction, the add's fast path,
//! sums over spans (its builder is `builder.rs`). The model is in `mod.rs`; the layout in `layout.rs`; the
//! writers' folding protocol in `fold.rs`; reads in `read.rs`.
//!
//! # The owner's slice cache
//! As `SlidingWindow`'s (see `crate::window`): an owned row (one thread
//! writes it, [`Writer::Sole`]) caches the start `e * L_0` of the ring-0
//! epoch `e` of its owner's latest add that set a ring-0 cell's epoch, and
//! that cell's index. An add whose time is within `L_0` of that start is in
//! epoch `e` and only stores into the cached cell
//! ([`SliceCell::try_add_current`](crate::slice)), with no division, no
//! snapshot and no CAS; every other add takes the slow path (`fold.rs`).
//!
//! # Invariants
//! - Slice cache: the cached cell holds epoch `e`, unsealed, with `e`'s
//!   tag, in the owner's row. It is set only after an add the owner filed in
//!   ring 0 at `e` (so the cell held `e` then), only forward (a later
//!   start), and only the owner moves a ring-0 cell of an owned row off its
//!   epoch: a roll to a newer epoch of the slot, which passes through the
//!   owner's slow path and re-sets the cache if it is newer. Only the owner
//!   reads or writes it (`Relaxed`). The fast path compares against the
//!   inline `slice0` (the value of `rings[0].slice_nanos`, without the
//!   boxed slice's bounds check and pointer load).
//! - Stripe growth: that of [`crate::stripes`] (`Release` publication,
//!   `Acquire` lookup); a CAS lost on a shared row grows the stripes.
//! - Time: sums are exact for any `now` at or after the newest add; an add
//!   stamped in the past is filed in the finest ring that has not moved
//!   past it (`fold.rs`), or dropped if none has, and reported as such.

use super::builder::MultiWindowBuilder;
use super::layout::{Layout, Level, RingSpec, Row};
use super::{fold, read};
use crate::clock::{duration_nanos, Clock, MonotonicClock, Timestamp};
use crate::error::ConfigError;
use crate::slice::CellRow;
use crate::stripes::{default_cap, Stripes, Writer};
use crate::sync::Ordering;
use std::fmt;
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// Sliding windows of several lengths at several resolutions in one
/// structure: one add (one clock read) feeds every level, and
/// [`sum_over`](MultiWindow::sum_over) answers any span from the finest
/// level long enough for it.
///
/// A single fine ring for 24 hours would need tens of thousands of slices,
/// and separate windows read the clock separately and disagree; a
/// `MultiWindow` of `(1 min, 60)`, `(1 h, 60)`, `(24 h, 24)` answers "the
/// last 5 minutes" to the second and "the last 24 hours" to the hour from
/// 144 slices.
///
/// # Resolution
/// `sum_over_at(now, span)` uses the finest level whose window is at least
/// `span` (slice length `L`) and sums its last `k = ceil(span / L)` slices,
/// counting now's partial slice as one. The answer therefore covers the
/// last `c` of time with `(k - 1) L <= c < k L`: never less than
/// `span - L`, and less than `span` rounded up to whole slices (so between
/// `span - L` and `span` whenever `span` is a whole number of slices, as a
/// level's own window is). A span equal to a level's window gives exactly
/// that level's window sum; a span of zero gives 0; a span longer than the
/// largest window is clamped to it.
///
/// # Time
/// Sums are exact for any `now` at or after the newest add. An add stamped
/// in the past (a clock stepping back, a late `add_at`) is counted at each
/// level in its own slice, except at a level whose slice length's ring has
/// moved at least a ring length past it, where it is outside every window
/// anyway.
///
/// # Cost
/// An add costs one atomic compare-and-swap whatever the number of levels
/// (about one `SlidingWindow::add_at`): it writes the finest level only,
/// and counts move to coarser levels as their fine slices expire. A read of
/// a coarse level also reads the finer levels' cells; see the `multi`
/// module's design notes in the repository's `IMPLEMENTATION.md`.
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::MultiWindow;
/// use std::time::Duration;
///
/// const MIN: Duration = Duration::from_secs(60);
/// let clock = ManualClock::new();
/// // The last minute by the second, the last hour by the minute.
/// let w = MultiWindow::builder(&[(MIN, 60), (60 * MIN, 60)])
///     .clock(clock.clone())
///     .build()?;
/// assert_eq!(w.levels(), 2);
/// w.add(5);
/// clock.advance(10 * MIN);
/// w.add(2);
/// assert_eq!(w.sum_over(MIN), 2); // level 0, 60 slices of 1 s
/// assert_eq!(w.sum_over(15 * MIN), 7); // level 1, 15 slices of 1 min
/// clock.advance(51 * MIN); // the first add is now 61 minutes old
/// assert_eq!(w.sum_over(60 * MIN), 2);
/// assert_eq!(w.sum_over(Duration::from_secs(86_400)), 2); // clamped to 1 h
/// assert_eq!(w.sum_over(Duration::ZERO), 0);
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct MultiWindow<C: Clock = MonotonicClock> {
    /// Ring 0's slice length, as a precomputed divisor (every add divides).
    slice0: StrengthReducedU64,
    rings: Box<[RingSpec]>,
    levels: Box<[Level]>,
    rows: Stripes<Row>,
    clock: C,
}

impl MultiWindow {
    /// Levels of `(window, slices)`, finest first, on the monotonic clock.
    ///
    /// Errors: no levels ([`ConfigError::NoLevels`]); more than
    /// [`MAX_LEVELS`](super::MAX_LEVELS) ([`ConfigError::Invalid`]); a level that is not a
    /// valid `SlidingWindow` configuration (the same errors as
    /// [`SlidingWindow::new`](crate::SlidingWindow::new)); a window not
    /// longer than the previous level's
    /// ([`ConfigError::LevelsNotIncreasing`]); a slice length that is not a
    /// whole multiple of the previous level's
    /// ([`ConfigError::LevelSliceMismatch`]).
    ///
    /// ```
    /// use stripecount::MultiWindow;
    /// use std::time::Duration;
    ///
    /// const MIN: Duration = Duration::from_secs(60);
    /// let w = MultiWindow::new(&[(MIN, 60), (60 * MIN, 60), (24 * 60 * MIN, 24)])?;
    /// w.add(1);
    /// assert_eq!(w.sum_over(5 * MIN), 1);
    /// assert!(MultiWindow::new(&[(60 * MIN, 60), (MIN, 60)]).is_err()); // not increasing
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn new(levels: &[(Duration, usize)]) -> Result<Self, ConfigError> {
        Self::builder(levels).build()
    }

    /// The builder of levels of `(window, slices)`, finest first, for the
    /// options of [`MultiWindowBuilder`] (a clock); checked by its
    /// [`build`](MultiWindowBuilder::build), with the errors of
    /// [`new`](Self::new).
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::{MultiWindow, Timestamp};
    /// use std::time::Duration;
    ///
    /// let s = Duration::from_secs(1);
    /// let w = MultiWindow::builder(&[(10 * s, 10), (100 * s, 10)])
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(w.add_at(Timestamp::ZERO, 3));
    /// assert_eq!(w.sum_over(100 * s), 3);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder(levels: &[(Duration, usize)]) -> MultiWindowBuilder {
        MultiWindowBuilder::new(levels)
    }
}

impl<C: Clock> MultiWindow<C> {
    /// A builder on `clock`: [`MultiWindow::builder`] (defined on the
    /// monotonic-clock type only: a default type parameter does not
    /// choose an impl) followed by [`clock`](MultiWindowBuilder::clock). The way in
    /// when the type is named with its clock, or in code generic over it.
    ///
    /// ```
    /// use stripecount::clock::ManualClock;
    /// use stripecount::MultiWindow;
    /// use std::time::Duration;
    ///
    /// let levels = [(Duration::from_secs(1), 10), (Duration::from_secs(60), 60)];
    /// let w = MultiWindow::<ManualClock>::builder_with_clock(&levels, ManualClock::new()).build()?;
    /// w.add(3);
    /// assert_eq!(w.sum_over(Duration::from_secs(60)), 3);
    /// # Ok::<(), stripecount::ConfigError>(())
    /// ```
    pub fn builder_with_clock(levels: &[(Duration, usize)], clock: C) -> MultiWindowBuilder<C> {
        MultiWindow::builder(levels).clock(clock)
    }

    /// The structure of `levels` on `clock` (the builder's `build`).
    pub(super) fn from_parts(levels: &[(Duration, usize)], clock: C) -> Result<Self, ConfigError> {
        let Layout { rings, levels } = Layout::new(levels)?;
        Ok(MultiWindow {
            slice0: StrengthReducedU64::new(rings[0].slice_nanos),
            rows: Stripes::new(default_cap()),
            rings,
            levels,
            clock,
        })
    }

    /// Loom models only: every thread adds to shared rows (written by
    /// CAS), as threads beyond the owned rows do, so that a model can race
    /// writers on one row.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __loom_shared(mut self) -> Self {
        self.rows.share_all();
        self
    }

    /// Adds `n` now, at every level (one clock read). Returns whether the
    /// add was counted, as [`add_at`](Self::add_at).
    #[inline]
    pub fn add(&self, n: u64) -> bool {
        self.add_at(self.clock.now(), n)
    }

    /// Adds `n` at time `now` (on this structure's clock's timeline), at
    /// every level. At a level whose ring has already moved a ring length
    /// past `now` the add is not counted (it is outside every window of that
    /// level); see the type's docs. Returns `false` if the add was counted
    /// at no level (older than even the coarsest ring), `true` otherwise (an
    /// add of 0 is trivially counted).
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub fn add_at(&self, now: Timestamp, n: u64) -> bool {
        let now = now.as_nanos();
        if n == 0 {
            return true;
        }
        let (row, writer) = self.rows.for_writer(|| self.row());
        if writer == Writer::Sole
            && now.wrapping_sub(row.start.load(Ordering::Relaxed)) < self.slice0.get()
        {
            // The finest slice of the owner's latest add: its cell holds
            // this epoch, unsealed (the slice cache's invariant).
            let slot = row.slot.load(Ordering::Relaxed) as usize;
            // SAFETY: the cache holds a slot of ring 0, the row's first
            // cells.
            if unsafe { row.cells.cell_unchecked(slot) }.try_add_current(n) {
                return true;
            }
        }
        self.add_slow(row, writer, now, n)
    }

    /// Everything but an owner's add to its latest finest slice: a new
    /// slice (rolls and folds), a shared row, a late or saturated add.
    #[inline(never)]
    fn add_slow(&self, row: &Row, writer: Writer, now: u64, n: u64) -> bool {
        let ring = &self.rings[0];
        let e = now / self.slice0;
        let slot = ring.base + (e & ring.mask) as usize;
        let filed = fold::add(&self.rings, row, writer, e, n);
        let start = e * ring.slice_nanos; // <= now: no overflow
        if writer == Writer::Sole
            && filed.at == Some(0)
            && start > row.start.load(Ordering::Relaxed)
        {
            // Ring 0's cell `slot` now holds `e`, unsealed, with its tag,
            // and no later epoch was cached.
            row.start.store(start, Ordering::Relaxed);
            row.slot.store(slot as u64, Ordering::Relaxed);
        }
        if filed.contended {
            self.rows.contended(|| self.row());
        }
        filed.at.is_some()
    }

    /// A new row (see [`Row::new`]).
    fn row(&self) -> Row {
        Row::new(&self.rings)
    }

    /// The total over the last `span` now (see [`MultiWindow::sum_over_at`]).
    pub fn sum_over(&self, span: Duration) -> u64 {
        self.sum_over_at(self.clock.now(), span)
    }

    /// The total of the adds in the last `span` before `now`, at the
    /// resolution of the finest level whose window is at least `span`: the
    /// adds whose epoch at that level is in `(epoch(now) - k, epoch(now)]`,
    /// `k = ceil(span / L)`. A span of zero is 0; a span longer than the
    /// largest window is clamped to it. See the type's docs for the time
    /// this covers. Exact for any `now` at or after the newest add.
    pub fn sum_over_at(&self, now: Timestamp, span: Duration) -> u64 {
        let now = now.as_nanos();
        let span = duration_nanos(span);
        if span == 0 {
            return 0;
        }
        let last = self.levels.len() - 1;
        let level = self
            .levels
            .iter()
            .find(|l| l.window_nanos >= span)
            .unwrap_or(&self.levels[last]);
        let k = span.min(level.window_nanos).div_ceil(level.slice_nanos);
        let end = now / level.slice_nanos;
        let mut sum = 0u64;
        for row in self.rows.iter() {
            sum = sum.saturating_add(read::row_sum(&self.rings, row, level.ring, end, k));
        }
        sum
    }

    /// The number of levels.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Level `i`'s `(window, slices)` as configured, finest first.
    pub fn level(&self, i: usize) -> Option<(Duration, usize)> {
        self.levels.get(i).map(|l| (l.window, l.slices))
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Stripes (rows of cells) allocated now: none before the first add,
    /// then one per thread that added (up to the CPU count rounded up to a
    /// power of two), plus shared rows if more threads than that added.
    pub fn stripes(&self) -> usize {
        self.rows.len()
    }

    /// Bytes held now by the structure (its rows, their cells and its
    /// configuration; not the clock's own heap, if any). Each row holds
    /// every ring's cells (16 bytes each, rings rounded up to powers of
    /// two, padded to 128-byte lines) behind a 128-byte header.
    pub fn memory_bytes(&self) -> usize {
        let cells: usize = self.rings.iter().map(|r| r.len).sum();
        let stripes = self.rows.len();
        std::mem::size_of::<Self>()
            + std::mem::size_of_val::<[RingSpec]>(&self.rings)
            + std::mem::size_of_val::<[Level]>(&self.levels)
            + self.rows.header_bytes()
            + stripes * (std::mem::size_of::<Row>() + CellRow::heap_bytes(cells))
    }
}

impl<C: Clock> fmt::Debug for MultiWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let levels: Vec<(Duration, usize)> =
            self.levels.iter().map(|l| (l.window, l.slices)).collect();
        f.debug_struct("MultiWindow")
            .field("levels", &levels)
            .field("stripes", &self.rows.len())
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + fmt::Debug>() {}
    is::<MultiWindow>();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn memory_is_cells_plus_headers() {
        const MIN: Duration = Duration::from_secs(60);
        let w = MultiWindow::new(&[(MIN, 60), (60 * MIN, 60), (24 * 60 * MIN, 24)]).unwrap();
        // No row before the first add; then 64 + 64 + 32 cells of 16 bytes
        // and a 128-byte header per writing thread.
        let fixed = w.memory_bytes();
        assert!(fixed < 1024 + 20 * w.rows.cap(), "{fixed}");
        assert!(w.add_at(Timestamp::ZERO, 1));
        assert_eq!(w.memory_bytes(), fixed + 128 + 160 * 16);
        std::thread::scope(|s| {
            s.spawn(|| assert!(w.add_at(Timestamp::ZERO, 1)));
        });
        assert_eq!(w.stripes(), 2);
        assert_eq!(w.memory_bytes(), fixed + 2 * (128 + 160 * 16));
    }
}
