//! The out-of-line part of an admission state: the *history block*, one
//! allocation of [`Config::block_words`] words behind the state's `block`
//! pointer.
//!
//! # Layout
//! - word 0: the block's length in words (written once, read by `free`,
//!   which has no [`Config`]);
//! - word 1: `at`, the full finest epoch that the levels' `frozen` and
//!   `open` words describe (multi-limit states only; see `roll_levels.rs`);
//! - then for each level `i`, from [`Level::base`]: `frozen` (`tag | P`:
//!   the final counts of the level's window before the current slice),
//!   `open` (`tag | count`: the level's current slice before the current
//!   finest slice; always 0 for the fold level; multi-limit states only),
//!   and, from [`Level::ring`], the ring of `S_i` slice words
//!   `tag(k) | count(k)`, slot `k mod S_i`: the final count of level slice
//!   `k`.
//!
//! A single-limit block is therefore `[length, frozen, ring]`: `S + 2`
//! words (96 bytes for 10 slices; `at` and `open` would be two words no
//! one reads).
//!
//! `frozen` and `open` are tagged with the finest epoch they describe,
//! ring words with their own level's slice number; a ring word whose tag is
//! not `tag(k)` counts 0 for `k`.
//!
//! # Life
//! A single-limit state starts with no block: its `block` word holds the
//! history inline while every count fits (`inline.rs`), and the roll whose
//! counts first do not fit *spills* it into a fresh block that already
//! describes the roll's new epoch ([`alloc_rolled`]), installed by one CAS
//! (losers free theirs). With no inline width (48 or more slices) that is
//! the first roll that records a non-zero count. A multi-limit state starts
//! *quiet* (its `block` word holds its full epoch, `history.rs`) and gets a
//! block from the first roll with a count ([`alloc_levels`]); on a 32-bit
//! target it gets one at construction. A block is never replaced or freed
//! while its state lives; [`free`] runs from the state's `Drop`.

use super::config::{Config, Level, BLOCK_HEADER};
use crate::pack::{AtomicWord, Tag, TagCount, Word};
use crate::sync::Ordering;

/// A block's words, as the state's pointer holds them.
pub(crate) type Cell = AtomicWord<TagCount>;

/// A view of a live block.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    words: &'a [Cell],
}

impl<'a> Block<'a> {
    /// The block behind `ptr` (non-null, from [`alloc`] or [`clone_of`] with
    /// the same `cfg`), or `None` for null.
    ///
    /// # Safety
    /// `ptr` must be null or a block of `cfg.block_words()` words that stays
    /// allocated for `'a` (blocks live as long as their state: the caller
    /// borrows the state for `'a`).
    #[inline]
    pub(crate) unsafe fn at(ptr: *mut Cell, cfg: &Config) -> Option<Block<'a>> {
        if ptr.is_null() {
            return None;
        }
        // SAFETY: by the caller's contract `ptr` points to `block_words`
        // initialized cells that outlive `'a`; cells are only ever shared.
        let words = unsafe { std::slice::from_raw_parts(ptr, cfg.block_words()) };
        debug_assert_eq!(words[0].load(Ordering::Relaxed).raw(), words.len() as u64);
        Some(Block { words })
    }

    /// The full epoch the levels' `frozen` and `open` words describe
    /// (multi-limit blocks only).
    #[inline]
    pub(crate) fn at_word(&self) -> &'a Cell {
        &self.words[1]
    }

    /// Level `lv`'s `frozen` word.
    #[inline]
    pub(crate) fn frozen(&self, lv: Level) -> &'a Cell {
        &self.words[lv.base]
    }

    /// Level `lv`'s `open` word (multi-limit blocks only).
    #[inline]
    pub(crate) fn open(&self, lv: Level) -> &'a Cell {
        debug_assert_eq!(lv.ring, lv.base + 2);
        &self.words[lv.base + 1]
    }

    /// The ring slot of level `lv`'s slice `k`.
    #[inline]
    pub(crate) fn slot(&self, lv: Level, k: u64) -> &'a Cell {
        &self.words[lv.ring + (k % lv.slices) as usize]
    }

    /// The sum of the recorded counts of level `lv`'s slices `lo..hi`.
    ///
    /// Walks the ring from one remainder rather than taking `k % S` per
    /// slice: a roll sums the slices leaving a window (up to `S - 1` for a
    /// level of several limits), and a 64-bit division costs tens of cycles
    /// where the rest of a slice's step costs a few. Its own loop rather
    /// than [`walk`](Self::walk)'s: a sum never stops, and the walk's
    /// stop test cost `MultiLimiter::decide` 0.1 more branch mispredicts
    /// a call (`scripts/callgrind-limiter.sh md`: 1.18 against 1.08).
    pub(crate) fn recorded_sum(&self, lv: Level, lo: u64, hi: u64) -> u64 {
        if lo >= hi {
            return 0;
        }
        let n = lv.slices as usize;
        let ring = &self.words[lv.ring..lv.ring + n];
        let mut i = (lo % lv.slices) as usize;
        let mut sum = 0u64;
        for k in lo..hi {
            let w = ring[i].load(Ordering::Acquire);
            if TagCount::TAG.get(w) == Tag::of(k) {
                sum = sum.saturating_add(TagCount::COUNT.get(w));
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        sum
    }

    /// The first of level `lv`'s slices `lo..hi` (at most `S` of them),
    /// oldest first, whose recorded count `c` is not zero and passes
    /// `f(k, c)`. `slot`: the ring slot of `lo` (`lo mod S`), from the
    /// caller, so that the walk takes no division.
    #[inline(always)]
    pub(crate) fn find(
        &self,
        lv: Level,
        lo: u64,
        hi: u64,
        slot: usize,
        mut f: impl FnMut(u64, u64) -> bool,
    ) -> Option<u64> {
        debug_assert!(lo >= hi || slot as u64 == lo % lv.slices);
        self.walk::<false>(lv, lo, hi, slot, |k, c| c > 0 && f(k, c))
    }

    /// [`find`](Self::find), newest first; `slot`: the ring slot of
    /// `hi - 1`.
    #[inline(always)]
    pub(crate) fn rfind(
        &self,
        lv: Level,
        lo: u64,
        hi: u64,
        slot: usize,
        mut f: impl FnMut(u64, u64) -> bool,
    ) -> Option<u64> {
        debug_assert!(lo >= hi || slot as u64 == (hi - 1) % lv.slices);
        self.walk::<true>(lv, lo, hi, slot, |k, c| c > 0 && f(k, c))
    }

    /// The walk of [`find`](Self::find) and [`rfind`](Self::rfind): level
    /// `lv`'s slices `lo..hi` (at most `S`), oldest first, or newest first
    /// when `NEWEST_FIRST`, from ring slot `slot` (that of `lo`, or of
    /// `hi - 1`) stepping one slot at a time with the wrap, no division.
    /// Calls `f(k, c)` on each slice whose word holds its tag (its recorded
    /// count `c`, maybe 0; a stale word is no count) and stops at the first
    /// `true`, returning that slice.
    #[inline(always)]
    fn walk<const NEWEST_FIRST: bool>(
        &self,
        lv: Level,
        lo: u64,
        hi: u64,
        slot: usize,
        mut f: impl FnMut(u64, u64) -> bool,
    ) -> Option<u64> {
        if lo >= hi {
            return None;
        }
        let n = lv.slices as usize;
        let ring = &self.words[lv.ring..lv.ring + n];
        let mut i = slot;
        for j in 0..hi - lo {
            let k = if NEWEST_FIRST { hi - 1 - j } else { lo + j };
            let w = ring[i].load(Ordering::Acquire);
            if TagCount::TAG.get(w) == Tag::of(k) && f(k, TagCount::COUNT.get(w)) {
                return Some(k);
            }
            if NEWEST_FIRST {
                i = if i == 0 { n - 1 } else { i - 1 };
            } else {
                i += 1;
                if i == n {
                    i = 0;
                }
            }
        }
        None
    }
}

/// A fresh block: `at` as given (multi-limit blocks; a single-limit block
/// has none), every `frozen` and `open` word `tag | 0`, every ring word
/// count 0.
pub(crate) fn alloc(cfg: &Config, at: u64, tag: Tag) -> *mut Cell {
    let zero = TagCount::word(tag, 0);
    let mut words: Vec<Cell> = (0..cfg.block_words()).map(|_| Cell::new(zero)).collect();
    words[0] = Cell::new(Word::from_raw(cfg.block_words() as u64));
    if cfg.len() > 1 {
        debug_assert!(cfg.block_words() >= BLOCK_HEADER);
        words[1] = Cell::new(Word::from_raw(at));
    }
    Box::into_raw(words.into_boxed_slice()).cast::<Cell>()
}

/// A fresh single-limit block describing epoch `t` (module docs of
/// `history.rs`, the spill): `frozen = tag(t) | p`, the ring word of slice
/// `t - j` = `count(j)` for `1 <= j < S` (`p` is their sum), every other
/// word `tag(t) | 0`.
pub(crate) fn alloc_rolled(cfg: &Config, t: u64, p: u64, count: impl Fn(u64) -> u64) -> *mut Cell {
    debug_assert_eq!(cfg.len(), 1);
    let lv = cfg.level(0);
    let ptr = alloc(cfg, 0, Tag::of(t));
    // SAFETY: `ptr` is a block of `cfg` that only this thread holds.
    let b = unsafe { Block::at(ptr, cfg) }.expect("non-null");
    b.frozen(lv).store(
        TagCount::word(Tag::of(t), p.min(TagCount::COUNT.max())),
        Ordering::Relaxed,
    );
    for j in 1..lv.slices.min(t + 1) {
        let k = t - j;
        b.slot(lv, k).store(
            TagCount::word(Tag::of(k), count(j).min(TagCount::COUNT.max())),
            Ordering::Relaxed,
        );
    }
    ptr
}

/// A fresh multi-limit block describing finest epoch `t`, for a state that
/// was quiet at `e < t` (nothing recorded in any level: `history.rs`) and
/// whose finest slice `e` closed with `cur`. Per level, with `e_i`, `t_i`
/// its slices of `e` and `t`: if `t_i = e_i` the level's slice goes on
/// (`open = cur`); else slice `e_i` is recorded with `cur` if still in the
/// window and `open = 0`; `frozen` = the recorded slices plus `open` (as
/// `roll_levels.rs` computes them). Returns the block and the fold level's `frozen`.
pub(crate) fn alloc_levels(cfg: &Config, e: u64, t: u64, cur: u64) -> (*mut Cell, u64) {
    debug_assert!(cfg.len() > 1 && e < t);
    let ptr = alloc(cfg, t, Tag::of(t));
    // SAFETY: `ptr` is a block of `cfg` that only this thread holds.
    let b = unsafe { Block::at(ptr, cfg) }.expect("non-null");
    let cur = cur.min(TagCount::COUNT.max());
    let mut fold = 0;
    for (i, lv) in cfg.levels().iter().enumerate() {
        let (ei, ti) = (lv.index(e), lv.index(t));
        let (open, frozen) = if ti == ei {
            (cur, cur)
        } else if ti - ei < lv.slices {
            b.slot(*lv, ei)
                .store(TagCount::word(Tag::of(ei), cur), Ordering::Relaxed);
            (0, cur)
        } else {
            (0, 0)
        };
        b.open(*lv)
            .store(TagCount::word(Tag::of(t), open), Ordering::Relaxed);
        b.frozen(*lv)
            .store(TagCount::word(Tag::of(t), frozen), Ordering::Relaxed);
        if i == cfg.fold() {
            fold = frozen;
        }
    }
    (ptr, fold)
}

/// A new block holding the words of `src` (a block no one writes any more:
/// that of a sealed state).
pub(crate) fn clone_of(src: Block<'_>) -> *mut Cell {
    let words: Box<[Cell]> = src
        .words
        .iter()
        .map(|w| Cell::new(w.load(Ordering::Acquire)))
        .collect();
    Box::into_raw(words).cast::<Cell>()
}

/// Frees a block.
///
/// # Safety
/// `ptr` came from [`alloc`] or [`clone_of`], is not freed yet, and no one
/// will read it again.
pub(crate) unsafe fn free(ptr: *mut Cell) {
    // SAFETY: `ptr` is a live block (caller's contract), whose word 0 is its
    // length, as allocated.
    let len = unsafe { (*ptr).load(Ordering::Acquire).raw() } as usize;
    // SAFETY: `ptr` and `len` are exactly the boxed slice `alloc` or
    // `clone_of` leaked, and it is freed once.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
}
