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
// # Files (each with its invariants at the top)
// - `quota.rs`: [`Quota`], and what each choice of it guarantees;
//   `builder.rs`: the direct limiters' builder.
// - `config.rs`: `Config`, what every state of one limiter shares: the
//   time grid, the windows of its limits (*levels*), the units.
// - `state.rs`: `AdmissionState`, three atomics that can live inline in
//   a table slot; the grant (hot path) and its invariants.
// - `help.rs`: helping a state forward (advance the epoch, seal, roll,
//   unseal), and the grant that rides the unseal.
// - `roll.rs`: the roll's record step, the history of the new epoch (one
//   limit); `levels.rs`: the same for several limits.
// - `inline.rs`: the state's `block` word, which holds the history inline
//   while its counts are small (or, with several limits, says none is
//   recorded yet).
// - `history.rs`: the history block, for the rest.
// - `snapshot.rs`: consistent reads (available permits, when a request
//   fits, when the window empties, idleness).
// - `lifecycle.rs`: sealing for good, idleness and copying, for an owner
//   that evicts and moves states (a per-key table), and how it must use
//   them.
// - `decision.rs`: [`Denied`] and [`Decision`].
// - `direct.rs`: [`Limiter`], one state shared by every caller, and limits
//   that change at run time; `rate.rs`, `multi.rs`: its two shapes.
// - `wait.rs`: `until_ready` on every limiter (a loop of `decide` and a
//   sleep: no protocol of its own), and [`Jitter`].
// - `keyed/`: [`KeyedLimiter`], one state per key, inline in the slots of
//   the per-key map (`crate::map`), with quotas per key and the
//   eviction and move protocols wired to the map.
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
mod multi;
mod quota;
mod rate;
mod roll;
mod roll_levels;
mod roll_one;
mod snapshot;
mod state;
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
