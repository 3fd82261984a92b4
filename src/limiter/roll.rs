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
//! 3. *Record* (this file): the final count of every level slice that
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
//! # One limit
//! `E` is not stored: the tag distance `d = tag(T) - tag(E)` is the true
//! distance when `d < S`, and `d >= S` means every slice of `E`'s window has
//! expired (invariant 2 of `state.rs`). While the history is null or inline
//! (`inline.rs`) the roll computes `T`'s whole history from the sealed word
//! and the value read, and writes it by one CAS: inline, or spilled into a
//! fresh block (then `P(T) = P(E) + count(E)` minus the fields shifted out
//! of the word). With a block: `hist[E] = used - P(E)` (if `E` is still in
//! `T`'s window), zeros for the skipped slices of `T`'s window, `frozen:
//! P(E) -> P(T)`.
//!
//! `P(T)` is computed from `P(E)`, not summed over the window: with `e`
//! the slice of `E` and `d < S`, `P(T) = P(E) + count(e) - R`, `R` the
//! recorded counts of the slices leaving the window, `e - S < j <= t - S`
//! (`d` ring words, not `S - 1`: a roll touches the ring slots `e..=t` mod
//! `S` and `frozen`, not the whole block). With `d >= S` every slice of
//! `T`'s window is a skipped one: `P(T) = 0`. This is exact because
//! (induction over rolls) `frozen(E)` is the sum of the ring words of `E`'s
//! window as they read at its unseal, and no write of this roll changes
//! how a leaving slice `j` reads: the roll writes slot `e` (which held
//! `e - S`, outside `E`'s window), and zeros for skipped slices `k` only
//! over a word tagged `tag(k)`, which read 0 for `j = k - S` before and
//! after (`S < 2^16`, so `tag(k) != tag(k - S)`). The slices kept from
//! `E`'s window (`t - S < j < e`) sit in slots this roll does not write.
//! So every helper reads the same `R`, whenever it reads it.

use super::config::{Config, Level};
use super::block::{self, Block, Cell};
use super::history::{self, History};
use super::inline::Inline;
use super::state::AdmissionState;
use crate::pack::{Admission, Tag, TagCount, Word};
use crate::sync::Ordering;

// The incremental `P(T)` (module docs) needs `tag(k) != tag(k - S)`.
const _: () = assert!(crate::window::MAX_SLICES < 1 << 16);

impl AdmissionState {
    /// Step 3 of the roll into `t` from the sealed word `s`; returns the
    /// fold level's `P(t)`, or `None` if the snapshot proved stale.
    pub(super) fn roll(&self, cfg: &Config, t: u64, s: Word<Admission>) -> Option<u64> {
        if cfg.len() == 1 {
            self.roll_one(cfg, t, s)
        } else {
            self.roll_levels(cfg, t, s)
        }
    }

    fn roll_one(&self, cfg: &Config, t: u64, s: Word<Admission>) -> Option<u64> {
        let raw = self.block.load(Ordering::Acquire);
        // SAFETY: as `history()`: the state's own word, `self` borrowed.
        match unsafe { History::of(raw, cfg) } {
            History::Block(b) => self.roll_block(cfg, b, t, s),
            History::Empty => self.roll_small(cfg, raw, Inline::EMPTY, t, s),
            History::Inline(w) if w.tag() == Tag::of(t) => Some(w.sum(cfg.inline_width())),
            History::Inline(w) if w.tag() == Admission::TAG.get(s) => {
                self.roll_small(cfg, raw, w, t, s)
            }
            History::Inline(_) => None, // stale: the state moved on
            History::Quiet(_) => None,  // a multi-limit word: not this config's
        }
    }

    /// The roll from a null or inline `block` word `raw` (counts `old`,
    /// for `E`): writes `T`'s history inline, or spills it into a fresh
    /// block (`history.rs`), by one CAS from `raw`.
    fn roll_small(
        &self,
        cfg: &Config,
        raw: *mut Cell,
        old: Inline,
        t: u64,
        s: Word<Admission>,
    ) -> Option<u64> {
        let (slices, width) = (cfg.level(0).slices, cfg.inline_width());
        let d = Tag::of(t).since(Admission::TAG.get(s));
        let p_e = old.sum(width);
        // `E`'s slice count, if it is still in `T`'s window.
        let count = if d < slices {
            Admission::USED.get(s).saturating_sub(p_e)
        } else {
            0
        };
        if raw.is_null() && count == 0 {
            return Some(0); // every count is still 0: nothing to write
        }
        let (new, p) = match old.rolled(width, slices, d, count, Tag::of(t)) {
            // `P(T) = P(E) + count(E) -` the fields shifted out (module
            // docs): one short sum, not the whole word's.
            Some(w) if d < slices => {
                let out = old.sum_from(width, slices - d);
                (history::inline_ptr(w), p_e + count - out)
            }
            Some(w) => (history::inline_ptr(w), 0),
            None => {
                // Spill: slice `T - j` counted `count` at `j = d`, the old
                // field `j - d` past it, 0 before (or everywhere, `d >= S`).
                let at = |j: u64| match j.cmp(&d) {
                    std::cmp::Ordering::Less => 0,
                    std::cmp::Ordering::Equal => count,
                    std::cmp::Ordering::Greater => old.count(width, j - d),
                };
                let at = |j: u64| if d < slices { at(j) } else { 0 };
                let p = (1..slices).map(at).fold(0u64, u64::saturating_add);
                (block::alloc_rolled(cfg, t, p, at), p)
            }
        };
        self.install(cfg, raw, new, p, t)
    }

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

    /// The roll of a single-limit state that has a block.
    fn roll_block(&self, cfg: &Config, b: Block<'_>, t: u64, s: Word<Admission>) -> Option<u64> {
        let lv = cfg.level(0);
        let prev = Admission::TAG.get(s);
        let f = b.frozen(lv).load(Ordering::Acquire);
        let p_e = match TagCount::TAG.get(f) {
            x if x == Tag::of(t) => return Some(TagCount::COUNT.get(f)),
            x if x == prev => TagCount::COUNT.get(f),
            _ => return None, // stale: the state moved on
        };
        let lo = t.saturating_sub(lv.slices - 1);
        let d = Tag::of(t).since(prev);
        let mut first_zero = lo;
        // `P(T)` when every slice of `T`'s window is after `E`: all skipped.
        let mut p = 0;
        if d < lv.slices {
            let e = t - d;
            let count = Admission::USED.get(s).saturating_sub(p_e);
            // Settle `e` even with a zero count: its slot may hold a word
            // from 2^16 epochs ago with `e`'s tag (zeros are written only
            // over such words).
            if !self.record(b, lv, e, count, s) {
                return None;
            }
            first_zero = e + 1;
            // `P(T) = P(E) + count(e) - (the slices leaving the window,
            // e - S < j <= t - S)`: `d` slots read, not `S - 1`.
            let out = b.recorded_sum(
                lv,
                (e + 1).saturating_sub(lv.slices),
                (t + 1).saturating_sub(lv.slices),
            );
            p = p_e.saturating_add(count).saturating_sub(out);
        }
        for k in first_zero..t {
            if !self.record(b, lv, k, 0, s) {
                return None;
            }
        }
        // From `E`'s value: a no-op if another helper moved it.
        let new = TagCount::word(Tag::of(t), p);
        let _ = b
            .frozen(lv)
            .compare_exchange(f, new, Ordering::AcqRel, Ordering::Acquire);
        let f = b.frozen(lv).load(Ordering::Acquire);
        (TagCount::TAG.get(f) == Tag::of(t)).then(|| TagCount::COUNT.get(f))
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
