//! # stripecount
//!
//! Lock-free concurrent counters for services that count per key at very
//! high rates:
//!
//! - [`StripedCounter`]: a LongAdder-style counter whose cache-padded cells
//!   grow only when contention is seen.
//! - [`SlidingWindow`]: an exact sliding time window built from
//!   epoch-tagged slices recycled by CAS: no add is ever wiped, counted
//!   twice, or filed under the wrong slice.
//! - Strict limiters: [`SlidingWindowLimiter`], [`FixedWindowLimiter`],
//!   [`MultiLimiter`] (several limits in one CAS) and, per key with bounded
//!   memory, [`KeyedLimiter`].
//! - Clocks ([`MonotonicClock`], [`CoarseClock`], [`ManualClock`]) injected
//!   into every structure, plus `*_at(now)` methods for callers that already
//!   know the time.
//!
//! Every atomic protocol is documented at the top of its module and model
//! checked with loom (see `loom-tests/`). The design notes are in
//! `IMPLEMENTATION.md`.
//!
//! Time is `u64` nanoseconds on a clock's own monotonic timeline.
#![warn(missing_docs)]

pub mod clock;
pub mod counter;
mod error;
pub mod guide;
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
pub mod metrics;
#[cfg(feature = "prometheus")]
pub mod prometheus;

// The public names, listed (no glob re-exports). The root holds the types
// users construct and the errors; the modules below hold the rest, each
// named after its concept.
pub use clock::{Clock, Timestamp};
pub use counter::StripedCounter;
pub use error::ConfigError;
pub use keyed::{HotKeyDetector, KeyedWindows};
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
