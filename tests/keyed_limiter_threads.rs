//! The per-key limiter under threads: threads hammering hot and cold keys
//! while a `ManualClock` moves, every grant recorded and every window of
//! every key checked (also under a flood of cold keys); and floods of
//! distinct keys from threads against `max_keys`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::limiter::FloodPolicy;
use stripecount::{Clock, Denied, KeyedLimiter, Quota};

/// A test's size (slices run, demand, keys): `full` natively, `miri` under
/// Miri, which interprets a test thousands of times slower. A test asserts
/// the same things at either size.
const fn sized<T: Copy>(full: T, miri: T) -> T {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

/// Grants `(key, epoch, n)`; every window of every key within its limit.
fn check_windows(grants: &[(u64, u64, u64)], slices: u64, limit_of: impl Fn(u64) -> u64) {
    let mut per: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    for &(k, e, n) in grants {
        *per.entry(k).or_default().entry(e).or_default() += n;
    }
    for (k, epochs) in &per {
        // Every window that holds a grant: those ending at e .. e + S - 1.
        for &e in epochs.keys() {
            for j in e..e + slices {
                let w: u64 = (j.saturating_sub(slices - 1)..=j)
                    .map(|x| epochs.get(&x).copied().unwrap_or(0))
                    .sum();
                assert!(
                    w <= limit_of(*k),
                    "key {k}: the window at {j} holds {w} > {}",
                    limit_of(*k)
                );
            }
        }
    }
}

/// Four threads on two hot keys (their own limit) and `cold_keys` cold
/// ones (the default), with eviction on (and a thread evicting all the
/// time) and at most `max_keys` keys, while the main
/// thread moves the clock one slice each time the hot keys have seen
/// enough demand. Every grant is recorded with the slice it was counted
/// in; no window of any key may exceed its limit. With `fill`, every
/// window of the hot keys must get >= 90% of their limit.
fn hammer(cold_keys: u64, max_keys: usize, fill: bool) {
    const SLICES: u64 = 4;
    const HOT_LIMIT: u64 = sized(40, 10);
    const COLD_LIMIT: u64 = 3;
    const RUN: u64 = sized(100, 4);
    // Hot requests per slice, both hot keys (when the windows need not
    // fill, fewer under Miri).
    let hot_demand = HOT_LIMIT * if fill { sized(8, 3) } else { sized(8, 1) };
    let clock = ManualClock::new();
    let lim = Arc::new(
        KeyedLimiter::builder(
            Quota::per(COLD_LIMIT, Duration::from_millis(SLICES)).slices(SLICES as usize),
        )
        .clock(clock.clone())
        .max_keys(max_keys)
        .build()
        .unwrap(),
    );
    for hot in [0u64, 1] {
        lim.set_key_limit(&hot, HOT_LIMIT).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let hot_done = Arc::new(AtomicU64::new(0));
    let too_many = Arc::new(AtomicU64::new(0));
    let threads = 4;
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (lim, clock, stop, hot_done, too_many, start) = (
                lim.clone(),
                clock.clone(),
                stop.clone(),
                hot_done.clone(),
                too_many.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t as u64);
                let mut grants = Vec::new();
                let mut refused = 0u64;
                start.wait();
                while !stop.load(Ordering::Acquire) {
                    let hot = rng.random_bool(0.5);
                    let key = if hot {
                        rng.random_range(0..2u64)
                    } else {
                        rng.random_range(2..2 + cold_keys)
                    };
                    let n = rng.random_range(1..=2);
                    let d = lim.decide_at(&key, clock.now(), n);
                    match d.result() {
                        Ok(()) => grants.push((key, d.__slice().unwrap(), n)),
                        Err(Denied::TooManyKeys) => {
                            too_many.fetch_add(1, Ordering::Relaxed);
                            refused += 1;
                        }
                        Err(_) => refused += 1,
                    }
                    if hot {
                        hot_done.fetch_add(1, Ordering::Release);
                    }
                }
                (grants, refused)
            })
        })
        .collect();
    // An evictor sweeping all the time: evictions race requests on keys
    // whose window just emptied (the hot keys every S slices).
    let evictor = {
        let (lim, clock, stop) = (lim.clone(), clock.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                lim.evict_idle_at(clock.now());
            }
        })
    };
    start.wait();
    for _ in 0..RUN {
        // Enough demand in every slice before time moves on (no sleeps).
        let base = hot_done.load(Ordering::Acquire);
        while hot_done.load(Ordering::Acquire) < base + hot_demand {
            std::thread::yield_now();
        }
        assert!(lim.len() <= max_keys);
        clock.advance(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    evictor.join().unwrap();
    let mut refused = 0;
    let grants: Vec<(u64, u64, u64)> = handles
        .into_iter()
        .flat_map(|h| {
            let (grants, r) = h.join().unwrap();
            refused += r;
            grants
        })
        .collect();
    assert_eq!(lim.refusals(), refused);
    check_windows(
        &grants,
        SLICES,
        |k| if k < 2 { HOT_LIMIT } else { COLD_LIMIT },
    );
    assert_eq!(lim.untracked_decisions(), too_many.load(Ordering::Relaxed));
    assert!(lim.len() <= max_keys);
    // Hot keys: every window that ended while demand was there is >= 90%
    // of the limit (in fact full: a refusal only when nothing fit).
    for hot in [0u64, 1].into_iter().filter(|_| fill) {
        let mut per = vec![0u64; RUN as usize + 1];
        for &(k, e, n) in &grants {
            if k == hot {
                per[e as usize] += n;
            }
        }
        for e in 0..RUN as usize {
            let w: u64 = per[e.saturating_sub(SLICES as usize - 1)..=e].iter().sum();
            assert!(
                w * 10 >= HOT_LIMIT * 9,
                "hot key {hot}: window at {e} got {w} of {HOT_LIMIT}: {per:?}"
            );
        }
    }
}

#[test]
fn threads_on_hot_and_cold_keys_never_over_admit_and_hot_keys_fill_their_windows() {
    hammer(40, 4096, true);
}

/// The same under a flood: 3000 cold keys for 256 places (40 for 16 under
/// Miri). A hot key whose window empties (its whole limit granted in one
/// slice, S slices ago) is idle, may be evicted and then refused as a new
/// key (`TooManyKeys`): strictness and the bound hold, fullness does not.
#[test]
fn threads_under_a_key_flood_never_over_admit() {
    hammer(sized(3000, 40), sized(256, 16), false);
}

#[test]
fn a_flood_of_distinct_keys_stays_within_max_keys() {
    for policy in [FloodPolicy::Refuse, FloodPolicy::AdmitUntracked] {
        const MAX: usize = sized(1000, 10);
        const KEYS: u64 = sized(5000, 20);
        let clock = ManualClock::new();
        let lim = Arc::new(
            KeyedLimiter::builder(Quota::per(2, Duration::from_secs(1)).slices(10))
                .clock(clock.clone())
                .max_keys(MAX)
                .flood_policy(policy)
                .build()
                .unwrap(),
        );
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (lim, done) = (lim.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = 0;
                while !done.load(Ordering::Acquire) {
                    seen = seen.max(lim.len());
                }
                seen
            })
        };
        let flood = |first: u64| {
            let granted = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..2u64)
                .map(|t| {
                    let (lim, granted) = (lim.clone(), granted.clone());
                    std::thread::spawn(move || {
                        for k in (first + t..first + KEYS).step_by(2) {
                            if lim.try_acquire(&k, 1) {
                                granted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter().for_each(|h| h.join().unwrap());
            granted.load(Ordering::Relaxed)
        };
        // Time stands still: no key is idle, so exactly MAX keys get in.
        let granted = flood(0);
        let refused = KEYS as usize - MAX;
        match policy {
            FloodPolicy::Refuse => assert_eq!(granted, MAX),
            _ => assert_eq!(granted, KEYS as usize),
        }
        assert_eq!(lim.untracked_decisions(), refused as u64);
        assert_eq!(lim.len(), MAX);
        // A window later every key is idle: new keys evict them.
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            flood(KEYS) as u64,
            if policy == FloodPolicy::Refuse {
                MAX as u64
            } else {
                KEYS
            }
        );
        done.store(true, Ordering::Release);
        assert!(watcher.join().unwrap() <= MAX);
        assert!(lim.len() <= MAX);
        // Memory stays that of about MAX keys.
        assert!(lim.memory_bytes() < 200 * 1024, "{}", lim.memory_bytes());
    }
}
