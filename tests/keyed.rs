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

/// The reference: every counted add kept, summed by epoch. An add is
/// counted unless it is older than the window of its key's newest add.
#[derive(Default)]
struct Model {
    adds: HashMap<u32, Vec<(u64, u64)>>,
}

impl Model {
    /// Adds `n` to `k` at `t`; `true` if counted.
    fn add(&mut self, k: u32, t: u64, n: u64) -> bool {
        let e = t / SLICE;
        let v = self.adds.entry(k).or_default();
        let newest = v.iter().map(|a| a.0).max().unwrap_or(0);
        if newest.saturating_sub(e) >= SLICES as u64 {
            return false;
        }
        v.push((e, n));
        true
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
                    assert_eq!(w.add_and_sum_at(&k, now, n), m.sum(k, now), "seed {seed}");
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
            assert_eq!(w.add_and_sum_at(&k, now, 1), m.sum(k, now));
        }
        now += SLICE * 3;
        // A key idle for a window (5 slices, under 2 rounds) is swept
        // within about one more window: keys of the last 4 rounds at most.
        assert!(w.len() <= 40, "len {} at round {round}", w.len());
    }
    for k in 0..500 {
        assert_eq!(w.sum_at(&k, now), m.sum(k, now));
    }
}

/// Each key's window follows the model, times going backwards included
/// (no eviction): adds older than the window of their key's newest add are
/// dropped, all others counted under their own epoch; and at or after the
/// newest add every sum equals `SlidingWindow`'s.
#[test]
fn each_key_follows_the_model() {
    let mut rng = StdRng::seed_from_u64(3);
    let w = windows().with_auto_evict(false);
    let mut m = Model::default();
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
        let counted = m.add(k, t, n);
        if counted {
            refs[k as usize].add_at(t, n);
        }
        assert_eq!(w.add_at(&k, t, n), counted);
        let q = now + rng.random_range(0..SLICE * 3);
        assert_eq!(w.sum_at(&k, q), m.sum(k, q));
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
    assert_eq!(w.add_and_sum_at(&5, 0, 1), 2);
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
                    assert!(w.add_at(&k, 0, 1));
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
                        assert!(w.add_at(&((i + t) % 50), later, 1));
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
    let h = w.handle(&1);
    assert_eq!(h.add_and_sum_at(0, 2), 2);
    assert!(h.add_at(0, 3));
    assert_eq!(h.sum_at(0), 5);
    let later = SLICE * SLICES as u64;
    assert_eq!(w.evict_idle_at(later), 1);
    assert_eq!(w.len(), 0);
    // The key was evicted: the handle's add re-inserts it.
    assert_eq!(h.add_and_sum_at(later, 4), 4);
    assert_eq!(w.sum_at(&1, later), 4);
    assert_eq!(w.len(), 1);
    assert_eq!(*h.key(), 1);
}

#[test]
fn handle_counts_untracked_when_full() {
    let w = windows().with_max_keys(1);
    w.add_at(&1, 0, 1);
    let h = w.handle(&2);
    assert!(!h.add_at(0, 1));
    assert_eq!(w.untracked_adds(), 1);
}

#[test]
fn old_adds_are_dropped_not_misfiled() {
    let w = windows().with_auto_evict(false);
    w.add_at(&1, 10 * SLICE, 1);
    // Epoch 0 is older than the window of the key's newest add (10).
    assert!(!w.add_at(&1, 0, 5));
    assert_eq!(w.sum_at(&1, 10 * SLICE), 1);
    // Epoch 6 is inside it: counted under its own epoch.
    assert!(w.add_at(&1, 6 * SLICE, 2));
    assert_eq!(w.sum_at(&1, 10 * SLICE), 3);
    assert_eq!(w.sum_at(&1, 11 * SLICE), 1);
}

#[test]
fn zero_adds_record_nothing() {
    let w = windows();
    assert!(w.add_at(&1, 0, 0));
    assert_eq!(w.len(), 0);
    let d = HotKeyDetector::with_clock(Duration::from_secs(1), 10, 1, ManualClock::new()).unwrap();
    assert!(!d.add_at(&1u8, 0, 0));
}

#[test]
fn saturates_instead_of_wrapping() {
    // A key's newest slice saturates at 2^46 - 1; folded into its window
    // the count is kept, and sums saturate instead of wrapping.
    const HEAD_MAX: u64 = (1 << 46) - 1;
    let w = windows();
    w.add_at(&1, 0, u64::MAX);
    w.add_at(&1, SLICE, u64::MAX);
    assert_eq!(w.sum_at(&1, SLICE), 2 * HEAD_MAX);
    // Late, into the slice's cell of the window, which already holds the
    // folded HEAD_MAX: that cell saturates at MAX_SLICE_COUNT.
    w.add_at(&1, 0, u64::MAX);
    assert_eq!(w.sum_at(&1, SLICE), HEAD_MAX + stripecount::MAX_SLICE_COUNT);
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
    let s = 1_000_000_000; // one slice
    w.add_at(&1, 0, 1);
    // A key seen in one slice holds nothing outside its map slot.
    assert_eq!(w.key_memory_bytes(&1), 0);
    assert_eq!(w.key_memory_bytes(&2), 0);
    assert!(!w.is_striped(&1));
    // A second slice inside the window folds the first into the key's
    // out-of-line window: a 48-byte header and 10 cells of 16 bytes.
    w.add_at(&1, s, 1);
    assert_eq!(w.key_memory_bytes(&1), 48 + 10 * 16);
    // Every slice of the window: the same window.
    for i in 2..10 {
        w.add_at(&1, i * s, 1);
    }
    assert_eq!(w.key_memory_bytes(&1), 48 + 10 * 16);
    assert_eq!(w.sum_at(&1, 9 * s), 10);
    // Idle after a long gap: the key keeps its window until evicted, and
    // never reads a stale count.
    assert_eq!(w.sum_at(&1, 1 << 60), 0);
    assert_eq!(w.evict_idle_at(1 << 60), 1);
    assert_eq!(w.key_memory_bytes(&1), 0);
}

/// Idle gaps that repeat the head's 16-bit tag (exactly k * 2^16 epochs)
/// and those of the window's cells, or start near epoch 0: every key's
/// window follows the model exactly (adds a little in the past included),
/// and `SlidingWindow` at or after the newest add.
#[test]
fn long_idle_gaps_follow_the_model() {
    const TAG: u64 = 1 << 16;
    for &slices in &[1usize, 2, 4, 5, 10] {
        let window = Duration::from_nanos(SLICE * slices as u64);
        let w = KeyedWindows::with_clock(window, slices, ManualClock::new())
            .unwrap()
            .with_auto_evict(false);
        let refs: Vec<SlidingWindow<ManualClock>> = (0..3)
            .map(|_| SlidingWindow::with_clock(window, slices, ManualClock::new()).unwrap())
            .collect();
        // Per key: counted (epoch, n) and the newest epoch.
        let mut model: Vec<(Vec<(u64, u64)>, u64)> = vec![(Vec::new(), 0); 3];
        let mut rng = StdRng::seed_from_u64(slices as u64);
        let s = slices as u64;
        let jumps = [
            0,
            1,
            s,
            TAG,
            2 * TAG,
            3 * TAG,
            TAG - 1,
            TAG + 1,
            TAG - s,
            1 << 13,
            5 * TAG,
            s * TAG,
        ];
        let mut now = 0u64;
        for i in 0..3000 {
            let k = rng.random_range(0..3usize);
            let e = if rng.random_bool(0.15) {
                // A little in the past (up to two windows).
                now.saturating_sub(rng.random_range(0..2 * s))
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
            let (adds, newest) = &mut model[k];
            let counted = adds.is_empty() || newest.saturating_sub(e) < s;
            if counted {
                adds.push((e, n));
                *newest = (*newest).max(e);
                refs[k].add_at(t, n);
            }
            assert_eq!(
                w.add_at(&(k as u32), t, n),
                counted,
                "S={slices} step {i} e={e}"
            );
            for key in 0..3usize {
                let q = now * SLICE + rng.random_range(0..SLICE * 3);
                let qe = q / SLICE;
                let want: u64 = model[key]
                    .0
                    .iter()
                    .filter(|(ae, _)| *ae <= qe && qe - ae < s)
                    .map(|a| a.1)
                    .sum();
                let got = w.sum_at(&(key as u32), q);
                assert_eq!(got, want, "S={slices} step {i} key {key}");
                assert_eq!(got, refs[key].sum_at(q), "S={slices} step {i} key {key}");
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
            assert_eq!(w.add_and_sum_at(&1u8, start, 5), 5);
            // A second slice, so that the window holds the first one.
            if slices > 1 {
                assert_eq!(w.add_and_sum_at(&1u8, start + 1, 1), 6);
            }
            let far = start + k * TAG;
            // Nothing was added since: the window at `far` is empty.
            assert_eq!(w.sum_at(&1u8, far), 0, "S={slices} start {start} k {k}");
            assert_eq!(
                w.add_and_sum_at(&1u8, far, 1),
                1,
                "S={slices} start {start} k {k}"
            );
            // The old epoch is older than the window of the newest add now.
            assert!(!w.add_at(&1u8, start, 1));
            assert_eq!(w.sum_at(&1u8, far), 1);
            assert_eq!(w.sum_at(&1u8, far + slices as u64), 0);
            // An add just inside the window, in the past, is counted.
            if slices > 1 {
                assert_eq!(w.add_and_sum_at(&1u8, far - 1, 2), 2);
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
    assert_eq!(w.add_and_sum_at(&1u8, 0, 1), 1);
    assert_eq!(w.add_and_sum_at(&1u8, 3, 1), 2);
    assert_eq!(w.add_and_sum_at(&1u8, 4, 1), 2);
    let top = u64::MAX - 2;
    assert_eq!(w.add_and_sum_at(&1u8, top, 1), 1);
    assert_eq!(w.add_and_sum_at(&1u8, u64::MAX, 2), 3);
    assert_eq!(w.sum_at(&1u8, u64::MAX), 3);
    assert_eq!(w.add_and_sum_at(&2u8, u64::MAX, 7), 7);
    // Older than the window of the newest add (MAX): dropped.
    assert!(!w.add_at(&2u8, u64::MAX - 5, 1));
    assert_eq!(w.sum_at(&2u8, u64::MAX), 7);
    // Inside it: counted under its own epoch.
    assert!(w.add_at(&2u8, u64::MAX - 3, 1));
    assert_eq!(w.sum_at(&2u8, u64::MAX), 8);
    assert_eq!(w.sum_at(&2u8, u64::MAX - 3), 1);
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
    assert_eq!(w.add_and_sum(&1u8, 3), 3);
    assert!(w.add(&1u8, 1));
    assert_eq!(w.sum(&1u8), 4);
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
    let h = d.handle(&9u32);
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

/// Keys moving to bigger tables while other threads add to them, read
/// them and take their counts: every add is counted exactly once, and a
/// reader never sees a key's sum go down (within one epoch a window only
/// grows), whatever the moves.
#[test]
fn moves_under_concurrent_adds_lose_nothing() {
    for round in 0..4u64 {
        let w = Arc::new(windows().with_auto_evict(false));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Watched keys, added to by two threads while a third floods the
        // map with new keys (every insert into a full shard moves it).
        let adders: Vec<_> = (0..2u64)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    let mut mine = vec![0u64; 64];
                    for i in 0..40_000u64 {
                        let k = ((i * 7 + t * 13 + round) % 64) as u32;
                        if w.add_at(&k, (i / 10_000) * SLICE / 4, 1) {
                            mine[k as usize] += 1;
                        }
                    }
                    mine
                })
            })
            .collect();
        let reader = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = [0u64; 64];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for k in 0..64u32 {
                        let s = w.sum_at(&k, 0);
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
        let flood = {
            let w = w.clone();
            std::thread::spawn(move || {
                for k in 1_000..60_000u32 {
                    assert!(w.add_at(&k, 0, 1));
                }
            })
        };
        let mut total = [0u64; 64];
        for a in adders {
            for (t, m) in total.iter_mut().zip(a.join().unwrap()) {
                *t += m;
            }
        }
        flood.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        reader.join().unwrap();
        for k in 0..64u32 {
            assert_eq!(w.sum_at(&k, 0), total[k as usize], "round {round} key {k}");
        }
        for k in 1_000..60_000u32 {
            assert_eq!(w.sum_at(&k, 0), 1);
        }
        assert_eq!(w.len(), 64 + 59_000);
    }
}

/// `take_all` racing adds: what was taken plus what stays equals what was
/// added, per key and per epoch. (Times stay inside one window, so no
/// count expires before it is taken.)
#[test]
fn take_all_racing_adds_is_exact() {
    let w = Arc::new(windows().with_auto_evict(false));
    let adders: Vec<_> = (0..2u32)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                let mut added = HashMap::new();
                for i in 0..30_000u64 {
                    let k = ((i as u32) * 3 + t) % 40;
                    let now = (i / 7_500) * SLICE;
                    assert!(w.add_at(&k, now, 1));
                    *added.entry((k, now / SLICE)).or_insert(0u64) += 1;
                }
                added
            })
        })
        .collect();
    let mut taken: HashMap<(u32, u64), u64> = HashMap::new();
    for _ in 0..200 {
        w.take_all(|k, e, c| *taken.entry((*k, e)).or_default() += c);
    }
    let mut added: HashMap<(u32, u64), u64> = HashMap::new();
    for a in adders {
        for (k, v) in a.join().unwrap() {
            *added.entry(k).or_default() += v;
        }
    }
    w.take_all(|k, e, c| *taken.entry((*k, e)).or_default() += c);
    assert_eq!(taken, added);
    for k in 0..40u32 {
        assert_eq!(w.sum_at(&k, 4 * SLICE), 0);
    }
}
