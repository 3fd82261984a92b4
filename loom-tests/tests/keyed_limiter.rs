#![cfg(loom)]
//! Loom models of the per-key limiter (`src/limiter/keyed/`): the real
//! `KeyedLimiter` on the real per-key map (two shards under loom), racing
//! the last permit of a key across a slice boundary, a key evicted while a
//! request is decided (and a request stamped before the eviction's time),
//! a key moved to a bigger table while requests race, and several limits
//! granted all or nothing. Each with the naive design it replaces as a
//! counter-example loom must catch.
//!
//! Windows are slices of 1 ns, so a time in nanoseconds is its epoch.
//! Automatic eviction is off: each model evicts or moves explicitly.

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::collections::HashMap;
use std::time::Duration;
use stripecount::admission::{AdmissionState, Config};
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, KeyedWindows, Quota, Timestamp};
use stripecount_loom_tests::{check_windows, expect_failure, race, t, window_total, Fixed};

const KEY: u32 = 7;
const NS: Duration = Duration::from_nanos(1);

type Keyed = KeyedLimiter<u32, ManualClock, Fixed>;

/// `limit` per `slices` ns, in slices of 1 ns, per key.
fn keyed(limit: u64, slices: usize) -> Arc<Keyed> {
    let window = Duration::from_nanos(slices as u64);
    Arc::new(
        KeyedLimiter::builder(Quota::per(limit, window).slices(slices))
            .clock(ManualClock::new())
            .hasher(Fixed::default())
            .auto_evict(false)
            .build()
            .unwrap(),
    )
}

/// `lim`'s `try_acquire_at` path on [`KEY`] (at `t` nanoseconds), as `race` takes
/// it: the slice a grant was counted in, `None` for a refusal.
fn acquire(lim: &Arc<Keyed>) -> impl Fn(u64, u64) -> Option<u64> + Clone + Send + 'static {
    let lim = lim.clone();
    move |t, n| lim.__acquire_at(&KEY, Timestamp::from_nanos(t), n).ok()
}

/// Two requests for the last permit of a key's window, one of them in the
/// next slice (it rolls the key's state while the other grants into the
/// old slice): exactly one is granted.
#[test]
fn last_permit_of_a_key_across_a_slice_boundary() {
    stripecount_loom_tests::model(|| {
        let lim = keyed(2, 2);
        assert!(lim.try_acquire_at(&KEY, t(0), 1));
        let mut grants = race(acquire(&lim), vec![vec![(0, 1)], vec![(1, 1)]]);
        grants.push((0, 1));
        check_windows(&grants, 2, 2);
        assert_eq!(grants.len(), 2, "{grants:?}");
        assert_eq!(
            lim.available_at(&KEY, t(1)),
            2 - window_total(&grants, 1, 2)
        );
    });
}

/// The naive per-key limiter a `KeyedWindows` user writes: read the key's
/// window sum, add if it fits. Two requests read 1 of 2 and both add.
fn naive_check_then_add() {
    let w = Arc::new(
        KeyedWindows::builder(2 * NS, 2)
            .clock(ManualClock::new())
            .hasher(Fixed::default())
            .build()
            .unwrap(),
    );
    assert!(w.add_at(&KEY, t(0), 1));
    let hs: Vec<_> = [t(0), t(1)]
        .into_iter()
        .map(|now| {
            let w = w.clone();
            thread::spawn(move || w.sum_at(&KEY, now) < 2 && w.add_at(&KEY, now, 1))
        })
        .collect();
    let granted = hs.into_iter().map(|h| h.join().unwrap());
    assert!(granted.filter(|&g| g).count() <= 1, "over-admitted");
}

#[test]
fn loom_catches_keyed_check_then_add() {
    expect_failure("sum, then add", naive_check_then_add);
}

/// An eviction racing a request on a key whose window just emptied: the
/// request is granted whatever the order (it fits), its grant is never
/// lost (a grant that lands between the evictor's idle check and its seal
/// keeps the key: the sweep moves it into an open slot), and the window
/// then holds it: the next request is refused.
#[test]
fn eviction_while_a_request_is_decided() {
    stripecount_loom_tests::model(|| {
        let lim = keyed(1, 2);
        assert!(lim.try_acquire_at(&KEY, t(0), 1));
        let request = {
            let lim = lim.clone();
            thread::spawn(move || lim.__acquire_at(&KEY, t(2), 1).ok())
        };
        let evictor = {
            let lim = lim.clone();
            thread::spawn(move || lim.evict_idle_at(t(2)))
        };
        assert_eq!(request.join().unwrap(), Some(2));
        assert!(evictor.join().unwrap() <= 1);
        assert!(
            !lim.try_acquire_at(&KEY, t(2), 1),
            "the grant at 2 was lost"
        );
        assert_eq!(lim.len(), 1);
    });
}

/// A request stamped before the eviction's time: judged in its own slice
/// if it comes first (where the key's old grant still counts), or at the
/// eviction's time if it comes after (the key's new state starts at the
/// eviction floor). Never in a window that forgot the old grant.
#[test]
fn a_request_stamped_before_an_eviction() {
    stripecount_loom_tests::model(|| {
        let lim = keyed(1, 2);
        assert!(lim.try_acquire_at(&KEY, t(0), 1));
        let mut grants = race_with_eviction(&lim, (1, 1), 2);
        grants.push((0, 1));
        check_windows(&grants, 2, 1);
    });
}

fn race_with_eviction(lim: &Arc<Keyed>, (time, n): (u64, u64), at: u64) -> Vec<(u64, u64)> {
    let evictor = {
        let lim = lim.clone();
        thread::spawn(move || lim.evict_idle_at(t(at)))
    };
    let mut grants = race(acquire(lim), vec![vec![(time, n)]]);
    evictor.join().unwrap();
    // Whatever happened, a request at the eviction's time sees the truth.
    grants.extend(race(acquire(lim), vec![vec![(at, 1)]]));
    grants
}

/// The naive eviction: check idle, seal, drop, without checking again. A
/// grant that landed between the check and the seal is forgotten, and the
/// key's next state grants again.
fn naive_evict_without_recheck() {
    let cfg = Arc::new(Config::single(1, 2 * NS, 2).unwrap());
    let old = Arc::new(AdmissionState::new(&cfg, 0));
    assert!(old.acquire(&cfg, 0, 1, &[1]).is_ok());
    let request = {
        let (cfg, old) = (cfg.clone(), old.clone());
        thread::spawn(move || old.acquire(&cfg, 2, 1, &[1]).is_ok())
    };
    let evictor = {
        let (cfg, old) = (cfg.clone(), old.clone());
        thread::spawn(move || {
            let idle = old.is_idle_at(&cfg, 2);
            if idle {
                old.seal(&cfg);
            }
            idle
        })
    };
    let first = request.join().unwrap();
    let live = if evictor.join().unwrap() {
        Arc::new(AdmissionState::new(&cfg, 2))
    } else {
        old
    };
    // A request told `Sealed` retries on what now holds the key.
    let first = first || live.acquire(&cfg, 2, 1, &[1]).is_ok();
    let second = live.acquire(&cfg, 2, 1, &[1]).is_ok();
    assert!(first && !second, "over-admitted: an evicted grant was lost");
}

#[test]
fn loom_catches_eviction_without_a_second_idle_check() {
    expect_failure("idle, seal, drop", naive_evict_without_recheck);
}

/// The naive new state: an evicted key starts again at epoch 0. A request
/// stamped at 1 after an eviction at 2 is judged at 1, in a window that
/// should hold the evicted grant of epoch 0 but has forgotten it.
fn naive_restart_at_zero() {
    let cfg = Arc::new(Config::single(1, 2 * NS, 2).unwrap());
    let old = Arc::new(AdmissionState::new(&cfg, 0));
    assert!(old.acquire(&cfg, 0, 1, &[1]).is_ok());
    let evicted = Arc::new(AtomicBool::new(false));
    let evictor = {
        let (cfg, old, evicted) = (cfg.clone(), old.clone(), evicted.clone());
        thread::spawn(move || {
            if old.is_idle_at(&cfg, 2) {
                old.seal(&cfg);
                if old.is_idle_at(&cfg, 2) {
                    evicted.store(true, Ordering::Release);
                }
            }
        })
    };
    let request = {
        let (cfg, old, evicted) = (cfg.clone(), old.clone(), evicted.clone());
        thread::spawn(move || {
            let fresh = AdmissionState::new(&cfg, 0);
            let st = if evicted.load(Ordering::Acquire) {
                &fresh
            } else {
                &*old
            };
            st.acquire(&cfg, 1, 1, &[1]).ok()
        })
    };
    evictor.join().unwrap();
    let granted = request.join().unwrap();
    assert_ne!(
        granted,
        Some(1),
        "granted at 1 beside the evicted grant at 0"
    );
}

#[test]
fn loom_catches_a_new_state_below_the_eviction_floor() {
    expect_failure("restart at epoch 0", naive_restart_at_zero);
}

/// A key moved to a new table (its shard rebuilt, as an insert into a
/// full table does) while a request that rolls the key into the next slice
/// is decided: the move seals the state (helping the roll to its end) and
/// copies it; a request that meets the sealed or pending state looks the
/// key up again. The request fits, so it is granted whatever the order,
/// and the moved state holds every grant: the next request is refused.
#[test]
fn a_key_moved_while_a_request_is_decided() {
    stripecount_loom_tests::model(|| {
        let lim = keyed(2, 2);
        assert!(lim.try_acquire_at(&KEY, t(0), 1));
        let mover = {
            let lim = lim.clone();
            thread::spawn(move || lim.__move_shard_of(&KEY))
        };
        let grants = race(acquire(&lim), vec![vec![(1, 1)]]);
        mover.join().unwrap();
        assert_eq!(grants, vec![(1, 1)], "wrongly refused");
        assert_eq!(lim.available_at(&KEY, t(1)), 0);
        assert!(
            !lim.try_acquire_at(&KEY, t(1), 1),
            "a grant was lost in the move"
        );
        assert_eq!(lim.available_at(&KEY, t(2)), 1); // the slice-0 grant expired
        assert_eq!(lim.len(), 1);
    });
}

/// Takes `n` from a count of at most `limit` by CAS (retried on contention).
fn take_up_to(c: &AtomicU64, n: u64, limit: u64) -> bool {
    let mut cur = c.load(Ordering::Acquire);
    while cur + n <= limit {
        match c.compare_exchange(cur, cur + n, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(actual) => cur = actual,
        }
    }
    false
}

/// The naive move: read the old count, store it in the new slot, publish.
/// A grant on the old slot after the read is lost.
fn naive_move_without_seal() {
    let old = Arc::new(AtomicU64::new(1)); // limit 2, one taken
    let new = Arc::new(AtomicU64::new(0));
    let moved = Arc::new(AtomicBool::new(false));
    let take = |c: &AtomicU64| take_up_to(c, 1, 2);
    let mover = {
        let (old, new, moved) = (old.clone(), new.clone(), moved.clone());
        thread::spawn(move || {
            new.store(old.load(Ordering::Acquire), Ordering::Release);
            moved.store(true, Ordering::Release);
        })
    };
    let request = {
        let (old, new, moved) = (old.clone(), new.clone(), moved.clone());
        thread::spawn(move || {
            let slot = if moved.load(Ordering::Acquire) {
                new
            } else {
                old
            };
            take(&slot)
        })
    };
    mover.join().unwrap();
    let first = request.join().unwrap();
    let second = take(&new);
    assert!(
        !(first && second),
        "over-admitted: a grant was lost in the move"
    );
}

#[test]
fn loom_catches_a_move_without_a_seal() {
    expect_failure("copy by read and store", naive_move_without_seal);
}

/// Two limits per key (2 per 1 ns, 2 per 4 ns in slices of 2 ns): a
/// request for 2 that the slow limit refuses takes nothing from the fast
/// one, so a concurrent request for 1 is granted in every interleaving,
/// with both racing the key's roll into the new slice.
#[test]
fn several_limits_of_a_key_all_or_nothing() {
    stripecount_loom_tests::model(|| {
        let lim: Arc<Keyed> = Arc::new(
            KeyedLimiter::builder([Quota::per(2, NS).slices(1), Quota::per(2, 4 * NS).slices(2)])
                .clock(ManualClock::new())
                .hasher(Fixed::default())
                .auto_evict(false)
                .build()
                .unwrap(),
        );
        assert!(lim.try_acquire_at(&KEY, t(0), 1));
        let big = {
            let lim = lim.clone();
            thread::spawn(move || lim.decide_at(&KEY, t(1), 2))
        };
        let small = {
            let lim = lim.clone();
            thread::spawn(move || lim.decide_at(&KEY, t(1), 1))
        };
        let big = big.join().unwrap();
        let small = small.join().unwrap();
        assert!(!big.is_granted(), "{big:?}");
        assert_eq!(big.limit_index(), 1, "{big:?}");
        assert_eq!(small.__slice(), Some(1), "wrongly refused: {small:?}");
        assert_eq!(lim.available_at(&KEY, t(1)), 0);
    });
}

/// The naive keyed all-or-nothing: one per-key count per limit, taken in
/// turn, given back on refusal. The small request can be refused by the
/// big one's permit in transit.
fn naive_keyed_take_then_give_back() {
    type Counts = Arc<Mutex<HashMap<u32, Arc<AtomicU64>>>>;
    let count = |m: &Counts| m.lock().unwrap().entry(KEY).or_default().clone();
    let fast: Counts = Arc::default(); // limit 2
    let slow: Counts = Arc::default(); // limit 2, one already taken
    count(&slow).store(1, Ordering::Release);
    let take = |c: &AtomicU64, n: u64| take_up_to(c, n, 2);
    let acquire = move |fast: Counts, slow: Counts, n: u64| {
        let (f, s) = (count(&fast), count(&slow));
        if !take(&f, n) {
            return false;
        }
        if !take(&s, n) {
            f.fetch_sub(n, Ordering::AcqRel); // give back
            return false;
        }
        true
    };
    let big = {
        let (f, s) = (fast.clone(), slow.clone());
        thread::spawn(move || acquire(f, s, 2))
    };
    let small = thread::spawn(move || acquire(fast, slow, 1));
    assert!(!big.join().unwrap());
    assert!(
        small.join().unwrap(),
        "wrongly refused by a permit in transit"
    );
}

#[test]
fn loom_catches_keyed_take_then_give_back() {
    expect_failure("take in turn, give back", naive_keyed_take_then_give_back);
}
