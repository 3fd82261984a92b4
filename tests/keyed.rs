//! Per-key windows (the slice-major engine of `src/keyed/`) against the
//! reference models of `keyed_model/`: the global slice ring (an add at
//! epoch `e` is dropped iff `e + S <= N`, `N` the newest epoch any add
//! installed; an add whose slot holds an older epoch replaces that slice for
//! every key), per-slice key bounds, eviction of whole slices, and the edges
//! (saturation, long gaps, the ends of the epoch range, configuration). The
//! hot rule is in `keyed_hot.rs`, the threaded tests in `keyed_threads.rs`.

mod keyed_model;
mod keyed_support;

use keyed_model::{RingModel, COUNT_MAX};
use keyed_support::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use stripecount::{
    ConfigError, HotKeyDetector, KeyedWindows, ManualClock, SlidingWindow, MAX_SLICES,
};

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
