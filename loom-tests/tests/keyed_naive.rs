//! The naive per-key designs that `keyed.rs` and `keyed_entry.rs` replace,
//! as counter-examples loom must catch (so those suites are known to be
//! able to fail):
//! - the hot-key detector's "if the sum reached the threshold and the flag
//!   is not set, set it and report" (two racing adds both report);
//! - "read the count, remove the entry if it is 0" eviction (an add made
//!   through an entry looked up before the removal is lost);
//! - moving an entry by copying its count, then closing it (an add in
//!   between is lost);
//! - the hot-key detector's home check without a lock (a store-buffer
//!   race: a new slice's entry and a heavy older slice miss each other),
//!   and its marking with a plain read of the ring's slots (a slice map
//!   installed by a third thread is missed, and its first add misses the
//!   home);
//! - a striped add that stops when its own stripe is below its share of
//!   the heavy count, with no mark that another stripe passed its own
//!   (the count reaches the heavy count and no add reads it).
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use stripecount_loom_tests::expect_failure;

/// Counter-example: "read the sum, remove the entry if it is 0" loses an
/// add made through an entry looked up before the removal.
#[test]
fn naive_eviction_is_caught() {
    expect_failure("check-then-remove eviction", || {
        let map: Arc<Mutex<Option<Arc<AtomicU64>>>> =
            Arc::new(Mutex::new(Some(Arc::new(AtomicU64::new(0)))));
        let evictor = {
            let map = map.clone();
            thread::spawn(move || {
                let mut m = map.lock().unwrap();
                if m.as_ref().is_some_and(|c| c.load(Ordering::SeqCst) == 0) {
                    *m = None;
                }
            })
        };
        let entry = map
            .lock()
            .unwrap()
            .get_or_insert_with(|| Arc::new(AtomicU64::new(0)))
            .clone();
        entry.fetch_add(1, Ordering::SeqCst);
        evictor.join().unwrap();
        let total = map
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |c| c.load(Ordering::SeqCst));
        assert_eq!(total, 1, "lost add");
    });
}

/// Counter-example: "if the sum reached the threshold and the flag is not
/// set, set it and report" lets two racing adds both report.
#[test]
fn naive_hot_flag_is_caught() {
    expect_failure("check-then-set hot flag", || {
        let count = Arc::new(AtomicU64::new(0));
        let hot = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (count, hot) = (count.clone(), hot.clone());
                thread::spawn(move || {
                    count.fetch_add(1, Ordering::SeqCst);
                    let after = count.load(Ordering::SeqCst);
                    if after >= 2 && !hot.load(Ordering::SeqCst) {
                        hot.store(true, Ordering::SeqCst);
                        true
                    } else {
                        false
                    }
                })
            })
            .collect();
        let reports = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&b| b)
            .count();
        assert_eq!(reports, 1, "two adds reported one crossing");
    });
}

/// Counter-example: moving an entry to a bigger table by copying its
/// count and *then* closing it (`entry.rs` seals first, in the same RMW
/// that reads the final count): an add between the copy and the close
/// lands in the old entry and is lost.
#[test]
fn naive_move_copy_then_close_is_caught() {
    expect_failure("copy then close", || {
        let old = Arc::new(AtomicU64::new(5)); // bit 63: closed
        let new = Arc::new(AtomicU64::new(0));
        let adder = {
            let (old, new) = (old.clone(), new.clone());
            thread::spawn(move || {
                let mut w = old.load(Ordering::SeqCst);
                loop {
                    if w >> 63 != 0 {
                        new.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    match old.compare_exchange(w, w + 1, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => return,
                        Err(a) => w = a,
                    }
                }
            })
        };
        let c = old.load(Ordering::SeqCst);
        new.fetch_add(c, Ordering::SeqCst);
        old.fetch_or(1 << 63, Ordering::SeqCst);
        adder.join().unwrap();
        assert_eq!(new.load(Ordering::SeqCst), 6, "an add was lost in the move");
    });
}

/// Counter-example: the hot-key detector's home check without the home
/// map's lock (`hot.rs`, "Why the check takes the lock"). A new slice's
/// entry is published, then checks for the key's home; an add that made
/// an older slice heavy publishes the home, then looks for newer entries
/// to mark. With lock-free loads on both sides (the store-buffer pattern)
/// each can miss the other, and the new entry then filters out adds that
/// could make the key hot.
#[test]
fn naive_home_check_without_the_lock_is_caught() {
    expect_failure("lock-free home check", || {
        let entry = Arc::new(AtomicBool::new(false));
        let home = Arc::new(AtomicBool::new(false));
        let creator = {
            let (entry, home) = (entry.clone(), home.clone());
            thread::spawn(move || {
                entry.store(true, Ordering::Release);
                home.load(Ordering::Acquire)
            })
        };
        let crosser = {
            let (entry, home) = (entry.clone(), home.clone());
            thread::spawn(move || {
                home.store(true, Ordering::Release);
                entry.load(Ordering::Acquire)
            })
        };
        let saw_home = creator.join().unwrap();
        let marked = crosser.join().unwrap();
        assert!(saw_home || marked, "the entry never learns of the home");
    });
}

/// The fallback of `hot.rs` for an entry the plain windows created (born
/// unchecked): its first detector add checks under the home map's lock,
/// which the home's creation holds before the marking starts. Whichever
/// lock hold comes second sees the other's work.
#[test]
fn home_check_under_the_home_lock_never_misses() {
    stripecount_loom_tests::model(|| {
        let lock = Arc::new(Mutex::new(()));
        let entry = Arc::new(AtomicBool::new(false));
        let home = Arc::new(AtomicBool::new(false));
        let creator = {
            let (lock, entry, home) = (lock.clone(), entry.clone(), home.clone());
            thread::spawn(move || {
                entry.store(true, Ordering::Release);
                let _g = lock.lock().unwrap();
                home.load(Ordering::Acquire)
            })
        };
        let crosser = {
            let (lock, entry, home) = (lock.clone(), entry.clone(), home.clone());
            thread::spawn(move || {
                {
                    let _g = lock.lock().unwrap();
                    home.store(true, Ordering::Release);
                }
                entry.load(Ordering::Acquire)
            })
        };
        let saw_home = creator.join().unwrap();
        let marked = crosser.join().unwrap();
        assert!(saw_home || marked);
    });
}

/// The protocol of `hot.rs` ("Why the check runs under the slice's shard
/// lock"), sketched with the new slice's map installed by a third thread:
/// the creator finds (or installs) the map, then inserts its entry and
/// checks for the home under the map's shard lock; the crosser publishes
/// the home, then reads the ring's slot by an RMW (`fetch_add(0)`, as
/// `Ring::for_each_map_synced`'s CAS of a slot to itself) and, if the map
/// is there, looks for the entry under the same lock. `slot`: 0 before the
/// install, 1 after.
fn home_check_race(synced_scan: bool) {
    let lock = Arc::new(Mutex::new(()));
    let slot = Arc::new(AtomicUsize::new(0));
    let entry = Arc::new(AtomicBool::new(false));
    let home = Arc::new(AtomicBool::new(false));
    let installer = {
        let slot = slot.clone();
        thread::spawn(move || {
            let _ = slot.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
        })
    };
    let creator = {
        let (lock, slot, entry, home) = (lock.clone(), slot.clone(), entry.clone(), home.clone());
        thread::spawn(move || {
            if slot.load(Ordering::Acquire) == 0 {
                // Not installed yet: the creator installs it (or reads the
                // installer's install from its failed CAS).
                let _ = slot.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
            }
            let _g = lock.lock().unwrap();
            entry.store(true, Ordering::Release);
            home.load(Ordering::Acquire)
        })
    };
    home.store(true, Ordering::Release);
    let installed = if synced_scan {
        slot.fetch_add(0, Ordering::AcqRel)
    } else {
        slot.load(Ordering::Acquire)
    };
    let marked = installed == 1 && {
        let _g = lock.lock().unwrap();
        entry.load(Ordering::Acquire)
    };
    installer.join().unwrap();
    let saw_home = creator.join().unwrap();
    assert!(saw_home || marked, "the entry never learns of the home");
}

/// The protocol: whichever way the three interleave, the entry learns of
/// the home.
#[test]
fn home_check_under_the_slice_lock_never_misses() {
    stripecount_loom_tests::model(|| home_check_race(true));
}

/// Counter-example: the crosser reads the ring's slot with a plain load.
/// It may miss a map the installer put there, while the creator, which
/// read the installer's map, misses the home.
#[test]
fn naive_ring_scan_misses_a_slice_installed_by_another_thread() {
    expect_failure("plain scan of the ring", || home_check_race(false));
}

/// A striped entry's count in a sketch: 1 in the word, two stripes, and
/// a mark `H = 18` whose share a stripe is `(18 - 1 - 1) / 2 = 8`. Thread A
/// adds 16 to its stripe (past its share: it reads the count after a
/// fence); thread B adds 1 to its own and, with `near_mark`, stops only if
/// it also finds no `NEAR` after a fence (the protocol of `entry.rs`, "The
/// mark of a striped entry"), else whenever its stripe is below its share.
/// Returns whether some add read a count of at least `H`.
fn striped_stop_race(near_mark: bool) {
    let stripes = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let near = Arc::new(AtomicBool::new(false));
    let read = |s: &[AtomicU64; 2]| 1 + s[0].load(Ordering::Relaxed) + s[1].load(Ordering::Relaxed);
    let a = {
        let (stripes, near) = (stripes.clone(), near.clone());
        thread::spawn(move || {
            stripes[0].store(16, Ordering::Relaxed);
            loom::sync::atomic::fence(Ordering::SeqCst);
            if near_mark {
                near.swap(true, Ordering::AcqRel);
                loom::sync::atomic::fence(Ordering::SeqCst);
            }
            read(&stripes)
        })
    };
    stripes[1].store(1, Ordering::Relaxed);
    let b = if near_mark {
        loom::sync::atomic::fence(Ordering::SeqCst);
        near.load(Ordering::Acquire).then(|| read(&stripes))
    } else {
        None // 1 < 8: stops
    };
    let a = a.join().unwrap();
    assert!(
        a >= 18 || b.is_some_and(|b| b >= 18),
        "18 reached, and no add read it"
    );
}

/// The protocol: one of the two adds reads 18.
#[test]
fn a_striped_add_stopping_at_its_stripe_with_the_near_mark_is_seen() {
    stripecount_loom_tests::model(|| striped_stop_race(true));
}

/// Counter-example: stopping at one's own stripe with no mark.
#[test]
fn naive_striped_stop_without_a_mark_is_caught() {
    expect_failure("stop at the own stripe, no mark", || {
        striped_stop_race(false)
    });
}
