//! StripedCounter: exact totals, reset semantics, saturation, growth bounds.

use std::sync::{Arc, Barrier};
use stripecount::StripedCounter;

static_assertions::assert_impl_all!(StripedCounter: Send, Sync, Default, std::fmt::Debug);

#[test]
fn starts_empty_with_no_cell_and_one_after_the_first_add() {
    let c = StripedCounter::new();
    assert_eq!(c.sum(), 0);
    assert_eq!(c.stripes(), 0);
    c.add(1);
    assert_eq!(c.stripes(), 1);
    assert!(c.max_stripes().is_power_of_two());
    assert!(c.max_stripes() >= 2);
}

#[test]
fn single_thread_is_exact_and_never_grows() {
    let c = StripedCounter::default();
    for i in 0..10_000u64 {
        c.add(i % 7);
    }
    c.add(1);
    let expected: u64 = (0..10_000u64).map(|i| i % 7).sum::<u64>() + 1;
    assert_eq!(c.sum(), expected);
    assert_eq!(c.stripes(), 1, "no contention, no growth");
}

#[test]
fn reset_and_sum_and_reset() {
    let c = StripedCounter::new();
    c.add(5);
    assert_eq!(c.sum_and_reset(), 5);
    assert_eq!(c.sum(), 0);
    c.add(3);
    c.reset();
    assert_eq!(c.sum(), 0);
    c.add(2);
    assert_eq!(c.sum(), 2);
}

#[test]
fn saturates_instead_of_wrapping() {
    let c = StripedCounter::new();
    c.add(u64::MAX - 1);
    c.add(5);
    assert_eq!(c.sum(), u64::MAX);
    c.add(1);
    assert_eq!(c.sum(), u64::MAX);
}

#[test]
fn many_threads_exact_total_and_bounded_growth() {
    let threads = 8;
    let per = 200_000u64;
    let c = Arc::new(StripedCounter::with_max_stripes(4));
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (c, barrier) = (c.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per {
                    c.add(1 + (i + t as u64) % 3);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let expected: u64 = (0..threads as u64)
        .map(|t| (0..per).map(|i| 1 + (i + t) % 3).sum::<u64>())
        .sum();
    assert_eq!(c.sum(), expected);
    // At most 4 owned cells and 4 shared ones.
    assert!(c.stripes() <= 8, "{}", c.stripes());
}

/// Threads that add and exit one after another: each cell outlives its
/// thread (its count stays), and a later thread that gets the exited
/// thread's token takes over its cell, so cells do not pile up.
#[test]
fn cells_outlive_their_threads_and_pass_to_the_next() {
    let c = Arc::new(StripedCounter::with_max_stripes(4));
    for round in 0..50u64 {
        let c2 = c.clone();
        std::thread::spawn(move || {
            for _ in 0..1000 {
                c2.add(round + 1);
            }
        })
        .join()
        .unwrap();
        assert_eq!(c.sum(), 1000 * (round + 1) * (round + 2) / 2);
    }
    // 4 owned cells; the test harness runs other tests' threads at the same
    // time, which take tokens too, so a thread here may find its slot owned
    // by a token now held by a thread that never touches `c` and use a
    // shared cell instead: at most 4 of those. Without the hand-over, 50
    // threads would leave up to 50 claims behind.
    assert!(c.stripes() <= 8, "{}", c.stripes());
    assert_eq!(c.sum_and_reset(), 1000 * 50 * 51 / 2);
    assert_eq!(c.sum(), 0);
}

/// `sum_and_reset` racing owners' adds, with threads joining and leaving
/// (their cells passing to the next threads): every add is in exactly one
/// of the drained totals.
#[test]
fn resets_racing_owners_and_exits_lose_and_double_nothing() {
    let c = Arc::new(StripedCounter::with_max_stripes(2));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drainer = {
        let (c, stop) = (c.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut drained = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                drained += c.sum_and_reset();
            }
            drained
        })
    };
    let mut added = 0u64;
    for wave in 0..20u64 {
        let hs: Vec<_> = (0..3)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        c.add(1 + (i + t + wave) % 4);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        added += (0..3u64)
            .map(|t| (0..20_000u64).map(|i| 1 + (i + t + wave) % 4).sum::<u64>())
            .sum::<u64>();
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let drained = drainer.join().unwrap() + c.sum_and_reset();
    assert_eq!(drained, added);
}

#[test]
fn sum_and_reset_concurrent_with_adds_loses_nothing() {
    let c = Arc::new(StripedCounter::new());
    let adders = 3;
    let per = 300_000u64;
    let hs: Vec<_> = (0..adders)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    c.add(1);
                }
            })
        })
        .collect();
    let mut drained = 0u64;
    while hs.iter().any(|h| !h.is_finished()) {
        drained += c.sum_and_reset();
    }
    for h in hs {
        h.join().unwrap();
    }
    drained += c.sum_and_reset();
    assert_eq!(drained, adders as u64 * per);
}

#[test]
fn max_stripes_is_normalized() {
    assert_eq!(StripedCounter::with_max_stripes(0).max_stripes(), 2);
    assert_eq!(StripedCounter::with_max_stripes(3).max_stripes(), 4);
    assert_eq!(StripedCounter::with_max_stripes(100_000).max_stripes(), 256);
}
