//! [`StripedCounter`]: a LongAdder-style counter whose cells grow on
//! contention.
//!
//! # Protocol
//! - The counter starts with one cache-padded cell. A thread adds with a CAS
//!   on the cell its probe selects (see [`crate::sync`]); the CAS (rather
//!   than `fetch_add`) is what lets it *see* contention and saturate.
//! - A failed CAS means another thread wrote the same cell: the thread
//!   re-hashes its probe (so its next add lands elsewhere) and doubles the
//!   cells (up to the CPU count rounded up to a power of two), then retries
//!   on the cell it already holds. Nobody waits for anybody.
//! - `sum` reads every cell; `sum_and_reset` and `reset` `swap(0)` each cell,
//!   so an add racing them lands either in the returned total or in the
//!   cell after the swap, never nowhere (the bug of "zero in place").
//!
//! # Orderings
//! Counts are independent facts, so cell CASes and loads are `Relaxed`:
//! coherence alone guarantees a `sum` sees every add that happened before it.
//! Cell growth publishes pointers with `Release`/`Acquire` (see
//! [`crate::stripes`]).
//!
//! # Saturation
//! Each cell saturates at `u64::MAX` and `sum` saturates while adding cells,
//! so a counter pinned at its maximum reads `u64::MAX`, never a wrapped value.

use crate::stripes::{default_cap, normalize_cap, Stripes};
use crate::sync::{probe, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;

/// One counter cell, alone on its cache line(s). `CachePadded` is 128 bytes
/// on x86-64 because the adjacent-line prefetcher pulls lines in pairs:
/// 64-byte padding still lets two cells' lines ping-pong.
type Cell = CachePadded<AtomicU64>;

/// A concurrent counter that scales with threads: striped cells grown on
/// contention (the design of Java's `LongAdder`).
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
///                 hits.increment();
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
    /// A counter with one cell; more cells only after contention is seen,
    /// up to the CPU count rounded up to a power of two.
    pub fn new() -> Self {
        Self::with_max_stripes(default_cap())
    }

    /// A counter that grows to at most `max` cells (rounded up to a power of
    /// two, clamped to `2..=256`). Useful to bound memory when many counters
    /// exist, or to force growth in tests.
    pub fn with_max_stripes(max: usize) -> Self {
        StripedCounter {
            cells: Stripes::new(CachePadded::new(AtomicU64::new(0)), normalize_cap(max)),
        }
    }

    /// Adds `n`, saturating at `u64::MAX`.
    #[inline]
    pub fn add(&self, n: u64) {
        let cell = self.cells.for_probe(probe::get());
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            match cell.compare_exchange_weak(
                cur,
                cur.saturating_add(n),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => {
                    // `compare_exchange_weak` may fail spuriously; only a
                    // changed value is contention.
                    if actual != cur {
                        self.contended();
                    }
                    cur = actual;
                }
            }
        }
    }

    #[cold]
    fn contended(&self) {
        probe::rehash();
        self.cells.grow(|| CachePadded::new(AtomicU64::new(0)));
    }

    /// Adds one.
    #[inline]
    pub fn increment(&self) {
        self.add(1)
    }

    /// The total of every add so far (saturating). Adds racing the sum may or
    /// may not be included; adds that finished before it started are.
    pub fn sum(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(c.load(Ordering::Relaxed)))
    }

    /// Sets the counter to zero. Adds racing the reset either land before it
    /// (and are discarded) or after it (and are kept); none is half-applied.
    pub fn reset(&self) {
        for c in self.cells.iter() {
            c.swap(0, Ordering::Relaxed);
        }
    }

    /// Returns the total and resets to zero in one pass. Each cell is
    /// swapped out, so an add racing this call is counted exactly once:
    /// in this total or in the next.
    pub fn sum_and_reset(&self) -> u64 {
        self.cells.iter().fold(0u64, |acc, c| {
            acc.saturating_add(c.swap(0, Ordering::Relaxed))
        })
    }

    /// Cells allocated now (1 until contention is seen).
    pub fn stripes(&self) -> usize {
        self.cells.len()
    }

    /// The most cells this counter may grow to.
    pub fn max_stripes(&self) -> usize {
        self.cells.cap()
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
