//! The roll of a state with one limit (`roll.rs` has the protocol;
//! `roll_levels.rs` the case of several limits).
//!
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

use super::block::{self, Block, Cell};
use super::config::Config;
use super::history::{self, History};
use super::inline::Inline;
use super::state::AdmissionState;
use crate::pack::{Admission, Tag, TagCount, Word};
use crate::sync::Ordering;

// The incremental `P(T)` (module docs) needs `tag(k) != tag(k - S)`.
const _: () = assert!(crate::window::MAX_SLICES < 1 << 16);

impl AdmissionState {
    pub(super) fn roll_one(&self, cfg: &Config, t: u64, s: Word<Admission>) -> Option<u64> {
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
}
