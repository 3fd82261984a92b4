//! Loom models of `StripedCounter`: striped add, cell growth on contention,
//! sum and sum_and_reset; and the naive "read then zero" reset, which loom
//! must catch losing an add.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount::StripedCounter;
use stripecount_loom_tests::{expect_failure, model};

/// Two threads add concurrently (contention grows the cells); nothing is
/// lost or doubled.
#[test]
fn concurrent_adds_with_growth_are_exact() {
    model(|| {
        let c = Arc::new(StripedCounter::with_max_stripes(4));
        let hs: Vec<_> = [1u64, 10]
            .into_iter()
            .map(|n| {
                let c = c.clone();
                thread::spawn(move || {
                    c.add(n);
                    c.add(n);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.sum(), 22);
        assert!(c.stripes() <= 4);
    });
}

/// `sum_and_reset` racing adds: every add is in exactly one of the totals.
#[test]
fn sum_and_reset_racing_adds_loses_nothing() {
    model(|| {
        let c = Arc::new(StripedCounter::with_max_stripes(4));
        let c2 = c.clone();
        let h = thread::spawn(move || {
            c2.add(1);
            c2.add(2);
        });
        let first = c.sum_and_reset();
        // A partial view is fine, but only of whole adds in program order.
        assert!([0, 1, 3].contains(&first), "first = {first}");
        h.join().unwrap();
        let second = c.sum_and_reset();
        assert_eq!(first + second, 3);
        assert_eq!(c.sum(), 0);
    });
}

/// A sum running alongside adds sees each add whole, never more than was
/// added.
#[test]
fn sum_racing_growth_sees_whole_adds() {
    model(|| {
        let c = Arc::new(StripedCounter::with_max_stripes(2));
        let hs: Vec<_> = [1u64, 10]
            .into_iter()
            .map(|n| {
                let c = c.clone();
                thread::spawn(move || c.add(n))
            })
            .collect();
        let s = c.sum();
        assert!([0, 1, 10, 11].contains(&s), "s = {s}");
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.sum(), 11);
    });
}

/// The naive reset: read a cell, then store 0. An add between the two is
/// lost. Loom must find it.
#[test]
fn naive_read_then_zero_reset_loses_adds() {
    expect_failure("read-then-zero reset", || {
        let cell = Arc::new(AtomicU64::new(0));
        let c2 = cell.clone();
        let h = thread::spawn(move || {
            c2.fetch_add(1, Ordering::AcqRel);
        });
        let first = cell.load(Ordering::Acquire);
        cell.store(0, Ordering::Release);
        h.join().unwrap();
        let second = cell.load(Ordering::Acquire);
        assert_eq!(first + second, 1, "an add was lost by the naive reset");
    });
}
