//! StripedCounter vs one shared AtomicU64 vs Mutex<u64> vs per-thread
//! padded atomics (the ideal), at 1, 2, 4 and 8 threads sharing one
//! instance. Reported as elements/s of the whole instance.

mod common;

use common::{bench_threads, config, THREADS};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use stripecount::StripedCounter;
use stripecount_baselines::counters::{AtomicCounter, MutexCounter, PerThreadCounter};
use stripecount_baselines::harness::Pool;

fn counters(c: &mut Criterion) {
    let mut g = c.benchmark_group("counter_add");
    for threads in THREADS {
        let pool = Pool::new(threads);
        bench_threads(
            &mut g,
            &pool,
            "StripedCounter",
            Arc::new(StripedCounter::new()),
            |s, _, _| s.add(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "AtomicU64",
            Arc::new(AtomicCounter::default()),
            |s, _, _| s.add(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "Mutex<u64>",
            Arc::new(MutexCounter::default()),
            |s, _, _| s.add(black_box(1)),
        );
        bench_threads(
            &mut g,
            &pool,
            "PerThreadPadded(ideal)",
            Arc::new(PerThreadCounter::new(threads)),
            |s, t, _| s.add(t, black_box(1)),
        );
    }
    g.finish();
}

criterion_group! { name = benches; config = config(); targets = counters }
criterion_main!(benches);
