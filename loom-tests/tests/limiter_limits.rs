#![cfg(loom)]
//! Loom models of limits: several at once, all or nothing (`MultiLimiter`,
//! `src/limiter/multi.rs`), and a limit changed at run time
//! (`src/limiter/direct.rs`). Each with the naive design it replaces as a
//! counter-example loom must catch: acquire limiter by limiter and give
//! back on refusal (a concurrent request is wrongly refused by the permit
//! in transit), and change a limit by swapping in a fresh limiter (it has
//! forgotten the window, and over-admits).
//!
//! Times are explicit: the shortest slice is one nanosecond.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{MultiLimiter, Quota, RateLimiter};
use stripecount_loom_tests::{acquire, race, t};

const NS: Duration = Duration::from_nanos(1);

/// A limiter of every `(limit, window, slices)` of `limits` at once.
fn multi(limits: &[(u64, Duration, usize)]) -> Arc<MultiLimiter<ManualClock>> {
    let quotas: Vec<Quota> = limits
        .iter()
        .map(|&(limit, window, slices)| Quota::per(limit, window).slices(slices))
        .collect();
    Arc::new(
        MultiLimiter::builder(quotas)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    )
}

/// Asserts that no window ending in `at` holds more than `fast` permits
/// of the fast limit or `slow` of the slow one (slices as in
/// [`assert_available`]).
fn check_limits(
    grants: &[(u64, u64)],
    at: std::ops::RangeInclusive<u64>,
    (fast, slow): (u64, u64),
) {
    for j in at {
        assert!(
            window(grants, j, 1, 2) <= fast,
            "fast limit at {j}: {grants:?}"
        );
        assert!(
            window(grants, j, 2, 2) <= slow,
            "slow limit at {j}: {grants:?}"
        );
    }
}

/// Asserts that `lim.available_at(t(j))` is what the grants leave of a fast
/// limit (1 ns slices, 2 of them) and a slow one (2 ns slices, 2 of them).
fn assert_available(
    lim: &MultiLimiter<ManualClock>,
    grants: &[(u64, u64)],
    at: std::ops::RangeInclusive<u64>,
    (fast, slow): (u64, u64),
) {
    for j in at {
        let left = (fast - window(grants, j, 1, 2)).min(slow - window(grants, j, 2, 2));
        assert_eq!(lim.available_at(t(j)), left, "at {j}: {grants:?}");
    }
}

/// The total of `grants` in the window at finest epoch `j` of a level with
/// `ratio` finest slices per slice and `slices` slices.
fn window(grants: &[(u64, u64)], j: u64, ratio: u64, slices: u64) -> u64 {
    grants
        .iter()
        .filter(|(e, _)| e / ratio <= j / ratio && j / ratio - e / ratio < slices)
        .map(|(_, n)| n)
        .sum()
}

/// Two limits, 2 per 2 ns (slices of 1 ns) and 3 per 4 ns (slices of 2
/// ns), and a request on each of two threads, one in slice 1 and one in
/// slice 2: a roll of the first limit's slice and of the second's, raced by
/// the other request. No window of either limit over-admits, and the
/// limiter's own reads agree with the grants.
#[test]
fn two_limits_across_both_boundaries() {
    stripecount_loom_tests::model(|| {
        let lim = multi(&[(2, 2 * NS, 2), (3, 4 * NS, 2)]);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let mut grants = race(acquire(&lim), vec![vec![(1, 2)], vec![(2, 1)]]);
        grants.push((0, 1));
        check_limits(&grants, 0..=3, (2, 3));
        // The last slice's windows, as the limiter reads them.
        assert_available(&lim, &grants, 2..=2, (2, 3));
        // Exactly one of the two fits, whatever the order: (1, 2) never fits
        // at 1 (the fast window holds slice 0's permit); judged at 2 (the
        // other thread moved the time) it fits if it comes first, and then
        // (2, 1) does not, and the other way round.
        assert_eq!(grants.len(), 2, "{grants:?}");
    });
}

/// A state starts *quiet* (nothing recorded, no history block:
/// `src/limiter/history.rs`). Its first roll has nothing to record and moves
/// the quiet word; the next closes a slice with permits and writes the
/// state's first block, already describing the new slice. Both rolls race
/// a request. Exactly two of the three requests fit the fast limit, and the
/// limiter's reads of the new block agree with the grants.
#[test]
fn a_quiet_state_rolls_empty_then_into_its_first_block() {
    stripecount_loom_tests::model(|| {
        let lim = multi(&[(2, 2 * NS, 2), (3, 4 * NS, 2)]);
        let grants = race(acquire(&lim), vec![vec![(1, 1), (2, 1)], vec![(1, 1)]]);
        check_limits(&grants, 0..=3, (2, 3));
        // Slices 1 and 2 share a fast window: of three permits, two fit.
        assert_eq!(grants.len(), 2, "{grants:?}");
        assert_available(&lim, &grants, 2..=4, (2, 3));
    });
}

/// Three requests on a quiet state, in slices 1, 2 and 1: a helper of the
/// empty roll into slice 1 may stall while the others finish it, move the
/// time to slice 2 (slice 1 can stay empty: its request is judged at 2) and
/// roll again, so the helper meets a quiet word newer than its roll. It must
/// leave it alone. Every request fits both limits.
#[test]
fn a_stale_helper_meets_a_newer_quiet_word() {
    stripecount_loom_tests::model(|| {
        let lim = multi(&[(3, 2 * NS, 2), (3, 4 * NS, 2)]);
        let grants = race(
            acquire(&lim),
            vec![vec![(1, 1)], vec![(2, 1)], vec![(1, 1)]],
        );
        assert_eq!(grants.len(), 3, "wrongly refused: {grants:?}");
        assert_available(&lim, &grants, 2..=4, (3, 3));
    });
}

/// Two requests in one slice against a slow limit with room for one: the
/// second is judged with the first's permit, which is still in the current
/// slice (not yet in any frozen sum), so exactly one is granted.
#[test]
fn one_slice_counts_against_every_limit() {
    stripecount_loom_tests::model(|| {
        // 3 per 1 ns, and 2 per 4 ns (two slices of 2 ns).
        let lim = multi(&[(3, NS, 1), (2, 4 * NS, 2)]);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let grants = race(acquire(&lim), vec![vec![(1, 1)], vec![(1, 1)]]);
        assert_eq!(grants, vec![(1, 1)], "the slow limit over-admitted");
        assert_eq!(lim.available_at(t(1)), 0);
    });
}

/// All or nothing: a request for 2 that the slow limit refuses takes
/// nothing from the fast one, so a concurrent request for 1, which both
/// limits have room for, is granted in every interleaving (while both race
/// the roll into the new slice).
#[test]
fn a_refused_request_takes_nothing() {
    stripecount_loom_tests::model(|| {
        // 2 per 1 ns (fixed), and 2 per 4 ns (two slices of 2 ns).
        let lim = multi(&[(2, NS, 1), (2, 4 * NS, 2)]);
        assert_eq!(lim.__acquire_at(t(0), 1).ok(), Some(0));
        let big = {
            let lim = lim.clone();
            thread::spawn(move || lim.decide_at(t(1), 2))
        };
        let small = {
            let lim = lim.clone();
            thread::spawn(move || lim.decide_at(t(1), 1))
        };
        let big = big.join().unwrap();
        let small = small.join().unwrap();
        assert!(!big.is_granted(), "{big:?}");
        assert_eq!(small.__slice(), Some(1), "wrongly refused: {small:?}");
        assert_eq!(lim.available_at(t(1)), 0);
    });
}

/// The naive all-or-nothing: take from each limit in turn (CAS), and give
/// back on refusal. Between the take and the give-back, the fast limit
/// looks full, and the small request is refused although, in effect, the
/// big one took nothing.
fn naive_take_then_give_back() {
    let fast = Arc::new(AtomicU64::new(0)); // limit 2
    let slow = Arc::new(AtomicU64::new(1)); // limit 2, one already taken
    let take = |c: &AtomicU64, n: u64, limit: u64| {
        let mut cur = c.load(Ordering::Acquire);
        loop {
            if cur + n > limit {
                return false;
            }
            match c.compare_exchange(cur, cur + n, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(a) => cur = a,
            }
        }
    };
    let acquire = move |fast: &AtomicU64, slow: &AtomicU64, n: u64| {
        if !take(fast, n, 2) {
            return false;
        }
        if !take(slow, n, 2) {
            fast.fetch_sub(n, Ordering::AcqRel); // give back
            return false;
        }
        true
    };
    let big = {
        let (f, s) = (fast.clone(), slow.clone());
        thread::spawn(move || acquire(&f, &s, 2))
    };
    let small = {
        let (f, s) = (fast.clone(), slow.clone());
        thread::spawn(move || acquire(&f, &s, 1))
    };
    assert!(!big.join().unwrap());
    assert!(
        small.join().unwrap(),
        "wrongly refused by a permit in transit"
    );
}

#[test]
fn loom_catches_take_then_give_back() {
    stripecount_loom_tests::expect_failure("take in turn, give back", naive_take_then_give_back);
}

/// A limit lowered from 2 to 1 while a request is decided, in a window that
/// already holds one permit: the request is granted only if it was judged
/// against 2 (and then the window holds 2), and every request that starts
/// after the change is refused: the window is never reset.
#[test]
fn lowering_a_limit_never_over_admits() {
    stripecount_loom_tests::model(|| {
        let lim = Arc::new(
            RateLimiter::builder(Quota::per(2, 2 * NS).slices(2))
                .clock(ManualClock::new())
                .build()
                .unwrap(),
        );
        assert!(lim.try_acquire_at(t(0), 1));
        let changer = {
            let lim = lim.clone();
            thread::spawn(move || lim.set_limit(1))
        };
        let request = {
            let lim = lim.clone();
            thread::spawn(move || lim.decide_at(t(1), 1))
        };
        changer.join().unwrap();
        let d = request.join().unwrap();
        if d.is_granted() {
            assert_eq!(d.limit(), 2, "granted against the new limit: {d:?}");
        } else {
            assert_eq!(d.limit(), 1, "refused against the old limit: {d:?}");
        }
        // After the change (joined): judged against 1, and the window holds
        // at least the first permit.
        let after = lim.decide_at(t(1), 1);
        assert!(!after.is_granted() && after.limit() == 1, "{after:?}");
        assert_eq!(lim.available_at(t(1)), 0);
    });
}

/// The naive change: swap in a fresh limiter with the new limit. It has
/// forgotten the permit already in the window, so a request after the
/// change is granted: 2 permits in a window whose limit is 1.
fn naive_swap_in_a_new_limiter() {
    // Limiter 0 (limit 2) holds one permit; limiter 1 (limit 1) is fresh.
    let counts = Arc::new([AtomicU64::new(1), AtomicU64::new(0)]);
    let current = Arc::new(AtomicU64::new(0));
    let acquire = |counts: &[AtomicU64; 2], i: usize| {
        let limit = [2, 1][i];
        let c = counts[i].load(Ordering::Acquire);
        c < limit
            && counts[i]
                .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    };
    let changer = {
        let current = current.clone();
        thread::spawn(move || current.store(1, Ordering::Release))
    };
    changer.join().unwrap();
    let i = current.load(Ordering::Acquire) as usize;
    let granted = acquire(&counts, i);
    assert!(
        !granted,
        "granted after the limit was lowered to 1 with 1 in the window"
    );
}

#[test]
fn loom_catches_swapping_in_a_new_limiter() {
    stripecount_loom_tests::expect_failure("swap in a fresh limiter", naive_swap_in_a_new_limiter);
}
