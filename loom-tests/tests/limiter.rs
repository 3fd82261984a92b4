#![cfg(loom)]
//! Loom models of the limiters' admission protocol (`src/limiter/`), and
//! the naive designs it replaces, which loom must catch over-admitting.
//!
//! Each model runs a few requests on 2-3 threads with explicit times (one
//! nanosecond per slice) and checks, from the slice every grant reports it
//! was counted in, that no window holds more than the limit, and that every
//! grant is accounted for (the limiter's own `available_at` agrees with the
//! recorded grants).

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Quota, RateLimiter};
use stripecount_loom_tests::{acquire, check_windows, race, sliding, t, window_total};

/// A fixed-window limiter (one slice) of `limit` permits per nanosecond,
/// on a manual clock.
fn fixed(limit: u64) -> RateLimiter<ManualClock> {
    RateLimiter::builder(Quota::per(limit, Duration::from_nanos(1)).slices(1))
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// Two threads race for the last permit of a window while one of them
/// crosses into the next slice: the roll (seal, record, unseal) against a
/// grant into the old slice.
#[test]
fn sliding_last_permit_across_a_slice_boundary() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(2, 2);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let mut grants = race(acquire(&lim), vec![vec![(0, 1)], vec![(1, 1)]]);
        grants.push((0, 1));
        check_windows(&grants, 2, 2);
        // Exactly one of the two fits: slice 0 already holds one permit and
        // both requests fall in the window of slice 1.
        assert_eq!(grants.len(), 2, "{grants:?}");
        assert_eq!(lim.available_at(t(1)), 2 - window_total(&grants, 1, 2));
        assert_eq!(lim.available_at(t(2)), 2 - window_total(&grants, 2, 2));
    });
}

/// One thread holds an old epoch while the other rolls twice (and asks for
/// the whole limit): a helper with a stale epoch must never roll the newer
/// state back, and helpers race each other through every step of the roll.
#[test]
fn sliding_stale_epoch_and_two_rolls() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(2, 2);
        let grants = race(acquire(&lim), vec![vec![(0, 1)], vec![(1, 1), (2, 2)]]);
        check_windows(&grants, 2, 2);
        // The request at 2 moved the limiter to slice 2 whatever happened.
        assert_eq!(lim.available_at(t(0)), 2 - window_total(&grants, 2, 2));
        // `(2, 2)` is refused only if another grant sits in its window.
        let at_2 = grants.contains(&(2, 2));
        assert!(at_2 || window_total(&grants, 2, 2) >= 1, "{grants:?}");
        assert!(grants.len() >= 2, "{grants:?}");
    });
}

/// Three threads: two help the same roll (seal, record, frozen sum, unseal)
/// while the third grants into the old slice.
#[test]
fn sliding_three_threads_one_roll() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(1, 2);
        let grants = race(
            acquire(&lim),
            vec![vec![(0, 1)], vec![(1, 1)], vec![(1, 1)]],
        );
        check_windows(&grants, 2, 1);
        // The window of slice 1 always holds its one permit.
        assert_eq!(window_total(&grants, 1, 2), 1, "{grants:?}");
        assert_eq!(lim.available_at(t(0)), 0);
    });
}

/// Three slices: a roll that records the old slice and zeroes a skipped one
/// races a grant into the old slice and a request two slices ahead; the
/// frozen sums of every window must count every grant.
#[test]
fn sliding_skipped_slice_and_frozen_sum() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(2, 3);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let mut grants = race(acquire(&lim), vec![vec![(1, 1)], vec![(3, 1), (3, 1)]]);
        grants.push((0, 1));
        check_windows(&grants, 3, 2);
        assert_eq!(lim.available_at(t(0)), 2 - window_total(&grants, 3, 3));
        // Slice 3's window (1..=3) is always filled: two requests at 3 and
        // one that may be judged at 1.
        assert_eq!(window_total(&grants, 3, 3), 2, "{grants:?}");
    });
}

/// Two helpers race one roll that skips a slice while a counted slice leaves
/// the window. The roll computes `P(T)` as `P(E) + count(e)` minus the
/// slices leaving the window (`src/limiter/roll_one.rs`), so every helper must read the same
/// leaving counts even while another is settling the skipped slice, whose
/// ring slot is the leaving slice's. (Caught: settling a skipped slice by
/// writing its zero over the leaving slice's count; a late helper then
/// reads the leaving count as 0, freezes a sum one too high and both
/// requests are refused.)
#[test]
fn sliding_two_helpers_one_slice_leaves_one_is_skipped() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(2, 3);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        assert_eq!(lim.__acquire_at(t(2), 1).ok(), Some(2));
        let mut grants = race(acquire(&lim), vec![vec![(4, 1)], vec![(4, 1)]]);
        grants.extend([(0, 1), (2, 1)]);
        check_windows(&grants, 3, 2);
        // Slice 4's window (2..=4) holds slice 2's permit: exactly one more
        // fits, and slice 0's has left.
        assert_eq!(window_total(&grants, 4, 3), 2, "{grants:?}");
        assert_eq!(lim.available_at(t(4)), 0);
        assert_eq!(lim.available_at(t(5)), 1);
    });
}

/// The fixed window's roll is one CAS of tag and count together: grants
/// racing the start of a new window are never wiped.
#[test]
fn fixed_window_roll_never_wipes_a_grant() {
    stripecount_loom_tests::model(|| {
        let lim = Arc::new(fixed(1));
        let grants = race(acquire(&lim), vec![vec![(0, 1), (1, 1)], vec![(1, 1)]]);
        check_windows(&grants, 1, 1);
        // Window 1 always gets its permit (a refusal means it was full).
        assert_eq!(window_total(&grants, 1, 1), 1, "{grants:?}");
        assert_eq!(lim.available_at(t(1)), 0);
    });
}

/// Three threads: one in the old window, two racing for the single permit
/// of the new one while it starts.
#[test]
fn fixed_window_three_threads_last_permit() {
    stripecount_loom_tests::model(|| {
        let lim = Arc::new(fixed(1));
        let grants = race(
            acquire(&lim),
            vec![vec![(0, 1)], vec![(1, 1)], vec![(1, 1)]],
        );
        check_windows(&grants, 1, 1);
        assert_eq!(window_total(&grants, 1, 1), 1, "{grants:?}");
    });
}

/// The naive "check the sum, then add": both threads see room and add.
fn naive_check_then_add() {
    stripecount_loom_tests::model(|| {
        let count = Arc::new(AtomicU64::new(0));
        let limit = 1;
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let count = count.clone();
                thread::spawn(move || {
                    if count.load(Ordering::Acquire) < limit {
                        count.fetch_add(1, Ordering::AcqRel);
                        1
                    } else {
                        0
                    }
                })
            })
            .collect();
        let granted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(granted <= limit, "over-admitted: {granted} > {limit}");
    });
}

/// The published fixed window: CAS the next window start, then store
/// `count = 1`. A grant between the CAS and the store is wiped, and the
/// wiped permit is granted again.
fn naive_cas_start_then_store() {
    stripecount_loom_tests::model(|| {
        const LIMIT: u64 = 2;
        let start = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(1)); // window 0 holds one grant
        let acquire = move |now: u64| -> u64 {
            let s = start.load(Ordering::Acquire);
            if now > s
                && start
                    .compare_exchange(s, now, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                count.store(1, Ordering::Release);
                return 1;
            }
            let ok = count.load(Ordering::Acquire) < LIMIT
                && count.fetch_add(1, Ordering::AcqRel) < LIMIT;
            u64::from(ok)
        };
        let acquire = Arc::new(acquire);
        // Every request is in window 1 (time 1).
        let handles: Vec<_> = [1usize, 2]
            .into_iter()
            .map(|reqs| {
                let acquire = acquire.clone();
                thread::spawn(move || (0..reqs).map(|_| acquire(1)).sum::<u64>())
            })
            .collect();
        let granted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(
            granted <= LIMIT,
            "over-admitted in window 1: {granted} > {LIMIT}"
        );
    });
}

/// A naive roll for a sliding window of 2 slices that publishes the new
/// slice first and records the old slice's final count afterwards. The state
/// is `epoch << 32 | count` of the current slice; `hist` holds the final
/// count of the previous slice as `epoch << 32 | count`. A request in the
/// next-but-one slice that reads the history before the record sees the old
/// slice as empty.
fn naive_publish_then_record() {
    stripecount_loom_tests::model(|| {
        const LIMIT: u64 = 1;
        let state = Arc::new(AtomicU64::new(0)); // slice 0, count 0
        let hist = Arc::new(AtomicU64::new(u64::MAX)); // nothing recorded
        let acquire = {
            let (state, hist) = (state.clone(), hist.clone());
            move |e: u64| -> Option<u64> {
                loop {
                    let s = state.load(Ordering::Acquire);
                    let (se, c) = (s >> 32, s & 0xffff_ffff);
                    if se > e {
                        return None; // judged later; keep the model small
                    }
                    if se == e {
                        // Frozen part: the previous slice, from the history.
                        let h = hist.load(Ordering::Acquire);
                        let p = if h >> 32 == e.wrapping_sub(1) {
                            h & 0xffff_ffff
                        } else {
                            0
                        };
                        if p + c + 1 > LIMIT {
                            return None;
                        }
                        if state
                            .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            return Some(e);
                        }
                        continue;
                    }
                    // Roll: publish the new slice, then record the old one.
                    let p = if se + 1 == e { c } else { 0 };
                    if p + 1 > LIMIT {
                        // Roll without granting.
                        if state
                            .compare_exchange(s, e << 32, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            hist.store((se << 32) | c, Ordering::Release);
                        }
                        continue;
                    }
                    if state
                        .compare_exchange(s, (e << 32) | 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        hist.store((se << 32) | c, Ordering::Release);
                        return Some(e);
                    }
                }
            }
        };
        // Slice 0 takes the permit; then two requests in slice 1.
        assert_eq!(acquire(0), Some(0));
        let a = Arc::new(acquire);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let a = a.clone();
                thread::spawn(move || a(1))
            })
            .collect();
        let mut grants = vec![(0u64, 1u64)];
        grants.extend(
            handles
                .into_iter()
                .filter_map(|h| h.join().unwrap())
                .map(|e| (e, 1)),
        );
        check_windows(&grants, 2, LIMIT);
    });
}

fn must_fail(name: &str, model: fn()) {
    let caught = std::panic::catch_unwind(model);
    assert!(
        caught.is_err(),
        "loom did not catch the naive design `{name}`"
    );
}

#[test]
fn loom_catches_check_then_add() {
    must_fail("check the sum, then add", naive_check_then_add);
}

#[test]
fn loom_catches_cas_start_then_store_count() {
    must_fail("CAS next start, then count = 1", naive_cas_start_then_store);
}

#[test]
fn loom_catches_publish_before_record() {
    must_fail(
        "publish the new slice, then record the old",
        naive_publish_then_record,
    );
}
