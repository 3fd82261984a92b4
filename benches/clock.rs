//! `now()` of every clock, at 1, 2, 4 and 8 threads each reading in a tight
//! loop (the harness of every bench): ours (`MonotonicClock` on the TSC with
//! its per-thread clamp, `CoarseClock`, `ManualClock`), `Instant::now()`,
//! quanta's TSC clock (governor's and moka's), the bare `rdtsc`, and our
//! clock behind the obvious clamp, one shared `fetch_max` per read.
//! Targets: `CoarseClock` at most 1/4 the cost of `Instant`; `MonotonicClock`
//! at most half of `Instant`, and no slower at 2 threads than at 1 (no
//! shared write per read).

mod common;

use common::{bench_threads, config, THREADS};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use stripecount::clock::{Clock, CoarseClock, ManualClock, MonotonicClock};
use stripecount_baselines::clocks::{raw_counter, SharedMaxClock};
use stripecount_baselines::harness::Pool;

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn clocks(c: &mut Criterion) {
    let mono = MonotonicClock::new();
    eprintln!("MonotonicClock reads the TSC: {}", mono.uses_tsc());
    let mut g = c.benchmark_group("clock_now");
    for threads in THREADS {
        let pool = Pool::new(threads);
        bench_threads(
            &mut g,
            &pool,
            "MonotonicClock",
            Arc::new(mono),
            |c, _, _| {
                black_box(c.now());
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "CoarseClock",
            Arc::new(CoarseClock::new()),
            |c, _, _| {
                black_box(c.now());
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "ManualClock",
            Arc::new(ManualClock::new()),
            |c, _, _| {
                black_box(c.now());
            },
        );
        bench_threads(&mut g, &pool, "Instant", Arc::new(origin()), |o, _, _| {
            black_box(o.elapsed().as_nanos() as u64);
        });
        bench_threads(
            &mut g,
            &pool,
            "quanta",
            Arc::new(quanta::Clock::new()),
            |q, _, _| {
                black_box(q.now());
            },
        );
        bench_threads(&mut g, &pool, "rdtsc(raw)", Arc::new(()), |_, _, _| {
            black_box(raw_counter());
        });
        bench_threads(
            &mut g,
            &pool,
            "MonotonicClock+shared_fetch_max",
            Arc::new(SharedMaxClock::new(|| MonotonicClock.now().as_nanos())),
            |c, _, _| {
                black_box(c.now());
            },
        );
    }
    g.finish();
}

criterion_group! { name = benches; config = config(); targets = clocks }
criterion_main!(benches);
