//! Helping a state forward: moving its epoch ahead, sealing it, rolling it
//! (`roll.rs`) and unsealing it into the new epoch; any thread that finds
//! the state behind, or mid-roll, does the next step, and none waits.
//!
//! # The ride-along grant
//! The helper whose CAS opens the new epoch (the unseal, or a fixed
//! window's one-CAS roll) may grant its own request's units in that same
//! CAS, when they fit the new window ([`Take`]): exactly the grant CAS that
//! would follow, with nothing in between, so the request is decided on the
//! value it was granted on. A request that does not fit is left out of the
//! CAS and judged again on the reloaded word, so a refusal is still decided
//! on a value it did not fit. Only for a single-limit state (several limits
//! also read the block's `frozen` words), and only when the roll ends in the
//! request's own epoch (not the first step of a two-step jump, `state.rs`
//! invariant 2).

use super::config::Config;
use super::state::{holds, key, AdmissionState, FLAG, PENDING_EPOCH};
use crate::pack::{Admission, Tag, Word};
use crate::sync::Ordering;

/// What a helper found.
pub(crate) enum Help {
    /// Reload and go on.
    Retry,
    /// The state is sealed for good or pending.
    Sealed,
    /// Its CAS opened the epoch and granted the request's units with it:
    /// the new `used`.
    Granted(u64),
}

/// A request's units that a helper may grant as it opens an epoch.
#[derive(Clone, Copy)]
pub(crate) struct Take {
    units: u64,
    budget: u64,
}

impl Take {
    /// Nothing to grant.
    pub(crate) const NONE: Take = Take {
        units: 0,
        budget: 0,
    };

    /// `units` of a request, to be granted only within `budget`.
    #[inline]
    pub(crate) fn new(units: u64, budget: u64) -> Take {
        Take { units, budget }
    }

    /// `used` after granting onto an opening `used`: with the units if they
    /// fit the budget, else unchanged.
    #[inline]
    fn onto(self, used: u64) -> u64 {
        if self.units > 0 && used + self.units <= self.budget {
            used + self.units
        } else {
            used
        }
    }
}

impl AdmissionState {
    /// Moves the epoch from `e` towards `e_req` (invariants 1 and 2); the
    /// roll grants `take` if it ends in `e_req` and the request fits.
    #[cold]
    pub(super) fn advance(&self, cfg: &Config, e: u64, e_req: u64, take: Take) -> Help {
        let s = self.state.load(Ordering::Acquire);
        if !holds(s, key(e)) {
            self.help(cfg, e, s, Take::NONE);
            return Help::Retry;
        }
        let slices = cfg.level(cfg.fold()).slices;
        let gap = e_req - e;
        let target = if gap < slices || (gap & 0xffff) >= slices {
            e_req
        } else {
            e + slices // two steps, so the tag distance is not aliased
        };
        if self
            .epoch
            .compare_exchange(e, target, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Help::Retry;
        }
        let take = if target == e_req { take } else { Take::NONE };
        self.help(cfg, target, s, take)
    }

    /// Helps whatever the state is doing, from `e` (an `epoch` value) and
    /// `s` (a `state` value loaded after it, not `e`'s unsealed word): seals
    /// a state being sealed for good, or rolls the state into `e` (see
    /// `roll.rs`). Returns when done or when the snapshot proves stale.
    ///
    /// If this thread's CAS is the one that opens `e` (the unseal, or a
    /// fixed window's roll), it also grants `take.units` when they fit `e`'s
    /// window: the same as the grant CAS right after it, with nothing in
    /// between ([`Help::Granted`] with the new `used`).
    #[cold]
    pub(crate) fn help(&self, cfg: &Config, e: u64, s: Word<Admission>, take: Take) -> Help {
        if e & FLAG != 0 {
            if e != PENDING_EPOCH {
                self.seal_word(e & !FLAG);
            }
            return Help::Sealed;
        }
        let prev = Admission::TAG.get(s);
        if prev == Tag::of(e) || self.epoch.load(Ordering::Acquire) != e {
            // `e` is stale (a later roll began): the caller reloads.
            // Otherwise `epoch` held `e` from before `s` was read until now
            // (it only increases), so `s` belongs to `e`'s predecessor
            // (invariant 1), never to a later epoch: rolling "into `e`"
            // from it is right.
            return Help::Retry;
        }
        if cfg.is_fixed() {
            // Fixed window: nothing of the old slice survives. The state's
            // tag and count change in one step, so no grant is wiped.
            let used = take.onto(0);
            let fresh = Admission::word(Tag::of(e), false, used);
            return match self
                .state
                .compare_exchange(s, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if used > 0 => Help::Granted(used),
                _ => Help::Retry,
            };
        }
        // Seal: from here the old epoch's `used` is final.
        let s = if Admission::SEALED.get(s) {
            s
        } else {
            let sealed = Admission::SEALED.set(s, true);
            if self
                .state
                .compare_exchange(s, sealed, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return Help::Retry;
            }
            sealed
        };
        if let Some(p) = self.roll(cfg, e, s) {
            // Unseal into `e`.
            let used = take.onto(p);
            let new = Admission::word(Tag::of(e), false, used);
            if self
                .state
                .compare_exchange(s, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
                && used > p
            {
                return Help::Granted(used);
            }
        }
        Help::Retry
    }

    /// Seals the state word of epoch `e`, whose `epoch` is flagged: the
    /// second step of sealing for good (`lifecycle.rs`), which any thread
    /// that meets the flag helps.
    pub(super) fn seal_word(&self, e: u64) {
        let mut s = self.state.load(Ordering::Acquire);
        while !Admission::SEALED.get(s) {
            debug_assert_eq!(Admission::TAG.get(s), Tag::of(e));
            let sealed = Admission::SEALED.set(s, true);
            match self
                .state
                .compare_exchange(s, sealed, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => s = actual,
            }
        }
    }

    /// Step 3 of the roll into `t` from the sealed word `s`; returns the
    /// fold level's `P(t)`, or `None` if the snapshot proved stale.
    fn roll(&self, cfg: &Config, t: u64, s: Word<Admission>) -> Option<u64> {
        if cfg.len() == 1 {
            self.roll_one(cfg, t, s)
        } else {
            self.roll_levels(cfg, t, s)
        }
    }
}
