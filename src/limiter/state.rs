//! [`AdmissionState`]: the admission protocol, in a plain struct of three
//! atomics that can live inline wherever its owner wants it (inside a
//! direct limiter, or in a per-key table's slot).
//!
//! A state never reads a clock and holds no limit: the caller passes `now`
//! and the limits with every call, and the state's [`Config`] (the time
//! grid and windows, shared by every state of one limiter) by reference.
//! This file says what the words hold; the files above it act on them: the
//! roll (`roll.rs`, `help.rs`), the grant (`grant.rs`), the reads
//! (`snapshot.rs`) and the owner's seal and copy (`lifecycle.rs`).
//!
//! # Words
//! Inline (24 bytes; the only words a grant touches when one limit is
//! enforced):
//! - `epoch`: the newest finest epoch (see `config.rs`), only increasing;
//!   or a *flagged* value, bit 63 set: the state is sealed for good
//!   (`lifecycle.rs`).
//! - `state`: `tag:16 | sealed:1 | used:47` ([`Admission`]). `tag` is the
//!   tag of the epoch the word belongs to; `used` is the units granted in
//!   the fold level's whole window at that epoch (its frozen part plus the
//!   current slice). A grant is one CAS `used -> used + units`.
//! - `block`: null, the history held inline while its counts are small
//!   (`inline.rs`), or a pointer to the history block (`block.rs`); its
//!   readings and moves are in `history.rs`.
//!
//! # Invariants
//! 1. `epoch` only increases, and moves from `E` only when the state holds
//!    `E` unsealed. So the state's epoch is `epoch` or its previous value
//!    `prev`; the state is `prev`'s (roll in progress) iff its tag is not
//!    `tag(epoch)`.
//! 2. Every move `E -> T` has `T - E < S` or `(T - E) mod 2^16 >= S` (`S`:
//!    the fold level's slices; a jump that would alias is made in two steps,
//!    via `E + S`). So the tag distance `d` is the true distance when it is
//!    below `S`, `d >= S` means "the fold level's window has expired", and
//!    `tag(T) != tag(E)`.
//! 3. A state holding epoch `E` unsealed has `used = P_fold(E) +
//!    granted(E)`, every other level's `frozen` is its `P_i(E)`, and no
//!    grant takes any level above its budget: **no window over-admits**.
//! 4. While a state is sealed its `used` is final. The roll's writes to the
//!    history all happen before the state is unsealed into the new epoch
//!    (see `roll.rs`).
//!
//! # Orderings
//! Loads are `Acquire`, CASes `AcqRel`: a roll's history writes are
//! sequenced before its unseal (release), which every later grant or roll
//! reads (acquire) through the CAS chain on `state` (RMWs extend release
//! sequences). The block pointer is installed (release) before the history
//! it carries is used, and read (acquire) after `state`.
//!
//! # ABA
//! A thread descheduled between a load and its CAS while the word goes
//! through 2^16 epochs and comes back to the identical 64 bits could
//! succeed with a stale decision (the bound of [`crate::slice`]).

use super::block::{Block, Cell};
use super::config::Config;
pub(crate) use super::config::MAX_EPOCH;
use super::denied::Denied;
use super::history::History;
use crate::pack::{Admission, AtomicWord, Tag, Word};
use crate::sync::{AtomicPtr, AtomicU64, Ordering};

/// Bit 63 of `epoch`: the state is sealed for good (see `lifecycle.rs`).
/// Every epoch of time ([`MAX_EPOCH`] and below) has it clear, and
/// [`PENDING_EPOCH`] is above them even when unflagged.
pub(crate) const FLAG: u64 = 1 << 63;
const _: () = assert!(MAX_EPOCH == FLAG - 2);
/// `epoch` of a state waiting to be filled by a copy.
pub(crate) const PENDING_EPOCH: u64 = u64::MAX;

/// One admission state (see the module docs). 24 bytes.
pub struct AdmissionState {
    pub(super) epoch: AtomicU64,
    pub(super) state: AtomicWord<Admission>,
    pub(super) block: AtomicPtr<Cell>,
}

/// Why a request was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Limit `level` refused it.
    Denied {
        /// Why.
        reason: Denied,
        /// The index of the limit that refused.
        level: usize,
    },
    /// The state is sealed (or waits for a copy): look the key up again.
    Sealed,
}

/// `state >> 47` (the tag and seal bits) of a word holding epoch `e`
/// unsealed: `tag(e) << 1`; with bit 17 set when `e` is flagged, so that no
/// word matches a sealed-for-good or pending state. One compare then tests
/// tag, seal and flag.
#[inline(always)]
pub(crate) fn key(e: u64) -> u64 {
    const TAG_AT: u32 = Admission::TAG.shift() - Admission::SEALED.shift();
    const FLAG_AT: u32 = Admission::TAG.end() - Admission::SEALED.shift();
    ((e & Admission::TAG.max()) << TAG_AT) | ((e >> 63) << FLAG_AT)
}

/// Whether `s` is the unsealed word of the epoch whose [`key`] is `k`.
#[inline(always)]
pub(crate) fn holds(s: Word<Admission>, k: u64) -> bool {
    s.raw() >> Admission::SEALED.shift() == k
}

const _: () = assert!(Admission::SEALED.end() == Admission::TAG.shift());

impl AdmissionState {
    /// A state at `epoch` (clamped to [`MAX_EPOCH`]) with nothing granted
    /// and no history (`history.rs`).
    pub fn new(cfg: &Config, epoch: u64) -> AdmissionState {
        let epoch = epoch.min(MAX_EPOCH);
        AdmissionState {
            epoch: AtomicU64::new(epoch),
            state: AtomicWord::new(Admission::word(Tag::of(epoch), false, 0)),
            block: AtomicPtr::new(super::history::first_history(cfg, epoch)),
        }
    }

    /// What the `block` word holds: nothing, an inline history or a block
    /// (`history.rs`).
    #[inline]
    pub(super) fn history<'a>(&'a self, cfg: &Config) -> History<'a> {
        self.history_as::<false>(cfg)
    }

    /// [`history`](Self::history), of a state of one limit when `ONE`
    /// (`History::of_as`).
    #[inline]
    pub(super) fn history_as<'a, const ONE: bool>(&'a self, cfg: &Config) -> History<'a> {
        // SAFETY: the `block` word is null, inline, or a block of `cfg`
        // (states are only used with their own config) freed only by
        // `Drop`, and `self` is borrowed for `'a`.
        unsafe { History::of_as::<ONE>(self.block.load(Ordering::Acquire), cfg) }
    }

    /// The history block, if any (`None` for an inline history).
    #[inline]
    pub(super) fn block<'a>(&'a self, cfg: &Config) -> Option<Block<'a>> {
        match self.history(cfg) {
            History::Block(b) => Some(b),
            _ => None,
        }
    }

    /// The newest epoch at `now`: `now`'s or the state's, whichever is later.
    #[inline]
    pub(crate) fn newest(&self, cfg: &Config, now: u64) -> u64 {
        let e = self.epoch.load(Ordering::Acquire) & !FLAG;
        cfg.epoch_of(now).max(e.min(MAX_EPOCH))
    }
}
