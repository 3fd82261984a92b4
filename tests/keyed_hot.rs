//! `HotKeyDetector` against the hot rule's reference model
//! (`keyed_model::HotModel`, whose state is never forgotten): reports, the
//! sums they return, cooling and re-crossing, late adds, the retirement of
//! hot state, handles, striped entries, and racing crossings reported
//! once.

mod keyed_model;
mod keyed_support;

use keyed_model::HotModel;
use keyed_support::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::HotKeyDetector;

/// The hot rule against its model, many seeds: every add's report (and the
/// sum `became_hot_at` returns), `is_hot_at`, `hot_keys_at` and the sums at
/// or after the newest add, with late adds (inside and outside the ring),
/// cooling and re-crossing, idle gaps, small per-slice key bounds, and the
/// detector's own `evict_idle_at` (which forgets hot state; the model never
/// does, and must agree).
#[test]
fn hot_rule_matches_the_model() {
    for seed in 0..sized(150u64, 5) {
        let mut rng = StdRng::seed_from_u64(500 + seed);
        let slices = [1usize, 2, 3, 4, 5, 8][seed as usize % 6];
        // Odd seeds: key 0 is a steadily hot key of many small adds, a
        // threshold of 2 to 4 per slice and time moving a slice at a time
        // (its slices grow past `ceil(T / S)` while it is hot already).
        let steady = seed % 2 == 1;
        // Seeds 2 mod 4: entries made striped at random (as contention
        // does), small adds and larger thresholds, so that adds stop at
        // their own stripe while it is below its share of `H`
        // (`entry.rs`, "The mark of a striped entry").
        let striped = seed % 4 == 2;
        let threshold = if steady {
            slices as u64 * rng.random_range(2..=4)
        } else if striped {
            slices as u64 * rng.random_range(10..30)
        } else {
            rng.random_range(1..25)
        };
        let max_keys = if seed % 5 == 4 {
            rng.random_range(1..4)
        } else {
            usize::MAX
        };
        let mut b = detector_builder(SLICE, slices, threshold);
        if max_keys != usize::MAX {
            b = b.max_keys(max_keys);
        }
        let d = b.build().unwrap();
        let mut m = HotModel::new(SLICE, slices, threshold, max_keys);
        let mut now = 0u64;
        let mut newest_t = 0u64;
        for i in 0..sized(600, 3) {
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
                    } else if striped {
                        rng.random_range(1..=4)
                    } else {
                        rng.random_range(1..=threshold.div_ceil(2) + 1)
                    };
                    let want = m.add(&k, t, n);
                    let got = if rng.random_bool(0.2) {
                        d.handle(&k).became_hot_at(ts(t), n)
                    } else {
                        d.became_hot_at(&k, ts(t), n)
                    };
                    assert_eq!(got, want, "{ctx}: add {n} to {k} at epoch {}", t / SLICE);
                    if striped && rng.random_bool(0.3) {
                        d.windows().__stripe(&k, ts(t));
                    }
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
                    assert_eq!(
                        d.evict_idle_at(ts(q)),
                        m.ring.evict(q),
                        "{ctx}: evict at {q}"
                    );
                }
                _ => {
                    let k = rng.random_range(0..6u32);
                    let n = rng.random_range(1..3);
                    let want = m.add(&k, now, n).is_some();
                    assert_eq!(d.add_at(&k, ts(now), n), want, "{ctx}: add_at");
                    if m.ring.newest() == Some(now / SLICE) {
                        newest_t = newest_t.max(now);
                    }
                }
            }
            let q = now.max(newest_t) + rng.random_range(0..SLICE * 2 * slices as u64);
            for key in 0..6u32 {
                assert_eq!(
                    d.windows().sum_at(&key, ts(q)),
                    m.ring.sum(&key, q),
                    "{ctx}: sum"
                );
                assert_eq!(
                    d.is_hot_at(&key, ts(q)),
                    m.is_hot(&key, q),
                    "{ctx}: is_hot {key}"
                );
                assert_eq!(
                    d.handle(&key).is_hot_at(ts(q)),
                    m.is_hot(&key, q),
                    "{ctx}: handle"
                );
            }
            let mut got = d.hot_keys_at(ts(q));
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
    assert_eq!(d.became_hot_at(&1, ts(e(0)), 9), None);
    assert_eq!(d.became_hot_at(&1, ts(e(0)), 3), Some(12));
    assert_eq!(d.became_hot_at(&1, ts(e(0)), 3), None);
    assert!(d.is_hot_at(&1, ts(e(0))));
    // Still at or above the threshold before the add: stays hot, silent.
    assert_eq!(d.became_hot_at(&1, ts(e(1)), 1), None);
    assert!(d.is_hot_at(&1, ts(e(1))));
    // The window at 2 holds only slice 1 (1 < T): not hot there.
    assert!(!d.is_hot_at(&1, ts(e(2))));
    // An add at 2: before = 1 < T, cools; after = 2 < T: silent.
    assert_eq!(d.became_hot_at(&1, ts(e(2)), 1), None);
    // Re-crossing after cooling reports again.
    assert_eq!(d.became_hot_at(&1, ts(e(2)), 8), Some(10));
    // Hot but below the threshold before the add (the window moved):
    // cools and re-crosses in the same add, which reports.
    assert_eq!(d.became_hot_at(&1, ts(e(4)), 10), Some(10));
    assert!(d.is_hot_at(&1, ts(e(4))));
    // A late add into an epoch the key is already hot at: silent.
    assert_eq!(d.became_hot_at(&1, ts(e(3)), 20), None);
    // An add older than the ring (3 + 2 <= 5 once 5 is installed, by any
    // key) is dropped and decides nothing.
    assert_eq!(d.became_hot_at(&2, ts(e(5)), 1), None);
    assert_eq!(d.became_hot_at(&1, ts(e(3)), 50), None);
    // Slice 5 took the slot of slice 3 (5 mod 2 = 3 mod 2): the window at
    // 4 holds slice 4 alone now.
    assert_eq!(d.windows().sum_at(&1, ts(e(4))), 10);
    assert_eq!(d.windows().sum_at(&1, ts(e(5))), 10);
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
        assert_eq!(
            d.became_hot_at(&7, ts(t), n),
            m.add(&7, t, n),
            "add {n} at {t}"
        );
    }
}

/// S = 2, T = 8 (heavy at 4): the exact step at epoch 1 sees 5 and leaves
/// the key cold with a bound of 7 on its count at 1 (`src/keyed/bound.rs`),
/// so the add taking it to 5 skips the step. A late add of 2 at epoch 0
/// (its own window, 3, stays below) puts the window at 1 at 8; the next add
/// at 1 (count 6, under the stale bound) must read the window and report.
/// The same when the late add goes through the plain windows
/// (`HotKeyDetector::windows`), or is the key's first add in its slice.
#[test]
fn a_late_add_clears_the_bound_of_newer_slices() {
    let e = |x: u64| x * SLICE;
    for (plain, first) in [(false, false), (true, false), (false, true), (true, true)] {
        let d = detector(SLICE, 2, 8);
        let mut m = HotModel::new(SLICE, 2, 8, usize::MAX);
        let mut adds = vec![(e(0), 1), (e(1), 4), (e(1), 1), (e(0), 2), (e(1), 1)];
        if first {
            // Nothing at epoch 0 before the bound: the late add inserts.
            adds[0] = (e(1), 1);
        }
        for (i, (t, n)) in adds.into_iter().enumerate() {
            let want = m.add(&7, t, n);
            if plain && i == 3 {
                assert!(d.windows().add_at(&7, ts(t), n));
            } else {
                assert_eq!(
                    d.became_hot_at(&7, ts(t), n),
                    want,
                    "add {n} at {t} ({plain} {first})"
                );
            }
        }
        assert!(d.is_hot_at(&7, ts(e(1))), "({plain} {first})");
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
        assert_eq!(
            d.became_hot_at(&k, ts(t), n),
            m.add(&k, t, n),
            "add {n} at {t}"
        );
    }
    // Another key makes epoch 4 the newest; an eviction at 4 (not after the
    // newest add) drops slices 0..=2 and must forget nothing the rule
    // needs: key 7 is hot at 3, and slice 3 is in the window at 4.
    assert_eq!(d.became_hot_at(&8, ts(e(4)), 1), m.add(&8, e(4), 1));
    assert_eq!(d.evict_idle_at(ts(e(4))), m.ring.evict(e(4)));
    assert_eq!(d.is_hot_at(&7, ts(e(4))), m.is_hot(&7, e(4)));
    // The window at 4 holds slice 3 (11 >= T): still hot, no new report.
    assert_eq!(d.became_hot_at(&7, ts(e(4)), 10), m.add(&7, e(4), 10));
    assert_eq!(d.is_hot_at(&7, ts(e(4))), m.is_hot(&7, e(4)));
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
    assert_eq!(d.became_hot_at(&7, ts(e(10)), 10), Some(10));
    assert_eq!(m.add(&7, e(10), 10), Some(10));
    // At 15 slice 10 left the window: dropped, and the key's hot state.
    assert_eq!(d.evict_idle_at(ts(e(15))), m.ring.evict(e(15)));
    assert!(d.windows().is_empty());
    // Epoch 10 is still the newest: an add there is counted, and the key
    // is hot at 10 already.
    assert_eq!(m.add(&7, e(10), 10), None);
    assert_eq!(d.became_hot_at(&7, ts(e(10)), 10), None);
    assert_eq!(d.is_hot_at(&7, ts(e(10))), m.is_hot(&7, e(10)));
}

#[test]
fn became_hot_at_returns_the_sum_including_the_add() {
    let d = HotKeyDetector::builder(Duration::from_secs(1), 10, 5)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(d.became_hot_at("k", ts(0), 3), None);
    assert_eq!(d.became_hot_at("k", ts(0), 4), Some(7));
    assert_eq!(d.became_hot_at("k", ts(0), 4), None);
    assert_eq!(d.windows().sum_at("k", ts(0)), 11);
    // Across slices: the sum is the whole window's.
    let slice = 100_000_000;
    assert_eq!(d.became_hot_at("j", ts(0), 2), None);
    assert_eq!(d.became_hot_at("j", ts(3 * slice), 2), None);
    assert_eq!(d.became_hot_at("j", ts(9 * slice), 2), Some(6));
    assert_eq!(d.threshold(), 5);
}

/// Racing adds across one crossing report exactly once (real threads),
/// with a sum at or above the threshold; a window later the key has cooled
/// and the next racing crossing reports exactly once again.
#[test]
fn racing_crossing_reports_once() {
    for round in 0..sized(150u64, 1) {
        let d = Arc::new(
            HotKeyDetector::builder(Duration::from_secs(1), 10, 40)
                .clock(ManualClock::new())
                .build()
                .unwrap(),
        );
        for (phase, t) in [0u64, 1_000_000_000].into_iter().enumerate() {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let d = d.clone();
                    std::thread::spawn(move || {
                        (0..20)
                            .filter_map(|_| d.became_hot_at(&round, ts(t), 1))
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
            assert!(d.is_hot_at(&round, ts(t)));
            assert_eq!(d.windows().sum_at(&round, ts(t)), 80);
        }
    }
}

#[test]
fn hot_handle_follows_the_rule() {
    let d = detector(SLICE, SLICES, 4);
    let mut m = HotModel::new(SLICE, SLICES, 4, usize::MAX);
    let h = d.handle(&9u32);
    assert_eq!(*h.key(), 9);
    assert_eq!(h.became_hot_at(ts(0), 3), m.add(&9, 0, 3));
    // The detector and the handle share the key's state.
    assert_eq!(d.became_hot_at(&9, ts(0), 1), Some(4));
    assert_eq!(m.add(&9, 0, 1), Some(4));
    assert!(!h.add_at(ts(0), 1));
    m.add(&9, 0, 1);
    assert!(h.is_hot_at(ts(0)));
    // A window later the key has cooled; the handle re-crosses alone.
    let later = SLICE * SLICES as u64;
    assert!(!h.is_hot_at(ts(later)));
    assert!(!h.add_at(ts(later), 2));
    assert_eq!(m.add(&9, later, 2), None);
    assert_eq!(h.became_hot_at(ts(later), 2), Some(4));
    assert_eq!(m.add(&9, later, 2), Some(4));
    // Everything evicted (slice 5 took slice 0's slot: one entry left): the
    // handle's adds insert the key again, and the rule (cool first, then
    // cross) reports again.
    let much_later = 3 * later;
    assert_eq!(d.evict_idle_at(ts(much_later)), 1);
    assert_eq!(m.ring.evict(much_later), 1);
    assert!(d.windows().is_empty());
    assert!(!h.add_at(ts(much_later), 1));
    assert_eq!(m.add(&9, much_later, 1), None);
    assert!(h.add_at(ts(much_later), 3));
    assert_eq!(m.add(&9, much_later, 3), Some(4));
    assert_eq!(d.windows().sum_at(&9, ts(much_later)), 4);
    // The clock's `add`.
    d.windows().clock().set(ts(much_later));
    assert!(!h.add(1));
    assert!(h.is_hot_at(ts(much_later)));
    assert!(d.is_hot(&9));
}

/// The module's count of pending hot state stays bounded by the keys that
/// were heavy recently (it is dropped by the detector's `evict_idle_at`).
#[test]
fn detector_eviction_drops_idle_hot_state() {
    const KEYS: u32 = sized(100, 20);
    let d = detector(SLICE, 4, 8);
    for k in 0..KEYS {
        assert!(d.add_at(&k, ts(0), 8));
    }
    assert_eq!(d.heavy_keys(), KEYS as usize);
    assert_eq!(d.hot_keys_at(ts(0)).len(), KEYS as usize);
    // Two windows later the slices go; the hot state stays while no add
    // has moved the ring past epoch 0 (an add at 0 would still decide).
    assert_eq!(d.evict_idle_at(ts(8 * SLICE)), KEYS as usize);
    assert_eq!(d.heavy_keys(), KEYS as usize);
    assert!(d.hot_keys_at(ts(8 * SLICE)).is_empty());
    // The keys cross again as the rule says (cooled, then crossed), and
    // once the ring is at epoch 8 the idle keys' hot state goes.
    assert!(d.add_at(&1, ts(8 * SLICE), 8));
    d.evict_idle_at(ts(8 * SLICE));
    assert_eq!(d.heavy_keys(), 1, "key 1 is heavy at epoch 8");
    assert!(!d.add_at(&1, ts(8 * SLICE), 1), "already hot at 8");
}

/// Striping an entry changes no answer: the same adds on a detector whose
/// entries stay plain and on one whose every entry is striped after each
/// add (as contention would), among them a late add at an epoch where the
/// key was hot and has cooled since (the striped path's early exit for a
/// key hot at its epoch holds only while no later slice exists).
#[test]
fn striped_entries_give_the_plain_answers() {
    let adds: [(u64, u64); 6] = [(0, 4), (1, 2), (1, 1), (3, 1), (1, 4), (3, 9)];
    let run = |stripe: bool| {
        let d = detector_builder(SLICE, 3, 6).build().unwrap();
        adds.iter()
            .map(|&(e, n)| {
                let got = d.became_hot_at(&7, ts(e * SLICE), n);
                if stripe {
                    d.windows().__stripe(&7, ts(e * SLICE));
                }
                got
            })
            .collect::<Vec<_>>()
    };
    let plain = run(false);
    assert_eq!(plain[1], Some(6), "4 + 2 reaches 6");
    assert_eq!(run(true), plain);
}
