//! The reads of a [`MultiWindow`](super::MultiWindow): a level's sum over
//! its ring and every finer ring, retried across folds.
//!
//! # A level's range in every ring
//! A level of ring `r` with slice length `L` sums, for `k = ceil(span /
//! L)`, the adds whose ring-`r` epoch is in `(end - k, end]`, `end = now /
//! L`. A count not yet folded sits in a finer ring `j` under its ring-`j`
//! epoch `e`, which is inside ring `r`'s epoch `e / div` (`div` the product
//! of the ratios of rings `j+1..=r`, see `layout.rs`). So ring `r`'s range is
//! ring `j`'s epochs `lo..=hi` with `lo = (end + 1 - k) * div` and `hi =
//! (end + 1) * div - 1`: one comparison per cell, no division. The bounds
//! are computed in `u128` (they may pass `u64::MAX`: a `lo` past it matches
//! no cell, a `hi` past it is clamped).
//!
//! # Invariants
//! - Every level sees every add exactly once: by the invariant of
//!   `fold.rs`, a count is in one live cell of one ring, in flight in one
//!   fold, or dropped. A level of ring `r` counts the add in the ring
//!   (`<= r`) that holds it, or not at all if it has moved past ring `r`
//!   (ring `r` rolled past its epoch, so it is outside every window of that
//!   level at the roller's time). A count in flight is seen by no cell
//!   read, or by two (take and placement): the row's read is then retried
//!   (the fold marks, `fold.rs`): `ended` loaded `Acquire` before the cells,
//!   `begun` `Acquire` after them, equal or retry.
//! - Ring 0 alone needs no check: a fold only takes counts out of it, and
//!   only counts outside its window at the roller's time. Its read loads no
//!   mark.
//! - Levels are read separately; an add racing two sums over two levels
//!   can be seen by one and not (yet) by the other, exactly as with two
//!   windows.
//! - Sums saturate at `u64::MAX`; nothing wraps.
//! - A reader waits only for a fold in flight on the row it reads (spin,
//!   then yield: [`wait_hint`]); writers never wait for readers.

use super::layout::{RingSpec, Row};
use crate::sync::{wait_hint, Ordering};

/// One row's count of the epochs `(end - k, end]` of ring `r`: the cells
/// of ring `r` and of every finer ring (whose counts not yet folded belong
/// to ring `r`'s epochs too). Ring 0 alone needs no check: a fold only
/// takes counts out of it. Otherwise the read is retried until no fold of
/// this row began or was in progress while it ran (see the module docs),
/// so every count is seen exactly once.
pub(super) fn row_sum(rings: &[RingSpec], row: &Row, r: usize, end: u64, k: u64) -> u64 {
    let mut rounds = 0;
    loop {
        // Ring 0 alone needs no check (see above): no load.
        let ended = if r > 0 {
            row.ended.load(Ordering::Acquire)
        } else {
            0
        };
        let mut sum = 0u64;
        // Ring `j`'s epoch `e` is ring `r`'s `e / div`; ring `r`'s epochs
        // `(end - k, end]` are ring `j`'s `lo..=hi`, compared without a
        // division per cell (bounds computed in u128, as they may pass
        // u64::MAX: a `lo` past it matches no cell).
        let mut div = 1u128;
        for j in (0..=r).rev() {
            let ring = &rings[j];
            let first = (u128::from(end) + 1).saturating_sub(u128::from(k));
            let bounds = (first * div, (u128::from(end) + 1) * div - 1);
            div *= u128::from(ring.ratio);
            let Ok(lo) = u64::try_from(bounds.0) else {
                continue;
            };
            let hi = u64::try_from(bounds.1).unwrap_or(u64::MAX);
            for i in ring.base..ring.base + ring.len {
                let (e, c) = row.cell(i).read_folding();
                if e >= lo && e <= hi {
                    sum = sum.saturating_add(c);
                }
            }
        }
        if r == 0 || row.begun.load(Ordering::Acquire) == ended {
            return sum;
        }
        wait_hint(&mut rounds);
    }
}
