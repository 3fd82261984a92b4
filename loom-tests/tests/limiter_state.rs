#![cfg(loom)]
//! Loom models of the admission state's owner protocol
//! (`src/limiter/lifecycle.rs`): a state sealed for good while a request is
//! being decided (an eviction), sealed while a roll is under way, and copied
//! by racing helpers while the copy already takes grants (a move). Each
//! with the naive design it replaces as a counter-example loom must catch.
//!
//! Times are explicit: one nanosecond per slice.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::admission::{AdmissionState, Config, Refused};

/// One limit over `slices` slices of 1 ns.
fn config(slices: usize) -> Arc<Config> {
    Arc::new(Config::single(8, Duration::from_nanos(slices as u64), slices).unwrap())
}

/// An eviction racing a request: the evictor checks idleness, seals, checks
/// again and drops the state only if it is still idle; otherwise it moves
/// it (copies it). The request either lands before the seal (and then the
/// state is not dropped) or is told `Sealed` and retried on whatever now
/// holds the key. Either way the window holds exactly one grant and the
/// second request is refused.
#[test]
fn eviction_while_a_request_is_decided() {
    stripecount_loom_tests::model(|| {
        let cfg = config(2);
        let old = Arc::new(AdmissionState::new(&cfg, 0));
        let request = {
            let (cfg, old) = (cfg.clone(), old.clone());
            thread::spawn(move || old.acquire(&cfg, 0, 1, &[1]))
        };
        let evictor = {
            let (cfg, old) = (cfg.clone(), old.clone());
            thread::spawn(move || {
                if !old.is_idle_at(&cfg, 0) {
                    return None; // nothing to do
                }
                old.seal(&cfg);
                if old.is_idle_at(&cfg, 0) {
                    Some(None) // dropped: a new key starts empty at epoch 0
                } else {
                    Some(Some(old.copied(&cfg))) // a grant slipped in: move it
                }
            })
        };
        let first = request.join().unwrap();
        let evicted = evictor.join().unwrap();
        let live = match evicted {
            None => old.clone(),
            Some(None) => {
                assert!(first.is_err(), "a granted request was evicted: {first:?}");
                Arc::new(AdmissionState::new(&cfg, 0))
            }
            Some(Some(copy)) => Arc::new(copy),
        };
        let mut granted = u64::from(first.is_ok());
        if first == Err(Refused::Sealed) {
            // The caller looks the key up again and retries.
            granted += u64::from(live.acquire(&cfg, 0, 1, &[1]).is_ok());
        }
        assert_eq!(granted, 1, "{first:?}");
        assert!(live.acquire(&cfg, 0, 1, &[1]).is_err(), "over-admitted");
    });
}

/// The naive eviction: check idleness, then drop the state, without sealing
/// it. A request that decided on the state after the check is granted into
/// a state that is then forgotten, and the key's next state grants again.
fn naive_evict_without_seal() {
    let cfg = config(2);
    let old = Arc::new(AdmissionState::new(&cfg, 0));
    let request = {
        let (cfg, old) = (cfg.clone(), old.clone());
        thread::spawn(move || old.acquire(&cfg, 0, 1, &[1]).is_ok())
    };
    let evictor = {
        let (cfg, old) = (cfg.clone(), old.clone());
        thread::spawn(move || old.is_idle_at(&cfg, 0))
    };
    let first = request.join().unwrap();
    let dropped = evictor.join().unwrap();
    let live = if dropped {
        Arc::new(AdmissionState::new(&cfg, 0))
    } else {
        old
    };
    let second = live.acquire(&cfg, 0, 1, &[1]).is_ok();
    assert!(
        !(first && second),
        "over-admitted: the evicted grant was lost"
    );
}

#[test]
fn loom_catches_eviction_without_seal() {
    stripecount_loom_tests::expect_failure("check idle, then drop", naive_evict_without_seal);
}

/// A seal racing a roll and a grant into the old slice: the seal helps the
/// roll to its end before it flags the epoch, so the sealed state is whole
/// and its copy answers as the original did.
#[test]
fn seal_while_a_roll_is_under_way() {
    stripecount_loom_tests::model(|| {
        let cfg = config(2);
        let st = Arc::new(AdmissionState::new(&cfg, 0));
        assert_eq!(st.acquire(&cfg, 0, 1, &[3]), Ok(0));
        let roller = {
            let (cfg, st) = (cfg.clone(), st.clone());
            thread::spawn(move || st.acquire(&cfg, 1, 1, &[3]))
        };
        let sealer = {
            let (cfg, st) = (cfg.clone(), st.clone());
            thread::spawn(move || st.seal(&cfg))
        };
        let rolled = roller.join().unwrap();
        sealer.join().unwrap();
        assert!(st.is_sealed());
        let granted = 1 + u64::from(rolled.is_ok());
        assert!(
            rolled == Ok(1) || rolled == Err(Refused::Sealed),
            "{rolled:?}"
        );
        // Epoch 1's window holds both slices: everything granted.
        assert_eq!(st.available(&cfg, 1, &[3]), Some(3 - granted));
        let copy = st.copied(&cfg);
        assert_eq!(copy.available(&cfg, 1, &[3]), Some(3 - granted));
        // At epoch 2 only slice 1 is in the window.
        assert_eq!(copy.available(&cfg, 2, &[3]), Some(3 - (granted - 1)));
        assert_eq!(copy.acquire(&cfg, 2, 3 - (granted - 1), &[3]), Ok(2));
    });
}

/// A move: two helpers copy one sealed state (with a history block) into
/// one destination while the first already takes a grant on it, and a
/// third thread asks the destination for a permit without helping (it is
/// told `Sealed` until the copy is live). The copy is never applied twice,
/// a late helper never clobbers a grant, and no grant sees a half copy.
#[test]
fn racing_copies_and_a_grant_on_the_copy() {
    stripecount_loom_tests::model(|| {
        let cfg = config(2);
        let src = Arc::new(AdmissionState::new(&cfg, 0));
        assert_eq!(src.acquire(&cfg, 0, 1, &[4]), Ok(0));
        assert_eq!(src.acquire(&cfg, 1, 1, &[4]), Ok(1)); // records slice 0
        src.seal(&cfg);
        let dest = Arc::new(AdmissionState::pending());
        let first = {
            let (cfg, src, dest) = (cfg.clone(), src.clone(), dest.clone());
            thread::spawn(move || {
                src.copy_into(&cfg, &dest);
                dest.acquire(&cfg, 1, 1, &[4])
            })
        };
        let second = {
            let (cfg, src, dest) = (cfg.clone(), src.clone(), dest.clone());
            thread::spawn(move || {
                src.copy_into(&cfg, &dest);
            })
        };
        let third = {
            let (cfg, dest) = (cfg.clone(), dest.clone());
            thread::spawn(move || dest.acquire(&cfg, 1, 1, &[4]))
        };
        assert_eq!(first.join().unwrap(), Ok(1));
        second.join().unwrap();
        let third = third.join().unwrap();
        assert!(third == Ok(1) || third == Err(Refused::Sealed), "{third:?}");
        let granted = 3 + u64::from(third.is_ok());
        assert_eq!(dest.available(&cfg, 1, &[4]), Some(4 - granted));
        // Slice 0's count came along in the history.
        assert_eq!(dest.available(&cfg, 2, &[4]), Some(4 - (granted - 1)));
        assert_eq!(src.available(&cfg, 1, &[4]), Some(2));
    });
}

/// The naive copy: each helper stores the source's count into the
/// destination. A helper that stores after the first one's grant on the
/// copy wipes that grant.
fn naive_copy_by_store() {
    let src_used = 2u64;
    let dest = Arc::new(AtomicU64::new(0));
    let first = {
        let dest = dest.clone();
        thread::spawn(move || {
            dest.store(src_used, Ordering::Release);
            dest.fetch_add(1, Ordering::AcqRel);
        })
    };
    let second = {
        let dest = dest.clone();
        thread::spawn(move || dest.store(src_used, Ordering::Release))
    };
    first.join().unwrap();
    second.join().unwrap();
    assert_eq!(
        dest.load(Ordering::Acquire),
        src_used + 1,
        "a grant was wiped"
    );
}

#[test]
fn loom_catches_copy_by_store() {
    stripecount_loom_tests::expect_failure("copy by store", naive_copy_by_store);
}
