//! `HotKeySketch` against the truth and against heavykeeper: accuracy on
//! Zipf streams over 10M and 100M distinct keys, and adds a second.
//!
//! Not criterion: each stream is 20M keys drawn before any timing, at a
//! synthetic 1M adds a second of stream time (a 10 s window in 10 slices
//! holds 10M adds). Accuracy is checked at four times along each stream
//! (5, 10, 15 and 20 s: rising, then steady) against the true window
//! counts, counted directly from the stream. The threshold is 2,000 in a
//! window (0.02% of its adds), so between about 50 and 300 keys are hot.
//! Throughput: every configuration twice, interleaved, on the same stream.
//!
//! Prints two markdown tables, and writes them to `$BENCH_MD` when set
//! (`scripts/benchmarks.sh` renders them into BENCHMARKS.md). `QUICK=1`:
//! the accuracy table only (about 50 s).

mod counting_alloc;

use heavykeeper::TopK;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{HotKeySketch, Timestamp};

const LEN: usize = 20_000_000;
/// Adds a second of stream time: one a microsecond.
const NS_PER_ADD: u64 = 1_000;
const WINDOW: Duration = Duration::from_secs(10);
const SLICES: usize = 10;
const THRESHOLD: u64 = 2_000;
const MEMORY: usize = 8 << 20;
const CHECKS: [usize; 4] = [5_000_000, 10_000_000, 15_000_000, 20_000_000];

fn ts(i: usize) -> Timestamp {
    Timestamp::from_nanos(i as u64 * NS_PER_ADD)
}

/// `LEN` keys: Zipf(`s`) ranks over `universe`, scrambled.
fn stream(s: f64, universe: f64, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let z = Zipf::new(universe, s).expect("a valid Zipf");
    (0..LEN)
        .map(|_| (z.sample(&mut rng) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect()
}

fn sketch() -> HotKeySketch<u64, ManualClock> {
    HotKeySketch::builder(WINDOW, SLICES, THRESHOLD)
        .memory(MEMORY)
        .clock(ManualClock::new())
        .build()
        .expect("a valid sketch")
}

/// The true window counts at the add `end` (exclusive): the adds of the
/// slices the window at `ts(end - 1)` covers.
fn truth(keys: &[u64], end: usize) -> HashMap<u64, u64> {
    let slice_adds = (WINDOW.as_nanos() as u64 / SLICES as u64 / NS_PER_ADD) as usize;
    let last = (end - 1) / slice_adds;
    let from = (last + 1).saturating_sub(SLICES) * slice_adds;
    let mut m = HashMap::with_capacity(end - from);
    for &k in &keys[from..end] {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

#[derive(Default)]
struct Acc {
    hot: usize,
    recall: f64,
    recall2: f64,
    precision: f64,
    max_err: f64,
    mean_err: f64,
}

fn accuracy(d: &HotKeySketch<u64, ManualClock>, keys: &[u64], end: usize) -> Acc {
    let t = ts(end - 1);
    let truth = truth(keys, end);
    let hot: HashSet<u64> = truth
        .iter()
        .filter(|e| *e.1 >= THRESHOLD)
        .map(|e| *e.0)
        .collect();
    let hot2: Vec<u64> = truth
        .iter()
        .filter(|e| *e.1 >= 2 * THRESHOLD)
        .map(|e| *e.0)
        .collect();
    let reported: HashSet<u64> = d.hot_keys_at(t).into_iter().collect();
    let found = reported.intersection(&hot).count();
    let (mut max_err, mut sum_err) = (0f64, 0f64);
    for k in &hot {
        let (want, got) = (truth[k] as f64, d.sum_at(k, t) as f64);
        let err = (want - got).abs() / want;
        max_err = max_err.max(err);
        sum_err += err;
    }
    let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
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
    }
}

/// Adds a second of `f` over the stream.
fn rate(f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    LEN as f64 / t0.elapsed().as_secs_f64()
}

fn ours(keys: &[u64], threads: usize) -> f64 {
    let d = sketch();
    rate(|| {
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
    })
}

fn ours_ahash(keys: &[u64]) -> f64 {
    let d = HotKeySketch::<u64, _>::builder(WINDOW, SLICES, THRESHOLD)
        .memory(MEMORY)
        .clock(ManualClock::new())
        .hasher(ahash::RandomState::new())
        .build()
        .expect("a valid sketch");
    rate(|| {
        for (i, k) in keys.iter().enumerate() {
            d.add_at(k, ts(i), 1);
        }
    })
}

fn heavykeeper(keys: &[u64]) -> f64 {
    let mut hk: TopK<u64> = TopK::new(512, 4096, 4, 0.9);
    rate(|| {
        for k in keys {
            hk.add(k, 1);
        }
    })
}

fn m(r: f64) -> String {
    format!("{:.1} M/s", r / 1e6)
}

fn main() {
    // `cargo bench` passes criterion's flags; none apply here.
    let streams = [
        (0.8, 1e7),
        (1.0, 1e7),
        (1.2, 1e7),
        (0.8, 1e8),
        (1.0, 1e8),
        (1.2, 1e8),
    ];
    let mut acc_md = String::from(
        "| stream | at | true hot | recall | recall at 2x | precision | max count error | \
         mean count error | memory_bytes | heap | kept back | untracked |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut rate_md = String::from(
        "| stream | ours, 1 thread | ours, 2 threads | heavykeeper `TopK` | ours (ahash) | \
         ours / heavykeeper | 2 threads / 1 |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (n, &(s, universe)) in streams.iter().enumerate() {
        let name = format!("Zipf {s} over {}M keys", universe / 1e6);
        let keys = stream(s, universe, 11 + n as u64);
        let before = counting_alloc::live_bytes();
        let d = sketch();
        let mut done = 0;
        for &check in &CHECKS {
            for (i, k) in keys.iter().enumerate().take(check).skip(done) {
                d.add_at(k, ts(i), 1);
            }
            done = check;
            let heap = counting_alloc::live_bytes() - before;
            let a = accuracy(&d, &keys, check);
            writeln!(
                acc_md,
                "| {name} | {} s | {} | {:.4} | {:.4} | {:.4} | {:.2}% | {:.3}% | {:.2} MiB | {:.2} MiB | {:.1}% | {} |",
                check as u64 * NS_PER_ADD / 1_000_000_000,
                a.hot,
                a.recall,
                a.recall2,
                a.precision,
                100.0 * a.max_err,
                100.0 * a.mean_err,
                d.memory_bytes() as f64 / (1 << 20) as f64,
                heap as f64 / (1 << 20) as f64,
                100.0 * d.filtered_adds() as f64 / check as f64,
                d.untracked_adds(),
            )
            .unwrap();
        }
        drop(d);
        if std::env::var_os("QUICK").is_some() {
            continue;
        }
        let mut runs = Vec::new();
        for _ in 0..2 {
            runs.push([
                ours(&keys, 1),
                ours(&keys, 2),
                heavykeeper(&keys),
                ours_ahash(&keys),
            ]);
        }
        let cell = |j: usize| format!("{} / {}", m(runs[0][j]), m(runs[1][j]));
        let ratio = |a: usize, b: usize| {
            format!(
                "{:.2}x / {:.2}x",
                runs[0][a] / runs[0][b],
                runs[1][a] / runs[1][b]
            )
        };
        writeln!(
            rate_md,
            "| {name} | {} | {} | {} | {} | {} | {} |",
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            ratio(0, 2),
            ratio(1, 0)
        )
        .unwrap();
        eprintln!("{name}: done");
    }
    let md = format!(
        "Accuracy (`HotKeySketch` in {} MiB, default admission level {}):\n\n{acc_md}\n\
         Adds a second, run 1 / run 2:\n\n{rate_md}",
        MEMORY >> 20,
        sketch().admission_level()
    );
    println!("{md}");
    if let Ok(path) = std::env::var("BENCH_MD") {
        std::fs::write(path, md).expect("BENCH_MD is writable");
    }
}
