//! The grant: the admission protocol's hot path, on an
//! [`AdmissionState`] (whose words and invariants are in `state.rs`).
//!
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
//! A single-limit owner's request (`acquire_one`) first tries the loop's
//! first pass inline (the state current, one judgment, at most one CAS),
//! which calls nothing and so needs no stack frame, and otherwise goes the
//! whole way from the start.
//!
//! # Orderings
//! As `state.rs`: loads `Acquire`, the grant CAS `AcqRel`, so a grant reads
//! every roll's writes through the CAS chain on `state`.

use super::config::{Config, MAX_BUDGET, MAX_LIMITS};
use super::denied::Denied;
use super::help::{Help, Take};
use super::history::History;
use super::state::{holds, key, AdmissionState, Refused};
use crate::pack::{Admission, Tag, TagCount};
use crate::sync::Ordering;

/// What a refusal for want of room in the fold level's window was decided
/// on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Short {
    /// The epoch it was judged at: the request's own, or the state's newer
    /// one (`now` is never past its slice).
    pub(crate) epoch: u64,
    /// That epoch's state word's `used`.
    pub(crate) used: u64,
    /// The request's units, and the budget they did not fit.
    pub(crate) units: u64,
    pub(crate) budget: u64,
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

impl AdmissionState {
    /// Takes `n` permits at `now` against `limits` (one per level of `cfg`).
    /// `Ok(epoch)`: granted, counted in finest slice `epoch`.
    #[inline]
    pub fn acquire(&self, cfg: &Config, now: u64, n: u64, limits: &[u64]) -> Result<u64, Refused> {
        let mut frozen = [0; MAX_LIMITS];
        if cfg.len() == 1 {
            self.admit::<true>(cfg, now, n, limits, &mut frozen, &mut None)
        } else {
            self.admit::<false>(cfg, now, n, limits, &mut frozen, &mut None)
        }
        .map(|g| g.epoch)
    }

    /// [`acquire`](Self::acquire) for a single-limit `cfg` (checked in
    /// debug builds): the hot path of a single-limit owner, specialized at
    /// compile time.
    ///
    /// The common case is tried first, inline: `now` in the current epoch's
    /// slice, its state word current and unsealed, one judgment and at most
    /// one CAS. It calls nothing, so it needs no stack frame (the whole
    /// path's six saved registers and its constants were a fifth of a
    /// refusal's instructions). It is the first pass of
    /// [`admit`](Self::admit)'s loop, with the same loads and orderings;
    /// anything else (no permits or more than the limit, a roll to make or
    /// help, a seal, a lost CAS) goes the whole way from the start, as a
    /// new call would, having written nothing.
    #[inline(always)]
    pub fn acquire_one(&self, cfg: &Config, now: u64, n: u64, limit: u64) -> Result<u64, Refused> {
        debug_assert_eq!(cfg.len(), 1);
        if n != 0 && n <= limit {
            let budget = cfg.budget(limit);
            let units = cfg.charge(n, budget);
            let e = self.epoch.load(Ordering::Acquire);
            if units != 0 && now < e.saturating_add(1).saturating_mul(cfg.slice_nanos()) {
                let s = self.state.load(Ordering::Acquire);
                if holds(s, key(e)) {
                    if Admission::USED.get(s) + units > budget {
                        return Err(denied(Denied::Exhausted, cfg.fold()));
                    }
                    if self
                        .state
                        .compare_exchange_weak(
                            s,
                            Admission::USED.add(s, units),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        return Ok(e);
                    }
                }
            }
        }
        self.acquire_one_slow(cfg, now, n, limit)
    }

    /// [`acquire_one`](Self::acquire_one) the whole way: out of line, so
    /// that its frame is paid only when the common case does not apply.
    #[inline(never)]
    fn acquire_one_slow(&self, cfg: &Config, now: u64, n: u64, limit: u64) -> Result<u64, Refused> {
        self.acquire_one_whole(cfg, now, n, limit)
    }

    /// [`acquire_one`](Self::acquire_one) the whole way, inline: for a
    /// state that is often behind (a per-key state, rolled by its own
    /// requests), where trying the common case first would load its words
    /// twice.
    #[inline(always)]
    pub fn acquire_one_whole(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limit: u64,
    ) -> Result<u64, Refused> {
        debug_assert_eq!(cfg.len(), 1);
        let mut frozen = [0; MAX_LIMITS];
        self.admit::<true>(cfg, now, n, &[limit], &mut frozen, &mut None)
            .map(|g| g.epoch)
    }

    /// [`acquire`](Self::acquire), returning what the grant was decided on;
    /// the other levels' frozen sums go to `frozen` (with `ONE`, `cfg` has
    /// one level and `frozen` is not written). A refusal for want of room
    /// in the fold level's window writes what it was decided on to
    /// `refused`.
    #[inline(always)]
    pub(crate) fn admit<const ONE: bool>(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
        frozen: &mut [u64; MAX_LIMITS],
        refused: &mut Option<Short>,
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
                    *refused = Some(Short {
                        epoch: e,
                        used,
                        units,
                        budget,
                    });
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
}

fn denied(reason: Denied, level: usize) -> Refused {
    Refused::Denied { reason, level }
}
