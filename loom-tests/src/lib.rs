//! Loom models of stripecount's atomic protocols live in `tests/`. They only
//! compile under `RUSTFLAGS="--cfg loom"`; see the repository README.
//!
//! This library holds what the models share: `model`, which runs a model
//! with a preemption bound of at least 2 (deeper with
//! `LOOM_MAX_PREEMPTIONS=3`), and `expect_failure`, which asserts that loom
//! finds a bug in a naive design, so every suite is known to be able to fail.
//!
//! Habits that keep a model able to fail, and cheap:
//! - Check each new model by breaking the code it guards (drop a check,
//!   swap two steps) and watching it fail; the commit messages list the
//!   mutations each suite was tried with.
//! - Run a pure reader on a *spawned* thread. Loom's DPOR tracks the last
//!   access to each atomic, so a reader that runs first on the main thread
//!   can be shadowed by a writer's own load of the word it then stores,
//!   and its races go unexplored (found while writing the per-key models:
//!   a naive reader passed until it moved to a spawned thread).
//! - A model whose main thread only spawns and joins gets its interleavings
//!   for fewer preemptions (blocking in `join` is not a preemption).

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, KeyedWindows, Timestamp};

/// SipHash with fixed keys: loom re-runs a model many times and needs every
/// run to touch the same atomics (a `RandomState` would move the key to
/// another shard or slot in each run).
pub type Fixed = BuildHasherDefault<DefaultHasher>;

/// Per-key windows of 2 slices of 1 ns (the time in nanoseconds is the
/// epoch), on the fixed hash: what the per-key models run on.
pub fn windows() -> KeyedWindows<u32, ManualClock, Fixed> {
    KeyedWindows::builder(Duration::from_nanos(2), 2)
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .build()
        .unwrap()
}

/// A hot-key detector over windows as [`windows`] builds them (so a slice
/// is heavy at `ceil(threshold / 2)`).
pub fn detector(threshold: u64) -> HotKeyDetector<u32, ManualClock, Fixed> {
    HotKeyDetector::builder(Duration::from_nanos(2), 2, threshold)
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .build()
        .unwrap()
}

/// `ns` nanoseconds as a [`Timestamp`]: the models pass literal times.
pub fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Runs `f` under loom with a preemption bound of `LOOM_MAX_PREEMPTIONS`
/// (default 2).
#[cfg(loom)]
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Runs `f` under loom at a preemption bound of exactly `bound`, whatever
/// `LOOM_MAX_PREEMPTIONS` says: for the few models with four threads,
/// whose state space at a deeper bound would take CI's whole budget. Each
/// use says why its bound is enough.
#[cfg(loom)]
pub fn model_at_bound<F>(bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

/// Runs `f` under loom (as `model`) and panics unless loom finds an
/// execution in which it panics: the naive designs must be caught.
#[cfg(loom)]
pub fn expect_failure<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model(f)));
    assert!(
        caught.is_err(),
        "loom found no failing execution of the naive design `{name}`: the model cannot fail"
    );
}

/// Runs `reqs[t]` (each `(time, n)`) on thread `t` through `acquire` (the
/// slice a grant was counted in, `None` for a refusal) and returns every
/// grant as `(slice, n)`: how the limiter models race their requests.
#[cfg(loom)]
pub fn race<F>(acquire: F, reqs: Vec<Vec<(u64, u64)>>) -> Vec<(u64, u64)>
where
    F: Fn(u64, u64) -> Option<u64> + Clone + Send + 'static,
{
    let handles: Vec<_> = reqs
        .into_iter()
        .map(|mine| {
            let acquire = acquire.clone();
            loom::thread::spawn(move || {
                mine.into_iter()
                    .filter_map(|(t, n)| acquire(t, n).map(|e| (e, n)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// A sliding-window limiter of `limit` permits over `slices` slices of 1 ns
/// (the time in nanoseconds is the slice), on a manual clock.
#[cfg(loom)]
pub fn sliding(
    limit: u64,
    slices: usize,
) -> loom::sync::Arc<stripecount::RateLimiter<ManualClock>> {
    let quota = stripecount::Quota::per(limit, Duration::from_nanos(slices as u64)).slices(slices);
    loom::sync::Arc::new(
        stripecount::RateLimiter::builder(quota)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    )
}

/// A direct limiter's `try_acquire_at` path (at `t` nanoseconds), as
/// [`race`] takes it: the slice a grant was counted in, `None` for a refusal.
#[cfg(loom)]
pub fn acquire<S>(
    lim: &loom::sync::Arc<stripecount::limiter::Limiter<S, ManualClock>>,
) -> impl Fn(u64, u64) -> Option<u64> + Clone + Send + 'static
where
    S: stripecount::limiter::Shape + Send + Sync + 'static,
{
    let lim = lim.clone();
    move |t, n| lim.__acquire_at(Timestamp::from_nanos(t), n).ok()
}

/// The permits of `grants` (`(slice, n)`) in the window of `slices` slices
/// ending at slice `j`: what the limiter models check a window against.
pub fn window_total(grants: &[(u64, u64)], j: u64, slices: u64) -> u64 {
    grants
        .iter()
        .filter(|(e, _)| *e <= j && j - e < slices)
        .map(|(_, n)| n)
        .sum()
}

/// Asserts that no window of `slices` slices holds more than `limit`
/// permits of `grants`. Windows ending after the last grant hold a subset
/// of the one ending at it, so those up to the last grant are all of them.
pub fn check_windows(grants: &[(u64, u64)], slices: u64, limit: u64) {
    let last = grants.iter().map(|g| g.0).max().unwrap_or(0);
    for j in 0..=last {
        let total = window_total(grants, j, slices);
        assert!(
            total <= limit,
            "window ending at {j}: {total} > {limit} ({grants:?})"
        );
    }
}
