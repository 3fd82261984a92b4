//! The epoch-tagged slice cell: the atomic protocol at the heart of every
//! window in this crate.
//!
//! A cell holds the count of one slice of time (one *epoch*, `t / L`) and is
//! recycled for a later epoch of the same ring slot once its slice has left
//! the window. The naive ring publishes the new epoch and *then* zeroes the
//! count, so an add that sees the new epoch can be wiped; or it zeroes and
//! then publishes, so an add can land in the stale slice. This cell makes
//! "which epoch" and "how many" change together.
//!
//! # Layout (16 bytes)
//! - `epoch: AtomicU64`: the full epoch the cell is (being) recycled for.
//! - `word: AtomicU64`: `tag << 48 | count`, where `tag` is the low 16 bits
//!   of the epoch the count belongs to and `count` saturates at
//!   [`MAX_SLICE_COUNT`] (2^48 - 2, about 2.8e14 per slice per stripe;
//!   the all-ones count marks a sealed cell, see "Folding cells" below).
//!
//! # Invariants
//! 1. `epoch` only increases (it changes only by CAS to a larger value).
//! 2. `tag(word)` is either `tag(epoch)`, and then `count` belongs to
//!    `epoch`; or `tag(prev)` for the value `prev` `epoch` held before, and
//!    then the recycle is in progress and `count` belongs to `prev`, which is
//!    at least one ring length older and so outside every window that
//!    includes `epoch`.
//! 3. `tag(epoch) != tag(prev)`: a jump by a multiple of 2^16 epochs is made
//!    in two steps (first to `e - stride`), so state 2's two cases can always
//!    be told apart.
//!
//! # Protocol
//! Every decision is taken on a *snapshot*: `epoch`, `word`, `epoch` again,
//! retried until both epoch reads agree (by invariant 1 the epoch then did
//! not change in between, and the `Acquire` on `word` orders the second
//! read after any recycle whose word we saw). Every write is a CAS against
//! the snapshot, so a decision taken on a stale snapshot fails and is
//! retried; a failed CAS is reported as contention.
//!
//! An add of `n` at epoch `e`:
//! - `epoch > e`: the slot already holds a later epoch of the same residue,
//!   so `epoch >= e + stride`: the add is older than the ring and is dropped
//!   ([`Added::TooOld`]), never filed under another slice.
//! - `epoch < e` and the recycle into `epoch` is unfinished: finish it with
//!   count 0 (CAS `word` to `tag(epoch) | 0`). Anyone may help.
//! - `epoch < e`, recycle finished: CAS `epoch` to `e` (or `e - stride`, by
//!   invariant 3). From this instant adds at the old epoch that still CAS
//!   `word` land in the old slice, which is expired for every reader at the
//!   new epoch: as if they had run just before the recycle.
//! - `epoch == e`: CAS `word` from the snapshot to `tag(e) | count + n` if the
//!   tag is `tag(e)`, or to `tag(e) | n` if it is the previous tag: the
//!   expired count is cleared *in the same atomic step* as the add.
//!
//! No step waits for another thread: each retry follows a CAS that failed
//! because another thread's CAS succeeded (lock-free).
//!
//! # Orderings
//! Writes are `AcqRel` CASes, reads `Acquire` loads. The pairs that matter:
//! a reader that sees a recycled `word` (written after the `epoch` CAS in
//! the recycler's order) must see that `epoch` on its re-read; and a reader
//! that sees a new `epoch` must see a `word` at least as new as the one the
//! epoch's installer checked (invariant 2).
//!
//! # Folding cells (multi-level windows)
//! A [`MultiWindow`](crate::MultiWindow) does not drop a recycled count: it
//! moves it to a coarser ring. Its cells ([`SliceCell::add_folding`]) have
//! one more state, *sealed*: the count field all ones ([`SEALED`], one above
//! [`MAX_SLICE_COUNT`]). A recycle there first *takes* the count with a CAS
//! to `tag(epoch) | SEALED` (exactly one thread gets it, and hands it on),
//! then moves `epoch`; a sealed cell refuses adds at its epoch (they go to
//! the coarser ring). Invariant 2 becomes: a word with `tag(prev)` is
//! always `tag(prev) | SEALED`, so the replace step discards nothing. The
//! same snapshot, CAS-against-snapshot and two-step rules apply.
//!
//! # ABA bound
//! A thread descheduled between its snapshot and its CAS while the same
//! cell is recycled twice *and* comes back to the identical 64-bit word
//! (same 16-bit tag, so at least 2^16 epochs later, and the same count)
//! could succeed with a stale decision. That needs a pause of more than
//! 65,536 slice lengths at the exact instruction and a matching count; we
//! document it rather than pay for 128-bit atomics.

use crate::sync::{AtomicU64, Ordering};

// The cell word `tag:16 | count:48`. The per-key windows' compact row 0
// (`crate::keyed`) stores the same word without the epoch beside it, so the
// format and its helpers below are shared with it.
const TAG_BITS: u32 = 16;
const COUNT_BITS: u32 = 64 - TAG_BITS;
/// The tag field's mask: a tag is an epoch's low 16 bits.
pub(crate) const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// The count field of a cell word: 48 bits.
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The largest count one slice cell (one slice of one stripe) holds, 2^48 - 2
/// (about 2.8e14); adds beyond it saturate there. The all-ones count is
/// reserved: it marks a *sealed* cell of a
/// [`MultiWindow`](crate::MultiWindow), whose count has moved to a coarser
/// level. Sums add cells with saturation at
/// `u64::MAX`.
pub const MAX_SLICE_COUNT: u64 = COUNT_MASK - 1;

/// The largest stride (ring length) the two-step rule supports: a jump of
/// `e - stride` must not alias the old tag, so `stride < 2^16`.
pub(crate) const MAX_STRIDE: u64 = TAG_MASK;

#[inline]
pub(crate) fn tag(epoch: u64) -> u64 {
    epoch & TAG_MASK
}

#[inline]
pub(crate) fn pack(tag: u64, count: u64) -> u64 {
    (tag << COUNT_BITS) | count
}

#[inline]
pub(crate) fn tag_of(word: u64) -> u64 {
    word >> COUNT_BITS
}

#[inline]
pub(crate) fn count_of(word: u64) -> u64 {
    word & COUNT_MASK
}

/// What became of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Counted in its own epoch's slice.
    Recorded,
    /// The slot already holds a later epoch: the add is older than the ring.
    TooOld,
}

/// One slot of a ring: 16 bytes.
#[derive(Debug)]
pub(crate) struct SliceCell {
    epoch: AtomicU64,
    word: AtomicU64,
}

impl SliceCell {
    /// A cell holding `epoch` with count 0.
    pub(crate) fn new(epoch: u64) -> Self {
        SliceCell {
            epoch: AtomicU64::new(epoch),
            word: AtomicU64::new(pack(tag(epoch), 0)),
        }
    }

    /// A consistent `(epoch, word)` pair (see the module docs).
    #[inline]
    fn snapshot(&self) -> (u64, u64) {
        let mut e1 = self.epoch.load(Ordering::Acquire);
        loop {
            let w = self.word.load(Ordering::Acquire);
            let e2 = self.epoch.load(Ordering::Acquire);
            if e1 == e2 {
                return (e1, w);
            }
            e1 = e2;
        }
    }

    /// CASes `epoch` from `ew` towards `e` (`ew < e`, same slot): to `e`, or
    /// to `e - stride` when `e` has `ew`'s tag (invariant 3: never move to
    /// an epoch with the same tag).
    #[inline]
    fn move_epoch(&self, ew: u64, e: u64, stride: u64, contended: &mut bool) {
        let target = if tag(e) == tag(ew) { e - stride } else { e };
        if self
            .epoch
            .compare_exchange(ew, target, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            *contended = true;
        }
    }

    /// `(epoch, count)`: the epoch the cell holds and that epoch's count (0
    /// while a recycle into it is unfinished).
    #[inline]
    pub(crate) fn read(&self) -> (u64, u64) {
        let (e, w) = self.snapshot();
        if tag_of(w) == tag(e) {
            (e, count_of(w))
        } else {
            (e, 0)
        }
    }

    /// Adds `n` (> 0) at epoch `e`. `stride` is the ring length (the distance
    /// between epochs that share this slot), `0 < stride <= MAX_STRIDE`.
    /// Sets `*contended` when a CAS failed because another thread wrote.
    #[inline]
    pub(crate) fn add(&self, e: u64, n: u64, stride: u64, contended: &mut bool) -> Added {
        debug_assert!(stride > 0 && stride <= MAX_STRIDE);
        loop {
            let (ew, w) = self.snapshot();
            if ew == e {
                let new = if tag_of(w) == tag(e) {
                    let c = count_of(w);
                    if c == MAX_SLICE_COUNT {
                        return Added::Recorded; // saturated: nothing to write
                    }
                    pack(tag(e), c.saturating_add(n).min(MAX_SLICE_COUNT))
                } else {
                    // The previous epoch's count is still here: replace it.
                    pack(tag(e), n.min(MAX_SLICE_COUNT))
                };
                match self
                    .word
                    .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Added::Recorded,
                    Err(_) => *contended = true,
                }
            } else if ew > e {
                return Added::TooOld;
            } else if tag_of(w) != tag(ew) {
                // Finish the recycle into `ew` (its count is 0 so far).
                if self
                    .word
                    .compare_exchange(w, pack(tag(ew), 0), Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    *contended = true;
                }
            } else {
                self.move_epoch(ew, e, stride, contended);
            }
        }
    }
}

impl SliceCell {
    /// Takes the cell's count (leaving 0 at the same epoch): `(epoch,
    /// count)`, or `None` when it holds nothing to take (count 0, a recycle
    /// in progress, or a sealed cell). An add racing the take lands before
    /// it (and is taken) or after it (and stays): the take is one CAS of the
    /// word against a snapshot, like every write of the protocol.
    pub(crate) fn take(&self) -> Option<(u64, u64)> {
        loop {
            let (e, w) = self.snapshot();
            let c = count_of(w);
            if tag_of(w) != tag(e) || c == 0 || c == SEALED {
                return None;
            }
            if self
                .word
                .compare_exchange(w, pack(tag(e), 0), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some((e, c));
            }
        }
    }
}

/// The count value that marks a cell *sealed* (folding rows only; see
/// [`SliceCell::add_folding`]), one above [`MAX_SLICE_COUNT`] so that no
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

    /// The fast path of [`SliceCell::add_folding`]: adds `n` (> 0) at
    /// epoch `e` if the cell holds `e`, unsealed and below saturation, with
    /// one CAS. `false` (and `*contended` on a failed CAS) sends the caller
    /// to the full protocol.
    #[inline]
    pub(crate) fn try_add_folding(&self, e: u64, n: u64, contended: &mut bool) -> bool {
        let (ew, w) = self.snapshot();
        let c = count_of(w);
        if ew != e || tag_of(w) != tag(e) || c >= MAX_SLICE_COUNT {
            return false;
        }
        let new = pack(tag(e), c.saturating_add(n).min(MAX_SLICE_COUNT));
        match self
            .word
            .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(_) => {
                *contended = true;
                false
            }
        }
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
    ///   [`MAX_SLICE_COUNT`]).
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
    pub(crate) fn add_folding(
        &self,
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
                if c == MAX_SLICE_COUNT {
                    return Added::Recorded; // saturated: nothing to write
                }
                pack(tag(e), c.saturating_add(n).min(MAX_SLICE_COUNT))
            } else if ew == e {
                pack(tag(e), n.min(MAX_SLICE_COUNT))
            } else if ew > e {
                return Added::TooOld;
            } else if !current {
                pack(tag(ew), SEALED)
            } else if c != SEALED {
                if c > 0 {
                    f.open();
                }
                match self.word.compare_exchange(
                    w,
                    pack(tag(ew), SEALED),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) if c > 0 => f.fold(ew, c),
                    Ok(_) => {}
                    Err(_) => *contended = true,
                }
                continue;
            } else {
                self.move_epoch(ew, e, stride, contended);
                continue;
            };
            match self
                .word
                .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if ew == e => return Added::Recorded,
                Ok(_) => {}
                Err(_) => *contended = true,
            }
        }
    }
}

/// Cells per 128-byte chunk of a [`CellRow`] (16-byte cells).
const CHUNK: usize = 8;

/// Eight cells on their own 128-byte line pair (see `crate::counter` for
/// why 128 and not 64).
#[repr(align(128))]
struct Chunk([SliceCell; CHUNK]);

/// A row of slice cells padded to whole 128-byte lines: one stripe's ring
/// (or rings), so that two stripes never share a cache line. Used by the
/// window, the multi-level window and the per-key extension rows.
pub(crate) struct CellRow {
    chunks: Box<[Chunk]>,
}

impl CellRow {
    /// `len` cells, cell `j` starting at epoch `j` with count 0 (the slot's
    /// first epoch; epochs before time 0 count nothing).
    pub(crate) fn new(len: usize) -> CellRow {
        CellRow::from_epochs((0..len as u64).collect())
    }

    /// One cell per initial epoch (count 0 each), padded to whole chunks.
    pub(crate) fn from_epochs(mut epochs: Vec<u64>) -> CellRow {
        let padded = epochs.len().div_ceil(CHUNK) * CHUNK;
        epochs.resize(padded, 0);
        CellRow {
            chunks: epochs
                .chunks_exact(CHUNK)
                .map(|c| Chunk(std::array::from_fn(|i| SliceCell::new(c[i]))))
                .collect(),
        }
    }

    /// Cell `i`.
    #[inline]
    pub(crate) fn cell(&self, i: usize) -> &SliceCell {
        &self.chunks[i / CHUNK].0[i % CHUNK]
    }

    /// Cells held, padding included (a whole number of 8-cell chunks).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Heap bytes of a row of `len` cells (plus `size_of::<CellRow>()`).
    pub(crate) fn heap_bytes(len: usize) -> usize {
        len.div_ceil(CHUNK) * std::mem::size_of::<Chunk>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn add_same_epoch_accumulates() {
        let c = SliceCell::new(3);
        let mut k = false;
        assert_eq!(c.add(3, 5, 4, &mut k), Added::Recorded);
        assert_eq!(c.add(3, 2, 4, &mut k), Added::Recorded);
        assert_eq!(c.read(), (3, 7));
        assert!(!k);
    }

    #[test]
    fn recycle_clears_in_the_same_step() {
        let c = SliceCell::new(3);
        let mut k = false;
        c.add(3, 5, 4, &mut k);
        assert_eq!(c.add(7, 1, 4, &mut k), Added::Recorded);
        assert_eq!(c.read(), (7, 1));
        assert_eq!(c.add(3, 1, 4, &mut k), Added::TooOld);
        assert_eq!(c.read(), (7, 1));
    }

    #[test]
    fn jump_by_multiple_of_tag_space_does_not_alias() {
        let c = SliceCell::new(3);
        let mut k = false;
        c.add(3, 9, 4, &mut k);
        let far = 3 + (1u64 << 16) * 4; // same residue, same 16-bit tag
        assert_eq!(tag(far), tag(3));
        assert_eq!(c.add(far, 1, 4, &mut k), Added::Recorded);
        assert_eq!(c.read(), (far, 1));
    }

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
        assert_eq!(c.read_folding(), (0, MAX_SLICE_COUNT));
        c.add_folding(1, 1, 1, &mut k, &mut f);
        assert_eq!(f.folded, vec![(0, MAX_SLICE_COUNT)]);
    }

    #[test]
    fn saturates_at_cell_maximum() {
        let c = SliceCell::new(0);
        let mut k = false;
        c.add(0, MAX_SLICE_COUNT - 1, 1, &mut k);
        c.add(0, 10, 1, &mut k);
        assert_eq!(c.read(), (0, MAX_SLICE_COUNT));
        c.add(0, u64::MAX, 1, &mut k);
        assert_eq!(c.read(), (0, MAX_SLICE_COUNT));
    }
}
