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
//! chunks: ring 0, then ring 1, ..., plus the row's two *fold marks*. Each
//! cell is the crate's epoch-tagged [`SliceCell`](crate::slice) used as a
//! *folding* cell ([`SliceCell::add_folding`]). There is one ring per
//! distinct slice length: levels with the same slice length share one ring
//! (their epochs are equal), sized for the longest of them. A ring has
//! `P = S.next_power_of_two()` slots for the largest `S` it serves (at most
//! 2x memory): the slot of an epoch is then `epoch & (P - 1)`, a mask rather
//! than a division. A ring longer than a window is harmless: readers keep
//! only the cells whose epoch is in their range.
//!
//! # Folding: one CAS per add
//! An add writes **only ring 0**, the finest. A count stays in its ring-0
//! cell until an add at a newer epoch of the same slot rolls the cell; the
//! roller then *takes* the count (sealing the cell, see
//! [`crate::slice`]) and *folds* it into ring 1's cell for its ring-1 epoch
//! `e / (L_1 / L_0)`, which may roll that cell and fold its count into
//! ring 2 in turn. The last ring drops what it rolls: it is outside every
//! window. An add older than a ring (its slot sealed or holding a newer
//! epoch) is filed in the next ring directly. Because `L_k` is a multiple
//! of `L_j`, ring `j`'s epoch `e` lies inside ring `k`'s epoch
//! `e / (L_k / L_j)`: a level of ring `r` sums the cells of rings `0..=r`
//! whose epoch, converted to ring `r`'s, is in its range.
//!
//! # Fold marks: readers never see half a fold
//! Between its take and its placement a count is in no cell. Each row has
//! two counters, `begun` and `ended`: a thread increments `begun` before it
//! takes a non-zero count that goes to another ring, and `ended` after
//! every count it took has been placed (one pair per add, however deep its
//! folds go). A reader of a level above ring 0 loads `ended`, reads the
//! row's cells, loads `begun`, and retries the row unless they are equal.
//! Why that suffices (all cell writes are `AcqRel` CASes, reads `Acquire`):
//! - Say the reader saw a cell write of a fold `F` (its take or its
//!   placement). `F` incremented `begun` before that write, so the
//!   reader's later load of `begun` counts `F`'s begin.
//! - Say it missed a write of `F` (read the cell before it). Then its load
//!   of `ended` was not after `F`'s end: had it read `F`'s increment, every
//!   write of `F` would be visible to the reads that follow.
//! - So a reader that saw one half of `F` and not the other has `F` in its
//!   `begun` and not in its `ended`; and every end it counted has its begin
//!   counted too. Hence `begun > ended`, and it retries.
//!
//! Ring 0 alone needs no check: folds only take counts *out* of it, and
//! only counts that are outside its window at the roller's time.
//!
//! # Cost
//! An add is, on its fast path, exactly a `SlidingWindow::add_at`: the
//! probe, the stripe lookup, one division `now / L_0`, a mask instead of a
//! `% S`, a snapshot and one CAS, whatever the number of levels. Rolls take
//! the slow path, once per finest slice per row: per ring touched, a take,
//! a seal-and-move and a placement, plus the two mark increments. Measured
//! (`cargo bench --bench multi`, see `BENCHMARKS.md`): three levels cost
//! 0.9-1.0x one window's add, against about 3x for three separate windows.
//! (Before folding, an add did one CAS per distinct slice length, 2.6x for
//! three levels: locked instructions do not overlap.)
//!
//! Reads pay instead: a level of ring `r` reads the cells of rings `0..=r`,
//! and a read that overlaps a fold of the same row retries; if the folding
//! thread was descheduled mid-fold, the reader waits for it (spinning, then
//! yielding). Adds never wait for anyone.
//!
//! # Memory
//! A row is `16 * sum(P)` bytes over the distinct rings, rounded up to 128,
//! plus a 128-byte header (the cell pointer and the fold marks); one row
//! until contention is seen, then up to one per CPU (rounded up to a power
//! of two), as for `SlidingWindow`. `(1 min, 60)`, `(1 h, 60)`,
//! `(24 h, 24)` is 160 cells, 2.625 KiB a row.
//!
//! # Invariants
//! - Every count is in exactly one place: a live (unsealed) cell of one
//!   ring under its own epoch at that ring; or in the hands of a thread
//!   between its take and its placement, while its row's `begun > ended`;
//!   or dropped, as older than the last ring (outside every window). Takes
//!   are CASes, so exactly one thread takes a count; sealed cells refuse
//!   adds, so no add lands in a cell whose count was taken.
//! - Hence every level sees every add exactly once: a level of ring `r`
//!   counts the add in the ring (`<= r`) that holds it, or not at all if it
//!   has moved past ring `r` (ring `r` rolled past its epoch, so it is
//!   outside every window of that level at the roller's time).
//! - Cell protocol and ABA bound: those of [`crate::slice`]. Stripe growth:
//!   that of [`crate::stripes`] (`Release` publication, `Acquire` lookup).
//!   Marks: `AcqRel` increments, `Acquire` loads.
//! - Levels are read separately; an add racing two sums over two levels
//!   can be seen by one and not (yet) by the other, exactly as with two
//!   windows.
//! - Counts saturate at [`MAX_SLICE_COUNT`](crate::MAX_SLICE_COUNT) per cell
//!   (a fold into a cell saturates there too) and sums saturate at
//!   `u64::MAX`; nothing wraps.

use crate::clock::{duration_nanos, Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::slice::{Added, CellRow, Fold, SliceCell};
use crate::stripes::{default_cap, Stripes, Writer};
use crate::sync::{wait_hint, AtomicU64, Ordering};
use crate::window::slice_nanos;
use std::fmt;
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// The most levels a [`MultiWindow`] may have. An add costs one cell CAS per
/// distinct slice length, and a read scans a level's whole ring, so levels
/// are not free; 16 already cover, say, 1 s to 24 h with a level per 2x of
/// window, more than any use we know of needs.
pub const MAX_LEVELS: usize = 16;

/// One stripe's cells of every ring (on their own cache lines) and the
/// row's fold marks: how many folds have begun and how many have ended (see
/// the module docs). The marks share a line with the cell pointer, which
/// adds only read: they are written twice per fold, once per fine slice.
#[repr(align(128))]
struct Row {
    cells: CellRow,
    begun: AtomicU64,
    ended: AtomicU64,
    /// The owner's slice cache (owned rows only, as `SlidingWindow`'s; see
    /// `crate::window`): the start of the ring-0 epoch `e` of the owner's
    /// latest add that set a ring-0 cell's epoch, and that cell's index.
    /// Invariant: that cell holds `e`, unsealed, with `e`'s tag. Only the
    /// owner reads or writes them (`Relaxed`).
    start: AtomicU64,
    slot: AtomicU64,
}

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
        Row {
            cells: CellRow::from_epochs(init),
            begun: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            start: AtomicU64::new(0),
            slot: AtomicU64::new(0),
        }
    }

    #[inline]
    fn cell(&self, i: usize) -> &SliceCell {
        self.cells.cell(i)
    }
}

/// One slow-path add in progress on one row: files counts in the row's
/// rings, and is where a cell sends the count it takes out of a ring (the
/// next coarser ring of the same row, with the row's fold opened first).
struct Placer<'a, C: Clock> {
    window: &'a MultiWindow<C>,
    row: &'a Row,
    writer: Writer,
    /// The ring a taken count goes to: the one after the ring being
    /// written (may be past the last ring: then the count is outside every
    /// window and is dropped).
    next: usize,
    /// Whether this add has opened a fold (incremented `begun`).
    open: bool,
    /// Whether a CAS lost to another thread.
    contended: bool,
}

impl<C: Clock> Placer<'_, C> {
    /// Files `n` at epoch `e` of ring `k` (or, if that ring has moved past
    /// `e`, of the next coarser ring; past the last ring it is outside
    /// every window and dropped). Counts the cells yield as they roll are
    /// folded into the next ring the same way. Returns the ring the add
    /// was counted in (`None`: dropped). Recursion depth is at most the
    /// number of rings (<= [`MAX_LEVELS`]).
    fn place(&mut self, k: usize, e: u64, n: u64) -> Option<usize> {
        let ring = &self.window.rings[k];
        let cell = self.row.cell(ring.base + (e & ring.mask) as usize);
        let outer = std::mem::replace(&mut self.next, k + 1);
        let mut contended = false;
        let added = cell.add_folding_as(self.writer, e, n, ring.len as u64, &mut contended, self);
        self.next = outer;
        self.contended |= contended;
        if added == Added::Recorded {
            return Some(k);
        }
        let coarser = self.window.rings.get(k + 1)?;
        self.place(k + 1, e / coarser.ratio, n)
    }
}

impl<C: Clock> Fold for Placer<'_, C> {
    fn open(&mut self) {
        if self.next < self.window.rings.len() && !self.open {
            // Before the take, in this thread's order: a reader that sees
            // the take sees this mark (AcqRel).
            self.row.begun.fetch_add(1, Ordering::AcqRel);
            self.open = true;
        }
    }

    fn fold(&mut self, epoch: u64, count: u64) {
        if let Some(coarser) = self.window.rings.get(self.next) {
            self.place(self.next, epoch / coarser.ratio, count);
        }
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
    /// `L / L'` for the previous (finer) ring's `L'` (1 for ring 0): this
    /// ring's epoch of a finer ring's epoch `e'` is `e' / ratio`.
    ratio: u64,
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
    /// [`MAX_LEVELS`] ([`ConfigError::Invalid`]); a level that is not a
    /// valid `SlidingWindow` configuration (the same errors as
    /// [`SlidingWindow::new`](crate::SlidingWindow::new)); a window not
    /// longer than the previous level's
    /// ([`ConfigError::LevelsNotIncreasing`]); a slice length that is not a
    /// whole multiple of the previous level's
    /// ([`ConfigError::LevelSliceMismatch`]).
    pub fn new(levels: &[(Duration, usize)]) -> Result<Self, ConfigError> {
        Self::with_clock(levels, MonotonicClock::new())
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
                    let ratio = rings.last().map_or(1, |r: &RingSpec| l / r.slice_nanos);
                    rings.push(RingSpec {
                        slice_nanos: l,
                        ratio,
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
        Ok(MultiWindow {
            slice0: StrengthReducedU64::new(rings[0].slice_nanos),
            rows: Stripes::new(default_cap()),
            rings,
            levels: out.into_boxed_slice(),
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

    /// Adds `n` at time `now` (nanoseconds on this structure's clock), at
    /// every level. At a level whose ring has already moved a ring length
    /// past `now` the add is not counted (it is outside every window of that
    /// level); see the type's docs. Returns `false` if the add was counted
    /// at no level (older than even the coarsest ring), `true` otherwise (an
    /// add of 0 is trivially counted).
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub fn add_at(&self, now: u64, n: u64) -> bool {
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
        let mut p = Placer {
            window: self,
            row,
            writer,
            next: 1,
            open: false,
            contended: false,
        };
        let at = if row.cell(slot).try_add_as(writer, e, n, &mut p.contended) {
            Some(0)
        } else {
            p.place(0, e, n)
        };
        if p.open {
            // Release: everything the fold did is before its end mark.
            row.ended.fetch_add(1, Ordering::AcqRel);
        }
        let start = e * ring.slice_nanos; // <= now: no overflow
        if writer == Writer::Sole && at == Some(0) && start > row.start.load(Ordering::Relaxed) {
            // Ring 0's cell `slot` now holds `e`, unsealed, with its tag,
            // and no later epoch was cached.
            row.start.store(start, Ordering::Relaxed);
            row.slot.store(slot as u64, Ordering::Relaxed);
        }
        if p.contended {
            self.rows.contended(|| self.row());
        }
        at.is_some()
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
        let mut sum = 0u64;
        for row in self.rows.iter() {
            sum = sum.saturating_add(self.row_sum(row, level.ring, end, k));
        }
        sum
    }

    /// One row's count of the epochs `(end - k, end]` of ring `r`: the cells
    /// of ring `r` and of every finer ring (whose counts not yet folded
    /// belong to ring `r`'s epochs too). Ring 0 alone needs no check: a fold
    /// only takes counts out of it. Otherwise the read is retried until no
    /// fold of this row began or was in progress while it ran (see the
    /// module docs), so every count is seen exactly once.
    fn row_sum(&self, row: &Row, r: usize, end: u64, k: u64) -> u64 {
        let mut rounds = 0;
        loop {
            // Ring 0 alone needs no check (see above): no load.
            let ended = if r > 0 {
                row.ended.load(Ordering::Acquire)
            } else {
                0
            };
            let mut sum = 0u64;
            // Ring `j`'s epoch `e` is ring `r`'s `e / div`; ring `r`'s
            // epochs `(end - k, end]` are ring `j`'s `lo..=hi`, compared
            // without a division per cell (bounds computed in u128, as
            // they may pass u64::MAX: a `lo` past it matches no cell).
            let mut div = 1u128;
            for j in (0..=r).rev() {
                let ring = &self.rings[j];
                let first = (u128::from(end) + 1).saturating_sub(u128::from(k));
                let bounds = (first * div, (u128::from(end) + 1) * div - 1);
                div *= u128::from(ring.ratio);
                let Ok(lo) = u64::try_from(bounds.0) else {
                    continue;
                };
                let hi = u64::try_from(bounds.1).unwrap_or(u64::MAX);
                for i in ring.base..ring.base + ring.len {
                    let (e, c) = row.cell(i).read_folding();
                    if e >= lo && e <= hi {
                        sum = sum.saturating_add(c);
                    }
                }
            }
            if r == 0 || row.begun.load(Ordering::Acquire) == ended {
                return sum;
            }
            wait_hint(&mut rounds);
        }
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
    fn rings_are_powers_of_two_back_to_back() {
        let w = MultiWindow::new(&[
            (Duration::from_secs(10), 10),
            (Duration::from_secs(60), 6),
            (Duration::from_secs(3600), 60),
        ])
        .unwrap();
        let rings: Vec<(usize, usize)> = w.rings.iter().map(|r| (r.base, r.len)).collect();
        assert_eq!(rings, vec![(0, 16), (16, 8), (24, 64)]);
        assert_eq!(w.row().cells.capacity(), 88); // 11 chunks of 8
        assert_eq!(std::mem::size_of::<Row>(), 128); // header: pointer and marks
    }

    #[test]
    fn memory_is_cells_plus_headers() {
        const MIN: Duration = Duration::from_secs(60);
        let w = MultiWindow::new(&[(MIN, 60), (60 * MIN, 60), (24 * 60 * MIN, 24)]).unwrap();
        // No row before the first add; then 64 + 64 + 32 cells of 16 bytes
        // and a 128-byte header per writing thread.
        let fixed = w.memory_bytes();
        assert!(fixed < 1024 + 20 * w.rows.cap(), "{fixed}");
        assert!(w.add_at(0, 1));
        assert_eq!(w.memory_bytes(), fixed + 128 + 160 * 16);
        std::thread::spawn({
            let w = &w as *const MultiWindow as usize;
            // SAFETY: the window outlives the joined thread.
            move || assert!(unsafe { &*(w as *const MultiWindow) }.add_at(0, 1))
        })
        .join()
        .unwrap();
        assert_eq!(w.stripes(), 2);
        assert_eq!(w.memory_bytes(), fixed + 2 * (128 + 160 * 16));
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
