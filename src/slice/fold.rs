//! Folding cells: the extra state a [`MultiWindow`](crate::MultiWindow)'s
//! cells have, *sealed*, so that a recycled count moves to a coarser ring
//! instead of being dropped (see "Folding cells" in [`crate::slice`]).

use super::{
    count_of, pack, tag, tag_of, write, Added, SliceCell, COUNT_MASK, MAX_COUNT_PER_SLICE,
    MAX_STRIDE,
};
use crate::stripes::Writer;

/// The count value that marks a cell *sealed* (folding rows only; see
/// [`SliceCell::add_folding`]), one above [`MAX_COUNT_PER_SLICE`] so that no
/// saturated count is ever mistaken for it.
pub(crate) const SEALED: u64 = COUNT_MASK;

/// Where a folding cell sends the count it takes out of the ring (see
/// [`SliceCell::add_folding`]).
pub(crate) trait Fold {
    /// Called before a non-zero count is taken: the count will be in no
    /// cell from the take until [`Fold::fold`] has placed it.
    fn open(&mut self);
    /// The count `count` of epoch `epoch` was taken; place it elsewhere.
    fn fold(&mut self, epoch: u64, count: u64);
}

impl SliceCell {
    /// `(epoch, count)` of a folding cell: as [`SliceCell::read`], with a
    /// sealed cell reading 0 (its count has been taken).
    #[inline]
    pub(crate) fn read_folding(&self) -> (u64, u64) {
        let (e, c) = self.read();
        (e, if c == SEALED { 0 } else { c })
    }

    /// The fast path of [`SliceCell::add_folding`] for a shared writer:
    /// [`SliceCell::try_add_as`] (which never adds to a sealed cell).
    // The shared-writer names are the per-key engine's (`crate::keyed`,
    // being rewritten); `MultiWindow` calls the `_as` forms.
    #[allow(dead_code)]
    #[inline]
    pub(crate) fn try_add_folding(&self, e: u64, n: u64, contended: &mut bool) -> bool {
        self.try_add_as(Writer::Shared, e, n, contended)
    }

    /// Adds `n` (> 0) at epoch `e` to a cell of a *folding* ring, whose
    /// expired counts move on to a coarser ring instead of being dropped.
    ///
    /// A folding cell has one more state, *sealed* (count field
    /// [`SEALED`]): its count has been taken, and it accepts no more adds.
    /// Invariant 2 of the module docs becomes: when `tag(word) !=
    /// tag(epoch)`, the word is `tag(prev) | SEALED`, so a recycle never
    /// discards a count. The steps, each a CAS against a snapshot:
    /// - `epoch == e`, tag of `e`, not sealed: add (saturating at
    ///   [`MAX_COUNT_PER_SLICE`]).
    /// - `epoch == e`, tag of `e`, sealed; or `epoch > e`: the slot has
    ///   moved past `e`, which is outside every window of this ring:
    ///   [`Added::TooOld`], and the caller files the add in a coarser ring.
    /// - `epoch == e`, previous tag (sealed): replace with `tag(e) | n`.
    /// - `epoch < e`, previous tag: seal it for `epoch` (its count is 0).
    /// - `epoch < e`, tag of `epoch`, count `c`, not sealed: *take* it, i.e.
    ///   CAS to `tag(epoch) | SEALED`; for `c > 0`, `f.open()` first and
    ///   `f.fold(epoch, c)` once the CAS succeeded (exactly one thread takes
    ///   a given count).
    /// - `epoch < e`, sealed: move `epoch` to `e` (two steps across a
    ///   multiple of the tag space, invariant 3).
    ///
    /// A late add at a sealed epoch is refused rather than filed, so every
    /// count is in exactly one place: a live cell, or in the hands of the
    /// thread between its take and its fold (which `open` lets the caller
    /// announce to readers). Lock-free, as [`SliceCell::add`].
    #[allow(dead_code)] // see `try_add_folding`
    pub(crate) fn add_folding(
        &self,
        e: u64,
        n: u64,
        stride: u64,
        contended: &mut bool,
        f: &mut impl Fold,
    ) -> Added {
        self.add_folding_as(Writer::Shared, e, n, stride, contended, f)
    }

    /// [`SliceCell::add_folding`] as `writer` (a sole writer stores where a
    /// shared one CASes; see [`crate::slice`]).
    pub(crate) fn add_folding_as(
        &self,
        writer: Writer,
        e: u64,
        n: u64,
        stride: u64,
        contended: &mut bool,
        f: &mut impl Fold,
    ) -> Added {
        debug_assert!(stride > 0 && stride <= MAX_STRIDE);
        loop {
            let (ew, w) = self.snapshot();
            let c = count_of(w);
            let current = tag_of(w) == tag(ew);
            debug_assert!(current || c == SEALED, "a recycle never drops a count");
            let next = if ew == e && current {
                if c == SEALED {
                    return Added::TooOld;
                }
                if c == MAX_COUNT_PER_SLICE {
                    return Added::Recorded; // saturated: nothing to write
                }
                pack(tag(e), c.saturating_add(n).min(MAX_COUNT_PER_SLICE))
            } else if ew == e {
                pack(tag(e), n.min(MAX_COUNT_PER_SLICE))
            } else if ew > e {
                return Added::TooOld;
            } else if !current {
                pack(tag(ew), SEALED)
            } else if c != SEALED {
                if c > 0 {
                    f.open();
                }
                if !write(&self.word, w, pack(tag(ew), SEALED), writer) {
                    *contended = true;
                } else if c > 0 {
                    f.fold(ew, c);
                }
                continue;
            } else {
                self.move_epoch(ew, e, stride, writer, contended);
                continue;
            };
            if !write(&self.word, w, next, writer) {
                *contended = true;
            } else if ew == e {
                return Added::Recorded;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::*;

    /// Records what a folding cell hands on.
    #[derive(Default)]
    struct Taken {
        opened: u32,
        folded: Vec<(u64, u64)>,
    }

    impl Fold for Taken {
        fn open(&mut self) {
            self.opened += 1;
        }
        fn fold(&mut self, epoch: u64, count: u64) {
            self.folded.push((epoch, count));
        }
    }

    #[test]
    fn a_folding_roll_hands_the_count_on_once() {
        let c = SliceCell::new(3);
        let (mut k, mut f) = (false, Taken::default());
        assert_eq!(c.add_folding(3, 5, 4, &mut k, &mut f), Added::Recorded);
        assert!(c.try_add_folding(3, 1, &mut k));
        assert!(f.folded.is_empty());
        assert_eq!(c.add_folding(7, 2, 4, &mut k, &mut f), Added::Recorded);
        assert_eq!((f.opened, &f.folded[..]), (1, &[(3, 6)][..]));
        assert_eq!(c.read_folding(), (7, 2));
        // Late: the slot holds a later epoch; nothing is taken.
        assert_eq!(c.add_folding(3, 1, 4, &mut k, &mut f), Added::TooOld);
        assert!(!c.try_add_folding(3, 1, &mut k));
        // An empty cell rolls without opening a fold.
        let empty = SliceCell::new(1);
        assert_eq!(empty.add_folding(5, 1, 4, &mut k, &mut f), Added::Recorded);
        assert_eq!((f.opened, f.folded.len()), (1, 1));
        assert!(!k);
    }

    /// A fold that, while it holds the taken count, tries a late add at
    /// the sealed epoch: the cell refuses it.
    struct LateAdd<'a> {
        cell: &'a SliceCell,
        late: Option<Added>,
        folded: Vec<(u64, u64)>,
    }

    impl Fold for LateAdd<'_> {
        fn open(&mut self) {}
        fn fold(&mut self, epoch: u64, count: u64) {
            self.folded.push((epoch, count));
            let mut k = false;
            self.late = Some(
                self.cell
                    .add_folding(epoch, 1, 4, &mut k, &mut Taken::default()),
            );
            assert_eq!(self.cell.read_folding(), (epoch, 0), "sealed reads 0");
        }
    }

    #[test]
    fn a_sealed_cell_refuses_adds_at_its_epoch() {
        let c = SliceCell::new(3);
        let mut k = false;
        c.add_folding(3, 5, 4, &mut k, &mut Taken::default());
        let mut f = LateAdd {
            cell: &c,
            late: None,
            folded: Vec::new(),
        };
        assert_eq!(c.add_folding(7, 2, 4, &mut k, &mut f), Added::Recorded);
        assert_eq!(f.late, Some(Added::TooOld));
        assert_eq!(f.folded, vec![(3, 5)]);
        assert_eq!(c.read_folding(), (7, 2));
    }

    #[test]
    fn a_folding_jump_by_the_tag_space_hands_on_the_old_count() {
        let c = SliceCell::new(3);
        let (mut k, mut f) = (false, Taken::default());
        c.add_folding(3, 9, 4, &mut k, &mut f);
        let far = 3 + (1u64 << 16) * 4;
        assert_eq!(c.add_folding(far, 1, 4, &mut k, &mut f), Added::Recorded);
        assert_eq!(f.folded, vec![(3, 9)]);
        assert_eq!(c.read_folding(), (far, 1));
    }

    #[test]
    fn folding_cells_saturate_below_the_seal() {
        let c = SliceCell::new(0);
        let (mut k, mut f) = (false, Taken::default());
        c.add_folding(0, u64::MAX, 1, &mut k, &mut f);
        c.add_folding(0, u64::MAX, 1, &mut k, &mut f);
        assert!(!c.try_add_folding(0, 1, &mut k));
        assert_eq!(c.read_folding(), (0, MAX_COUNT_PER_SLICE));
        c.add_folding(1, 1, 1, &mut k, &mut f);
        assert_eq!(f.folded, vec![(0, MAX_COUNT_PER_SLICE)]);
    }
}
