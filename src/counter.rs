//! [`StripedCounter`]: a LongAdder-style counter whose cells each have one
//! writing thread, so that an add is a plain load and store.

// Design notes (for maintainers; not part of the public docs).
//
// # Protocol
// - Cells are stripes (see `crate::stripes`): none until the first add,
//   then one *owned* cell per writing thread (up to the CPU count rounded
//   up to a power of two), written only by its owner; threads beyond that
//   (or whose slot another thread owns) add to *shared* cells with a CAS,
//   grown on contention as `LongAdder`'s are.
// - A cell holds `count`, the running total of every add into it
//   (wrapping), and `taken`, the part of `count` that resets have already
//   handed out. Its value is `count - taken` (wrapping arithmetic).
// - An add reads `count` and `taken` and writes `count + min(n, room)`,
//   `room = u64::MAX - (count - taken)`: the owner with a plain store, a
//   shared writer with a CAS against the `count` it read.
// - `sum` reads each cell's `taken`, then its `count`. `sum_and_reset`
//   (and `reset`) reads them the same way and CASes `taken` from what it
//   read to the `count` it read, retrying on failure: an add racing it
//   lands before that `count` (and is in this total) or after it (and is in
//   the next), never in both and never in neither. Zeroing a cell in place
//   (or `swap(0)`, which is enough for CAS-only cells) would lose or double
//   an owner's add: the owner's store would put back a count read before
//   the swap.
//
// # Orderings
// - `taken` is CASed with `AcqRel` and loaded with `Acquire` before
//   `count`. A reset's load of `count` happens-before its CAS of `taken`,
//   so a later reader that sees that `taken` reads a `count` at least as
//   new (read-read coherence): `count - taken` never goes "negative".
// - `count` is written with plain stores (owner) or CASes, and read
//   `Relaxed`: counts are independent facts, and coherence alone makes a
//   sum see every add that happened before it.
// - A cell passes from an exited owner to the next holder of its token
//   through `crate::thread_id`'s mutex, so the new owner's first load
//   sees the old owner's last store.
//
// # Saturation
// A cell's value saturates at `u64::MAX`: the room is computed against the
// `taken` the writer read, which may be older than the current one, so the
// writer can only under-estimate its room (saturate early, which needs
// 2^64 counts between two resets), never wrap. `sum` adds cells with
// saturation, so a counter pinned at its maximum reads `u64::MAX`.

use crate::stripes::{default_cap, normalize_cap, Stripes, Writer};
use crate::sync::{AtomicU64, Ordering};
use std::fmt;

/// One counter cell, alone on its 128-byte line pair (on x86-64 the
/// adjacent-line prefetcher pulls lines in pairs, so 64-byte padding still
/// lets two cells' lines ping-pong).
#[repr(align(128))]
struct Cell {
    /// Every add so far (wrapping).
    count: AtomicU64,
    /// The part of `count` already handed out by resets.
    taken: AtomicU64,
}

impl Cell {
    fn new() -> Cell {
        Cell {
            count: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        }
    }

    /// `count` after adding `n` to a cell at `count` with `taken`: the value
    /// `count - taken` saturates at `u64::MAX`.
    #[inline(always)]
    fn added(count: u64, taken: u64, n: u64) -> u64 {
        let room = u64::MAX - count.wrapping_sub(taken);
        count.wrapping_add(n.min(room))
    }

    /// Adds `n` as the cell's only writer: a load and a store. Returns the
    /// cell's value after the add, as of the `taken` it read (a take since
    /// makes it less).
    #[inline(always)]
    fn add_sole(&self, n: u64) -> u64 {
        let c = self.count.load(Ordering::Relaxed);
        let t = self.taken.load(Ordering::Relaxed);
        let new = Self::added(c, t, n);
        self.count.store(new, Ordering::Relaxed);
        new.wrapping_sub(t)
    }

    /// Adds `n` with a CAS. Returns whether a CAS failed because another
    /// thread wrote (contention), and the cell's value after the add as
    /// [`add_sole`](Self::add_sole)'s.
    #[inline]
    fn add_shared(&self, n: u64) -> (bool, u64) {
        let mut contended = false;
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            let t = self.taken.load(Ordering::Relaxed);
            let new = Self::added(c, t, n);
            match self
                .count
                .compare_exchange_weak(c, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (contended, new.wrapping_sub(t)),
                Err(actual) => {
                    // `compare_exchange_weak` may fail spuriously; only a
                    // changed value is contention.
                    contended |= actual != c;
                    c = actual;
                }
            }
        }
    }

    /// The cell's value now.
    fn value(&self) -> u64 {
        let t = self.taken.load(Ordering::Acquire);
        let c = self.count.load(Ordering::Relaxed);
        c.wrapping_sub(t)
    }

    /// Hands out the cell's value: moves `taken` up to the `count` read.
    fn take(&self) -> u64 {
        let mut t = self.taken.load(Ordering::Acquire);
        loop {
            let c = self.count.load(Ordering::Relaxed);
            if c == t {
                return 0;
            }
            match self
                .taken
                .compare_exchange(t, c, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return c.wrapping_sub(t),
                Err(actual) => t = actual,
            }
        }
    }
}

/// A concurrent counter that scales with threads: striped cells, one per
/// writing thread, each written without a locked instruction (the design of
/// Java's `LongAdder`, with the single-writer cells of folly's
/// `ThreadCachedInt`, kept exact).
///
/// ```
/// use stripecount::StripedCounter;
/// use std::sync::Arc;
///
/// let hits = Arc::new(StripedCounter::new());
/// let workers: Vec<_> = (0..4)
///     .map(|_| {
///         let hits = Arc::clone(&hits);
///         std::thread::spawn(move || {
///             for _ in 0..1000 {
///                 hits.add(1);
///             }
///         })
///     })
///     .collect();
/// for w in workers {
///     w.join().unwrap();
/// }
/// assert_eq!(hits.sum(), 4000);
/// assert_eq!(hits.sum_and_reset(), 4000);
/// assert_eq!(hits.sum(), 0);
/// ```
pub struct StripedCounter {
    cells: Stripes<Cell>,
}

impl StripedCounter {
    /// A counter with no cell yet: the first add creates one, and each
    /// thread that adds gets its own, up to the CPU count rounded up to a
    /// power of two (threads beyond that share cells, grown on contention
    /// up to as many again).
    pub fn new() -> Self {
        Self::with_max_stripes(default_cap())
    }

    /// A counter with at most `max` owned cells and `max` shared ones
    /// (`max` rounded up to a power of two, clamped to `2..=256`). Useful to
    /// bound memory when many counters exist, or to force sharing in tests.
    pub fn with_max_stripes(max: usize) -> Self {
        StripedCounter {
            cells: Stripes::new(normalize_cap(max)),
        }
    }

    /// Loom models only: every thread adds to shared cells (written by
    /// CAS), as threads beyond the owned cells do, so that a model can race
    /// writers on one cell.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn __loom_shared(mut self) -> Self {
        self.cells.share_all();
        self
    }

    /// Adds `n`, saturating at `u64::MAX`.
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.add_in_cell(n);
    }

    /// [`add`](Self::add), returning the value of the cell the add went to,
    /// right after it: at most what the counter holds then (a take racing
    /// the add may have made it less). The hot-key detector's striped
    /// entries bound their count with it (`keyed/hot.rs`).
    #[inline(always)]
    pub(crate) fn add_in_cell(&self, n: u64) -> u64 {
        let (cell, writer) = self.cells.for_writer(Cell::new);
        if writer == Writer::Sole {
            return cell.add_sole(n);
        }
        let (contended, value) = cell.add_shared(n);
        if contended {
            self.cells.contended(Cell::new);
        }
        value
    }

    /// The total of every add so far (saturating). Adds racing the sum may or
    /// may not be included; adds that finished before it started are.
    pub fn sum(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(c.value()))
    }

    /// Sets the counter to zero. Adds racing the reset either land before it
    /// (and are discarded) or after it (and are kept); none is half-applied.
    pub fn reset(&self) {
        for c in self.cells.iter() {
            c.take();
        }
    }

    /// Returns the total and resets to zero in one pass. Each cell's value
    /// is taken with a CAS, so an add racing this call is counted exactly
    /// once: in this total or in the next.
    pub fn sum_and_reset(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(c.take()))
    }

    /// Cells allocated now: 0 before the first add, then one per thread that
    /// added (up to [`max_stripes`](Self::max_stripes)), plus shared cells
    /// if more threads than that added.
    pub fn stripes(&self) -> usize {
        self.cells.len()
    }

    /// The most owned cells this counter may grow to (and the most shared
    /// ones: at most twice this in all).
    pub fn max_stripes(&self) -> usize {
        self.cells.cap()
    }

    /// The most cells it may ever hold, owned and shared:
    /// `2 * max_stripes()` (`crate::stripes`).
    pub(crate) fn max_cells(&self) -> u64 {
        2 * self.cells.cap() as u64
    }

    /// Heap bytes: the slot arrays and the cells allocated so far.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.cells.header_bytes() + self.cells.len() * std::mem::size_of::<Cell>()
    }
}

impl Default for StripedCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripedCounter")
            .field("sum", &self.sum())
            .field("stripes", &self.stripes())
            .finish()
    }
}
