//! A *heavy* key's home: the hot-key detector's per-key state, kept only
//! for keys that may be hot (`hot.rs`). A key is heavy in a slice once its
//! count there reaches `H = ceil(threshold / S)`: a window of `S` slices
//! can only reach the threshold if one of its slices is heavy, so a key
//! with no heavy slice in the window needs no state beyond its counts.
//!
//! # The home
//! - `hot`: `HOT:1 | DEAD:1 | INCOMING:1 | epoch:61` (`crate::pack::HomeWord`),
//!   the hot rule's word
//!   ([`decide`]): whether the key is hot, and the epoch of the latest add
//!   that saw it at or above the threshold. `DEAD`: retired or moved out
//!   (users look the key up again). `INCOMING`: a move is filling it
//!   (users wait). Epochs beyond 2^61 - 1 saturate (2^61 ns is 73 years).
//! - `last_heavy`: the newest epoch at which one of the key's slices
//!   reached `H`; written under the home map's shard lock.
//!
//! # Lifetime
//! A crossing of `H` creates the home (or finds it) and raises
//! `last_heavy`, under the shard lock. A home is retired by a sweep, under
//! the same lock, once `last_heavy + 2S <= now` and the key was not seen
//! hot within the last `2S` epochs either: by then no heavy slice is
//! in the window of any epoch an add can still be at (an add is dropped
//! unless its epoch is within the newest slice's window, and a sweep's
//! `now` is at most the newest: `hot.rs` clamps it), so the key is not hot
//! at any such epoch.
//! The retirement sets `DEAD` by CAS; a rule transition racing it fails
//! its CAS and looks the key up again (and, finding it absent at an epoch
//! the ring has dropped, decides nothing).
//!
//! # Orderings
//! `hot` is changed only by RMWs (`AcqRel`): every add that takes the
//! exact step joins its modification order before reading the window, so
//! of two racing adds the later one reads the earlier one's count.

use crate::map::Value;
use crate::pack::HomeWord;
use crate::reclaim::Guard;
use crate::sync::{wait_hint, AtomicU64, Ordering};

// The home's word: `crate::pack::HomeWord`.
const HOT: u64 = HomeWord::HOT.mask();
const DEAD: u64 = HomeWord::DEAD.mask();
const INCOMING: u64 = HomeWord::INCOMING.mask();
const EPOCH: u64 = HomeWord::EPOCH.max();

/// The home was retired or moved: look the key up again.
#[derive(Debug)]
pub(crate) struct Dead;

/// A heavy key's home (see the module docs).
pub(crate) struct Home {
    hot: AtomicU64,
    last_heavy: AtomicU64,
}

/// What homes of one map share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HomeCfg {
    /// `S`, slices per window.
    pub(crate) slices: u64,
}

impl Home {
    /// The rule's word, waiting while the home is filled by a move.
    fn word(&self) -> Result<u64, Dead> {
        let mut rounds = 0;
        loop {
            let h = self.hot.load(Ordering::Acquire);
            if h & DEAD != 0 {
                return Err(Dead);
            }
            if h & INCOMING == 0 {
                return Ok(h);
            }
            wait_hint(&mut rounds);
        }
    }

    /// `(hot, epoch)`.
    pub(crate) fn state(&self) -> Result<(bool, u64), Dead> {
        self.word().map(|h| (h & HOT != 0, h & EPOCH))
    }

    /// Whether the key is hot at epoch `e` or later already (an add there
    /// changes nothing: within an epoch a window only grows).
    pub(crate) fn hot_since(&self, e: u64) -> Result<bool, Dead> {
        let (hot, he) = self.state()?;
        Ok(hot && he >= e.min(EPOCH))
    }

    /// Joins the word's modification order (an RMW that changes nothing)
    /// before the caller reads the window (see "Orderings").
    pub(crate) fn sync(&self) -> Result<(), Dead> {
        self.word()?;
        let h = self.hot.fetch_add(0, Ordering::AcqRel);
        if h & DEAD != 0 {
            Err(Dead)
        } else {
            Ok(())
        }
    }

    /// Applies the hot rule for an add at `e` that saw `before` and
    /// `after`: `Ok((reported, hot_since_e))`.
    pub(crate) fn transition(
        &self,
        e: u64,
        before: u64,
        after: u64,
        threshold: u64,
    ) -> Result<(bool, bool), Dead> {
        let mut h = self.word()?;
        loop {
            let (new, report) = decide(h, e, before, after, threshold);
            let since = new & HOT != 0 && new & EPOCH >= e.min(EPOCH);
            if new == h {
                return Ok((false, since));
            }
            match self
                .hot
                .compare_exchange(h, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok((report, since)),
                Err(actual) if actual & DEAD != 0 => return Err(Dead),
                Err(actual) => h = actual,
            }
        }
    }

    /// Raises `last_heavy` to `e` (under the home map's shard lock).
    pub(crate) fn note_heavy(&self, e: u64) {
        self.last_heavy.fetch_max(e, Ordering::AcqRel);
    }
}

/// The hot rule as a pure function of the hot word `h`, the add's epoch
/// `e`, and the window sums `before` and `after` its read saw. Returns the
/// new word and whether the transition reports ("became hot").
///
/// - Hot, `he >= e`: an add at this epoch (or later) already saw the key
///   at or above the threshold; within an epoch the sum only grows, so a
///   smaller `before` is a stale view: no change.
/// - Hot, `before >= threshold`: stays hot; `he = e`.
/// - Hot, `before < threshold`: cools; if `after >= threshold` it becomes
///   hot again at once and reports.
/// - Cold, `after >= threshold`: becomes hot at `e` and reports.
/// - Cold otherwise: no change.
pub(crate) fn decide(h: u64, e: u64, before: u64, after: u64, threshold: u64) -> (u64, bool) {
    let e = e.min(EPOCH);
    let hot = h & HOT != 0;
    let he = h & EPOCH;
    if hot {
        if he >= e {
            (h, false)
        } else if before >= threshold {
            (HOT | e, false)
        } else if after >= threshold {
            (HOT | e, true)
        } else {
            (e, false)
        }
    } else if after >= threshold {
        (HOT | e, true)
    } else {
        (h, false)
    }
}

impl Value for Home {
    type Cfg = HomeCfg;

    fn vacant() -> Self {
        Home {
            hot: AtomicU64::new(0),
            last_heavy: AtomicU64::new(0),
        }
    }

    fn init(&self, _cfg: &HomeCfg, incoming: bool) {
        self.hot
            .store(if incoming { INCOMING } else { 0 }, Ordering::Relaxed);
        self.last_heavy.store(0, Ordering::Relaxed);
    }

    fn move_into(&self, to: &Self, _cfg: &HomeCfg, _guard: &Guard<'_>) {
        let h = self.hot.fetch_or(DEAD, Ordering::AcqRel);
        debug_assert!(h & (DEAD | INCOMING) == 0, "moves live homes only");
        to.last_heavy
            .store(self.last_heavy.load(Ordering::Acquire), Ordering::Relaxed);
        to.hot.store(h, Ordering::Release);
    }

    fn try_retire(&self, now: u64, cfg: &HomeCfg, _guard: &Guard<'_>) -> bool {
        let last = self.last_heavy.load(Ordering::Acquire);
        let keep = |e: u64| u128::from(e) + 2 * u128::from(cfg.slices) > u128::from(now);
        if keep(last) {
            return false;
        }
        let mut h = self.hot.load(Ordering::Acquire);
        loop {
            // A key seen hot within the last two windows keeps its state
            // too (a heavy slice may have come while it was hot).
            if h & (DEAD | INCOMING) != 0 || (h & HOT != 0 && keep(h & EPOCH)) {
                return false;
            }
            match self
                .hot
                .compare_exchange(h, h | DEAD, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => h = actual,
            }
        }
    }

    fn is_dead(&self) -> bool {
        self.hot.load(Ordering::Acquire) & DEAD != 0
    }

    fn heap_bytes(&self, _cfg: &HomeCfg) -> usize {
        0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn decide_follows_the_rule() {
        assert_eq!(decide(0, 3, 1, 5, 5), (HOT | 3, true));
        assert_eq!(decide(0, 3, 1, 4, 5), (0, false));
        assert_eq!(decide(HOT | 3, 3, 0, 9, 5), (HOT | 3, false));
        assert_eq!(decide(HOT | 2, 3, 6, 7, 5), (HOT | 3, false));
        assert_eq!(decide(HOT | 2, 3, 4, 6, 5), (HOT | 3, true));
        assert_eq!(decide(HOT | 2, 3, 1, 2, 5), (3, false));
    }

    #[test]
    fn transitions_retire_and_move() {
        let cfg = HomeCfg { slices: 2 };
        let g = crate::reclaim::Graveyard::default();
        let guard = Guard::pin(&g);
        let h = Home::vacant();
        h.init(&cfg, false);
        h.note_heavy(4);
        assert_eq!(h.transition(4, 1, 5, 5).unwrap(), (true, true));
        assert!(h.hot_since(4).unwrap());
        assert!(!h.try_retire(7, &cfg, &guard), "heavy at 4: kept until 8");
        let to = Home::vacant();
        to.init(&cfg, true);
        h.move_into(&to, &cfg, &guard);
        assert!(h.sync().is_err());
        assert_eq!(to.state().unwrap(), (true, 4));
        assert!(to.try_retire(8, &cfg, &guard));
        assert!(to.transition(9, 9, 9, 5).is_err());
    }
}
