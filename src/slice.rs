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
//!   [`MAX_COUNT_PER_SLICE`] (2^48 - 2, about 2.8e14 per slice per stripe;
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
//! The common case, `epoch == e` with the tag of `e` and room below the
//! saturation, has a fast path ([`SliceCell::try_add_as`]) on a two-load
//! snapshot: `epoch`, then `word`. The re-read of `epoch` is not needed
//! there: the CAS itself proves that `word` still holds `tag(e)`'s count, so
//! the add lands in `e`'s slice, or (if `epoch` moved on meanwhile and the
//! recycle is unfinished) in the expired slice of `e`, as above. Only the
//! ABA bound below can fool it, exactly as it can the full protocol.
//!
//! # A sole writer
//! A cell of an *owned* stripe (see [`crate::stripes`]) has one writing
//! thread. It runs the same steps on the same snapshots, but writes each
//! step with a plain `Release` store instead of a CAS ([`Writer::Sole`]):
//! with no other writer, every CAS would succeed, so the cell goes through
//! exactly the states the CAS protocol would, in the same order, and
//! readers (which never write) cannot tell the difference. That is what
//! makes an owned add a load and a store. A debug build checks, at every
//! step, that the word or epoch being replaced is still the one read.
//!
//! # Orderings
//! Writes are `AcqRel` CASes (or a sole writer's `Release` stores), reads
//! `Acquire` loads. The pairs that matter:
//! a reader that sees a recycled `word` (written after the `epoch` CAS in
//! the recycler's order) must see that `epoch` on its re-read; and a reader
//! that sees a new `epoch` must see a `word` at least as new as the one the
//! epoch's installer checked (invariant 2).
//!
//! # Folding cells (multi-level windows)
//! A [`MultiWindow`](crate::MultiWindow) does not drop a recycled count: it
//! moves it to a coarser ring. Its cells (`SliceCell::add_folding`, in
//! `slice/fold.rs`) have
//! one more state, *sealed*: the count field all ones ([`SEALED`](fold::SEALED), one above
//! [`MAX_COUNT_PER_SLICE`]). A recycle there first *takes* the count with a CAS
//! to `tag(epoch) | SEALED` (exactly one thread gets it, and hands it on),
//! then moves `epoch`; a sealed cell refuses adds at its epoch (they go to
//! the coarser ring). Invariant 2 becomes: a word with `tag(prev)` is
//! always `tag(prev) | SEALED`, so the replace step discards nothing. The
//! same snapshot, CAS-against-snapshot and two-step rules apply.
//!
//! The cells themselves are laid out in rows of whole 128-byte lines
//! (`CellRow`, in `slice/row.rs`).
//!
//! # ABA bound
//! A thread descheduled between its snapshot and its CAS while the same
//! cell is recycled twice *and* comes back to the identical 64-bit word
//! (same 16-bit tag, so at least 2^16 epochs later, and the same count)
//! could succeed with a stale decision. That needs a pause of more than
//! 65,536 slice lengths at the exact instruction and a matching count; we
//! document it rather than pay for 128-bit atomics.

use crate::stripes::Writer;
use crate::sync::{AtomicU64, Ordering};

mod fold;
mod row;

pub(crate) use fold::Fold;
pub(crate) use row::CellRow;

// The cell word `tag:16 | count:48`. The per-key windows' compact row 0
// (`crate::keyed`) stores the same word without the epoch beside it, so the
// format and its helpers below are shared with it.
const TAG_BITS: u32 = 16;
const COUNT_BITS: u32 = 64 - TAG_BITS;
/// The tag field's mask: a tag is an epoch's low 16 bits.
pub(crate) const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// The count field of a cell word: 48 bits.
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The most one slice counts per stripe (one slice of one writing
/// thread's row): 2^48 - 2, about 2.8e14; adds saturate there. A window's
/// sum adds the stripes' counts, saturating at `u64::MAX`. (The all-ones
/// count is reserved: it marks a *sealed* cell of a
/// [`MultiWindow`](crate::MultiWindow), whose count has moved to a coarser
/// level.)
pub const MAX_COUNT_PER_SLICE: u64 = COUNT_MASK - 1;

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

/// Writes `new` over `cur` (what the caller read from `atom`) as `writer`
/// may: a shared writer with a CAS (`false`: another thread wrote first), a
/// sole writer with a `Release` store (no other thread writes `atom`, so it
/// still holds `cur`).
#[inline(always)]
pub(crate) fn write(atom: &AtomicU64, cur: u64, new: u64, writer: Writer) -> bool {
    match writer {
        Writer::Sole => {
            debug_assert_eq!(
                atom.load(Ordering::Relaxed),
                cur,
                "a sole writer's cell changed under it"
            );
            atom.store(new, Ordering::Release);
            true
        }
        Writer::Shared => atom
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok(),
    }
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

    /// Moves `epoch` from `ew` towards `e` (`ew < e`, same slot): to `e`, or
    /// to `e - stride` when `e` has `ew`'s tag (invariant 3: never move to
    /// an epoch with the same tag).
    #[inline]
    fn move_epoch(&self, ew: u64, e: u64, stride: u64, writer: Writer, contended: &mut bool) {
        let target = if tag(e) == tag(ew) { e - stride } else { e };
        if !write(&self.epoch, ew, target, writer) {
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

    /// The fast path of every add (plain or folding): adds `n` at epoch `e`
    /// if the cell holds `e`, its word has `e`'s tag and `count + n` stays
    /// at most [`MAX_COUNT_PER_SLICE`] (so never on a sealed cell), with one
    /// write. `false` (and `*contended` if a CAS lost to another thread)
    /// sends the caller to the full protocol. See the module docs for why
    /// two loads suffice.
    #[inline(always)]
    pub(crate) fn try_add_as(&self, writer: Writer, e: u64, n: u64, contended: &mut bool) -> bool {
        let ew = self.epoch.load(Ordering::Acquire);
        let w = self.word.load(Ordering::Acquire);
        let c = w.wrapping_sub(pack(tag(e), 0));
        if ew != e || c > MAX_COUNT_PER_SLICE || n > MAX_COUNT_PER_SLICE - c {
            return false;
        }
        if write(&self.word, w, w + n, writer) {
            return true;
        }
        *contended = true;
        false
    }

    /// The owner's fastest add: adds `n` if it fits below the saturation,
    /// with one load and one store. The caller must be the cell's sole
    /// writer and know that the cell holds the add's epoch with that
    /// epoch's tag (a window's slice cache); `false` sends it to the full
    /// protocol.
    #[inline(always)]
    pub(crate) fn try_add_current(&self, n: u64) -> bool {
        let w = self.word.load(Ordering::Relaxed);
        let c = count_of(w);
        if c > MAX_COUNT_PER_SLICE || n > MAX_COUNT_PER_SLICE - c {
            return false;
        }
        debug_assert_eq!(tag_of(w), tag(self.epoch.load(Ordering::Relaxed)));
        self.word.store(w + n, Ordering::Release);
        true
    }

    /// Adds `n` (> 0) at epoch `e` with CASes (a shared writer). `stride`
    /// is the ring length (the distance between epochs that share this
    /// slot), `0 < stride <= MAX_STRIDE`. Sets `*contended` when a CAS
    /// failed because another thread wrote. (The windows call
    /// [`add_as`](Self::add_as) with their writer kind; the unit tests
    /// call this.)
    #[cfg(all(test, not(loom)))]
    pub(crate) fn add(&self, e: u64, n: u64, stride: u64, contended: &mut bool) -> Added {
        self.add_as(Writer::Shared, e, n, stride, contended)
    }

    /// [`SliceCell::add`] as `writer` (see "A sole writer" in the module
    /// docs).
    pub(crate) fn add_as(
        &self,
        writer: Writer,
        e: u64,
        n: u64,
        stride: u64,
        contended: &mut bool,
    ) -> Added {
        debug_assert!(stride > 0 && stride <= MAX_STRIDE);
        loop {
            let (ew, w) = self.snapshot();
            if ew == e {
                let new = if tag_of(w) == tag(e) {
                    let c = count_of(w);
                    if c == MAX_COUNT_PER_SLICE {
                        return Added::Recorded; // saturated: nothing to write
                    }
                    pack(tag(e), c.saturating_add(n).min(MAX_COUNT_PER_SLICE))
                } else {
                    // The previous epoch's count is still here: replace it.
                    pack(tag(e), n.min(MAX_COUNT_PER_SLICE))
                };
                if write(&self.word, w, new, writer) {
                    return Added::Recorded;
                }
                *contended = true;
            } else if ew > e {
                return Added::TooOld;
            } else if tag_of(w) != tag(ew) {
                // Finish the recycle into `ew` (its count is 0 so far).
                if !write(&self.word, w, pack(tag(ew), 0), writer) {
                    *contended = true;
                }
            } else {
                self.move_epoch(ew, e, stride, writer, contended);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
