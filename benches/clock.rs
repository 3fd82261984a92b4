//! The three clocks' `now()`, single-threaded. Target: CoarseClock at most
//! 1/4 the cost of MonotonicClock.

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use stripecount::{Clock, CoarseClock, ManualClock, MonotonicClock};

fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock_now");
    let mono = MonotonicClock;
    let coarse = CoarseClock::new();
    let manual = ManualClock::new();
    g.bench_function("MonotonicClock", |b| b.iter(|| black_box(&mono).now()));
    g.bench_function("CoarseClock", |b| b.iter(|| black_box(&coarse).now()));
    g.bench_function("ManualClock", |b| b.iter(|| black_box(&manual).now()));
    g.finish();
}

criterion_group! { name = benches; config = common::config(); targets = clocks }
criterion_main!(benches);
