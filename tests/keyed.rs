//! Per-key windows and hot-key detection (the slice-major engine of
//! `src/keyed/`) against the reference models of `keyed_model/`: the global
//! slice ring (an add at epoch `e` is dropped iff `e + S <= N`, `N` the
//! newest epoch any add installed; an add whose slot holds an older epoch
//! replaces that slice for every key), per-slice key bounds, eviction of
//! whole slices, and the hot rule.

mod keyed_model;

use keyed_model::{HotModel, RingModel, COUNT_MAX};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use stripecount::{
    Clock, ConfigError, HotKeyDetector, KeyedWindows, ManualClock, SlidingWindow, MAX_SLICES,
};

const SLICE: u64 = 1_000; // ns
const SLICES: usize = 5;

fn windows_of(slice_ns: u64, slices: usize) -> KeyedWindows<u32, ManualClock> {
    KeyedWindows::with_clock(
        Duration::from_nanos(slice_ns * slices as u64),
        slices,
        ManualClock::new(),
    )
    .unwrap()
}

fn windows() -> KeyedWindows<u32, ManualClock> {
    windows_of(SLICE, SLICES)
}

fn detector(slice_ns: u64, slices: usize, threshold: u64) -> HotKeyDetector<u32, ManualClock> {
    HotKeyDetector::with_clock(
        Duration::from_nanos(slice_ns * slices as u64),
        slices,
        threshold,
        ManualClock::new(),
    )
    .unwrap()
}

/// Every `(key, epoch) -> count` that `take_all` hands out, checking that
/// no pair is handed out twice and no count is zero.
fn take_all_of<C: Clock>(w: &KeyedWindows<u32, C>) -> BTreeMap<(u32, u64), u64> {
    let mut out = BTreeMap::new();
    w.take_all(|k, e, c| {
        assert!(c > 0, "take_all handed out a zero count");
        assert!(out.insert((*k, e), c).is_none(), "({k}, {e}) taken twice");
    });
    out
}

/// A time `slices` slices away from `t` (either way), saturating.
fn shift(t: u64, slice_ns: u64, slices: i64) -> u64 {
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
fn time_near(rng: &mut StdRng, now: u64, slice_ns: u64, slices: usize) -> u64 {
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
fn step(rng: &mut StdRng, now: u64, slice_ns: u64, slices: usize) -> u64 {
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
fn check_top(got: Vec<(u32, u64)>, model: &BTreeMap<u32, u64>, k: usize, ctx: &str) {
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
const CONFIGS: [(u64, usize); 7] = [
    (SLICE, 5),
    (1, 4),
    (7, 1),
    (3, 2),
    (SLICE, 10),
    (1, 3),
    (1_000_000_000, 60),
];

/// Every public operation of `KeyedWindows`, many seeds, against the slice
/// ring model: add results, sums at any time, `top_at`, `len`,
/// `untracked_adds`, `evict_idle_at`'s count, `take` and `take_all`, with
/// times moving forward, stepping back, jumping by long idle gaps (2^16
/// epochs and more) and running into `u64::MAX`.
#[test]
fn windows_match_the_ring_model() {
    for seed in 0..120u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let (slice_ns, slices) = CONFIGS[seed as usize % CONFIGS.len()];
        let max_keys = if rng.random_bool(0.3) {
            rng.random_range(0..6)
        } else {
            usize::MAX
        };
        let mut w = windows_of(slice_ns, slices);
        if max_keys != usize::MAX {
            w = w.with_max_keys(max_keys);
        }
        let mut m = RingModel::new(slice_ns, slices, max_keys);
        let window = slice_ns * slices as u64;
        let mut now = match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(0..1 << 40),
            _ => u64::MAX - rng.random_range(0..40 * window),
        };
        for i in 0..500 {
            let ctx = format!("seed {seed} step {i} (S={slices}, L={slice_ns}, max {max_keys})");
            let k = rng.random_range(0..8u32);
            // Reads and evictions around `now` or around the newest slice.
            let base = match m.newest() {
                Some(nw) if rng.random_bool(0.5) => nw * slice_ns,
                _ => now,
            };
            match rng.random_range(0..100) {
                0..=54 => {
                    let t = time_near(&mut rng, now, slice_ns, slices);
                    let n = match rng.random_range(0..40) {
                        0 => 0,
                        1 => COUNT_MAX,
                        2 => COUNT_MAX - 1,
                        _ => rng.random_range(1..6),
                    };
                    let counted = m.add(&k, t, n);
                    match rng.random_range(0..4) {
                        0 => {
                            let want = if counted { m.sum(&k, t) } else { 0 };
                            assert_eq!(w.add_and_sum_at(&k, t, n), want, "{ctx}: add_and_sum");
                        }
                        1 => assert_eq!(w.handle(&k).add_at(t, n), counted, "{ctx}: handle"),
                        _ => assert_eq!(w.add_at(&k, t, n), counted, "{ctx}: add {t} {n}"),
                    }
                }
                55..=66 => now = step(&mut rng, now, slice_ns, slices),
                67..=79 => {
                    let q = time_near(&mut rng, base, slice_ns, slices);
                    assert_eq!(w.sum_at(&k, q), m.sum(&k, q), "{ctx}: sum at {q}");
                    assert_eq!(w.handle(&k).sum_at(q), m.sum(&k, q), "{ctx}: handle sum");
                }
                80..=86 => {
                    let q = time_near(&mut rng, base, slice_ns, slices);
                    let top = rng.random_range(0..8);
                    check_top(w.top_at(q, top), &m.sums(q), top, &ctx);
                }
                87..=93 => {
                    let q = time_near(&mut rng, base, slice_ns, slices);
                    assert_eq!(w.evict_idle_at(q), m.evict(q), "{ctx}: evict at {q}");
                }
                94..=96 => {
                    let mut got = BTreeMap::new();
                    w.take(&k, |e, c| {
                        assert!(c > 0);
                        assert!(got.insert(e, c).is_none(), "{ctx}: epoch {e} taken twice");
                    });
                    assert_eq!(got, m.take(&k), "{ctx}: take {k}");
                }
                _ => assert_eq!(take_all_of(&w), m.take_all(), "{ctx}: take_all"),
            }
            assert_eq!(w.len(), m.len(), "{ctx}: len");
            assert_eq!(w.is_empty(), m.len() == 0, "{ctx}: is_empty");
            assert_eq!(w.untracked_adds(), m.untracked, "{ctx}: untracked");
            if max_keys != usize::MAX {
                assert!(w.len() <= slices * max_keys, "{ctx}: bound");
            }
        }
    }
}

/// At or after the newest add, a key's window sum needs no model of the
/// slots: it is the sum of *every* add of that key whose epoch is in the
/// window (none of them was dropped or overwritten), which is also what a
/// `SlidingWindow` fed the key's adds reads. And an add is dropped exactly
/// when its epoch is a whole window older than the newest epoch added to
/// (by any key). Long gaps (2^16 epochs and their multiples) included.
#[test]
fn sums_at_or_after_the_newest_add_are_every_add_in_the_window() {
    for (ci, &(slice_ns, slices)) in CONFIGS.iter().enumerate() {
        for seed in 0..6u64 {
            let mut rng = StdRng::seed_from_u64(1_000 + 10 * ci as u64 + seed);
            let w = windows_of(slice_ns, slices);
            let window = Duration::from_nanos(slice_ns * slices as u64);
            let refs: Vec<SlidingWindow<ManualClock>> = (0..4)
                .map(|_| SlidingWindow::with_clock(window, slices, ManualClock::new()).unwrap())
                .collect();
            let mut log: Vec<(u32, u64, u64)> = Vec::new(); // key, epoch, n
            let mut newest: Option<u64> = None;
            // The latest time any `SlidingWindow` was fed (reads at or after
            // it are exact there).
            let mut max_t = 0u64;
            let s = slices as u128;
            let mut now = if seed % 3 == 2 { 1 << 50 } else { 0 };
            for i in 0..600 {
                now = step(&mut rng, now, slice_ns, slices).min(u64::MAX / 2);
                let k = rng.random_range(0..4u32);
                let t = time_near(&mut rng, now, slice_ns, slices);
                let n = rng.random_range(1..4);
                let e = t / slice_ns;
                let dropped = newest.is_some_and(|nw| e as u128 + s <= nw as u128);
                assert_eq!(
                    w.add_at(&k, t, n),
                    !dropped,
                    "S={slices} L={slice_ns} seed {seed} step {i}: add at epoch {e}, newest {newest:?}"
                );
                refs[k as usize].add_at(t, n);
                max_t = max_t.max(t);
                if !dropped {
                    log.push((k, e, n));
                    newest = Some(newest.map_or(e, |nw| nw.max(e)));
                }
                let nw = newest.unwrap();
                for key in 0..4u32 {
                    let q = shift(
                        nw * slice_ns,
                        slice_ns,
                        rng.random_range(0..=2 * slices as i64),
                    ) + rng.random_range(0..slice_ns);
                    let qe = q / slice_ns;
                    let want: u64 = log
                        .iter()
                        .filter(|(lk, le, _)| *lk == key && *le <= qe && ((qe - le) as u128) < s)
                        .map(|x| x.2)
                        .sum();
                    let ctx =
                        format!("S={slices} L={slice_ns} seed {seed} step {i} key {key} q {q}");
                    assert_eq!(w.sum_at(&key, q), want, "{ctx}");
                    if q >= max_t {
                        assert_eq!(refs[key as usize].sum_at(q), want, "{ctx}: SlidingWindow");
                    }
                }
            }
        }
    }
}

/// The hot rule against its model, many seeds: every add's report (and the
/// sum `became_hot_at` returns), `is_hot_at`, `hot_keys_at` and the sums at
/// or after the newest add, with late adds (inside and outside the ring),
/// cooling and re-crossing, idle gaps, small per-slice key bounds, and the
/// detector's own `evict_idle_at` (which forgets hot state; the model never
/// does, and must agree).
#[test]
fn hot_rule_matches_the_model() {
    for seed in 0..150u64 {
        let mut rng = StdRng::seed_from_u64(500 + seed);
        let slices = [1usize, 2, 3, 4, 5, 8][seed as usize % 6];
        // Odd seeds: key 0 is a steadily hot key of many small adds, a
        // threshold of 2 to 4 per slice and time moving a slice at a time
        // (its slices grow past `ceil(T / S)` while it is hot already).
        let steady = seed % 2 == 1;
        let threshold = if steady {
            slices as u64 * rng.random_range(2..=4)
        } else {
            rng.random_range(1..25)
        };
        let max_keys = if seed % 5 == 4 {
            rng.random_range(1..4)
        } else {
            usize::MAX
        };
        let mut d = detector(SLICE, slices, threshold);
        if max_keys != usize::MAX {
            d = d.with_max_keys(max_keys);
        }
        let mut m = HotModel::new(SLICE, slices, threshold, max_keys);
        let mut now = 0u64;
        let mut newest_t = 0u64;
        for i in 0..600 {
            let ctx = format!("seed {seed} step {i} (S={slices}, T={threshold}, max {max_keys})");
            match rng.random_range(0..100) {
                0..=69 => {
                    let hot_key = steady && rng.random_bool(0.8);
                    let k = if hot_key {
                        0
                    } else {
                        rng.random_range(0..6u32)
                    };
                    let t = if rng.random_bool(0.8) {
                        now
                    } else {
                        shift(now, SLICE, -rng.random_range(1..=2 * slices as i64))
                    };
                    let n = if hot_key {
                        1
                    } else {
                        rng.random_range(1..=threshold.div_ceil(2) + 1)
                    };
                    let want = m.add(&k, t, n);
                    let got = if rng.random_bool(0.2) {
                        d.handle(&k).became_hot_at(t, n)
                    } else {
                        d.became_hot_at(&k, t, n)
                    };
                    assert_eq!(got, want, "{ctx}: add {n} to {k} at epoch {}", t / SLICE);
                    if m.ring.newest() == Some(t / SLICE) {
                        newest_t = newest_t.max(t);
                    }
                }
                70..=89 => {
                    now = match rng.random_range(0..10) {
                        0 => shift(now, SLICE, slices as i64),
                        1 => shift(now, SLICE, 2 * slices as i64 + 1),
                        2 => shift(now, SLICE, 1 << 17),
                        _ if steady => now + SLICE,
                        _ => now + rng.random_range(0..SLICE * 2),
                    }
                }
                90..=96 => {
                    let q = if rng.random_bool(0.8) {
                        now
                    } else {
                        shift(now, SLICE, rng.random_range(1..=3 * slices as i64))
                    };
                    assert_eq!(d.evict_idle_at(q), m.ring.evict(q), "{ctx}: evict at {q}");
                }
                _ => {
                    let k = rng.random_range(0..6u32);
                    let n = rng.random_range(1..3);
                    let want = m.add(&k, now, n).is_some();
                    assert_eq!(d.add_at(&k, now, n), want, "{ctx}: add_at");
                    if m.ring.newest() == Some(now / SLICE) {
                        newest_t = newest_t.max(now);
                    }
                }
            }
            let q = now.max(newest_t) + rng.random_range(0..SLICE * 2 * slices as u64);
            for key in 0..6u32 {
                assert_eq!(
                    d.windows().sum_at(&key, q),
                    m.ring.sum(&key, q),
                    "{ctx}: sum"
                );
                assert_eq!(
                    d.is_hot_at(&key, q),
                    m.is_hot(&key, q),
                    "{ctx}: is_hot {key}"
                );
                assert_eq!(
                    d.handle(&key).is_hot_at(q),
                    m.is_hot(&key, q),
                    "{ctx}: handle"
                );
            }
            let mut got = d.hot_keys_at(q);
            got.sort_unstable();
            assert_eq!(got, m.hot_keys(q), "{ctx}: hot keys at {q}");
            assert_eq!(d.windows().untracked_adds(), m.ring.untracked, "{ctx}");
        }
    }
}

/// The rule's cases one by one (S = 2, T = 10).
#[test]
fn hot_rule_cases() {
    let e = |x: u64| x * SLICE;
    let d = detector(SLICE, 2, 10);
    // Crossing reports once, with the sum.
    assert_eq!(d.became_hot_at(&1, e(0), 9), None);
    assert_eq!(d.became_hot_at(&1, e(0), 3), Some(12));
    assert_eq!(d.became_hot_at(&1, e(0), 3), None);
    assert!(d.is_hot_at(&1, e(0)));
    // Still at or above the threshold before the add: stays hot, silent.
    assert_eq!(d.became_hot_at(&1, e(1), 1), None);
    assert!(d.is_hot_at(&1, e(1)));
    // The window at 2 holds only slice 1 (1 < T): not hot there.
    assert!(!d.is_hot_at(&1, e(2)));
    // An add at 2: before = 1 < T, cools; after = 2 < T: silent.
    assert_eq!(d.became_hot_at(&1, e(2), 1), None);
    // Re-crossing after cooling reports again.
    assert_eq!(d.became_hot_at(&1, e(2), 8), Some(10));
    // Hot but below the threshold before the add (the window moved):
    // cools and re-crosses in the same add, which reports.
    assert_eq!(d.became_hot_at(&1, e(4), 10), Some(10));
    assert!(d.is_hot_at(&1, e(4)));
    // A late add into an epoch the key is already hot at: silent.
    assert_eq!(d.became_hot_at(&1, e(3), 20), None);
    // An add older than the ring (3 + 2 <= 5 once 5 is installed, by any
    // key) is dropped and decides nothing.
    assert_eq!(d.became_hot_at(&2, e(5), 1), None);
    assert_eq!(d.became_hot_at(&1, e(3), 50), None);
    // Slice 5 took the slot of slice 3 (5 mod 2 = 3 mod 2): the window at
    // 4 holds slice 4 alone now.
    assert_eq!(d.windows().sum_at(&1, e(4)), 10);
    assert_eq!(d.windows().sum_at(&1, e(5)), 10);
}

/// S = 3, T = 10: a key crosses at epoch 0, is hot at 2 (the window at 2
/// holds slice 0), and cools at 4 (slice 0 left the window; no add came at
/// 3, so slice 0 is still installed). A late add at 2, still inside the
/// ring (2 + 3 > 4), sees the window at 2 at or above the threshold: by the
/// rule the key, cold now, becomes hot at 2 and the add reports (the first
/// report at epoch 2).
#[test]
fn late_add_after_cooling_follows_the_rule() {
    let e = |x: u64| x * SLICE;
    let d = detector(SLICE, 3, 10);
    let mut m = HotModel::new(SLICE, 3, 10, usize::MAX);
    let adds = [(e(0), 10), (e(2), 1), (e(4), 1), (e(2), 1)];
    for (t, n) in adds {
        assert_eq!(d.became_hot_at(&7, t, n), m.add(&7, t, n), "add {n} at {t}");
    }
}

/// A hot key's slices that grow heavy (`ceil(T / S)` or more) while the key
/// is already hot at their epoch must keep its hot state alive: a sweep of
/// idle hot state at epoch 4 must not forget a key that is hot there, nor
/// let it report a second crossing.
#[test]
fn hot_state_outlives_sweeps_while_hot() {
    let e = |x: u64| x * SLICE;
    let d = detector(SLICE, 2, 10);
    let mut m = HotModel::new(SLICE, 2, 10, usize::MAX);
    let adds = [
        (7, e(0), 10), // crosses at 0: heavy slice 0
        (7, e(1), 1),  // hot at 1 (before = 10)
        (7, e(1), 10), // slice 1 grows heavy while hot at 1
        (7, e(2), 1),  // hot at 2 (before = 11)
        (7, e(2), 10), // slice 2 heavy
        (7, e(3), 1),  // hot at 3
        (7, e(3), 10), // slice 3 heavy
    ];
    for (k, t, n) in adds {
        assert_eq!(d.became_hot_at(&k, t, n), m.add(&k, t, n), "add {n} at {t}");
    }
    // Another key makes epoch 4 the newest; an eviction at 4 (not after the
    // newest add) drops slices 0..=2 and must forget nothing the rule
    // needs: key 7 is hot at 3, and slice 3 is in the window at 4.
    assert_eq!(d.became_hot_at(&8, e(4), 1), m.add(&8, e(4), 1));
    assert_eq!(d.evict_idle_at(e(4)), m.ring.evict(e(4)));
    assert_eq!(d.is_hot_at(&7, e(4)), m.is_hot(&7, e(4)));
    // The window at 4 holds slice 3 (11 >= T): still hot, no new report.
    assert_eq!(d.became_hot_at(&7, e(4), 10), m.add(&7, e(4), 10));
    assert_eq!(d.is_hot_at(&7, e(4)), m.is_hot(&7, e(4)));
}

/// The detector's `evict_idle_at` at a time after the newest add (the
/// clock moved on while no add came) forgets the hot state of a key hot at
/// the newest epoch; an add at that epoch, still inside the ring, must not
/// report a second crossing (the rule: hot at `he >= e`, nothing).
#[test]
fn detector_eviction_after_the_newest_add_is_invisible() {
    let e = |x: u64| x * SLICE;
    let d = detector(SLICE, 2, 10);
    let mut m = HotModel::new(SLICE, 2, 10, usize::MAX);
    assert_eq!(d.became_hot_at(&7, e(10), 10), Some(10));
    assert_eq!(m.add(&7, e(10), 10), Some(10));
    // At 15 slice 10 left the window: dropped, and the key's hot state.
    assert_eq!(d.evict_idle_at(e(15)), m.ring.evict(e(15)));
    assert!(d.windows().is_empty());
    // Epoch 10 is still the newest: an add there is counted, and the key
    // is hot at 10 already.
    assert_eq!(m.add(&7, e(10), 10), None);
    assert_eq!(d.became_hot_at(&7, e(10), 10), None);
    assert_eq!(d.is_hot_at(&7, e(10)), m.is_hot(&7, e(10)));
}

#[test]
fn became_hot_at_returns_the_sum_including_the_add() {
    let d = HotKeyDetector::with_clock(Duration::from_secs(1), 10, 5, ManualClock::new()).unwrap();
    assert_eq!(d.became_hot_at("k", 0, 3), None);
    assert_eq!(d.became_hot_at("k", 0, 4), Some(7));
    assert_eq!(d.became_hot_at("k", 0, 4), None);
    assert_eq!(d.windows().sum_at("k", 0), 11);
    // Across slices: the sum is the whole window's.
    let slice = 100_000_000;
    assert_eq!(d.became_hot_at("j", 0, 2), None);
    assert_eq!(d.became_hot_at("j", 3 * slice, 2), None);
    assert_eq!(d.became_hot_at("j", 9 * slice, 2), Some(6));
    assert_eq!(d.threshold(), 5);
}

/// A flood of distinct keys fills each slice up to `max_keys` and no more;
/// adds that cannot be tracked return `false` and are counted exactly; a
/// new slice has room again; the whole structure holds at most
/// `slices * max_keys` entries.
#[test]
fn key_flood_is_bounded_per_slice() {
    let w = windows().with_max_keys(100);
    for k in 0..10_000u32 {
        assert_eq!(w.add_at(&k, 0, 1), k < 100, "key {k}");
        assert!(w.len() <= 100);
    }
    assert_eq!(w.len(), 100);
    assert_eq!(w.untracked_adds(), 9_900);
    // Tracked keys keep counting, untracked ones read 0.
    assert_eq!(w.add_and_sum_at(&5, 0, 1), 2);
    assert_eq!(w.sum_at(&5_000, 0), 0);
    assert_eq!(w.add_and_sum_at(&5_000, 0, 1), 0);
    assert_eq!(w.untracked_adds(), 9_901);
    // The next slice has room for 100 keys of its own.
    for k in 20_000..20_150u32 {
        assert_eq!(w.add_at(&k, SLICE, 1), k < 20_100);
    }
    assert_eq!(w.len(), 200);
    assert_eq!(w.untracked_adds(), 9_901 + 50);
    assert_eq!(w.sum_at(&20_000, SLICE), 1);
    // Slice 1 is full: even a key slice 0 holds is not tracked there, and
    // its count in slice 0 still reads.
    assert!(!w.add_at(&5, SLICE, 1));
    assert_eq!(w.sum_at(&5, SLICE), 2);
    // Every slice of the ring full, then the ring wraps: still 5 * 100.
    let mut untracked = 9_901 + 51;
    for s in 2..12u64 {
        for k in 0..150u32 {
            assert_eq!(w.add_at(&(k + 1_000 * s as u32), s * SLICE, 1), k < 100);
        }
        untracked += 50;
        assert_eq!(w.len(), 100 * (s as usize + 1).min(SLICES));
        assert_eq!(w.untracked_adds(), untracked);
    }
    assert_eq!(w.evict_idle_at(100 * SLICE), 500);
    assert!(w.is_empty());
    // A bound of 0 tracks nothing.
    let none = windows().with_max_keys(0);
    assert!(!none.add_at(&1, 0, 1));
    assert_eq!((none.len(), none.untracked_adds()), (0, 1));
}

/// The same from threads: in each slice exactly `max_keys` adds of new
/// keys are tracked (whichever threads win), every other one is counted
/// untracked, and the bound holds throughout.
#[test]
fn key_flood_from_threads_is_bounded_per_slice() {
    const THREADS: u32 = 4;
    const PER: u32 = 2_000;
    const PHASES: u64 = 8;
    let w = Arc::new(windows().with_max_keys(64));
    let barrier = Arc::new(Barrier::new(THREADS as usize + 1));
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (w, barrier) = (w.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut tracked = Vec::new();
                for p in 0..PHASES {
                    barrier.wait();
                    let mut mine = 0u64;
                    for i in 0..PER {
                        let k = (p as u32) * 1_000_000 + t * PER + i;
                        if w.add_at(&k, p * SLICE, 1) {
                            mine += 1;
                        }
                        assert!(w.len() <= SLICES * 64);
                    }
                    tracked.push(mine);
                    barrier.wait();
                }
                tracked
            })
        })
        .collect();
    for p in 0..PHASES {
        barrier.wait();
        barrier.wait();
        assert_eq!(w.len(), 64 * (p as usize + 1).min(SLICES), "phase {p}");
        let untracked = (p + 1) * (THREADS as u64 * PER as u64 - 64);
        assert_eq!(w.untracked_adds(), untracked, "phase {p}");
    }
    let mut per_phase = vec![0u64; PHASES as usize];
    for h in hs {
        for (p, n) in h.join().unwrap().into_iter().enumerate() {
            per_phase[p] += n;
        }
    }
    assert_eq!(per_phase, vec![64; PHASES as usize]);
    // The slices in the window at the last phase hold 64 keys each, 1 each.
    let sums = w.top_at((PHASES - 1) * SLICE, usize::MAX);
    assert_eq!(sums.len(), 64 * SLICES);
    assert!(sums.iter().all(|x| x.1 == 1));
}

/// Threads adding to shared keys (one hot enough that its entry stripes,
/// some cold), through `add` on a shared clock, `add_at`, `add_and_sum_at`
/// and handles, all starting at once: every add is counted, exactly.
/// Contention changes nothing observable but `is_striped_at` and memory: a
/// key's out-of-slot bytes are non-zero exactly when its entry is striped.
/// Rounds repeat (fresh windows each) until the hot key's entry striped, at
/// most 8, so that the striped path is what most runs check.
#[test]
fn concurrent_adds_are_all_counted() {
    const THREADS: u32 = 4;
    let mut striped_rounds = 0;
    for round in 0..8u64 {
        let clock = ManualClock::starting_at(3 * SLICE + 17);
        let w = Arc::new(
            KeyedWindows::with_clock(
                Duration::from_nanos(SLICE * SLICES as u64),
                SLICES,
                clock.clone(),
            )
            .unwrap(),
        );
        let now = clock.now();
        let start = Arc::new(Barrier::new(THREADS as usize));
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (w, start) = (w.clone(), start.clone());
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(round * 10 + t as u64);
                    let mut mine = vec![0u64; 8];
                    let h0 = w.handle(&0u32);
                    start.wait();
                    for i in 0..40_000u64 {
                        let k = if rng.random_bool(0.7) {
                            0
                        } else {
                            rng.random_range(1..8u32)
                        };
                        let n = 1 + i % 3;
                        match i % 4 {
                            0 => assert!(w.add(&k, n)),
                            1 if k == 0 => assert!(h0.add_at(now, n)),
                            2 => {
                                // At least this thread's own adds so far.
                                let s = w.add_and_sum_at(&k, now, n);
                                assert!(s >= mine[k as usize] + n);
                            }
                            _ => assert!(w.add_at(&k, now, n)),
                        }
                        mine[k as usize] += n;
                    }
                    mine
                })
            })
            .collect();
        let mut total = [0u64; 8];
        for h in hs {
            for (t, m) in total.iter_mut().zip(h.join().unwrap()) {
                *t += m;
            }
        }
        for k in 0..8u32 {
            assert_eq!(
                w.sum_at(&k, now),
                total[k as usize],
                "round {round} key {k}"
            );
            assert_eq!(w.sum(&k), total[k as usize], "round {round} key {k}");
            assert_eq!(w.handle(&k).sum_at(now), total[k as usize]);
            let striped = w.is_striped_at(&k, now);
            assert_eq!(w.key_memory_bytes(&k) > 0, striped, "round {round} key {k}");
        }
        assert_eq!(w.len(), 8);
        // The next slice's entry is a fresh one: not striped after one add,
        // and the key's bytes are still those of its striped entry.
        let bytes = w.key_memory_bytes(&0);
        let next = now + SLICE;
        assert!(w.add_at(&0, next, 1));
        assert!(!w.is_striped_at(&0, next));
        assert_eq!(w.key_memory_bytes(&0), bytes);
        assert_eq!(w.sum_at(&0, next), total[0] + 1);
        let mut taken = 0;
        w.take(&0, |_, c| taken += c);
        assert_eq!(taken, total[0] + 1);
        assert_eq!(w.sum_at(&0, next), 0);
        if w.is_striped_at(&0, now) {
            striped_rounds += 1;
            println!("round {round}: the hot key's entry striped ({bytes} bytes)");
            break;
        }
    }
    println!("rounds with a striped hot key: {striped_rounds}");
}

/// Racing adds across one crossing report exactly once (real threads),
/// with a sum at or above the threshold; a window later the key has cooled
/// and the next racing crossing reports exactly once again.
#[test]
fn racing_crossing_reports_once() {
    for round in 0..150u64 {
        let d = Arc::new(
            HotKeyDetector::with_clock(Duration::from_secs(1), 10, 40, ManualClock::new()).unwrap(),
        );
        for (phase, t) in [0u64, 1_000_000_000].into_iter().enumerate() {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let d = d.clone();
                    std::thread::spawn(move || {
                        (0..20)
                            .filter_map(|_| d.became_hot_at(&round, t, 1))
                            .collect::<Vec<u64>>()
                    })
                })
                .collect();
            let reports: Vec<u64> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
            assert_eq!(reports.len(), 1, "round {round} phase {phase}: {reports:?}");
            assert!(
                (40..=80).contains(&reports[0]),
                "round {round}: {reports:?}"
            );
            assert!(d.is_hot_at(&round, t));
            assert_eq!(d.windows().sum_at(&round, t), 80);
        }
    }
}

#[test]
fn handles_add_read_and_reinsert() {
    let w = windows();
    let h = w.handle(&1);
    assert_eq!(*h.key(), 1);
    assert_eq!(h.add_and_sum_at(0, 2), 2);
    assert!(h.add_at(0, 3));
    assert!(h.add_at(0, 0));
    assert_eq!(h.sum_at(0), 5);
    assert_eq!(h.add_and_sum_at(SLICE, 1), 6);
    assert_eq!(w.len(), 2, "one entry in each of two slices");
    // The handle and the map agree.
    assert_eq!(w.sum_at(&1, SLICE), 6);
    // A window after slice 1 both slices are out: evicted whole.
    let later = 6 * SLICE;
    assert_eq!(w.evict_idle_at(later), 2);
    assert_eq!(w.len(), 0);
    assert_eq!(h.sum_at(SLICE), 0);
    // The handle's next add inserts the key again.
    assert_eq!(h.add_and_sum_at(later, 4), 4);
    assert_eq!(w.sum_at(&1, later), 4);
    assert_eq!(w.len(), 1);
    // An add older than the ring through a handle is dropped too.
    assert!(!h.add_at(0, 1));
    assert_eq!(h.add_and_sum_at(0, 1), 0);
    // `add` reads the windows' clock.
    w.clock().set(later);
    assert!(h.add(1));
    assert_eq!(h.sum_at(later), 5);
}

#[test]
fn handle_counts_untracked_when_full() {
    let w = windows().with_max_keys(1);
    assert!(w.add_at(&1, 0, 1));
    let h = w.handle(&2);
    assert!(!h.add_at(0, 1));
    assert_eq!(h.add_and_sum_at(0, 1), 0);
    assert_eq!(w.untracked_adds(), 2);
    // Another slice has room for it.
    assert!(h.add_at(SLICE, 1));
    assert_eq!(h.sum_at(SLICE), 1);
    assert_eq!(w.sum_at(&1, SLICE), 1);
    assert_eq!(w.len(), 2);
    let hd = HotKeyDetector::over(windows().with_max_keys(1), 2).unwrap();
    assert!(!hd.add_at(&1, 0, 1));
    assert!(!hd.handle(&2).add_at(0, 5), "untracked: decides nothing");
    assert!(!hd.is_hot_at(&2, 0));
    assert_eq!(hd.windows().untracked_adds(), 1);
}

/// The ring is global: an add is dropped when its epoch is a whole window
/// older than the newest epoch added to by *any* key, and counted under
/// its own epoch otherwise.
#[test]
fn old_adds_are_dropped_not_misfiled() {
    let w = windows();
    assert!(w.add_at(&1, 10 * SLICE, 1));
    // Epoch 0 (0 + 5 <= 10) is older than the ring, for every key.
    assert!(!w.add_at(&1, 0, 5));
    assert!(!w.add_at(&2, 5 * SLICE, 5));
    assert_eq!(w.len(), 1);
    assert_eq!(w.untracked_adds(), 0);
    assert_eq!(w.sum_at(&1, 10 * SLICE), 1);
    // Epoch 6 is inside it: counted under its own epoch.
    assert!(w.add_at(&1, 6 * SLICE, 2));
    assert!(w.add_at(&2, 6 * SLICE + SLICE - 1, 7));
    assert_eq!(w.sum_at(&1, 10 * SLICE), 3);
    assert_eq!(w.sum_at(&1, 11 * SLICE), 1);
    assert_eq!(w.sum_at(&2, 10 * SLICE), 7);
    assert_eq!(w.sum_at(&2, 11 * SLICE), 0);
    let mut taken = Vec::new();
    w.take(&1, |e, c| taken.push((e, c)));
    taken.sort_unstable();
    assert_eq!(taken, vec![(6, 2), (10, 1)]);
    // Epoch 12 (slot 2) is added to: epoch 6 (slot 1) is out of the ring
    // (6 + 5 <= 12) although its map is still installed (no epoch of slot
    // 1 replaced it): adds there are dropped too, for keys it holds and
    // for new ones.
    assert!(w.add_at(&3, 12 * SLICE, 1));
    assert!(!w.add_at(&2, 6 * SLICE, 1));
    assert!(!w.add_at(&4, 6 * SLICE, 1));
    assert_eq!(w.len(), 4);
}

#[test]
fn zero_adds_record_nothing() {
    let w = windows();
    assert!(w.add_at(&1, 10 * SLICE, 0));
    assert!(w.handle(&1).add_at(10 * SLICE, 0));
    assert_eq!(w.add_and_sum_at(&1, 10 * SLICE, 0), 0);
    assert_eq!(w.len(), 0);
    // Nothing was installed: epoch 0 is not older than the ring.
    assert!(w.add_at(&1, 0, 1));
    assert_eq!(w.add_and_sum_at(&1, 0, 0), 1);
    assert_eq!(w.len(), 1);
    let d = HotKeyDetector::with_clock(Duration::from_secs(1), 10, 1, ManualClock::new()).unwrap();
    assert!(!d.add_at(&1u8, 0, 0));
    assert_eq!(d.became_hot_at(&1u8, 0, 0), None);
    assert!(!d.is_hot_at(&1u8, 0));
    assert!(d.windows().is_empty());
    assert!(d.add_at(&1u8, 0, 1));
}

/// A key's count in one slice saturates at 2^61 - 1; a window sum
/// saturates at `u64::MAX` instead of wrapping.
#[test]
fn saturates_instead_of_wrapping() {
    // 8 saturated slices: 8 * (2^61 - 1) = 2^64 - 8 still fits.
    let w = windows_of(SLICE, 8);
    for e in 0..8u64 {
        assert!(w.add_at(&1, e * SLICE, u64::MAX));
        assert!(w.add_at(&1, e * SLICE, 1), "a saturated slice still counts");
    }
    assert_eq!(w.sum_at(&1, 0), COUNT_MAX);
    assert_eq!(w.sum_at(&1, 7 * SLICE), 8 * COUNT_MAX);
    assert_eq!(w.add_and_sum_at(&1, 7 * SLICE, 5), u64::MAX - 7);
    // 10 of them: the sum saturates.
    let w = windows_of(SLICE, 10);
    for e in 0..10u64 {
        w.add_at(&1, e * SLICE, COUNT_MAX - 1);
        w.add_at(&1, e * SLICE, 2);
    }
    assert_eq!(w.sum_at(&1, 9 * SLICE), u64::MAX);
    assert_eq!(w.top_at(9 * SLICE, 1), vec![(1, u64::MAX)]);
    let mut taken = 0u32;
    w.take(&1, |_, c| {
        assert_eq!(c, COUNT_MAX);
        taken += 1;
    });
    assert_eq!(taken, 10);
    // The detector crosses `u64::MAX` with a saturated sum.
    let d = detector(SLICE, 10, u64::MAX);
    for e in 0..8u64 {
        assert_eq!(d.became_hot_at(&1, e * SLICE, u64::MAX), None);
    }
    assert_eq!(d.became_hot_at(&1, 8 * SLICE, u64::MAX), Some(u64::MAX));
    assert!(d.is_hot_at(&1, 9 * SLICE));
}

/// An add larger than what a slice's count can still take, to a key its
/// slice already holds (the one-CAS fast path), saturates too; it never
/// wraps the count or reaches the entry's flag bits. (Checked with `take`,
/// which does not wait on the flags, before any read that would.)
#[test]
fn huge_adds_to_a_held_key_saturate() {
    let w = windows();
    assert!(w.add_at(&1, 0, 5));
    assert!(w.add_at(&1, 0, u64::MAX));
    let mut taken = Vec::new();
    w.take(&1, |e, c| taken.push((e, c)));
    assert_eq!(taken, vec![(0, COUNT_MAX)]);
    assert!(w.add_at(&2, 0, 1));
    assert!(w.add_at(&2, 0, 1 << 62));
    taken.clear();
    w.take(&2, |e, c| taken.push((e, c)));
    assert_eq!(taken, vec![(0, COUNT_MAX)]);
    assert!(w.add_at(&3, 0, 1));
    assert!(w.add_at(&3, 0, COUNT_MAX));
    assert_eq!(w.sum_at(&3, 0), COUNT_MAX);
    assert!(!w.is_striped_at(&2, 0));
    assert_eq!(w.add_and_sum_at(&2, 0, 1), 1);
    assert_eq!(w.sum_at(&1, 0), 0);
}

/// `String` keys looked up by `&str` (and `Vec<u8>` by `&[u8]`) through
/// every per-key method.
#[test]
fn borrowed_lookups() {
    let w: KeyedWindows<String, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(1), 10, ManualClock::new()).unwrap();
    assert!(w.add_at("alpha", 0, 2));
    assert!(w.add_at(&"alpha".to_string(), 0, 1));
    assert_eq!(w.add_and_sum_at("beta", 0, 1), 1);
    assert_eq!(w.sum_at("alpha", 0), 3);
    assert_eq!(
        w.top_at(0, 5),
        vec![("alpha".to_string(), 3), ("beta".to_string(), 1)]
    );
    let h = w.handle("alpha");
    assert_eq!(h.key(), "alpha");
    assert_eq!(h.add_and_sum_at(0, 1), 4);
    assert!(!w.is_striped_at("alpha", 0));
    assert_eq!(w.key_memory_bytes("alpha"), 0);
    let mut taken = Vec::new();
    w.take("alpha", |e, c| taken.push((e, c)));
    assert_eq!(taken, vec![(0, 4)]);
    let d: HotKeyDetector<String, ManualClock> =
        HotKeyDetector::with_clock(Duration::from_secs(1), 10, 2, ManualClock::new()).unwrap();
    assert!(!d.add_at("x", 0, 1));
    assert_eq!(d.became_hot_at("x", 0, 1), Some(2));
    assert!(d.is_hot_at("x", 0));
    assert_eq!(d.hot_keys_at(0), vec!["x".to_string()]);
    let b: KeyedWindows<Vec<u8>, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(1), 10, ManualClock::new()).unwrap();
    assert!(b.add_at(&b"k"[..], 0, 3));
    assert_eq!(b.sum_at(&b"k"[..], 0), 3);
}

/// Memory of 100k `u64` keys each added once in one slice: a slot of 32
/// bytes (the key and its entry) plus a control byte, in tables kept
/// between 7/12 and 7/8 full (`map.rs`, "Growth"), is 38 to 57 bytes a key
/// (measured: 42.7 on x86-64); asserted at most 96, which also holds for
/// tables that grow by doubling from half full (66). Keys that were never
/// contended hold nothing outside their slots.
#[test]
fn memory_per_key() {
    const KEYS: u64 = 100_000;
    let w: KeyedWindows<u64, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(10), 10, ManualClock::new()).unwrap();
    let empty = w.memory_bytes();
    for k in 0..KEYS {
        assert!(w.add_at(&k, 5, 1));
    }
    assert_eq!(w.len(), KEYS as usize);
    let per_key = (w.memory_bytes() - empty) as f64 / KEYS as f64;
    println!("memory per key (100k u64 keys, one slice): {per_key:.1} bytes");
    assert!(per_key >= 32.0, "{per_key}");
    assert!(per_key <= 96.0, "{per_key}");
    for k in (0..KEYS).step_by(997) {
        assert_eq!(w.key_memory_bytes(&k), 0);
        assert!(!w.is_striped_at(&k, 5));
    }
    assert_eq!(w.key_memory_bytes(&KEYS), 0, "an absent key");
    // The same keys in a second slice: twice the entries, about twice the
    // memory.
    for k in 0..KEYS {
        assert!(w.add_at(&k, 1_000_000_000, 1));
    }
    assert_eq!(w.len(), 2 * KEYS as usize);
    assert_eq!(w.sum_at(&7, 1_000_000_000), 2);
    // Both slices leave the window: dropped whole.
    assert_eq!(w.evict_idle_at(1 << 60), 2 * KEYS as usize);
    assert_eq!(w.len(), 0);
    assert!(w.memory_bytes() <= empty, "{} > {empty}", w.memory_bytes());
}

/// Gaps after which an epoch falls in the same slot as an earlier one (a
/// multiple of `S` epochs, 2^16 multiples among them): nothing of the old
/// slice is read as the new one, the old slice is replaced for every key,
/// and adds into it are dropped.
#[test]
fn same_slot_after_a_gap_is_not_aliased() {
    const TAG: u64 = 1 << 16;
    for &(slices, start) in &[
        (4usize, 0u64),
        (4, 3),
        (5, 7),
        (2, 8191),
        (4, 1 << 40),
        (1, 9),
    ] {
        for k in 1..=6u64 {
            let w = windows_of(1, slices);
            let s = slices as u64;
            assert_eq!(w.add_and_sum_at(&1, start, 5), 5);
            assert!(w.add_at(&2, start, 1));
            if slices > 1 {
                assert_eq!(w.add_and_sum_at(&1, start + 1, 1), 6);
            }
            let fars = if s == 1 {
                vec![start + k * TAG]
            } else {
                vec![start + k * TAG, start + k * s * TAG]
            };
            for far in fars {
                let ctx = format!("S={slices} start {start} far {far}");
                // Nothing was added since: the window at `far` is empty.
                assert_eq!(w.sum_at(&1, far), 0, "{ctx}");
                assert_eq!(w.add_and_sum_at(&1, far, 1), 1, "{ctx}");
                // The old epochs are older than the ring now.
                assert!(!w.add_at(&1, start, 1), "{ctx}");
                assert!(!w.add_at(&2, start, 1), "{ctx}");
                assert_eq!(w.sum_at(&1, far), 1, "{ctx}");
                assert_eq!(w.sum_at(&2, far), 0, "{ctx}");
                assert_eq!(w.sum_at(&1, far + s), 0, "{ctx}");
                // An add just inside the ring, in the past, is counted.
                if slices > 1 {
                    assert_eq!(w.add_and_sum_at(&1, far - 1, 2), 2, "{ctx}");
                    assert_eq!(w.sum_at(&1, far), 3, "{ctx}");
                }
            }
        }
    }
}

/// Epochs at the top of the range (1 ns slices: epoch = time): no
/// overflow, the ring rule and the window bounds hold up to `u64::MAX`.
#[test]
fn epochs_near_the_ends_of_the_range() {
    let w = windows_of(1, 4);
    assert_eq!(w.add_and_sum_at(&1, 0, 1), 1);
    assert_eq!(w.add_and_sum_at(&1, 3, 1), 2);
    assert_eq!(w.add_and_sum_at(&1, 4, 1), 2);
    let top = u64::MAX - 2;
    assert_eq!(w.add_and_sum_at(&1, top, 1), 1);
    assert_eq!(w.add_and_sum_at(&1, u64::MAX, 2), 3);
    assert_eq!(w.sum_at(&1, u64::MAX), 3);
    assert_eq!(w.add_and_sum_at(&2, u64::MAX, 7), 7);
    // Older than the ring (MAX - 5 + 4 <= MAX): dropped.
    assert!(!w.add_at(&2, u64::MAX - 5, 1));
    assert!(!w.add_at(&2, u64::MAX - 4, 1));
    assert_eq!(w.sum_at(&2, u64::MAX), 7);
    // Inside it: counted under its own epoch.
    assert!(w.add_at(&2, u64::MAX - 3, 1));
    assert_eq!(w.sum_at(&2, u64::MAX), 8);
    assert_eq!(w.sum_at(&2, u64::MAX - 3), 1);
    // Slices MAX - 3 ..= MAX are all in the window at MAX: nothing to
    // evict there (MAX - 3 + 4 > MAX).
    assert_eq!(w.len(), 4);
    assert_eq!(w.evict_idle_at(u64::MAX), 0);
    assert_eq!(w.sum_at(&1, u64::MAX), 3);
    assert_eq!(w.sum_at(&2, u64::MAX), 8);
    // The newest epoch is `u64::MAX`: epoch 12 (an empty slot) is older
    // than the ring.
    let w = windows_of(1, 4);
    assert!(w.add_at(&1, 10, 1));
    assert!(w.add_at(&1, u64::MAX, 1));
    assert!(!w.add_at(&1, 12, 1));
    assert_eq!(w.len(), 2);
    // The detector at the top of the range.
    let d = detector(1, 4, 3);
    assert_eq!(d.became_hot_at(&1, u64::MAX - 1, 2), None);
    assert_eq!(d.became_hot_at(&1, u64::MAX, 1), Some(3));
    assert!(d.is_hot_at(&1, u64::MAX));
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let err =
        |window: Duration, slices: usize| KeyedWindows::<u8>::new(window, slices).unwrap_err();
    assert_eq!(err(Duration::ZERO, 10), ConfigError::ZeroWindow);
    assert_eq!(err(Duration::from_secs(1), 0), ConfigError::ZeroSlices);
    assert_eq!(
        err(Duration::from_secs(1), MAX_SLICES + 1),
        ConfigError::TooManySlices {
            slices: MAX_SLICES + 1,
            max: MAX_SLICES
        }
    );
    assert_eq!(
        err(Duration::from_nanos(10), 3),
        ConfigError::UnevenSlices {
            window: Duration::from_nanos(10),
            slices: 3
        }
    );
    assert_eq!(
        err(Duration::MAX, 1),
        ConfigError::WindowTooLong {
            window: Duration::MAX
        }
    );
    assert!(KeyedWindows::<u8>::new(Duration::from_nanos(MAX_SLICES as u64), MAX_SLICES).is_ok());
    assert!(matches!(
        HotKeyDetector::<u8>::new(Duration::from_secs(1), 10, 0).unwrap_err(),
        ConfigError::Invalid(_)
    ));
    assert_eq!(
        HotKeyDetector::<u8>::new(Duration::from_secs(1), 0, 5).unwrap_err(),
        ConfigError::ZeroSlices
    );
    assert!(matches!(
        HotKeyDetector::over(windows(), 0).unwrap_err(),
        ConfigError::Invalid(_)
    ));
}

#[test]
fn real_clock_adds() {
    let d = HotKeyDetector::new(Duration::from_secs(3600), 10, 2).unwrap();
    assert!(!d.add(&"x", 1));
    assert!(d.add(&"x", 1));
    assert!(d.is_hot(&"x"));
    let w = KeyedWindows::new(Duration::from_secs(3600), 10).unwrap();
    assert_eq!(w.add_and_sum(&1u8, 3), 3);
    assert!(w.add(&1u8, 1));
    assert!(w.increment(&1u8));
    assert_eq!(w.sum(&1u8), 5);
    assert!(w.handle(&1u8).add(1));
    assert_eq!(w.sum(&1u8), 6);
    assert_eq!(w.window(), Duration::from_secs(3600));
    assert_eq!(w.slices(), 10);
    assert_eq!(w.slice_len(), Duration::from_secs(360));
    assert_eq!(w.epoch_at(720_000_000_000), 2);
}

#[test]
fn hot_handle_follows_the_rule() {
    let d = detector(SLICE, SLICES, 4);
    let mut m = HotModel::new(SLICE, SLICES, 4, usize::MAX);
    let h = d.handle(&9u32);
    assert_eq!(*h.key(), 9);
    assert_eq!(h.became_hot_at(0, 3), m.add(&9, 0, 3));
    // The detector and the handle share the key's state.
    assert_eq!(d.became_hot_at(&9, 0, 1), Some(4));
    assert_eq!(m.add(&9, 0, 1), Some(4));
    assert!(!h.add_at(0, 1));
    m.add(&9, 0, 1);
    assert!(h.is_hot_at(0));
    // A window later the key has cooled; the handle re-crosses alone.
    let later = SLICE * SLICES as u64;
    assert!(!h.is_hot_at(later));
    assert!(!h.add_at(later, 2));
    assert_eq!(m.add(&9, later, 2), None);
    assert_eq!(h.became_hot_at(later, 2), Some(4));
    assert_eq!(m.add(&9, later, 2), Some(4));
    // Everything evicted (slice 5 took slice 0's slot: one entry left): the
    // handle's adds insert the key again, and the rule (cool first, then
    // cross) reports again.
    let much_later = 3 * later;
    assert_eq!(d.evict_idle_at(much_later), 1);
    assert_eq!(m.ring.evict(much_later), 1);
    assert!(d.windows().is_empty());
    assert!(!h.add_at(much_later, 1));
    assert_eq!(m.add(&9, much_later, 1), None);
    assert!(h.add_at(much_later, 3));
    assert_eq!(m.add(&9, much_later, 3), Some(4));
    assert_eq!(d.windows().sum_at(&9, much_later), 4);
    // The clock's `add`.
    d.windows().clock().set(much_later);
    assert!(!h.add(1));
    assert!(h.is_hot_at(much_later));
    assert!(d.is_hot(&9));
}

/// Keys moving to bigger tables while other threads add to them, read them
/// and flood their slices with new keys: every add is counted exactly once
/// under its own epoch, and a reader never sees a key's sum go down (no
/// slice leaves the window read, so it only grows), whatever the moves.
#[test]
fn table_moves_under_concurrent_adds_lose_nothing() {
    for round in 0..3u64 {
        let w = Arc::new(windows());
        let stop = Arc::new(AtomicBool::new(false));
        let q = 4 * SLICE; // the window at epoch 4 holds epochs 0..=4
        let adders: Vec<_> = (0..2u64)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    let mut mine = HashMap::new();
                    for i in 0..40_000u64 {
                        let k = ((i * 7 + t * 13 + round) % 64) as u32;
                        let e = i / 10_000;
                        assert!(w.add_at(&k, e * SLICE + i % SLICE, 1));
                        *mine.entry((k, e)).or_insert(0u64) += 1;
                    }
                    mine
                })
            })
            .collect();
        let reader = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = [0u64; 64];
                while !stop.load(Ordering::Relaxed) {
                    for k in 0..64u32 {
                        let s = w.sum_at(&k, q);
                        assert!(
                            s >= last[k as usize],
                            "key {k}: {s} after {}",
                            last[k as usize]
                        );
                        last[k as usize] = s;
                    }
                }
            })
        };
        // Two floods: one into slice 0, one into slice 3.
        let floods: Vec<_> = [(0u64, 1_000u32), (3, 100_000)]
            .into_iter()
            .map(|(e, base)| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for k in base..base + 30_000 {
                        assert!(w.add_at(&k, e * SLICE, 1));
                    }
                })
            })
            .collect();
        let mut added: HashMap<(u32, u64), u64> = HashMap::new();
        for a in adders {
            for (k, n) in a.join().unwrap() {
                *added.entry(k).or_default() += n;
            }
        }
        for f in floods {
            f.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        for k in 0..64u32 {
            let want: u64 = (0..4)
                .map(|e| added.get(&(k, e)).copied().unwrap_or(0))
                .sum();
            assert_eq!(w.sum_at(&k, q), want, "round {round} key {k}");
        }
        for k in (1_000..31_000u32).chain(100_000..130_000) {
            assert_eq!(w.sum_at(&k, q), 1, "round {round} key {k}");
        }
        assert_eq!(w.len(), 60_000 + added.len());
        let mut taken = take_all_of(&w);
        taken.retain(|(k, _), _| *k < 64);
        let added: BTreeMap<(u32, u64), u64> = added.into_iter().collect();
        assert_eq!(taken, added, "round {round}: per key and epoch");
    }
}

/// `take_all` racing adds: what was taken plus what stays equals what was
/// added, per key and per epoch. (Times stay inside one window, so no
/// count leaves the ring before it is taken.)
#[test]
fn take_all_racing_adds_is_exact() {
    let w = Arc::new(windows());
    let done = Arc::new(AtomicUsize::new(0));
    let adders: Vec<_> = (0..2u32)
        .map(|t| {
            let (w, done) = (w.clone(), done.clone());
            std::thread::spawn(move || {
                let mut added = BTreeMap::new();
                for i in 0..30_000u64 {
                    let k = ((i as u32) * 3 + t) % 40;
                    let now = (i / 7_500) * SLICE;
                    assert!(w.add_at(&k, now, 1));
                    *added.entry((k, now / SLICE)).or_insert(0u64) += 1;
                }
                done.fetch_add(1, Ordering::Release);
                added
            })
        })
        .collect();
    // Take while the adders run (until both are done).
    let mut taken: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    let mut take_one = 0u64;
    let mut i = 0u32;
    while done.load(Ordering::Acquire) < 2 {
        if i % 4 == 0 {
            let k = (i / 4) % 40;
            w.take(&k, |e, c| {
                *taken.entry((k, e)).or_default() += c;
                take_one += c;
            });
        } else {
            w.take_all(|k, e, c| *taken.entry((*k, e)).or_default() += c);
        }
        i += 1;
    }
    let mut added: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for a in adders {
        for (k, v) in a.join().unwrap() {
            *added.entry(k).or_default() += v;
        }
    }
    let remaining: u64 = (0..40u32).map(|k| w.sum_at(&k, 4 * SLICE)).sum();
    let taken_so_far: u64 = taken.values().sum();
    assert_eq!(taken_so_far + remaining, 60_000);
    w.take_all(|k, e, c| *taken.entry((*k, e)).or_default() += c);
    assert_eq!(taken, added);
    for k in 0..40u32 {
        assert_eq!(w.sum_at(&k, 4 * SLICE), 0);
    }
    // The entries stay (at zero) until their slices leave the window.
    assert_eq!(w.len(), 4 * 40);
    println!("{i} takes while adding; {take_one} taken by `take`");
}

/// The ring rotating under racing adds, with times controlled: in each
/// phase `p` every thread adds at `p` (installing the slice races), at
/// `p - S + 1` (late, inside the ring: always counted) and at `p - S`
/// (outside the ring once `p` is installed: counted into the slice being
/// replaced or dropped, never visible in a window at `p` or later), while a
/// reader checks that the window at `p` stays between what the previous
/// phases and this one added. After each phase the window sums are exact.
#[test]
fn rotation_racing_adds_keeps_windows_exact() {
    const THREADS: usize = 3;
    const KEYS: u32 = 8;
    const PER: u32 = 3_000;
    const PHASES: u64 = 24;
    for slices in [1usize, 4] {
        let s = slices as u64;
        // Where each add of thread `t`, phase `p`, index `i` goes:
        // (key, epoch, visible in windows).
        let add_of = move |t: usize, p: u64, i: u32| -> (u32, u64, bool) {
            let key = (i + t as u32) % KEYS;
            match i % 10 {
                0 if p + 1 >= s => (key, p + 1 - s, true),
                1 if p >= s => (key, p - s, false),
                _ => (key, p, true),
            }
        };
        // visible[(key, epoch, phase)]: visible adds made in `phase`.
        let mut visible: HashMap<(u32, u64, u64), u64> = HashMap::new();
        for p in 0..PHASES {
            for t in 0..THREADS {
                for i in 0..PER {
                    let (k, e, v) = add_of(t, p, i);
                    if v {
                        *visible.entry((k, e, p)).or_default() += 1;
                    }
                }
            }
        }
        let visible = Arc::new(visible);
        // The window sum at `p` of adds made in phases `<= upto`.
        let expect = {
            let visible = visible.clone();
            move |k: u32, p: u64, upto: u64| -> u64 {
                let first = (p + 1).saturating_sub(s);
                (first..=p)
                    .flat_map(|e| (0..=upto).map(move |ph| (e, ph)))
                    .map(|(e, ph)| visible.get(&(k, e, ph)).copied().unwrap_or(0))
                    .sum()
            }
        };
        let w = Arc::new(windows_of(SLICE, slices));
        let phase = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(THREADS + 1));
        let adders: Vec<_> = (0..THREADS)
            .map(|t| {
                let (w, barrier) = (w.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut old_counted = 0u64;
                    for p in 0..PHASES {
                        barrier.wait();
                        for i in 0..PER {
                            let (k, e, v) = add_of(t, p, i);
                            let counted = w.add_at(&k, e * SLICE + (i as u64 % SLICE), 1);
                            if v {
                                assert!(counted, "phase {p}: an add at {e} inside the ring");
                            } else if counted {
                                old_counted += 1;
                            }
                        }
                        barrier.wait();
                    }
                    old_counted
                })
            })
            .collect();
        let reader = {
            let (w, phase, stop, expect) = (w.clone(), phase.clone(), stop.clone(), expect.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let p = phase.load(Ordering::SeqCst);
                    let k = (checks % KEYS as u64) as u32;
                    let got = w.sum_at(&k, p * SLICE);
                    assert!(w.len() <= slices * KEYS as usize);
                    if phase.load(Ordering::SeqCst) != p {
                        continue;
                    }
                    let (lo, hi) = (
                        p.checked_sub(1).map_or(0, |q| expect(k, p, q)),
                        expect(k, p, p),
                    );
                    assert!(
                        lo <= got && got <= hi,
                        "S={s} phase {p} key {k}: {got} not in {lo}..={hi}"
                    );
                    checks += 1;
                }
                checks
            })
        };
        for p in 0..PHASES {
            phase.store(p, Ordering::SeqCst);
            barrier.wait();
            barrier.wait();
            let mut sums = BTreeMap::new();
            for k in 0..KEYS {
                let want = expect(k, p, p);
                assert_eq!(w.sum_at(&k, p * SLICE), want, "S={s} phase {p} key {k}");
                sums.insert(k, want);
            }
            check_top(
                w.top_at(p * SLICE, 3),
                &sums,
                3,
                &format!("S={s} phase {p}"),
            );
            assert_eq!(w.len(), (p as usize + 1).min(slices) * KEYS as usize);
        }
        let old: u64 = adders.into_iter().map(|a| a.join().unwrap()).sum();
        stop.store(true, Ordering::SeqCst);
        let checks = reader.join().unwrap();
        println!("S={s}: {old} adds outside the ring counted into replaced slices, {checks} reads");
    }
}

/// Free-running threads, each moving through the epochs on its own (so
/// some run a window or more ahead of others), with readers: an add is
/// dropped only if its epoch is a whole window older than the newest epoch
/// at the end; every add at an epoch of the final window is counted and
/// read; and every slice still installed holds exactly the adds that were
/// counted at its epoch (one map per epoch, ever).
#[test]
fn free_running_rotation_follows_the_ring_rule() {
    const THREADS: u64 = 3;
    const KEYS: u32 = 6;
    const EPOCHS: u64 = 60;
    const PER: u64 = 400;
    for slices in [2usize, 5] {
        let s = slices as u64;
        let w = Arc::new(windows_of(SLICE, slices));
        let newest_seen = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let adders: Vec<_> = (0..THREADS)
            .map(|t| {
                let (w, newest_seen) = (w.clone(), newest_seen.clone());
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    let mut counted: HashMap<(u32, u64), u64> = HashMap::new();
                    let mut dropped: Vec<u64> = Vec::new();
                    for p in 0..EPOCHS {
                        newest_seen.fetch_max(p, Ordering::Relaxed);
                        for i in 0..PER {
                            let k = ((i + t) % KEYS as u64) as u32;
                            // Mostly at `p`; sometimes up to S + 1 back.
                            let e = if rng.random_bool(0.8) {
                                p
                            } else {
                                p.saturating_sub(rng.random_range(1..=s + 1))
                            };
                            if w.add_at(&k, e * SLICE, 1) {
                                *counted.entry((k, e)).or_default() += 1;
                            } else {
                                dropped.push(e);
                            }
                        }
                    }
                    (counted, dropped)
                })
            })
            .collect();
        let readers: Vec<_> = (0..1)
            .map(|_| {
                let (w, newest_seen, stop) = (w.clone(), newest_seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    let bound = THREADS * PER * s;
                    while !stop.load(Ordering::Relaxed) {
                        let q = newest_seen.load(Ordering::Relaxed) * SLICE;
                        for k in 0..KEYS {
                            assert!(w.sum_at(&k, q) <= bound);
                        }
                        for (_, c) in w.top_at(q, 2) {
                            assert!(c <= bound);
                        }
                        assert!(w.len() <= slices * KEYS as usize);
                    }
                })
            })
            .collect();
        let mut counted: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        let mut dropped = 0u64;
        for a in adders {
            let (c, d) = a.join().unwrap();
            for (k, n) in c {
                *counted.entry(k).or_default() += n;
            }
            for e in d {
                assert!(e + s < EPOCHS, "S={s}: an add at {e} dropped");
                dropped += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        let last = EPOCHS - 1;
        let first = last + 1 - s;
        for k in 0..KEYS {
            let want: u64 = (first..=last)
                .map(|e| counted.get(&(k, e)).copied().unwrap_or(0))
                .sum();
            assert_eq!(w.sum_at(&k, last * SLICE), want, "S={s} key {k}");
        }
        let taken = take_all_of(&w);
        let epochs: std::collections::BTreeSet<u64> = taken.keys().map(|x| x.1).collect();
        assert_eq!(
            epochs,
            (first..=last).collect(),
            "S={s}: the installed slices are the final window's"
        );
        for ((k, e), c) in &taken {
            assert_eq!(counted.get(&(*k, *e)), Some(c), "S={s} key {k} epoch {e}");
        }
        for k in 0..KEYS {
            for e in first..=last {
                let (t, c) = (taken.get(&(k, e)), counted.get(&(k, e)));
                assert_eq!(t, c, "S={s} key {k} epoch {e} of the final window");
            }
        }
        println!("S={s}: {dropped} adds dropped as older than the ring");
    }
}

/// `evict_idle_at(now)` returns exactly the entries of the slices it drops
/// (the model's count), drops nothing a window at or after `now` reads, and
/// slices are also dropped by the adds that replace them.
#[test]
fn evict_idle_at_is_exact_and_invisible_at_or_after_now() {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(9_000 + seed);
        let slices = [1usize, 2, 3, 5, 8][seed as usize % 5];
        let w = windows_of(SLICE, slices);
        let mut m = RingModel::new(SLICE, slices, usize::MAX);
        let mut now = 0u64;
        for i in 0..300 {
            now = step(&mut rng, now, SLICE, slices).min(1 << 62);
            for _ in 0..rng.random_range(0..6) {
                let k = rng.random_range(0..20u32);
                let t = time_near(&mut rng, now, SLICE, slices);
                assert_eq!(w.add_at(&k, t, 1), m.add(&k, t, 1), "seed {seed} step {i}");
            }
            let at = shift(
                now,
                SLICE,
                rng.random_range(-(slices as i64)..=2 * slices as i64),
            );
            let reads: Vec<u64> = (0..4)
                .map(|j| shift(at, SLICE, j * slices as i64 / 2) + rng.random_range(0..SLICE))
                .collect();
            let before: Vec<Vec<u64>> = reads
                .iter()
                .map(|&q| (0..20u32).map(|k| w.sum_at(&k, q)).collect())
                .collect();
            let len = w.len();
            let evicted = w.evict_idle_at(at);
            assert_eq!(evicted, m.evict(at), "seed {seed} step {i}");
            assert_eq!(w.len(), len - evicted);
            assert_eq!(w.len(), m.len());
            for (q, b) in reads.iter().zip(before) {
                let after: Vec<u64> = (0..20u32).map(|k| w.sum_at(&k, *q)).collect();
                assert_eq!(
                    after, b,
                    "seed {seed} step {i}: sums at {q} after evicting at {at}"
                );
            }
            // A second call at the same time has nothing left to drop.
            assert_eq!(w.evict_idle_at(at), 0);
        }
    }
    // Slices dropped by rotation, then by eviction.
    let w = windows();
    for e in 0..5u64 {
        for k in 0..=e as u32 {
            w.add_at(&k, e * SLICE, 1);
        }
    }
    assert_eq!(w.len(), 1 + 2 + 3 + 4 + 5);
    // Epoch 5 replaces slice 0 (1 entry) and adds one.
    assert!(w.add_at(&9, 5 * SLICE, 1));
    assert_eq!(w.len(), 2 + 3 + 4 + 5 + 1);
    // At epoch 8 the slices 1..=3 are out of the window.
    assert_eq!(w.evict_idle_at(8 * SLICE + SLICE - 1), 2 + 3 + 4);
    assert_eq!(w.len(), 5 + 1);
    assert_eq!(w.sum_at(&4, 8 * SLICE), 1);
    assert_eq!(w.evict_idle_at(10 * SLICE), 6);
    assert!(w.is_empty());
}

/// Evictions racing adds: adds at the evictor's time are never dropped;
/// the stale slice is dropped exactly once (by one of the evictions).
#[test]
fn eviction_racing_adds_loses_nothing() {
    for round in 0..20u64 {
        let w = Arc::new(windows());
        for k in 0..50u32 {
            w.add_at(&k, 0, 1);
        }
        // An epoch a window or more later, not in slot 0: only an eviction
        // drops slice 0.
        let later = (SLICES as u64 * (round + 1) + 1 + round % 3) * SLICE;
        let evictors: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || (0..20).map(|_| w.evict_idle_at(later)).sum::<usize>())
            })
            .collect();
        let adders: Vec<_> = (0..2u32)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u32 {
                        assert!(w.add_at(&((i + t) % 50), later, 1));
                    }
                })
            })
            .collect();
        for a in adders {
            a.join().unwrap();
        }
        let evicted: usize = evictors.into_iter().map(|e| e.join().unwrap()).sum();
        assert_eq!(evicted, 50, "round {round}");
        let total: u64 = (0..50u32).map(|k| w.sum_at(&k, later)).sum();
        assert_eq!(total, 4_000);
        assert_eq!(w.len(), 50);
    }
}

/// The module's count of pending hot state stays bounded by the keys that
/// were heavy recently (it is dropped by the detector's `evict_idle_at`).
#[test]
fn detector_eviction_drops_idle_hot_state() {
    let d = detector(SLICE, 4, 8);
    for k in 0..100u32 {
        assert!(d.add_at(&k, 0, 8));
    }
    assert_eq!(d.heavy_keys(), 100);
    assert_eq!(d.hot_keys_at(0).len(), 100);
    // Two windows later the slices go; the hot state stays while no add
    // has moved the ring past epoch 0 (an add at 0 would still decide).
    assert_eq!(d.evict_idle_at(8 * SLICE), 100);
    assert_eq!(d.heavy_keys(), 100);
    assert!(d.hot_keys_at(8 * SLICE).is_empty());
    // The keys cross again as the rule says (cooled, then crossed), and
    // once the ring is at epoch 8 the idle keys' hot state goes.
    assert!(d.add_at(&1, 8 * SLICE, 8));
    d.evict_idle_at(8 * SLICE);
    assert_eq!(d.heavy_keys(), 1, "key 1 is heavy at epoch 8");
    assert!(!d.add_at(&1, 8 * SLICE, 1), "already hot at 8");
}

/// `take_all` through a detector's windows and the clock accessors of a
/// detector (smoke of the plumbing the CLI uses).
#[test]
fn detector_windows_take_and_debug() {
    let d = detector(SLICE, SLICES, 3);
    d.add_at(&1, 0, 2);
    d.add_at(&1, SLICE, 2);
    let mut got = Vec::new();
    d.windows().take_all(|k, e, c| got.push((*k, e, c)));
    got.sort_unstable();
    assert_eq!(got, vec![(1, 0, 2), (1, 1, 2)]);
    assert!(format!("{d:?}").contains("threshold: 3"));
    assert!(format!("{:?}", d.windows()).contains("slices: 5"));
    let counter = AtomicUsize::new(0);
    d.windows().take(&1, |_, _| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(counter.load(Ordering::Relaxed), 0, "everything was taken");
}
