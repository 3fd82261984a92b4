//! StripedCounter: exact totals, reset semantics, saturation, growth bounds.

use std::sync::{Arc, Barrier};
use stripecount::StripedCounter;

static_assertions::assert_impl_all!(StripedCounter: Send, Sync, Default, std::fmt::Debug);

#[test]
fn starts_empty_with_one_cell() {
    let c = StripedCounter::new();
    assert_eq!(c.sum(), 0);
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
    c.increment();
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
    c.increment();
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
    assert!(c.stripes() <= 4 && c.stripes().is_power_of_two());
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
                    c.increment();
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
