//! The per-key engine's ring under threads: the ring rotating under racing
//! adds (with times controlled, and free-running threads each on its own
//! time), and slice evictions racing adds. Adds, floods, table moves and
//! takes under threads are in `keyed_threads.rs`.

mod keyed_support;

use keyed_support::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

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
    const KEYS: u32 = sized(8, 4);
    const PER: u32 = sized(3_000, 4);
    const PHASES: u64 = sized(24, 5);
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
                            let counted = w.add_at(&k, ts(e * SLICE + (i as u64 % SLICE)), 1);
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
                    let got = w.sum_at(&k, ts(p * SLICE));
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
                assert_eq!(w.sum_at(&k, ts(p * SLICE)), want, "S={s} phase {p} key {k}");
                sums.insert(k, want);
            }
            check_top(
                w.top_at(ts(p * SLICE), 3),
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
    const EPOCHS: u64 = sized(60, 7);
    const PER: u64 = sized(400, 2);
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
                            if w.add_at(&k, ts(e * SLICE), 1) {
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
                            assert!(w.sum_at(&k, ts(q)) <= bound);
                        }
                        for (_, c) in w.top_at(ts(q), 2) {
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
            assert_eq!(w.sum_at(&k, ts(last * SLICE)), want, "S={s} key {k}");
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

/// Evictions racing adds: adds at the evictor's time are never dropped;
/// the stale slice is dropped exactly once (by one of the evictions).
#[test]
fn eviction_racing_adds_loses_nothing() {
    const KEYS: u32 = sized(50, 10);
    const ADDS: u32 = sized(2_000, 20);
    const EVICTIONS: usize = sized(20, 5);
    for round in 0..sized(20u64, 2) {
        let w = Arc::new(windows());
        for k in 0..KEYS {
            w.add_at(&k, ts(0), 1);
        }
        // An epoch a window or more later, not in slot 0: only an eviction
        // drops slice 0.
        let later = (SLICES as u64 * (round + 1) + 1 + round % 3) * SLICE;
        let evictors: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || {
                    (0..EVICTIONS)
                        .map(|_| w.evict_idle_at(ts(later)))
                        .sum::<usize>()
                })
            })
            .collect();
        let adders: Vec<_> = (0..2u32)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..ADDS {
                        assert!(w.add_at(&((i + t) % KEYS), ts(later), 1));
                    }
                })
            })
            .collect();
        for a in adders {
            a.join().unwrap();
        }
        let evicted: usize = evictors.into_iter().map(|e| e.join().unwrap()).sum();
        assert_eq!(evicted, KEYS as usize, "round {round}");
        let total: u64 = (0..KEYS).map(|k| w.sum_at(&k, ts(later))).sum();
        assert_eq!(total, 2 * u64::from(ADDS));
        assert_eq!(w.len(), KEYS as usize);
    }
}
