//! [`MultiWindow`]: one structure that answers several spans (1 minute,
//! 1 hour, 24 hours, ...) at several resolutions, from one clock read.
//!
//! # Model
//! Level `k` is a sliding window of `W_k` in `S_k` slices of `L_k = W_k /
//! S_k`; levels are given finest first, `W_k` strictly increases and `L_k`
//! is a whole multiple of `L_{k-1}`. Every add is filed at every level under
//! that level's epoch `now / L_k`. `sum_over_at(now, span)` picks the finest
//! level with `W_k >= span` and sums its last `k = ceil(span / L_k)` slices,
//! now's partial slice included: the adds whose level epoch is in
//! `(epoch(now) - k, epoch(now)]`.
//!
//! # Structure
//! One striped set of *rows* (see [`crate::stripes`]); a row is one
//! stripe's cells of **all** levels, back to back in 128-byte aligned
//! chunks: ring 0, then ring 1, ... Each cell is the crate's epoch-tagged
//! [`SliceCell`](crate::slice), unchanged. Levels with the same slice length
//! share one ring (their epochs are equal), sized for the longest of them:
//! "5, 10, 30 and 60 minutes by the minute, 24 hours by the hour" is two
//! rings, and an add costs two cell adds, not five. A ring has
//! `P = S.next_power_of_two()` slots for the largest `S` it serves (at most
//! 2x memory): the slot of an epoch is then `epoch & (P - 1)`, a mask rather
//! than a division. A ring longer than a window is harmless: readers keep
//! only the cells whose epoch is in their range, and an add is dropped as
//! too old only if its slot holds an epoch at least `P >= S` slices newer,
//! i.e. outside every window of that ring.
//!
//! # Cost of an add
//! An add does, once: one thread-local probe read and one stripe lookup
//! (one `Acquire` load of the stripe count, one of the row pointer); then,
//! per ring, one division `now / L` (independent of the other rings', so
//! they overlap), a mask, and one [`SliceCell`](crate::slice) add: three
//! L1-resident loads and one CAS. A `SlidingWindow::add_at` is the probe,
//! the lookup, two divisions (`t / L`, `e % S`) and one cell add.
//!
//! What is left per ring is the CAS, and it dominates: a locked
//! read-modify-write costs ~6.5 ns on the development machines, ~80% of a
//! whole `SlidingWindow::add_at` (~8 ns), and locked instructions do not
//! overlap. So an add over three slice lengths costs about 2.6x one window
//! (2.2-2.8x across runs), against about 3x for three separate windows
//! (`benches/multi.rs`). The divisions hide behind the CASes: replacing
//! them by multiplications by a precomputed reciprocal measured no
//! difference, so the code keeps plain `/`. Sharing rings is what removes whole CASes: levels with one
//! slice length cost one. Fewer CASes than distinct slice lengths would need
//! counts to *move* between levels (a fine slice folded into a coarse one
//! as it leaves the fine ring), and such a move touches two words, which
//! readers could see half done; that protocol (fold markers in the coarse
//! word, readers that validate and retry) is not built here.
//!
//! # Memory
//! A row is `16 * sum(P)` bytes over the distinct rings, rounded up to 128;
//! one row until contention is seen, then up to one per CPU (rounded up to
//! a power of two), as for `SlidingWindow`. `(1 min, 60)`, `(1 h, 60)`,
//! `(24 h, 24)` is 160 cells, 2.5 KiB per row.
//!
//! # Invariants
//! - Every level sees every add exactly once: the add runs one
//!   [`SliceCell`](crate::slice) add per ring, each of which counts it under
//!   its own epoch or drops it as older than that ring (never files it
//!   under another epoch), and every level reads exactly one ring. Rings are
//!   independent cells, so a roll in one ring never touches another's
//!   count.
//! - Cell protocol, orderings and ABA bound: those of [`crate::slice`]
//!   (`AcqRel` CASes, `Acquire` snapshots). Stripe growth: that of
//!   [`crate::stripes`] (`Release` publication, `Acquire` lookup).
//! - A sum reads each cell of its level atomically (a consistent
//!   `(epoch, count)` snapshot) and keeps the cells whose epoch is in its
//!   range: it never counts an add outside its range or twice, and sees
//!   every add that finished before it started. Levels are read
//!   separately; an add racing two sums over two levels can be seen by one
//!   and not (yet) by the other, exactly as with two windows.
//! - Counts saturate at [`MAX_SLICE_COUNT`](crate::MAX_SLICE_COUNT) per cell
//!   and sums saturate at `u64::MAX`; nothing wraps.

use crate::clock::{duration_nanos, Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::slice::{CellRow, SliceCell};
use crate::stripes::{default_cap, Stripes};
use crate::sync::probe;
use crate::window::slice_nanos;
use std::fmt;
use std::time::Duration;

/// The most levels a [`MultiWindow`] may have. An add costs one cell CAS per
/// distinct slice length, and a read scans a level's whole ring, so levels
/// are not free; 16 already cover, say, 1 s to 24 h with a level per 2x of
/// window, more than any use we know of needs.
pub const MAX_LEVELS: usize = 16;

/// One stripe's cells of every level, on its own cache lines.
struct Row(CellRow);

impl Row {
    /// A row holding every ring; slot `j` of a ring starts at epoch `j`
    /// (any epoch of the right residue with count 0 would do).
    fn new(rings: &[RingSpec]) -> Row {
        let cells: usize = rings.iter().map(|r| r.len).sum();
        let mut init = vec![0u64; cells];
        for r in rings {
            for (j, e) in init[r.base..r.base + r.len].iter_mut().enumerate() {
                *e = j as u64;
            }
        }
        Row(CellRow::from_epochs(init))
    }

    #[inline]
    fn cell(&self, i: usize) -> &SliceCell {
        self.0.cell(i)
    }
}

/// One ring of every row: all that an add needs. Levels with the same
/// slice length share one ring (sized for the longest of them).
#[derive(Debug, Clone)]
struct RingSpec {
    /// `L`, the slice length in nanoseconds.
    slice_nanos: u64,
    /// `P - 1`: the slot of epoch `e` is `e & mask`.
    mask: u64,
    /// Index of the ring's first cell in a row.
    base: usize,
    /// `P`, the ring length (a power of two, at least every sharing
    /// level's slice count).
    len: usize,
}

/// One level as configured, for reads and `Debug`.
#[derive(Debug, Clone)]
struct Level {
    /// Index of the level's ring in `MultiWindow::rings`.
    ring: usize,
    /// `L_k` in nanoseconds.
    slice_nanos: u64,
    /// `W_k` in nanoseconds.
    window_nanos: u64,
    /// `W_k` as given.
    window: Duration,
    /// `S_k` as given.
    slices: usize,
}

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
/// level in its own slice, or dropped at a level whose ring has moved at
/// least a ring length past it, where it is outside every window anyway.
///
/// ```
/// use stripecount::{ManualClock, MultiWindow};
/// use std::time::Duration;
///
/// const MIN: Duration = Duration::from_secs(60);
/// let clock = ManualClock::new();
/// // The last minute by the second, the last hour by the minute.
/// let w = MultiWindow::with_clock(&[(MIN, 60), (60 * MIN, 60)], clock.clone())?;
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
    rings: Box<[RingSpec]>,
    levels: Box<[Level]>,
    rows: Stripes<Row>,
    clock: C,
}

impl MultiWindow {
    /// Levels of `(window, slices)`, finest first, on the monotonic clock.
    ///
    /// Errors: no levels ([`ConfigError::NoLevels`]); more than
    /// [`MAX_LEVELS`] ([`ConfigError::Invalid`]); a level that is not a
    /// valid `SlidingWindow` configuration (the same errors as
    /// [`SlidingWindow::new`](crate::SlidingWindow::new)); a window not
    /// longer than the previous level's
    /// ([`ConfigError::LevelsNotIncreasing`]); a slice length that is not a
    /// whole multiple of the previous level's
    /// ([`ConfigError::LevelSliceMismatch`]).
    pub fn new(levels: &[(Duration, usize)]) -> Result<Self, ConfigError> {
        Self::with_clock(levels, MonotonicClock)
    }
}

impl<C: Clock> MultiWindow<C> {
    /// Levels on the given clock (see [`MultiWindow::new`] for errors).
    pub fn with_clock(levels: &[(Duration, usize)], clock: C) -> Result<Self, ConfigError> {
        if levels.is_empty() {
            return Err(ConfigError::NoLevels);
        }
        if levels.len() > MAX_LEVELS {
            return Err(ConfigError::Invalid(
                "a MultiWindow has at most MAX_LEVELS (16) levels",
            ));
        }
        let mut out: Vec<Level> = Vec::with_capacity(levels.len());
        let mut rings: Vec<RingSpec> = Vec::with_capacity(levels.len());
        for (i, &(window, slices)) in levels.iter().enumerate() {
            let l = slice_nanos(window, slices)?;
            let ring = match out.last() {
                None => None,
                Some(prev) if window <= prev.window => {
                    return Err(ConfigError::LevelsNotIncreasing { level: i });
                }
                Some(prev) if l % prev.slice_nanos != 0 => {
                    return Err(ConfigError::LevelSliceMismatch { level: i });
                }
                // Same slice length: share the previous level's ring.
                Some(prev) if l == prev.slice_nanos => Some(prev.ring),
                Some(_) => None,
            };
            let len = slices.next_power_of_two();
            let ring = match ring {
                Some(r) => {
                    rings[r].len = rings[r].len.max(len);
                    r
                }
                None => {
                    rings.push(RingSpec {
                        slice_nanos: l,
                        mask: 0, // set with the layout below
                        base: 0,
                        len,
                    });
                    rings.len() - 1
                }
            };
            out.push(Level {
                ring,
                slice_nanos: l,
                window_nanos: l * slices as u64, // validated: fits in u64
                window,
                slices,
            });
        }
        let mut base = 0;
        for r in &mut rings {
            r.mask = r.len as u64 - 1;
            r.base = base;
            base += r.len;
        }
        let rings = rings.into_boxed_slice();
        let rows = Stripes::new(Row::new(&rings), default_cap());
        Ok(MultiWindow {
            rings,
            levels: out.into_boxed_slice(),
            rows,
            clock,
        })
    }

    /// Adds `n` now, at every level (one clock read).
    #[inline]
    pub fn add(&self, n: u64) {
        self.add_at(self.clock.now(), n);
    }

    /// Adds `n` at time `now` (nanoseconds on this structure's clock), at
    /// every level. At a level whose ring has already moved a ring length
    /// past `now` the add is dropped (it is outside every window of that
    /// level); see the type's docs.
    #[inline]
    pub fn add_at(&self, now: u64, n: u64) {
        if n == 0 {
            return;
        }
        let row = self.rows.for_probe(probe::get());
        let mut contended = false;
        for ring in self.rings.iter() {
            let e = now / ring.slice_nanos;
            let cell = row.cell(ring.base + (e & ring.mask) as usize);
            // A drop (`Added::TooOld`) needs nothing more: see the docs.
            let _ = cell.add(e, n, ring.len as u64, &mut contended);
        }
        if contended {
            self.contended();
        }
    }

    #[cold]
    fn contended(&self) {
        probe::rehash();
        self.rows.grow(|| Row::new(&self.rings));
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
    pub fn sum_over_at(&self, now: u64, span: Duration) -> u64 {
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
        let ring = &self.rings[level.ring];
        let mut sum = 0u64;
        for row in self.rows.iter() {
            for i in ring.base..ring.base + ring.len {
                let (e, c) = row.cell(i).read();
                if e <= end && end - e < k {
                    sum = sum.saturating_add(c);
                }
            }
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

    /// Stripes (rows of cells) allocated now: 1 until contention is seen.
    pub fn stripes(&self) -> usize {
        self.rows.len()
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
    fn rings_are_powers_of_two_back_to_back() {
        let w = MultiWindow::new(&[
            (Duration::from_secs(10), 10),
            (Duration::from_secs(60), 6),
            (Duration::from_secs(3600), 60),
        ])
        .unwrap();
        let rings: Vec<(usize, usize)> = w.rings.iter().map(|r| (r.base, r.len)).collect();
        assert_eq!(rings, vec![(0, 16), (16, 8), (24, 64)]);
        assert_eq!(w.rows.get(0).0.capacity(), 88); // 11 chunks of 8
    }

    #[test]
    fn levels_with_one_slice_length_share_a_ring() {
        const MIN: Duration = Duration::from_secs(60);
        // 5, 10, 30 and 60 minutes by the minute, 24 hours by the hour.
        let w = MultiWindow::new(&[
            (5 * MIN, 5),
            (10 * MIN, 10),
            (30 * MIN, 30),
            (60 * MIN, 60),
            (24 * 60 * MIN, 24),
        ])
        .unwrap();
        let rings: Vec<(usize, usize)> = w.rings.iter().map(|r| (r.base, r.len)).collect();
        assert_eq!(rings, vec![(0, 64), (64, 32)]);
        let ring_of: Vec<usize> = w.levels.iter().map(|l| l.ring).collect();
        assert_eq!(ring_of, vec![0, 0, 0, 0, 1]);
    }
}
