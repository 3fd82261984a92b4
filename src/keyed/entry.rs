//! One key's window: the per-key protocol (striping, eviction handshake and
//! the hot flag). The map around it is in [`super::map`].
//!
//! # Layout
//! An [`Entry`] is a header (reference count, hot word, row 0's guard,
//! extension pointer) followed, in the same allocation ([`EntryRef`]), by
//! *row 0*: `S` epoch-tagged [`SliceCell`]s (16 bytes each, the core
//! protocol of [`crate::slice`]). A cold key only ever uses row 0. The first time an add sees contention
//! on a key (a failed CAS on row 0's guard or cell) the key gets an
//! *extension*: `cap` more rows (`cap` = CPUs rounded up to a power of two),
//! each on its own 128-byte lines, and from then on every thread adds to
//! the extension row its probe selects, so a hot key does not serialize on
//! one word. Sums read every row.
//!
//! # Guards: the eviction handshake
//! Every row has a guard word: `version << 24 | pins << 2 | DORMANT | RETIRED`.
//! - An add *pins* its row (CAS `s -> s + PIN`, refused if the row is
//!   `RETIRED` or `DORMANT`), adds to a cell, then *unpins*
//!   (`fetch_add(VERSION - PIN)`: one fewer pin, a new version).
//! - The evictor ([`Entry::try_retire`]) snapshots row 0's guard, then the
//!   extension pointer and every extension guard; gives up if any row is
//!   pinned or retired; reads every cell and gives up if any holds a count
//!   at an epoch inside (or after) the window; then CASes each extension
//!   guard, and row 0's guard last, from its snapshot to `RETIRED`. A failed
//!   CAS restores the guards it retired (to their exact snapshot) and gives
//!   up. Row 0 `RETIRED` means the entry is dead: the caller removes it
//!   from the map, and an add that finds it dead looks the key up again.
//! - Extension rows start `DORMANT` (adds fall back to row 0). A thread
//!   activates them (CAS `DORMANT -> live`) only after it has seen the
//!   extension pointer and then bumped row 0's version (refused once row 0
//!   is retired).
//!
//! # Why no add is lost
//! Take an add that completed (unpinned) in row `r` of an entry whose
//! eviction succeeded. If its unpin is before the evictor's snapshot of
//! `r`'s guard in that word's modification order, the evictor's `Acquire`
//! load synchronizes with the `Release` unpin (or a later RMW of its
//! release sequence), so the cell read sees the add: the evictor would have
//! given up. Otherwise the add pinned after the snapshot, so the guard's
//! value changed and the evictor's CAS from the snapshot fails, or the pin
//! saw `RETIRED` and the add was never written. For an extension row the
//! evictor did not see (null pointer when it looked): rows become live only
//! after a version bump of row 0 that follows the pointer's installation;
//! if that bump preceded the evictor's snapshot of row 0, the evictor would
//! have seen the pointer (coherence), so the bump follows the snapshot and
//! the evictor's final CAS fails, or the bump sees `RETIRED` and the rows
//! never go live. Adds never write a row they have not pinned from a live
//! guard, so a retired row holds no add that was not counted, and an aborted
//! eviction (rows restored) double-counts nothing.
//!
//! Versions are 40 bits: the only ABA is an evictor paused between its
//! snapshot and its CAS while exactly 2^40 adds pass through one row.
//!
//! # The hot word
//! `HOT | he`: whether the key is hot and the epoch `he` of the latest add
//! that saw it at or above the threshold (or that cooled it). An add that
//! is not already hot at its epoch writes its cell, does an RMW on the hot
//! word ([`Entry::hot_sync`]: the latest of racing adds then sees all their
//! cells), reads the window, and at epoch `e` with `before` and `after`
//! (see [`decide`]) CASes the hot word; only
//! a CAS that moves the key from cold to hot, or from hot at an epoch
//! before `e` to hot at `e` after seeing `before < threshold`, reports.
//! Within one epoch a window's sum only grows, so the rule allows at most
//! one report per key per epoch; the CAS from a state with `he < e` to one
//! with `he = e` can succeed once per epoch, so racing adds report exactly
//! once.
//!
//! # Orderings
//! Guard pins and unpins are `AcqRel` RMWs, evictor snapshots `Acquire`
//! loads, its CASes `AcqRel`; the extension pointer is published by an
//! `AcqRel` CAS and read with `Acquire`. Cells follow [`crate::slice`].

use crate::slice::{Added, CellRow, SliceCell};
use crate::stripes::install_if_null;
use crate::sync::{probe, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::alloc::{self, Layout};
use std::ptr::NonNull;

const RETIRED: u64 = 1;
const DORMANT: u64 = 1 << 1;
const PIN: u64 = 1 << 2;
const PIN_MASK: u64 = ((1 << 22) - 1) << 2;
const VERSION: u64 = 1 << 24;

/// The hot bit of the hot word; the other 63 bits are an epoch.
const HOT: u64 = 1 << 63;
const EPOCH_MASK: u64 = HOT - 1;

/// One extension row: its guard alone on a line, its cells on their own.
#[repr(align(128))]
struct ExtRow {
    guard: AtomicU64,
    cells: CellRow,
}

impl ExtRow {
    fn new(slices: usize) -> ExtRow {
        ExtRow {
            guard: AtomicU64::new(DORMANT),
            cells: CellRow::new(slices),
        }
    }

    #[inline]
    fn cell(&self, slot: usize) -> &SliceCell {
        self.cells.cell(slot)
    }
}

struct Ext {
    rows: Box<[ExtRow]>,
}

/// What became of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Counted.
    Recorded,
    /// Older than the ring: dropped (as [`crate::SlidingWindow::add_at`]).
    TooOld,
    /// The entry was retired: nothing was written; look the key up again.
    Dead,
}

/// One key's window. See the module docs. An `Entry` only lives in the
/// allocation of an [`EntryRef`], followed by its `slices` row-0 cells.
pub(crate) struct Entry {
    refs: AtomicUsize,
    hot: AtomicU64,
    guard: AtomicU64,
    ext: AtomicPtr<Ext>,
    slices: usize,
}

/// Offset of the row-0 cells from the start of an entry's allocation.
const fn cells_offset() -> usize {
    let a = std::mem::align_of::<SliceCell>();
    std::mem::size_of::<Entry>().div_ceil(a) * a
}

/// A counted reference to an [`Entry`] and its cells, allocated together:
/// one allocation per key, so the header and the cells share cache lines
/// and an add on a cold key takes one cache miss fewer than with an `Arc`
/// of a header pointing at a boxed slice. The map holds one reference,
/// handles one each; the last one dropped frees the entry.
pub(crate) struct EntryRef {
    ptr: NonNull<Entry>,
}

// SAFETY: an `EntryRef` is a shared reference to atomics only (the entry's
// fields and cells); the count keeps the memory alive for every reference.
unsafe impl Send for EntryRef {}
// SAFETY: as above: every access through `&EntryRef` is to atomics.
unsafe impl Sync for EntryRef {}

impl EntryRef {
    fn layout(slices: usize) -> Layout {
        let cells = Layout::array::<SliceCell>(slices).expect("slices <= MAX_SLICES fits");
        let (l, off) = Layout::new::<Entry>()
            .extend(cells)
            .expect("an entry's size fits in isize");
        debug_assert_eq!(off, cells_offset());
        l.pad_to_align()
    }

    /// A fresh entry (one reference) with `slices` empty cells.
    pub(crate) fn new(slices: usize) -> EntryRef {
        let layout = Self::layout(slices);
        // SAFETY: `layout` has a non-zero size (it holds an `Entry`).
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Entry>()) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `raw` is a fresh allocation of `layout`: an `Entry` at
        // offset 0 and `slices` cells at `cells_offset()`, each written
        // once here before the pointer is shared.
        unsafe {
            ptr.as_ptr().write(Entry {
                refs: AtomicUsize::new(1),
                hot: AtomicU64::new(0),
                guard: AtomicU64::new(0),
                ext: AtomicPtr::new(std::ptr::null_mut()),
                slices,
            });
            let cells = raw.add(cells_offset()).cast::<SliceCell>();
            for i in 0..slices {
                cells.add(i).write(SliceCell::new(i as u64));
            }
        }
        EntryRef { ptr }
    }

    /// Whether two references point at the same entry.
    #[inline]
    pub(crate) fn ptr_eq(a: &EntryRef, b: &EntryRef) -> bool {
        a.ptr == b.ptr
    }
}

impl std::ops::Deref for EntryRef {
    type Target = Entry;
    #[inline]
    fn deref(&self) -> &Entry {
        // SAFETY: the entry lives until its last reference is dropped, and
        // this one is live.
        unsafe { self.ptr.as_ref() }
    }
}

impl Clone for EntryRef {
    fn clone(&self) -> Self {
        self.refs.fetch_add(1, Ordering::Relaxed);
        EntryRef { ptr: self.ptr }
    }
}

impl Drop for EntryRef {
    fn drop(&mut self) {
        // `AcqRel`: the last decrement sees every other holder's accesses
        // before it frees (what `Arc` gets from `Release` plus a fence).
        if self.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let slices = self.slices;
        let raw = self.ptr.as_ptr().cast::<u8>();
        // SAFETY: this was the last reference, so nobody else can reach the
        // allocation. Its cells and entry were initialized in `new` and are
        // dropped once here, then the memory is freed with its layout.
        unsafe {
            let cells = raw.add(cells_offset()).cast::<SliceCell>();
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(cells, slices));
            std::ptr::drop_in_place(self.ptr.as_ptr());
            alloc::dealloc(raw, Self::layout(slices));
        }
    }
}

/// Pins a guard; `Err(state)` if it is retired or dormant. Sets
/// `*contended` if a CAS failed because another thread changed the word.
#[inline]
fn pin(guard: &AtomicU64, contended: &mut bool) -> Result<(), u64> {
    let mut s = guard.load(Ordering::Acquire);
    loop {
        if s & (RETIRED | DORMANT) != 0 {
            return Err(s);
        }
        match guard.compare_exchange_weak(s, s + PIN, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(actual) => {
                if actual != s {
                    *contended = true;
                }
                s = actual;
            }
        }
    }
}

#[inline]
fn unpin(guard: &AtomicU64) {
    guard.fetch_add(VERSION.wrapping_sub(PIN), Ordering::AcqRel);
}

impl Entry {
    /// Row 0's cells, which follow the entry in its allocation.
    #[inline]
    fn cells(&self) -> &[SliceCell] {
        // SAFETY: an `Entry` only exists inside an `EntryRef` allocation,
        // where `slices` initialized cells start at `cells_offset()`; they
        // live as long as the entry.
        unsafe {
            let base = (self as *const Entry).cast::<u8>().add(cells_offset());
            std::slice::from_raw_parts(base.cast::<SliceCell>(), self.slices)
        }
    }

    #[inline]
    fn ext(&self) -> Option<&Ext> {
        let p = self.ext.load(Ordering::Acquire);
        // SAFETY: a non-null `ext` came from `Box::into_raw` in `install`,
        // is never replaced, and is freed only in `Drop` (`&mut self`).
        unsafe { p.as_ref() }
    }

    /// Whether the entry has been retired (it is dead for adds).
    pub(crate) fn is_dead(&self) -> bool {
        self.guard.load(Ordering::Acquire) & RETIRED != 0
    }

    /// Whether the key has striped rows (it saw contention).
    pub(crate) fn is_striped(&self) -> bool {
        self.ext().is_some()
    }

    /// Adds `n` (> 0) at epoch `e`; `slices` is the ring length and
    /// `stripes` the extension's row count (a power of two).
    #[inline]
    pub(crate) fn add(&self, e: u64, n: u64, slices: usize, stripes: usize) -> Outcome {
        let slot = (e % slices as u64) as usize;
        let stride = slices as u64;
        let mut contended = false;
        if let Some(ext) = self.ext() {
            let row = &ext.rows[probe::get() as usize & (ext.rows.len() - 1)];
            match pin(&row.guard, &mut contended) {
                Ok(()) => {
                    let added = row.cell(slot).add(e, n, stride, &mut contended);
                    unpin(&row.guard);
                    if contended {
                        probe::rehash();
                    }
                    return outcome(added);
                }
                Err(s) => {
                    if s & DORMANT != 0 {
                        self.activate(ext);
                    }
                    // Fall back to row 0.
                }
            }
        }
        if pin(&self.guard, &mut contended).is_err() {
            return Outcome::Dead;
        }
        let added = self.cells()[slot].add(e, n, stride, &mut contended);
        unpin(&self.guard);
        if contended {
            probe::rehash();
            self.install(slices, stripes);
        }
        outcome(added)
    }

    /// Installs the extension (if none) and activates its rows.
    #[cold]
    pub(crate) fn install(&self, slices: usize, stripes: usize) {
        install_if_null(&self.ext, || Ext {
            rows: (0..stripes).map(|_| ExtRow::new(slices)).collect(),
        });
        if let Some(ext) = self.ext() {
            self.activate(ext);
        }
    }

    /// Makes dormant extension rows live: first a version bump of row 0
    /// (refused once the entry is retired), then `DORMANT -> live` CASes.
    #[cold]
    fn activate(&self, ext: &Ext) {
        let mut s = self.guard.load(Ordering::Acquire);
        loop {
            if s & RETIRED != 0 {
                return;
            }
            match self.guard.compare_exchange_weak(
                s,
                s.wrapping_add(VERSION),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        for row in ext.rows.iter() {
            let _ = row
                .guard
                .compare_exchange(DORMANT, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Calls `f(epoch, count)` for every cell of every row.
    #[inline]
    fn for_each_cell(&self, slices: usize, mut f: impl FnMut(u64, u64)) {
        for c in self.cells() {
            let (e, n) = c.read();
            f(e, n);
        }
        if let Some(ext) = self.ext() {
            for row in ext.rows.iter() {
                for slot in 0..slices {
                    let (e, n) = row.cell(slot).read();
                    f(e, n);
                }
            }
        }
    }

    /// The window sum at epoch `last`: adds with epoch in
    /// `(last - slices, last]`, saturating.
    #[inline]
    pub(crate) fn sum(&self, last: u64, slices: usize) -> u64 {
        let k = slices as u64;
        let mut sum = 0u64;
        self.for_each_cell(slices, |e, c| {
            if e <= last && last - e < k {
                sum = sum.saturating_add(c);
            }
        });
        sum
    }

    /// Whether any cell holds a count at an epoch `> last - slices` (inside
    /// the window ending at `last`, or later).
    fn holds_live(&self, last: u64, slices: usize) -> bool {
        let first = (last + 1).saturating_sub(slices as u64);
        let mut live = false;
        self.for_each_cell(slices, |e, c| live |= c > 0 && e >= first);
        live
    }

    /// Retires the entry if it holds nothing at or after the window ending
    /// at epoch `last` and no add is in flight. `true`: the entry is dead
    /// and must be removed from the map by the caller.
    pub(crate) fn try_retire(&self, last: u64, slices: usize) -> bool {
        let s0 = self.guard.load(Ordering::Acquire);
        if s0 & (RETIRED | PIN_MASK) != 0 {
            return false;
        }
        let ext = self.ext();
        let mut snaps: Vec<u64> = Vec::new();
        if let Some(ext) = ext {
            for row in ext.rows.iter() {
                let s = row.guard.load(Ordering::Acquire);
                if s & (RETIRED | PIN_MASK) != 0 {
                    return false;
                }
                snaps.push(s);
            }
        }
        if self.holds_live(last, slices) {
            return false;
        }
        let restore = |upto: usize| {
            if let Some(ext) = ext {
                for (row, &s) in ext.rows.iter().zip(&snaps).take(upto) {
                    // Nobody else writes a retired guard: pins and
                    // activations are refused, other evictors give up.
                    row.guard.store(s, Ordering::Release);
                }
            }
        };
        if let Some(ext) = ext {
            for (i, (row, &s)) in ext.rows.iter().zip(&snaps).enumerate() {
                if row
                    .guard
                    .compare_exchange(s, RETIRED, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    restore(i);
                    return false;
                }
            }
        }
        if self
            .guard
            .compare_exchange(s0, s0 | RETIRED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            restore(snaps.len());
            return false;
        }
        true
    }

    /// The hot word: `(hot, epoch)`.
    #[inline]
    pub(crate) fn hot_state(&self) -> (bool, u64) {
        let h = self.hot.load(Ordering::Acquire);
        (h & HOT != 0, h & EPOCH_MASK)
    }

    /// Joins the hot word's modification order (an RMW that changes
    /// nothing) after this add's cell write and before its window read:
    /// of racing adds, the one whose RMW comes later synchronizes with the
    /// earlier ones' (`AcqRel`), so its read sees their cells. Without it,
    /// two adds on different stripes can each miss the other's cell (the
    /// store-buffer pattern) and neither sees the threshold crossed.
    ///
    /// Only needed once the entry is striped: adds on row 0 all end with an
    /// RMW of row 0's guard (the unpin), which plays the same role. An add
    /// on row 0 that then sees no extension cannot have missed an extension
    /// add: extension rows go live only after an RMW bump of row 0's guard,
    /// so either that bump follows our unpin (and the extension add's read
    /// sees our cell) or it precedes it (and we see the extension).
    #[inline]
    pub(crate) fn hot_sync(&self) {
        self.hot.fetch_add(0, Ordering::AcqRel);
    }

    /// Applies the hot rule for an add at epoch `e` that saw `before` and
    /// `after`; `true` if this add made the key hot (see [`decide`]).
    pub(crate) fn hot_transition(&self, e: u64, before: u64, after: u64, threshold: u64) -> bool {
        let mut h = self.hot.load(Ordering::Acquire);
        loop {
            let (new, report) = decide(h, e, before, after, threshold);
            if new == h {
                return false;
            }
            match self
                .hot
                .compare_exchange(h, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return report,
                Err(actual) => h = actual,
            }
        }
    }

    /// Bytes this entry holds (header and row 0 in one allocation, and the
    /// extension), excluding the map's own entry.
    pub(crate) fn memory_bytes(&self, slices: usize) -> usize {
        let mut b = EntryRef::layout(self.slices).size();
        if let Some(ext) = self.ext() {
            b += std::mem::size_of::<Ext>()
                + ext.rows.len() * (std::mem::size_of::<ExtRow>() + CellRow::heap_bytes(slices));
        }
        b
    }
}

#[inline]
fn outcome(a: Added) -> Outcome {
    match a {
        Added::Recorded => Outcome::Recorded,
        Added::TooOld => Outcome::TooOld,
    }
}

/// The hot rule as a pure function of the hot word `h`, the add's epoch
/// `e`, and the window sums `before` and `after` its scan saw. Returns the
/// new word and whether the transition reports ("became hot").
///
/// - Hot, `he >= e`: an add at this epoch (or later) already saw the key
///   at or above the threshold; within an epoch the sum only grows, so a
///   smaller `before` is a stale view: no change.
/// - Hot, `before >= threshold`: stays hot; `he = e`.
/// - Hot, `before < threshold`: cools; if `after >= threshold` it becomes
///   hot again at once and reports.
/// - Cold, `after >= threshold`: becomes hot at `e` and reports.
/// - Cold otherwise: no change.
pub(crate) fn decide(h: u64, e: u64, before: u64, after: u64, threshold: u64) -> (u64, bool) {
    let e = e.min(EPOCH_MASK);
    let hot = h & HOT != 0;
    let he = h & EPOCH_MASK;
    if hot {
        if he >= e {
            (h, false)
        } else if before >= threshold {
            (HOT | e, false)
        } else if after >= threshold {
            (HOT | e, true)
        } else {
            (e, false)
        }
    } else if after >= threshold {
        (HOT | e, true)
    } else {
        (h, false)
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        let p = *self.ext.get_mut();
        #[cfg(loom)]
        let p = self.ext.with_mut(|p| *p);
        if !p.is_null() {
            // SAFETY: `ext` came from `Box::into_raw` in `install` and is
            // freed only here, once, with exclusive access.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn add_sum_and_retire() {
        let e = EntryRef::new(4);
        assert_eq!(e.add(5, 3, 4, 2), Outcome::Recorded);
        assert_eq!(e.sum(5, 4), 3);
        assert_eq!(e.sum(8, 4), 3);
        assert_eq!(e.sum(9, 4), 0);
        assert!(!e.try_retire(8, 4));
        assert!(e.try_retire(9, 4));
        assert!(e.is_dead());
        assert_eq!(e.add(9, 1, 4, 2), Outcome::Dead);
        assert_eq!(e.sum(9, 4), 0);
    }

    #[test]
    fn future_adds_block_retirement() {
        let e = EntryRef::new(4);
        e.add(20, 1, 4, 2);
        assert!(!e.try_retire(3, 4));
    }

    #[test]
    fn striped_rows_are_summed_and_retired() {
        let e = EntryRef::new(3);
        e.add(1, 1, 3, 2);
        e.install(3, 2);
        assert!(e.is_striped());
        e.add(2, 2, 3, 2);
        assert_eq!(e.sum(2, 3), 3);
        assert!(!e.try_retire(2, 3));
        assert!(e.try_retire(5, 3));
        assert_eq!(e.add(6, 1, 3, 2), Outcome::Dead);
    }

    #[test]
    fn aborted_retirement_restores_rows() {
        let e = EntryRef::new(2);
        e.install(2, 2);
        let ext = e.ext().unwrap();
        // Pin row 0 so the final CAS fails after the rows were retired.
        let mut k = false;
        pin(&e.guard, &mut k).unwrap();
        assert!(!e.try_retire(10, 2));
        unpin(&e.guard);
        for row in ext.rows.iter() {
            assert_eq!(row.guard.load(Ordering::Relaxed) & RETIRED, 0);
        }
        assert_eq!(e.add(10, 1, 2, 2), Outcome::Recorded);
        assert_eq!(e.sum(10, 2), 1);
    }

    #[test]
    fn decide_follows_the_rule() {
        // Cold, crossing: report.
        assert_eq!(decide(0, 3, 1, 5, 5), (HOT | 3, true));
        // Cold, below: nothing.
        assert_eq!(decide(0, 3, 1, 4, 5), (0, false));
        // Hot at this epoch: nothing.
        assert_eq!(decide(HOT | 3, 3, 0, 9, 5), (HOT | 3, false));
        // Hot earlier, still above: refresh.
        assert_eq!(decide(HOT | 2, 3, 6, 7, 5), (HOT | 3, false));
        // Hot earlier, dipped and re-crossed: report.
        assert_eq!(decide(HOT | 2, 3, 4, 6, 5), (HOT | 3, true));
        // Hot earlier, below: cools.
        assert_eq!(decide(HOT | 2, 3, 1, 2, 5), (3, false));
    }
}
