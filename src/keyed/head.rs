//! A key's *head*: the cell, inline in the key's map slot, that holds the
//! count of the key's newest slice. Nearly every add is one CAS here.
//!
//! When an add arrives for a later slice, the head *folds*: it hands its
//! count to the key's out-of-line window (`ext.rs`, row 0) and moves on to
//! the new slice, once per slice per key. A count that is already outside
//! the window of the new slice is dropped instead (a key seen in one slice
//! per window never allocates a window at all).
//!
//! # Layout (16 bytes)
//! `epoch` (full 64 bits) and `word = tag:16 | state:2 | count:46`: the
//! slice cell's `tag:16 | count:48` word ([`crate::slice`]'s helpers), its
//! count field split into a 2-bit state and a 46-bit count. States:
//! - `LIVE`: `count` adds at the tag's epoch.
//! - `SEALED`: the count was taken by a fold (count field 0); adds at this
//!   epoch are refused ([`HeadAdd::Late`]: the caller files them in row 0),
//!   a later epoch may recycle the head.
//! - `CLOSED_LIVE` / `CLOSED_SEALED`: closed for good by an eviction or a
//!   move (`state.rs`), keeping the count and the state it had (so a
//!   reopen is exact). Every add is refused ([`HeadAdd::Closed`]), and
//!   nothing moves the epoch.
//!
//! # Invariants
//! 1. `epoch` only increases, by CAS, and only from a `SEALED` word with
//!    its tag.
//! 2. `tag(word)` is `tag(epoch)`, or `tag(prev)` for the value `prev`
//!    that `epoch` held before, and then the word is `SEALED` (or closed
//!    from `SEALED`) with count 0: a recycle that no add has finished yet.
//! 3. `tag(epoch) != tag(prev)`: a move by a multiple of 2^16 epochs is
//!    made in two steps (as in [`crate::slice`], stride 1).
//! 4. A count leaves a `LIVE` word only by a CAS that seals it, and the
//!    sealer either drops it (its epoch is outside the window of the add's
//!    epoch) or passes it to its [`Folder`], whose `open` ran before the
//!    CAS; so at every moment a live count is in the head, in row 0, or in
//!    the hands of a folder whose fold is open (readers use the fold marks
//!    of `ext.rs`).
//!
//! # Protocol
//! Every step is a CAS against a snapshot (`epoch`, `word`, `epoch` again,
//! retried until the two epoch loads agree), exactly as in
//! [`crate::slice`]; a failed CAS means another thread wrote (contention)
//! and the step is retried from a fresh snapshot. No step waits.
//!
//! # Orderings
//! Loads `Acquire`, CASes `AcqRel`: a reader that sees a recycled word
//! sees its epoch on the re-read; a thread that sees a seal sees what the
//! sealer did before it (its fold mark).

use crate::slice::{count_of, pack, tag, tag_of};
use crate::sync::{AtomicU64, Ordering};

const STATE_SHIFT: u32 = 46;
const COUNT_MASK: u64 = (1 << STATE_SHIFT) - 1;
/// The largest count the head holds for one slice (2^46 - 1, about 7e13);
/// adds beyond it saturate there.
pub(crate) const HEAD_MAX: u64 = COUNT_MASK;

const LIVE: u64 = 0;
const SEALED: u64 = 1;
/// Bit of the state that marks a closed head (the low bit keeps whether it
/// was `LIVE` or `SEALED` before).
const CLOSED: u64 = 2;

#[inline]
fn word(tag: u64, state: u64, count: u64) -> u64 {
    pack(tag, state << STATE_SHIFT | count)
}

#[inline]
fn state(w: u64) -> u64 {
    count_of(w) >> STATE_SHIFT
}

#[inline]
fn count(w: u64) -> u64 {
    count_of(w) & COUNT_MASK
}

/// What became of an add on the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadAdd {
    /// Counted in the head; `after` is the head's count right after.
    Added { after: u64 },
    /// The head holds a later epoch `head`, or has sealed this one
    /// (`head == e`): the add belongs in row 0.
    Late { head: u64 },
    /// The head is closed: the key is being evicted or moved.
    Closed,
}

/// Where a head's taken count goes (see invariant 4).
pub(crate) trait Folder {
    /// Called before a live count `count` of `epoch` is taken.
    fn open(&mut self, epoch: u64, count: u64);
    /// The count was taken; place it.
    fn fold(&mut self, epoch: u64, count: u64);
}

/// The head cell (see the module docs).
#[derive(Debug)]
pub(crate) struct Head {
    epoch: AtomicU64,
    word: AtomicU64,
}

impl Head {
    /// A head at epoch 0, count 0.
    pub(crate) fn new() -> Head {
        Head {
            epoch: AtomicU64::new(0),
            word: AtomicU64::new(word(0, LIVE, 0)),
        }
    }

    /// Resets a head that no thread can see (a slot being prepared).
    pub(crate) fn reset(&self) {
        self.epoch.store(0, Ordering::Relaxed);
        self.word.store(word(0, LIVE, 0), Ordering::Relaxed);
    }

    /// A consistent `(epoch, word)`.
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

    /// CASes the word from `w`; a failure sets `*contended`.
    ///
    /// Written as an `if`, not `*contended |= !ok`: rustc 1.95.0 compiles
    /// that form, inlined into `add`'s `after == c || self.cas(..)`, to an
    /// unconditional store of `true` after the `lock cmpxchg` (every add
    /// looked contended and striped its key). The test
    /// `single_threaded_adds_are_never_contended` guards it.
    #[inline]
    fn cas(&self, w: u64, new: u64, contended: &mut bool) -> bool {
        let ok = self
            .word
            .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !ok {
            *contended = true;
        }
        ok
    }

    /// Adds `n` (> 0) at epoch `e` for a window of `slices` slices. A live
    /// count of an older epoch still inside `e`'s window is taken and
    /// passed to `f`; an older one is dropped. Sets `*contended` when a CAS
    /// failed because another thread wrote.
    #[inline]
    pub(crate) fn add(
        &self,
        e: u64,
        n: u64,
        slices: u64,
        contended: &mut bool,
        f: &mut impl Folder,
    ) -> HeadAdd {
        loop {
            let (ew, w) = self.snapshot();
            let st = state(w);
            if st & CLOSED != 0 {
                return HeadAdd::Closed;
            }
            let current = tag_of(w) == tag(ew);
            if ew == e {
                if !current {
                    // Finish the recycle into `e` with this add.
                    let after = n.min(HEAD_MAX);
                    if self.cas(w, word(tag(e), LIVE, after), contended) {
                        return HeadAdd::Added { after };
                    }
                } else if st == SEALED {
                    return HeadAdd::Late { head: ew };
                } else {
                    let c = count(w);
                    let after = c.saturating_add(n).min(HEAD_MAX);
                    if after == c || self.cas(w, word(tag(e), LIVE, after), contended) {
                        return HeadAdd::Added { after };
                    }
                }
            } else if ew > e {
                return HeadAdd::Late { head: ew };
            } else if !current || st == SEALED {
                if !current {
                    // A recycle into `ew` nobody finished: seal it empty.
                    self.cas(w, word(tag(ew), SEALED, 0), contended);
                } else {
                    self.move_epoch(ew, e, contended);
                }
            } else {
                // Live at an older epoch: take the count (invariant 4).
                let c = count(w);
                let keep = c > 0 && e - ew < slices;
                if keep {
                    f.open(ew, c);
                }
                if self.cas(w, word(tag(ew), SEALED, 0), contended) && keep {
                    f.fold(ew, c);
                }
            }
        }
    }

    /// The fast path of [`add`](Self::add): adds `n` (> 0) at `e` if the
    /// head holds `e` live and below saturation, with one CAS. `false`
    /// (and `*contended` if the CAS failed) sends the caller to `add`.
    #[inline]
    pub(crate) fn try_add(&self, e: u64, n: u64, contended: &mut bool) -> Option<u64> {
        let (ew, w) = self.snapshot();
        let c = count(w);
        if ew != e || tag_of(w) != tag(e) || state(w) != LIVE || c == HEAD_MAX {
            return None;
        }
        let after = c.saturating_add(n).min(HEAD_MAX);
        self.cas(w, word(tag(e), LIVE, after), contended)
            .then_some(after)
    }

    /// CASes `epoch` from `ew` towards `e` (`ew < e`): to `e`, or to
    /// `e - 1` when `e` has `ew`'s tag (invariant 3).
    #[inline]
    fn move_epoch(&self, ew: u64, e: u64, contended: &mut bool) {
        let target = if tag(e) == tag(ew) { e - 1 } else { e };
        if self
            .epoch
            .compare_exchange(ew, target, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            *contended = true; // an `if`: see `cas`
        }
    }

    /// `(epoch, count)`: the count of the head's epoch (0 when sealed or
    /// mid-recycle). A closed head keeps its count.
    #[inline]
    pub(crate) fn read(&self) -> (u64, u64) {
        let (e, w) = self.snapshot();
        let live = tag_of(w) == tag(e) && state(w) & 1 == LIVE;
        (e, if live { count(w) } else { 0 })
    }

    /// Closes the head if its state is `(ew, w)` as returned by
    /// [`snapshot_for_close`](Self::snapshot_for_close); `false` if it
    /// changed. Returns nothing else: the closed word keeps the count.
    pub(crate) fn close(&self, snap: (u64, u64)) -> bool {
        let (ew, w) = snap;
        let closed = word(tag_of(w), state(w) | CLOSED, count(w));
        // The epoch cannot move under a CAS of the word from `w`: it only
        // moves from a sealed word, and it moving would not change `w`, so
        // check it again after.
        let ok = self
            .word
            .compare_exchange(w, closed, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        debug_assert!(!ok || self.epoch.load(Ordering::Acquire) >= ew);
        ok
    }

    /// The state a closer decides on: `(epoch, word)`, consistent.
    pub(crate) fn snapshot_for_close(&self) -> (u64, u64) {
        self.snapshot()
    }

    /// Whether a snapshot's live count (if any) is at an epoch before
    /// `first` (outside the window starting at `first`).
    pub(crate) fn idle_before(snap: (u64, u64), first: u64) -> bool {
        let (ew, w) = snap;
        let live = tag_of(w) == tag(ew) && state(w) & 1 == LIVE && count(w) > 0;
        !live || ew < first
    }

    /// Whether the head is closed.
    pub(crate) fn is_closed(&self) -> bool {
        state(self.word.load(Ordering::Acquire)) & CLOSED != 0
    }

    /// Reopens a closed head exactly as it was (an aborted eviction). Any
    /// thread may do it; it is deterministic, so racing reopeners agree.
    pub(crate) fn reopen(&self) {
        let w = self.word.load(Ordering::Acquire);
        if state(w) & CLOSED != 0 {
            let open = word(tag_of(w), state(w) & !CLOSED, count(w));
            let _ = self
                .word
                .compare_exchange(w, open, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Takes the live count (leaving 0 at the same epoch): `(epoch,
    /// count)`, or `None` when there is nothing to take. An add racing it
    /// lands before (and is taken) or after (and stays).
    pub(crate) fn take(&self) -> Option<(u64, u64)> {
        loop {
            let (ew, w) = self.snapshot();
            if tag_of(w) != tag(ew) || state(w) != LIVE || count(w) == 0 {
                return None;
            }
            if self
                .word
                .compare_exchange(
                    w,
                    word(tag(ew), LIVE, 0),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return Some((ew, count(w)));
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        opened: Vec<(u64, u64)>,
        folded: Vec<(u64, u64)>,
    }
    impl Folder for Log {
        fn open(&mut self, e: u64, c: u64) {
            self.opened.push((e, c));
        }
        fn fold(&mut self, e: u64, c: u64) {
            self.folded.push((e, c));
        }
    }

    fn add(h: &Head, e: u64, n: u64, f: &mut Log) -> HeadAdd {
        let mut k = false;
        h.add(e, n, 10, &mut k, f)
    }

    #[test]
    fn adds_fold_and_drop() {
        let h = Head::new();
        let mut f = Log::default();
        assert_eq!(add(&h, 5, 2, &mut f), HeadAdd::Added { after: 2 });
        assert_eq!(add(&h, 5, 3, &mut f), HeadAdd::Added { after: 5 });
        // A later slice inside the window: the count is folded.
        assert_eq!(add(&h, 7, 1, &mut f), HeadAdd::Added { after: 1 });
        assert_eq!(f.folded, vec![(5, 5)]);
        assert_eq!(f.opened, f.folded);
        assert_eq!(h.read(), (7, 1));
        // Late adds are refused: older epoch, or the sealed one.
        assert_eq!(add(&h, 5, 1, &mut f), HeadAdd::Late { head: 7 });
        // A slice a whole window later: the count is dropped, not folded.
        assert_eq!(add(&h, 17, 4, &mut f), HeadAdd::Added { after: 4 });
        assert_eq!(f.folded.len(), 1);
        assert_eq!(h.read(), (17, 4));
    }

    #[test]
    fn a_sealed_epoch_refuses_late_adds() {
        // A head sealed at 3 whose recycle nobody finished: an add at 3 is
        // late, an add at 4 recycles.
        let h = Head::new();
        let mut f = Log::default();
        add(&h, 3, 1, &mut f);
        h.word.store(word(tag(3), SEALED, 0), Ordering::Relaxed);
        assert_eq!(add(&h, 3, 1, &mut f), HeadAdd::Late { head: 3 });
        assert_eq!(add(&h, 4, 1, &mut f), HeadAdd::Added { after: 1 });
        assert!(f.folded.is_empty());
    }

    #[test]
    fn a_jump_by_the_tag_space_is_two_steps() {
        let h = Head::new();
        let mut f = Log::default();
        add(&h, 3, 9, &mut f);
        let far = 3 + (1u64 << 16);
        assert_eq!(add(&h, far, 1, &mut f), HeadAdd::Added { after: 1 });
        assert_eq!(h.read(), (far, 1));
        assert!(f.folded.is_empty(), "a whole window later: dropped");
    }

    #[test]
    fn close_reopen_and_take() {
        let h = Head::new();
        let mut f = Log::default();
        add(&h, 2, 6, &mut f);
        let snap = h.snapshot_for_close();
        assert!(!Head::idle_before(snap, 2));
        assert!(Head::idle_before(snap, 3));
        assert!(h.close(snap));
        assert!(h.is_closed());
        assert_eq!(add(&h, 2, 1, &mut f), HeadAdd::Closed);
        assert_eq!(add(&h, 9, 1, &mut f), HeadAdd::Closed);
        assert_eq!(h.read(), (2, 6), "a closed head keeps its count");
        assert!(!h.close(snap), "the word changed");
        h.reopen();
        assert!(!h.is_closed());
        assert_eq!(add(&h, 2, 1, &mut f), HeadAdd::Added { after: 7 });
        assert_eq!(h.take(), Some((2, 7)));
        assert_eq!(h.take(), None);
        assert_eq!(h.read(), (2, 0));
    }

    /// A single thread never sees contention, whatever path its adds take
    /// (same epoch, recycle, fold, drop, late). Guards the miscompilation
    /// noted at `Head::cas`: run in release as well (`scripts/test.sh`).
    #[test]
    fn single_threaded_adds_are_never_contended() {
        let h = Head::new();
        let mut f = Log::default();
        for (e, n) in [
            (0, 1),
            (0, 2),
            (1, 1),
            (3, 5),
            (3, 1),
            (2, 1),
            (40, 1),
            (40, 9),
        ] {
            let mut k = false;
            h.add(e, n, 10, &mut k, &mut f);
            assert!(!k, "add at {e}");
        }
    }

    #[test]
    fn saturates() {
        let h = Head::new();
        let mut f = Log::default();
        add(&h, 1, u64::MAX, &mut f);
        assert_eq!(add(&h, 1, 5, &mut f), HeadAdd::Added { after: HEAD_MAX });
        assert_eq!(h.read(), (1, HEAD_MAX));
    }
}
