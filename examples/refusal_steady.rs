//! Refusals of one shared limiter in the steady state, one thread: the
//! contention report's refusing quota (1000 permits a second, in 10 slices
//! of 100 ms), spent at the start of every window, then refused until the
//! window has moved on. Time advances 1 ms every 4096 requests and is passed
//! to the `_at` methods (governor reads a fake clock advanced with it), so
//! a run is the same instructions every time: the harness for
//! `valgrind --tool=callgrind --toggle-collect='refusal_steady::timed*'`
//! (scripts/callgrind-limiter.sh, BENCHMARKS.md). Prints ns per request.
//!
//! ```sh
//! cargo run --release --example refusal_steady -- rd 20000000 8000000
//! ```
//! Modes: `rt`: `RateLimiter::try_acquire_at`; `rd`: `RateLimiter::decide_at`,
//! the verdict read; `rdt`: the same, and the retry time read as a refusal's
//! response does (`Retry-After`); `md`, `mdt`: `MultiLimiter::decide_at` (the
//! same quota and 60 000 a minute in 60 slices), as `rd` and `rdt`; `kd`,
//! `kdt`: `KeyedLimiter::decide_at` on one key; `gv`: governor's direct
//! limiter's `check` (GCRA, 1000 a second), whose refusal carries the
//! earliest time it would allow (`NotUntil`, read lazily); `gvt`: the same,
//! and a refusal's wait read from its `NotUntil` at the clock's time (what
//! a governor user's `Retry-After` costs). `LIMIT=n` sets
//! the permits a second (default 1000): with `LIMIT=1`, as the criterion
//! rows, every slice's count fits the inline history, where 1000 needs a
//! block.
use governor::clock::FakeRelativeClock;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, MultiLimiter, Quota, RateLimiter, Timestamp};

const START: u64 = 1_000_000_000;
const OPS_PER_MS: u64 = 4096;

fn now_of(i: u64) -> Timestamp {
    Timestamp::from_nanos(START + (i / OPS_PER_MS) * 1_000_000)
}

/// `ops` requests from op `from` on; `tick(i)` is called when op `i` is
/// the first of a new millisecond.
#[inline(always)]
fn requests(from: u64, ops: u64, tick: &impl Fn(u64), req: &impl Fn(Timestamp) -> bool) -> u64 {
    let mut granted = 0;
    for i in from..from + ops {
        if i % OPS_PER_MS == 0 {
            tick(i);
        }
        granted += u64::from(req(now_of(i)));
    }
    granted
}

/// [`requests`], the untimed warm-up (not counted by callgrind).
#[inline(never)]
fn warm_up(ops: u64, tick: &impl Fn(u64), req: &impl Fn(Timestamp) -> bool) -> u64 {
    requests(0, ops, tick, req)
}

/// [`requests`], timed (and counted by callgrind).
#[inline(never)]
fn timed(from: u64, ops: u64, tick: &impl Fn(u64), req: &impl Fn(Timestamp) -> bool) -> u64 {
    requests(from, ops, tick, req)
}

// Every request is a call of one of these, never inlined into the loop, so
// that what a build inlines into the loop (which varies with unrelated code)
// does not move the counts.

type Direct = RateLimiter<ManualClock>;
type Governor = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

#[inline(never)]
fn try_acquire(l: &Direct, now: Timestamp) -> bool {
    l.try_acquire_at(now, 1)
}

#[inline(never)]
fn decide(l: &Direct, now: Timestamp, retry: bool) -> bool {
    verdict(&l.decide_at(now, 1), retry)
}

#[inline(never)]
fn decide_multi(l: &MultiLimiter<ManualClock>, now: Timestamp, retry: bool) -> bool {
    verdict(&l.decide_at(now, 1), retry)
}

#[inline(never)]
fn decide_keyed(l: &KeyedLimiter<u64, ManualClock>, now: Timestamp, retry: bool) -> bool {
    verdict(&l.decide_at(&7, now, 1), retry)
}

#[inline(never)]
fn check(l: &Governor) -> bool {
    l.check().is_ok()
}

/// [`check`], and a refusal's wait read, as a `Retry-After` needs.
#[inline(never)]
fn check_wait(l: &Governor) -> bool {
    match l.check() {
        Ok(()) => true,
        Err(not_until) => {
            black_box(not_until.wait_time_from(governor::clock::Clock::now(l.clock())));
            false
        }
    }
}

/// Whether `d` granted; with `retry`, a refusal's retry time is read, as a
/// response's `Retry-After` does.
#[inline(always)]
fn verdict(d: &stripecount::Decision, retry: bool) -> bool {
    if retry && !d.is_granted() {
        black_box(d.retry_after());
    }
    d.is_granted()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(|s| s.as_str()).unwrap_or("rd");
    let modes = ["rt", "rd", "rdt", "md", "mdt", "kd", "kdt", "gv", "gvt"];
    assert!(modes.contains(&which), "{}", modes.join(" | "));
    let ops: u64 = args.get(2).map_or(20_000_000, |s| s.parse().unwrap());
    let warm: u64 = args.get(3).map_or(8_000_000, |s| s.parse().unwrap());
    let limit: u64 = std::env::var("LIMIT").map_or(1000, |v| v.parse().unwrap());
    let quota = Quota::per(limit, Duration::from_secs(1)).slices(10);
    let per_minute = Quota::per(60 * limit, Duration::from_secs(60)).slices(60);
    // Whether to read the retry time of a refusal, as a response does.
    let retry = which.ends_with('t') && which != "rt";
    macro_rules! run {
        ($tick:expr, $req:expr) => {{
            let (tick, req) = ($tick, $req);
            warm_up(warm, &tick, &req);
            let t = Instant::now();
            let granted = timed(warm, ops, &tick, &req);
            let el = t.elapsed();
            println!(
                "{which}: {:.2} ns/request, {granted} of {ops} granted",
                el.as_nanos() as f64 / ops as f64
            );
        }};
    }
    let no_tick = |_: u64| {};
    match which {
        "rt" | "rd" | "rdt" => {
            let l = RateLimiter::builder(quota)
                .clock(ManualClock::new())
                .build()
                .unwrap();
            if which == "rt" {
                run!(no_tick, |now| try_acquire(&l, now))
            } else {
                run!(no_tick, |now| decide(&l, now, retry))
            }
        }
        "md" | "mdt" => {
            let l = MultiLimiter::builder([quota, per_minute])
                .clock(ManualClock::new())
                .build()
                .unwrap();
            run!(no_tick, |now| decide_multi(&l, now, retry))
        }
        "kd" | "kdt" => {
            let l = KeyedLimiter::<u64, _>::builder(quota)
                .clock(ManualClock::new())
                .build()
                .unwrap();
            run!(no_tick, |now| decide_keyed(&l, now, retry))
        }
        "gv" | "gvt" => {
            let clock = FakeRelativeClock::default();
            let per_second = NonZeroU32::new(limit as u32).unwrap();
            let l: Governor = governor::RateLimiter::direct_with_clock(
                governor::Quota::per_second(per_second),
                clock.clone(),
            );
            // The fake clock moves with the ops' time (1 ms a tick).
            let tick = |i: u64| {
                if i > 0 {
                    clock.advance(Duration::from_millis(1));
                }
            };
            if retry {
                run!(tick, |_| check_wait(&l))
            } else {
                run!(tick, |_| check(&l))
            }
        }
        _ => unreachable!(),
    }
}
