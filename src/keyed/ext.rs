//! A key's out-of-line window (`Ext`): the slices before the head's, and
//! the striped rows of a contended key. Allocated the first time a key
//! needs it (its head folds a live count, a late add arrives, the key is
//! contended, or it needs a hot word), once per key, 16-byte aligned (the
//! low four bits of a pointer to it carry the key's flags, `state.rs`).
//!
//! # Layout (one allocation)
//! A header line (`hot`, fold marks `begun`/`ended`, the `stripes`
//! pointer, row 0's `guard`) followed by row 0: `S` slice cells
//! ([`SliceCell`], the core protocol of [`crate::slice`]). Row 0 receives
//! the counts the head folds out and the adds that arrive late for the
//! head. A contended key adds `stripes`: `cap` rows (CPUs rounded up to a
//! power of two), each a guard and `S` cells on their own 128-byte lines,
//! so threads adding to one hot key write different lines.
//!
//! # Guards (the pin protocol of the previous per-key design, kept)
//! Every row has a guard word `version:40 | pins:22 | 0 | RETIRED`.
//! - A writer *pins* its row (CAS `s -> s + PIN`, refused while `RETIRED`),
//!   writes a cell, then *unpins* (`fetch_add(VERSION - PIN)`: one pin
//!   fewer, a new version). So a row's guard changes with every write.
//!   The one writer that does not pin is a fold placing its count in row 0
//!   ([`Ext::add_row0_folded`]): its fold marks protect it instead.
//! - An evictor snapshots every guard (unpinned, not retired), reads every
//!   cell, and retires each row by CAS from its snapshot to
//!   [`retired`]`(s)` (a new version, `RETIRED`): the CAS fails if any
//!   writer pinned after the snapshot, and a writer that pins later is
//!   refused. Undoing it is a CAS back ([`Ext::restore`]); a writer that
//!   was refused by a retirement that is being undone may restore the row
//!   itself (the value to write is deterministic).
//! - A mover (a key changing table, `state.rs`) retires every row whatever
//!   its pins ([`Ext::retire_all`]) and then waits for the pins to drain:
//!   no new writer gets in, and the ones inside finish their one cell.
//!
//! # Fold marks
//! `begun` is incremented (once per add) before an add takes a live count
//! out of the head, `ended` after the count is in row 0. A reader that
//! needs the exact window loads `ended`, reads the head and every cell,
//! loads `begun`, and reads again unless the two are equal (the argument of
//! `crate::multi`'s fold marks: a count in flight has its begin counted in
//! `begun` and not its end in `ended`).
//!
//! # The hot word
//! `HOT | he`: see [`decide`] and `hot.rs`.
//!
//! # Orderings
//! Pins, unpins and retirements are `AcqRel` RMWs; evictor snapshots and
//! reader loads `Acquire`. Marks are `AcqRel` RMWs and `Acquire` loads. The
//! `stripes` pointer is published by an `AcqRel` CAS and read `Acquire`.

use crate::slice::{Added, CellRow, SliceCell};
use crate::stripes::install_if_null;
use crate::sync::{probe, AtomicPtr, AtomicU64, Ordering};
use std::alloc::{self, Layout};
use std::ptr::NonNull;

const RETIRED: u64 = 1;
const PIN: u64 = 1 << 2;
const PIN_MASK: u64 = ((1 << 22) - 1) << 2;
const VERSION: u64 = 1 << 24;

/// The hot bit of the hot word; the other 63 bits are an epoch.
pub(crate) const HOT: u64 = 1 << 63;
const EPOCH_MASK: u64 = HOT - 1;

/// A guard's retired value from snapshot `s`: a new version, `RETIRED`
/// (each retirement a distinct value, so that a restore by CAS can never
/// undo a later retirement).
#[inline]
fn retired(s: u64) -> u64 {
    s.wrapping_add(VERSION) | RETIRED
}

/// Pins a guard; `false` if it is retired.
#[inline]
fn pin(guard: &AtomicU64) -> bool {
    pin_noting(guard, &mut false)
}

/// [`pin`], setting `*contended` if a CAS failed (another writer pinned or
/// unpinned the row in between): a striped writer then moves to another
/// row, as after a failed cell CAS.
#[inline]
fn pin_noting(guard: &AtomicU64, contended: &mut bool) -> bool {
    let mut s = guard.load(Ordering::Acquire);
    loop {
        if s & RETIRED != 0 {
            return false;
        }
        match guard.compare_exchange(s, s + PIN, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(actual) => {
                *contended = true;
                s = actual;
            }
        }
    }
}

#[inline]
fn unpin(guard: &AtomicU64) {
    guard.fetch_add(VERSION.wrapping_sub(PIN), Ordering::AcqRel);
}

/// Clears `RETIRED` if the guard holds a retirement (undo of an eviction,
/// by the evictor or by a refused writer; see the module docs).
#[inline]
fn unretire(guard: &AtomicU64) {
    let s = guard.load(Ordering::Acquire);
    if s & RETIRED != 0 {
        let _ = guard.compare_exchange(s, s & !RETIRED, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// One stripe row of a contended key: its guard alone on a line, its
/// cells on their own.
#[repr(align(128))]
struct StripeRow {
    guard: AtomicU64,
    cells: CellRow,
}

struct Stripes {
    rows: Box<[StripeRow]>,
}

/// What became of a pinned write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// Done (the cell's own outcome).
    Done(Added),
    /// The row is retired: an eviction or a move holds the key.
    Refused,
}

/// A key's out-of-line window (see the module docs). Lives only in the
/// allocation made by [`Ext::alloc`], followed by its row-0 cells.
#[repr(C, align(16))]
pub(crate) struct Ext {
    hot: AtomicU64,
    begun: AtomicU64,
    ended: AtomicU64,
    stripes: AtomicPtr<Stripes>,
    guard: AtomicU64,
    /// `S`, fixed at allocation (the layout depends on it).
    slices: usize,
}

impl Ext {
    fn layout(slices: usize) -> (Layout, usize) {
        let cells = Layout::array::<SliceCell>(slices).expect("slices <= MAX_SLICES fits");
        let (l, off) = Layout::new::<Ext>()
            .extend(cells)
            .expect("an Ext's size fits in isize");
        (l.pad_to_align(), off)
    }

    /// A fresh window of `slices` empty row-0 cells (cell `j` at epoch
    /// `j`, as a ring's); free it with [`Ext::free`].
    pub(crate) fn alloc(slices: usize) -> NonNull<Ext> {
        let (layout, off) = Self::layout(slices);
        // SAFETY: the layout holds an `Ext`, so it is not zero-sized.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(p) = NonNull::new(raw.cast::<Ext>()) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: `raw` is a fresh allocation of `layout`: the header at
        // offset 0 and `slices` cells at `off`, each written once here.
        unsafe {
            p.as_ptr().write(Ext {
                hot: AtomicU64::new(0),
                begun: AtomicU64::new(0),
                ended: AtomicU64::new(0),
                stripes: AtomicPtr::new(std::ptr::null_mut()),
                guard: AtomicU64::new(0),
                slices,
            });
            let cells = raw.add(off).cast::<SliceCell>();
            for j in 0..slices {
                cells.add(j).write(SliceCell::new(j as u64));
            }
        }
        p
    }

    /// Frees a window from [`Ext::alloc`].
    ///
    /// # Safety
    /// No thread can reach `p` any more, and it is freed once.
    pub(crate) unsafe fn free(p: NonNull<Ext>) {
        // SAFETY: `p` is live until below (the caller's contract).
        let slices = unsafe { p.as_ref() }.slices;
        let (layout, off) = Self::layout(slices);
        // SAFETY: the caller's contract; the header and cells were
        // initialized in `alloc` and are dropped once here.
        unsafe {
            let raw = p.as_ptr().cast::<u8>();
            let cells = raw.add(off).cast::<SliceCell>();
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(cells, slices));
            let stripes = (*p.as_ptr()).stripes.load(Ordering::Acquire);
            if !stripes.is_null() {
                drop(Box::from_raw(stripes));
            }
            std::ptr::drop_in_place(p.as_ptr());
            alloc::dealloc(raw, layout);
        }
    }

    /// Row 0's cells. `slices` must be the one the window was made with
    /// (callers pass the map's, which every window of the map shares: one
    /// load fewer than reading `self.slices`).
    #[inline]
    fn row0(&self, slices: usize) -> &[SliceCell] {
        debug_assert_eq!(slices, self.slices);
        let off = Self::layout(slices).1;
        // SAFETY: an `Ext` lives only in an `alloc` allocation, where
        // `slices` initialized cells follow the header at `off`.
        unsafe {
            let base = (self as *const Ext).cast::<u8>().add(off);
            std::slice::from_raw_parts(base.cast::<SliceCell>(), slices)
        }
    }

    #[inline]
    fn stripes(&self) -> Option<&Stripes> {
        // SAFETY: a non-null `stripes` came from `Box::into_raw` in
        // `install_stripes`, is never replaced, and is freed in `free`.
        unsafe { self.stripes.load(Ordering::Acquire).as_ref() }
    }

    /// Heap bytes of this window (header, row 0, stripes).
    pub(crate) fn memory_bytes(&self, slices: usize) -> usize {
        let mut b = Self::layout(slices).0.size();
        if let Some(s) = self.stripes() {
            b += std::mem::size_of::<Stripes>()
                + s.rows.len() * (std::mem::size_of::<StripeRow>() + CellRow::heap_bytes(slices));
        }
        b
    }

    /// Adds `n` at epoch `e` to row 0 (a fold or a late add), pinned.
    #[inline]
    pub(crate) fn add_row0(&self, e: u64, n: u64, slices: usize) -> Write {
        if !pin(&self.guard) {
            return Write::Refused;
        }
        let mut contended = false;
        let added = self.row0(slices)[(e % slices as u64) as usize].add(
            e,
            n,
            slices as u64,
            &mut contended,
        );
        unpin(&self.guard);
        Write::Done(added)
    }

    /// Adds a count a fold took out of the head to row 0, unpinned: the
    /// fold's marks already protect it (an evictor gives up on seeing a fold
    /// begun and not ended, or fails to close the head the fold took from;
    /// a mover waits for the marks to settle before it reads the rows).
    #[inline]
    pub(crate) fn add_row0_folded(&self, e: u64, n: u64, slices: usize) -> Added {
        let mut contended = false;
        self.row0(slices)[(e % slices as u64) as usize].add(e, n, slices as u64, &mut contended)
    }

    /// Gives the key its stripe rows (once; racing installers agree).
    #[cold]
    pub(crate) fn install_stripes(&self, slices: usize, cap: usize) {
        install_if_null(&self.stripes, || Stripes {
            rows: (0..cap)
                .map(|_| StripeRow {
                    guard: AtomicU64::new(0),
                    cells: CellRow::new(slices),
                })
                .collect(),
        });
    }

    /// Adds `n` at `e` to the calling thread's stripe row, pinned; `None`
    /// if the key has no stripes (yet).
    #[inline]
    pub(crate) fn add_striped(&self, e: u64, n: u64, slices: usize) -> Option<Write> {
        let s = self.stripes()?;
        let row = &s.rows[probe::get() as usize & (s.rows.len() - 1)];
        let mut contended = false;
        if !pin_noting(&row.guard, &mut contended) {
            return Some(Write::Refused);
        }
        let added =
            row.cells
                .cell((e % slices as u64) as usize)
                .add(e, n, slices as u64, &mut contended);
        unpin(&row.guard);
        if contended {
            probe::rehash();
        }
        Some(Write::Done(added))
    }

    /// Calls `f(epoch, count)` for every cell of every row.
    #[inline]
    pub(crate) fn for_each_cell(&self, slices: usize, mut f: impl FnMut(u64, u64)) {
        for c in self.row0(slices) {
            let (e, n) = c.read();
            f(e, n);
        }
        if let Some(s) = self.stripes() {
            for row in s.rows.iter() {
                for j in 0..slices {
                    let (e, n) = row.cells.cell(j).read();
                    f(e, n);
                }
            }
        }
    }

    /// Calls `f(epoch, count)` for every cell of the stripe rows.
    #[inline]
    pub(crate) fn for_each_stripe_cell(&self, slices: usize, mut f: impl FnMut(u64, u64)) {
        if let Some(s) = self.stripes() {
            for row in s.rows.iter() {
                for j in 0..slices {
                    let (e, n) = row.cells.cell(j).read();
                    f(e, n);
                }
            }
        }
    }

    /// Row 0's total over epochs `(last - slices, last]`.
    pub(crate) fn row0_sum(&self, last: u64, slices: usize) -> u64 {
        let mut sum = 0u64;
        for c in self.row0(slices) {
            let (e, n) = c.read();
            if e <= last && last - e < slices as u64 {
                sum = sum.saturating_add(n);
            }
        }
        sum
    }

    /// Takes every count of every row: `f(epoch, count)` for each non-zero
    /// cell, which is left at 0 (pinned, so an add racing it is taken or
    /// stays). `false` if a row was retired (the caller retries).
    pub(crate) fn take(&self, slices: usize, f: &mut impl FnMut(u64, u64)) -> bool {
        let row0 = std::iter::once((&self.guard, self.row0(slices)));
        let mut ok = true;
        let mut take_row = |guard: &AtomicU64, cells: &mut dyn Iterator<Item = &SliceCell>| {
            if !pin(guard) {
                ok = false;
                return;
            }
            for c in cells {
                if let Some((e, n)) = c.take() {
                    f(e, n);
                }
            }
            unpin(guard);
        };
        for (g, cells) in row0 {
            take_row(g, &mut cells.iter());
        }
        if let Some(s) = self.stripes() {
            for row in s.rows.iter() {
                take_row(&row.guard, &mut (0..slices).map(|j| row.cells.cell(j)));
            }
        }
        ok
    }

    // ---- fold marks ----

    /// Marks the start of a fold (before its take).
    #[inline]
    pub(crate) fn begin_fold(&self) {
        self.begun.fetch_add(1, Ordering::AcqRel);
    }

    /// Marks the end of a fold (after its placement).
    #[inline]
    pub(crate) fn end_fold(&self) {
        self.ended.fetch_add(1, Ordering::AcqRel);
    }

    /// `ended`, loaded before an exact read.
    #[inline]
    pub(crate) fn folds_ended(&self) -> u64 {
        self.ended.load(Ordering::Acquire)
    }

    /// `begun`, loaded after an exact read.
    #[inline]
    pub(crate) fn folds_begun(&self) -> u64 {
        self.begun.load(Ordering::Acquire)
    }

    // ---- guards: eviction and moves ----

    /// Every guard: row 0's first, then the stripes' (if any).
    fn guards(&self) -> impl Iterator<Item = &AtomicU64> {
        std::iter::once(&self.guard).chain(
            self.stripes()
                .into_iter()
                .flat_map(|s| s.rows.iter().map(|r| &r.guard)),
        )
    }

    /// The guards' values for an eviction, or `None` if a row is pinned
    /// or retired (not idle now).
    pub(crate) fn snapshot_guards(&self) -> Option<Vec<u64>> {
        let mut snaps = Vec::new();
        for g in self.guards() {
            let s = g.load(Ordering::Acquire);
            if s & (RETIRED | PIN_MASK) != 0 {
                return None;
            }
            snaps.push(s);
        }
        Some(snaps)
    }

    /// Retires every row from its snapshot (taken by
    /// [`snapshot_guards`](Self::snapshot_guards) before the cells were
    /// read). `false` (after undoing) if a row changed: a writer got in.
    pub(crate) fn retire(&self, snaps: &[u64]) -> bool {
        let guards: Vec<&AtomicU64> = self.guards().collect();
        if guards.len() != snaps.len() {
            return false; // stripes were installed meanwhile
        }
        for (i, (g, &s)) in guards.iter().zip(snaps).enumerate() {
            if g.compare_exchange(s, retired(s), Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                self.restore(&snaps[..i]);
                return false;
            }
        }
        true
    }

    /// Undoes [`retire`](Self::retire) for the rows of `snaps` (exactly:
    /// a row restored already, by a refused writer, is left alone).
    pub(crate) fn restore(&self, snaps: &[u64]) {
        for (g, &s) in self.guards().zip(snaps) {
            let _ = g.compare_exchange(
                retired(s),
                retired(s) & !RETIRED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Undoes any retirement of any row (a writer refused by an eviction
    /// it has just doomed; see `state.rs`).
    pub(crate) fn unretire_all(&self) {
        for g in self.guards() {
            unretire(g);
        }
    }

    /// Retires every row whatever its pins (a move), then waits until the
    /// writers inside have unpinned. No writer waits for this: a refused
    /// writer looks the key up again.
    pub(crate) fn retire_all(&self) {
        for g in self.guards() {
            g.fetch_or(RETIRED, Ordering::AcqRel);
        }
        for g in self.guards() {
            let mut rounds = 0;
            while g.load(Ordering::Acquire) & PIN_MASK != 0 {
                crate::sync::wait_hint(&mut rounds);
            }
        }
    }

    // ---- the hot word ----

    /// The hot word: `(hot, epoch)`.
    #[inline]
    pub(crate) fn hot_state(&self) -> (bool, u64) {
        let h = self.hot.load(Ordering::Acquire);
        (h & HOT != 0, h & EPOCH_MASK)
    }

    /// The raw hot word (a move copies it).
    pub(crate) fn hot_word(&self) -> u64 {
        self.hot.load(Ordering::Acquire)
    }

    /// Sets the raw hot word of a window no add can see yet.
    pub(crate) fn set_hot_word(&self, h: u64) {
        self.hot.store(h, Ordering::Release);
    }

    /// Joins the hot word's modification order (an RMW that changes
    /// nothing) after this add's cell write and before its window read: of
    /// racing adds, the later one's read sees the earlier one's cell.
    /// Without it, two adds on different cells can each miss the other's
    /// write (the store-buffer pattern) and neither sees the threshold.
    #[inline]
    pub(crate) fn hot_sync(&self) {
        self.hot.fetch_add(0, Ordering::AcqRel);
    }

    /// Applies the hot rule for an add at epoch `e` that saw `before` and
    /// `after`; `true` if this add made the key hot.
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
}

/// The hot rule as a pure function of the hot word `h`, the add's epoch
/// `e`, and the window sums `before` and `after` its read saw. Returns the
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn decide_follows_the_rule() {
        assert_eq!(decide(0, 3, 1, 5, 5), (HOT | 3, true));
        assert_eq!(decide(0, 3, 1, 4, 5), (0, false));
        assert_eq!(decide(HOT | 3, 3, 0, 9, 5), (HOT | 3, false));
        assert_eq!(decide(HOT | 2, 3, 6, 7, 5), (HOT | 3, false));
        assert_eq!(decide(HOT | 2, 3, 4, 6, 5), (HOT | 3, true));
        assert_eq!(decide(HOT | 2, 3, 1, 2, 5), (3, false));
    }

    #[test]
    fn rows_add_read_take_and_retire() {
        let p = Ext::alloc(4);
        // SAFETY: freed at the end of the test, once.
        let x = unsafe { p.as_ref() };
        assert_eq!(x.add_row0(6, 3, 4), Write::Done(Added::Recorded));
        assert_eq!(x.add_row0(2, 1, 4), Write::Done(Added::TooOld));
        x.install_stripes(4, 2);
        assert_eq!(x.add_striped(7, 2, 4), Some(Write::Done(Added::Recorded)));
        assert_eq!(x.row0_sum(7, 4), 3);
        let mut all = 0;
        x.for_each_cell(4, |e, n| {
            if (4..=7).contains(&e) {
                all += n;
            }
        });
        assert_eq!(all, 5);
        let snaps = x.snapshot_guards().unwrap();
        assert!(x.retire(&snaps));
        assert_eq!(x.add_row0(7, 1, 4), Write::Refused);
        assert_eq!(x.add_striped(7, 1, 4), Some(Write::Refused));
        x.restore(&snaps);
        let mut taken = Vec::new();
        assert!(x.take(4, &mut |e, n| taken.push((e, n))));
        taken.sort_unstable();
        assert_eq!(taken, vec![(6, 3), (7, 2)]);
        assert_eq!(x.row0_sum(7, 4), 0);
        x.retire_all();
        assert_eq!(x.add_row0(7, 1, 4), Write::Refused);
        // SAFETY: allocated above, unreachable now.
        unsafe { Ext::free(p) };
    }

    #[test]
    fn a_retirement_is_undone_by_a_writer_too() {
        let p = Ext::alloc(2);
        // SAFETY: freed below, once.
        let x = unsafe { p.as_ref() };
        let snaps = x.snapshot_guards().unwrap();
        assert!(x.retire(&snaps));
        x.unretire_all();
        assert_eq!(x.add_row0(1, 1, 2), Write::Done(Added::Recorded));
        // The evictor's own restore now finds nothing to undo.
        x.restore(&snaps);
        assert!(x.snapshot_guards().is_some());
        // SAFETY: allocated above, unreachable now.
        unsafe { Ext::free(p) };
    }
}
