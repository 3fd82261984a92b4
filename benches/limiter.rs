//! `try_acquire` on one shared limiter at 1, 2, 4 and 8 threads, in two
//! regimes: nearly everything admitted (a limit far above what the bench can
//! ask for in a window) and nearly everything refused (1 permit per window).
//! Also `try_acquire_decision` (the verdict with remaining / retry-after /
//! reset) and a two-limit `MultiLimiter` (the same per-second limit and a
//! per-minute one of 60 times it, 60 slices), against two governor limiters
//! checked one after the other (what governor users do; not atomic).
//!
//! Compared in the same run against governor (GCRA, `RateLimiter::direct`)
//! with the same permits per window, and a `Mutex`-guarded sliding window.
//! Clocks are matched: ours on `CoarseClock` vs governor on its coarse
//! `QuantaUpkeepClock` (both a cached load), and ours vs governor's default
//! both on governor's precise `QuantaClock` (TSC-based, like our default
//! `MonotonicClock` where the TSC is trusted).
//!
//! Run: `cargo bench --bench limiter -- --warm-up-time 1 --measurement-time 2`

mod common;

use common::{bench_threads, config, THREADS};
use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::{Clock as GovClock, QuantaClock, QuantaUpkeepClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use stripecount::{Clock, CoarseClock, FixedWindowLimiter, MultiLimiter, SlidingWindowLimiter};
use stripecount_baselines::harness::Pool;
use stripecount_baselines::limiters::MutexLimiter;

const WINDOW: Duration = Duration::from_secs(1);
const SLICES: usize = 10;

type Governor<C> =
    RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as governor::clock::Clock>::Instant>>;

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
    fn now(&self) -> u64 {
        self.clock.now().duration_since(self.origin).as_u64()
    }
}

/// A Mutex-guarded sliding window reading the given clock per request.
struct MutexOn<C> {
    lim: MutexLimiter,
    clock: C,
}

fn regime(c: &mut Criterion, name: &str, limit: u32) {
    let mut g = c.benchmark_group(format!("limiter_{name}"));
    let quota = Quota::per_second(NonZeroU32::new(limit).unwrap());
    for threads in THREADS {
        let pool = Pool::new(threads);
        fn sliding<C: Clock>(limit: u32, clock: C) -> Arc<SlidingWindowLimiter<C>> {
            Arc::new(
                SlidingWindowLimiter::with_clock(u64::from(limit), WINDOW, SLICES, clock).unwrap(),
            )
        }
        bench_threads(
            &mut g,
            &pool,
            "sliding/coarse",
            sliding(limit, CoarseClock::new()),
            |l, _, _| {
                black_box(l.try_acquire());
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "sliding/quanta",
            sliding(limit, QuantaTime::new()),
            |l, _, _| {
                black_box(l.try_acquire());
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "sliding-decision/coarse",
            sliding(limit, CoarseClock::new()),
            |l, _, _| {
                black_box(l.try_acquire_decision(1));
            },
        );
        let two = [
            (u64::from(limit), WINDOW, SLICES),
            (60 * u64::from(limit), 60 * WINDOW, 60),
        ];
        let multi = MultiLimiter::with_clock(&two, CoarseClock::new()).unwrap();
        bench_threads(
            &mut g,
            &pool,
            "multi2/coarse",
            Arc::new(multi),
            |l, _, _| {
                black_box(l.try_acquire());
            },
        );
        bench_threads(
            &mut g,
            &pool,
            "fixed/coarse",
            Arc::new(
                FixedWindowLimiter::with_clock(u64::from(limit), WINDOW, CoarseClock::new())
                    .unwrap(),
            ),
            |l, _, _| {
                black_box(l.try_acquire());
            },
        );
        let upkeep =
            QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep clock");
        let gov_coarse: Arc<Governor<QuantaUpkeepClock>> =
            Arc::new(RateLimiter::direct_with_clock(quota, upkeep));
        bench_threads(&mut g, &pool, "governor/upkeep", gov_coarse, |l, _, _| {
            black_box(l.check().is_ok());
        });
        let per_minute = Quota::per_minute(NonZeroU32::new(limit.saturating_mul(60)).unwrap());
        let upkeep =
            QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("upkeep clock");
        let gov_two: Arc<[Governor<QuantaUpkeepClock>; 2]> = Arc::new([
            RateLimiter::direct_with_clock(quota, upkeep.clone()),
            RateLimiter::direct_with_clock(per_minute, upkeep),
        ]);
        bench_threads(&mut g, &pool, "governor2/upkeep", gov_two, |l, _, _| {
            black_box(l[0].check().is_ok() && l[1].check().is_ok());
        });
        let gov: Arc<Governor<QuantaClock>> = Arc::new(RateLimiter::direct(quota));
        bench_threads(&mut g, &pool, "governor/quanta", gov, |l, _, _| {
            black_box(l.check().is_ok());
        });
        let mutex = Arc::new(MutexOn {
            lim: MutexLimiter::new(u64::from(limit), 100_000_000, SLICES),
            clock: CoarseClock::new(),
        });
        bench_threads(&mut g, &pool, "mutex/coarse", mutex, |m, _, _| {
            black_box(m.lim.try_acquire_at(m.clock.now(), 1));
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

criterion_group! { name = benches; config = config(); targets = limiters }
criterion_main!(benches);
