//! Strict rate limiters: [`SlidingWindowLimiter`] and [`FixedWindowLimiter`].
//!
//! A limiter grants at most `limit` permits in every window, under any
//! concurrency, and never refuses a request that fits at the moment it is
//! decided (contention only causes a retry, never a refusal).
//!
//! # Why not a [`SlidingWindow`](crate::SlidingWindow) plus a check
//! "Read the sum, then add" overshoots: two threads read `limit - 1` and both
//! add. A striped sum cannot be checked and raised in one atomic step, so the
//! limiter admits through **one admission word per limiter**, raised by CAS.
//! The published fixed-window design ("CAS the next window start, then store
//! `count = 1`") wipes grants that land between the two steps; here the
//! window's identity and its count live in the same word.
//!
//! # Model
//! Time is cut into slices of `L = window / slices`; the *epoch* of `t` is
//! `t / L`. The window at epoch `E` is the slices `(E - S, E]` (exactly what
//! [`SlidingWindow::sum_at`](crate::SlidingWindow::sum_at) covers). A
//! [`FixedWindowLimiter`] is the case `S = 1`: windows `[k W, (k+1) W)`.
//! A limiter's time never runs backwards: a request stamped before the
//! newest epoch the limiter has reached is judged (and counted) at that
//! epoch.
//!
//! # Words (all on one 128-byte line, except the history)
//! - `epoch`: the newest epoch (full 64 bits). Only increases, by CAS.
//! - `state`: `tag:16 | sealed:1 | used:47`. `tag` is the low 16 bits of
//!   the epoch the state belongs to; `used` is the number of units granted
//!   in that epoch's whole window (the frozen past slices plus the current
//!   one). A grant is one CAS `used -> used + n` checked against the budget.
//! - `frozen`: `tag:16 | P:48`, `P(E)` = the final counts of the slices
//!   `(E - S, E)`, the part of `E`'s window that can no longer change.
//! - `hist[k % S]`: `tag:16 | count:48`, the final count of slice `k`.
//! - `limit`: the raw limit (changed by `set_limit`).
//!
//! # Invariants
//! 1. `epoch` only increases, and moves from `E` only when the state holds
//!    `E` unsealed. So the state's epoch is `epoch` or its previous value
//!    `prev`; the state is `prev`'s (roll in progress) iff its tag is not
//!    `tag(epoch)`.
//! 2. Every move `E -> T` has `T - E < S` or `(T - E) mod 2^16 >= S` (a
//!    jump that would alias is made in two steps, via `E + S`). So the tag
//!    distance `d = tag(T) - tag(E) mod 2^16` is the true distance when it is
//!    below `S`, and `d >= S` means "everything expired"; in particular
//!    `tag(T) != tag(E)`.
//! 3. A state holding epoch `E` unsealed has `used = P(E) + granted(E)`, and
//!    no grant takes `used` above the budget: **no window over-admits**.
//! 4. While a state is sealed its `used` is final; `frozen` holds `P(prev)`
//!    or `P(E)`; every `hist` slot for a slice in `(E - S, E)` is written
//!    (with a deterministic value) before `frozen` moves to `P(E)`, and
//!    `frozen` moves before the state is unsealed into `E`.
//!
//! # Protocol
//! - **Grant** (hot path): load `epoch` (a multiply tells whether `now` is
//!   past its slice), load `state`; if the state is `epoch`'s and unsealed:
//!   refuse if `used + n > budget` (loads only, no write), else CAS
//!   `used + n`; a failed CAS hands back the current value, which is judged
//!   again. A refusal is therefore always decided on a value in which the
//!   request did not fit: contention never causes a refusal.
//! - **Roll** to a later epoch `T` (cold, once per slice, any thread helps).
//!   A helper acts on a snapshot: `epoch`, then `state`, then `epoch` again
//!   unchanged; without the re-read a thread holding a stale `epoch` would
//!   "roll" the newer state back into its old epoch.
//!   1. CAS `epoch: E -> T` (only while the state holds `E` unsealed).
//!   2. *Seal*: CAS `state` to set `sealed`. Grants into `E` racing the seal
//!      either land before it (and are in the final `used`) or fail and help.
//!      This closes the race in which a slow thread still grants into the old
//!      slice after another thread has computed the new frozen sum.
//!   3. *Record*: `hist[E] = used - P(E)` (if `E` is still in `T`'s window)
//!      and `hist[k] = 0` for the skipped slices `k` in `T`'s window. Every
//!      helper writes the same values (CAS from what it read, after checking
//!      the state is still the sealed one, so a stale helper cannot clobber a
//!      later slice); an equal value means "already done".
//!   4. `frozen: P(E) -> P(T)`, the sum of the `hist` slots of `(T - S, T)`.
//!   5. *Unseal*: CAS `state` to `tag(T) | used = P(T)`.
//!
//!   The new state is published only after the old slice's final count is
//!   recorded (steps 3-4 before 5): this closes the race in which the next
//!   roll reads a history that is missing the last slice. A fixed window
//!   (`S = 1`) has no history: its roll is the single CAS
//!   `state: tag(E) | c -> tag(T) | 0`, which cannot wipe a grant.
//!
//! No step waits: every retry follows another thread's successful CAS.
//!
//! # Orderings
//! Loads are `Acquire`, CASes `AcqRel`. The chain that matters: a recorder's
//! `hist` CAS is sequenced before its `frozen` CAS (release), which the
//! unsealer reads (acquire) before its `state` CAS (release); every later
//! grant or roll reads `state` (acquire) through the CAS chain (RMWs extend
//! release sequences), so it sees the history the roll recorded. `limit` is
//! `Relaxed`: a limit change is an independent fact, effective for the
//! requests that read it.
//!
//! # Widths and bounds
//! - `used` has 47 bits: limits up to [`MAX_EXACT_LIMIT`] (2^47 - 1, about
//!   1.4e14 permits per window) are exact. A larger limit is accounted in
//!   units of `2^k` permits, the smallest power of two that brings it under
//!   2^47: the budget is `limit >> k` units and a request costs `ceil(n /
//!   2^k)` units, but never more than the whole budget (so a single request
//!   for the whole limit, even `u64::MAX`, is granted in an empty window).
//!   This never over-admits (a request charged the whole budget is alone in
//!   its window; otherwise the permits granted are at most `2^k` times the
//!   units); it may refuse a request that fits by less than `2^k` permits
//!   per grant in the window. No arithmetic anywhere can overflow.
//! - ABA: a thread descheduled between a load and its CAS while the word
//!   goes through 2^16 epochs and comes back to the identical 64 bits could
//!   succeed with a stale decision (the bound of [`crate::slice`]).

use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::sync::{AtomicU64, Ordering};
use crate::window::slice_nanos;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// The largest limit counted exactly, permit by permit (2^47 - 1, about
/// 1.4e14 permits per window). Larger limits are honoured in units of a
/// power of two permits, never over-admitting (see the module docs).
pub const MAX_EXACT_LIMIT: u64 = USED_MASK;

/// 16 tag bits, as in [`crate::slice`]: enough to tell the (at most
/// `MAX_SLICES` = 4096 < 2^15) slices of a window apart, leaving 48 bits
/// for a count; the state spends one of them on the seal, hence 47.
const TAG_BITS: u32 = 16;
// Invariant 2 needs every window to be shorter than half the tag space.
const _: () = assert!(crate::window::MAX_SLICES < 1 << (TAG_BITS - 1));
const TAG_SHIFT: u32 = 64 - TAG_BITS;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const SEALED: u64 = 1 << 47;
const USED_MASK: u64 = SEALED - 1;
const VALUE_MASK: u64 = (1 << TAG_SHIFT) - 1;

#[inline]
fn tag(epoch: u64) -> u64 {
    epoch & TAG_MASK
}

#[inline]
fn tag_of(word: u64) -> u64 {
    word >> TAG_SHIFT
}

#[inline]
fn pack(tag: u64, value: u64) -> u64 {
    (tag << TAG_SHIFT) | value
}

#[inline]
fn value_of(word: u64) -> u64 {
    word & VALUE_MASK
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Denied {
    /// The request asks for more permits than the limit: it can never be
    /// granted (`n > limit`).
    ExceedsLimit,
    /// The window has no room for the request now; it may fit later (see
    /// `retry_after_at`).
    Exhausted,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::ExceedsLimit => write!(f, "the request asks for more permits than the limit"),
            Denied::Exhausted => write!(f, "the window has no room for the request now"),
        }
    }
}

impl std::error::Error for Denied {}

/// The words read and written by every request, on their own cache line.
struct Hot {
    epoch: AtomicU64,
    state: AtomicU64,
    frozen: AtomicU64,
    limit: AtomicU64,
}

/// The admission protocol shared by both limiters (see the module docs).
struct Core {
    hot: CachePadded<Hot>,
    hist: Box<[AtomicU64]>,
    slices: u64,
    slice_nanos: u64,
    /// Permits per unit are `1 << shift` (0 unless the limit given at
    /// construction exceeds [`MAX_EXACT_LIMIT`]).
    shift: u32,
}

impl Core {
    fn new(limit: u64, slice_nanos: u64, slices: usize) -> Core {
        let bits = 64 - limit.leading_zeros();
        let shift = bits.saturating_sub(64 - TAG_BITS - 1);
        let hist = if slices > 1 {
            (0..slices as u64)
                .map(|i| AtomicU64::new(pack(tag(i), 0)))
                .collect()
        } else {
            Box::default()
        };
        Core {
            hot: CachePadded::new(Hot {
                epoch: AtomicU64::new(0),
                state: AtomicU64::new(pack(tag(0), 0)),
                frozen: AtomicU64::new(pack(tag(0), 0)),
                limit: AtomicU64::new(limit),
            }),
            hist,
            slices: slices as u64,
            slice_nanos,
            shift,
        }
    }

    #[inline]
    fn epoch_of(&self, t: u64) -> u64 {
        t / self.slice_nanos
    }

    /// The budget in units for the raw limit `raw`.
    #[inline]
    fn budget(&self, raw: u64) -> u64 {
        (raw >> self.shift).min(USED_MASK)
    }

    /// The units a request of `0 < n <= raw` costs against `budget`.
    #[inline]
    fn charge(&self, n: u64, budget: u64) -> u64 {
        let units = if self.shift == 0 {
            n
        } else {
            (n >> self.shift) + u64::from(n & ((1 << self.shift) - 1) != 0)
        };
        units.min(budget)
    }

    /// The request path. `Ok(epoch)`: granted, counted in slice `epoch`.
    #[inline]
    fn acquire(&self, now: u64, n: u64) -> Result<u64, Denied> {
        if n == 0 {
            return Ok(self
                .epoch_of(now)
                .max(self.hot.epoch.load(Ordering::Acquire)));
        }
        let raw = self.hot.limit.load(Ordering::Relaxed);
        if n > raw {
            return Err(Denied::ExceedsLimit);
        }
        let budget = self.budget(raw);
        let units = self.charge(n, budget);
        if units == 0 {
            // Only when a lowered limit is below one unit (see `set_limit`).
            return Err(Denied::Exhausted);
        }
        loop {
            let e = self.hot.epoch.load(Ordering::Acquire);
            // `now` is in a later slice only if it is past the end of `e`'s:
            // a multiply, not a division (a 64-bit `div` costs more than the
            // rest of the grant on common x86 parts).
            if now >= e.saturating_add(1).saturating_mul(self.slice_nanos) {
                let e_req = self.epoch_of(now);
                if e_req > e {
                    self.advance(e, e_req);
                    continue;
                }
            }
            let mut s = self.hot.state.load(Ordering::Acquire);
            // While `s` carries `e`'s tag unsealed it is `e`'s state (see
            // invariant 1): a failed CAS hands back the new value, which is
            // judged again without reloading anything.
            while tag_of(s) == tag(e) && s & SEALED == 0 {
                if (s & USED_MASK) + units > budget {
                    return Err(Denied::Exhausted);
                }
                match self.hot.state.compare_exchange_weak(
                    s,
                    s + units,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(e),
                    Err(actual) => s = actual,
                }
            }
            self.help(e, s);
        }
    }

    /// Moves the epoch from `e` towards `e_req` (invariants 1 and 2).
    #[cold]
    fn advance(&self, e: u64, e_req: u64) {
        let s = self.hot.state.load(Ordering::Acquire);
        if tag_of(s) != tag(e) || s & SEALED != 0 {
            self.help(e, s);
            return;
        }
        let gap = e_req - e;
        let target = if gap < self.slices || (gap & TAG_MASK) >= self.slices {
            e_req
        } else {
            e + self.slices // two steps, so the tag distance is not aliased
        };
        if self
            .hot
            .epoch
            .compare_exchange(e, target, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.help(target, s);
        }
    }

    /// Helps the roll into epoch `e` whose state was read as `s` (not `e`'s,
    /// or sealed), `s` having been loaded after `e`. Returns when done or when
    /// the snapshot proves stale.
    #[cold]
    fn help(&self, e: u64, s: u64) {
        let prev_tag = tag_of(s);
        if prev_tag == tag(e) || self.hot.epoch.load(Ordering::Acquire) != e {
            // `e` is stale (a later roll began): the caller reloads. Otherwise
            // `epoch` held `e` from before `s` was read until now (it only
            // increases), so `s` belongs to `e`'s predecessor (invariant 1),
            // never to a later epoch: rolling "into `e`" from it is right.
            return;
        }
        let state = &self.hot.state;
        if self.slices == 1 {
            // Fixed window: nothing of the old slice survives. The state's
            // tag and count change in one step, so no grant is wiped.
            let _ = state.compare_exchange(s, pack(tag(e), 0), Ordering::AcqRel, Ordering::Acquire);
            return;
        }
        // 2. Seal: from here the old epoch's `used` is final.
        let s = if s & SEALED == 0 {
            if state
                .compare_exchange(s, s | SEALED, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return;
            }
            s | SEALED
        } else {
            s
        };
        let f = self.hot.frozen.load(Ordering::Acquire);
        let p = if tag_of(f) == tag(e) {
            value_of(f)
        } else if tag_of(f) == prev_tag {
            // 3. Record the old slice and the skipped ones in `e`'s window.
            let lo = e.saturating_sub(self.slices - 1);
            let d = tag(e).wrapping_sub(prev_tag) & TAG_MASK;
            let mut first_zero = lo;
            if d < self.slices {
                let prev = e - d;
                let count = (s & USED_MASK).saturating_sub(value_of(f));
                if !self.record(prev, count, s) {
                    return;
                }
                first_zero = prev + 1;
            }
            for k in first_zero..e {
                if !self.record(k, 0, s) {
                    return;
                }
            }
            // 4. The frozen part of `e`'s window.
            let p = (lo..e)
                .map(|k| self.recorded(k))
                .fold(0u64, u64::saturating_add)
                .min(USED_MASK);
            if self
                .hot
                .frozen
                .compare_exchange(f, pack(tag(e), p), Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return;
            }
            p
        } else {
            return; // stale: the state moved on
        };
        // 5. Unseal into `e`.
        let _ = state.compare_exchange(s, pack(tag(e), p), Ordering::AcqRel, Ordering::Acquire);
    }

    /// Writes `hist[k] = count` while the state is still the sealed `s`.
    /// `false` if the state moved on (the caller is stale).
    fn record(&self, k: u64, count: u64, s: u64) -> bool {
        let slot = &self.hist[(k % self.slices) as usize];
        let want = pack(tag(k), count);
        loop {
            let cur = slot.load(Ordering::Acquire);
            if cur == want {
                return true;
            }
            if self.hot.state.load(Ordering::Acquire) != s {
                return false;
            }
            if slot
                .compare_exchange(cur, want, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// The recorded final count of slice `k` (0 if its slot holds another
    /// slice).
    #[inline]
    fn recorded(&self, k: u64) -> u64 {
        let w = self.hist[(k % self.slices) as usize].load(Ordering::Acquire);
        if tag_of(w) == tag(k) {
            value_of(w)
        } else {
            0
        }
    }

    /// A settled snapshot: `(epoch, used, current slice's count)`, helping
    /// any roll in progress to its end (which changes no outcome).
    fn settled(&self) -> (u64, u64, u64) {
        loop {
            let e = self.hot.epoch.load(Ordering::Acquire);
            let s = self.hot.state.load(Ordering::Acquire);
            if tag_of(s) != tag(e) || s & SEALED != 0 {
                self.help(e, s);
                continue;
            }
            let used = s & USED_MASK;
            if self.slices == 1 {
                return (e, used, used);
            }
            let f = self.hot.frozen.load(Ordering::Acquire);
            let p = if tag_of(f) == tag(e) {
                value_of(f)
            } else {
                continue; // a newer roll overtook the snapshot
            };
            if self.hot.state.load(Ordering::Acquire) != s {
                continue;
            }
            return (e, used, used.saturating_sub(p));
        }
    }

    /// Count of slice `k` in the snapshot whose epoch is `e` and whose
    /// current slice holds `cur`.
    fn count_in(&self, k: u64, e: u64, cur: u64) -> u64 {
        if k == e {
            cur
        } else if k > e || e - k >= self.slices {
            0
        } else {
            self.recorded(k)
        }
    }

    /// Units used in the window at epoch `j >= e` of the snapshot.
    fn used_at(&self, j: u64, e: u64, used: u64, cur: u64) -> u64 {
        if j == e {
            return used;
        }
        let lo = j.saturating_sub(self.slices - 1);
        (lo..=e.min(j))
            .map(|k| self.count_in(k, e, cur))
            .fold(0u64, u64::saturating_add)
    }

    fn available(&self, now: u64) -> u64 {
        let raw = self.hot.limit.load(Ordering::Relaxed);
        let budget = self.budget(raw);
        let (e, used, cur) = self.settled();
        let j = self.epoch_of(now).max(e);
        let used = self.used_at(j, e, used, cur);
        if used == 0 && budget > 0 {
            raw
        } else {
            (budget.saturating_sub(used) << self.shift).min(raw)
        }
    }

    fn retry_after(&self, now: u64, n: u64) -> Option<Duration> {
        let raw = self.hot.limit.load(Ordering::Relaxed);
        if n > raw {
            return None;
        }
        if n == 0 {
            return Some(Duration::ZERO);
        }
        let budget = self.budget(raw);
        let units = self.charge(n, budget);
        if units == 0 {
            return None;
        }
        let (e, used, cur) = self.settled();
        let j = self.epoch_of(now).max(e);
        let mut used = self.used_at(j, e, used, cur);
        if used + units <= budget {
            return Some(Duration::ZERO);
        }
        // Slide forward slice by slice; after `S` slices nothing is left.
        let last = j.saturating_add(self.slices);
        for next in j.saturating_add(1)..=last {
            if let Some(gone) = next.checked_sub(self.slices) {
                used = used.saturating_sub(self.count_in(gone, e, cur));
            }
            if used + units <= budget || next == last {
                let at = next.saturating_mul(self.slice_nanos);
                return Some(Duration::from_nanos(at.saturating_sub(now)));
            }
        }
        None
    }

    fn limit(&self) -> u64 {
        self.hot.limit.load(Ordering::Relaxed)
    }

    fn set_limit(&self, limit: u64) {
        self.hot.limit.store(limit, Ordering::Relaxed);
    }
}

macro_rules! common_methods {
    ($name:ident) => {
        impl<C: Clock> $name<C> {
            /// Takes one permit now; `true` if granted.
            #[inline]
            pub fn try_acquire(&self) -> bool {
                self.core.acquire(self.clock.now(), 1).is_ok()
            }

            /// Takes `n` permits now, all or none; `true` if granted. `n == 0`
            /// is granted and consumes nothing; `n > limit` is always refused.
            #[inline]
            pub fn try_acquire_n(&self, n: u64) -> bool {
                self.core.acquire(self.clock.now(), n).is_ok()
            }

            /// Takes `n` permits at time `now` (nanoseconds on this limiter's
            /// clock). A `now` before the newest time the limiter has seen is
            /// judged at that newest time.
            #[inline]
            pub fn try_acquire_at(&self, now: u64, n: u64) -> bool {
                self.core.acquire(now, n).is_ok()
            }

            /// Like [`try_acquire_n`](Self::try_acquire_n), but says why a
            /// request was refused. `Ok(epoch)`: the slice (`time / slice
            /// length`) the permits were counted in.
            #[inline]
            pub fn try_acquire_verbose(&self, n: u64) -> Result<u64, Denied> {
                self.core.acquire(self.clock.now(), n)
            }

            /// Like [`try_acquire_at`](Self::try_acquire_at), but says why a
            /// request was refused. `Ok(epoch)`: the slice the permits were
            /// counted in, which is at least `epoch_at(now)` (later when the
            /// limiter had already seen a later time).
            #[inline]
            pub fn try_acquire_verbose_at(&self, now: u64, n: u64) -> Result<u64, Denied> {
                self.core.acquire(now, n)
            }

            /// The most permits one request at `now` could get (`limit` in an
            /// empty window). A read: it does not move the limiter's time.
            pub fn available_at(&self, now: u64) -> u64 {
                self.core.available(now)
            }

            /// The most permits one request could get now.
            pub fn available(&self) -> u64 {
                self.core.available(self.clock.now())
            }

            /// How long after `now` a request for `n` permits would first fit
            /// if nothing else were granted: `Some(ZERO)` if it fits now,
            /// `None` if it never can (`n > limit`).
            pub fn retry_after_at(&self, now: u64, n: u64) -> Option<Duration> {
                self.core.retry_after(now, n)
            }

            /// [`retry_after_at`](Self::retry_after_at) now.
            pub fn retry_after(&self, n: u64) -> Option<Duration> {
                self.core.retry_after(self.clock.now(), n)
            }

            /// The limit: permits per window.
            pub fn limit(&self) -> u64 {
                self.core.limit()
            }

            /// Changes the limit at run time, for the requests that start
            /// after the change. Permits already granted stay counted: after
            /// lowering the limit below what the current window holds, requests
            /// are refused until enough of it has expired.
            ///
            /// Units are fixed at construction: if the limiter was built with
            /// a limit above [`MAX_EXACT_LIMIT`], a new limit is accounted in
            /// the same units (a limit below one unit then grants nothing); a
            /// limiter built with an exact limit clamps a new limit above
            /// [`MAX_EXACT_LIMIT`] to that many units, except that a single
            /// request of up to the new limit is still granted in an empty
            /// window.
            pub fn set_limit(&self, limit: u64) {
                self.core.set_limit(limit)
            }

            /// The epoch (slice number) of time `now`.
            pub fn epoch_at(&self, now: u64) -> u64 {
                self.core.epoch_of(now)
            }

            /// The window length.
            pub fn window(&self) -> Duration {
                self.window
            }

            /// The clock.
            pub fn clock(&self) -> &C {
                &self.clock
            }
        }
    };
}

/// A strict sliding-window rate limiter: at most `limit` permits in any
/// window of `slices` consecutive slices (the current, partial, slice and
/// the `slices - 1` before it).
///
/// Lock-free; a refusal costs a few loads, a grant one CAS. The protocol,
/// its invariants and orderings are documented at the top of
/// `src/limiter.rs`.
///
/// ```
/// use stripecount::{ManualClock, SlidingWindowLimiter};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // 4 permits per 3 seconds, in slices of 1 second.
/// let lim = SlidingWindowLimiter::with_clock(4, Duration::from_secs(3), 3, clock.clone())?;
/// assert!(lim.try_acquire_n(2));
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire_n(2));
/// clock.advance(Duration::from_secs(1));
/// assert!(!lim.try_acquire_n(2)); // 4 granted in the last 3 slices
/// assert_eq!(lim.available(), 0);
/// assert_eq!(lim.retry_after(2), Some(Duration::from_secs(1)));
/// clock.advance(Duration::from_secs(1)); // the first 2 have expired
/// assert!(lim.try_acquire_n(2));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct SlidingWindowLimiter<C: Clock = MonotonicClock> {
    core: Core,
    window: Duration,
    clock: C,
}

impl SlidingWindowLimiter {
    /// `limit` permits per `window`, the window cut into `slices` slices, on
    /// the monotonic clock. Any `limit` is valid (0 denies everything).
    ///
    /// Errors: zero window, zero slices, more than
    /// [`MAX_SLICES`](crate::MAX_SLICES), a window whose nanoseconds are not a
    /// whole multiple of `slices`, or one longer than `u64::MAX` ns.
    pub fn new(limit: u64, window: Duration, slices: usize) -> Result<Self, ConfigError> {
        Self::with_clock(limit, window, slices, MonotonicClock)
    }
}

impl<C: Clock> SlidingWindowLimiter<C> {
    /// A limiter on the given clock (see [`SlidingWindowLimiter::new`]).
    pub fn with_clock(
        limit: u64,
        window: Duration,
        slices: usize,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let nanos = slice_nanos(window, slices)?;
        Ok(SlidingWindowLimiter {
            core: Core::new(limit, nanos, slices),
            window,
            clock,
        })
    }

    /// The number of slices.
    pub fn slices(&self) -> usize {
        self.core.slices as usize
    }

    /// The slice length.
    pub fn slice_len(&self) -> Duration {
        Duration::from_nanos(self.core.slice_nanos)
    }
}

common_methods!(SlidingWindowLimiter);

impl<C: Clock> fmt::Debug for SlidingWindowLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindowLimiter")
            .field("limit", &self.core.limit())
            .field("window", &self.window)
            .field("slices", &self.core.slices)
            .finish_non_exhaustive()
    }
}

/// A strict fixed-window rate limiter: at most `limit` permits in each
/// window `[k * window, (k + 1) * window)`.
///
/// The window's identity and its count change in one CAS, so a new window
/// never wipes the grants that raced its start (the bug of "CAS the next
/// start, then store count = 1").
///
/// ```
/// use stripecount::{FixedWindowLimiter, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let lim = FixedWindowLimiter::with_clock(2, Duration::from_secs(1), clock.clone())?;
/// assert!(lim.try_acquire());
/// assert!(lim.try_acquire());
/// assert!(!lim.try_acquire());
/// clock.advance(Duration::from_secs(1));
/// assert!(lim.try_acquire_n(2));
/// # Ok::<(), stripecount::ConfigError>(())
/// ```
pub struct FixedWindowLimiter<C: Clock = MonotonicClock> {
    core: Core,
    window: Duration,
    clock: C,
}

impl FixedWindowLimiter {
    /// `limit` permits per `window`, on the monotonic clock. Any `limit` is
    /// valid (0 denies everything).
    ///
    /// Errors: zero window, or one longer than `u64::MAX` ns.
    pub fn new(limit: u64, window: Duration) -> Result<Self, ConfigError> {
        Self::with_clock(limit, window, MonotonicClock)
    }
}

impl<C: Clock> FixedWindowLimiter<C> {
    /// A limiter on the given clock (see [`FixedWindowLimiter::new`]).
    pub fn with_clock(limit: u64, window: Duration, clock: C) -> Result<Self, ConfigError> {
        let nanos = slice_nanos(window, 1)?;
        Ok(FixedWindowLimiter {
            core: Core::new(limit, nanos, 1),
            window,
            clock,
        })
    }
}

common_methods!(FixedWindowLimiter);

impl<C: Clock> fmt::Debug for FixedWindowLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindowLimiter")
            .field("limit", &self.core.limit())
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync + fmt::Debug>() {}
    is::<SlidingWindowLimiter>();
    is::<FixedWindowLimiter>();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let w = pack(tag(0x1_2345), 77);
        assert_eq!(tag_of(w), 0x2345);
        assert_eq!(value_of(w), 77);
        assert_eq!(SEALED & USED_MASK, 0);
        assert_eq!(pack(TAG_MASK, 0) & SEALED, 0);
    }

    #[test]
    fn units_for_wide_limits() {
        let c = Core::new(MAX_EXACT_LIMIT, 1, 1);
        assert_eq!(c.shift, 0);
        let c = Core::new(MAX_EXACT_LIMIT + 1, 1, 1);
        assert_eq!(c.shift, 1);
        let c = Core::new(u64::MAX, 1, 1);
        assert_eq!(c.shift, 17);
        assert_eq!(c.budget(u64::MAX), MAX_EXACT_LIMIT);
        assert_eq!(c.charge(u64::MAX, MAX_EXACT_LIMIT), MAX_EXACT_LIMIT);
        assert_eq!(c.charge(1, MAX_EXACT_LIMIT), 1);
        assert_eq!(c.charge(1 << 17, MAX_EXACT_LIMIT), 1);
        assert_eq!(c.charge((1 << 17) + 1, MAX_EXACT_LIMIT), 2);
    }

    #[test]
    fn two_step_jump_keeps_tags_apart() {
        let c = Core::new(5, 1, 4);
        assert_eq!(c.acquire(3, 5), Ok(3));
        // A jump of exactly 2^16 slices would alias the tag.
        let far = 3 + (1 << 16);
        assert_eq!(c.acquire(far, 5), Ok(far));
        assert_eq!(c.acquire(far, 1), Err(Denied::Exhausted));
        // A jump to a tag distance below S but a real distance above 2^16.
        let far2 = far + (1 << 16) + 2;
        assert_eq!(c.acquire(far2, 5), Ok(far2));
    }
}
