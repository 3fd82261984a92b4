//! The roll of a state with several limits (`roll.rs` has the protocol,
//! `roll_one.rs` the single-limit case).
//!
//! # Several limits
//! A level's window can span far more than 2^16 finest slices, so the tag
//! cannot give the distance: the block's `at` word holds `E` in full, and
//! moves to `T` last. For each level `i` with slices `e = E / r_i` and
//! `t = T / r_i`, and `cur = used - P_fold(E)` the current finest slice's
//! count:
//! - `t = e`: the level's slice goes on: `open_i(T) = open_i(E) + cur`;
//! - `t > e`: slice `e` closes with count `open_i(E) + cur` (recorded if
//!   still in the window), the skipped slices get zeros, `open_i(T) = 0`;
//! - `P_i(T)` = the recorded slices of `(t - S_i, t)` plus `open_i(T)`.
//!
//! Helpers go in phases: records and `open` (skipped when `open_i` is
//! already tagged `T`), then `frozen` (skipped when tagged `T`), then `at`.
//! A helper that finds the fold level's `frozen` tagged `T` knows every
//! `open` has moved (a helper writes `frozen` only after finishing the first
//! phase), so it needs no `cur`.
//!
//! # Quiet
//! A state starts *quiet* (`history.rs`): nothing recorded in any level, its
//! full epoch in the `block` word, no block. Its roll writes, by one CAS
//! from the word it read, quiet at `T` if slice `E` counted nothing, else a
//! fresh block that already describes `T` (`block::alloc_levels`): what
//! the phases above would write over a block of zeros. Every helper
//! computes the same word from the sealed state and the quiet word; the word
//! never goes back to quiet once a block is in, so a stale helper's CAS
//! fails (a newer quiet word is after `T`: left alone).

use super::block::{self, Block, Cell};
use super::config::{Config, Level};
use super::history::{self, History};
use super::state::AdmissionState;
use crate::pack::{Admission, Tag, TagCount, Word};
use crate::sync::Ordering;

impl AdmissionState {
    /// The roll of a multi-limit state that is quiet at `e` (nothing
    /// recorded, `history.rs`): quiet at `t` if the closing slice counted
    /// nothing, else a fresh block describing `t`; one CAS from the word read.
    fn roll_quiet(
        &self,
        cfg: &Config,
        raw: *mut Cell,
        e: u64,
        t: u64,
        s: Word<Admission>,
    ) -> Option<u64> {
        if e == t {
            return Some(0); // another helper moved it, with nothing recorded
        }
        if e > t {
            return None; // stale: the state moved on
        }
        // `e < t`: the roll into `t` has not written, so the word is that of
        // `t`'s predecessor, the epoch of the sealed `s` (`help`).
        debug_assert_eq!(Tag::of(e), Admission::TAG.get(s));
        // Nothing recorded: `P_fold(E) = 0`, `used` is slice `E`'s count.
        let cur = Admission::USED.get(s);
        let (new, p) = if cur == 0 {
            (history::quiet(t), 0)
        } else {
            block::alloc_levels(cfg, e, t, cur)
        };
        self.install(cfg, raw, new, p, t)
    }

    pub(super) fn roll_levels(&self, cfg: &Config, t: u64, s: Word<Admission>) -> Option<u64> {
        let raw = self.block.load(Ordering::Acquire);
        // SAFETY: as `history()`: the state's own word, `self` borrowed.
        let b = match unsafe { History::of(raw, cfg) } {
            History::Block(b) => b,
            History::Quiet(e) => return self.roll_quiet(cfg, raw, e, t, s),
            _ => return None,
        };
        let fold = cfg.level(cfg.fold());
        let at = b.at_word().load(Ordering::Acquire).raw();
        if at != t {
            if at > t || Tag::of(at) != Admission::TAG.get(s) {
                return None; // stale
            }
            let e = at;
            // Phase 1: records and `open`.
            let ff = b.frozen(fold).load(Ordering::Acquire);
            if TagCount::TAG.get(ff) == Tag::of(e) {
                let cur = Admission::USED
                    .get(s)
                    .saturating_sub(TagCount::COUNT.get(ff));
                for lv in cfg.levels() {
                    if !self.close_level(b, *lv, e, t, cur, s) {
                        return None;
                    }
                }
            } else if TagCount::TAG.get(ff) != Tag::of(t) {
                return None;
            }
            // Phase 2: `frozen`.
            for lv in cfg.levels() {
                let f = b.frozen(*lv).load(Ordering::Acquire);
                if TagCount::TAG.get(f) == Tag::of(t) {
                    continue;
                }
                let o = b.open(*lv).load(Ordering::Acquire);
                if TagCount::TAG.get(f) != Tag::of(e) || TagCount::TAG.get(o) != Tag::of(t) {
                    return None;
                }
                let ti = lv.index(t);
                let lo = ti.saturating_sub(lv.slices - 1);
                let p = b
                    .recorded_sum(*lv, lo, ti)
                    .saturating_add(TagCount::COUNT.get(o));
                let new = TagCount::word(Tag::of(t), p.min(TagCount::COUNT.max()));
                let _ = b
                    .frozen(*lv)
                    .compare_exchange(f, new, Ordering::AcqRel, Ordering::Acquire);
            }
            // Phase 3: `at`.
            let _ = b.at_word().compare_exchange(
                Word::from_raw(e),
                Word::from_raw(t),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        let f = b.frozen(fold).load(Ordering::Acquire);
        (TagCount::TAG.get(f) == Tag::of(t)).then(|| TagCount::COUNT.get(f))
    }

    /// Phase 1 for one level: closes its slice `E / r` if `t` starts a new
    /// one (recording it and zeroing the skipped ones), and moves `open`
    /// to `T`. `false` if the state moved on.
    fn close_level(
        &self,
        b: Block<'_>,
        lv: Level,
        e: u64,
        t: u64,
        cur: u64,
        s: Word<Admission>,
    ) -> bool {
        let o = b.open(lv).load(Ordering::Acquire);
        if TagCount::TAG.get(o) == Tag::of(t) {
            return true;
        }
        if TagCount::TAG.get(o) != Tag::of(e) {
            return false;
        }
        let count = TagCount::COUNT.get(o).saturating_add(cur);
        let (ei, ti) = (lv.index(e), lv.index(t));
        let open = if ti == ei {
            count
        } else {
            let lo = ti.saturating_sub(lv.slices - 1);
            if ti - ei < lv.slices && !self.record(b, lv, ei, count, s) {
                return false;
            }
            for k in lo.max(ei + 1)..ti {
                if !self.record(b, lv, k, 0, s) {
                    return false;
                }
            }
            0
        };
        let new = TagCount::word(Tag::of(t), open.min(TagCount::COUNT.max()));
        let _ = b
            .open(lv)
            .compare_exchange(o, new, Ordering::AcqRel, Ordering::Acquire);
        true
    }
}
