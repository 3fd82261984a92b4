//! One key's window: the per-key protocol (the compact row 0, striping, the
//! eviction handshake and the hot flag). The map around it is in
//! [`super::map`].
//!
//! # Layout
//! An [`Entry`] is a 40-byte header followed, in the same allocation
//! ([`EntryRef`]), by *row 0*: `S` 8-byte cells. A 10-slice key holds
//! 40 + 80 = 120 bytes. The header:
//! - `refs`: the reference count (low 32 bits) and `S` (high 32 bits,
//!   never written after creation: the last reference learns it from its
//!   own decrement, so it needs no field of its own);
//! - `hot`: the hot word (below); `guard`: row 0's guard (below);
//! - `ext`: the extension pointer (below), null for a key that never saw
//!   contention;
//! - `base`: a full 64-bit epoch, the largest epoch any row-0 add has
//!   filed (or the entry's first epoch).
//!
//! A row-0 cell is one word `tag:16 | count:48`: the count of epoch `y`
//! (slot `y mod S`) and `tag = y mod 2^16`. Its epoch is *decoded* from a
//! base value `B` as `dec(B, tag) = B - ((B - tag) mod 2^16)`, the largest
//! epoch at or below `B` with that tag; it is `y` exactly when
//! `B - 2^16 < y <= B`. Epochs are grouped in *blocks* of 2^13 (more than
//! [`MAX_SLICES`](crate::MAX_SLICES)); `end(B)` is the last epoch of `B`'s
//! block and `floor(B) = end(B) - (2^16 - 1)` (0 if negative).
//!
//! The first time an add sees contention on a key (a failed CAS on row
//! 0's guard or cell, or a refused crossing, below) the key gets an
//! *extension*: `cap` more rows (`cap` = CPUs rounded up to a power of
//! two) of 16-byte [`SliceCell`]s (full epoch beside a tagged count, the
//! core protocol of [`crate::slice`]), each row on its own 128-byte lines;
//! from then on every thread adds to the extension row its probe selects,
//! so a hot key does not serialize on one word. Sums read every row.
//!
//! # Row 0: invariants
//! 1. `base` only increases. It moves to another block only in a
//!    *crossing*, which holds row 0 exclusively (below).
//! 2. A cell's epoch only increases and is always `= slot (mod S)`.
//! 3. Every cell with a non-zero count holds an epoch `<= base`: a writer
//!    raises `base` (or sees it raised) *before* it writes the cell.
//!    Outside a crossing, zero cells do too.
//! 4. Outside a crossing, every cell's epoch is `>= floor(base)`. Since
//!    `base <= end(base)`, `base - y < 2^16` for every value `base` takes
//!    within its block, so every cell decodes exactly from any of them.
//!
//! # Row 0: protocol
//! - A fresh entry for an add at epoch `e` starts with `base = max(e,
//!   S - 1)` and cell `i` at the first epoch `>= floor(base)` of residue
//!   `i`, count 0 (the cells of a young key hold epochs `0..S`, as a
//!   [`SliceCell`] row does).
//! - An add of `n` at `e` *pins* row 0 (below), then loads the **cell
//!   first, then `base`**. If `e > base` and `e` is in `base`'s block, it
//!   raises `base` with `fetch_max(e)`; if `e` is in a later block, it
//!   crosses (below). It decodes the cell's epoch `y` from `base` and CASes
//!   the cell from the loaded word: `y > e`: the slot holds a later epoch,
//!   the add is older than the ring and is dropped ([`Outcome::TooOld`]);
//!   `y = e`: `count + n`; `y < e`: `tag(e) | n`, the expired count
//!   replaced in the same atomic step. A failed CAS retries.
//! - A *crossing* to `e`: the add, still pinned, CASes row 0's guard from
//!   a value with exactly one pin (its own) to the same value with
//!   `CROSSING` set; `pin` refuses while `CROSSING` is set. It reloads
//!   `base` (`old`), and for every cell whose epoch (decoded from `old`) is
//!   below `floor(e)` stores the first epoch `>= floor(e)` of that slot's
//!   residue with count 0; it stores `base = e`, writes its own cell, then
//!   clears `CROSSING` and unpins in one RMW (not a store: activations may
//!   bump the guard meanwhile). If the CAS cannot be made because another
//!   add is pinned, or an add's pin is refused because of `CROSSING`,
//!   nobody waits: it is contention, and the add goes to the extension
//!   (installed and activated if needed). A key crosses at most once per
//!   2^13 epochs, and on the first add after a long idle gap.
//! - A *reader* (sums, the evictor's liveness check) reads row 0 in
//!   chunks of up to 16 cells: load `base` (`B1`), the cells, `base`
//!   (`B2`); if `B1` and `B2` are in different blocks a crossing completed
//!   in between: read the chunk again. Decode with `B2`; cells with count
//!   0 are skipped (a zero count adds nothing whatever its epoch).
//!
//! # Row 0: why every decode is exact
//! - *Writers.* While an add is pinned no crossing can start (it needs the
//!   only pin) or be under way (the pin would have been refused), so
//!   `base` stays in one block and invariant 4 holds throughout: the
//!   loaded cell's epoch `y >= floor(base)`. And `y <= b`, the `base` it
//!   loaded: the word was written after its writer raised `base` to at
//!   least `y` (or is a fresh or crossing-written cell, `y` below the base
//!   published with it), the `Acquire` load of the word makes that
//!   raise happen before our later load of `base`, and coherence then
//!   gives `b >= y`. A writer that loaded `base` *before* the cell could
//!   see a cell written at an epoch above its `base` and decode it as
//!   ancient, then overwrite a live count: the loom suite keeps that
//!   order as a counter-example.
//! - *Readers.* A non-zero cell gives `y <= B2` as above. `B1` is in the
//!   block of `B2`, so `B1` was published by the crossing into that block
//!   (a `Release` store; later `fetch_max`es extend its release sequence)
//!   or is the initial value: the crossing's cell stores happen before the
//!   reader's cell loads, which therefore see values of this block
//!   (invariant 4), or a crossing's own add, which forces `B2` into a
//!   later block and a retry. A crossing's zero stores may be seen early;
//!   they count nothing.
//! - *Crossings.* The crosser holds the only pin and `CROSSING`, so no
//!   cell is written by anyone else until it unpins; every earlier add's
//!   writes happen before its CAS on the guard (their unpins are RMWs of
//!   the guard, which it acquires). The counts it drops are at epochs
//!   below `floor(e) <= e - 2^16 + 2^13`, outside every window at or after
//!   `e`, which is the key's newest epoch: as for every window, sums are
//!   exact at or after the newest add. Its zero cells are at epochs
//!   `< floor(e) + S <= e - S`, so they make no live add look too old.
//!   After it, invariant 4 holds for the new block: kept cells are at or
//!   above `floor(e)`, and re-tagged ones too.
//! - *No ABA.* While an add is pinned, a cell's epochs lie within one
//!   block's 2^16-epoch range (distinct epochs, distinct tags) and a
//!   count only grows within an epoch, so a cell never returns to a word
//!   it held before: a CAS from a loaded word succeeds only on that word.
//!
//! # Guards: the eviction handshake
//! Every row has a guard word: `version << 24 | pins << 2 | bit 1 |
//! RETIRED`. Bit 1 is `DORMANT` in an extension row and `CROSSING` in row
//! 0; a pin is refused while it is set.
//! - An add *pins* its row (CAS `s -> s + PIN`, refused if the row is
//!   `RETIRED`, `DORMANT` or `CROSSING`), adds to a cell, then *unpins*
//!   (`fetch_add(VERSION - PIN)`: one fewer pin, a new version).
//! - The evictor ([`Entry::try_retire`]) snapshots row 0's guard, then the
//!   extension pointer and every extension guard; gives up if any row is
//!   pinned or retired (a crossing holds a pin); reads every cell (row 0 by
//!   the reader rule) and gives up if any holds a count at an epoch inside
//!   (or after) the window; then CASes each extension guard, and row 0's
//!   guard last, from its snapshot to `RETIRED`. A failed CAS restores the
//!   guards it retired (to their exact snapshot) and gives up. Row 0
//!   `RETIRED` means the entry is dead: the caller removes it from the
//!   map, and an add that finds it dead looks the key up again.
//! - Extension rows start `DORMANT` (adds fall back to row 0). A thread
//!   activates them (CAS `DORMANT -> live`) only after it has seen the
//!   extension pointer and then bumped row 0's version (refused once row 0
//!   is retired; allowed during a crossing).
//!
//! # Why no add is lost
//! Take an add that completed (unpinned) in row `r` of an entry whose
//! eviction succeeded. If its unpin is before the evictor's snapshot of
//! `r`'s guard in that word's modification order, the evictor's `Acquire`
//! load synchronizes with the `Release` unpin (or a later RMW of its
//! release sequence), so the cell read sees the add (and, for row 0, the
//! `base` it raised, so the reader rule decodes it): the evictor would have
//! given up. Otherwise the add pinned after the snapshot, so the guard's
//! value changed and the evictor's CAS from the snapshot fails, or the pin
//! saw `RETIRED` and the add was never written. A crossing is an add that
//! holds its pin throughout, so the same argument covers it. For an
//! extension row the evictor did not see (null pointer when it looked):
//! rows become live only after a version bump of row 0 that follows the
//! pointer's installation; if that bump preceded the evictor's snapshot of
//! row 0, the evictor would have seen the pointer (coherence), so the bump
//! follows the snapshot and the evictor's final CAS fails, or the bump sees
//! `RETIRED` and the rows never go live. Adds never write a row they have
//! not pinned from a live guard, so a retired row holds no add that was not
//! counted, and an aborted eviction (rows restored) double-counts nothing.
//!
//! Versions are 40 bits: the only ABA is an evictor paused between its
//! snapshot and its CAS while exactly 2^40 adds pass through one row.
//!
//! # Progress
//! No add waits for another thread. An add refused by a crossing adds to
//! the extension; if its extension row is retired by an eviction at that
//! moment, the eviction is bound to fail (row 0 is pinned by the
//! crosser), and the add restores the row itself instead of waiting for
//! the evictor to ([`Entry::unblock`]). Evictions therefore retire a row to
//! its snapshot plus a new version, and restore it by CAS; activation
//! clears the `DORMANT` bit of any unretired value.
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
//! loads, its CASes `AcqRel`; the crossing's guard CAS and its final
//! clear-and-unpin are `AcqRel` RMWs. The extension pointer is published
//! by an `AcqRel` CAS and read with `Acquire`. Row 0: cell and `base` loads
//! are `Acquire`, cell CASes and `fetch_max` `AcqRel`, a crossing's cell
//! and `base` stores `Release` (the pairs that matter: a cell write and
//! the reader's load of it, which orders the writer's `base` raise before
//! the reader's next `base` load; a crossing's `base` store and a reader's
//! `B1`, which orders the crossing's cell stores before the reader's
//! cells). Extension cells follow [`crate::slice`].

use crate::slice::{
    count_of, pack, tag, tag_of, Added, CellRow, SliceCell, MAX_SLICE_COUNT, SEALED, TAG_MASK,
};
use crate::stripes::install_if_null;
use crate::sync::{probe, spin_hint, AtomicPtr, AtomicU64, Ordering};
use std::alloc::{self, Layout};
use std::ptr::NonNull;

const RETIRED: u64 = 1;
/// Bit 1 of an extension row's guard: not yet live.
const DORMANT: u64 = 1 << 1;
/// Bit 1 of row 0's guard: a crossing holds row 0.
const CROSSING: u64 = 1 << 1;
const PIN: u64 = 1 << 2;
const PIN_MASK: u64 = ((1 << 22) - 1) << 2;
const VERSION: u64 = 1 << 24;

/// The hot bit of the hot word; the other 63 bits are an epoch.
const HOT: u64 = 1 << 63;
const EPOCH_MASK: u64 = HOT - 1;

/// `refs`: the reference count's bits; `S` is stored above them.
const REF_MASK: u64 = u32::MAX as u64;
const SLICES_SHIFT: u32 = 32;

/// Row-0 cells are the slice cell's word, `tag:16 | count:48` (the
/// helpers of [`crate::slice`]); a tag repeats every `TAG_SPAN` epochs.
const TAG_SPAN: u64 = TAG_MASK + 1;
/// Epochs per block: `base` changes block only in a crossing.
const BLOCK_BITS: u32 = 13;
const BLOCK_MASK: u64 = (1 << BLOCK_BITS) - 1;
/// Row-0 cells read between two loads of `base` (a stack buffer).
const READ_CHUNK: usize = 16;

// A ring fits in a block, and a crossing's zero cells (below `floor(e) +
// S`) are older than the window at `e`: `floor(e) + S <= e - 2^16 + 2^13 +
// S <= e - S`.
const _: () = assert!(crate::window::MAX_SLICES as u64 <= BLOCK_MASK);
const _: () = assert!(2 * crate::window::MAX_SLICES as u64 + (1 << BLOCK_BITS) <= TAG_SPAN);
const _: () = assert!(MAX_SLICE_COUNT < SEALED);

/// The epoch of `word` decoded from base value `base`: the largest epoch
/// `<= base` with its tag (`None` if that would be below 0). Exact when the
/// true epoch is in `(base - 2^16, base]`.
#[inline]
fn decode(base: u64, word: u64) -> Option<u64> {
    base.checked_sub(base.wrapping_sub(tag_of(word)) & TAG_MASK)
}

#[inline]
fn block(epoch: u64) -> u64 {
    epoch >> BLOCK_BITS
}

/// The lowest epoch a row-0 cell may hold while `base` is in the block of
/// `epoch` (invariant 4): every `base` of the block is less than 2^16 above.
#[inline]
fn floor(epoch: u64) -> u64 {
    (epoch | BLOCK_MASK).saturating_sub(TAG_MASK)
}

/// The first epoch `>= lo` of residue `slot` modulo `slices`.
#[inline]
fn first_at_or_after(lo: u64, slot: usize, slices: u64) -> u64 {
    lo + (slot as u64 + slices - lo % slices) % slices
}

/// What an add of `n` at `e` does to a row-0 cell holding `word`, decoded
/// from `base`.
enum Step {
    /// The slot holds a later epoch: the add is older than the ring.
    TooOld,
    /// The count is saturated: nothing to write.
    Saturated,
    /// Write this word.
    Write(u64),
}

#[inline]
fn step(word: u64, base: u64, e: u64, n: u64) -> Step {
    match decode(base, word) {
        Some(y) if y > e => Step::TooOld,
        Some(y) if y == e => {
            let c = count_of(word);
            if c == MAX_SLICE_COUNT {
                Step::Saturated
            } else {
                Step::Write(pack(tag(e), c.saturating_add(n).min(MAX_SLICE_COUNT)))
            }
        }
        // An older epoch's count (expired for every window with `e`):
        // replaced in the same step as the add.
        _ => Step::Write(pack(tag(e), n.min(MAX_SLICE_COUNT))),
    }
}

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

/// What became of an attempt on row 0.
enum Row0 {
    Added(Added),
    /// Row 0 is retired.
    Dead,
    /// A crossing holds row 0, or this add needed to cross while another
    /// add was pinned: add to the extension instead.
    Busy,
}

/// One key's window. See the module docs. An `Entry` only lives in the
/// allocation of an [`EntryRef`], followed by its `S` row-0 cells. Every
/// method that takes `slices` must be given the entry's own `S` (the map
/// creates all its entries with its own).
pub(crate) struct Entry {
    refs: AtomicU64,
    hot: AtomicU64,
    guard: AtomicU64,
    ext: AtomicPtr<Ext>,
    base: AtomicU64,
}

/// Offset of the row-0 cells from the start of an entry's allocation.
const fn cells_offset() -> usize {
    let a = std::mem::align_of::<AtomicU64>();
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
        let cells = Layout::array::<AtomicU64>(slices).expect("slices <= MAX_SLICES fits");
        let (l, off) = Layout::new::<Entry>()
            .extend(cells)
            .expect("an entry's size fits in isize");
        debug_assert_eq!(off, cells_offset());
        l.pad_to_align()
    }

    /// A fresh entry (one reference) with `slices` empty cells, for a first
    /// add at epoch `e` (see the module docs).
    pub(crate) fn new(slices: usize, e: u64) -> EntryRef {
        debug_assert!(slices > 0 && slices <= crate::window::MAX_SLICES);
        let layout = Self::layout(slices);
        // SAFETY: `layout` has a non-zero size (it holds an `Entry`).
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Entry>()) else {
            alloc::handle_alloc_error(layout)
        };
        let k = slices as u64;
        let base = e.max(k - 1);
        let lo = floor(base);
        // SAFETY: `raw` is a fresh allocation of `layout`: an `Entry` at
        // offset 0 and `slices` cells at `cells_offset()`, each written
        // once here before the pointer is shared.
        unsafe {
            ptr.as_ptr().write(Entry {
                refs: AtomicU64::new(k << SLICES_SHIFT | 1),
                hot: AtomicU64::new(0),
                guard: AtomicU64::new(0),
                ext: AtomicPtr::new(std::ptr::null_mut()),
                base: AtomicU64::new(base),
            });
            let cells = raw.add(cells_offset()).cast::<AtomicU64>();
            for i in 0..slices {
                let y = first_at_or_after(lo, i, k);
                debug_assert!(y <= base);
                cells.add(i).write(AtomicU64::new(pack(tag(y), 0)));
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
        let prev = self.refs.fetch_add(1, Ordering::Relaxed);
        if prev & REF_MASK >= REF_MASK / 2 {
            // Billions of handles on one key: the count would run into
            // `S`'s bits (`Arc` aborts likewise near `isize::MAX`).
            std::process::abort();
        }
        EntryRef { ptr: self.ptr }
    }
}

impl Drop for EntryRef {
    fn drop(&mut self) {
        // `AcqRel`: the last decrement sees every other holder's accesses
        // before it frees (what `Arc` gets from `Release` plus a fence).
        let prev = self.refs.fetch_sub(1, Ordering::AcqRel);
        if prev & REF_MASK != 1 {
            return;
        }
        let slices = (prev >> SLICES_SHIFT) as usize;
        let raw = self.ptr.as_ptr().cast::<u8>();
        // SAFETY: this was the last reference, so nobody else can reach the
        // allocation. Its cells and entry were initialized in `new` and are
        // dropped once here, then the memory is freed with its layout.
        unsafe {
            let cells = raw.add(cells_offset()).cast::<AtomicU64>();
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(cells, slices));
            std::ptr::drop_in_place(self.ptr.as_ptr());
            alloc::dealloc(raw, Self::layout(slices));
        }
    }
}

/// Pins a guard; `Err(state)` if it is retired, or bit 1 (`DORMANT`,
/// `CROSSING`) is set. Sets `*contended` if a CAS failed because another
/// thread changed the word.
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

/// An extension row's guard as an evictor retires it from snapshot `s`:
/// `RETIRED` and a new version, so that each retirement is a distinct
/// value (a restore by CAS can never hit a later retirement of the same
/// snapshot).
#[inline]
fn retired(s: u64) -> u64 {
    s.wrapping_add(VERSION) | RETIRED
}

#[inline]
fn unpin(guard: &AtomicU64) {
    guard.fetch_add(VERSION.wrapping_sub(PIN), Ordering::AcqRel);
}

impl Entry {
    /// Row 0's cells, which follow the entry in its allocation. `slices`
    /// must be the entry's own `S`.
    #[inline]
    fn cells(&self, slices: usize) -> &[AtomicU64] {
        #[cfg(all(debug_assertions, not(loom)))]
        debug_assert_eq!(
            self.refs.load(Ordering::Relaxed) >> SLICES_SHIFT,
            slices as u64
        );
        // SAFETY: an `Entry` only exists inside an `EntryRef` allocation,
        // where `S` initialized cells start at `cells_offset()`, and every
        // caller passes the `S` the map created its entries with; they live
        // as long as the entry.
        unsafe {
            let base = (self as *const Entry).cast::<u8>().add(cells_offset());
            std::slice::from_raw_parts(base.cast::<AtomicU64>(), slices)
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
        loop {
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
            match self.add_row0(e, n, slot, slices, &mut contended) {
                Row0::Added(added) => {
                    if contended {
                        probe::rehash();
                        self.install(slices, stripes);
                    }
                    return outcome(added);
                }
                Row0::Dead => return Outcome::Dead,
                Row0::Busy => {
                    probe::rehash();
                    match self.ext() {
                        None => self.install(slices, stripes),
                        // Our extension row was dormant (now activated) or
                        // is held by an eviction bound to fail: free it.
                        Some(ext) => self.unblock(ext),
                    }
                }
            }
        }
    }

    /// An add on row 0 (see the module docs): pins, adds, unpins.
    #[inline]
    fn add_row0(&self, e: u64, n: u64, slot: usize, slices: usize, contended: &mut bool) -> Row0 {
        if let Err(s) = pin(&self.guard, contended) {
            return if s & RETIRED != 0 {
                Row0::Dead
            } else {
                Row0::Busy
            };
        }
        let cell = &self.cells(slices)[slot];
        let added = loop {
            // The cell first, then `base` (see "why every decode is exact").
            let w = cell.load(Ordering::Acquire);
            let mut b = self.base.load(Ordering::Acquire);
            if e > b {
                if block(e) != block(b) {
                    return self.cross(e, n, slot, slices, contended);
                }
                b = self.base.fetch_max(e, Ordering::AcqRel).max(e);
            }
            let new = match step(w, b, e, n) {
                Step::TooOld => break Added::TooOld,
                Step::Saturated => break Added::Recorded,
                Step::Write(new) => new,
            };
            match cell.compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break Added::Recorded,
                Err(_) => *contended = true,
            }
        };
        unpin(&self.guard);
        Row0::Added(added)
    }

    /// Moves `base` to `e`'s block (the caller is pinned on row 0 and `e`
    /// is in a later block than `base`) and adds `n` at `e`; or, if another
    /// add is pinned, unpins and returns [`Row0::Busy`]. Unpins either way.
    #[cold]
    fn cross(&self, e: u64, n: u64, slot: usize, slices: usize, contended: &mut bool) -> Row0 {
        let mut s = self.guard.load(Ordering::Acquire);
        loop {
            if s & PIN_MASK != PIN || s & (RETIRED | CROSSING) != 0 {
                // Another add is pinned: contention. Never wait.
                unpin(&self.guard);
                *contended = true;
                return Row0::Busy;
            }
            match self
                .guard
                .compare_exchange(s, s | CROSSING, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        // Row 0 is ours: nobody else writes a cell or `base` until we
        // unpin, and every earlier add's writes happen before our CAS.
        let old = self.base.load(Ordering::Acquire);
        debug_assert!(block(old) < block(e));
        let cells = self.cells(slices);
        let k = slices as u64;
        let lo = floor(e);
        for (i, c) in cells.iter().enumerate() {
            let w = c.load(Ordering::Acquire);
            if !matches!(decode(old, w), Some(y) if y >= lo) {
                c.store(pack(tag(first_at_or_after(lo, i, k)), 0), Ordering::Release);
            }
        }
        self.base.store(e, Ordering::Release);
        let cell = &cells[slot];
        let added = match step(cell.load(Ordering::Acquire), e, e, n) {
            Step::TooOld => Added::TooOld,
            Step::Saturated => Added::Recorded,
            Step::Write(new) => {
                cell.store(new, Ordering::Release);
                Added::Recorded
            }
        };
        // Clear `CROSSING` and unpin in one RMW (activations may have
        // bumped the version meanwhile).
        self.guard
            .fetch_add(VERSION.wrapping_sub(PIN + CROSSING), Ordering::AcqRel);
        Row0::Added(added)
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
            // Clear `DORMANT` (the version may have moved if an aborted
            // eviction retired and restored the row); never on a retired row.
            let mut s = row.guard.load(Ordering::Acquire);
            while s & DORMANT != 0 && s & RETIRED == 0 {
                match row.guard.compare_exchange_weak(
                    s,
                    s & !DORMANT,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(actual) => s = actual,
                }
            }
        }
    }

    /// Called by an add that row 0 refused (a crossing holds it, or the add
    /// needed to cross while others were pinned) and whose extension row
    /// was unusable: activates dormant rows, and restores rows retired by
    /// an eviction that is bound to fail, so the add never waits for that
    /// evictor. Proof: the retired value was written by an evictor's CAS
    /// that followed its snapshot `s0` of row 0's guard (unpinned, not
    /// retired); our `Acquire` load of that value orders our later load of
    /// row 0's guard after `s0`. If that load sees a pin, row 0's guard
    /// has left `s0` for good (a pin or unpin always changes it; versions
    /// only grow) without being retired, so the evictor's final CAS from
    /// `s0` fails and it would restore the row itself, to the value we
    /// write. Retirements carry a fresh version ([`retired`]), so our CAS
    /// cannot undo a later retirement. If row 0 is no longer pinned, the
    /// add's next try on row 0 succeeds (or finds the entry dead).
    #[cold]
    fn unblock(&self, ext: &Ext) {
        self.activate(ext);
        for row in ext.rows.iter() {
            let s = row.guard.load(Ordering::Acquire);
            if s & RETIRED == 0 {
                continue;
            }
            let g = self.guard.load(Ordering::Acquire);
            if g & RETIRED == 0 && g & PIN_MASK != 0 {
                let _ = row.guard.compare_exchange(
                    s,
                    s & !RETIRED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        }
        spin_hint();
    }

    /// Calls `f(epoch, count)` for every row-0 cell with a non-zero count,
    /// by the reader rule (see the module docs).
    #[inline]
    fn for_each_row0(&self, slices: usize, f: &mut impl FnMut(u64, u64)) {
        let mut words = [0u64; READ_CHUNK];
        for chunk in self.cells(slices).chunks(READ_CHUNK) {
            let words = &mut words[..chunk.len()];
            let b = loop {
                let b1 = self.base.load(Ordering::Acquire);
                for (w, c) in words.iter_mut().zip(chunk) {
                    *w = c.load(Ordering::Acquire);
                }
                let b2 = self.base.load(Ordering::Acquire);
                if block(b1) == block(b2) {
                    break b2;
                }
                // A crossing completed in between: read again.
            };
            for &w in words.iter() {
                let c = count_of(w);
                if c > 0 {
                    if let Some(y) = decode(b, w) {
                        f(y, c);
                    }
                }
            }
        }
    }

    /// Calls `f(epoch, count)` for every cell of every row (row-0 cells
    /// with count 0 may be skipped).
    #[inline]
    fn for_each_cell(&self, slices: usize, mut f: impl FnMut(u64, u64)) {
        self.for_each_row0(slices, &mut f);
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
                    // Pins and activations are refused and other evictors
                    // give up on a retired guard; only an add that proved
                    // this eviction doomed ([`Entry::unblock`]) may have
                    // restored it already, to the same value.
                    let _ = row.guard.compare_exchange(
                        retired(s),
                        retired(s) & !RETIRED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                }
            }
        };
        if let Some(ext) = ext {
            for (i, (row, &s)) in ext.rows.iter().zip(&snaps).enumerate() {
                if row
                    .guard
                    .compare_exchange(s, retired(s), Ordering::AcqRel, Ordering::Acquire)
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
        let mut b = EntryRef::layout(slices).size();
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
        let e = EntryRef::new(4, 0);
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
        let e = EntryRef::new(4, 0);
        e.add(20, 1, 4, 2);
        assert!(!e.try_retire(3, 4));
    }

    #[test]
    fn striped_rows_are_summed_and_retired() {
        let e = EntryRef::new(3, 0);
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
        let e = EntryRef::new(2, 0);
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
