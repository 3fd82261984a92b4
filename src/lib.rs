//! Lock-free concurrent counters for services that count per key at very
//! high rates: striped counters, exact sliding time windows, strict rate
//! limiters (direct and per key), and per-key windows with hot-key
//! detection.
//!
//! ```
//! use stripecount::{KeyedLimiter, Quota};
//!
//! // 100 requests a second per client, in every span of one second.
//! let limiter = KeyedLimiter::<String>::new(Quota::per_second(100).strict())?;
//! assert!(limiter.try_acquire("203.0.113.7", 1));
//! let decision = limiter.decide("203.0.113.7", 100); // the whole verdict
//! assert!(!decision.is_granted());
//! assert_eq!(decision.remaining(), 99);
//! # Ok::<(), stripecount::ConfigError>(())
//! ```
//!
//! # The types
//! - [`StripedCounter`]: a LongAdder-style counter whose cache-padded cells
//!   grow only when contention is seen.
//! - [`SlidingWindow`] and [`MultiWindow`]: exact sliding time windows built
//!   from epoch-tagged slices recycled by CAS: no add is ever wiped, counted
//!   twice, or filed under the wrong slice.
//! - [`RateLimiter`], [`MultiLimiter`] and, per key with bounded memory,
//!   [`KeyedLimiter`]: strict limiters of a [`Quota`], never over the limit
//!   under any concurrency; a request is answered by a bool or a
//!   [`Decision`].
//! - [`KeyedWindows`] and [`HotKeyDetector`]: a window per key, and the keys
//!   that cross a threshold in it, reported exactly once per crossing;
//!   [`HotKeySketch`]: the same in memory fixed at construction, for key
//!   spaces too large to hold, with a stated error bound.
//! - [`Clock`] and [`Timestamp`]: where time comes from
//!   ([`clock`] has the clocks), and the type every `*_at` method takes.
//!
//! The [`guide`] tells which type to use, how the methods are named (every
//! clock-reading method has an `_at` twin that takes a [`Timestamp`]; a
//! request has a bool form and a [`Decision`] form), what each guarantees,
//! and how to use them in a service. The modules hold the rest of the
//! names: [`clock`], [`limiter`], [`keyed`], [`window`], [`counter`], and
//! [`hash`] (the per-key structures' default hasher, seeded per instance).
//!
//! # Features
//! - `tsc` (default): [`clock::MonotonicClock`] reads the CPU's time-stamp
//!   counter where it is trusted (`Instant` otherwise).
//! - `metrics`: [`StripedCounter`] as a [`metrics`](https://docs.rs/metrics)
//!   counter.
//! - `prometheus`: [`StripedCounter`] as a
//!   [`prometheus-client`](https://docs.rs/prometheus-client) counter, and a
//!   collector of windows and limiters read at scrape time.
//! - `tokio`: the limiters' `until_ready(n)` and
//!   `until_ready_jittered(n, jitter)` sleep on tokio's timer, and
//!   `clock::TokioClock` is a limiter clock on tokio's (pausable) time.
//!   Waiting on any other runtime needs no feature: `until_ready_with(n,
//!   jitter, sleep)` (see the [guide](guide#waiting-for-a-permit)).
//!
//! Every atomic protocol is documented at the top of the file that owns it
//! and model checked with loom; the unsafe code runs under Miri and the
//! sanitizers.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod clock;
pub mod counter;
mod error;
pub mod guide;
pub mod hash;
mod key;
pub mod keyed;
pub mod limiter;
mod map;
mod multi;
mod pack;
mod reclaim;
mod slice;
mod stripes;
mod sync;
mod thread_id;
mod unwind;
pub mod window;

// Integrations, each behind its own non-default feature and named after the
// crate it integrates.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;

// The public names, listed (no glob re-exports). The root holds the types
// users construct and the errors; the modules below hold the rest, each
// named after its concept.
pub use clock::{Clock, Timestamp};
pub use counter::StripedCounter;
pub use error::ConfigError;
pub use keyed::{HotKeyDetector, HotKeySketch, KeyedWindows};
pub use limiter::{Decision, Denied, KeyedLimiter, MultiLimiter, Quota, RateLimiter};
pub use window::{MultiWindow, SlidingWindow};

/// Loom models only (`--cfg loom`): one key's entry in one slice, one call
/// per protocol step (see `loom-tests/`).
#[cfg(loom)]
#[doc(hidden)]
pub use keyed::model as __loom_keyed;

/// Loom models only: the per-key map's collector (`src/reclaim/epoch.rs`,
/// `src/reclaim/limbo.rs`).
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom_epoch {
    pub use crate::reclaim::epoch::Domain;
    pub use crate::reclaim::limbo::{InParts, Limbo, Parts};
}

/// Loom models only: the per-key map with the real collector behind its
/// guards, and keys and values that show a freed table
/// (`src/map/model.rs`).
#[cfg(loom)]
#[doc(hidden)]
pub use map::model as __loom_map;

/// The admission state the limiters are built on, for the loom models of
/// its owner protocol (seal, copy, idle); built only with `--cfg loom`.
#[cfg(loom)]
#[doc(hidden)]
pub mod admission {
    pub use crate::limiter::{AdmissionState, Config, Refused};
}

/// Loom models only: the clock's clamp (a shared floor and per-thread
/// records), driven with explicit raw times (see `src/clock/clamp.rs`).
#[cfg(loom)]
#[doc(hidden)]
pub use clock::clamp as __loom_clamp;

/// Loom models only: the calling thread gives its token back, as a real
/// thread does when it exits (see `src/thread_id.rs`).
#[cfg(loom)]
#[doc(hidden)]
pub use thread_id::exit_thread as __loom_exit_thread;

/// A unit test's size (loop counts, keys, threads): `full` natively,
/// `miri` under Miri, which interprets a test thousands of times slower.
/// A test asserts the same things at either size.
#[cfg(test)]
pub(crate) const fn sized<T: Copy>(full: T, miri: T) -> T {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

/// The README's examples, compiled and run as doc tests. Its "Using it in a
/// service" snippets need the integration features, so the README is tested
/// with all of them on (`scripts/test.sh` runs it under `--all-features`; an
/// integration whose snippet joins the README adds its feature here).
#[cfg(all(doctest, feature = "metrics", feature = "prometheus"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
