//! [`SlidingWindow`]: an exact, lock-free sliding time window.
//!
//! # Model
//! The window of length `W` is cut into `S` slices of length `L = W / S`.
//! The epoch of time `t` is `t / L`. `sum_at(now)` is the total of the adds
//! whose epoch `e` satisfies `epoch(now) - S < e <= epoch(now)`: now's
//! partial slice and the `S - 1` before it.
//!
//! # Structure
//! A [`Ring`] is `S` slots, each an epoch-tagged
//! [`SliceCell`](crate::slice) (16 bytes), laid out as *rows*: one row per
//! stripe, each row aligned to a 128-byte line. Rows are the stripes of
//! [`crate::stripes`]: each thread that adds gets its own row (up to the CPU
//! count rounded up to a power of two), which only it writes, with plain
//! stores; more threads than that share rows written by CAS. Each cell
//! recycles itself (see [`crate::slice`]), so rows need no global "current
//! epoch" and no lock.
//!
//! The epoch `t / L` and the slot `e % S` are multiplications and shifts
//! (`strength_reduce`), not 64-bit divisions: an add is two thread-local
//! reads, three loads to find the row, and two loads and a store (or a
//! CAS) on the cell.
//!
//! # Invariants
//! - Every add is counted in exactly one cell, under its own epoch, or is
//!   dropped as older than the ring ([`SlidingWindow::add_at`] returns
//!   `false`); never filed under another epoch.
//! - A sum reads each cell's `(epoch, count)` atomically and keeps the cells
//!   whose epoch is in its window, so it never counts an add outside its
//!   window or twice, and sees every add that happened before it.
//!
//! # Memory
//! A window holds no row until its first add, then one row per writing
//! thread: `16 * S` bytes rounded up to a multiple of 128, plus a fixed
//! header of about 150 bytes and three words per possible stripe (CPU count
//! rounded up to a power of two).

use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::slice::{Added, CellRow};
use crate::stripes::{default_cap, Stripes, Writer};
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// The most slices a window may have. Sums read every slice of every
/// stripe, so a ring much longer than this makes reads slow; the slice
/// protocol itself supports up to 65,535. For long windows at fine
/// resolution use [`MultiWindow`](crate::MultiWindow).
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

/// A striped ring of epoch-tagged slices: the engine of [`SlidingWindow`].
/// (`MultiWindow` lays several rings in one row and the limiters need one
/// admission word, so both build on [`crate::slice`] directly.)
pub(crate) struct Ring {
    /// `L`, as a precomputed divisor.
    slice: StrengthReducedU64,
    /// `S`.
    slices: usize,
    /// `W = L * S`, as a precomputed divisor: the slot of time `t` is
    /// `t / L - S * (t / W)` (that is `e % S`, as `t / L / S = t / W`), two
    /// independent multiplications rather than one after the other.
    window: StrengthReducedU64,
    /// One row (stripe) per writing thread.
    rows: Stripes<Row>,
}

/// One stripe: a ring of cells and, for an owned row, its owner's slice
/// cache.
struct Row {
    cells: CellRow,
    /// The owner's slice cache: the start time (`e * L`) of the epoch `e`
    /// of the owner's latest add that set a cell's epoch, and that epoch's
    /// slot. Written and read only by the owner (so `Relaxed`), meaningless
    /// in a shared row. Invariant: cell `slot` holds epoch `e` with `e`'s
    /// tag (see "The owner's slice cache" in the module docs).
    start: AtomicU64,
    slot: AtomicU64,
}

impl Ring {
    pub(crate) fn new(window: Duration, slices: usize) -> Result<Ring, ConfigError> {
        let slice_nanos = slice_nanos(window, slices)?;
        Ok(Ring {
            slice: StrengthReducedU64::new(slice_nanos),
            slices,
            window: StrengthReducedU64::new(slice_nanos * slices as u64),
            rows: Stripes::new(default_cap()),
        })
    }

    /// Slice length in nanoseconds.
    #[inline]
    pub(crate) fn slice_nanos(&self) -> u64 {
        self.slice.get()
    }

    /// Number of slices.
    #[inline]
    pub(crate) fn slices(&self) -> usize {
        self.slices
    }

    /// The epoch of time `t`.
    #[inline]
    pub(crate) fn epoch(&self, t: u64) -> u64 {
        t / self.slice
    }

    /// Rows (stripes) allocated now.
    pub(crate) fn stripes(&self) -> usize {
        self.rows.len()
    }

    /// A new row: slot `j` at epoch `j`, count 0 (so the slice cache's
    /// epoch 0 in slot 0 is true from the start).
    fn row(&self) -> Row {
        Row {
            cells: CellRow::new(self.slices),
            start: AtomicU64::new(0),
            slot: AtomicU64::new(0),
        }
    }

    /// Adds `n` at time `t`. Returns `false` if the add is older than the
    /// ring (its slot in this thread's row holds a later epoch).
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub(crate) fn add(&self, t: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let (row, writer) = self.rows.for_writer(|| self.row());
        if writer == Writer::Sole
            && t.wrapping_sub(row.start.load(Ordering::Relaxed)) < self.slice.get()
        {
            // The slice of the owner's latest add: its cell holds this
            // epoch (the cache's invariant), only the room is left to check.
            let slot = row.slot.load(Ordering::Relaxed) as usize;
            // SAFETY: the cache holds a slot `e % S < S`, the row's length.
            if unsafe { row.cells.cell_unchecked(slot) }.try_add_current(n) {
                return true;
            }
        }
        self.add_slow(row, writer, t, n)
    }

    /// Any other add: a new slice, a shared row, a late or saturated add.
    #[inline(never)]
    fn add_slow(&self, row: &Row, writer: Writer, t: u64, n: u64) -> bool {
        let e = t / self.slice;
        let slot = e - (t / self.window) * self.slices as u64;
        let cell = row.cells.cell(slot as usize);
        let mut contended = false;
        let added = if cell.try_add_as(writer, e, n, &mut contended) {
            Added::Recorded
        } else {
            cell.add_as(writer, e, n, self.slices as u64, &mut contended)
        };
        let start = e * self.slice.get(); // <= t: no overflow
        if writer == Writer::Sole
            && added == Added::Recorded
            && start > row.start.load(Ordering::Relaxed)
        {
            // Cell `slot` now holds `e` with its tag, and no later epoch
            // was cached: keep the cache on the newest slice.
            row.start.store(start, Ordering::Relaxed);
            row.slot.store(slot, Ordering::Relaxed);
        }
        if contended {
            self.rows.contended(|| self.row());
        }
        added == Added::Recorded
    }

    /// Calls `f(epoch, count)` for every cell of every row.
    #[inline]
    pub(crate) fn for_each_cell(&self, mut f: impl FnMut(u64, u64)) {
        for row in self.rows.iter() {
            for slot in 0..self.slices {
                let (e, c) = row.cells.cell(slot).read();
                f(e, c);
            }
        }
    }

    /// Total of the adds with epoch in `(last - k, last]`, `k <= slices`.
    pub(crate) fn sum_last(&self, last: u64, k: usize) -> u64 {
        let k = k.min(self.slices) as u64;
        let mut sum = 0u64;
        self.for_each_cell(|e, c| {
            if e <= last && last - e < k {
                sum = sum.saturating_add(c);
            }
        });
        sum
    }

    /// Counts per epoch for the `slices` epochs ending at `last`, oldest
    /// first (zero for epochs before time 0).
    pub(crate) fn slice_counts(&self, last: u64) -> Vec<u64> {
        let s = self.slices as u64;
        let mut out = vec![0u64; self.slices];
        self.for_each_cell(|e, c| {
            if e <= last && last - e < s {
                let i = (s - 1 - (last - e)) as usize;
                out[i] = out[i].saturating_add(c);
            }
        });
        out
    }

    /// Bytes this ring holds now (rows and header), excluding the clock.
    pub(crate) fn memory_bytes(&self) -> usize {
        let row = std::mem::size_of::<Row>() + CellRow::heap_bytes(self.slices);
        std::mem::size_of::<Ring>() + self.rows.header_bytes() + self.rows.len() * row
    }
}

/// An exact sliding time window: the total of what was added in the last
/// `window`, updated lock-free from many threads.
///
/// ```
/// use stripecount::{ManualClock, SlidingWindow};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // The last 10 seconds, in 10 slices of 1 second.
/// let w = SlidingWindow::with_clock(Duration::from_secs(10), 10, clock.clone())?;
/// assert!(w.add(3)); // counted
/// clock.advance(Duration::from_secs(4));
/// w.add(2);
/// assert_eq!(w.sum(), 5);
/// clock.advance(Duration::from_secs(6)); // the first add is now 10 s old
/// assert_eq!(w.sum(), 2);
///
/// // Callers that already know the time skip the clock read:
/// let t = 12_000_000_000; // 12 s, in nanoseconds
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
    pub fn new(window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::with_clock(window, slices, MonotonicClock::new())
    }
}

impl Default for SlidingWindow {
    /// The last second, in 10 slices of 100 ms, on the monotonic clock.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), 10).expect("1 s / 10 slices is valid")
    }
}

impl<C: Clock> SlidingWindow<C> {
    /// A window on the given clock (see [`SlidingWindow::new`] for errors).
    pub fn with_clock(window: Duration, slices: usize, clock: C) -> Result<Self, ConfigError> {
        Ok(SlidingWindow {
            ring: Ring::new(window, slices)?,
            window,
            clock,
        })
    }

    /// Loom models only: every thread adds to shared rows (written by
    /// CAS), as threads beyond the owned rows do, so that a model can race
    /// writers on one row.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __loom_shared(mut self) -> Self {
        self.ring.rows.share_all();
        self
    }

    /// Adds `n` now. Returns whether the add was counted, as
    /// [`add_at`](Self::add_at) (always, unless the clock stepped back by
    /// more than the ring).
    #[inline]
    pub fn add(&self, n: u64) -> bool {
        self.add_at(self.clock.now(), n)
    }

    /// Adds one now; returns whether it was counted (see
    /// [`add`](Self::add)).
    #[inline]
    pub fn increment(&self) -> bool {
        self.add(1)
    }

    /// Adds `n` at time `now` (nanoseconds on this window's clock). Returns
    /// `false` if the add was dropped because it is older than the ring (its
    /// slot already holds an epoch at least `slices` later); `true` if it was recorded
    /// (an add of 0 is trivially recorded). It reads nothing else: a sum is
    /// [`sum_at`](Self::sum_at).
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub fn add_at(&self, now: u64, n: u64) -> bool {
        self.ring.add(now, n)
    }

    /// The window's total now.
    pub fn sum(&self) -> u64 {
        self.sum_at(self.clock.now())
    }

    /// The total of the adds whose epoch is within the `slices` epochs ending
    /// at `epoch(now)`. Exact for any `now` at or after the newest add.
    pub fn sum_at(&self, now: u64) -> u64 {
        self.ring.sum_last(self.ring.epoch(now), self.ring.slices())
    }

    /// The total of the last `k` slices ending with now's (partial) slice;
    /// `k` is clamped to `slices`.
    pub fn sum_last_at(&self, now: u64, k: usize) -> u64 {
        self.ring.sum_last(self.ring.epoch(now), k)
    }

    /// The window's total per second at `now`: `sum_at(now) / window`.
    /// (The current slice is partial, so this slightly under-reads.)
    pub fn rate_per_sec_at(&self, now: u64) -> f64 {
        self.sum_at(now) as f64 / self.window.as_secs_f64()
    }

    /// The window's total per second now.
    pub fn rate_per_sec(&self) -> f64 {
        self.rate_per_sec_at(self.clock.now())
    }

    /// The count of each of the `slices` epochs ending at `epoch(now)`,
    /// oldest first; the last entry is now's slice.
    pub fn slice_counts_at(&self, now: u64) -> Vec<u64> {
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

    /// The epoch (slice number) of time `now`.
    pub fn epoch_at(&self, now: u64) -> u64 {
        self.ring.epoch(now)
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
