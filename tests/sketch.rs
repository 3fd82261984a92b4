//! `HotKeySketch` against the exact `HotKeyDetector` fed the same adds:
//! the stated error bound (a reported count is never above the exact one
//! and at most `slices * (a - 1)` below it for a key added by one thread,
//! `undercount_bound()` for racing threads) checked for every key at every
//! check time of every run, hot reports only for keys truly at the
//! threshold, every key past the bound reported hot, exact counts for keys
//! that stay admitted, memory that never passes its limit whatever the
//! number of distinct keys, racing threads, and panicking keys.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch, Timestamp};

const SLICE_NS: u64 = 1_000;

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn sketch(
    slices: usize,
    threshold: u64,
    memory: usize,
    level: u64,
) -> HotKeySketch<u64, ManualClock> {
    HotKeySketch::builder(
        Duration::from_nanos(SLICE_NS * slices as u64),
        slices,
        threshold,
    )
    .clock(ManualClock::new())
    .memory(memory)
    .admission_level(level)
    .build()
    .unwrap()
}

fn exact(slices: usize, threshold: u64) -> HotKeyDetector<u64, ManualClock> {
    HotKeyDetector::builder(
        Duration::from_nanos(SLICE_NS * slices as u64),
        slices,
        threshold,
    )
    .clock(ManualClock::new())
    .build()
    .unwrap()
}

/// A skewed key: a few keys take most adds, a long tail is seen once.
fn skewed(rng: &mut StdRng, tail: u64) -> u64 {
    match rng.random_range(0..100) {
        0..=39 => rng.random_range(0..4),
        40..=69 => rng.random_range(4..40),
        _ => 1_000 + rng.random_range(0..tail),
    }
}

/// The bound for every key seen, at `t`: never above the exact sum, never
/// more than `slices * (a - 1)` below it.
fn check_bound(
    s: &HotKeySketch<u64, ManualClock>,
    x: &HotKeyDetector<u64, ManualClock>,
    keys: &BTreeSet<u64>,
    t: u64,
    single: bool,
    ctx: &str,
) {
    let slack = s.undercount_bound();
    for k in keys {
        let (got, want) = (s.sum_at(k, ts(t)), x.windows().sum_at(k, ts(t)));
        assert!(
            got <= want,
            "{ctx}: key {k} at {t}: {got} over the exact {want}"
        );
        assert!(
            want - got <= slack,
            "{ctx}: key {k} at {t}: {got} short of {want} by more than {slack}"
        );
        if single {
            // One thread: one shard.
            let one = s.windows().slices() as u64 * (s.admission_level() - 1);
            assert!(
                want - got <= one,
                "{ctx}: key {k} at {t}: {got} short of {want}"
            );
        }
    }
}

/// Many seeds of skewed streams with time moving forward (some steps skip
/// slices; a third of the runs with late adds): the bound at every check;
/// with time moving forward, every sketch report is a key at the threshold
/// by the exact count, and every key whose exact sum passes the threshold
/// by the bound is hot in the sketch.
#[test]
fn counts_and_reports_stay_within_the_bound_of_the_exact_detector() {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let slices = [1usize, 2, 4, 5, 10][seed as usize % 5];
        let level = rng.random_range(1..=12);
        let threshold = rng.random_range(20..400);
        let late = seed % 3 == 2;
        let ctx = format!("seed {seed} (S={slices}, T={threshold}, a={level}, late {late})");
        let s = sketch(slices, threshold, 1 << 20, level);
        let x = exact(slices, threshold);
        let mut keys = BTreeSet::new();
        let mut now = 0u64;
        for i in 0..4_000 {
            now += match rng.random_range(0..1000) {
                0 => SLICE_NS * rng.random_range(1..2 * slices as u64 + 2),
                _ => rng.random_range(0..8),
            };
            let k = skewed(&mut rng, 10_000);
            let n = if rng.random_bool(0.9) {
                1
            } else {
                rng.random_range(1..6)
            };
            // Late adds (up to a window back) in a third of the runs.
            let t = if late && rng.random_bool(0.1) {
                now.saturating_sub(rng.random_range(0..SLICE_NS * slices as u64))
            } else {
                now
            };
            keys.insert(k);
            x.add_at(&k, ts(t), n);
            if s.add_at(&k, ts(t), n) && !late {
                let sum = x.windows().sum_at(&k, ts(t));
                assert!(sum >= threshold, "{ctx}: {k} reported hot at {sum}");
            }
            if i % 500 == 499 {
                check_bound(&s, &x, &keys, now, true, &ctx);
                if late {
                    // The hot rule's state after late adds is the exact
                    // detector's (tests/keyed_hot.rs); the counts are ours.
                    continue;
                }
                let slack = slices as u64 * (level - 1);
                for k in &keys {
                    let want = x.windows().sum_at(k, ts(now));
                    if want >= threshold + slack {
                        assert!(s.is_hot_at(k, ts(now)), "{ctx}: {k} at {want} not hot");
                    }
                    if s.is_hot_at(k, ts(now)) {
                        assert!(want >= threshold, "{ctx}: {k} hot at {want}");
                    }
                }
            }
        }
        assert_eq!(s.untracked_adds(), 0, "{ctx}");
        if level > 1 {
            assert!(s.filtered_adds() > 0, "{ctx}: the tail was kept back");
        }
    }
}

/// A key that reaches the level in every slice is admitted from the first
/// add of each next slice: after one window its count is exact.
#[test]
fn a_key_admitted_in_every_slice_is_counted_exactly() {
    let (slices, level) = (5, 10);
    let s = sketch(slices, 1_000, 1 << 20, level);
    let x = exact(slices, 1_000);
    let mut t = 0;
    for slice in 0..3 * slices as u64 {
        for i in 0..25 {
            t = slice * SLICE_NS + i * 10;
            s.add_at(&7, ts(t), 1);
            x.add_at(&7, ts(t), 1);
        }
        let (got, want) = (s.sum_at(&7, ts(t)), x.windows().sum_at(&7, ts(t)));
        if slice >= slices as u64 {
            assert_eq!(got, want, "slice {slice}");
        } else {
            assert_eq!(
                want - got,
                level - 1,
                "slice {slice}: only the first slice kept back"
            );
        }
    }
}

/// Distinct keys without end: memory never passes its limit, the heavy
/// keys among them are still found, and what was dropped is counted.
#[test]
fn memory_stays_within_its_limit_whatever_the_number_of_keys() {
    let memory = 256 << 10;
    let s = sketch(4, 15, memory, 4);
    let mut t = 0;
    let mut hot = BTreeSet::new();
    for i in 0..300_000u64 {
        t += 3;
        let k = if i % 20 == 0 { i % 3 } else { 1_000 + i };
        if s.add_at(&k, ts(t), 1) {
            hot.insert(k);
        }
        if i % 10_000 == 0 {
            assert!(s.memory_bytes() <= memory, "{} at {i}", s.memory_bytes());
        }
    }
    assert!(s.memory_bytes() <= s.memory_limit());
    assert_eq!(hot, BTreeSet::from([0, 1, 2]));
    assert!(s.filtered_adds() > 250_000, "{}", s.filtered_adds());
    // Even with every key admitted (level 1), the memory holds.
    let s = sketch(4, 200, memory, 1);
    for i in 0..100_000u64 {
        s.add_at(&i, ts(i / 4), 1);
        if i % 997 == 0 {
            assert!(s.memory_bytes() <= memory, "{} at {i}", s.memory_bytes());
        }
    }
    assert!(s.memory_bytes() <= memory, "{}", s.memory_bytes());
    assert!(s.untracked_adds() > 0);
}

/// Threads racing on shared keys (each with its own increasing times): the
/// bound against the exact detector fed the same adds afterwards.
#[test]
fn racing_threads_keep_the_bound() {
    let slices = 4;
    let s = Arc::new(sketch(slices, 300, 1 << 20, 8));
    let adds: Vec<Vec<(u64, u64)>> = (0..4u64)
        .map(|th| {
            let mut rng = StdRng::seed_from_u64(th);
            (0..20_000u64)
                .map(|i| (skewed(&mut rng, 5_000), i / 5))
                .collect()
        })
        .collect();
    let handles: Vec<_> = adds
        .iter()
        .cloned()
        .map(|mine| {
            let s = s.clone();
            thread::spawn(move || {
                for (k, t) in mine {
                    s.add_at(&k, ts(t), 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let x = exact(slices, 300);
    let mut keys = BTreeSet::new();
    for mine in &adds {
        for &(k, t) in mine {
            x.add_at(&k, ts(t), 1);
            keys.insert(k);
        }
    }
    check_bound(&s, &x, &keys, 20_000 / 5 - 1, false, "threads");
    let hot: BTreeSet<u64> = s.hot_keys_at(ts(3_999)).into_iter().collect();
    let want: BTreeSet<u64> = x.hot_keys_at(ts(3_999)).into_iter().collect();
    assert!(hot.is_subset(&want), "{hot:?} vs {want:?}");
}

/// A key whose `Hash` or `Eq` panics: the add unwinds, the detector goes
/// on counting every other key exactly as before.
#[test]
fn a_panicking_key_leaves_the_detector_usable() {
    static PANIC: AtomicBool = AtomicBool::new(false);
    #[derive(Clone, Debug)]
    struct Touchy(u64);
    impl Hash for Touchy {
        fn hash<H: Hasher>(&self, h: &mut H) {
            assert!(!(PANIC.load(Ordering::Relaxed) && self.0 == 13), "hash");
            self.0.hash(h);
        }
    }
    impl PartialEq for Touchy {
        fn eq(&self, o: &Self) -> bool {
            assert!(!(PANIC.load(Ordering::Relaxed) && self.0 == 14), "eq");
            self.0 == o.0
        }
    }
    impl Eq for Touchy {}
    let s = HotKeySketch::<Touchy, _>::builder(Duration::from_secs(1), 2, 10)
        .clock(ManualClock::new())
        .memory(1 << 20)
        .admission_level(2)
        .build()
        .unwrap();
    for k in [13, 14, 15] {
        s.add_at(&Touchy(k), ts(0), 3);
    }
    PANIC.store(true, Ordering::Relaxed);
    for k in [13, 14] {
        let r = catch_unwind(AssertUnwindSafe(|| s.add_at(&Touchy(k), ts(1), 3)));
        assert!(r.is_err(), "key {k}");
    }
    PANIC.store(false, Ordering::Relaxed);
    assert!(s.add_at(&Touchy(15), ts(2), 7)); // 10: hot
    assert_eq!(s.sum_at(&Touchy(15), ts(2)), 10);
    assert_eq!(s.sum_at(&Touchy(13), ts(2)), 3);
    assert!(s.add_at(&Touchy(14), ts(3), 7));
}

#[test]
fn bad_configurations_are_typed_errors() {
    let b = || HotKeySketch::<u64>::builder(Duration::from_secs(10), 10, 100);
    assert!(b().admission_level(0).build().is_err());
    assert!(b().admission_level(256).build().is_err());
    assert!(b().memory(4 << 10).build().is_err());
    assert!(HotKeySketch::<u64>::new(Duration::from_secs(10), 10, 0, 1 << 20).is_err());
    assert!(HotKeySketch::<u64>::new(Duration::from_secs(10), 3, 100, 1 << 20).is_err());
    let s = b().build().unwrap();
    assert_eq!(s.memory_limit(), 8 << 20);
    assert_eq!(s.admission_level(), 5); // at least 16, at most ceil(ceil(100 / 10) / 2)
    let big = HotKeySketch::<u64>::new(Duration::from_secs(10), 10, 10_000, 8 << 20).unwrap();
    assert_eq!(big.admission_level(), 63); // ceil(1_000 / 16)
    let mid = HotKeySketch::<u64>::new(Duration::from_secs(10), 10, 2_000, 8 << 20).unwrap();
    assert_eq!(mid.admission_level(), 16);
    assert!(s.max_keys() >= 1_000, "{}", s.max_keys());
}
