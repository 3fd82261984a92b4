//! StripedCounter vs fast-counter's `ConcurrentCounter` (the peer: cells
//! indexed by a thread number, `fetch_add`), one shared AtomicU64,
//! Mutex<u64> and per-thread padded atomics (`fetch_add` on a cell per
//! thread, told its index up front), at 1, 2, 4 and 8 threads sharing one
//! instance. Reported as elements/s of the whole instance.
//!
//! ```sh
//! cargo bench --bench counter
//! python3 scripts/bench-table.py --base AtomicU64 counter_add
//! ```

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
            "fast-counter",
            // Sized as its docs suggest: one cell per core.
            Arc::new(fast_counter::ConcurrentCounter::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )),
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
            "PerThreadPadded",
            Arc::new(PerThreadCounter::new(threads)),
            |s, t, _| s.add(t, black_box(1)),
        );
    }
    g.finish();
}

criterion_group! { name = benches; config = config(); targets = counters }
criterion_main!(benches);
