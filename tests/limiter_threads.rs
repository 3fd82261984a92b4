//! The strict limiters under threads: contention never causes a refusal,
//! and in runs whose every grant is recorded (with a clock moved by another
//! thread), no window of any limit ever holds more than its limit.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{MultiLimiter, Quota, RateLimiter};

/// Phases with a frozen clock: 4 threads ask for single permits until each
/// has been refused, then the clock moves one slice. A refusal must mean the
/// window is full, so every window holds exactly `limit`.
#[test]
fn contention_never_causes_refusals() {
    const THREADS: usize = 4;
    const PHASES: u64 = 40;
    for slices in [1usize, 4] {
        let limit = 1000u64;
        let clock = ManualClock::new();
        let lim = Arc::new(
            RateLimiter::builder(
                Quota::per(limit, Duration::from_nanos(100 * slices as u64)).slices(slices),
            )
            .clock(clock.clone())
            .build()
            .unwrap(),
        );
        let start = Arc::new(Barrier::new(THREADS + 1));
        let end = Arc::new(Barrier::new(THREADS + 1));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (lim, start, end) = (lim.clone(), start.clone(), end.clone());
                std::thread::spawn(move || {
                    let mut per_phase = Vec::new();
                    for _ in 0..PHASES {
                        start.wait();
                        let mut got = 0u64;
                        while lim.try_acquire(1) {
                            got += 1;
                        }
                        per_phase.push(got);
                        end.wait();
                    }
                    per_phase
                })
            })
            .collect();
        for _ in 0..PHASES {
            start.wait();
            end.wait();
            clock.advance(Duration::from_nanos(100));
        }
        let per_thread: Vec<Vec<u64>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let slice_totals: Vec<u64> = (0..PHASES as usize)
            .map(|p| per_thread.iter().map(|t| t[p]).sum())
            .collect();
        for p in 0..PHASES as usize {
            let lo = (p + 1).saturating_sub(slices);
            let window: u64 = slice_totals[lo..=p].iter().sum();
            assert_eq!(window, limit, "slices {slices} phase {p}: {slice_totals:?}");
        }
    }
}

/// Moves `clock` 1,500 times by random steps below `max_step` ns (seeded
/// with `seed`), each after the workers have made 20 more requests
/// (`progress`): pacing only, every interleaving is valid.
fn pace(clock: &ManualClock, progress: &AtomicU64, seed: u64, max_step: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = 0;
    for _ in 0..1500 {
        while progress.load(Ordering::Relaxed) < seen + 20 {
            std::hint::spin_loop();
        }
        seen = progress.load(Ordering::Relaxed);
        clock.advance(Duration::from_nanos(rng.random_range(0..max_step)));
    }
}

/// A clock moved by another thread while 4 threads take random amounts.
/// Every grant is recorded with the times read around it and the slice it
/// was counted in; that slice must lie between the two, and every window's
/// total must be at most the limit.
#[test]
fn concurrent_grants_never_exceed_any_window() {
    const THREADS: usize = 4;
    for (slices, limit) in [(1usize, 50u64), (3, 40), (8, 100)] {
        let slice = 10_000u64;
        let clock = ManualClock::new();
        let lim = Arc::new(
            RateLimiter::builder(
                Quota::per(limit, Duration::from_nanos(slice * slices as u64)).slices(slices),
            )
            .clock(clock.clone())
            .build()
            .unwrap(),
        );
        let done = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (lim, clock, done, progress) =
                    (lim.clone(), clock.clone(), done.clone(), progress.clone());
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t as u64);
                    let mut log = Vec::new();
                    use stripecount::Clock;
                    while !done.load(Ordering::Acquire) {
                        let n = rng.random_range(1..=3);
                        let before = clock.now();
                        let d = lim.decide_at(before, n);
                        let after = clock.now();
                        progress.fetch_add(1, Ordering::Relaxed);
                        if let Some(epoch) = d.__slice() {
                            let (lo, hi) = (before.as_nanos() / slice, after.as_nanos() / slice);
                            log.push((lo, hi, epoch, n));
                        }
                    }
                    log
                })
            })
            .collect();
        pace(&clock, &progress, 99, slice / 4);
        done.store(true, Ordering::Release);
        let logs: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        let last = logs.iter().map(|g| g.2).max().unwrap_or(0);
        let mut per_slice = vec![0u64; last as usize + 1];
        for &(lo, hi, e, n) in &logs {
            assert!(
                lo <= e && e <= hi,
                "grant counted in slice {e}, outside [{lo}, {hi}]"
            );
            per_slice[e as usize] += n;
        }
        for j in 0..per_slice.len() {
            let lo = (j + 1).saturating_sub(slices);
            let total: u64 = per_slice[lo..=j].iter().sum();
            assert!(total <= limit, "window ending at {j}: {total} > {limit}");
        }
        assert!(per_slice.iter().sum::<u64>() > 0);
    }
}

/// Threads take permits from a two-limit limiter while the clock moves:
/// every window of each limit holds at most its limit, and a request the
/// slow limit refuses takes nothing from the fast one (its windows fill up
/// only with granted requests).
#[test]
fn concurrent_multi_grants_never_exceed_any_window() {
    const THREADS: usize = 4;
    let slice = 10_000u64;
    // 30 per 3 slices, and 50 per 12 slices (4 slices of 3).
    let quotas = [
        Quota::per(30, Duration::from_nanos(3 * slice)).slices(3),
        Quota::per(50, Duration::from_nanos(12 * slice)).slices(4),
    ];
    let clock = ManualClock::new();
    let lim = Arc::new(
        MultiLimiter::builder(quotas)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lim, clock, done, progress) =
                (lim.clone(), clock.clone(), done.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t as u64);
                let mut log = Vec::new();
                use stripecount::Clock;
                while !done.load(Ordering::Acquire) {
                    let n = rng.random_range(1..=3);
                    if let Some(e) = lim.decide_at(clock.now(), n).__slice() {
                        log.push((e, n));
                    }
                    progress.fetch_add(1, Ordering::Relaxed);
                }
                log
            })
        })
        .collect();
    pace(&clock, &progress, 5, slice / 4);
    done.store(true, Ordering::Release);
    let grants: Vec<(u64, u64)> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let last = grants.iter().map(|g| g.0).max().unwrap_or(0) as usize;
    let mut per_slice = vec![0u64; last + 1];
    for &(e, n) in &grants {
        per_slice[e as usize] += n;
    }
    for j in 0..=last {
        let fast: u64 = per_slice[(j + 1).saturating_sub(3)..=j].iter().sum();
        let coarse = j / 3;
        let lo = (coarse + 1).saturating_sub(4) * 3;
        let slow: u64 = per_slice[lo..=j].iter().sum();
        assert!(fast <= 30, "fast window at {j}: {fast}");
        assert!(slow <= 50, "slow window at {j}: {slow}");
    }
    assert!(
        per_slice.iter().sum::<u64>() >= 50,
        "the limits were reached"
    );
}
