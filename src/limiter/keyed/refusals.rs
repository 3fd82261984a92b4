//! The refusal count ([`KeyedLimiter::refusals`]): one cell per thread,
//! found from the thread's token alone.
//!
//! A refused request is decided on loads only, so counting it is the one
//! write a refusal makes, and it sits at the end of a request bound by
//! memory latency: every load it waits on delays the next request's
//! misses. A [`StripedCounter`] finds the thread's cell through three
//! dependent loads (the token, the slot's pointer, the cell); a cell
//! indexed by the token itself needs one (the token), the array's address
//! being read from the limiter beside it. On `keyed_steady klr` (1
//! thread, Zipf, every request refused) that took a request from 78.5 to
//! 73.9 ns (BENCHMARKS.md, per-key limits: the refusal count).
//!
//! The limiter makes a cell for each CPU (rounded up to a power of two, as
//! [`StripedCounter`] does): 128 bytes each. Services run more threads
//! than CPUs (a main thread, a pool, blocking threads), so the threads
//! with later tokens count in `rest`, whose owned cells cover 256 more
//! threads: a thread that counted with a CAS instead (a locked
//! instruction) held back the next request's lookup misses, 41.2 against
//! 32.6 ns a refused request with 2 threads on 2 CPUs.
//!
//! # Invariants
//! 1. Cell `i` is written only by the holder of thread token `i + 1`, with
//!    a plain load and store. A token has at most one holder at a time
//!    (`thread_id.rs` invariant 1), so a cell has one writer at a time.
//! 2. A token passes from an exited thread to the next holder through the
//!    token registry's mutex (`thread_id.rs` invariant 2): the old holder's
//!    last store happens-before the new holder's first load, so the cell's
//!    count passes on whole.
//! 3. A thread whose token has no cell (more threads than cells, or no
//!    token) adds to `rest`, a [`StripedCounter`] with its own protocol
//!    (`counter.rs`).
//! 4. Nothing resets the count: a cell only grows, saturating at
//!    `u64::MAX`, and so does the sum.
//!
//! # Orderings
//! Every access is `Relaxed`. Counts are independent facts: coherence
//! alone makes a sum see every add that happened-before it, and the hand-off
//! of a cell between holders is ordered by the registry's mutex
//! (invariant 2), not by the cell.
//!
//! # The design it replaces
//! Cells indexed by the token modulo their number, written with a plain
//! load and store and no owner: two live threads whose tokens share a cell
//! lose each other's counts. `loom-tests/tests/keyed_refusals.rs` keeps it
//! as a counter-example.
//!
//! [`KeyedLimiter::refusals`]: super::KeyedLimiter::refusals

use crate::stripes::MAX_STRIPES;
use crate::sync::{AtomicU64, Ordering};
use crate::thread_id;
use crate::StripedCounter;
use crossbeam_utils::CachePadded;

/// The most owned cells `rest` grows to: every thread up to
/// [`MAX_STRIPES`] more counts with a plain store. Under loom, a few: a
/// model runs 2-3 threads, and a sum loads every slot.
const REST_STRIPES: usize = if cfg!(loom) { 4 } else { MAX_STRIPES };

/// A monotonic count with a cell for each of the first `cells` thread
/// tokens, and a striped counter for the other threads.
pub(super) struct Refusals {
    /// Cell `i` is token `i + 1`'s (invariant 1). Each on its own line
    /// pair: two threads' counts never share a line.
    cells: Box<[CachePadded<AtomicU64>]>,
    /// The threads without a cell (invariant 3): owned cells, a plain store
    /// each, for up to [`MAX_STRIPES`] more of them before any shares one
    /// with a CAS.
    rest: StripedCounter,
}

impl Refusals {
    /// A count at zero with `cells` per-token cells (at least one).
    pub(super) fn new(cells: usize) -> Refusals {
        Refusals {
            cells: (0..cells.max(1)).map(|_| Default::default()).collect(),
            rest: StripedCounter::with_max_stripes(REST_STRIPES),
        }
    }

    /// Adds one for the calling thread: a load and a store to its cell,
    /// inlined into the request (see `count_refusal` in `acquire.rs`).
    #[inline(always)]
    pub(super) fn add_one(&self) {
        // `NONE` (`u32::MAX`) and tokens past the cells fall through.
        let i = thread_id::current().wrapping_sub(1) as usize;
        match self.cells.get(i) {
            Some(cell) => {
                // Invariant 1: no other thread writes this cell now.
                let c = cell.load(Ordering::Relaxed);
                cell.store(c.saturating_add(1), Ordering::Relaxed);
            }
            None => self.rest.add(1),
        }
    }

    /// Every add that happened-before this call, and perhaps some racing
    /// it (saturating).
    pub(super) fn sum(&self) -> u64 {
        self.cells
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .fold(self.rest.sum(), u64::saturating_add)
    }

    /// Heap bytes: the cells and `rest`'s.
    pub(super) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.cells) + self.rest.heap_bytes()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_with_and_without_a_cell_are_all_counted() {
        // One cell: at most one of these threads has a token that fits it
        // (the test harness's threads hold the others), so most go to
        // `rest`.
        const ADDS: u64 = crate::sized(1000, 20);
        let r = Arc::new(Refusals::new(1));
        let hs: Vec<_> = (0..8)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for _ in 0..ADDS + t {
                        r.add_one();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(r.sum(), 8 * ADDS + (0..8).sum::<u64>());
    }

    #[test]
    fn a_cell_saturates() {
        // Enough cells for this thread's token.
        let r = Refusals::new(thread_id::current() as usize);
        r.add_one();
        assert_eq!(r.sum(), 1);
        r.cells[thread_id::current() as usize - 1].store(u64::MAX - 1, Ordering::Relaxed);
        r.add_one();
        r.add_one();
        assert_eq!(r.sum(), u64::MAX);
    }

    #[test]
    fn heap_bytes_counts_the_cells() {
        let r = Refusals::new(4);
        assert!(r.heap_bytes() >= 4 * std::mem::size_of::<CachePadded<AtomicU64>>());
    }
}
