//! The window rows: `SlidingWindow` on the caller's time and on each
//! clock, the 3-level `MultiWindow`, and the baselines (a ring behind a
//! mutex, a racy atomic ring), all on the report's window.

use super::{Setup, SLICES, WINDOW};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::{CoarseClock, MonotonicClock};
use stripecount::{Clock, MultiWindow, SlidingWindow, Timestamp};
use stripecount_baselines::harness::{batches, batches_at, Job};
use stripecount_baselines::rings::{MutexRing, NaiveAtomicRing};

/// The caller's clock of the `*_at` rows, read once per batch (in
/// nanoseconds, the baselines' time; ours take it as a [`Timestamp`], a free
/// conversion).
fn caller_now() -> u64 {
    MonotonicClock.now().as_nanos()
}

fn window<C: Clock>(clock: C) -> SlidingWindow<C> {
    SlidingWindow::builder(WINDOW, SLICES)
        .clock(clock)
        .build()
        .expect("1 s / 10 slices is a valid window")
}

fn slice_nanos() -> u64 {
    (WINDOW / SLICES as u32).as_nanos() as u64
}

pub(super) fn window_add_at(_: &Setup, _: usize) -> Job {
    let w = Arc::new(window(MonotonicClock));
    Arc::new(move |_, stop| {
        batches_at(stop, caller_now, |t| {
            black_box(w.add_at(Timestamp::from_nanos(t), 1));
        })
    })
}

pub(super) fn window_add_coarse(_: &Setup, _: usize) -> Job {
    let w = Arc::new(window(CoarseClock::new()));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add(1));
        })
    })
}

pub(super) fn window_add_monotonic(_: &Setup, _: usize) -> Job {
    let w = Arc::new(window(MonotonicClock));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add(1));
        })
    })
}

/// The multi-resolution levels: the report's 1 s window, then 1 min and 1 h
/// (each slice length a whole multiple of the previous level's).
pub const MULTI_LEVELS: [(Duration, usize); 3] = [
    (WINDOW, SLICES),
    (Duration::from_secs(60), 60),
    (Duration::from_secs(3600), 60),
];

pub(super) fn multi_add_at(_: &Setup, _: usize) -> Job {
    let w = Arc::new(MultiWindow::new(&MULTI_LEVELS).expect("valid levels"));
    Arc::new(move |_, stop| {
        batches_at(stop, caller_now, |t| {
            black_box(w.add_at(Timestamp::from_nanos(t), 1));
        })
    })
}

pub(super) fn mutex_ring(_: &Setup, _: usize) -> Job {
    let r = Arc::new(MutexRing::new(slice_nanos(), SLICES));
    Arc::new(move |_, stop| batches_at(stop, caller_now, |t| r.add_at(t, 1)))
}

pub(super) fn naive_ring(_: &Setup, _: usize) -> Job {
    let r = Arc::new(NaiveAtomicRing::new(slice_nanos(), SLICES));
    Arc::new(move |_, stop| batches_at(stop, caller_now, |t| r.add_at(t, 1)))
}
