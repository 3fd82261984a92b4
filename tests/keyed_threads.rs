//! The per-key engine under threads: exact totals of concurrent adds on hot
//! and cold keys, key floods bounded per slice, table moves and takes racing
//! adds. The ring's rotation and evictions racing adds are in
//! `keyed_rotation.rs`.

mod keyed_support;

use keyed_support::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Clock, KeyedWindows};

/// The same from threads: in each slice exactly `max_keys` adds of new
/// keys are tracked (whichever threads win), every other one is counted
/// untracked, and the bound holds throughout.
#[test]
fn key_flood_from_threads_is_bounded_per_slice() {
    const THREADS: u32 = 4;
    const MAX: usize = sized(64, 16);
    const PER: u32 = sized(2_000, 5);
    const PHASES: u64 = sized(8, 6);
    let w = Arc::new(
        windows_builder(SLICE, SLICES)
            .max_keys(MAX)
            .build()
            .unwrap(),
    );
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
                        if w.add_at(&k, ts(p * SLICE), 1) {
                            mine += 1;
                        }
                        assert!(w.len() <= SLICES * MAX);
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
        assert_eq!(w.len(), MAX * (p as usize + 1).min(SLICES), "phase {p}");
        let untracked = (p + 1) * (THREADS as u64 * PER as u64 - MAX as u64);
        assert_eq!(w.untracked_adds(), untracked, "phase {p}");
    }
    let mut per_phase = vec![0u64; PHASES as usize];
    for h in hs {
        for (p, n) in h.join().unwrap().into_iter().enumerate() {
            per_phase[p] += n;
        }
    }
    assert_eq!(per_phase, vec![MAX as u64; PHASES as usize]);
    // The slices in the window at the last phase hold MAX keys each, 1 each.
    let sums = w.top_at(ts((PHASES - 1) * SLICE), usize::MAX);
    assert_eq!(sums.len(), MAX * SLICES);
    assert!(sums.iter().all(|x| x.1 == 1));
}

/// Threads adding to shared keys (one hot enough that its entry stripes,
/// some cold), through `add` on a shared clock, `add_at`, `add_and_sum_at`
/// and handles, all starting at once: every add is counted, exactly.
/// Contention changes nothing observable but `is_striped_at` and memory: a
/// key's out-of-slot bytes are non-zero exactly when its entry is striped.
/// Rounds repeat (fresh windows each) until the hot key's entry striped, at
/// most 8 (1 under Miri), so that the striped path is what most runs check.
#[test]
fn concurrent_adds_are_all_counted() {
    const THREADS: u32 = 4;
    const ADDS: u64 = sized(40_000, 30);
    let mut striped_rounds = 0;
    for round in 0..sized(8u64, 1) {
        let clock = ManualClock::starting_at(ts(3 * SLICE + 17));
        let w = Arc::new(
            KeyedWindows::builder(Duration::from_nanos(SLICE * SLICES as u64), SLICES)
                .clock(clock.clone())
                .build()
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
                    for i in 0..ADDS {
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
        let next = now + Duration::from_nanos(SLICE);
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

/// Keys moving to bigger tables while other threads add to them, read them
/// and flood their slices with new keys: every add is counted exactly once
/// under its own epoch, and a reader never sees a key's sum go down (no
/// slice leaves the window read, so it only grows), whatever the moves.
#[test]
fn table_moves_under_concurrent_adds_lose_nothing() {
    const KEYS: u32 = sized(64, 8);
    const ADDS: u64 = sized(40_000, 20);
    const FLOOD: u32 = sized(30_000, 40);
    for round in 0..sized(3u64, 1) {
        let w = Arc::new(windows());
        let stop = Arc::new(AtomicBool::new(false));
        let q = 4 * SLICE; // the window at epoch 4 holds epochs 0..=4
        let adders: Vec<_> = (0..2u64)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    let mut mine = HashMap::new();
                    for i in 0..ADDS {
                        let k = ((i * 7 + t * 13 + round) % KEYS as u64) as u32;
                        let e = i / (ADDS / 4);
                        assert!(w.add_at(&k, ts(e * SLICE + i % SLICE), 1));
                        *mine.entry((k, e)).or_insert(0u64) += 1;
                    }
                    mine
                })
            })
            .collect();
        let reader = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = [0u64; KEYS as usize];
                while !stop.load(Ordering::Relaxed) {
                    for k in 0..KEYS {
                        let s = w.sum_at(&k, ts(q));
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
                    for k in base..base + FLOOD {
                        assert!(w.add_at(&k, ts(e * SLICE), 1));
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
        for k in 0..KEYS {
            let want: u64 = (0..4)
                .map(|e| added.get(&(k, e)).copied().unwrap_or(0))
                .sum();
            assert_eq!(w.sum_at(&k, ts(q)), want, "round {round} key {k}");
        }
        for k in (1_000..1_000 + FLOOD).chain(100_000..100_000 + FLOOD) {
            assert_eq!(w.sum_at(&k, ts(q)), 1, "round {round} key {k}");
        }
        assert_eq!(w.len(), 2 * FLOOD as usize + added.len());
        let mut taken = take_all_of(&w);
        taken.retain(|(k, _), _| *k < KEYS);
        let added: BTreeMap<(u32, u64), u64> = added.into_iter().collect();
        assert_eq!(taken, added, "round {round}: per key and epoch");
    }
}

/// `take_all` racing adds: what was taken plus what stays equals what was
/// added, per key and per epoch. (Times stay inside one window, so no
/// count leaves the ring before it is taken.)
#[test]
fn take_all_racing_adds_is_exact() {
    const KEYS: u32 = sized(40, 10);
    const ADDS: u64 = sized(30_000, 40);
    let w = Arc::new(windows());
    let done = Arc::new(AtomicUsize::new(0));
    let adders: Vec<_> = (0..2u32)
        .map(|t| {
            let (w, done) = (w.clone(), done.clone());
            std::thread::spawn(move || {
                let mut added = BTreeMap::new();
                for i in 0..ADDS {
                    let k = ((i as u32) * 3 + t) % KEYS;
                    let now = (i / (ADDS / 4)) * SLICE;
                    assert!(w.add_at(&k, ts(now), 1));
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
            let k = (i / 4) % KEYS;
            w.take(&k, |start, c| {
                *taken.entry((k, slice_epoch(start, SLICE))).or_default() += c;
                take_one += c;
            });
        } else {
            w.take_all(|k, start, c| {
                *taken.entry((*k, slice_epoch(start, SLICE))).or_default() += c
            });
        }
        i += 1;
    }
    let mut added: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for a in adders {
        for (k, v) in a.join().unwrap() {
            *added.entry(k).or_default() += v;
        }
    }
    let remaining: u64 = (0..KEYS).map(|k| w.sum_at(&k, ts(4 * SLICE))).sum();
    let taken_so_far: u64 = taken.values().sum();
    assert_eq!(taken_so_far + remaining, 2 * ADDS);
    w.take_all(|k, start, c| *taken.entry((*k, slice_epoch(start, SLICE))).or_default() += c);
    assert_eq!(taken, added);
    for k in 0..KEYS {
        assert_eq!(w.sum_at(&k, ts(4 * SLICE)), 0);
    }
    // The entries stay (at zero) until their slices leave the window.
    assert_eq!(w.len(), 4 * KEYS as usize);
    println!("{i} takes while adding; {take_one} taken by `take`");
}

/// A detector's bound (`src/keyed/bound.rs`) under threads: one thread adds
/// 12 to each key at the newest epoch (3), which makes the key heavy
/// (`H = 10` of `T = 40` in 4 slices) and installs a bound from an exact
/// step; another adds 35 to each key late, at epochs 1 and 2 of that
/// window, in even rounds after the first thread is done (so every late add
/// comes after the bound: each must clear it), in odd rounds racing it.
/// Afterwards each key's window at 3 holds 47: the key is hot there, or the
/// next add at 3 reports it; no bound without the late counts is left for
/// that add to skip by.
#[test]
fn late_adds_from_threads_leave_no_crossing_unreported() {
    const T: u64 = 40;
    const KEYS: u32 = sized(6, 2);
    let t = |e: u64| e * SLICE;
    for round in 0..sized(40u64, 2) {
        let d = Arc::new(detector(SLICE, 4, T));
        // The newest slice first, so that the other thread's adds are late.
        assert!(!d.add_at(&99, ts(t(3)), 1));
        let newest_done = Arc::new(AtomicBool::new(false));
        let newest = {
            let (d, done) = (d.clone(), newest_done.clone());
            std::thread::spawn(move || {
                for _ in 0..12 {
                    for key in 0..KEYS {
                        // Racing late adds can make one of these report.
                        d.add_at(&key, ts(t(3)), 1);
                    }
                }
                done.store(true, Ordering::Release);
            })
        };
        let late = {
            let (d, done) = (d.clone(), newest_done.clone());
            std::thread::spawn(move || {
                while round % 2 == 0 && !done.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                let mut rng = StdRng::seed_from_u64(round);
                for _ in 0..35 {
                    for key in 0..KEYS {
                        d.add_at(&key, ts(t(rng.random_range(1..3))), 1);
                    }
                }
            })
        };
        newest.join().unwrap();
        late.join().unwrap();
        for key in 0..KEYS {
            assert_eq!(d.windows().sum_at(&key, ts(t(3))), 47);
            assert!(
                d.is_hot_at(&key, ts(t(3))) || d.add_at(&key, ts(t(3)), 1),
                "round {round}: key {key} neither hot at 3 nor reported by its next add"
            );
        }
    }
}

/// More threads than the collector's static pin slots (64), all alive at
/// once, adding while the ring turns over and tables grow (so slice maps
/// and tables are retired and freed under them): every add reported
/// counted is in the final window's sums, exactly.
#[test]
fn many_threads_adding_through_slice_turnover_lose_nothing() {
    const THREADS: usize = sized(96, 65);
    const EPOCHS: u64 = sized(20, 6);
    const PER: u64 = sized(200, 1);
    const KEYS: u64 = sized(500, 20);
    let w = Arc::new(windows());
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS as u64)
        .map(|t| {
            let (w, start) = (w.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut counted = HashMap::new();
                for e in 0..EPOCHS {
                    for i in 0..PER {
                        let k = ((t * 7 + i * 13 + e) % KEYS) as u32;
                        if w.add_at(&k, ts(e * SLICE + i % SLICE), 1) {
                            *counted.entry((k, e)).or_insert(0u64) += 1;
                        }
                    }
                }
                counted
            })
        })
        .collect();
    let mut counted: HashMap<(u32, u64), u64> = HashMap::new();
    for t in threads {
        for (k, n) in t.join().unwrap() {
            *counted.entry(k).or_default() += n;
        }
    }
    let last = EPOCHS - 1;
    let window = last + 1 - SLICES as u64..=last;
    for k in 0..KEYS as u32 {
        let want: u64 = window
            .clone()
            .map(|e| counted.get(&(k, e)).copied().unwrap_or(0))
            .sum();
        assert_eq!(w.sum_at(&k, ts(last * SLICE)), want, "key {k}");
    }
    // The last epoch's adds all land (nothing is newer), so the check
    // above is not vacuous.
    let in_last: u64 = counted
        .iter()
        .filter(|((_, e), _)| *e == last)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(in_last, THREADS as u64 * PER);
}
