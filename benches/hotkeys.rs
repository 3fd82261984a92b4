//! `HotKeySketch` against the truth and against heavykeeper: accuracy on
//! Zipf streams over 10M and 100M distinct keys, memory, and adds a second.
//!
//! Not criterion: each stream is 20M `u64` keys (Zipf ranks, scrambled)
//! drawn before any timing, at a synthetic 1M adds a second of stream time,
//! so a 10 s window in 10 slices holds 10M adds.
//!
//! Accuracy, on all six streams: each sketch of `CONFIGS` (8 MiB) takes
//! the stream on one thread and is checked at 5, 10 and 20 s (the last add
//! of a slice: rising, then steady) against the true counts of the adds
//! in the window `(t - 10 s, t]`, counted from the stream itself (at the
//! last add of a slice that window is exactly the sketch's ten slices):
//! recall of the keys truly at or above the threshold (and at twice it),
//! precision of the keys reported hot, the relative error of the reported
//! counts of the truly hot keys, and the keys whose reported count breaks
//! the documented bound (above the true count, or short of it by more than
//! `slices * (a - 1)` plus the untracked adds). Memory: `memory_bytes()`
//! and the live heap the counting allocator sees, both the most seen at
//! every 65,536th add.
//!
//! Adds a second, on the three 10M-key streams and Zipf 1.0 over 100M keys
//! (to keep the bench near 3 minutes), every configuration twice,
//! interleaved: the sketch on one thread and on two (one shared sketch,
//! thread `i` taking the adds `i, i + 2, ...` with their timestamps), the
//! same at the threshold of 2,000, on one thread with ahash (the hasher
//! heavykeeper uses), on one thread through `add_many_at` (32 keys a
//! call), the exact `HotKeyDetector` on one thread, and
//! heavykeeper's `TopK`, `BucketedTopK` and `CuckooTopK` (k 100, width
//! 4096, depth 4, decay 0.9; `&mut self`, so one thread, and no window).
//!
//! Prints two markdown tables, and writes them to `$BENCH_MD` when set
//! (`scripts/benchmarks.sh` renders them into BENCHMARKS.md). `QUICK=1`:
//! the accuracy table only.

mod counting_alloc;

use ahash::AHashMap;
use heavykeeper::{BucketedTopK, CuckooTopK, TopK};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch, Timestamp};

/// The adds of a stream.
const LEN: usize = 20_000_000;
/// Stream time between two adds: 1M adds a second.
const NS_PER_ADD: u64 = 1_000;
const WINDOW: Duration = Duration::from_secs(10);
const SLICES: usize = 10;
/// The threshold of a window (of 10M adds): 0.005% of it, which makes a
/// few hundred to about 1,200 keys hot on these streams (default admission
/// level 16).
const THRESHOLD: u64 = 500;
/// The sketches checked for accuracy: (threshold, admission level if not
/// the default). Besides the default at `THRESHOLD`, the same threshold at
/// level 4 (`ceil(h / 16)`, what the default would be without its floor of
/// 16: the row that shows why it has one), and 2,000 (50 to 300 keys hot,
/// default level 16).
const CONFIGS: [(u64, Option<u64>); 3] = [(THRESHOLD, None), (THRESHOLD, Some(4)), (2_000, None)];
const MEMORY: usize = 8 << 20;
/// The adds after which accuracy is checked (5, 10 and 20 s: half a
/// window, the first whole one, the second).
const CHECKS: [usize; 3] = [5_000_000, 10_000_000, 20_000_000];
/// heavykeeper as usually configured for a top-k of hot keys.
const HK: (usize, usize, usize, f64) = (100, 4096, 4, 0.9);

fn ts(i: usize) -> Timestamp {
    Timestamp::from_nanos(i as u64 * NS_PER_ADD)
}

/// `LEN` keys: Zipf(`s`) ranks over `universe`, scrambled (an odd
/// multiplier: distinct ranks stay distinct keys).
fn stream(s: f64, universe: f64, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let z = Zipf::new(universe, s).expect("a valid Zipf");
    (0..LEN)
        .map(|_| (z.sample(&mut rng) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect()
}

fn sketch((threshold, level): (u64, Option<u64>)) -> HotKeySketch<u64, ManualClock> {
    let b = HotKeySketch::builder(WINDOW, SLICES, threshold)
        .memory(MEMORY)
        .clock(ManualClock::new());
    match level {
        Some(a) => b.admission_level(a),
        None => b,
    }
    .build()
    .expect("a valid sketch")
}

/// The true counts of the keys counted at least `floor` times in the window
/// `(t - WINDOW, t]`, `t` the time of the add `end - 1`.
struct Truth {
    t: Timestamp,
    adds: usize,
    counts: AHashMap<u64, u64>,
    floor: u64,
}

fn truth(keys: &[u64], end: usize, floor: u64) -> Truth {
    let t = ts(end - 1).as_nanos();
    let w = WINDOW.as_nanos() as u64;
    // The first add later than t - w.
    let from = if t >= w {
        ((t - w) / NS_PER_ADD + 1) as usize
    } else {
        0
    };
    let mut all = AHashMap::<u64, u64>::with_capacity(end - from);
    for (i, &k) in keys.iter().enumerate().take(end).skip(from) {
        debug_assert!(ts(i).as_nanos() + w > t);
        *all.entry(k).or_insert(0) += 1;
    }
    Truth {
        t: ts(end - 1),
        adds: end - from,
        counts: all.into_iter().filter(|e| e.1 >= floor).collect(),
        floor,
    }
}

struct Acc {
    hot: usize,
    recall: f64,
    recall2: f64,
    precision: f64,
    max_err: f64,
    mean_err: f64,
    broken: usize,
}

fn accuracy(d: &HotKeySketch<u64, ManualClock>, truth: &Truth) -> Acc {
    let (t, th) = (truth.t, d.threshold());
    assert!(truth.floor < th);
    let hot: HashSet<u64> = truth
        .counts
        .iter()
        .filter(|e| *e.1 >= th)
        .map(|e| *e.0)
        .collect();
    let hot2 = hot.iter().filter(|k| truth.counts[k] >= 2 * th);
    let reported: HashSet<u64> = d.hot_keys_at(t).into_iter().collect();
    let found = reported.intersection(&hot).count();
    let (mut max_err, mut sum_err) = (0f64, 0f64);
    for k in &hot {
        let (want, got) = (truth.counts[k] as f64, d.sum_at(k, t) as f64);
        let err = (want - got).abs() / want;
        max_err = max_err.max(err);
        sum_err += err;
    }
    // The documented bound, on every key truly at the floor or more and
    // every key reported hot (one thread: one doorkeeper shard).
    let short = SLICES as u64 * (d.admission_level() - 1) + d.untracked_adds();
    let broken = truth
        .counts
        .keys()
        .chain(reported.iter().filter(|k| !truth.counts.contains_key(k)))
        .filter(|&k| {
            let got = d.sum_at(k, t);
            match truth.counts.get(k) {
                Some(&want) => got > want || got + short < want,
                // Truly below the floor.
                None => got >= truth.floor,
            }
        })
        .count();
    let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    let hot2: Vec<u64> = hot2.copied().collect();
    Acc {
        hot: hot.len(),
        recall: ratio(found, hot.len()),
        recall2: ratio(
            hot2.iter().filter(|k| reported.contains(k)).count(),
            hot2.len(),
        ),
        precision: ratio(found, reported.len()),
        max_err,
        mean_err: sum_err / hot.len().max(1) as f64,
        broken,
    }
}

fn mib(b: f64) -> String {
    format!("{:.2} MiB", b / (1 << 20) as f64)
}

fn millions(n: usize) -> String {
    format!("{}M", n / 1_000_000)
}

/// The accuracy rows of one stream, one sketch.
fn accuracy_rows(
    md: &mut String,
    name: &str,
    keys: &[u64],
    truths: &[Truth],
    cfg: (u64, Option<u64>),
) {
    let base = counting_alloc::live_bytes();
    let d = sketch(cfg);
    let set = if cfg.1.is_some() { ", set" } else { "" };
    let (mut heap, mut bytes) = (0isize, 0usize);
    let mut done = 0;
    for (&check, truth) in CHECKS.iter().zip(truths) {
        for (i, k) in keys.iter().enumerate().take(check).skip(done) {
            d.add_at(k, ts(i), 1);
            if i & 0xFFFF == 0 {
                heap = heap.max(counting_alloc::live_bytes() - base);
                bytes = bytes.max(d.memory_bytes());
            }
        }
        done = check;
        heap = heap.max(counting_alloc::live_bytes() - base);
        bytes = bytes.max(d.memory_bytes());
        let a = accuracy(&d, truth);
        writeln!(
            md,
            "| {name} | {} s | {} ({}) | {} ({}{set}) | {} | {:.4} | {:.4} | {:.4} | \
             {:.2}% | {:.3}% | {} | {} | {} | {:.1}% | {} |",
            check as u64 * NS_PER_ADD / 1_000_000_000,
            millions(check),
            millions(truth.adds),
            cfg.0,
            d.admission_level(),
            a.hot,
            a.recall,
            a.recall2,
            a.precision,
            100.0 * a.max_err,
            100.0 * a.mean_err,
            a.broken,
            mib(bytes as f64),
            mib(heap as f64),
            100.0 * d.filtered_adds() as f64 / check as f64,
            d.untracked_adds(),
        )
        .unwrap();
    }
}

/// Adds a second of `f` over the stream.
fn rate(f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    LEN as f64 / t0.elapsed().as_secs_f64()
}

fn ours(keys: &[u64], threads: usize, threshold: u64) -> f64 {
    let d = sketch((threshold, None));
    let r = rate(|| {
        std::thread::scope(|s| {
            for th in 0..threads {
                let d = &d;
                // Interleaved: the threads move through stream time together.
                s.spawn(move || {
                    let mut i = th;
                    while i < keys.len() {
                        d.add_at(&keys[i], ts(i), 1);
                        i += threads;
                    }
                });
            }
        })
    });
    black_box(d.hot_keys_at(ts(keys.len() - 1)));
    r
}

/// The sketch on one thread through `add_many_at`, 32 keys a call (the
/// call's time that of its first key).
fn ours_batch(keys: &[u64]) -> f64 {
    let d = sketch((THRESHOLD, None));
    let r = rate(|| {
        for (c, chunk) in keys.chunks(32).enumerate() {
            d.add_many_at(chunk.iter().map(|k| (k, 1)), ts(c * 32), |k, _| {
                black_box(k);
            });
        }
    });
    black_box(d.hot_keys_at(ts(keys.len() - 1)));
    r
}

fn ours_ahash(keys: &[u64]) -> f64 {
    let d = HotKeySketch::<u64, _>::builder(WINDOW, SLICES, THRESHOLD)
        .memory(MEMORY)
        .clock(ManualClock::new())
        .hasher(ahash::RandomState::new())
        .build()
        .expect("a valid sketch");
    let r = rate(|| {
        for (i, k) in keys.iter().enumerate() {
            d.add_at(k, ts(i), 1);
        }
    });
    black_box(d.hot_keys_at(ts(keys.len() - 1)));
    r
}

/// The exact detector's adds a second, and the live heap it held at the end.
fn exact(keys: &[u64]) -> (f64, isize) {
    let base = counting_alloc::live_bytes();
    let d = HotKeyDetector::<u64, _>::builder(WINDOW, SLICES, THRESHOLD)
        .clock(ManualClock::new())
        .build()
        .expect("a valid detector");
    let r = rate(|| {
        for (i, k) in keys.iter().enumerate() {
            d.add_at(k, ts(i), 1);
        }
    });
    black_box(d.hot_keys_at(ts(keys.len() - 1)));
    (r, counting_alloc::live_bytes() - base)
}

fn topk(keys: &[u64]) -> f64 {
    let mut hk: TopK<u64> = TopK::new(HK.0, HK.1, HK.2, HK.3);
    let r = rate(|| {
        for k in keys {
            hk.add(k, 1);
        }
    });
    black_box(hk.list());
    r
}

fn bucketed(keys: &[u64]) -> f64 {
    let mut hk: BucketedTopK<u64> = BucketedTopK::new(HK.0, HK.1, HK.2, HK.3);
    let r = rate(|| {
        for k in keys {
            hk.add(k, 1);
        }
    });
    black_box(hk.list());
    r
}

fn cuckoo(keys: &[u64]) -> f64 {
    let mut hk: CuckooTopK<u64> = CuckooTopK::new(HK.0, HK.1, HK.2, HK.3);
    let r = rate(|| {
        for k in keys {
            hk.add(k, 1);
        }
    });
    black_box(hk.list());
    r
}

/// The timed configurations, in the order of the table's columns.
const RATE_COLS: [&str; 10] = [
    "sketch, 1 thread",
    "sketch, 2 threads",
    "sketch, threshold 2,000",
    "sketch, threshold 2,000, 2 threads",
    "sketch (ahash)",
    "sketch, batches of 32",
    "`HotKeyDetector` (exact)",
    "`TopK`",
    "`BucketedTopK`",
    "`CuckooTopK`",
];
/// The ratios of the table: (numerator, denominator) columns.
const RATIOS: [(usize, usize, &str); 7] = [
    (0, 7, "sketch / `TopK`"),
    (0, 8, "sketch / `BucketedTopK`"),
    (5, 8, "sketch, batches / `BucketedTopK`"),
    (4, 7, "sketch (ahash) / `TopK`"),
    (1, 0, "2 threads / 1"),
    (3, 2, "2 threads / 1 (2,000)"),
    (0, 6, "sketch / exact"),
];

fn main() {
    // `cargo bench` passes criterion's flags; none apply here.
    let quick = std::env::var_os("QUICK").is_some();
    let streams = [
        (0.8, 1e7),
        (1.0, 1e7),
        (1.2, 1e7),
        (0.8, 1e8),
        (1.0, 1e8),
        (1.2, 1e8),
    ];
    let mut acc_md = String::from(
        "| stream | at | adds (in window) | threshold (level) | true hot | recall | \
         recall at 2x | precision | max count error | mean count error | off bound | \
         memory_bytes | heap | filtered | untracked |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut rate_md = String::from("| stream |");
    for c in RATE_COLS {
        write!(rate_md, " {c} |").unwrap();
    }
    for r in RATIOS {
        write!(rate_md, " {} |", r.2).unwrap();
    }
    rate_md.push_str(" exact's heap |\n|---|");
    rate_md.push_str(&"---:|".repeat(RATE_COLS.len() + RATIOS.len() + 1));
    rate_md.push('\n');
    let t0 = Instant::now();
    for (n, &(s, universe)) in streams.iter().enumerate() {
        let name = format!("Zipf {s:.1}, {}M keys", universe / 1e6);
        let keys = stream(s, universe, 11 + n as u64);
        let truths: Vec<Truth> = CHECKS
            .iter()
            .map(|&c| truth(&keys, c, THRESHOLD / 4))
            .collect();
        for cfg in CONFIGS {
            accuracy_rows(&mut acc_md, &name, &keys, &truths, cfg);
        }
        drop(truths);
        eprintln!("{name}: accuracy ({:.0} s)", t0.elapsed().as_secs_f64());
        // Adds a second on the three 10M-key streams and Zipf 1.0 over
        // 100M keys (the whole bench in about 3 minutes).
        if quick || (universe > 1e7 && s != 1.0) {
            continue;
        }
        let mut runs = Vec::new();
        let mut exact_heap = 0;
        for _ in 0..2 {
            let (e, heap) = exact(&keys);
            exact_heap = exact_heap.max(heap);
            runs.push([
                ours(&keys, 1, THRESHOLD),
                ours(&keys, 2, THRESHOLD),
                ours(&keys, 1, 2_000),
                ours(&keys, 2, 2_000),
                ours_ahash(&keys),
                ours_batch(&keys),
                e,
                topk(&keys),
                bucketed(&keys),
                cuckoo(&keys),
            ]);
        }
        write!(rate_md, "| {name} |").unwrap();
        for (r1, r2) in runs[0].iter().zip(&runs[1]) {
            write!(rate_md, " {:.1} M/s |", (r1 + r2) / 2e6).unwrap();
        }
        for (a, b, _) in RATIOS {
            write!(
                rate_md,
                " {:.2}x / {:.2}x |",
                runs[0][a] / runs[0][b],
                runs[1][a] / runs[1][b]
            )
            .unwrap();
        }
        writeln!(rate_md, " {} |", mib(exact_heap as f64)).unwrap();
        eprintln!(
            "{name}: adds a second ({:.0} s)",
            t0.elapsed().as_secs_f64()
        );
    }
    let md = format!(
        "Accuracy (`HotKeySketch` in {} MiB, one thread):\n\n{acc_md}\n\
         Adds a second (the mean of two runs; ratios run 1 / run 2; threshold {}):\n\n{rate_md}",
        MEMORY >> 20,
        THRESHOLD,
    );
    println!("{md}");
    if let Ok(path) = std::env::var("BENCH_MD") {
        std::fs::write(path, md).expect("BENCH_MD is writable");
    }
}
