//! Reads of an admission state: a consistent [`Snapshot`] of its counts,
//! and what follows from one (the permits available, when a request would
//! fit, when the window empties). Reads never move the state's time; they
//! help a roll in progress to its end, which changes no outcome.
//!
//! # Consistency
//! A snapshot is taken at the state's epoch `E`: the state word (`used`),
//! then the block's words tagged `E` (the fold level's `frozen`, each
//! level's `open`) or the inline history tagged `E` (`inline.rs`), then,
//! lazily, ring words. After the caller has computed
//! its answer, the state word is read again: if it still holds `E`
//! unsealed, no roll began in between, so no ring word of `E`'s windows was
//! overwritten (rolls write the ring only while the state is sealed) and the
//! answer is that of one instant. Otherwise the read is done again. A
//! sealed-for-good state is final: its first snapshot is exact.
//!
//! The counts of level `i` seen from `E`, slice `k` (`e_i = E / r_i`):
//! `open_i + cur` for `k = e_i` (`cur` = the current finest slice's count,
//! `used - P_fold`), the recorded count for `e_i - S_i < k < e_i`, 0
//! otherwise. Its window total at a finest epoch `J >= E` sums its slices
//! `(J / r_i - S_i, J / r_i]`.

use super::config::{Config, Level, MAX_LIMITS};
use super::help::Take;
use super::history::History;
use super::state::{holds, key, AdmissionState, FLAG, PENDING_EPOCH};
use crate::pack::{Admission, Tag, TagCount};
use crate::sync::Ordering;

/// A consistent view of a state's counts at its epoch (module docs).
pub(crate) struct Snapshot<'a> {
    /// The state's epoch `E`.
    pub(crate) epoch: u64,
    /// The fold level's `used` (units).
    pub(crate) used: u64,
    /// The current finest slice's count.
    cur: u64,
    /// Each level's `open` count at `E`.
    open: [u64; MAX_LIMITS],
    history: History<'a>,
}

impl AdmissionState {
    /// Runs `f` on a consistent snapshot; `None` for a pending state.
    pub(crate) fn read<R>(&self, cfg: &Config, f: impl Fn(&Snapshot<'_>) -> R) -> Option<R> {
        loop {
            let e = self.epoch.load(Ordering::Acquire);
            if e == PENDING_EPOCH {
                return None;
            }
            let s = self.state.load(Ordering::Acquire);
            let flagged = e & FLAG != 0;
            if !flagged && !holds(s, key(e)) {
                self.help(cfg, e, s, Take::NONE);
                continue;
            }
            // Flagged: the state holds `E` for good (unsealed only while the
            // seal is under way): no roll can start.
            let e = e & !FLAG;
            let Some(snap) = self.snapshot(cfg, e, Admission::USED.get(s)) else {
                continue;
            };
            let r = f(&snap);
            if flagged || holds(self.state.load(Ordering::Acquire), key(e)) {
                return Some(r);
            }
        }
    }

    /// The snapshot at `e` for a state word with `used`; `None` if the
    /// block no longer describes `e` (a roll began).
    fn snapshot(&self, cfg: &Config, e: u64, used: u64) -> Option<Snapshot<'_>> {
        let history = self.history(cfg);
        let mut open = [0; MAX_LIMITS];
        let tagged = |w| (TagCount::TAG.get(w) == Tag::of(e)).then(|| TagCount::COUNT.get(w));
        let cur = match history {
            History::Empty => used,
            // Nothing recorded in any level at `e` (`history.rs`), or a roll
            // began.
            History::Quiet(at) => {
                if at != e {
                    return None;
                }
                used
            }
            // Inline tagged `e`, or a roll began (invariant 1 of `history.rs`).
            History::Inline(w) => {
                if w.tag() != Tag::of(e) {
                    return None;
                }
                used.saturating_sub(w.sum(cfg.inline_width()))
            }
            History::Block(b) => {
                let p = tagged(b.frozen(cfg.level(cfg.fold())).load(Ordering::Acquire))?;
                if cfg.len() > 1 {
                    for (i, lv) in cfg.levels().iter().enumerate() {
                        open[i] = tagged(b.open(*lv).load(Ordering::Acquire))?;
                    }
                }
                used.saturating_sub(p)
            }
        };
        Some(Snapshot {
            epoch: e,
            used,
            cur,
            open,
            history,
        })
    }
}

impl<'a> Snapshot<'a> {
    /// Level `i` of this snapshot.
    pub(crate) fn level<'c>(&self, cfg: &'c Config, i: usize) -> LevelView<'a, 'c> {
        let lv = cfg.level(i);
        LevelView {
            cfg,
            lv,
            ei: slice_of(self.epoch, lv),
            head: self.open[i].saturating_add(self.cur),
            fold_used: (i == cfg.fold()).then_some(self.used),
            history: self.history,
        }
    }
}

/// Level `lv`'s slice of finest epoch `e`.
#[inline]
fn slice_of(e: u64, lv: Level) -> u64 {
    lv.index(e)
}

/// One level's counts in a snapshot taken at `E`.
pub(crate) struct LevelView<'a, 'c> {
    cfg: &'c Config,
    lv: Level,
    /// The level's slice of `E`.
    ei: u64,
    /// Its count so far.
    head: u64,
    /// The state's `used`, for the fold level (its window total at `E`).
    fold_used: Option<u64>,
    history: History<'a>,
}

impl LevelView<'_, '_> {
    /// The count of the level's slice `k`.
    fn count(&self, k: u64) -> u64 {
        if k > self.ei || self.ei - k >= self.lv.slices {
            0
        } else if k == self.ei {
            self.head
        } else {
            self.history.recorded(self.cfg, self.lv, self.ei, k)
        }
    }

    /// The level's window total at finest epoch `j >= E`.
    pub(crate) fn used_at(&self, j: u64) -> u64 {
        let ji = slice_of(j, self.lv);
        match self.fold_used {
            Some(used) if ji == self.ei => return used,
            _ => {}
        }
        if ji > self.ei {
            // Nothing recorded, or one limit's counts inline (the keys a
            // sweep checks): the head and the recorded slices still in
            // `j`'s window, `E - 1` to `E - (S - 1 - d)`, without a loop.
            let d = ji - self.ei;
            let recorded = |k| match self.history {
                History::Empty | History::Quiet(_) => Some(0),
                History::Inline(w) => Some(w.sum_to(self.cfg.inline_width(), k)),
                History::Block(_) => None,
            };
            if let Some(p) = recorded(self.lv.slices.saturating_sub(d + 1)) {
                return if d < self.lv.slices {
                    self.head.saturating_add(p)
                } else {
                    0
                };
            }
        }
        let lo = ji.saturating_sub(self.lv.slices - 1);
        (lo..=ji.min(self.ei))
            .map(|k| self.count(k))
            .fold(0u64, u64::saturating_add)
    }

    /// The first finest epoch `>= j` at which the level's window has room
    /// for `units` of `budget` if nothing else is granted, or `None` if it
    /// never has (only when `units > budget`).
    pub(crate) fn fits_from(&self, j: u64, units: u64, budget: u64) -> Option<u64> {
        let mut used = self.used_at(j);
        if used + units <= budget {
            return Some(j);
        }
        if units > budget {
            return None;
        }
        // Slide forward one level slice at a time; after `S` nothing is left.
        let (ratio, slices) = (self.lv.ratio, self.lv.slices);
        let ji = slice_of(j, self.lv);
        let last = ji.saturating_add(slices);
        for next in ji.saturating_add(1)..=last {
            if let Some(gone) = next.checked_sub(slices) {
                used = used.saturating_sub(self.count(gone));
            }
            if used + units <= budget || next == last {
                return Some(next.saturating_mul(ratio));
            }
        }
        Some(last.saturating_mul(ratio))
    }

    /// The finest epoch at which the level's window seen from `j` is empty
    /// (`j` itself if it is).
    pub(crate) fn empty_from(&self, j: u64) -> u64 {
        let ji = slice_of(j, self.lv);
        let lo = ji.saturating_sub(self.lv.slices - 1);
        let last = (lo..=ji.min(self.ei)).rev().find(|&k| self.count(k) > 0);
        match last {
            Some(k) => k
                .saturating_add(self.lv.slices)
                .saturating_mul(self.lv.ratio),
            None => j,
        }
    }
}
