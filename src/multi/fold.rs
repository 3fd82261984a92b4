//! The writers' protocol of a [`MultiWindow`](super::MultiWindow): an add
//! writes the finest ring only, and counts fold into the coarser rings as
//! their fine cells roll, under the row's fold marks.
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
//! of `L_j` (see `layout.rs`), ring `j`'s epoch `e` lies inside ring `k`'s
//! epoch `e / (L_k / L_j)`: a level of ring `r` sums the cells of rings
//! `0..=r` whose epoch, converted to ring `r`'s, is in its range (`read.rs`).
//!
//! # Fold marks: readers never see half a fold
//! Between its take and its placement a count is in no cell. Each row has
//! two counters, `begun` and `ended`: a thread increments `begun` before it
//! takes a non-zero count that goes to another ring, and `ended` after
//! every count it took has been placed (one pair per add, however deep its
//! folds go). A reader of a level above ring 0 loads `ended`, reads the
//! row's cells, loads `begun`, and retries the row unless they are equal
//! (`read.rs`). Why that suffices (all cell writes are `AcqRel` CASes, reads
//! `Acquire`):
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
//! # Invariants
//! - Every count is in exactly one place: a live (unsealed) cell of one
//!   ring under its own epoch at that ring; or in the hands of a thread
//!   between its take and its placement, while its row's `begun > ended`;
//!   or dropped, as older than the last ring (outside every window). Takes
//!   are CASes, so exactly one thread takes a count; sealed cells refuse
//!   adds, so no add lands in a cell whose count was taken.
//! - Cell protocol and ABA bound: those of [`crate::slice`] (a ring's
//!   length, the stride of its cells, is a valid level's slice count rounded
//!   up to a power of two: at most `MAX_SLICES` = 4096, under `MAX_STRIDE`).
//! - Marks: `AcqRel` increments (`begun` before the take, in this thread's
//!   order; `ended` after the last placement), `Acquire` loads by readers.
//! - Counts saturate at [`MAX_COUNT_PER_SLICE`](crate::window::MAX_COUNT_PER_SLICE) per cell
//!   (a fold into a cell saturates there too); nothing wraps.
//! - Recursion depth is at most the number of rings (<= `MAX_LEVELS`): a
//!   placement only ever moves to a coarser ring.

use super::layout::{RingSpec, Row};
use crate::slice::{Added, Fold};
use crate::stripes::Writer;
use crate::sync::Ordering;

/// Where an add was filed (see [`add`]).
pub(super) struct Filed {
    /// The ring the add was counted in (`None`: older than every ring,
    /// dropped).
    pub(super) at: Option<usize>,
    /// Whether a CAS lost to another thread.
    pub(super) contended: bool,
}

/// Files `n` (> 0) at ring-0 epoch `e` in `row` as `writer`: in ring 0's
/// cell, or (if ring 0 has moved past `e`) the first coarser ring that has
/// not, folding the counts the cells yield as they roll into the next ring,
/// with the row's fold marks around every count taken (see the module
/// docs).
pub(super) fn add(rings: &[RingSpec], row: &Row, writer: Writer, e: u64, n: u64) -> Filed {
    let ring = &rings[0];
    let slot = ring.base + (e & ring.mask) as usize;
    let mut p = Placer {
        rings,
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
    Filed {
        at,
        contended: p.contended,
    }
}

/// One slow-path add in progress on one row: files counts in the row's
/// rings, and is where a cell sends the count it takes out of a ring (the
/// next coarser ring of the same row, with the row's fold opened first).
struct Placer<'a> {
    rings: &'a [RingSpec],
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

impl Placer<'_> {
    /// Files `n` at epoch `e` of ring `k` (or, if that ring has moved past
    /// `e`, of the next coarser ring; past the last ring it is outside
    /// every window and dropped). Counts the cells yield as they roll are
    /// folded into the next ring the same way. Returns the ring the add
    /// was counted in (`None`: dropped). Recursion depth is at most the
    /// number of rings (<= `MAX_LEVELS`).
    fn place(&mut self, k: usize, e: u64, n: u64) -> Option<usize> {
        let ring = &self.rings[k];
        let cell = self.row.cell(ring.base + (e & ring.mask) as usize);
        let outer = std::mem::replace(&mut self.next, k + 1);
        let mut contended = false;
        let added = cell.add_folding_as(self.writer, e, n, ring.len as u64, &mut contended, self);
        self.next = outer;
        self.contended |= contended;
        if added == Added::Recorded {
            return Some(k);
        }
        let coarser = self.rings.get(k + 1)?;
        self.place(k + 1, e / coarser.ratio, n)
    }
}

impl Fold for Placer<'_> {
    fn open(&mut self) {
        if self.next < self.rings.len() && !self.open {
            // Before the take, in this thread's order: a reader that sees
            // the take sees this mark (AcqRel).
            self.row.begun.fetch_add(1, Ordering::AcqRel);
            self.open = true;
        }
    }

    fn fold(&mut self, epoch: u64, count: u64) {
        if let Some(coarser) = self.rings.get(self.next) {
            self.place(self.next, epoch / coarser.ratio, count);
        }
    }
}
