#![cfg(loom)]
//! Loom models of the per-key limiter's refusal count
//! (`src/limiter/keyed/refusals.rs`): a cell per thread token, written with
//! a plain load and store; threads without a cell counting in a striped
//! rest; a token, and its cell, handed on from an exited thread to a new
//! one. And the naive design it replaces, loom must catch: cells shared by
//! tokens modulo their number, written the same way, losing counts.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_loom_tests::{expect_failure, model, t, Fixed};

const KEY: u32 = 7;

/// A limit of 1 per ns, with `cells` refusal cells: a request for 2 is
/// refused before any lookup, so the models exercise the count alone.
fn limiter(cells: usize) -> Arc<KeyedLimiter<u32, ManualClock, Fixed>> {
    Arc::new(
        KeyedLimiter::builder(Quota::per(1, Duration::from_nanos(1)).slices(1))
            .clock(ManualClock::new())
            .hasher(Fixed::default())
            .build()
            .unwrap()
            .__loom_refusal_cells(cells),
    )
}

/// Refuses one request for 2 permits.
fn refuse(lim: &KeyedLimiter<u32, ManualClock, Fixed>) {
    assert!(!lim.try_acquire_at(&KEY, t(0), 2));
}

/// One cell: of two racing threads, one counts in it and one in the rest.
/// The first exits (giving its token back) and refuses again without a
/// token; a third thread then may take its token, and its cell. A reader
/// meanwhile sees whole counts, and at the end nothing is lost or doubled.
#[test]
fn refusals_are_exact_across_cells_rest_and_a_handed_on_token() {
    model(|| {
        let lim = limiter(1);
        let (la, lb) = (lim.clone(), lim.clone());
        let a = thread::spawn(move || {
            refuse(&la);
            stripecount::__loom_exit_thread();
            refuse(&la); // no token now: the rest
        });
        let b = thread::spawn(move || {
            refuse(&lb);
            lb.refusals()
        });
        a.join().unwrap();
        let seen = b.join().unwrap();
        assert!((1..=3).contains(&seen), "seen = {seen}");
        assert_eq!(lim.refusals(), 3);
        let lc = lim.clone();
        thread::spawn(move || refuse(&lc)).join().unwrap();
        assert_eq!(lim.refusals(), 4, "a handed-on cell lost its count");
    });
}

/// Two threads with cells of their own refuse while a third reads: every
/// read is between 0 and the refusals made, and the last is exact.
#[test]
fn refusals_in_cells_of_their_own_are_exact() {
    model(|| {
        let lim = limiter(4);
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let l = lim.clone();
                thread::spawn(move || {
                    refuse(&l);
                    refuse(&l);
                })
            })
            .collect();
        let lr = lim.clone();
        let reader = thread::spawn(move || lr.refusals());
        for h in hs {
            h.join().unwrap();
        }
        assert!(reader.join().unwrap() <= 4);
        assert_eq!(lim.refusals(), 4);
    });
}

/// The naive count: cells shared by tokens modulo their number, each add a
/// plain load and store. Two live threads whose tokens share a cell lose
/// an add. Loom must find it.
#[test]
fn naive_cells_shared_by_tokens_lose_counts() {
    expect_failure(
        "a cell shared by two tokens, written by load and store",
        || {
            let cell = Arc::new(AtomicU64::new(0));
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let c = cell.clone();
                    thread::spawn(move || {
                        let v = c.load(Ordering::Relaxed);
                        c.store(v + 1, Ordering::Relaxed);
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(cell.load(Ordering::Relaxed), 2, "a refusal was lost");
        },
    );
}
