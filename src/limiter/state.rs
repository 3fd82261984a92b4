//! [`AdmissionState`]: the admission protocol, in a plain struct of three
//! atomics that can live inline wherever its owner wants it (inside a
//! direct limiter, or in a per-key table's slot).
//!
//! A state never reads a clock and holds no limit: the caller passes `now`
//! and the limits with every call, and the state's [`Config`] (the time
//! grid and windows, shared by every state of one limiter) by reference.
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
//!   (`inline.rs`), or a pointer to the history block (`history.rs`).
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
//! # Grant (the hot path)
//! Load `epoch` (a multiply tells whether `now` is past its slice; if so,
//! advance), load `state`; while the state is `epoch`'s, unsealed: refuse if
//! any level has no room (loads only, no write), else CAS `used + units`; a
//! failed CAS hands back the current value, which is judged again. A
//! refusal is therefore always decided on a value in which the request did
//! not fit: contention never causes a refusal. With several limits the
//! other levels' `frozen` words are read from the block (tagged with the
//! epoch, so a stale read is seen and retried) and checked in the same
//! decision: the one CAS grants against every limit at once.
//!
//! A single-limit request that finds its state behind helps the roll
//! (`help.rs`), and if its own CAS is the one that opens the new epoch (the
//! unseal, or a fixed window's one-CAS roll) it is granted in that CAS when
//! it fits: the same as the grant CAS that would follow, with nothing in
//! between. Otherwise it reloads and is judged as above.
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

pub(crate) use super::config::MAX_EPOCH;
use super::config::{Config, MAX_BUDGET, MAX_LIMITS};
use super::denied::Denied;
use super::help::{Help, Take};
use super::history::{Block, Cell};
use super::inline::History;
use crate::pack::{Admission, AtomicWord, Tag, TagCount, Word};
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

/// A grant and the values it was decided on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    /// The epoch the permits were counted in.
    pub(crate) epoch: u64,
    /// The fold level's `used` after the grant.
    pub(crate) used: u64,
    /// The fold level's current-slice count after the grant.
    pub(crate) cur: u64,
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
    /// and no history (`inline.rs`).
    pub fn new(cfg: &Config, epoch: u64) -> AdmissionState {
        let epoch = epoch.min(MAX_EPOCH);
        AdmissionState {
            epoch: AtomicU64::new(epoch),
            state: AtomicWord::new(Admission::word(Tag::of(epoch), false, 0)),
            block: AtomicPtr::new(super::inline::first_history(cfg, epoch)),
        }
    }

    /// What the `block` word holds: nothing, an inline history or a block
    /// (`inline.rs`).
    #[inline]
    pub(super) fn history<'a>(&'a self, cfg: &Config) -> History<'a> {
        // SAFETY: the `block` word is null, inline, or a block of `cfg`
        // (states are only used with their own config) freed only by
        // `Drop`, and `self` is borrowed for `'a`.
        unsafe { History::of(self.block.load(Ordering::Acquire), cfg) }
    }

    /// The history block, if any (`None` for an inline history).
    #[inline]
    pub(super) fn block<'a>(&'a self, cfg: &Config) -> Option<Block<'a>> {
        match self.history(cfg) {
            History::Block(b) => Some(b),
            _ => None,
        }
    }

    /// Takes `n` permits at `now` against `limits` (one per level of `cfg`).
    /// `Ok(epoch)`: granted, counted in finest slice `epoch`.
    #[inline]
    pub fn acquire(&self, cfg: &Config, now: u64, n: u64, limits: &[u64]) -> Result<u64, Refused> {
        let mut frozen = [0; MAX_LIMITS];
        if cfg.len() == 1 {
            self.admit::<true>(cfg, now, n, limits, &mut frozen)
        } else {
            self.admit::<false>(cfg, now, n, limits, &mut frozen)
        }
        .map(|g| g.epoch)
    }

    /// [`acquire`](Self::acquire) for a single-limit `cfg` (checked in
    /// debug builds): the hot path of a single-limit owner, specialized at
    /// compile time.
    #[inline(always)]
    pub fn acquire_one(&self, cfg: &Config, now: u64, n: u64, limit: u64) -> Result<u64, Refused> {
        debug_assert_eq!(cfg.len(), 1);
        let mut frozen = [0; MAX_LIMITS];
        self.admit::<true>(cfg, now, n, &[limit], &mut frozen)
            .map(|g| g.epoch)
    }

    /// [`acquire`](Self::acquire), returning what the grant was decided on;
    /// the other levels' frozen sums go to `frozen` (with `ONE`, `cfg` has
    /// one level and `frozen` is not written).
    #[inline(always)]
    pub(crate) fn admit<const ONE: bool>(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
        frozen: &mut [u64; MAX_LIMITS],
    ) -> Result<Grant, Refused> {
        debug_assert_eq!(limits.len(), cfg.len());
        if n == 0 {
            let e = self.newest(cfg, now);
            return Ok(Grant {
                epoch: e,
                used: 0,
                cur: 0,
            });
        }
        // Units and budgets, per level.
        let (units, budget) = if ONE {
            let raw = limits[0];
            if n > raw {
                return Err(denied(Denied::ExceedsLimit, 0));
            }
            let budget = cfg.budget(raw);
            (cfg.charge(n, budget), budget)
        } else {
            if let Some(level) = limits.iter().position(|&raw| n > raw) {
                return Err(denied(Denied::ExceedsLimit, level));
            }
            (n.min(MAX_BUDGET), limits[cfg.fold()].min(MAX_BUDGET))
        };
        if units == 0 {
            // Only when a lowered limit is below one unit (see `set_limit`).
            return Err(denied(Denied::Exhausted, 0));
        }
        // A single-limit request rides the roll it helps: the unseal grants
        // it too when it fits (`help`), saving the grant's own CAS.
        let take = if ONE {
            Take::new(units, budget)
        } else {
            Take::NONE
        };
        'reload: loop {
            let e = self.epoch.load(Ordering::Acquire);
            // `now` is in a later slice only if it is past the end of `e`'s:
            // a multiply, not a division (a 64-bit `div` costs more than the
            // rest of the grant on common x86 parts).
            if now >= e.saturating_add(1).saturating_mul(cfg.slice_nanos()) {
                let e_req = cfg.epoch_of(now);
                if e_req > e {
                    if let Help::Granted(used) = self.advance(cfg, e, e_req, take) {
                        return Ok(Grant {
                            epoch: e_req,
                            used,
                            cur: units,
                        });
                    }
                    continue;
                }
            }
            let k = key(e);
            let mut s = self.state.load(Ordering::Acquire);
            // While `s` is `e`'s unsealed word it is `e`'s state (invariant
            // 1): a failed CAS hands back the new value, judged again.
            while holds(s, k) {
                let used = Admission::USED.get(s);
                let cur = if ONE {
                    0 // not needed: `used` holds everything
                } else {
                    match self.other_levels(cfg, e, used, units, limits, frozen) {
                        Ok(cur) => cur,
                        Err(Some(level)) => return Err(denied(Denied::Exhausted, level)),
                        Err(None) => continue 'reload, // stale snapshot
                    }
                };
                if used + units > budget {
                    return Err(denied(Denied::Exhausted, cfg.fold()));
                }
                match self.state.compare_exchange_weak(
                    s,
                    Admission::USED.add(s, units),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        let (used, cur) = (used + units, cur + units);
                        return Ok(Grant {
                            epoch: e,
                            used,
                            cur,
                        });
                    }
                    Err(actual) => s = actual,
                }
            }
            match self.help(cfg, e, s, take) {
                Help::Sealed => return Err(Refused::Sealed),
                Help::Granted(used) => {
                    return Ok(Grant {
                        epoch: e,
                        used,
                        cur: units,
                    })
                }
                Help::Retry => {}
            }
        }
    }

    /// Checks the levels other than the fold level for a grant of `units`
    /// into epoch `e`, whose state word has `used`. `Ok(cur)`: they have
    /// room (`cur` is the current slice's count); `Err(Some(i))`: level `i`
    /// has none; `Err(None)`: the block no longer describes `e` (reload).
    #[inline]
    fn other_levels(
        &self,
        cfg: &Config,
        e: u64,
        used: u64,
        units: u64,
        limits: &[u64],
        frozen: &mut [u64; MAX_LIMITS],
    ) -> Result<u64, Option<usize>> {
        let block = match self.history(cfg) {
            History::Block(b) => b,
            // Nothing recorded in any level: every `frozen` is 0.
            History::Quiet(at) if at == e => {
                for (i, &raw) in limits.iter().enumerate() {
                    frozen[i] = 0;
                    if i != cfg.fold() && used + units > raw.min(MAX_BUDGET) {
                        return Err(Some(i));
                    }
                }
                return Ok(used);
            }
            _ => return Err(None), // a roll began: reload
        };
        let tag = Tag::of(e);
        let read = |i: usize| {
            let w = block.frozen(cfg.level(i)).load(Ordering::Acquire);
            (TagCount::TAG.get(w) == tag).then(|| TagCount::COUNT.get(w))
        };
        let cur = used.saturating_sub(read(cfg.fold()).ok_or(None)?);
        for (i, &raw) in limits.iter().enumerate() {
            if i == cfg.fold() {
                continue;
            }
            let p = read(i).ok_or(None)?;
            frozen[i] = p;
            if p + cur + units > raw.min(MAX_BUDGET) {
                return Err(Some(i));
            }
        }
        Ok(cur)
    }

    /// The newest epoch at `now`: `now`'s or the state's, whichever is later.
    #[inline]
    pub(crate) fn newest(&self, cfg: &Config, now: u64) -> u64 {
        let e = self.epoch.load(Ordering::Acquire) & !FLAG;
        cfg.epoch_of(now).max(e.min(MAX_EPOCH))
    }
}

fn denied(reason: Denied, level: usize) -> Refused {
    Refused::Denied { reason, level }
}
