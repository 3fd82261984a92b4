//! Decisions on an admission state: [`AdmissionState::decide`] (the grant of
//! `grant.rs`, and what its caller tells its client: a [`Decision`]),
//! [`peek`](AdmissionState::peek) and
//! [`available`](AdmissionState::available).
//!
//! # How the fields are computed
//! - A **grant** reports from the values its CAS was decided on: the
//!   remaining permits after it, and the full reset (when the slice it was
//!   counted in leaves the window). No extra read.
//! - A **single-limit refusal** for want of room reports from the value it
//!   was refused on (the state word of epoch `E`): the permits left, and
//!   the retry and reset times kept by value and computed when read, or,
//!   with a history block, computed from the ring of `E`'s window read
//!   while the state still holds `E` (`times.rs` says why each is the
//!   answer true at the refusal). A roll that began in between makes the
//!   request be decided again (a refusal took nothing).
//! - Any other refusal (several limits, a request above its limit, a limit
//!   lowered below one unit) and a **peek** report from a consistent
//!   snapshot of the state (`snapshot.rs`), taken after the verdict.
//! - With several limits, `limit`, `remaining` and `reset_after` describe
//!   one limit, [`Decision::limit_index`]: the one that refused (the one
//!   that would hold the request longest), or after a grant the one with
//!   the fewest permits left; `retry_after` is when *every* limit has room.

use super::config::{Config, MAX_LIMITS};
use super::decision::Decision;
use super::denied::Denied;
use super::grant::{Grant, Short};
use super::history::History;
use super::memo;
use super::snapshot::Snapshot;
use super::state::{holds, key, AdmissionState, Refused};
use super::times::{nanos_after, Times};
use super::view::LevelView;
use crate::pack::{Tag, TagCount};
use crate::sync::Ordering;

/// The decision for a grant of `n > 0` permits, from the values it was
/// decided on.
#[inline]
pub(crate) fn granted<const ONE: bool>(
    cfg: &Config,
    now: u64,
    g: &Grant,
    frozen: &[u64; MAX_LIMITS],
    limits: &[u64],
) -> Decision {
    let left = |i: usize, used: u64| {
        let raw = limits[i];
        cfg.permits(cfg.budget(raw).saturating_sub(used), false, raw)
    };
    // The limit with the fewest permits left (the only one, usually).
    let (mut i, mut remaining) = (cfg.fold(), left(cfg.fold(), g.used));
    for c in (0..limits.len()).filter(|&c| !ONE && c != cfg.fold()) {
        let l = left(c, frozen[c].saturating_add(g.cur));
        if l < remaining || (l == remaining && c < i) {
            (i, remaining) = (c, l);
        }
    }
    // The slice the grant was counted in leaves the window `S` slices on.
    let lv = cfg.level(i);
    let slice = lv.index(g.epoch);
    let reset = slice.saturating_add(lv.slices).saturating_mul(lv.ratio);
    let times = Times::known(Some(0), cfg.nanos_until(reset, now));
    Decision::new(Ok(g.epoch), limits[i], remaining, i, times)
}

/// The decision for `n` permits judged on `snap` at `now`. `verdict`:
/// the refusal already decided, or `None` for a peek (judged here).
pub(crate) fn judged(
    cfg: &Config,
    snap: &Snapshot<'_>,
    now: u64,
    n: u64,
    limits: &[u64],
    verdict: Option<(Denied, usize)>,
) -> Decision {
    let j = cfg.epoch_of(now).max(snap.epoch);
    let mut left = [0u64; MAX_LIMITS];
    let mut fits = [Some(j); MAX_LIMITS];
    let mut reset = [j; MAX_LIMITS];
    for (i, &raw) in limits.iter().enumerate() {
        let level = snap.level(cfg, i);
        let budget = cfg.budget(raw);
        let used = level.used_at(j);
        left[i] = cfg.permits(budget.saturating_sub(used), used == 0, raw);
        fits[i] = if n == 0 {
            Some(j)
        } else if n > raw {
            None
        } else {
            match cfg.charge(n, budget) {
                0 => None, // a lowered limit below one unit
                units => level.fits_from(j, units, budget),
            }
        };
        reset[i] = level.empty_from(j);
    }
    let k = limits.len();
    // The binding limit: the one that holds the request longest (never =
    // `None` first), else the one with the fewest permits left.
    let later = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, Some(_)) => true,
        (Some(x), Some(y)) => x > y,
        _ => false,
    };
    let mut i = 0;
    for c in 1..k {
        let worse = later(fits[c], fits[i]) || (fits[c] == fits[i] && left[c] < left[i]);
        if worse {
            i = c;
        }
    }
    let verdict = match verdict {
        Some((reason, level)) => {
            i = level;
            Err(reason)
        }
        None => match fits[i] {
            None => Err(Denied::ExceedsLimit),
            Some(at) if at > j => Err(Denied::Exhausted),
            Some(_) => Ok(j),
        },
    };
    let retry = (0..k).try_fold(j, |acc, c| fits[c].map(|at| acc.max(at)));
    let after = |at: u64| nanos_after(at, j, cfg.slice_nanos(), now);
    let times = Times::known(retry.map(after), after(reset[i]));
    Decision::new(verdict, limits[i], left[i], i, times)
}

impl AdmissionState {
    /// Takes `n` permits at `now` against `limits`, as
    /// [`acquire`](Self::acquire), and returns the full [`Decision`].
    /// `None`: the state is sealed or pending (look the key up again).
    #[cfg_attr(not(any(test, loom)), allow(dead_code))] // tests and loom models
    pub fn decide(&self, cfg: &Config, now: u64, n: u64, limits: &[u64]) -> Option<Decision> {
        if cfg.len() == 1 {
            self.decide_with::<true>(cfg, now, n, limits)
        } else {
            self.decide_with::<false>(cfg, now, n, limits)
        }
    }

    /// [`decide`](Self::decide), specialized for one level (`ONE`) or not.
    #[inline]
    pub(crate) fn decide_with<const ONE: bool>(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
    ) -> Option<Decision> {
        let d = self.decide_or_sealed::<ONE>(cfg, now, n, limits, None);
        (!d.is_sealed()).then_some(d)
    }

    /// [`decide_with`](Self::decide_with), where a state sealed or pending
    /// answers [`Decision::sealed`] (a direct limiter's state never does):
    /// every decision is built once, where the caller keeps it, with no
    /// `Option` around it on the way. `memo`: the identity of the direct
    /// limiter this state is, whose refusal walks a thread may reuse
    /// (`memo.rs`).
    #[inline]
    pub(crate) fn decide_or_sealed<const ONE: bool>(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
        memo: Option<u64>,
    ) -> Decision {
        let mut frozen = [0; MAX_LIMITS];
        let mut refused = None;
        let r = self.admit::<ONE>(cfg, now, n, limits, &mut frozen, &mut refused);
        match (r, refused) {
            (Ok(g), _) if n > 0 => granted::<ONE>(cfg, now, &g, &frozen, limits),
            (Err(_), Some(short)) if ONE => {
                let Short {
                    epoch: e,
                    used,
                    units,
                    budget,
                } = short;
                match self.refusal_times(cfg, now, e, used, used + units - budget, memo) {
                    Some(times) => {
                        let raw = limits[0];
                        let left = cfg.permits(budget - used.min(budget), used == 0, raw);
                        Decision::new(Err(Denied::Exhausted), raw, left, 0, times)
                    }
                    // A roll began since the refusal: the request is decided
                    // again (a refusal took nothing).
                    None => self.decide_again::<ONE>(cfg, now, n, limits, memo),
                }
            }
            _ => self.decide_rest(cfg, now, n, limits, r),
        }
    }

    /// [`decide_or_sealed`](Self::decide_or_sealed) again, after a roll
    /// began between a refusal and the read of its window.
    #[cold]
    #[inline(never)]
    fn decide_again<const ONE: bool>(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
        memo: Option<u64>,
    ) -> Decision {
        self.decide_or_sealed::<ONE>(cfg, now, n, limits, memo)
    }

    /// The decisions that read a snapshot: a request for nothing, any
    /// refusal of several limits, a request above its limit, a limit
    /// lowered below one unit; and a sealed state's answer.
    #[inline(never)]
    fn decide_rest(
        &self,
        cfg: &Config,
        now: u64,
        n: u64,
        limits: &[u64],
        r: Result<Grant, Refused>,
    ) -> Decision {
        let d = match r {
            Ok(_) => self.peek(cfg, now, 0, limits),
            Err(Refused::Denied { reason, level }) => self.read(cfg, |snap| {
                judged(cfg, snap, now, n, limits, Some((reason, level)))
            }),
            Err(Refused::Sealed) => None,
        };
        d.unwrap_or_else(|| Decision::sealed(limits[0]))
    }

    /// The times of a single-limit request refused at `now` for want of
    /// room at epoch `e`, whose state word had `used`, that fits once
    /// `need` units have left the window: kept by value, or computed from
    /// the block (`times.rs`). `None` if a roll began since the refusal, so
    /// that the values of `e`'s window may be gone. `memo`: the direct
    /// limiter's identity, whose walks this thread remembers (`memo.rs`).
    #[inline]
    fn refusal_times(
        &self,
        cfg: &Config,
        now: u64,
        e: u64,
        used: u64,
        need: u64,
        memo: Option<u64>,
    ) -> Option<Times> {
        // A single-limit refusal's (`decide_or_sealed`).
        match self.history_as::<true>(cfg) {
            // Null now, so null at the refusal (it never returns): nothing
            // recorded.
            History::Empty => Some(Times::window(cfg, now, e, used, need, None)),
            // `e`'s own word (tagged), read after the refusal's state word.
            History::Inline(w) if w.tag() == Tag::of(e) => {
                Some(Times::window(cfg, now, e, used, need, Some(w)))
            }
            History::Block(b) => {
                let lv = cfg.level(0);
                let walk = match memo.and_then(|id| memo::get(id, e, need)) {
                    Some(walk) => walk,
                    None => {
                        // `frozen` of another epoch: a roll began. An early
                        // exit only (the check after the walk fails then
                        // too; no model catches its removal, rightly).
                        let f = b.frozen(lv).load(Ordering::Acquire);
                        if TagCount::TAG.get(f) != Tag::of(e) {
                            return None;
                        }
                        let recorded = TagCount::COUNT.get(f);
                        let head = used.saturating_sub(recorded);
                        let (width, history) = (cfg.inline_width(), History::Block(b));
                        let view = LevelView::new(lv, width, e, head, Some(used), history);
                        let walk = view.walk(need, recorded, |k| cfg.fold_slot(k));
                        // The ring words read were `e`'s if no roll began
                        // meanwhile.
                        if !holds(self.state.load(Ordering::Acquire), key(e)) {
                            return None;
                        }
                        if let Some(id) = memo {
                            memo::put(id, e, need, walk);
                        }
                        walk
                    }
                };
                let head = used.saturating_sub(walk.recorded);
                let (retry, reset) = walk.epochs(e, lv.slices, head);
                Some(Times::epochs(cfg, now, e, retry, reset))
            }
            _ => None,
        }
    }

    /// Whether `n` permits would be granted at `now` against `limits`,
    /// consuming nothing and not moving the state's time. `None`: the state
    /// is pending.
    pub fn peek(&self, cfg: &Config, now: u64, n: u64, limits: &[u64]) -> Option<Decision> {
        self.read(cfg, |snap| judged(cfg, snap, now, n, limits, None))
    }

    /// The most permits one request could get at `now` (the smallest over
    /// the limits; a limit in an empty window). `None`: the state is
    /// pending.
    pub fn available(&self, cfg: &Config, now: u64, limits: &[u64]) -> Option<u64> {
        self.read(cfg, |snap| {
            let j = cfg.epoch_of(now).max(snap.epoch);
            let left = |(i, &raw): (usize, &u64)| {
                let used = snap.level(cfg, i).used_at(j);
                cfg.permits(cfg.budget(raw).saturating_sub(used), used == 0, raw)
            };
            limits.iter().enumerate().map(left).min().unwrap_or(0)
        })
    }
}
