//! Shared by the criterion benches: run `op` on N pool threads that share
//! one instance, via `iter_custom`, on the harness the contention report
//! uses too (`stripecount_baselines::harness`: threads spawned once, outside
//! the timed region; the timer starts after the barrier).

#![allow(dead_code)]

use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stripecount_baselines::harness::{Pool, THREAD_COUNTS};

/// Thread counts every bench covers: the harness's one list.
pub const THREADS: [usize; THREAD_COUNTS.len()] = THREAD_COUNTS;

/// The next op index. Indices keep growing across criterion's repeated
/// calls, so an op that derives a time from its index never goes back in
/// time (which would turn a window add into a cheap "too old" drop).
static NEXT_INDEX: AtomicU64 = AtomicU64::new(0);

/// The index the next measurement starts from (at least): an untimed pass
/// that fills a structure before its row stamps its ops with the time of
/// this index, so that the timed ops continue from it instead of jumping
/// ahead by every op the earlier rows ran.
#[allow(dead_code)] // not every bench fills its structures first
pub fn next_index() -> u64 {
    NEXT_INDEX.load(Ordering::Relaxed)
}

/// Benchmarks `op(state, thread, i)` under `name` at the pool's thread
/// count. Within one measurement every thread sees the same increasing run
/// of indices `i`, and each measurement's run starts after the last one's.
pub fn bench_threads<S, F>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pool: &Pool,
    name: &str,
    state: Arc<S>,
    op: F,
) where
    S: Send + Sync + 'static,
    F: Fn(&S, usize, u64) + Send + Sync + Copy + 'static,
{
    group.throughput(Throughput::Elements(1));
    group.bench_with_input(
        BenchmarkId::new(name, pool.threads()),
        &pool.threads(),
        |b, _| {
            b.iter_custom(|iters| {
                let state = state.clone();
                let threads = pool.threads() as u32;
                // Every thread performs `iters` ops; the time is for all of them,
                // so divide by the thread count to report per-op throughput of
                // the whole shared instance.
                let base = NEXT_INDEX.fetch_add(iters, Ordering::Relaxed);
                let elapsed = pool.run_ops(iters, move |t, i| op(&state, t, base + i));
                elapsed / threads
            })
        },
    );
}

/// Short, CI-friendly defaults (overridable on the command line).
pub fn config() -> criterion::Criterion {
    criterion::Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args()
}
