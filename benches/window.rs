//! SlidingWindow::add_at vs a Mutex-protected ring vs the naive (racy)
//! atomic ring, with StripedCounter as the unit, at 1, 2, 4 and 8 threads
//! sharing one instance. Times are caller-supplied and advance 64 ns per op
//! per thread, so the 1 ms slices roll over every ~15,600 ops.
//!
//! Also a window built the obvious way, `SlidingWindow::new(..)` then
//! `add` (the default clock, read on every add; its 1 ms slices roll over
//! every ~60,000 ops at 60M adds/s a thread). Targets:
//! `add_at` at least 0.6x `StripedCounter::add`, `new(..)` + `add` at least
//! 0.33x `add_at` (aim 0.5x), at 1 and 2 threads.

mod common;

use common::{bench_threads, config, THREADS};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use stripecount::{SlidingWindow, StripedCounter, Timestamp};
use stripecount_baselines::harness::Pool;
use stripecount_baselines::rings::{MutexRing, NaiveAtomicRing};

const SLICE_NS: u64 = 1_000_000;
const SLICES: usize = 10;

fn windows(c: &mut Criterion) {
    let mut g = c.benchmark_group("window_add_at");
    for threads in THREADS {
        let pool = Pool::new(threads);
        bench_threads(
            &mut g,
            &pool,
            "StripedCounter(unit)",
            Arc::new(StripedCounter::new()),
            |s, _, _| s.add(black_box(1)),
        );
        let w = SlidingWindow::new(Duration::from_nanos(SLICE_NS * SLICES as u64), SLICES).unwrap();
        bench_threads(&mut g, &pool, "SlidingWindow", Arc::new(w), |s, _, i| {
            s.add_at(Timestamp::from_nanos(black_box(i * 64)), 1);
        });
        let w = SlidingWindow::new(Duration::from_nanos(SLICE_NS * SLICES as u64), SLICES).unwrap();
        bench_threads(
            &mut g,
            &pool,
            "SlidingWindow::new+add",
            Arc::new(w),
            |s, _, _| {
                s.add(black_box(1));
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "MutexRing",
            Arc::new(MutexRing::new(SLICE_NS, SLICES)),
            |s, _, i| s.add_at(black_box(i * 64), 1),
        );
        bench_threads(
            &mut g,
            &pool,
            "NaiveAtomicRing(racy)",
            Arc::new(NaiveAtomicRing::new(SLICE_NS, SLICES)),
            |s, _, i| s.add_at(black_box(i * 64), 1),
        );
    }
    g.finish();
}

criterion_group! { name = benches; config = config(); targets = windows }
criterion_main!(benches);
