//! The clock rows: one `now()` per operation, each thread reading in a
//! tight loop (a clock shares no instance worth the name: these rows say
//! what a clock read costs, beside the adds it stamps).
//!
//! - `MonotonicClock`: the TSC where it is trusted (calibrated, clamped per
//!   thread), `Instant` otherwise.
//! - `CoarseClock`: one load of the ticker's cached time.
//! - `Instant::now()`: what `MonotonicClock` was, and still is where the TSC
//!   is not trusted.
//! - quanta's `Clock::now()`: the TSC clock governor and moka use.

use super::Setup;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;
use stripecount::clock::{Clock, CoarseClock, MonotonicClock};
use stripecount_baselines::harness::{batches, Job};

/// A job reading `now` once per operation.
fn reads<T>(now: impl Fn() -> T + Send + Sync + 'static) -> Job {
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(now());
        })
    })
}

pub(super) fn monotonic(_: &Setup, _: usize) -> Job {
    let c = MonotonicClock::new();
    reads(move || c.now())
}

pub(super) fn coarse(_: &Setup, _: usize) -> Job {
    let c = CoarseClock::new();
    reads(move || c.now())
}

pub(super) fn instant(_: &Setup, _: usize) -> Job {
    let origin = Instant::now();
    reads(move || origin.elapsed())
}

pub(super) fn quanta(_: &Setup, _: usize) -> Job {
    let c = quanta::Clock::new();
    reads(move || c.now())
}
