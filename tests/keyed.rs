//! Per-key windows (the slice-major engine of `src/keyed/`) against the
//! reference models of `keyed_model/`: the global slice ring (an add at
//! epoch `e` is dropped iff `e + S <= N`, `N` the newest epoch any add
//! installed; an add whose slot holds an older epoch replaces that slice for
//! every key), per-slice key bounds, eviction of whole slices, long gaps and
//! the ends of the epoch range. The edges of single operations (handles,
//! saturation, borrowed keys, memory, configuration) are in
//! `keyed_edges.rs`, the hot rule in `keyed_hot.rs`, the threaded tests in
//! `keyed_threads.rs` and `keyed_rotation.rs`.

mod keyed_model;
mod keyed_support;

use keyed_model::{RingModel, COUNT_MAX};
use keyed_support::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::SlidingWindow;

/// Every public operation of `KeyedWindows`, many seeds, against the slice
/// ring model: add results, sums at any time, `top_at`, `len`,
/// `untracked_adds`, `evict_idle_at`'s count, `take` and `take_all`, with
/// times moving forward, stepping back, jumping by long idle gaps (2^16
/// epochs and more) and running into `u64::MAX`.
#[test]
fn windows_match_the_ring_model() {
    for seed in 0..sized(120u64, 4) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (slice_ns, slices) = CONFIGS[seed as usize % CONFIGS.len()];
        let max_keys = if rng.random_bool(0.3) {
            rng.random_range(0..6)
        } else {
            usize::MAX
        };
        let mut b = windows_builder(slice_ns, slices);
        if max_keys != usize::MAX {
            b = b.max_keys(max_keys);
        }
        let w = b.build().unwrap();
        let mut m = RingModel::new(slice_ns, slices, max_keys);
        let window = slice_ns * slices as u64;
        let mut now = match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(0..1 << 40),
            _ => u64::MAX - rng.random_range(0..40 * window),
        };
        for i in 0..sized(500, 4) {
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
                            assert_eq!(w.add_and_sum_at(&k, ts(t), n), want, "{ctx}: add_and_sum");
                        }
                        1 => assert_eq!(w.handle(&k).add_at(ts(t), n), counted, "{ctx}: handle"),
                        _ => assert_eq!(w.add_at(&k, ts(t), n), counted, "{ctx}: add {t} {n}"),
                    }
                }
                55..=66 => now = step(&mut rng, now, slice_ns, slices),
                67..=79 => {
                    let q = time_near(&mut rng, base, slice_ns, slices);
                    assert_eq!(w.sum_at(&k, ts(q)), m.sum(&k, q), "{ctx}: sum at {q}");
                    assert_eq!(
                        w.handle(&k).sum_at(ts(q)),
                        m.sum(&k, q),
                        "{ctx}: handle sum"
                    );
                }
                80..=86 => {
                    let q = time_near(&mut rng, base, slice_ns, slices);
                    let top = rng.random_range(0..8);
                    check_top(w.top_at(ts(q), top), &m.sums(q), top, &ctx);
                }
                87..=93 => {
                    let q = time_near(&mut rng, base, slice_ns, slices);
                    assert_eq!(w.evict_idle_at(ts(q)), m.evict(q), "{ctx}: evict at {q}");
                }
                94..=96 => {
                    let mut got = BTreeMap::new();
                    w.take(&k, |start, c| {
                        let e = slice_epoch(start, slice_ns);
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
    let configs = CONFIGS.iter().take(sized(CONFIGS.len(), 4));
    for (ci, &(slice_ns, slices)) in configs.enumerate() {
        for seed in 0..sized(6u64, 1) {
            let mut rng = StdRng::seed_from_u64(1_000 + 10 * ci as u64 + seed);
            let w = windows_of(slice_ns, slices);
            let window = Duration::from_nanos(slice_ns * slices as u64);
            let refs: Vec<SlidingWindow<ManualClock>> = (0..4)
                .map(|_| {
                    SlidingWindow::builder(window, slices)
                        .clock(ManualClock::new())
                        .build()
                        .unwrap()
                })
                .collect();
            let mut log: Vec<(u32, u64, u64)> = Vec::new(); // key, epoch, n
            let mut newest: Option<u64> = None;
            // The latest time any `SlidingWindow` was fed (reads at or after
            // it are exact there).
            let mut max_t = 0u64;
            let s = slices as u128;
            let mut now = if seed % 3 == 2 { 1 << 50 } else { 0 };
            for i in 0..sized(600, 4) {
                now = step(&mut rng, now, slice_ns, slices).min(u64::MAX / 2);
                let k = rng.random_range(0..4u32);
                let t = time_near(&mut rng, now, slice_ns, slices);
                let n = rng.random_range(1..4);
                let e = t / slice_ns;
                let dropped = newest.is_some_and(|nw| e as u128 + s <= nw as u128);
                assert_eq!(
                    w.add_at(&k, ts(t), n),
                    !dropped,
                    "S={slices} L={slice_ns} seed {seed} step {i}: add at epoch {e}, newest {newest:?}"
                );
                refs[k as usize].add_at(ts(t), n);
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
                    assert_eq!(w.sum_at(&key, ts(q)), want, "{ctx}");
                    if q >= max_t {
                        assert_eq!(
                            refs[key as usize].sum_at(ts(q)),
                            want,
                            "{ctx}: SlidingWindow"
                        );
                    }
                }
            }
        }
    }
}

/// A flood of distinct keys fills each slice up to `max_keys` and no more;
/// adds that cannot be tracked return `false` and are counted exactly; a
/// new slice has room again; the whole structure holds at most
/// `slices * max_keys` entries.
#[test]
fn key_flood_is_bounded_per_slice() {
    // The bound, and the distinct keys flooding the first slice.
    const MAX: u32 = sized(100, 10);
    const FLOOD: u32 = sized(10_000, 30);
    let w = windows_builder(SLICE, SLICES)
        .max_keys(MAX as usize)
        .build()
        .unwrap();
    for k in 0..FLOOD {
        assert_eq!(w.add_at(&k, ts(0), 1), k < MAX, "key {k}");
        assert!(w.len() <= MAX as usize);
    }
    assert_eq!(w.len(), MAX as usize);
    let mut untracked = u64::from(FLOOD - MAX);
    assert_eq!(w.untracked_adds(), untracked);
    // Tracked keys keep counting, untracked ones read 0.
    assert_eq!(w.add_and_sum_at(&5, ts(0), 1), 2);
    assert_eq!(w.sum_at(&(FLOOD / 2), ts(0)), 0);
    assert_eq!(w.add_and_sum_at(&(FLOOD / 2), ts(0), 1), 0);
    untracked += 1;
    assert_eq!(w.untracked_adds(), untracked);
    // The next slice has room for MAX keys of its own.
    for k in 20_000..20_000 + MAX * 3 / 2 {
        assert_eq!(w.add_at(&k, ts(SLICE), 1), k < 20_000 + MAX);
    }
    assert_eq!(w.len(), 2 * MAX as usize);
    untracked += u64::from(MAX / 2);
    assert_eq!(w.untracked_adds(), untracked);
    assert_eq!(w.sum_at(&20_000, ts(SLICE)), 1);
    // Slice 1 is full: even a key slice 0 holds is not tracked there, and
    // its count in slice 0 still reads.
    assert!(!w.add_at(&5, ts(SLICE), 1));
    assert_eq!(w.sum_at(&5, ts(SLICE)), 2);
    // Every slice of the ring full, then the ring wraps: still 5 * MAX.
    untracked += 1;
    for s in 2..12u64 {
        for k in 0..MAX * 3 / 2 {
            assert_eq!(w.add_at(&(k + 1_000 * s as u32), ts(s * SLICE), 1), k < MAX);
        }
        untracked += u64::from(MAX / 2);
        assert_eq!(w.len(), MAX as usize * (s as usize + 1).min(SLICES));
        assert_eq!(w.untracked_adds(), untracked);
    }
    assert_eq!(w.evict_idle_at(ts(100 * SLICE)), 5 * MAX as usize);
    assert!(w.is_empty());
    // A bound of 0 tracks nothing.
    let none = windows_builder(SLICE, SLICES).max_keys(0).build().unwrap();
    assert!(!none.add_at(&1, ts(0), 1));
    assert_eq!((none.len(), none.untracked_adds()), (0, 1));
}

/// The ring is global: an add is dropped when its epoch is a whole window
/// older than the newest epoch added to by *any* key, and counted under
/// its own epoch otherwise.
#[test]
fn old_adds_are_dropped_not_misfiled() {
    let w = windows();
    assert!(w.add_at(&1, ts(10 * SLICE), 1));
    // Epoch 0 (0 + 5 <= 10) is older than the ring, for every key.
    assert!(!w.add_at(&1, ts(0), 5));
    assert!(!w.add_at(&2, ts(5 * SLICE), 5));
    assert_eq!(w.len(), 1);
    assert_eq!(w.untracked_adds(), 0);
    assert_eq!(w.sum_at(&1, ts(10 * SLICE)), 1);
    // Epoch 6 is inside it: counted under its own epoch.
    assert!(w.add_at(&1, ts(6 * SLICE), 2));
    assert!(w.add_at(&2, ts(6 * SLICE + SLICE - 1), 7));
    assert_eq!(w.sum_at(&1, ts(10 * SLICE)), 3);
    assert_eq!(w.sum_at(&1, ts(11 * SLICE)), 1);
    assert_eq!(w.sum_at(&2, ts(10 * SLICE)), 7);
    assert_eq!(w.sum_at(&2, ts(11 * SLICE)), 0);
    let mut taken = Vec::new();
    w.take(&1, |start, c| taken.push((slice_epoch(start, SLICE), c)));
    taken.sort_unstable();
    assert_eq!(taken, vec![(6, 2), (10, 1)]);
    // Epoch 12 (slot 2) is added to: epoch 6 (slot 1) is out of the ring
    // (6 + 5 <= 12) although its map is still installed (no epoch of slot
    // 1 replaced it): adds there are dropped too, for keys it holds and
    // for new ones.
    assert!(w.add_at(&3, ts(12 * SLICE), 1));
    assert!(!w.add_at(&2, ts(6 * SLICE), 1));
    assert!(!w.add_at(&4, ts(6 * SLICE), 1));
    assert_eq!(w.len(), 4);
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
        for k in 1..=sized(6u64, 1) {
            let w = windows_of(1, slices);
            let s = slices as u64;
            assert_eq!(w.add_and_sum_at(&1, ts(start), 5), 5);
            assert!(w.add_at(&2, ts(start), 1));
            if slices > 1 {
                assert_eq!(w.add_and_sum_at(&1, ts(start + 1), 1), 6);
            }
            let fars = if s == 1 {
                vec![start + k * TAG]
            } else {
                vec![start + k * TAG, start + k * s * TAG]
            };
            for far in fars {
                let ctx = format!("S={slices} start {start} far {far}");
                // Nothing was added since: the window at `far` is empty.
                assert_eq!(w.sum_at(&1, ts(far)), 0, "{ctx}");
                assert_eq!(w.add_and_sum_at(&1, ts(far), 1), 1, "{ctx}");
                // The old epochs are older than the ring now.
                assert!(!w.add_at(&1, ts(start), 1), "{ctx}");
                assert!(!w.add_at(&2, ts(start), 1), "{ctx}");
                assert_eq!(w.sum_at(&1, ts(far)), 1, "{ctx}");
                assert_eq!(w.sum_at(&2, ts(far)), 0, "{ctx}");
                assert_eq!(w.sum_at(&1, ts(far + s)), 0, "{ctx}");
                // An add just inside the ring, in the past, is counted.
                if slices > 1 {
                    assert_eq!(w.add_and_sum_at(&1, ts(far - 1), 2), 2, "{ctx}");
                    assert_eq!(w.sum_at(&1, ts(far)), 3, "{ctx}");
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
    assert_eq!(w.add_and_sum_at(&1, ts(0), 1), 1);
    assert_eq!(w.add_and_sum_at(&1, ts(3), 1), 2);
    assert_eq!(w.add_and_sum_at(&1, ts(4), 1), 2);
    let top = u64::MAX - 2;
    assert_eq!(w.add_and_sum_at(&1, ts(top), 1), 1);
    assert_eq!(w.add_and_sum_at(&1, ts(u64::MAX), 2), 3);
    assert_eq!(w.sum_at(&1, ts(u64::MAX)), 3);
    assert_eq!(w.add_and_sum_at(&2, ts(u64::MAX), 7), 7);
    // Older than the ring (MAX - 5 + 4 <= MAX): dropped.
    assert!(!w.add_at(&2, ts(u64::MAX - 5), 1));
    assert!(!w.add_at(&2, ts(u64::MAX - 4), 1));
    assert_eq!(w.sum_at(&2, ts(u64::MAX)), 7);
    // Inside it: counted under its own epoch.
    assert!(w.add_at(&2, ts(u64::MAX - 3), 1));
    assert_eq!(w.sum_at(&2, ts(u64::MAX)), 8);
    assert_eq!(w.sum_at(&2, ts(u64::MAX - 3)), 1);
    // Slices MAX - 3 ..= MAX are all in the window at MAX: nothing to
    // evict there (MAX - 3 + 4 > MAX).
    assert_eq!(w.len(), 4);
    assert_eq!(w.evict_idle_at(ts(u64::MAX)), 0);
    assert_eq!(w.sum_at(&1, ts(u64::MAX)), 3);
    assert_eq!(w.sum_at(&2, ts(u64::MAX)), 8);
    // The newest epoch is `u64::MAX`: epoch 12 (an empty slot) is older
    // than the ring.
    let w = windows_of(1, 4);
    assert!(w.add_at(&1, ts(10), 1));
    assert!(w.add_at(&1, ts(u64::MAX), 1));
    assert!(!w.add_at(&1, ts(12), 1));
    assert_eq!(w.len(), 2);
    // The detector at the top of the range.
    let d = detector(1, 4, 3);
    assert_eq!(d.became_hot_at(&1, ts(u64::MAX - 1), 2), None);
    assert_eq!(d.became_hot_at(&1, ts(u64::MAX), 1), Some(3));
    assert!(d.is_hot_at(&1, ts(u64::MAX)));
}

/// `evict_idle_at(now)` returns exactly the entries of the slices it drops
/// (the model's count), drops nothing a window at or after `now` reads, and
/// slices are also dropped by the adds that replace them.
#[test]
fn evict_idle_at_is_exact_and_invisible_at_or_after_now() {
    const KEYS: u32 = sized(20, 4);
    for seed in 0..sized(40u64, 3) {
        let mut rng = StdRng::seed_from_u64(9_000 + seed);
        let slices = [1usize, 2, 3, 5, 8][seed as usize % 5];
        let w = windows_of(SLICE, slices);
        let mut m = RingModel::new(SLICE, slices, usize::MAX);
        let mut now = 0u64;
        for i in 0..sized(300, 2) {
            now = step(&mut rng, now, SLICE, slices).min(1 << 62);
            for _ in 0..rng.random_range(0..6) {
                let k = rng.random_range(0..KEYS);
                let t = time_near(&mut rng, now, SLICE, slices);
                assert_eq!(
                    w.add_at(&k, ts(t), 1),
                    m.add(&k, t, 1),
                    "seed {seed} step {i}"
                );
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
                .map(|&q| (0..KEYS).map(|k| w.sum_at(&k, ts(q))).collect())
                .collect();
            let len = w.len();
            let evicted = w.evict_idle_at(ts(at));
            assert_eq!(evicted, m.evict(at), "seed {seed} step {i}");
            assert_eq!(w.len(), len - evicted);
            assert_eq!(w.len(), m.len());
            for (q, b) in reads.iter().zip(before) {
                let after: Vec<u64> = (0..KEYS).map(|k| w.sum_at(&k, ts(*q))).collect();
                assert_eq!(
                    after, b,
                    "seed {seed} step {i}: sums at {q} after evicting at {at}"
                );
            }
            // A second call at the same time has nothing left to drop.
            assert_eq!(w.evict_idle_at(ts(at)), 0);
        }
    }
    // Slices dropped by rotation, then by eviction.
    let w = windows();
    for e in 0..5u64 {
        for k in 0..=e as u32 {
            w.add_at(&k, ts(e * SLICE), 1);
        }
    }
    assert_eq!(w.len(), 1 + 2 + 3 + 4 + 5);
    // Epoch 5 replaces slice 0 (1 entry) and adds one.
    assert!(w.add_at(&9, ts(5 * SLICE), 1));
    assert_eq!(w.len(), 2 + 3 + 4 + 5 + 1);
    // At epoch 8 the slices 1..=3 are out of the window.
    assert_eq!(w.evict_idle_at(ts(8 * SLICE + SLICE - 1)), 2 + 3 + 4);
    assert_eq!(w.len(), 5 + 1);
    assert_eq!(w.sum_at(&4, ts(8 * SLICE)), 1);
    assert_eq!(w.evict_idle_at(ts(10 * SLICE)), 6);
    assert!(w.is_empty());
}
