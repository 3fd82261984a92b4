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
//! Batches: `kwb`, `hkb` and `klb` are `kw`, `hk` and `kl` through
//! `add_many_at` / `try_acquire_many_at`, `BATCH` keys a call (default 32;
//! a call's time is its first key's; callgrind:
//! `--toggle-collect='keyed_steady::timed_batch*'`). Hashers: each
//! structure on its library's default, unless `HASH=sip` (std's
//! `RandomState`, SipHash-1-3) or `HASH=fold` (stripecount's default,
//! foldhash) puts every structure of the run on that one. `THRESHOLD=n`:
//! the detector's threshold (default 1000, which the stream's ~2,800
//! most frequent keys reach; a threshold no key reaches measures the
//! detector on keys far from it).
//! With `HOT=1` every timed op is on one key among the pre-inserted
//! ones; with `HOT=only` the structure holds that key alone, as in the
//! benches' one-hot-key rows (warm-up ops are on it too;
//! `--toggle-collect='keyed_steady::timed_hot*'`).
use std::hash::BuildHasher;
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

/// The batch modes' timed loop: `batch` keys a call, at the time of its
/// first.
#[inline(never)]
fn timed_batch(
    z: &ZipfStream,
    from: usize,
    warm: u64,
    ops: u64,
    batch: usize,
    add: &impl Fn(&[u64], Timestamp),
) {
    let mut keys = vec![0; batch];
    let mut i = warm;
    while i < warm + ops {
        for (j, k) in keys.iter_mut().enumerate() {
            *k = z.key(from + i as usize + j);
        }
        add(&keys, now_of(i));
        i += batch as u64;
    }
}

/// One hot key instead of the stream (`HOT=1` or `HOT=only`).
#[inline(never)]
fn timed_hot(warm: u64, ops: u64, add: &impl Fn(u64, Timestamp)) {
    for i in warm..warm + ops {
        add(black_box(7), now_of(i));
    }
}

const MODES: [&str; 12] = [
    "kw", "hk", "dm", "gv", "gvr", "gvu", "gvur", "kl", "klr", "kwb", "hkb", "klb",
];

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "kw".into());
    assert!(MODES.contains(&which.as_str()), "{}", MODES.join(" | "));
    match std::env::var("HASH").as_deref() {
        Ok("sip") => run(&which, Some(std::collections::hash_map::RandomState::new())),
        Ok("fold") => run(&which, Some(stripecount::hash::RandomState::new())),
        Ok(h) => panic!("HASH={h}: sip | fold"),
        Err(_) => run(&which, None::<stripecount::hash::RandomState>),
    }
}

/// Mode `which`, every structure hashing with `hasher`, or each with its
/// library's default (`None`).
fn run<H: BuildHasher + Clone + Default + Send + Sync + 'static>(which: &str, hasher: Option<H>) {
    let args: Vec<String> = std::env::args().collect();
    let hot = std::env::var_os("HOT").is_some_and(|v| v == "1" || v == "only");
    // `HOT=only`: the structure holds the hot key alone (criterion's
    // one-hot-key rows); `HOT=1` pre-inserts every key first.
    let hot_only = std::env::var_os("HOT").is_some_and(|v| v == "only");
    let batch: usize = std::env::var("BATCH").map_or(32, |v| v.parse().unwrap());
    let threshold: u64 = std::env::var("THRESHOLD").map_or(1000, |v| v.parse().unwrap());
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
    let report = |el: Duration| {
        let all = ops * threads as u64;
        println!(
            "{which} x{threads}: {:.1} ns/op, {:.1} M adds/s",
            el.as_nanos() as f64 / all as f64,
            all as f64 / el.as_secs_f64() / 1e6
        );
    };
    // `$add(key, now)` the single op; `$many(keys, now)` the batch's.
    macro_rules! run {
        ($add:expr) => {
            run!($add, |_: &[u64], _: Timestamp| unreachable!())
        };
        ($add:expr, $many:expr) => {{
            let (add, many) = ($add, $many);
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
                    let (z, add, many) = (&z, &add, &many);
                    sc.spawn(move || {
                        if which.ends_with('b') {
                            timed_batch(z, z.offset(th, threads), warm, ops, batch, many)
                        } else if hot {
                            timed_hot(warm, ops, add)
                        } else {
                            timed(z, z.offset(th, threads), warm, ops, add)
                        }
                    });
                }
            });
            report(t.elapsed());
        }};
    }
    // Ours: `hasher`, or our default (what `main` passes as `H` then).
    macro_rules! hashed {
        ($builder:expr) => {
            $builder
                .hasher(hasher.clone().unwrap_or_default())
                .build()
                .unwrap()
        };
    }
    match which {
        "kw" | "kwb" => {
            let s = hashed!(KeyedWindows::builder(w, 10).clock(ManualClock::new()));
            run!(
                |k: u64, now: Timestamp| {
                    black_box(s.add_at(&k, now, 1));
                },
                |keys: &[u64], now: Timestamp| {
                    black_box(s.add_many_at(keys.iter().map(|k| (k, 1)), now));
                }
            )
        }
        "hk" | "hkb" => {
            let s = hashed!(HotKeyDetector::builder(w, 10, threshold).clock(ManualClock::new()));
            run!(
                |k: u64, now: Timestamp| {
                    black_box(s.add_at(&k, now, 1));
                },
                |keys: &[u64], now: Timestamp| {
                    s.add_many_at(keys.iter().map(|k| (k, 1)), now, |k, _| {
                        black_box(k);
                    });
                }
            )
        }
        "kl" | "klr" | "klb" => {
            let limit = if refusing { 1 } else { u64::from(u32::MAX) };
            let s =
                hashed!(KeyedLimiter::builder(Quota::per(limit, w).slices(10))
                    .clock(ManualClock::new()));
            run!(
                |k: u64, now: Timestamp| {
                    black_box(s.try_acquire_at(&k, now, 1));
                },
                |keys: &[u64], now: Timestamp| {
                    s.try_acquire_many_at(keys.iter().map(|k| (k, 1)), now, |_, ok| {
                        black_box(ok);
                    });
                }
            )
        }
        "dm" => match &hasher {
            Some(h) => {
                let s = DashCounter::<u64, H>::with_hasher(h.clone());
                run!(|k: u64, _now: Timestamp| {
                    black_box(s.add(&k, 1));
                })
            }
            None => {
                let s = DashCounter::<u64>::new();
                run!(|k: u64, _now: Timestamp| {
                    black_box(s.add(&k, 1));
                })
            }
        },
        "gv" | "gvr" | "gvu" | "gvur" => {
            use governor::middleware::NoOpMiddleware;
            use governor::state::keyed::DashMapStateStore;
            // One concrete limiter type a branch: the op is a closure the
            // timed loop inlines (a `dyn` call would charge governor for
            // our harness).
            macro_rules! gov {
                ($clock:expr, $store:expr) => {{
                    let clock = $clock;
                    let s = governor::RateLimiter::<_, _, _, NoOpMiddleware<_>>::new(
                        gov_quota(),
                        $store,
                        clock,
                    );
                    run!(|k: u64, _now: Timestamp| {
                        let _ = black_box(s.check_key(&k));
                    })
                }};
            }
            // `gvu`: as the criterion rows, governor on its coarse upkeep
            // clock.
            let upkeep = || {
                governor::clock::QuantaUpkeepClock::from_interval(Duration::from_millis(1))
                    .expect("upkeep clock")
            };
            let coarse = which.starts_with("gvu");
            match (&hasher, coarse) {
                (Some(h), false) => gov!(
                    governor::clock::DefaultClock::default(),
                    DashMapStateStore::<u64, H>::with_hasher(h.clone())
                ),
                (Some(h), true) => gov!(
                    upkeep(),
                    DashMapStateStore::<u64, H>::with_hasher(h.clone())
                ),
                (None, false) => gov!(
                    governor::clock::DefaultClock::default(),
                    DashMapStateStore::<u64>::default()
                ),
                (None, true) => gov!(upkeep(), DashMapStateStore::<u64>::default()),
            }
        }
        _ => unreachable!(),
    }
}
