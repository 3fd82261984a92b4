//! Per-key adds: `KeyedWindows` and `HotKeyDetector` against a concurrent
//! map of `AtomicU64` (no windows: `scc::HashIndex` and `DashMap`) and
//! governor's keyed limiter, on a Zipf-distributed stream over 1M keys and
//! on one hot key, at 1, 2, 4 and 8 threads sharing one instance.
//!
//! The hot-key group also runs one instance per thread (nothing shared):
//! the scaling ceiling of the machine at the time of the run, against which
//! the shared-instance numbers are read.
//!
//! Before the timed runs it prints the memory held per key (counted by a
//! global allocator wrapper) for each structure.

mod common;

use common::{bench_threads, config, THREADS};
use criterion::Criterion;
use governor::{Quota, RateLimiter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stripecount::{HotKeyDetector, KeyedWindows, ManualClock};
use stripecount_baselines::harness::Pool;
use stripecount_baselines::keyed::{AtomicMap, DashCounter};

/// Counts live heap bytes, to measure memory per key.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only
// counts sizes on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const KEYS: usize = 1_000_000;
const SAMPLES: usize = 1 << 21;
/// Adds are stamped 1 s into the clock's timeline (pure add cost).
const NOW: u64 = 1_000_000_000;

fn window() -> Duration {
    Duration::from_secs(10)
}

/// A Zipf(s = 1) stream over `KEYS` keys: inverse CDF by binary search.
fn zipf_stream() -> Arc<Vec<u64>> {
    let mut cdf = Vec::with_capacity(KEYS);
    let mut acc = 0.0f64;
    for i in 0..KEYS {
        acc += 1.0 / (i + 1) as f64;
        cdf.push(acc);
    }
    let mut rng = StdRng::seed_from_u64(42);
    Arc::new(
        (0..SAMPLES)
            .map(|_| {
                let u = rng.random::<f64>() * acc;
                cdf.partition_point(|&c| c < u) as u64
            })
            .collect(),
    )
}

/// Each thread walks the stream from its own offset.
#[inline]
fn key_at(keys: &[u64], t: usize, i: u64) -> u64 {
    keys[(t * 7919 * 64 + i as usize) & (SAMPLES - 1)]
}

fn per_key_bytes<T>(make: impl FnOnce() -> T, fill: impl Fn(&T, u64)) -> f64 {
    const N: u64 = 200_000;
    let before = LIVE.load(Ordering::Relaxed);
    let s = make();
    for k in 0..N {
        fill(&s, k);
    }
    let after = LIVE.load(Ordering::Relaxed);
    // Not dropped: maps with deferred reclamation would free it during a
    // later measurement.
    std::mem::forget(s);
    (after - before) as f64 / N as f64
}

fn memory_report() {
    let kw = per_key_bytes(
        || KeyedWindows::<u64, _>::with_clock(window(), 10, ManualClock::new()).unwrap(),
        |w, k| {
            w.add_at(&k, NOW, 1);
        },
    );
    let am = per_key_bytes(AtomicMap::<u64>::new, |m, k| {
        m.add(&k, 1);
    });
    let dm = per_key_bytes(DashCounter::<u64>::new, |m, k| {
        m.add(&k, 1);
    });
    let gv = per_key_bytes(
        || RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX)),
        |l, k| {
            let _ = l.check_key(&k);
        },
    );
    let w = KeyedWindows::<u64, _>::with_clock(window(), 10, ManualClock::new()).unwrap();
    w.add_at(&1, NOW, 1);
    w.add_at(&1, NOW + 1_000_000_000, 1);
    let window_bytes = w.key_memory_bytes(&1);
    println!("memory per key (u64 keys, 200k keys, heap bytes incl. the map):");
    println!("  KeyedWindows (10 slices): {kw:.0} B/key (a key with counts in several slices adds {window_bytes} B)");
    println!("  AtomicMap (scc HashIndex<u64, Arc<AtomicU64>>): {am:.0} B/key");
    println!("  DashMap<u64, AtomicU64>: {dm:.0} B/key");
    println!("  governor keyed limiter: {gv:.0} B/key");
}

fn keyed(c: &mut Criterion) {
    let keys = zipf_stream();
    for (group, hot) in [("keyed_zipf_1M", false), ("keyed_one_hot_key", true)] {
        let mut g = c.benchmark_group(group);
        let pick = move |keys: &[u64], t: usize, i: u64| if hot { 7 } else { key_at(keys, t, i) };
        // The Zipf runs measure maps that already hold every key (the
        // steady state), not the inserts of a warming map.
        let filled = move |add: &dyn Fn(u64)| {
            if !hot {
                (0..KEYS as u64).for_each(add);
            }
        };
        for threads in THREADS {
            let pool = Pool::new(threads);
            let kw =
                || KeyedWindows::<u64, _>::with_clock(window(), 10, ManualClock::new()).unwrap();
            let w = kw();
            filled(&|key| {
                w.add_at(&key, NOW, 1);
            });
            bench_threads(
                &mut g,
                &pool,
                "KeyedWindows::add_at",
                Arc::new((w, keys.clone())),
                move |s, t, i| {
                    black_box(s.0.add_at(&pick(&s.1, t, i), NOW, black_box(1)));
                },
            );
            if hot {
                // The ceiling: every thread its own instance (nothing
                // shared), measured in the same run.
                let own: Vec<_> = (0..threads).map(|_| kw()).collect();
                bench_threads(
                    &mut g,
                    &pool,
                    "KeyedWindows-per-thread(ideal)",
                    Arc::new((own, keys.clone())),
                    move |s, t, _| {
                        black_box(s.0[t].add_at(&7, NOW, black_box(1)));
                    },
                );
            }
            let w = kw();
            filled(&|key| {
                w.add_at(&key, NOW, 1);
            });
            bench_threads(
                &mut g,
                &pool,
                "KeyedWindows::add_and_sum_at",
                Arc::new((w, keys.clone())),
                move |s, t, i| {
                    black_box(s.0.add_and_sum_at(&pick(&s.1, t, i), NOW, black_box(1)));
                },
            );
            let d = HotKeyDetector::<u64, _>::with_clock(window(), 10, 1000, ManualClock::new())
                .unwrap();
            filled(&|key| {
                d.add_at(&key, NOW, 1);
            });
            bench_threads(
                &mut g,
                &pool,
                "HotKeyDetector::add_at",
                Arc::new((d, keys.clone())),
                move |s, t, i| {
                    black_box(s.0.add_at(&pick(&s.1, t, i), NOW, black_box(1)));
                },
            );
            let m = AtomicMap::<u64>::new();
            filled(&|key| {
                m.add(&key, 1);
            });
            bench_threads(
                &mut g,
                &pool,
                "AtomicMap(scc)",
                Arc::new((m, keys.clone())),
                move |s, t, i| {
                    black_box(s.0.add(&pick(&s.1, t, i), black_box(1)));
                },
            );
            let m = DashCounter::<u64>::new();
            filled(&|key| {
                m.add(&key, 1);
            });
            bench_threads(
                &mut g,
                &pool,
                "DashMap<AtomicU64>",
                Arc::new((m, keys.clone())),
                move |s, t, i| {
                    black_box(s.0.add(&pick(&s.1, t, i), black_box(1)));
                },
            );
            let l = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
            filled(&|key| {
                let _ = l.check_key(&key);
            });
            bench_threads(
                &mut g,
                &pool,
                "governor::keyed",
                Arc::new((l, keys.clone())),
                move |s, t, i| {
                    let _ = black_box(s.0.check_key(&pick(&s.1, t, i)));
                },
            );
        }
        g.finish();
    }
}

fn main() {
    memory_report();
    let mut c = config();
    keyed(&mut c);
    c.final_summary();
}
