//! [`LevelView`]: one level's counts as a state held them at one epoch
//! `E`, and what follows from them: the level's window total at a later
//! epoch, when a request would first fit if nothing else were granted, and
//! when the window empties.
//!
//! A view reads nothing that changes: the recorded counts of `E`'s window
//! are final while the state holds `E` (a roll writes the ring only while
//! the state is sealed, and an inline or quiet word of `E` is replaced, not
//! changed), and the current slice's count is the value it was given. So a
//! view is exact for the instant its values were taken at; the caller
//! makes sure they belong together (a consistent snapshot, `snapshot.rs`,
//! or a refusal's own values, `decide.rs`), and a view over an inline or
//! empty history holds no reference at all (a decision keeps one, by value,
//! to answer later: `times.rs`).
//!
//! # Counts
//! Level `i`'s slice `k`, seen from `E` (`e_i = E / r_i`): the head
//! (`open_i + cur`, `cur` the current finest slice's count) for `k = e_i`,
//! the recorded count for `e_i - S_i < k < e_i`, 0 otherwise. Its window
//! total at a finest epoch `J >= E` sums its slices `(J / r_i - S_i, J /
//! r_i]`.
//!
//! # Cost
//! A walk over a block's ring takes one remainder for its first slot and
//! steps from there (a 64-bit division costs tens of cycles, the rest of a
//! slice's step a few); an inline history is read field by field, without
//! a load. Walks stop at the slice that answers.

use super::config::Level;
use super::history::History;

/// One level's counts in a state at `E` (module docs).
pub(crate) struct LevelView<'a> {
    lv: Level,
    /// Bits per count of an inline history.
    width: u32,
    /// The level's slice of `E`.
    ei: u64,
    /// Its count so far.
    head: u64,
    /// The state's `used`, for the fold level (its window total at `E`).
    fold_used: Option<u64>,
    history: History<'a>,
}

/// Level `lv`'s slice of finest epoch `e`.
#[inline]
fn slice_of(e: u64, lv: Level) -> u64 {
    lv.index(e)
}

impl<'a> LevelView<'a> {
    /// Level `lv` of a state at finest epoch `e` whose history is
    /// `history` (inline counts of `width` bits), with `head` counted in
    /// the level's slice of `e` so far; `fold_used`: the state's `used`,
    /// for the fold level.
    #[inline]
    pub(crate) fn new(
        lv: Level,
        width: u32,
        e: u64,
        head: u64,
        fold_used: Option<u64>,
        history: History<'a>,
    ) -> LevelView<'a> {
        LevelView {
            lv,
            width,
            ei: slice_of(e, lv),
            head,
            fold_used,
            history,
        }
    }

    /// Slice `k`'s ring slot, by a division.
    fn slot(&self, k: u64) -> usize {
        (k % self.lv.slices) as usize
    }

    /// The sum of the recorded counts of the level's slices `lo..hi`
    /// (`hi <= e_i`).
    fn recorded_sum(&self, lo: u64, hi: u64) -> u64 {
        if lo >= hi {
            return 0;
        }
        match self.history {
            History::Empty | History::Quiet(_) => 0,
            // Fields `e_i - k` for `k` in `lo..hi`: the first `e_i - lo`
            // less the first `e_i - hi`.
            History::Inline(w) => {
                w.sum_to(self.width, self.ei - lo) - w.sum_to(self.width, self.ei - hi)
            }
            History::Block(b) => b.recorded_sum(self.lv, lo, hi),
        }
    }

    /// The first of the level's slices `lo..=hi` (`hi <= e_i`), oldest first
    /// (newest first with `NEWEST`), whose count `c` is not zero and passes
    /// `f(k, c)`. `slot(k)`: slice `k`'s ring slot (`k mod S`).
    #[inline(always)]
    fn find<const NEWEST: bool>(
        &self,
        lo: u64,
        hi: u64,
        slot: impl Fn(u64) -> usize,
        mut f: impl FnMut(u64, u64) -> bool,
    ) -> Option<u64> {
        debug_assert!(hi <= self.ei);
        // Slices before the window of `E` count 0.
        let lo = lo.max((self.ei + 1).saturating_sub(self.lv.slices));
        if lo > hi {
            return None;
        }
        let head = hi == self.ei && self.head > 0;
        if NEWEST && head && f(self.ei, self.head) {
            return Some(self.ei);
        }
        // The recorded slices: `lo..end`.
        let end = if hi == self.ei { hi } else { hi + 1 };
        let found = match self.history {
            History::Empty | History::Quiet(_) => None,
            History::Inline(w) => {
                // Slice `k` is field `e_i - k`.
                let field = |k: u64| w.count(self.width, self.ei - k);
                let mut hit = |k: &u64| {
                    let c = field(*k);
                    c > 0 && f(*k, c)
                };
                if NEWEST {
                    (lo..end).rev().find(&mut hit)
                } else {
                    (lo..end).find(&mut hit)
                }
            }
            History::Block(b) => {
                if NEWEST {
                    b.rfind(self.lv, lo, end, slot(end.saturating_sub(1)), &mut f)
                } else {
                    b.find(self.lv, lo, end, slot(lo), &mut f)
                }
            }
        };
        if found.is_some() || NEWEST || !head {
            return found;
        }
        f(self.ei, self.head).then_some(self.ei)
    }

    /// The level's window total at finest epoch `j >= E`.
    pub(crate) fn used_at(&self, j: u64) -> u64 {
        let ji = slice_of(j, self.lv);
        match self.fold_used {
            Some(used) if ji == self.ei => return used,
            _ => {}
        }
        // The slices of `E`'s still in `j`'s window: `lo..=e_i`.
        let lo = (ji + 1)
            .saturating_sub(self.lv.slices)
            .max((self.ei + 1).saturating_sub(self.lv.slices));
        if lo > self.ei {
            return 0;
        }
        self.head.saturating_add(self.recorded_sum(lo, self.ei))
    }

    /// The first finest epoch `>= j` (`j >= E`) at which the level's window
    /// has room for `units` of `budget` if nothing else is granted, or
    /// `None` if it never has (only when `units > budget`).
    pub(crate) fn fits_from(&self, j: u64, units: u64, budget: u64) -> Option<u64> {
        let mut used = self.used_at(j);
        if used + units <= budget {
            return Some(j);
        }
        if units > budget {
            return None;
        }
        // Slice `k` leaves the window `S` level slices on: the window has
        // room once enough of the slices still in it, oldest first, are
        // gone. After `S` slices nothing is left.
        let (ratio, slices) = (self.lv.ratio, self.lv.slices);
        let ji = slice_of(j, self.lv);
        let lo = (ji + 1).saturating_sub(slices);
        let left = self.find::<false>(
            lo,
            ji.min(self.ei),
            |k| self.slot(k),
            |_, c| {
                used = used.saturating_sub(c);
                used + units <= budget
            },
        );
        let at = left.map_or(ji.saturating_add(slices), |k| k.saturating_add(slices));
        Some(at.saturating_mul(ratio))
    }

    /// The finest epoch at which the level's window seen from `j >= E` is
    /// empty (`j` itself if it is).
    pub(crate) fn empty_from(&self, j: u64) -> u64 {
        let ji = slice_of(j, self.lv);
        let lo = ji.saturating_sub(self.lv.slices - 1);
        match self.find::<true>(lo, ji.min(self.ei), |k| self.slot(k), |_, _| true) {
            Some(k) => k
                .saturating_add(self.lv.slices)
                .saturating_mul(self.lv.ratio),
            None => j,
        }
    }

    /// The walk of a single-limit refusal at its own epoch `E` (this view's
    /// level is the fold level, at `E`) over the recorded counts of `E`'s
    /// window, whose total is `recorded` (`P(E)`, the state's `frozen`):
    /// the oldest slice by which `need` units have left the window, and the
    /// newest slice with a count. One walk from the oldest slice that stops
    /// once both are known: it has met the newest non-zero count when its
    /// sum reaches `recorded`. `slot(k)`: slice `k`'s ring slot.
    #[inline(always)]
    pub(crate) fn walk(&self, need: u64, recorded: u64, slot: impl Fn(u64) -> usize) -> Walk {
        debug_assert!(self.lv.ratio == 1 && need > 0);
        let (e, s) = (self.ei, self.lv.slices);
        let (mut gone, mut fits, mut newest) = (0u64, None, None);
        if let History::Inline(w) = self.history {
            // The counts in one word: the newest and the oldest with a
            // count by bit tricks, then from the oldest on (most often it
            // alone is enough).
            if let Some((lo, hi)) = w.counted(self.width) {
                newest = Some(e.saturating_sub(lo));
                for j in (lo..=hi).rev() {
                    gone = gone.saturating_add(w.count(self.width, j));
                    if gone >= need {
                        fits = Some(e.saturating_sub(j));
                        break;
                    }
                }
            }
        } else if e > 0 && recorded > 0 {
            // A block, with something recorded (nothing: the window's
            // permits are all in its head, and there is no walk).
            self.find::<false>((e + 1).saturating_sub(s), e - 1, slot, |k, c| {
                gone = gone.saturating_add(c);
                if fits.is_none() && gone >= need {
                    fits = Some(k);
                }
                newest = Some(k);
                fits.is_some() && gone >= recorded
            });
        }
        Walk {
            recorded,
            fits,
            newest,
        }
    }
}

/// What a single-limit refusal's walk over the recorded counts of its
/// epoch `E`'s window found ([`LevelView::walk`]): facts of that window,
/// final once the state has opened `E`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walk {
    /// The recorded counts' total, `P(E)`.
    pub(crate) recorded: u64,
    /// The oldest recorded slice by which `need` units have left the
    /// window, if they have before the current slice.
    pub(crate) fits: Option<u64>,
    /// The newest recorded slice with a count.
    pub(crate) newest: Option<u64>,
}

impl Walk {
    /// The refusal's two epochs, for a window of `slices` slices at `e`
    /// whose current slice has counted `head`: when `need` units have left
    /// it, and when it is empty. The same as
    /// [`fits_from(E, need, used)`](LevelView::fits_from) (a request for
    /// `need` against a budget of the units the window holds) and
    /// [`empty_from(E)`](LevelView::empty_from). Slice `k` leaves the
    /// window at `k + S`; the current slice last, at `E + S`.
    #[inline]
    pub(crate) fn epochs(&self, e: u64, slices: u64, head: u64) -> (u64, u64) {
        let fits = self.retry_epoch(e, slices);
        let empty = match (head, self.newest) {
            (0, Some(k)) => k.saturating_add(slices),
            (0, None) => e,
            _ => e.saturating_add(slices),
        };
        (fits, empty)
    }

    /// [`epochs`](Self::epochs)' first, which needs neither the head nor
    /// the recorded total.
    #[inline]
    pub(crate) fn retry_epoch(&self, e: u64, slices: u64) -> u64 {
        self.fits.unwrap_or(e).saturating_add(slices)
    }
}
