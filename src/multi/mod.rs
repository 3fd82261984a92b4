//! [`MultiWindow`]: one structure that answers several spans (1 minute,
//! 1 hour, 24 hours, ...) at several resolutions, from one clock read.
//!
//! # Model
//! Level `k` is a sliding window of `W_k` in `S_k` slices of `L_k = W_k /
//! S_k`; levels are given finest first, `W_k` strictly increases and `L_k`
//! is a whole multiple of `L_{k-1}`. Every add is filed at every level under
//! that level's epoch `now / L_k`. `sum_over_at(now, span)` picks the finest
//! level with `W_k >= span` and sums its last `k = ceil(span / L_k)` slices,
//! now's partial slice included: the adds whose level epoch is in
//! `(epoch(now) - k, epoch(now)]`.
//!
//! # One concept per file (each with its invariants at its top)
//! - `layout.rs`: levels to *rings* (one per distinct slice length, a power
//!   of two long), all rings of one stripe back to back in one *row*, and
//!   the memory that costs.
//! - `fold.rs`: the writers' protocol. An add writes ring 0 only (one CAS);
//!   a count moves to the coarser rings when its fine cell is rolled, under
//!   the row's *fold marks*. Where every count is at every moment.
//! - `read.rs`: a level's sum over rings `0..=r`, retried until it saw no
//!   fold in flight; why every level sees every add exactly once.
//! - `window.rs`: the public type: configuration errors, the add's fast path
//!   (the owner's slice cache), sums over spans, accessors. `builder.rs`:
//!   its builder (the levels and a clock).
//!
//! # Cost
//! An add is, on its fast path, exactly a `SlidingWindow::add_at`: the
//! probe, the stripe lookup, the owner's slice cache (one compare against
//! the inline slice length) and a store, whatever the number of levels; off
//! it, one division `now / L_0` (precomputed), a mask instead of a `% S`, a
//! snapshot and one CAS. Rolls take the slow path, once per finest slice
//! per row: per ring touched, a take, a seal-and-move and a placement, plus
//! the two mark increments. Measured (`cargo bench --bench multi`, see
//! `BENCHMARKS.md`): three levels cost about one window's add, against about
//! 3x for three separate windows. (Before folding, an add did one CAS per
//! distinct slice length, 2.6x for three levels: locked instructions do not
//! overlap.)
//!
//! Reads pay instead: a level of ring `r` reads the cells of rings `0..=r`,
//! and a read that overlaps a fold of the same row retries; if the folding
//! thread was descheduled mid-fold, the reader waits for it (spinning, then
//! yielding). Adds never wait for anyone.

mod builder;
mod fold;
mod layout;
mod read;
mod window;

pub use builder::MultiWindowBuilder;
pub use layout::MAX_LEVELS;
pub use window::MultiWindow;
