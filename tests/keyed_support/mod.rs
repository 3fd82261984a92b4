//! What the per-key test targets (`keyed.rs`, `keyed_edges.rs`, `keyed_hot.rs`,
//! `keyed_threads.rs`, `keyed_rotation.rs`) share: constructors on a
//! `ManualClock`, a take of everything, the random time walk of the model
//! tests, and the slice configurations they run. Each target uses part of
//! it.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::keyed::{HotKeyDetectorBuilder, KeyedWindowsBuilder};
use stripecount::{Clock, HotKeyDetector, KeyedWindows, Timestamp};

/// A test's size (loop counts, keys, threads, seeds): `full` natively,
/// `miri` under Miri, which interprets a test thousands of times slower.
/// A test asserts the same things at either size.
pub const fn sized<T: Copy>(full: T, miri: T) -> T {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

pub const SLICE: u64 = 1_000; // ns
pub const SLICES: usize = 5;

/// The time `ns` nanoseconds after the origin.
pub const fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// The epoch of the slice starting at `start` (which a take gives its
/// callback: a whole multiple of the slice length `slice_ns`).
pub fn slice_epoch(start: Timestamp, slice_ns: u64) -> u64 {
    let t = start.as_nanos();
    assert_eq!(t % slice_ns, 0, "{t} ns is not the start of a slice");
    t / slice_ns
}

/// The builder of windows of `slices` slices of `slice_ns`, on a
/// `ManualClock`.
pub fn windows_builder(slice_ns: u64, slices: usize) -> KeyedWindowsBuilder<u32, ManualClock> {
    KeyedWindows::builder(Duration::from_nanos(slice_ns * slices as u64), slices)
        .clock(ManualClock::new())
}

pub fn windows_of(slice_ns: u64, slices: usize) -> KeyedWindows<u32, ManualClock> {
    windows_builder(slice_ns, slices).build().unwrap()
}

pub fn windows() -> KeyedWindows<u32, ManualClock> {
    windows_of(SLICE, SLICES)
}

/// The builder of a detector of `threshold` over windows of `slices`
/// slices of `slice_ns`, on a `ManualClock`.
pub fn detector_builder(
    slice_ns: u64,
    slices: usize,
    threshold: u64,
) -> HotKeyDetectorBuilder<u32, ManualClock> {
    HotKeyDetector::builder(
        Duration::from_nanos(slice_ns * slices as u64),
        slices,
        threshold,
    )
    .clock(ManualClock::new())
}

pub fn detector(slice_ns: u64, slices: usize, threshold: u64) -> HotKeyDetector<u32, ManualClock> {
    detector_builder(slice_ns, slices, threshold)
        .build()
        .unwrap()
}

/// Every `(key, epoch) -> count` that `take_all` hands out (the epoch of
/// the slice start it gives), checking that no pair is handed out twice
/// and no count is zero.
pub fn take_all_of<C: Clock>(w: &KeyedWindows<u32, C>) -> BTreeMap<(u32, u64), u64> {
    let slice_ns = w.slice_len().as_nanos() as u64;
    let mut out = BTreeMap::new();
    w.take_all(|k, start, c| {
        let e = slice_epoch(start, slice_ns);
        assert!(c > 0, "take_all handed out a zero count");
        assert!(out.insert((*k, e), c).is_none(), "({k}, {e}) taken twice");
    });
    out
}

/// A time `slices` slices away from `t` (either way), saturating.
pub fn shift(t: u64, slice_ns: u64, slices: i64) -> u64 {
    let d = slice_ns.saturating_mul(slices.unsigned_abs());
    if slices >= 0 {
        t.saturating_add(d)
    } else {
        t.saturating_sub(d)
    }
}

/// A random time near `now` for adds and reads: mostly `now`, sometimes a
/// few slices back or ahead, sometimes at the first or last nanosecond of
/// its slice.
pub fn time_near(rng: &mut StdRng, now: u64, slice_ns: u64, slices: usize) -> u64 {
    let s = slices as i64;
    let t = match rng.random_range(0..20) {
        0..=13 => now,
        14..=17 => shift(now, slice_ns, -rng.random_range(1..=s + 1)),
        _ => shift(now, slice_ns, rng.random_range(0..=s)),
    };
    match rng.random_range(0..6) {
        0 => t - t % slice_ns,
        1 => (t - t % slice_ns).saturating_add(slice_ns - 1),
        _ => t,
    }
}

/// The next `now` of a random walk: mostly small steps forward, sometimes
/// long idle gaps (multiples of 2^16 epochs among them), sometimes a step
/// back.
pub fn step(rng: &mut StdRng, now: u64, slice_ns: u64, slices: usize) -> u64 {
    const TAG: i64 = 1 << 16;
    let s = slices as i64;
    match rng.random_range(0..100) {
        0..=84 => now.saturating_add(rng.random_range(0..2 * slice_ns)),
        85..=94 => {
            let jumps = [
                1,
                s - 1,
                s,
                s + 1,
                2 * s,
                TAG - 1,
                TAG,
                TAG + 1,
                2 * TAG,
                3 * TAG,
                s * TAG,
                1 << 40,
            ];
            shift(now, slice_ns, jumps[rng.random_range(0..jumps.len())])
        }
        _ => shift(now, slice_ns, -rng.random_range(1..=3 * s)),
    }
}

/// `top_at` against the model: the same sums (ties may be cut differently),
/// every key returned with its model sum, no key twice.
pub fn check_top(got: Vec<(u32, u64)>, model: &BTreeMap<u32, u64>, k: usize, ctx: &str) {
    let mut want: Vec<u64> = model.values().copied().collect();
    want.sort_unstable_by(|a, b| b.cmp(a));
    want.truncate(k);
    let sums: Vec<u64> = got.iter().map(|x| x.1).collect();
    assert_eq!(sums, want, "{ctx}: top {k}");
    let mut keys: Vec<u32> = got.iter().map(|x| x.0).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), got.len(), "{ctx}: a key twice in top {k}");
    for (key, s) in got {
        assert_eq!(model.get(&key), Some(&s), "{ctx}: key {key} in top {k}");
    }
}

/// The slice configurations the model tests run: (slice length in ns,
/// slices). A 1 ns slice makes epochs equal times, so epochs reach
/// `u64::MAX`.
pub const CONFIGS: [(u64, usize); 7] = [
    (SLICE, 5),
    (1, 4),
    (7, 1),
    (3, 2),
    (SLICE, 10),
    (1, 3),
    (1_000_000_000, 60),
];
