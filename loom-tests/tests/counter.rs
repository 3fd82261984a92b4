//! Loom models of `StripedCounter`: owned cells (one writer, plain stores)
//! and shared cells (CAS, `__loom_shared`) racing sums and resets; a cell
//! passing from an exiting thread to the next holder of its token; and the
//! naive resets loom must catch: "read then zero" losing an add, and
//! `swap(0)` on a single-writer cell counting one twice.
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

/// The same models on shared cells: every add is a CAS.
#[test]
fn shared_cells_racing_adds_and_resets_are_exact() {
    model(|| {
        let c = Arc::new(StripedCounter::with_max_stripes(2).__loom_shared());
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
        let first = c.sum_and_reset();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(first + c.sum_and_reset(), 22);
        assert_eq!(c.sum(), 0);
    });
}

/// A thread adds, exits (giving its token back) and, from a later
/// thread-local destructor, adds again; another thread adds meanwhile and
/// may take the token, and with it the first thread's cell. The exited
/// thread's last add must not write that cell: nothing is lost.
#[test]
fn a_cell_passes_whole_to_the_next_holder_of_its_token() {
    model(|| {
        let c = Arc::new(StripedCounter::with_max_stripes(2));
        let (ca, cb) = (c.clone(), c.clone());
        let a = thread::spawn(move || {
            ca.add(1);
            stripecount::__loom_exit_thread();
            ca.add(2); // no token now: a shared cell
        });
        let b = thread::spawn(move || cb.add(10));
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(c.sum(), 13);
    });
}

/// The naive reset of a single-writer cell: `swap(0)`. The owner's add is a
/// load and a store, so a swap between the two is undone by the store and
/// the swapped-out count is counted again. Loom must find it.
#[test]
fn naive_swap_reset_of_a_single_writer_cell_doubles_an_add() {
    expect_failure("swap(0) on a single-writer cell", || {
        let cell = Arc::new(AtomicU64::new(1));
        let c2 = cell.clone();
        let owner = thread::spawn(move || {
            let v = c2.load(Ordering::Relaxed);
            c2.store(v + 1, Ordering::Release);
        });
        let first = cell.swap(0, Ordering::AcqRel);
        owner.join().unwrap();
        let second = cell.load(Ordering::Acquire);
        assert_eq!(first + second, 2, "an add was counted twice (or lost)");
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
