#![cfg(loom)]
//! Loom models of the inline history (`src/limiter/inline.rs`): a
//! single-limit state keeps its recorded slice counts in its `block` word
//! while they fit, and the roll whose counts do not fit spills them into a
//! block. Under loom a count field is 1 bit wide, so a slice that counted 2
//! spills, and these models reach both the inline rolls and the spill.
//!
//! Every model checks, from the slice each grant reports, that no window
//! holds more than the limit, and that the limiter's `available_at` agrees
//! exactly with the grants after the threads are done, including at a later
//! slice whose window total is computed from the history the races wrote.
//!
//! Mutations of the real code each caught: the roll's CAS from the word it
//! read replaced by a store, or made `Relaxed`; the inline stale-tag check
//! dropped (a helper rolls whatever word it reads); the spilled block's
//! `frozen` left at 0 (these three also by `limiter.rs`); and `copy_into`
//! not copying an inline word (by `limiter_state.rs` and
//! `keyed_limiter.rs`). Dropping the snapshot's tag check of an inline word
//! is caught by none, rightly: it is an early exit, and the re-read of the
//! state word after the answer (`snapshot.rs`) already discards a read
//! that a roll overtook.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount_loom_tests::{acquire, check_windows, race, sliding, t, window_total};

/// Two helpers race the roll out of slice 0 while a third grants into it:
/// slice 0 ends with 1 (inline) or 2 (the roll spills) permits, and the
/// spill's block must hold exactly what the inline roll would have.
#[test]
fn two_helpers_race_a_spill_and_a_late_grant() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(3, 2);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let mut grants = race(
            acquire(&lim),
            vec![vec![(0, 1)], vec![(1, 1)], vec![(1, 1)]],
        );
        grants.push((0, 1));
        check_windows(&grants, 2, 3);
        // Window 1 is full whichever slice the late grant landed in.
        assert_eq!(window_total(&grants, 1, 2), 3, "{grants:?}");
        assert_eq!(lim.available_at(t(1)), 0);
        // Slice 0 leaves: what is left is slice 1's own count, read from
        // the history the roll wrote (inline or spilled).
        assert_eq!(lim.available_at(t(2)), 3 - window_total(&grants, 2, 2));
    });
}

/// A helper of the roll out of slice 0 may stall while the other thread
/// finishes that roll and rolls twice more (inline, then a spill if slice 1
/// counted 2): its CAS from the word it read must fail, never write an old
/// history over a newer one.
#[test]
fn a_stale_helper_never_writes_an_old_history() {
    stripecount_loom_tests::model(|| {
        let lim = sliding(3, 3);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let mut grants = race(
            acquire(&lim),
            vec![vec![(1, 1)], vec![(1, 1), (2, 1), (3, 1)]],
        );
        grants.push((0, 1));
        check_windows(&grants, 3, 3);
        for j in 3..=5 {
            assert_eq!(
                lim.available_at(t(j)),
                3 - window_total(&grants, j, 3),
                "t {j} {grants:?}"
            );
        }
        // A later request is judged on the history the races left.
        let fits = window_total(&grants, 4, 3) < 3;
        assert_eq!(lim.try_acquire_at(t(4), 1), fits, "{grants:?}");
    });
}

/// The naive inline history: the roll stores the new history word instead
/// of CASing it from the word it read. The state is `epoch << 33 | sealed
/// << 32 | used`; the history `epoch << 32 | count(epoch - 1)` (2 slices,
/// limit 2, as the real roll keeps it inline). A helper that computed the
/// history of the roll into slice 1 and stalls stores it after the roll
/// into slice 2: the roll into slice 3 then finds no history for slice 2,
/// counts all of `used` as slice 2's, and refuses a request that fits.
fn naive_history_by_store() {
    {
        const LIMIT: u64 = 2;
        const SEALED: u64 = 1 << 32;
        let state = Arc::new(AtomicU64::new(0));
        let hist = Arc::new(AtomicU64::new(0));
        let acquire = {
            let (state, hist) = (state.clone(), hist.clone());
            move |e: u64| -> bool {
                loop {
                    let s = state.load(Ordering::Acquire);
                    let (se, used) = (s >> 33, s & 0xffff_ffff);
                    if se > e || (se == e && s & SEALED != 0) {
                        return false; // judged later: keep the model small
                    }
                    if se == e && s & SEALED == 0 {
                        if used + 1 > LIMIT {
                            return false;
                        }
                        if state
                            .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            return true;
                        }
                        continue;
                    }
                    if s & SEALED == 0 {
                        let _ = state.compare_exchange(
                            s,
                            s | SEALED,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        continue;
                    }
                    // Roll `se -> e`: record slice `se`, then unseal.
                    let h = hist.load(Ordering::Acquire);
                    let p = if h >> 32 == e {
                        h & 0xffff_ffff // another helper recorded it
                    } else if h >> 32 != se {
                        continue; // stale: the state moved on
                    } else {
                        let count = used - (h & 0xffff_ffff);
                        let p = if e == se + 1 { count } else { 0 };
                        hist.store(e << 32 | p, Ordering::Release); // the bug
                        p
                    };
                    let _ =
                        state.compare_exchange(s, e << 33 | p, Ordering::AcqRel, Ordering::Acquire);
                }
            }
        };
        assert!(acquire(0));
        let a = Arc::new(acquire);
        let b = a.clone();
        let t1 = thread::spawn(move || b(1));
        let c = a.clone();
        let t2 = thread::spawn(move || (c(1), c(2)));
        let _ = t1.join().unwrap();
        let _ = t2.join().unwrap();
        // Slice 2 holds at most one permit (the second thread's one
        // request there): a request in slice 3 (window: slices 2, 3) fits.
        assert!(a(3), "a request that fits was refused");
    }
}

#[test]
fn loom_catches_the_history_stored_not_cased() {
    stripecount_loom_tests::expect_failure("inline history by store", naive_history_by_store);
}
