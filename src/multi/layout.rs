//! The layout of a [`MultiWindow`](super::MultiWindow): its levels mapped to
//! rings, and every ring of one stripe in one row.
//!
//! # Structure
//! One striped set of *rows* (see [`crate::stripes`]); a row is one
//! stripe's cells of **all** levels, back to back in 128-byte aligned
//! chunks: ring 0, then ring 1, ..., plus the row's two *fold marks* (see
//! `fold.rs`) and its owner's slice cache (see `src/window/ring.rs`). Each cell is the
//! crate's epoch-tagged [`SliceCell`](crate::slice) used as a *folding*
//! cell ([`SliceCell::add_folding`]). There is one ring per
//! distinct slice length: levels with the same slice length share one ring
//! (their epochs are equal), sized for the longest of them. A ring has
//! `P = S.next_power_of_two()` slots for the largest `S` it serves (at most
//! 2x memory): the slot of an epoch is then `epoch & (P - 1)`, a mask rather
//! than a division. A ring longer than a window is harmless: readers keep
//! only the cells whose epoch is in their range.
//!
//! # Memory
//! A row is `16 * sum(P)` bytes over the distinct rings, rounded up to 128,
//! plus a 128-byte header (the cell pointer, the fold marks and the slice
//! cache); one row until contention is seen, then up to one per CPU
//! (rounded up to a power of two), as for `SlidingWindow`. `(1 min, 60)`,
//! `(1 h, 60)`, `(24 h, 24)` is 160 cells, 2.625 KiB a row.
//!
//! # Invariants (established by [`Layout::new`], relied on by the other files)
//! - Rings are in increasing slice length; ring `k > 0`'s `L_k` is a whole
//!   multiple of ring `k - 1`'s, and `ratio = L_k / L_{k-1} >= 2` (ring 0's
//!   ratio is 1). So ring `j`'s epoch `e` lies inside ring `k`'s epoch
//!   `e / (L_k / L_j)` for `j <= k`.
//! - Ring `k` is the row's cells `base..base + len`, `len` a power of two
//!   at least every sharing level's slice count, `mask = len - 1`; the rings
//!   tile the row from cell 0 (ring 0 first) without overlap.
//! - Every level's `W = L * S` fits in a `u64` (validated by
//!   [`slice_nanos`]).
//! - Cell `j` of every ring starts at epoch `j` with count 0: the slot's
//!   residue, before any add (the slice cache's start, epoch 0 in slot 0,
//!   is true from the start).

use crate::error::ConfigError;
use crate::slice::{CellRow, SliceCell};
use crate::sync::AtomicU64;
use crate::window::slice_nanos;
use std::time::Duration;

/// The most levels a [`MultiWindow`](super::MultiWindow) may have. A read
/// of a coarse level scans the finer levels' rings too, so levels are not
/// free; 16 already cover, say, 1 s to 24 h with a level per 2x of window,
/// more than any use we know of needs.
pub const MAX_LEVELS: usize = 16;

/// One stripe's cells of every ring (on their own cache lines) and the
/// row's fold marks: how many folds have begun and how many have ended (see
/// `fold.rs`). The marks share a line with the cell pointer, which adds
/// only read: they are written twice per fold, once per fine slice.
#[repr(align(128))]
pub(super) struct Row {
    pub(super) cells: CellRow,
    pub(super) begun: AtomicU64,
    pub(super) ended: AtomicU64,
    /// The owner's slice cache (owned rows only, as `SlidingWindow`'s; see
    /// `src/window/ring.rs`): the start of the ring-0 epoch `e`
    /// of the owner's latest add that set a ring-0 cell's epoch, and that
    /// cell's index. Invariant: that cell holds `e`, unsealed, with `e`'s
    /// tag. Only the owner reads or writes them (`Relaxed`).
    pub(super) start: AtomicU64,
    pub(super) slot: AtomicU64,
}

impl Row {
    /// A row holding every ring; slot `j` of a ring starts at epoch `j`
    /// (any epoch of the right residue with count 0 would do).
    pub(super) fn new(rings: &[RingSpec]) -> Row {
        let cells: usize = rings.iter().map(|r| r.len).sum();
        let mut init = vec![0u64; cells];
        for r in rings {
            for (j, e) in init[r.base..r.base + r.len].iter_mut().enumerate() {
                *e = j as u64;
            }
        }
        Row {
            cells: CellRow::from_epochs(init),
            begun: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            start: AtomicU64::new(0),
            slot: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(super) fn cell(&self, i: usize) -> &SliceCell {
        self.cells.cell(i)
    }
}

/// One ring of every row: all that an add needs. Levels with the same
/// slice length share one ring (sized for the longest of them).
#[derive(Debug, Clone)]
pub(super) struct RingSpec {
    /// `L`, the slice length in nanoseconds.
    pub(super) slice_nanos: u64,
    /// `P - 1`: the slot of epoch `e` is `e & mask`.
    pub(super) mask: u64,
    /// `L / L'` for the previous (finer) ring's `L'` (1 for ring 0): this
    /// ring's epoch of a finer ring's epoch `e'` is `e' / ratio`.
    pub(super) ratio: u64,
    /// Index of the ring's first cell in a row.
    pub(super) base: usize,
    /// `P`, the ring length (a power of two, at least every sharing
    /// level's slice count).
    pub(super) len: usize,
}

/// One level as configured, for reads and `Debug`.
#[derive(Debug, Clone)]
pub(super) struct Level {
    /// Index of the level's ring in the rings.
    pub(super) ring: usize,
    /// `L_k` in nanoseconds.
    pub(super) slice_nanos: u64,
    /// `W_k` in nanoseconds.
    pub(super) window_nanos: u64,
    /// `W_k` as given.
    pub(super) window: Duration,
    /// `S_k` as given.
    pub(super) slices: usize,
}

/// The rings and levels of a configuration.
pub(super) struct Layout {
    pub(super) rings: Box<[RingSpec]>,
    pub(super) levels: Box<[Level]>,
}

impl Layout {
    /// The layout of `levels` (`(window, slices)`, finest first), or the
    /// configuration error of [`MultiWindow::new`](super::MultiWindow::new).
    pub(super) fn new(levels: &[(Duration, usize)]) -> Result<Layout, ConfigError> {
        if levels.is_empty() {
            return Err(ConfigError::NoLevels);
        }
        if levels.len() > MAX_LEVELS {
            return Err(ConfigError::Invalid(
                "a MultiWindow has at most MAX_LEVELS (16) levels",
            ));
        }
        let mut out: Vec<Level> = Vec::with_capacity(levels.len());
        let mut rings: Vec<RingSpec> = Vec::with_capacity(levels.len());
        for (i, &(window, slices)) in levels.iter().enumerate() {
            let l = slice_nanos(window, slices)?;
            let ring = match out.last() {
                None => None,
                Some(prev) if window <= prev.window => {
                    return Err(ConfigError::LevelsNotIncreasing { level: i });
                }
                Some(prev) if l % prev.slice_nanos != 0 => {
                    return Err(ConfigError::LevelSliceMismatch { level: i });
                }
                // Same slice length: share the previous level's ring.
                Some(prev) if l == prev.slice_nanos => Some(prev.ring),
                Some(_) => None,
            };
            let len = slices.next_power_of_two();
            let ring = match ring {
                Some(r) => {
                    rings[r].len = rings[r].len.max(len);
                    r
                }
                None => {
                    let ratio = rings.last().map_or(1, |r: &RingSpec| l / r.slice_nanos);
                    rings.push(RingSpec {
                        slice_nanos: l,
                        ratio,
                        mask: 0, // set with the layout below
                        base: 0,
                        len,
                    });
                    rings.len() - 1
                }
            };
            out.push(Level {
                ring,
                slice_nanos: l,
                window_nanos: l * slices as u64, // validated: fits in u64
                window,
                slices,
            });
        }
        let mut base = 0;
        for r in &mut rings {
            r.mask = r.len as u64 - 1;
            r.base = base;
            base += r.len;
        }
        Ok(Layout {
            rings: rings.into_boxed_slice(),
            levels: out.into_boxed_slice(),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rings_are_powers_of_two_back_to_back() {
        let Layout { rings, .. } = Layout::new(&[
            (Duration::from_secs(10), 10),
            (Duration::from_secs(60), 6),
            (Duration::from_secs(3600), 60),
        ])
        .unwrap();
        let spans: Vec<(usize, usize)> = rings.iter().map(|r| (r.base, r.len)).collect();
        assert_eq!(spans, vec![(0, 16), (16, 8), (24, 64)]);
        assert_eq!(Row::new(&rings).cells.capacity(), 88); // 11 chunks of 8
        assert_eq!(std::mem::size_of::<Row>(), 128); // header: pointer and marks
    }

    #[test]
    fn levels_with_one_slice_length_share_a_ring() {
        const MIN: Duration = Duration::from_secs(60);
        // 5, 10, 30 and 60 minutes by the minute, 24 hours by the hour.
        let Layout { rings, levels } = Layout::new(&[
            (5 * MIN, 5),
            (10 * MIN, 10),
            (30 * MIN, 30),
            (60 * MIN, 60),
            (24 * 60 * MIN, 24),
        ])
        .unwrap();
        let spans: Vec<(usize, usize)> = rings.iter().map(|r| (r.base, r.len)).collect();
        assert_eq!(spans, vec![(0, 64), (64, 32)]);
        let ring_of: Vec<usize> = levels.iter().map(|l| l.ring).collect();
        assert_eq!(ring_of, vec![0, 0, 0, 0, 1]);
    }
}
