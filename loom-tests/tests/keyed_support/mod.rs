//! A stand-alone two-slot row of packed `tag:16 | count:48` cells with a
//! `base` word, as in `stripecount`'s per-key row 0 (`src/keyed/entry.rs`),
//! with switches for the naive orders that row's protocol rules out. Only
//! the counter-examples in `keyed.rs` use it; the real row is modeled
//! through the public API.

use loom::sync::atomic::{AtomicU64, Ordering};

const COUNT_BITS: u32 = 48;
const SPAN: u64 = 1 << 16;
const BLOCK_BITS: u32 = 13;
pub const SLOTS: u64 = 2;

fn pack(epoch: u64, count: u64) -> u64 {
    ((epoch % SPAN) << COUNT_BITS) | count
}

fn count_of(w: u64) -> u64 {
    w & ((1 << COUNT_BITS) - 1)
}

/// The largest epoch `<= base` with the word's tag (`None` below 0).
fn decode(base: u64, w: u64) -> Option<u64> {
    base.checked_sub(base.wrapping_sub(w >> COUNT_BITS) % SPAN)
}

pub struct PackedRow {
    base: AtomicU64,
    cells: [AtomicU64; SLOTS as usize],
}

impl PackedRow {
    /// `base` and each slot's (zero-count) epoch.
    pub fn new(base: u64, epochs: [u64; SLOTS as usize]) -> Self {
        PackedRow {
            base: AtomicU64::new(base),
            cells: epochs.map(|y| AtomicU64::new(pack(y, 0))),
        }
    }

    /// An add within `base`'s block (no crossing). `base_first`: the naive
    /// order, `base` loaded before the cell.
    pub fn add(&self, e: u64, n: u64, base_first: bool) {
        let cell = &self.cells[(e % SLOTS) as usize];
        loop {
            let (w, mut b) = if base_first {
                let b = self.base.load(Ordering::Acquire);
                (cell.load(Ordering::Acquire), b)
            } else {
                let w = cell.load(Ordering::Acquire);
                (w, self.base.load(Ordering::Acquire))
            };
            if e > b {
                assert_eq!(e >> BLOCK_BITS, b >> BLOCK_BITS, "no crossing here");
                b = self.base.fetch_max(e, Ordering::AcqRel).max(e);
            }
            let new = match decode(b, w) {
                Some(y) if y > e => return, // older than the ring
                Some(y) if y == e => pack(e, count_of(w) + n),
                _ => pack(e, n),
            };
            if cell
                .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }

    /// A crossing by the only writer: re-tag cells older than `lo` (count
    /// 0), publish `base = e`, then add `n` at `e`.
    pub fn cross(&self, e: u64, n: u64, lo: u64) {
        let old = self.base.load(Ordering::Acquire);
        for (i, c) in self.cells.iter().enumerate() {
            let w = c.load(Ordering::Acquire);
            if !matches!(decode(old, w), Some(y) if y >= lo) {
                let y = lo + (i as u64 + SLOTS - lo % SLOTS) % SLOTS;
                c.store(pack(y, 0), Ordering::Release);
            }
        }
        self.base.store(e, Ordering::Release);
        self.cells[(e % SLOTS) as usize].store(pack(e, n), Ordering::Release);
    }

    /// The window sum at `last` (adds at epochs in `(last - SLOTS, last]`).
    /// `check_b1`: the reader rule (retry if `base` changed block between
    /// the loads around the cells); without it, the naive reader.
    pub fn sum(&self, last: u64, check_b1: bool) -> u64 {
        loop {
            let b1 = self.base.load(Ordering::Acquire);
            let words: Vec<u64> = self
                .cells
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .collect();
            let b2 = self.base.load(Ordering::Acquire);
            if check_b1 && b1 >> BLOCK_BITS != b2 >> BLOCK_BITS {
                continue;
            }
            return words
                .iter()
                .filter(|&&w| count_of(w) > 0)
                .filter_map(|&w| decode(b2, w).map(|y| (y, count_of(w))))
                .filter(|&(y, _)| y <= last && last - y < SLOTS)
                .map(|(_, c)| c)
                .sum();
        }
    }
}
