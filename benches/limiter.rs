//! `try_acquire` on one shared limiter at 1, 2, 4 and 8 threads, in two
//! regimes: nearly everything admitted (a limit far above what the bench can
//! ask for in a window) and nearly everything refused (1 permit per window).
//! Also `decide` (the `Decision`, with remaining / retry-after / reset; a
//! refusal computes its times when they are read: `sliding-decision-retry`
//! reads the retry time, as a refusal's `Retry-After` does, against
//! `governor-retry`, a refusal's wait read from governor's `NotUntil`) and
//! a two-limit `MultiLimiter` (the same per-second limit and a per-minute
//! one of 60 times it, 60 slices), against two governor limiters checked
//! one after the other (what governor users do; not atomic). The `sliding`
//! rows are a `RateLimiter` of 10 slices, the `fixed` ones a `RateLimiter`
//! of one slice (a fixed window).
//!
//! Compared in the same run against governor (GCRA,
//! `governor::RateLimiter::direct`) with the same permits per window, and a
//! `Mutex`-guarded sliding window.
//! Clocks are matched: ours on `CoarseClock` vs governor on its coarse
//! `QuantaUpkeepClock` (both a cached load), and ours vs governor's default
//! both on governor's precise `QuantaClock` (TSC-based, like our default
//! `MonotonicClock` where the TSC is trusted).
//!
//! Per key: `KeyedLimiter` against governor's keyed limiter
//! (`check_key`, GCRA in a `DashMap`, on its coarse `QuantaUpkeepClock`),
//! admitting and refusing (1 permit per window), at 1 and 2 threads, on the
//! per-key stream (`stripecount_baselines::zipf`: Zipf(1.0) over 1M `u64`
//! keys, every key inserted by one untimed pass, each thread walking the
//! stream from its own offset; time advancing 1 ms every 4096 requests,
//! passed to `try_acquire_at`; 10 s windows of 10 slices, governor with the
//! same permits per 10 s) and on one hot key. `keyed-fixed-zipf` is ours
//! with one slice (a fixed window per key: no history at all; the sliding
//! rows keep a key's small counts inline, `src/limiter/inline.rs`);
//! `keyed-zipf-1s` is ours on real time (`CoarseClock`), 1 s in 10 slices,
//! where nearly every request on a warm key rolls its state and keys idle
//! for a second are evicted (ours evicts as it goes, governor never does).
//! Before the timed runs it prints heap bytes per key for the 1M keys each
//! acquired once, both limiters, counted by a global allocator wrapper
//! (`counting_alloc.rs`).
//!
//! Run: `cargo bench --bench limiter -- --warm-up-time 1 --measurement-time 2`
//! (keyed rows only: `... --bench limiter -- keyed_limiter ...`)

mod common;
mod counting_alloc;

use common::{bench_threads, config, next_index, THREADS};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use governor::clock::{Clock as GovClock, QuantaClock, QuantaUpkeepClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota as GovQuota, RateLimiter as GovRateLimiter};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::{CoarseClock, ManualClock};
use stripecount::{Clock, KeyedLimiter, MultiLimiter, Quota, RateLimiter, Timestamp};
use stripecount_baselines::harness::Pool;
use stripecount_baselines::limiters::MutexLimiter;
use stripecount_baselines::zipf::ZipfStream;

const WINDOW: Duration = Duration::from_secs(1);
const SLICES: usize = 10;

type Governor<C> = GovRateLimiter<
    NotKeyed,
    InMemoryState,
    C,
    NoOpMiddleware<<C as governor::clock::Clock>::Instant>,
>;

/// governor's own precise clock (quanta, TSC-based) as a stripecount
/// [`Clock`], so both limiters can be compared on the same clock.
struct QuantaTime {
    clock: QuantaClock,
    origin: <QuantaClock as GovClock>::Instant,
}

impl QuantaTime {
    fn new() -> Self {
        let clock = QuantaClock::default();
        let origin = clock.now();
        QuantaTime { clock, origin }
    }
}

impl Clock for QuantaTime {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.clock.now().duration_since(self.origin).as_u64())
    }
}

/// A Mutex-guarded sliding window reading the given clock per request.
struct MutexOn<C> {
    lim: MutexLimiter,
    clock: C,
}

fn regime(c: &mut Criterion, name: &str, limit: u32) {
    let mut g = c.benchmark_group(format!("limiter_{name}"));
    let quota = GovQuota::per_second(NonZeroU32::new(limit).unwrap());
    for threads in THREADS {
        let pool = Pool::new(threads);
        fn ours<C: Clock>(quota: Quota, clock: C) -> Arc<RateLimiter<C>> {
            Arc::new(RateLimiter::builder(quota).clock(clock).build().unwrap())
        }
        let sliding = Quota::per(u64::from(limit), WINDOW).slices(SLICES);
        let fixed = sliding.slices(1);
        bench_threads(
            &mut g,
            &pool,
            "sliding/coarse",
            ours(sliding, CoarseClock::new()),
            |l, _, _| {
                black_box(l.try_acquire(1));
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "sliding/quanta",
            ours(sliding, QuantaTime::new()),
            |l, _, _| {
                black_box(l.try_acquire(1));
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "sliding-decision/coarse",
            ours(sliding, CoarseClock::new()),
            |l, _, _| {
                black_box(l.decide(1));
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "sliding-decision-retry/coarse",
            ours(sliding, CoarseClock::new()),
            |l, _, _| {
                let d = l.decide(1);
                black_box((d.is_granted(), d.retry_after()));
            },
        );
        let two = [
            sliding,
            Quota::per(60 * u64::from(limit), 60 * WINDOW).slices(60),
        ];
        let multi = MultiLimiter::builder(two)
            .clock(CoarseClock::new())
            .build()
            .unwrap();
        bench_threads(
            &mut g,
            &pool,
            "multi2/coarse",
            Arc::new(multi),
            |l, _, _| {
                black_box(l.try_acquire(1));
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "fixed/coarse",
            ours(fixed, CoarseClock::new()),
            |l, _, _| {
                black_box(l.try_acquire(1));
            },
        );
        let upkeep =
            QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep clock");
        let gov_coarse: Arc<Governor<QuantaUpkeepClock>> =
            Arc::new(GovRateLimiter::direct_with_clock(quota, upkeep));
        bench_threads(&mut g, &pool, "governor/upkeep", gov_coarse, |l, _, _| {
            black_box(l.check().is_ok());
        });
        // A refusal's wait read, as `sliding-decision-retry` reads its
        // retry time (a `Retry-After`).
        let upkeep =
            QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep clock");
        let gov_retry: Arc<Governor<QuantaUpkeepClock>> =
            Arc::new(GovRateLimiter::direct_with_clock(quota, upkeep));
        bench_threads(
            &mut g,
            &pool,
            "governor-retry/upkeep",
            gov_retry,
            |l, _, _| {
                let wait = l.check().err().map(|nu| nu.wait_time_from(l.clock().now()));
                black_box(wait);
            },
        );
        let per_minute = GovQuota::per_minute(NonZeroU32::new(limit.saturating_mul(60)).unwrap());
        let upkeep =
            QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep clock");
        let gov_two: Arc<[Governor<QuantaUpkeepClock>; 2]> = Arc::new([
            GovRateLimiter::direct_with_clock(quota, upkeep.clone()),
            GovRateLimiter::direct_with_clock(per_minute, upkeep),
        ]);
        bench_threads(&mut g, &pool, "governor2/upkeep", gov_two, |l, _, _| {
            black_box(l[0].check().is_ok() && l[1].check().is_ok());
        });
        let gov: Arc<Governor<QuantaClock>> = Arc::new(GovRateLimiter::direct(quota));
        bench_threads(&mut g, &pool, "governor/quanta", gov, |l, _, _| {
            black_box(l.check().is_ok());
        });
        let mutex = Arc::new(MutexOn {
            lim: MutexLimiter::new(u64::from(limit), 100_000_000, SLICES),
            clock: CoarseClock::new(),
        });
        bench_threads(&mut g, &pool, "mutex/coarse", mutex, |m, _, _| {
            black_box(m.lim.try_acquire_at(m.clock.now().as_nanos(), 1));
        });
    }
    g.finish();
}

fn limiters(c: &mut Criterion) {
    // Admit: ~4.3e9 permits per second, far more than the bench asks for.
    regime(c, "admit", u32::MAX);
    // Refuse: one permit per second; every later request is refused.
    regime(c, "refuse", 1);
}

type GovernorKeyed<C> = GovRateLimiter<
    u64,
    DashMapStateStore<u64>,
    C,
    NoOpMiddleware<<C as governor::clock::Clock>::Instant>,
>;

/// The key of the one-hot-key rows.
const HOT_KEY: u64 = 7;
/// The per-key rows' window (the per-key stream's: 10 s in 10 slices).
const KEYED_WINDOW: Duration = Duration::from_secs(10);
/// Time starts 1 s into the clock's timeline (nanoseconds).
const START_NS: u64 = 1_000_000_000;
/// [`START_NS`] as a time.
const START: Timestamp = Timestamp::from_nanos(START_NS);
/// Requests per millisecond of time (the per-key stream's).
const OPS_PER_MS: u64 = 4096;

/// The time of op `i`: 1 ms more every [`OPS_PER_MS`] ops.
#[inline(always)]
fn now_of(i: u64) -> Timestamp {
    Timestamp::from_nanos(START_NS + (i / OPS_PER_MS) * 1_000_000)
}

/// Ours on the op's time: `limit` per 10 s in `slices` slices.
fn ours_at(limit: u32, slices: usize) -> KeyedLimiter<u64, ManualClock> {
    KeyedLimiter::builder(Quota::per(u64::from(limit), KEYED_WINDOW).slices(slices))
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// governor with the same permits per 10 s, on its coarse clock.
fn governor_keyed(limit: u32) -> GovernorKeyed<QuantaUpkeepClock> {
    let quota = if limit == u32::MAX {
        GovQuota::per_second(NonZeroU32::MAX)
    } else {
        let per = KEYED_WINDOW / limit;
        GovQuota::with_period(per)
            .unwrap()
            .allow_burst(NonZeroU32::new(limit).unwrap())
    };
    let upkeep = QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep clock");
    GovRateLimiter::new(quota, DashMapStateStore::default(), upkeep)
}

/// A Zipf row: every key inserted by one untimed pass at the time of the
/// row's first op (`next_index`), then `op(state, key, i)` on the stream
/// from each thread's offset. Filled at index 0 instead, ours saw every
/// key's window expire before the first timed op (the earlier rows' ops
/// advance the time; governor's clock is real time), and the sweep evicted
/// keys during the measurement that governor never evicts (BENCHMARKS.md).
fn zipf_row<S: Send + Sync + 'static>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    pool: &Pool,
    z: &Arc<ZipfStream>,
    name: &str,
    state: S,
    op: fn(&S, u64, u64),
) {
    let threads = pool.threads();
    // Thread `t` starts at `stride * t` (`ZipfStream::offset`), computed
    // once here: `offset` divides, and a 64-bit division in every timed
    // op cost ~10 ns a request in a criterion-shaped loop of `KeyedLimiter`
    // (BENCHMARKS.md).
    let stride = z.offset(1, threads);
    let at = next_index();
    for k in z.all_keys() {
        op(&state, k, at);
    }
    let state = Arc::new((state, z.clone()));
    bench_threads(g, pool, name, state, move |s, t, i| {
        let z = &s.1;
        op(&s.0, z.key(stride * t + i as usize), i);
    });
}

/// The per-key rows of one regime (see the module docs).
fn keyed_regime(c: &mut Criterion, z: &Arc<ZipfStream>, name: &str, limit: u32) {
    let mut g = c.benchmark_group(format!("keyed_limiter_{name}"));
    for threads in [1, 2] {
        let pool = Pool::new(threads);
        let at = |l: &KeyedLimiter<u64, ManualClock>, k: u64, i: u64| {
            black_box(l.try_acquire_at(&k, now_of(i), 1));
        };
        zipf_row(&mut g, &pool, z, "keyed-zipf/at", ours_at(limit, 10), at);
        zipf_row(
            &mut g,
            &pool,
            z,
            "keyed-fixed-zipf/at",
            ours_at(limit, 1),
            at,
        );
        let gov = |l: &GovernorKeyed<QuantaUpkeepClock>, k: u64, _: u64| {
            black_box(l.check_key(&k).is_ok());
        };
        zipf_row(
            &mut g,
            &pool,
            z,
            "governor-zipf/upkeep",
            governor_keyed(limit),
            gov,
        );
        // Real time, 1 s in 10 slices of 100 ms: nearly every request on a
        // warm key is its first in its slice (a roll), and keys idle for a
        // second are evicted and inserted again.
        let coarse = KeyedLimiter::builder(Quota::per(u64::from(limit), WINDOW).slices(SLICES))
            .clock(CoarseClock::new())
            .build()
            .unwrap();
        let now = |l: &KeyedLimiter<u64, CoarseClock>, k: u64, _: u64| {
            black_box(l.try_acquire(&k, 1));
        };
        zipf_row(&mut g, &pool, z, "keyed-zipf-1s/coarse", coarse, now);
        let hot = Arc::new(ours_at(limit, 10));
        bench_threads(&mut g, &pool, "keyed-hot/at", hot, |l, _, i| {
            black_box(l.try_acquire_at(&HOT_KEY, now_of(i), 1));
        });
        let gov = Arc::new(governor_keyed(limit));
        bench_threads(&mut g, &pool, "governor-hot/upkeep", gov, |l, _, _| {
            black_box(l.check_key(&HOT_KEY).is_ok());
        });
    }
    g.finish();
}

/// Heap bytes per key for every key of the distribution acquired once
/// (map included), for both limiters; and what a key with grants in every
/// slice of its window adds to ours: nothing while each slice's count fits
/// the inline history (31 with 10 slices), a history block once one does
/// not.
fn memory_report(z: &ZipfStream) {
    let keys = z.all_keys().count() as f64;
    let before = counting_alloc::live_bytes();
    let lim = ours_at(1_000_000, 10);
    for k in z.all_keys() {
        lim.try_acquire_at(&k, START, 1);
    }
    let ours_bytes = (counting_alloc::live_bytes() - before) as f64 / keys;
    drop(lim);
    // Two limits (10 s in 10 slices, a day in 24): each key's state starts
    // quiet, with no block until a roll records a count.
    let before = counting_alloc::live_bytes();
    let day = Duration::from_secs(86_400);
    let two = KeyedLimiter::builder([
        Quota::per(1_000_000, KEYED_WINDOW).slices(10),
        Quota::per(1_000_000, day).slices(24),
    ])
    .clock(ManualClock::new())
    .build()
    .unwrap();
    for k in z.all_keys() {
        two.try_acquire_at(&k, START, 1);
    }
    let two_bytes = (counting_alloc::live_bytes() - before) as f64 / keys;
    for k in z.all_keys() {
        two.try_acquire_at(&k, START + Duration::from_secs(1), 1);
    }
    let two_later = (counting_alloc::live_bytes() - before) as f64 / keys;
    drop(two);
    let before = counting_alloc::live_bytes();
    let gov: governor::DefaultKeyedRateLimiter<u64> =
        GovRateLimiter::keyed(GovQuota::per_second(NonZeroU32::MAX));
    for k in z.all_keys() {
        let _ = gov.check_key(&k);
    }
    let gov_bytes = (counting_alloc::live_bytes() - before) as f64 / keys;
    drop(gov);
    let lim = ours_at(100, 10);
    lim.try_acquire_at(&HOT_KEY, START, 1);
    let one = lim.memory_bytes();
    for s in 1..10 {
        lim.try_acquire_at(&HOT_KEY, START + Duration::from_secs(s), 1);
    }
    let all = lim.memory_bytes() - one;
    let big = HOT_KEY + 1;
    lim.try_acquire_at(&big, START, 32);
    let inline = lim.memory_bytes();
    lim.try_acquire_at(&big, START + Duration::from_secs(1), 1); // the roll spills
    let spilled = lim.memory_bytes() - inline;
    println!("heap bytes per key, 1M u64 keys each acquired once (map included):");
    println!("  KeyedLimiter (10 s / 10 slices): {ours_bytes:.1} B/key; a key with grants in all 10 slices: + {all} B; with 32 in one slice: + {spilled} B");
    println!("  KeyedLimiter, two limits (10 s / 10 slices and 1 day / 24): {two_bytes:.1} B/key; after a grant in a second slice: {two_later:.1} B/key");
    println!("  governor keyed limiter (DashMap): {gov_bytes:.1} B/key");
}

fn keyed(c: &mut Criterion) {
    let z = Arc::new(ZipfStream::new());
    memory_report(&z);
    keyed_regime(c, &z, "admit", u32::MAX);
    keyed_regime(c, &z, "refuse", 1);
}

criterion_group! { name = benches; config = config(); targets = limiters, keyed }
criterion_main!(benches);
