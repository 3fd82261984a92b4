//! [`CellRow`]: slice cells in whole 128-byte lines, one stripe's ring (or
//! rings).

use super::SliceCell;

/// Cells per 128-byte chunk of a [`CellRow`] (16-byte cells).
const CHUNK: usize = 8;

/// Eight cells on their own 128-byte line pair (see `crate::counter` for
/// why 128 and not 64).
#[repr(align(128))]
struct Chunk([SliceCell; CHUNK]);

// `cell_unchecked` indexes the chunks as one flat array of cells.
const _: () = assert!(std::mem::size_of::<Chunk>() == CHUNK * std::mem::size_of::<SliceCell>());

/// A row of slice cells padded to whole 128-byte lines: one stripe's ring
/// (or rings), so that two stripes never share a cache line. Used by the
/// window, the multi-level window and the per-key extension rows.
pub(crate) struct CellRow {
    chunks: Box<[Chunk]>,
}

impl CellRow {
    /// `len` cells, cell `j` starting at epoch `j` with count 0 (the slot's
    /// first epoch; epochs before time 0 count nothing).
    pub(crate) fn new(len: usize) -> CellRow {
        CellRow::from_epochs((0..len as u64).collect())
    }

    /// One cell per initial epoch (count 0 each), padded to whole chunks.
    pub(crate) fn from_epochs(mut epochs: Vec<u64>) -> CellRow {
        let padded = epochs.len().div_ceil(CHUNK) * CHUNK;
        epochs.resize(padded, 0);
        CellRow {
            chunks: epochs
                .chunks_exact(CHUNK)
                .map(|c| Chunk(std::array::from_fn(|i| SliceCell::new(c[i]))))
                .collect(),
        }
    }

    /// Cell `i`.
    #[inline]
    pub(crate) fn cell(&self, i: usize) -> &SliceCell {
        &self.chunks[i / CHUNK].0[i % CHUNK]
    }

    /// Cell `i`, without the bounds check of [`CellRow::cell`] (an add's
    /// hot path, whose slot is below the ring length by construction).
    ///
    /// # Safety
    /// `i` must be below the row's length (the `len` it was built with).
    #[inline(always)]
    pub(crate) unsafe fn cell_unchecked(&self, i: usize) -> &SliceCell {
        debug_assert!(i < self.chunks.len() * CHUNK);
        // SAFETY: `Chunk` is `[SliceCell; CHUNK]` aligned to its own size
        // (128 bytes), so the chunks are one contiguous array of cells, and
        // the caller keeps `i` inside it.
        unsafe { &*self.chunks.as_ptr().cast::<SliceCell>().add(i) }
    }

    /// Cells held, padding included (a whole number of 8-cell chunks).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Heap bytes of a row of `len` cells (plus `size_of::<CellRow>()`).
    pub(crate) fn heap_bytes(len: usize) -> usize {
        len.div_ceil(CHUNK) * std::mem::size_of::<Chunk>()
    }
}
