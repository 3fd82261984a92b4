#![cfg(loom)]
//! Loom models of the cluster limiter's lease word
//! (`redis/src/lease/word.rs`): grants racing for a lease's last permit,
//! a grant racing the lease's return (revoke) and its expiry, and a grant
//! racing the installation of the next lease, and the one grant that asks
//! for a renewal. Each with the naive design
//! it replaces as a counter-example loom must catch.
//!
//! The word's source is compiled here with loom's atomics (the `sync`
//! module below stands in for the crate's `redis/src/sync.rs`), rather than
//! building `stripecount-redis` under loom: its Redis client and its map
//! (scc) are not loom-aware, and the word is the crate's only atomic
//! protocol and reads no other memory.
//!
//! The property is conservation: every permit installed is granted once or
//! returned (revoked) once, never both; no grant at or after the deadline;
//! every grant names the lease (slice tag) it came from.

mod sync {
    pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
}

#[allow(dead_code)]
#[path = "../../redis/src/lease/word.rs"]
mod word;

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount_loom_tests::{expect_failure, model};
use word::{LeaseWord, Take};

/// Deadline 100 units; times below it are live.
const DL: u64 = 100;

fn granted(t: Take) -> u64 {
    match t {
        Take::Granted { .. } => 1,
        Take::Miss => 0,
    }
}

/// Two grants race for a lease's last permit while the sender revokes it
/// (returns it): the permit is granted once or returned once.
#[test]
fn racing_grants_of_the_last_permit_and_its_return() {
    model(|| {
        let w = Arc::new(LeaseWord::new());
        w.install(DL, 3, 1, 0);
        let grants: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || granted(w.try_take(10, 1)))
            })
            .collect();
        let ret = {
            let w = w.clone();
            thread::spawn(move || w.revoke())
        };
        let g: u64 = grants.into_iter().map(|t| t.join().unwrap()).sum();
        let r = ret.join().unwrap();
        assert_eq!(g + r, 1, "granted {g}, returned {r}");
    });
}

/// A grant at a time before the deadline races the sweeper revoking the
/// lease at its deadline, while a grant whose clock already reads the
/// deadline must miss: every permit is granted or returned exactly once,
/// and nothing is granted at or after the deadline.
#[test]
fn a_grant_racing_the_lease_expiry() {
    model(|| {
        let w = Arc::new(LeaseWord::new());
        w.install(DL, 3, 2, 0);
        let early = {
            let w = w.clone();
            thread::spawn(move || granted(w.try_take(DL - 1, 1)))
        };
        let late = {
            let w = w.clone();
            thread::spawn(move || granted(w.try_take(DL, 1)))
        };
        let sweep = {
            let w = w.clone();
            thread::spawn(move || w.revoke_if_over(DL).expect("the lease is over at DL"))
        };
        let e = early.join().unwrap();
        assert_eq!(late.join().unwrap(), 0, "granted at the deadline");
        let r = sweep.join().unwrap();
        assert_eq!(e + r, 2, "granted {e}, returned {r}");
    });
}

/// The sender replaces a lease (slice tag 3, one permit) with the next
/// (slice tag 4, two permits) while two grants run: each grant names the
/// lease it took from, no lease gives more than it held, and what the old
/// one still held comes back from `install` (to be returned).
#[test]
fn a_grant_racing_the_next_lease() {
    model(|| {
        let w = Arc::new(LeaseWord::new());
        w.install(DL, 3, 1, 0);
        let grants: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || match w.try_take(10, 1) {
                    Take::Granted { tag, .. } => Some(tag),
                    Take::Miss => None,
                })
            })
            .collect();
        let sender = {
            let w = w.clone();
            thread::spawn(move || w.install(2 * DL, 4, 2, 0))
        };
        let tags: Vec<u64> = grants
            .into_iter()
            .filter_map(|t| t.join().unwrap())
            .collect();
        let old_left = sender.join().unwrap();
        let old = tags.iter().filter(|&&t| t == 3).count() as u64;
        let new = tags.iter().filter(|&&t| t == 4).count() as u64;
        assert_eq!(
            old + old_left,
            1,
            "old lease: {old} granted, {old_left} back"
        );
        assert!(new <= 2);
        assert_eq!(w.revoke() + new, 2, "new lease");
    });
}

/// Three grants race the sweeper's revoke on a lease of three permits
/// whose renewal mark is 2: a renewal is asked exactly when a grant takes
/// the lease from 2 to 1, by that grant alone (invariant 4), and every
/// permit is granted or returned once.
#[test]
fn one_grant_asks_the_renewal_and_only_when_it_crosses_the_mark() {
    model(|| {
        let w = Arc::new(LeaseWord::new());
        w.install(DL, 3, 3, 1);
        let grants: Vec<_> = (0..3)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || match w.try_take(10, 1) {
                    Take::Granted { renew, .. } => (1u64, u64::from(renew)),
                    Take::Miss => (0, 0),
                })
            })
            .collect();
        let ret = {
            let w = w.clone();
            thread::spawn(move || w.revoke())
        };
        let (g, renewals) = grants
            .into_iter()
            .map(|t| t.join().unwrap())
            .fold((0, 0), |(g, r), (a, b)| (g + a, r + b));
        let r = ret.join().unwrap();
        assert_eq!(g + r, 3, "granted {g}, returned {r}");
        assert_eq!(
            renewals,
            u64::from(g >= 2),
            "{g} granted, {renewals} renewals"
        );
    });
}

/// The naive lease: a permit counter and a separate "live" flag. A grant
/// checks the flag, then decrements; a return clears the flag, then takes
/// the counter. A grant that checked the flag before the return cleared it
/// decrements after the return took the count: the permit is granted and
/// returned.
fn naive_flag_and_counter() {
    let live = Arc::new(AtomicBool::new(true));
    let left = Arc::new(AtomicU64::new(1));
    let grant = {
        let (live, left) = (live.clone(), left.clone());
        thread::spawn(move || {
            if !live.load(Ordering::SeqCst) {
                return 0;
            }
            let mut cur = left.load(Ordering::SeqCst);
            while cur > 0 {
                match left.compare_exchange(cur, cur - 1, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => return 1,
                    Err(c) => cur = c,
                }
            }
            0
        })
    };
    let ret = {
        let (live, left) = (live.clone(), left.clone());
        thread::spawn(move || {
            live.store(false, Ordering::SeqCst);
            left.load(Ordering::SeqCst)
        })
    };
    let g = grant.join().unwrap();
    let r = ret.join().unwrap();
    assert_eq!(g + r, 1, "granted {g}, returned {r}");
}

#[test]
fn naive_flag_and_counter_is_caught() {
    expect_failure("flag, then counter", naive_flag_and_counter);
}

/// The naive grant: check the count, then store it less one (no
/// compare-and-swap): two grants both take the last permit.
fn naive_check_then_store() {
    let left = Arc::new(AtomicU64::new(1));
    let grants: Vec<_> = (0..2)
        .map(|_| {
            let left = left.clone();
            thread::spawn(move || {
                let cur = left.load(Ordering::SeqCst);
                if cur == 0 {
                    return 0;
                }
                left.store(cur - 1, Ordering::SeqCst);
                1
            })
        })
        .collect();
    let g: u64 = grants.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(g <= 1, "the last permit granted {g} times");
}

#[test]
fn naive_check_then_store_is_caught() {
    expect_failure("check, then store", naive_check_then_store);
}
