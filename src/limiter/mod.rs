//! Strict rate limiters: [`RateLimiter`] (one [`Quota`]), [`MultiLimiter`]
//! (several quotas, all or nothing) and, per key with bounded memory,
//! [`KeyedLimiter`]; what they decide ([`Decision`], [`Denied`]).
//!
//! A limiter grants at most `limit` permits in every window, under any
//! concurrency, and never refuses a request that fits at the moment it is
//! decided (contention only causes a retry, never a refusal). Which spans
//! "every window" covers is the quota's choice: by default any `S`
//! consecutive slices (so any span of `window - slice`); with
//! [`Quota::strict`], every span of `window` (see [`Quota`]).
//!
//! ```
//! use stripecount::{KeyedLimiter, Quota};
//!
//! let per_client = KeyedLimiter::<String>::new(Quota::per_second(100).strict())?;
//! if per_client.try_acquire("203.0.113.7", 1) {
//!     // serve the request
//! }
//! # Ok::<(), stripecount::ConfigError>(())
//! ```
//!
//! # Methods
//! Every limiter has the same request methods: [`try_acquire(n)`](RateLimiter::try_acquire)
//! (a bool), [`decide(n)`](RateLimiter::decide) (the whole [`Decision`]: why
//! a refusal, the permits left, when to retry, when the window empties),
//! [`peek(n)`](RateLimiter::peek) (a decision that takes nothing),
//! `available()` and `retry_after(n)`; each with an `_at(now)` twin that
//! takes the time instead of reading the clock. The per-key limiter's take
//! the key first: `try_acquire(&key, n)`, `try_acquire_at(&key, now, n)`.
//!
//! To wait for permits instead of being refused (no `_at` twin: a wait
//! reads the limiter's clock between its sleeps):
//! [`until_ready_with(n, jitter, sleep)`](Limiter::until_ready_with) on any
//! runtime, and with the `tokio` feature `until_ready(n)` and
//! `until_ready_jittered(n, jitter)`; cancel-safe, with an optional
//! [`Jitter`] (see `until_ready_with`).
//!
//! # Why not a [`SlidingWindow`](crate::SlidingWindow) plus a check
//! "Read the sum, then add" overshoots: two threads read `limit - 1` and both
//! add. A striped sum cannot be checked and raised in one atomic step, so a
//! limiter admits through **one admission word**, raised by CAS. The
//! published fixed-window design ("CAS the next window start, then store
//! `count = 1`") wipes grants that land between the two steps; here the
//! window's identity and its count live in the same word.
//!
//! # Model
//! Time is cut into slices of `L = window / slices`; the *epoch* of `t` is
//! `t / L`. The window at epoch `E` is the slices `(E - S, E]` (exactly what
//! [`SlidingWindow::sum_at`](crate::SlidingWindow::sum_at) covers; a strict
//! quota's level has `S + 1` slices). A fixed window is the case `S = 1`:
//! windows `[k W, (k+1) W)`. A limiter's time
//! never runs backwards: a request stamped before the newest epoch the
//! limiter has reached is judged (and counted) at that epoch.

// Design notes (for maintainers; not part of the public docs).
//
// # Floors
// Each file imports only files to its left on its floor or on the floors
// below (and calls only their methods), so a reader can stop at any floor
// and know everything under it. Invariants and orderings are at the top of
// the file that owns them. From the bottom:
// 1. What a limit is (values, no atomics): `quota.rs` ([`Quota`], what
//    each choice of it guarantees), `denied.rs` ([`Denied`]), `config.rs`
//    (`Config`: what every state of one limiter shares, the time grid, the
//    windows of its limits or *levels*, the units); `jitter.rs`
//    ([`Jitter`], which imports nothing here).
// 2. What a state holds: `block.rs` (the history block), `inline.rs` (a
//    history's counts packed in one word), `history.rs` (what the state's
//    `block` word holds, and how the roll moves it), `state.rs`
//    (`AdmissionState`: its three words, their invariants and orderings).
// 3. What a window's counts say, from values alone: `view.rs` (one level's
//    counts at an epoch: window totals, when a request fits, when the
//    window empties), `times.rs` (a decision's retry and reset times, kept
//    by value), `decision.rs` ([`Decision`]), `memo.rs` (a thread's last
//    refusal walk of a direct limiter).
// 4. Moving a state forward: `roll.rs` (the roll's protocol and its two
//    writes), `roll_one.rs` and `roll_levels.rs` (one limit, several),
//    `help.rs` (any thread moves a state along; the ride-along grant).
// 5. Using a state: `grant.rs` (the hot path), `snapshot.rs` (consistent
//    reads), `decide.rs` (decisions, peeks, availability: what a caller
//    tells its client), `lifecycle.rs` (sealing for good, idleness and
//    copying, for an owner that evicts and moves states, and how it must
//    use them).
// 6. The limiters: `direct.rs` ([`Limiter`], one state shared by every
//    caller, and limits that change at run time), `builder.rs`, `rate.rs`
//    and `multi.rs` (its two shapes), `keyed/` ([`KeyedLimiter`], one state
//    per key, inline in the slots of the per-key map `crate::map`, with
//    quotas per key and the eviction and move protocols wired to the map),
//    `wait.rs` (`until_ready` on every limiter: a loop of `decide` and a
//    sleep, no protocol of its own).
//
// # Widths and bounds
// `used` has 47 bits and its all-ones value is reserved: limits up to
// [`MAX_EXACT_LIMIT`] (2^47 - 2, about 1.4e14 permits per window) are
// exact. A larger limit is accounted in units of `2^k` permits, the
// smallest power of two that brings it under that: the budget is `limit >>
// k` units and a request costs `ceil(n / 2^k)` units, but never more than
// the whole budget (so a single request for the whole limit, even
// `u64::MAX`, is granted in an empty window). This never over-admits (a
// request charged the whole budget is alone in its window; otherwise the
// permits granted are at most `2^k` times the units); it may refuse a
// request that fits by less than `2^k` permits per grant in the window. No
// arithmetic anywhere can overflow. Epochs are at most 2^63 - 2 (bit 63
// marks a sealed state): only 1 ns slices of a clock past 292 years reach
// it, and all later times share that last epoch.

mod block;
mod builder;
mod config;
mod decide;
mod decision;
mod denied;
mod direct;
mod grant;
mod help;
mod history;
mod inline;
mod jitter;
mod keyed;
mod lifecycle;
mod memo;
mod multi;
mod quota;
mod rate;
mod roll;
mod roll_levels;
mod roll_one;
mod snapshot;
mod state;
mod times;
mod view;
mod wait;

#[cfg(all(test, not(loom)))]
mod tests;

pub use builder::RateLimiterBuilder;
pub use decision::Decision;
pub use denied::Denied;
pub use direct::{Limiter, Multi, One, Shape};
pub use jitter::Jitter;
pub use keyed::{FloodPolicy, KeyedLimiter, KeyedLimiterBuilder};
pub use multi::MultiLimiter;
pub use quota::{Quota, MAX_LIMITS};
pub use rate::RateLimiter;

// The per-key state and its configuration, for an owner that keeps states
// in its own table (the per-key limiter) and for the loom hook in `lib.rs`.
// (Public under loom only, for the `admission` hook in `lib.rs`.)
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use config::Config;
#[cfg(loom)]
pub use config::Config;
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use state::{AdmissionState, Refused};
#[cfg(loom)]
pub use state::{AdmissionState, Refused};

/// The largest limit counted exactly, permit by permit (2^47 - 2, about
/// 1.4e14 permits per window). Larger limits are honoured in units of a
/// power of two permits, never over-admitting (see `src/limiter/mod.rs`).
pub const MAX_EXACT_LIMIT: u64 = config::MAX_BUDGET;
