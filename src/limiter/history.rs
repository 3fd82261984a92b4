//! The history of an admission state: what its `block` word holds, and how
//! that moves as the state rolls. The counts live in one of two forms below
//! this file: packed in the word itself (`inline.rs`), or in a block behind
//! it (`block.rs`).
//!
//! # The `block` word
//! One word, three readings ([`History`]):
//! - **null**: no history yet; every recorded count is 0, at any epoch.
//! - **inline** (bit 0 set): the counts themselves (`inline.rs`), tagged
//!   with the epoch `E` they describe.
//! - **a block pointer** (bit 0 clear: blocks are word-aligned), as in
//!   `block.rs`.
//!
//! A multi-limit state reads bit 0 differently: `E << 1 | 1` is *quiet*, no
//! count recorded in any level yet, at the full epoch `E` (a level's window
//! can span more than 2^16 finest slices, so a tag would not do). A state
//! starts quiet; a roll with nothing to record moves the word to `T`'s
//! quiet value, and the first roll with a count writes a fresh block that
//! already describes `T` (`block::alloc_levels`), as the single-limit
//! spill does. So a key seen in one slice of a multi-limit keyed limiter
//! allocates nothing either.
//!
//! # Moves (the roll, `roll.rs`)
//! null -> inline -> ... -> inline -> block, never back: a roll from null
//! with a zero count writes nothing; any other roll from null or inline
//! writes, by one CAS from the value it read, the history of its new epoch
//! `T`: inline if every count fits its field, else (*spill*) a fresh block
//! already describing `T` (`block::alloc_rolled`). The new value is a
//! function of the sealed state word and of the value read, so every helper
//! computes the same one; the CAS succeeds only for the first, and a
//! loser's block is freed unshared.
//!
//! # Invariants
//! 1. While a state holds `E` unsealed, its `block` word is null, inline
//!    tagged `E`, quiet at `E`, or a block whose `frozen` (and `at`, with
//!    several limits) describe `E`.
//! 2. The word never returns to null, a quiet word only moves to later
//!    epochs, and a block is never replaced: a helper that read null, an
//!    inline word tagged `E` or a quiet word at `E`, and whose CAS from it
//!    succeeds, is the first writer of the roll from `E` (for an inline
//!    word, ABA only after 2^16 epochs, the bound of every tag in
//!    `state.rs`).

use super::block::{Block, Cell};
use super::config::Config;
use super::inline::{Inline, MARK};
use crate::pack::{Tag, TagCount};
use crate::sync::Ordering;

// A block pointer has bit 0 clear.
const _: () = assert!(std::mem::align_of::<Cell>() >= 2);

/// The inline word `w` as the `block` word holds it: an address no one
/// dereferences (bit 0 set), never a pointer to memory.
#[inline]
pub(crate) fn inline_ptr(w: Inline) -> *mut Cell {
    // (`ptr::without_provenance_mut` says the same, from Rust 1.84; the
    // crate's MSRV is 1.80.)
    w.bits() as usize as *mut Cell
}

/// The `block` word of a multi-limit state with nothing recorded at full
/// epoch `e` (`e <= MAX_EPOCH < 2^63`, so `e << 1` does not overflow).
#[inline]
pub(crate) fn quiet(e: u64) -> *mut Cell {
    (e << 1 | MARK) as usize as *mut Cell
}

/// The `block` word of a fresh state at `epoch`: no history (null) for one
/// limit; quiet at `epoch` for several (module docs), or, where a pointer
/// cannot hold an epoch (32-bit targets), a fresh block.
pub(crate) fn first_history(cfg: &Config, epoch: u64) -> *mut Cell {
    if cfg.len() == 1 {
        std::ptr::null_mut()
    } else if usize::BITS >= 64 {
        quiet(epoch)
    } else {
        super::block::alloc(cfg, epoch, Tag::of(epoch))
    }
}

/// What a `block` word holds (module docs).
#[derive(Clone, Copy)]
pub(crate) enum History<'a> {
    /// No history: every count is 0.
    Empty,
    /// The counts, inline (single-limit states).
    Inline(Inline),
    /// No count recorded yet in any level, at this full epoch `E`
    /// (multi-limit states, module docs).
    Quiet(u64),
    /// A history block.
    Block(Block<'a>),
}

impl<'a> History<'a> {
    /// Reads a `block` word.
    ///
    /// # Safety
    /// As [`Block::at`]: `raw` is the `block` word of a state of `cfg`
    /// borrowed for `'a`.
    #[inline]
    pub(crate) unsafe fn of(raw: *mut Cell, cfg: &Config) -> History<'a> {
        // SAFETY: the caller's contract.
        unsafe { Self::of_as::<false>(raw, cfg) }
    }

    /// [`of`](Self::of), for a state of one limit when `ONE` (whose `block`
    /// word is never quiet: bit 0 set is always an inline history), which
    /// saves a single-limit refusal the look at `cfg`'s limit count. With
    /// `ONE` and several limits, a quiet word would read as inline counts:
    /// a wrong answer, never a dereference (the caller's to avoid).
    ///
    /// # Safety
    /// As [`of`](Self::of).
    #[inline]
    pub(crate) unsafe fn of_as<const ONE: bool>(raw: *mut Cell, cfg: &Config) -> History<'a> {
        debug_assert!(!ONE || cfg.len() == 1);
        let bits = raw as usize as u64;
        if bits & MARK != 0 {
            if !ONE && cfg.len() > 1 {
                History::Quiet(bits >> 1)
            } else {
                History::Inline(Inline::from_bits(bits))
            }
        } else {
            // SAFETY: not inline, so null or a block of `cfg` (caller).
            match unsafe { Block::at(raw, cfg) } {
                None => History::Empty,
                Some(b) => History::Block(b),
            }
        }
    }

    /// Whether `raw` is a block pointer (which its state's `Drop` frees).
    #[inline]
    pub(crate) fn is_block(raw: *mut Cell) -> bool {
        !raw.is_null() && raw as usize as u64 & MARK == 0
    }

    /// The fold level's `P(t)` if this history already describes finest
    /// epoch `t` (a thread helping the roll wrote it into `t`), else `None`.
    ///
    /// The checks are an early exit, not what keeps a stale helper out: a
    /// history that has moved past `t` was followed by the unseal into `t`,
    /// so the helper's own unseal CAS, from the sealed word it read, fails
    /// whatever value it carries (no loom model catches the tag check
    /// dropped, rightly).
    pub(crate) fn p_at(&self, cfg: &Config, t: u64) -> Option<u64> {
        match self {
            History::Inline(w) => (w.tag() == Tag::of(t)).then(|| w.sum(cfg.inline_width())),
            History::Quiet(at) => (*at == t).then_some(0),
            History::Block(b) => {
                // `at` is unused with one limit; the tag then says it all.
                if cfg.len() > 1 && b.at_word().load(Ordering::Acquire).raw() != t {
                    return None;
                }
                let f = b.frozen(cfg.level(cfg.fold())).load(Ordering::Acquire);
                (TagCount::TAG.get(f) == Tag::of(t)).then(|| TagCount::COUNT.get(f))
            }
            History::Empty => None,
        }
    }
}
