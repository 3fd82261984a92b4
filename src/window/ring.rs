//! The [`Ring`] behind a [`SlidingWindow`]: `S` slots, each an
//! epoch-tagged [`SliceCell`](crate::slice) (16 bytes), laid out as *rows*:
//! one row per stripe, each row aligned to a 128-byte line. Rows are the
//! stripes of [`crate::stripes`]: each thread that adds gets its own row
//! (up to the CPU count rounded up to a power of two), which only it
//! writes, with plain stores; more threads than that share rows written by
//! CAS. Each cell recycles itself (see [`crate::slice`]), so rows need no
//! global "current epoch" and no lock.
//!
//! The epoch `t / L` and the slot `e % S` are multiplications and shifts
//! (`strength_reduce`), not 64-bit divisions: an add is two thread-local
//! reads, three loads to find the row, and two loads and a store (or a
//! CAS) on the cell.
//!
//! # The owner's slice cache
//! A row's owner (its sole writer) keeps, in the row, the start time
//! `e * L` of the newest epoch `e` it has recorded an add under, and `e`'s
//! slot. An add whose time falls in that slice (`t - start < L`, one
//! subtraction) goes straight to the cached cell and only checks its room:
//! no epoch, no slot, no tag to compute. Any other add takes the slow path,
//! which records under the add's own epoch and moves the cache forward when
//! that epoch is newer.
//!
//! # Invariants
//! 1. Every add is counted in exactly one cell of its writer's row, under
//!    its own epoch, or dropped as older than the ring; never filed under
//!    another epoch (the cell protocol, [`crate::slice`]).
//! 2. The cache: cell `slot` of an owned row holds epoch `e` (with `e`'s
//!    tag) for the cached `start = e * L`. It holds from the row's creation
//!    (epoch 0 in slot 0), and the owner moves the cache only to an epoch
//!    it has just recorded an add under, and only forward; no other thread
//!    writes an owned row's cells, so nothing else can move them past it.
//!    Only the owner reads or writes the cache (`Relaxed`).
//!
//! [`SlidingWindow`]: super::SlidingWindow

use super::slice_nanos;
use crate::error::ConfigError;
use crate::slice::{Added, CellRow};
use crate::stripes::{default_cap, Stripes, Writer};
use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// A striped ring of epoch-tagged slices: the engine of
/// [`SlidingWindow`](super::SlidingWindow).
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
    /// tag (module docs, "The owner's slice cache", invariant 2).
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

    /// Loom models only: every later add goes to a shared row (see
    /// `SlidingWindow::__loom_shared`).
    #[cfg(loom)]
    pub(super) fn share_all(&mut self) {
        self.rows.share_all();
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
