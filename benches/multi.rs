//! `MultiWindow::add_at` with 1, 2 and 3 levels against the unit (one
//! `SlidingWindow::add_at`) and against three separate `SlidingWindow`s fed
//! the same add: the target is 3 levels <= 2x one window.
//!
//! Every variant shares ONE instance between the pool's threads (see
//! `stripecount_baselines::harness`). Time advances 1 us per add on every
//! thread, and keeps advancing across measurements, so every variant rolls
//! its slices at the same rate (one 100 ms slice per 100k adds) and no add
//! is ever older than the ring (a dropped add would skip its CAS).
//!
//! Levels: (1 s, 10), (1 min, 60), (1 h, 60): slice lengths 100 ms, 1 s,
//! 1 min, ratios 10 and 60 (not powers of two, the realistic case): three
//! rings. An add writes ring 0 only (one CAS) and folds a fine slice into
//! the coarser rings once per 100 ms slice, i.e. once per 100k adds here.
//! `multi_3_levels_one_slice_len` is 5, 10 and 30 minutes by the minute:
//! one shared ring.
//!
//! `multi_sum_over` (one thread) measures the price folding moves to reads:
//! a level reads its own ring and every finer one. It reads each level's
//! whole window from a filled structure, against `SlidingWindow::sum_at`
//! on the same levels.
//!
//! Run: `cargo bench --bench multi -- --warm-up-time 1 --measurement-time 2`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stripecount::{MultiWindow, SlidingWindow, Timestamp};
use stripecount_baselines::harness::{Pool, THREAD_COUNTS};

const LEVELS: [(Duration, usize); 3] = [
    (Duration::from_secs(1), 10),
    (Duration::from_secs(60), 60),
    (Duration::from_secs(3600), 60),
];

/// Nanoseconds between two adds of one thread.
const STEP: u64 = 1_000;

/// Measures `add(now, 1)` on `threads` threads sharing `add`'s instance.
/// Generic (not `dyn`) so that every variant's add is inlined into the
/// loop, as in user code.
fn bench<F>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pool: &Pool,
    name: &str,
    add: F,
) where
    F: Fn(Timestamp, u64) + Send + Sync + 'static,
{
    let threads = pool.threads();
    let add = Arc::new(add);
    // The time every thread starts the next measurement at: always past the
    // last measurement's end, so time never steps back.
    let clock = Arc::new(AtomicU64::new(1));
    group.bench_function(BenchmarkId::new(name, threads), |b| {
        b.iter_custom(|iters| {
            let per_thread = (iters / threads as u64).max(1);
            let start = clock.fetch_add(per_thread * STEP, Ordering::Relaxed);
            let add = add.clone();
            pool.run_ops(per_thread, move |_, i| {
                let now = Timestamp::from_nanos(black_box(start + i * STEP));
                add(now, black_box(1))
            })
        })
    });
}

fn bench_add_at(c: &mut Criterion) {
    let window = |i: usize| SlidingWindow::new(LEVELS[i].0, LEVELS[i].1).unwrap();
    let multi = |k: usize| MultiWindow::new(&LEVELS[..k]).unwrap();
    let mut group = c.benchmark_group("multi_add_at");
    for threads in THREAD_COUNTS {
        let pool = Pool::new(threads);
        let one = window(0);
        bench(&mut group, &pool, "window_x1", move |t, n| {
            black_box(one.add_at(t, n));
        });
        for k in 1..=3 {
            let m = multi(k);
            let name = ["multi_1_level", "multi_2_levels", "multi_3_levels"][k - 1];
            bench(&mut group, &pool, name, move |t, n| {
                black_box(m.add_at(t, n));
            });
        }
        // Three levels of one slice length share one ring: one cell add.
        let min = Duration::from_secs(60);
        let same = MultiWindow::new(&[(5 * min, 5), (10 * min, 10), (30 * min, 30)]).unwrap();
        bench(
            &mut group,
            &pool,
            "multi_3_levels_one_slice_len",
            move |t, n| {
                black_box(same.add_at(t, n));
            },
        );
        let sep = [window(0), window(1), window(2)];
        bench(&mut group, &pool, "window_x3_separate", move |t, n| {
            for w in &sep {
                black_box(w.add_at(t, n));
            }
        });
    }
    group.finish();
}

fn bench_sum_over(c: &mut Criterion) {
    let mut group = c.benchmark_group("multi_sum_over");
    let multi = MultiWindow::new(&LEVELS).unwrap();
    let windows: Vec<SlidingWindow> = LEVELS
        .iter()
        .map(|&(d, s)| SlidingWindow::new(d, s).unwrap())
        .collect();
    // Two hours of adds, one every 10 ms: every cell of every ring is live
    // or recently folded.
    let end = 2 * 3600 * 1_000_000_000u64;
    for t in (0..end).step_by(10_000_000) {
        let t = Timestamp::from_nanos(t);
        multi.add_at(t, 1);
        for w in &windows {
            w.add_at(t, 1);
        }
    }
    let end = Timestamp::from_nanos(end);
    for (i, &(span, _)) in LEVELS.iter().enumerate() {
        let w = &windows[i];
        group.bench_function(BenchmarkId::new("window", i), |b| {
            b.iter(|| w.sum_at(black_box(end)))
        });
        group.bench_function(BenchmarkId::new("multi", i), |b| {
            b.iter(|| multi.sum_over_at(black_box(end), span))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_add_at, bench_sum_over);
criterion_main!(benches);
