//! Per-key adds in the steady state, one thread: the benchmarks' Zipf
//! stream (`stripecount_baselines::zipf`), keys pre-inserted, then `warm` untimed
//! adds (40M = 10 slices of 10 s windows, so every warm key has counts in
//! the whole window), then `ops` timed adds, time advancing 1 ms every 4096
//! adds. Prints ns per add. Also the harness for `valgrind --tool=callgrind
//! --toggle-collect='keyed_steady::timed*'` (BENCHMARKS.md, per-key
//! engine).
//!
//! ```sh
//! cargo run --release --example keyed_steady -- kw 20000000 40000000 [threads]
//! ```
//! With `threads` (default 1), that many threads share the structure after
//! the warm-up, each walking the stream from its own offset at the same
//! times (as `benches/keyed.rs` does), `ops` adds each.
//! `kw`: `KeyedWindows::add_at`; `hk`: `HotKeyDetector::add_at`; `dm`: a
//! `DashMap<u64, AtomicU64>`; `gv`: governor's keyed limiter (`gvu`: on
//! its coarse upkeep clock, as the criterion rows); `kl`:
//! `KeyedLimiter::try_acquire_at` (limit `u32::MAX`, as the admitting rows
//! of `benches/limiter.rs`); `klr`, `gvr` and `gvur`: the refusing rows'
//! limiters (1 permit per window). `WSEC=n` makes the windows `n` s long
//! (default 10, in 10 slices): with `WSEC=100000` no timed request is the
//! first of its key in a new slice, so none rolls, and no sweep step
//! falls in the run (to measure the share of a `kl` request the roll and
//! the sweep take together: BENCHMARKS.md, per-key limits).
//! With `HOT=1` every timed op is on one key among the pre-inserted
//! ones; with `HOT=only` the structure holds that key alone, as in the
//! benches' one-hot-key rows (warm-up ops are on it too;
//! `--toggle-collect='keyed_steady::timed_hot*'`).
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, KeyedLimiter, KeyedWindows, Quota, Timestamp};
use stripecount_baselines::keyed::DashCounter;
use stripecount_baselines::zipf::ZipfStream;

const START: u64 = 1_000_000_000;
fn now_of(i: u64) -> Timestamp {
    Timestamp::from_nanos(START + (i / 4096) * 1_000_000)
}

#[inline(never)]
fn timed(z: &ZipfStream, from: usize, warm: u64, ops: u64, add: &impl Fn(u64, Timestamp)) {
    for i in warm..warm + ops {
        add(z.key(from + i as usize), now_of(i));
    }
}

/// One hot key instead of the stream (`HOT=1` or `HOT=only`).
#[inline(never)]
fn timed_hot(warm: u64, ops: u64, add: &impl Fn(u64, Timestamp)) {
    for i in warm..warm + ops {
        add(black_box(7), now_of(i));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(|s| s.as_str()).unwrap_or("kw");
    assert!(
        ["kw", "hk", "dm", "gv", "gvr", "gvu", "gvur", "kl", "klr"].contains(&which),
        "kw | hk | dm | gv | gvr | gvu | gvur | kl | klr"
    );
    let hot = std::env::var_os("HOT").is_some_and(|v| v == "1" || v == "only");
    // `HOT=only`: the structure holds the hot key alone (criterion's
    // one-hot-key rows); `HOT=1` pre-inserts every key first.
    let hot_only = std::env::var_os("HOT").is_some_and(|v| v == "only");
    let ops: u64 = args
        .get(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(20_000_000);
    let warm: u64 = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(0);
    let threads: usize = args.get(4).map(|s| s.parse().unwrap()).unwrap_or(1);
    let z = ZipfStream::new();
    let w = Duration::from_secs(
        std::env::var("WSEC")
            .ok()
            .map_or(10, |v| v.parse().unwrap()),
    );
    // The refusing modes (`klr`, `gvr`, `gvur`): one permit per window;
    // the others admit everything.
    let refusing = which.ends_with('r');
    let gov_quota = || {
        if refusing {
            governor::Quota::with_period(w).unwrap()
        } else {
            governor::Quota::per_second(NonZeroU32::MAX)
        }
    };
    macro_rules! run {
        ($add:expr) => {{
            let add = $add;
            if !hot_only {
                for k in z.all_keys() {
                    add(k, Timestamp::from_nanos(START));
                }
            }
            for i in 0..warm {
                add(if hot_only { 7 } else { z.key(i as usize) }, now_of(i));
            }
            let t = Instant::now();
            std::thread::scope(|sc| {
                for th in 0..threads {
                    let (z, add) = (&z, &add);
                    sc.spawn(move || {
                        if hot {
                            timed_hot(warm, ops, add)
                        } else {
                            timed(z, z.offset(th, threads), warm, ops, add)
                        }
                    });
                }
            });
            let el = t.elapsed();
            let all = ops * threads as u64;
            println!(
                "{which} x{threads}: {:.1} ns/op, {:.1} M adds/s",
                el.as_nanos() as f64 / all as f64,
                all as f64 / el.as_secs_f64() / 1e6
            );
        }};
    }
    match which {
        "kw" => {
            let s = KeyedWindows::builder(w, 10)
                .clock(ManualClock::new())
                .build()
                .unwrap();
            run!(|k: u64, now: Timestamp| {
                black_box(s.add_at(&k, now, 1));
            })
        }
        "hk" => {
            let s = HotKeyDetector::builder(w, 10, 1000)
                .clock(ManualClock::new())
                .build()
                .unwrap();
            run!(|k: u64, now: Timestamp| {
                black_box(s.add_at(&k, now, 1));
            })
        }
        "dm" => {
            let s = DashCounter::<u64>::new();
            run!(|k: u64, _now: Timestamp| {
                black_box(s.add(&k, 1));
            })
        }
        "gv" | "gvr" => {
            let s = governor::DefaultKeyedRateLimiter::<u64>::keyed(gov_quota());
            run!(|k: u64, _now: Timestamp| {
                let _ = black_box(s.check_key(&k));
            })
        }
        "gvu" | "gvur" => {
            // As the criterion rows: governor on its coarse upkeep clock.
            let clock = governor::clock::QuantaUpkeepClock::from_interval(Duration::from_millis(1))
                .expect("upkeep clock");
            let s: governor::RateLimiter<
                u64,
                governor::state::keyed::DashMapStateStore<u64>,
                governor::clock::QuantaUpkeepClock,
                governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
            > = governor::RateLimiter::new(
                gov_quota(),
                governor::state::keyed::DashMapStateStore::<u64>::default(),
                clock,
            );
            run!(|k: u64, _now: Timestamp| {
                let _ = black_box(s.check_key(&k));
            })
        }
        "kl" | "klr" => {
            let limit = if refusing { 1 } else { u64::from(u32::MAX) };
            let s = KeyedLimiter::builder(Quota::per(limit, w).slices(10))
                .clock(ManualClock::new())
                .build()
                .unwrap();
            run!(|k: u64, now: Timestamp| {
                black_box(s.try_acquire_at(&k, now, 1));
            })
        }
        _ => panic!("which?"),
    }
}
