//! The roll: moving an admission state from epoch `E` into a later epoch
//! `T` (cold: once per finest slice that sees a request; any thread
//! helps, none waits).
//!
//! A helper acts on a snapshot: `epoch` (= `T`), then `state`, then `epoch`
//! again unchanged (checked in `help.rs`); without the re-read a thread
//! holding a stale `epoch` would "roll" the newer state back into its old
//! epoch.
//! 1. CAS `epoch: E -> T` (`help.rs`, only while the state holds `E`
//!    unsealed).
//! 2. *Seal*: CAS `state` to set `sealed`. Grants into `E` racing the seal
//!    either land before it (and are in the final `used`) or fail and help.
//!    This closes the race in which a slow thread still grants into the old
//!    slice after another thread has computed the new frozen sums.
//! 3. *Record* (`roll_one.rs`, `roll_levels.rs`): the final count of every level slice that
//!    closes, zeros for the skipped slices still in a window (only over
//!    words that carry the slice's tag: see `record`), and the new `open`
//!    counts; then each level's `frozen = P_i(T)`. A single-limit history
//!    held inline (`inline.rs`) is all of this in one word, one CAS.
//! 4. *Unseal*: CAS `state` to `tag(T) | used = P_fold(T)` (`help.rs`);
//!    the helper whose CAS this is may add its own request's units to it
//!    when they fit (`help.rs`, the ride-along grant).
//!
//! The new state is published only after the old slice's final count is
//! recorded (3 before 4): this closes the race in which the next roll reads
//! a history that is missing the last slice (a loom counter-example). A
//! fixed window (one level, one slice) has no history: its roll is the
//! single CAS `state: tag(E) | c -> tag(T) | 0`, which cannot wipe a grant.
//!
//! # Determinism
//! Every value written in step 3 is a function of the sealed `state` and of
//! the block's words for `E`, which nothing changes until the unseal: all
//! helpers write the same values. Each write is a CAS from the value the
//! helper read, done only while the state is still the sealed one (ring
//! words) or from a word tagged `E` (`frozen`, `open`, `at`, an inline
//! history; or a null history word, which never comes back), so a stale
//! helper cannot clobber a later roll's words; an equal value means "already
//! done".
//!
//! # Files
//! This file has the two writes every roll makes: a slice's count
//! ([`record`](AdmissionState::record)) and a history word
//! ([`install`](AdmissionState::install)). Above it, `roll_one.rs` rolls a
//! state of one limit and `roll_levels.rs` one of several; `help.rs` runs
//! steps 1, 2 and 4 and calls the right one for step 3.

use super::block::{self, Block, Cell};
use super::config::{Config, Level};
use super::history::History;
use super::state::AdmissionState;
use crate::pack::{Admission, Tag, TagCount, Word};
use crate::sync::Ordering;

impl AdmissionState {
    /// Writes the history of the roll into `t` (`new`, the fold level's
    /// `P(t)` = `p`) over the null, inline or quiet word `raw` it was
    /// computed from, by one CAS. The first writer of the roll wins
    /// (invariant 2 of `history.rs`); a loser frees its block unshared and
    /// takes `P(t)` from what the winner wrote, or `None` if the state
    /// moved on.
    pub(super) fn install(
        &self,
        cfg: &Config,
        raw: *mut Cell,
        new: *mut Cell,
        p: u64,
        t: u64,
    ) -> Option<u64> {
        match self
            .block
            .compare_exchange(raw, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Some(p),
            Err(actual) => {
                if History::is_block(new) {
                    // SAFETY: `new` was never shared.
                    unsafe { block::free(new) };
                }
                // SAFETY: as `history()`: the state's own word.
                unsafe { History::of(actual, cfg) }.p_at(cfg, t)
            }
        }
    }

    /// Writes level `lv`'s slice `k` = `count` while the state is still the
    /// sealed `s`. `false` if the state moved on (the caller is stale).
    ///
    /// A zero is not written where the word already reads 0 for `k` (its
    /// tag is not `tag(k)`). Every slice a roll passes inside the new
    /// window is *settled* this way (the closing slice too, even with a
    /// zero count): its word then reads right for it, and it is not written
    /// again until the roll that passes `k + S`, after `k` has left every
    /// window (readers read only slices at or before the state's epoch). So
    /// ring words need not be kept recent: a word from 2^16 epochs ago that
    /// carries `k`'s tag is overwritten when `k` is passed. This turns the
    /// zeros of skipped slices (most of a roll's writes on a key seen every
    /// few slices) into loads.
    pub(super) fn record(
        &self,
        b: Block<'_>,
        lv: Level,
        k: u64,
        count: u64,
        s: Word<Admission>,
    ) -> bool {
        let slot = b.slot(lv, k);
        let want = TagCount::word(Tag::of(k), count.min(TagCount::COUNT.max()));
        loop {
            let cur = slot.load(Ordering::Acquire);
            if cur == want || (count == 0 && TagCount::TAG.get(cur) != Tag::of(k)) {
                return true;
            }
            if self.state.load(Ordering::Acquire) != s {
                return false;
            }
            if slot
                .compare_exchange(cur, want, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }
}
