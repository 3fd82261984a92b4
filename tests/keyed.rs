//! Per-key windows and hot-key detection against reference models.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use stripecount::{ConfigError, HotKeyDetector, KeyedWindows, ManualClock, SlidingWindow};

const SLICE: u64 = 1_000; // ns
const SLICES: usize = 5;

fn windows() -> KeyedWindows<u32, ManualClock> {
    KeyedWindows::with_clock(
        Duration::from_nanos(SLICE * SLICES as u64),
        SLICES,
        ManualClock::new(),
    )
    .unwrap()
}

/// The reference: every add kept, summed by epoch.
#[derive(Default)]
struct Model {
    adds: HashMap<u32, Vec<(u64, u64)>>,
}

impl Model {
    fn add(&mut self, k: u32, t: u64, n: u64) {
        self.adds.entry(k).or_default().push((t / SLICE, n));
    }
    fn sum(&self, k: u32, now: u64) -> u64 {
        let e = now / SLICE;
        self.adds.get(&k).map_or(0, |v| {
            v.iter()
                .filter(|(ae, _)| *ae <= e && e - ae < SLICES as u64)
                .map(|(_, n)| n)
                .sum()
        })
    }
    /// Keys with nothing at an epoch inside or after the window at `now`.
    fn evict(&mut self, now: u64) -> usize {
        let first = (now / SLICE + 1).saturating_sub(SLICES as u64);
        let before = self.adds.len();
        self.adds.retain(|_, v| v.iter().any(|(e, _)| *e >= first));
        before - self.adds.len()
    }
    fn top(&self, now: u64, k: usize) -> Vec<(u32, u64)> {
        let mut all: Vec<(u32, u64)> = self
            .adds
            .keys()
            .map(|&key| (key, self.sum(key, now)))
            .filter(|&(_, s)| s > 0)
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }
}

/// Sorts ties by key so that orders can be compared.
fn canon(mut v: Vec<(u32, u64)>) -> Vec<(u32, u64)> {
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[test]
fn sums_top_and_eviction_match_the_model() {
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let w = windows().with_auto_evict(false);
        let mut m = Model::default();
        let mut now = 0u64;
        for _ in 0..600 {
            match rng.random_range(0..100) {
                0..=69 => {
                    let k = rng.random_range(0..20);
                    let n = rng.random_range(1..5);
                    m.add(k, now, n);
                    assert_eq!(w.add_at(&k, now, n), m.sum(k, now), "seed {seed}");
                }
                70..=84 => now += rng.random_range(0..SLICE * 2),
                85..=89 => {
                    let k = rng.random_range(0..25);
                    assert_eq!(w.sum_at(&k, now), m.sum(k, now), "seed {seed}");
                }
                90..=94 => {
                    let k = rng.random_range(1..8);
                    // Ties may be cut differently: compare the sums, and the
                    // keys above the cut.
                    let got = canon(w.top_at(now, k));
                    let want = m.top(now, k);
                    let gs: Vec<u64> = got.iter().map(|x| x.1).collect();
                    let ws: Vec<u64> = want.iter().map(|x| x.1).collect();
                    assert_eq!(gs, ws, "seed {seed}");
                    for (key, s) in &got {
                        assert_eq!(m.sum(*key, now), *s);
                    }
                }
                _ => {
                    assert_eq!(w.evict_idle_at(now), m.evict(now), "seed {seed}");
                    assert_eq!(w.len(), m.adds.len(), "seed {seed}");
                }
            }
        }
    }
}

/// With automatic eviction on, sums are unchanged (an evicted key held
/// nothing in the window) and memory follows the active keys.
#[test]
fn automatic_eviction_is_invisible_to_sums() {
    let mut rng = StdRng::seed_from_u64(7);
    let w = windows();
    let mut m = Model::default();
    let mut now = 0u64;
    for round in 0..50u32 {
        for _ in 0..100 {
            // Each round uses its own 10 keys.
            let k = round * 10 + rng.random_range(0..10);
            m.add(k, now, 1);
            assert_eq!(w.add_at(&k, now, 1), m.sum(k, now));
        }
        now += SLICE * 3;
        assert!(w.len() <= 30, "len {} at round {round}", w.len());
    }
    for k in 0..500 {
        assert_eq!(w.sum_at(&k, now), m.sum(k, now));
    }
}

/// Each key's window follows `SlidingWindow` exactly, times going
/// backwards included (no eviction).
#[test]
fn each_key_follows_sliding_window() {
    let mut rng = StdRng::seed_from_u64(3);
    let w = windows().with_auto_evict(false);
    let refs: Vec<SlidingWindow<ManualClock>> = (0..6)
        .map(|_| {
            SlidingWindow::with_clock(
                Duration::from_nanos(SLICE * SLICES as u64),
                SLICES,
                ManualClock::new(),
            )
            .unwrap()
        })
        .collect();
    let mut now = 10 * SLICE;
    for _ in 0..5000 {
        let k = rng.random_range(0..6u32);
        // Mostly forward, sometimes back by up to two windows.
        let t = if rng.random_bool(0.2) {
            now.saturating_sub(rng.random_range(0..SLICE * 10))
        } else {
            now += rng.random_range(0..SLICE);
            now
        };
        let n = rng.random_range(1..4);
        refs[k as usize].add_at(t, n);
        let got = w.add_at(&k, t, n);
        assert_eq!(got, refs[k as usize].sum_at(t));
        let q = now + rng.random_range(0..SLICE * 3);
        assert_eq!(w.sum_at(&k, q), refs[k as usize].sum_at(q));
    }
}

/// The hot rule, replayed against a single-threaded model of it.
#[test]
fn hot_rule_matches_the_model() {
    for seed in 0..30 {
        let mut rng = StdRng::seed_from_u64(100 + seed);
        let threshold = rng.random_range(1..12);
        let d = HotKeyDetector::with_clock(
            Duration::from_nanos(SLICE * SLICES as u64),
            SLICES,
            threshold,
            ManualClock::new(),
        )
        .unwrap();
        let mut m = Model::default();
        let mut hot: HashMap<u32, bool> = HashMap::new();
        let mut now = 0;
        for _ in 0..800 {
            if rng.random_bool(0.3) {
                now += rng.random_range(0..SLICE * 2);
            }
            let k = rng.random_range(0..6u32);
            let n = rng.random_range(1..5);
            let before = m.sum(k, now);
            let h = hot.entry(k).or_default();
            if *h && before < threshold {
                *h = false;
            }
            let mut want = false;
            if !*h && before + n >= threshold {
                *h = true;
                want = true;
            }
            m.add(k, now, n);
            assert_eq!(d.add_at(&k, now, n), want, "seed {seed} key {k} at {now}");
            for key in 0..6u32 {
                let want_hot =
                    hot.get(&key).copied().unwrap_or(false) && m.sum(key, now) >= threshold;
                assert_eq!(d.is_hot_at(&key, now), want_hot, "seed {seed}");
            }
            let mut got = d.hot_keys_at(now);
            got.sort_unstable();
            let mut want: Vec<u32> = (0..6)
                .filter(|key| {
                    hot.get(key).copied().unwrap_or(false) && m.sum(*key, now) >= threshold
                })
                .collect();
            want.sort_unstable();
            assert_eq!(got, want);
        }
    }
}

#[test]
fn became_hot_at_returns_the_sum_including_the_add() {
    let d = HotKeyDetector::with_clock(Duration::from_secs(1), 10, 5, ManualClock::new()).unwrap();
    assert_eq!(d.became_hot_at("k", 0, 3), None);
    assert_eq!(d.became_hot_at("k", 0, 4), Some(7));
    assert_eq!(d.became_hot_at("k", 0, 4), None);
    assert_eq!(d.windows().sum_at("k", 0), 11);
}

/// A flood of distinct keys never grows the map past `max_keys`; adds that
/// cannot be tracked are counted; idle keys make room.
#[test]
fn key_flood_stays_bounded() {
    let w = windows().with_max_keys(100);
    for k in 0..10_000u32 {
        w.add_at(&k, 0, 1);
        assert!(w.len() <= 100);
    }
    assert_eq!(w.len(), 100);
    assert_eq!(w.untracked_adds(), 9_900);
    // Tracked keys keep counting.
    assert_eq!(w.add_at(&5, 0, 1), 2);
    // Untracked keys read 0.
    assert_eq!(w.sum_at(&5_000, 0), 0);
    // A window later every key is idle: new keys evict them.
    let later = SLICE * SLICES as u64;
    for k in 20_000..20_150u32 {
        w.add_at(&k, later, 1);
        assert!(w.len() <= 100);
    }
    assert_eq!(w.untracked_adds(), 9_900 + 50);
    assert_eq!(w.sum_at(&20_000, later), 1);
}

#[test]
fn key_flood_from_threads_stays_bounded() {
    let w = Arc::new(windows().with_max_keys(64));
    let hs: Vec<_> = (0..4u32)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                for i in 0..5_000u32 {
                    w.add_at(&(t * 1_000_000 + i), (i as u64 / 500) * SLICE, 1);
                    assert!(w.len() <= 64);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(w.len() <= 64);
}

/// Threads adding to shared keys (some hot enough to stripe) lose nothing.
#[test]
fn concurrent_adds_are_all_counted() {
    let w = Arc::new(windows().with_auto_evict(false));
    let hs: Vec<_> = (0..4u32)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t as u64);
                let mut mine = vec![0u64; 8];
                for _ in 0..50_000 {
                    let k = if rng.random_bool(0.7) {
                        0
                    } else {
                        rng.random_range(1..8)
                    };
                    w.record_at(&k, 0, 1);
                    mine[k as usize] += 1;
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
        assert_eq!(w.sum_at(&k, 0), total[k as usize]);
    }
}

/// Evictions racing adds: every add made at the new time is counted.
#[test]
fn eviction_racing_adds_loses_nothing() {
    for round in 0..20u64 {
        let w = Arc::new(windows().with_auto_evict(false));
        for k in 0..50u32 {
            w.add_at(&k, 0, 1);
        }
        let later = SLICE * SLICES as u64 * (round + 1);
        let evictor = {
            let w = w.clone();
            std::thread::spawn(move || (0..20).map(|_| w.evict_idle_at(later)).sum::<usize>())
        };
        let adders: Vec<_> = (0..2u32)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u32 {
                        w.record_at(&((i + t) % 50), later, 1);
                    }
                })
            })
            .collect();
        for a in adders {
            a.join().unwrap();
        }
        evictor.join().unwrap();
        let total: u64 = (0..50u32).map(|k| w.sum_at(&k, later)).sum();
        assert_eq!(total, 4_000);
        assert!(w.len() <= 50);
    }
}

/// Racing adds across one crossing report exactly once (real threads).
#[test]
fn racing_crossing_reports_once() {
    for round in 0..200u64 {
        let d = Arc::new(
            HotKeyDetector::with_clock(Duration::from_secs(1), 10, 40, ManualClock::new()).unwrap(),
        );
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || (0..20).filter(|_| d.add_at(&round, 0, 1)).count())
            })
            .collect();
        let reports: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(reports, 1, "round {round}");
        assert!(d.is_hot_at(&round, 0));
    }
}

#[test]
fn handle_adds_and_survives_eviction() {
    let w = windows().with_auto_evict(false);
    let mut h = w.handle(&1);
    assert_eq!(h.add_at(0, 2), 2);
    h.record_at(0, 3);
    assert_eq!(h.sum_at(0), 5);
    let later = SLICE * SLICES as u64;
    assert_eq!(w.evict_idle_at(later), 1);
    assert_eq!(w.len(), 0);
    // The handle's entry is dead: the add re-inserts the key.
    assert_eq!(h.add_at(later, 4), 4);
    assert_eq!(w.sum_at(&1, later), 4);
    assert_eq!(w.len(), 1);
    assert_eq!(*h.key(), 1);
}

#[test]
fn handle_counts_untracked_when_full() {
    let w = windows().with_max_keys(1);
    w.add_at(&1, 0, 1);
    let mut h = w.handle(&2);
    assert_eq!(h.add_at(0, 1), 0);
    assert_eq!(w.untracked_adds(), 1);
}

#[test]
fn old_adds_are_dropped_not_misfiled() {
    let w = windows().with_auto_evict(false);
    w.add_at(&1, 10 * SLICE, 1);
    // Epoch 0 shares a slot with epoch 10 and is older than the ring.
    assert_eq!(w.add_at(&1, 0, 5), 0);
    assert_eq!(w.sum_at(&1, 10 * SLICE), 1);
}

#[test]
fn zero_adds_record_nothing() {
    let w = windows();
    assert_eq!(w.add_at(&1, 0, 0), 0);
    assert_eq!(w.len(), 0);
    let d = HotKeyDetector::with_clock(Duration::from_secs(1), 10, 1, ManualClock::new()).unwrap();
    assert!(!d.add_at(&1u8, 0, 0));
}

#[test]
fn saturates_instead_of_wrapping() {
    let w = windows();
    w.add_at(&1, 0, u64::MAX);
    w.add_at(&1, SLICE, u64::MAX);
    assert_eq!(w.sum_at(&1, SLICE), 2 * stripecount::MAX_SLICE_COUNT);
}

#[test]
fn borrowed_lookups() {
    let w: KeyedWindows<String, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(1), 10, ManualClock::new()).unwrap();
    w.add_at("alpha", 0, 2);
    assert_eq!(w.sum_at("alpha", 0), 2);
    assert_eq!(w.top_at(0, 5), vec![("alpha".to_string(), 2)]);
}

#[test]
fn memory_per_key() {
    let w: KeyedWindows<u64, ManualClock> =
        KeyedWindows::with_clock(Duration::from_secs(10), 10, ManualClock::new()).unwrap();
    w.add_at(&1, 0, 1);
    // Entry header 40 (reference count and slices, hot word, guard,
    // extension pointer, base) + 10 packed cells of 8, one allocation.
    assert_eq!(w.key_memory_bytes(&1), 120);
    assert_eq!(w.key_memory_bytes(&2), 0);
    assert!(!w.is_striped(&1));
    // Idle but present, after a long gap: still 120.
    w.add_at(&1, 1 << 60, 1);
    assert_eq!(w.key_memory_bytes(&1), 120);
    w.__stripe(&1);
    assert!(w.is_striped(&1));
    // Plus the extension: a 16-byte boxed slice of rows, each a 128-byte
    // guard line and two 128-byte chunks of 16-byte slice cells.
    let striped = w.key_memory_bytes(&1);
    assert!(striped >= 120 + 16 + 384, "{striped}");
    assert_eq!((striped - 120 - 16) % 384, 0, "{striped}");
}

/// Idle gaps that repeat the packed cells' 16-bit tags (exactly k * 2^16
/// epochs), land inside or across the 2^13-epoch blocks of the compact row
/// 0, or start near epoch 0: every key's window still follows
/// `SlidingWindow` exactly, including adds a little in the past.
#[test]
fn long_idle_gaps_follow_sliding_window() {
    const TAG: u64 = 1 << 16;
    const BLOCK: u64 = 1 << 13;
    for &slices in &[1usize, 2, 4, 5, 10] {
        let window = Duration::from_nanos(SLICE * slices as u64);
        let w = KeyedWindows::with_clock(window, slices, ManualClock::new())
            .unwrap()
            .with_auto_evict(false);
        let refs: Vec<SlidingWindow<ManualClock>> = (0..3)
            .map(|_| SlidingWindow::with_clock(window, slices, ManualClock::new()).unwrap())
            .collect();
        let mut rng = StdRng::seed_from_u64(slices as u64);
        let jumps = [
            0,
            1,
            slices as u64,
            TAG,
            2 * TAG,
            3 * TAG,
            TAG - 1,
            TAG + 1,
            TAG - slices as u64,
            BLOCK,
            BLOCK - 1,
            BLOCK + 1,
            3 * BLOCK,
            TAG - BLOCK,
            TAG + BLOCK,
            5 * TAG,
            (slices as u64) * TAG,
        ];
        // Epochs, not nanoseconds; start at 0.
        let mut now = 0u64;
        for i in 0..3000 {
            let k = rng.random_range(0..3u32);
            let e = if rng.random_bool(0.15) {
                // A little in the past (up to two windows).
                now.saturating_sub(rng.random_range(0..2 * slices as u64))
            } else {
                now += if rng.random_bool(0.3) {
                    jumps[rng.random_range(0..jumps.len())]
                } else {
                    rng.random_range(0..3)
                };
                now
            };
            let t = e * SLICE + rng.random_range(0..SLICE);
            let n = rng.random_range(1..4);
            refs[k as usize].add_at(t, n);
            let got = w.add_at(&k, t, n);
            assert_eq!(got, refs[k as usize].sum_at(t), "S={slices} step {i} e={e}");
            for key in 0..3u32 {
                let q = now * SLICE + rng.random_range(0..SLICE * 3);
                assert_eq!(
                    w.sum_at(&key, q),
                    refs[key as usize].sum_at(q),
                    "S={slices} step {i} key {key}"
                );
            }
        }
    }
}

/// The aliasing cases one by one: a count at epoch `y` must not be read as
/// the count of `y + k * 2^16` (same tag, and same slot when `S` divides
/// `k * 2^16`), after a gap with no add in between.
#[test]
fn same_tag_after_a_gap_is_not_aliased() {
    const TAG: u64 = 1 << 16;
    for &(slices, start) in &[(4usize, 0u64), (4, 3), (5, 7), (2, 8191), (4, 1 << 40)] {
        for k in 1..=6u64 {
            let w = KeyedWindows::with_clock(
                Duration::from_nanos(slices as u64),
                slices,
                ManualClock::new(),
            )
            .unwrap()
            .with_auto_evict(false);
            assert_eq!(w.add_at(&1u8, start, 5), 5);
            let far = start + k * TAG;
            // Nothing was added since `start`: the window at `far` is empty.
            assert_eq!(w.sum_at(&1u8, far), 0, "S={slices} start {start} k {k}");
            assert_eq!(w.add_at(&1u8, far, 1), 1, "S={slices} start {start} k {k}");
            // The old epoch is older than the ring now.
            assert_eq!(w.add_at(&1u8, start, 1), 0);
            assert_eq!(w.sum_at(&1u8, far), 1);
            assert_eq!(w.sum_at(&1u8, far + slices as u64), 0);
            // An add just inside the window, in the past, is still counted.
            if slices > 1 {
                assert_eq!(w.add_at(&1u8, far - 1, 2), 2);
                assert_eq!(w.sum_at(&1u8, far), 3);
            }
        }
    }
}

/// A key whose first add is at a huge epoch, then epochs near the top of
/// the range: no overflow, exact sums.
#[test]
fn epochs_near_the_ends_of_the_range() {
    let w = KeyedWindows::with_clock(Duration::from_nanos(4), 4, ManualClock::new())
        .unwrap()
        .with_auto_evict(false);
    assert_eq!(w.add_at(&1u8, 0, 1), 1);
    assert_eq!(w.add_at(&1u8, 3, 1), 2);
    assert_eq!(w.add_at(&1u8, 4, 1), 2);
    let top = u64::MAX - 2;
    assert_eq!(w.add_at(&1u8, top, 1), 1);
    assert_eq!(w.add_at(&1u8, u64::MAX, 2), 3);
    assert_eq!(w.sum_at(&1u8, u64::MAX), 3);
    assert_eq!(w.add_at(&2u8, u64::MAX, 7), 7);
    // Counted in its own (expired) slice, as `SlidingWindow` would.
    assert_eq!(w.add_at(&2u8, u64::MAX - 5, 1), 1);
    assert_eq!(w.sum_at(&2u8, u64::MAX), 7);
    // Its slot holds MAX: dropped (the sum at MAX - 4 is the add at MAX - 5).
    assert_eq!(w.add_at(&2u8, u64::MAX - 4, 1), 1);
    assert_eq!(w.sum_at(&2u8, u64::MAX - 4), 1);
    assert_eq!(w.sum_at(&2u8, u64::MAX), 7);
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let z = KeyedWindows::<u8>::new(Duration::ZERO, 10).unwrap_err();
    assert_eq!(z, ConfigError::ZeroWindow);
    assert_eq!(
        KeyedWindows::<u8>::new(Duration::from_secs(1), 0).unwrap_err(),
        ConfigError::ZeroSlices
    );
    assert!(matches!(
        KeyedWindows::<u8>::new(Duration::from_nanos(10), 3).unwrap_err(),
        ConfigError::UnevenSlices { .. }
    ));
    assert!(matches!(
        HotKeyDetector::<u8>::new(Duration::from_secs(1), 10, 0).unwrap_err(),
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
    assert_eq!(w.add(&1u8, 3), 3);
    assert_eq!(w.sum(&1u8), 3);
}

#[test]
fn hot_handle_follows_the_rule() {
    let d = HotKeyDetector::with_clock(
        Duration::from_nanos(SLICE * SLICES as u64),
        SLICES,
        4,
        ManualClock::new(),
    )
    .unwrap();
    let mut h = d.handle(&9u32);
    assert_eq!(*h.key(), 9);
    assert!(!h.add_at(0, 3));
    // The detector and the handle share the key's state.
    assert_eq!(d.became_hot_at(&9, 0, 1), Some(4));
    assert!(!h.add_at(0, 1));
    assert!(h.is_hot_at(0));
    // A window later the key has cooled; the handle re-crosses alone.
    let later = SLICE * SLICES as u64;
    assert!(!h.is_hot_at(later));
    assert!(!h.add_at(later, 2));
    assert_eq!(h.became_hot_at(later, 2), Some(4));
    // After eviction the handle re-inserts and starts cold.
    let much_later = 3 * later;
    assert_eq!(d.windows().evict_idle_at(much_later), 1);
    assert!(!h.add_at(much_later, 1));
    assert!(h.add_at(much_later, 3));
    assert_eq!(d.windows().sum_at(&9, much_later), 4);
}
