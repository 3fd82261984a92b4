//! Reads of an admission state: a consistent [`Snapshot`] of its counts, each
//! level read through a [`LevelView`] (`view.rs`: the permits available,
//! when a request would fit, when the window empties). Reads never move the
//! state's time; they help a roll in progress to its end, which changes no
//! outcome.
//!
//! # Consistency
//! A snapshot is taken at the state's epoch `E`: the state word (`used`),
//! then the block's words tagged `E` (the fold level's `frozen`, each
//! level's `open`) or the inline history tagged `E` (`inline.rs`), then,
//! lazily, ring words. After the caller has computed its answer, the state
//! word is read again: if it still holds `E`
//! unsealed, no roll began in between, so no ring word of `E`'s windows was
//! overwritten (rolls write the ring only while the state is sealed) and the
//! answer is that of one instant. Otherwise the read is done again. A
//! sealed-for-good state is final: its first snapshot is exact.

use super::config::{Config, MAX_LIMITS};
use super::help::Take;
use super::history::History;
use super::state::{holds, key, AdmissionState, FLAG, PENDING_EPOCH};
use super::view::LevelView;
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
    pub(crate) fn level(&self, cfg: &Config, i: usize) -> LevelView<'a> {
        LevelView::new(
            cfg.level(i),
            cfg.inline_width(),
            self.epoch,
            self.open[i].saturating_add(self.cur),
            (i == cfg.fold()).then_some(self.used),
            self.history,
        )
    }
}
