//! Loom models of the hot-key detector's bound (`src/keyed/bound.rs`): an
//! exact step that leaves a heavy key cold stores how many more adds the
//! key's entry can take before its window could reach the threshold, and
//! a *late* add (at an older epoch of the window) must not be skipped past.
//!
//! - `a_late_add_is_never_skipped_past` and
//!   `a_late_add_into_a_new_slice_is_never_skipped_past`: the real code,
//!   one thread installing a bound while another adds late (into an
//!   existing entry, or installing the older slice's map).
//! - `a_stale_bound_is_replaced_never_used`: after a late add, the next
//!   exact step installs a new bound while another add races it.
//! - `bound_protocol_sketch` and its naive counter-example
//!   (`naive_bound_with_plain_reads_is_caught`): the protocol on bare
//!   atomics; the naive installer reads the older count with a plain load
//!   and leaves no `WATCHED`, so a late add it missed does not know to
//!   clear the bound, and an add after the late one skips past the
//!   crossing.
//!
//! Mutations of the real code these models catch: the older words read by
//! a plain load that sets no `WATCHED` (`Entry::watch`), a `WATCHED` add
//! that clears no bound, a late first add into a slice that clears none,
//! a bound read that ignores `STALE`, a late add that skips a word an
//! installer holds (`INSTALLING`), an install whose final CAS clears a
//! `STALE` set during its reads, and an install that takes the word
//! without dropping the stale bound (`a_stale_bound_is_replaced_never_used`).
//!
//! Windows are 2 slices of 1 ns, so the time in nanoseconds is the epoch.
//! A threshold of 8 in 2 slices makes a slice heavy at 4.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use stripecount_loom_tests::{detector, expect_failure, t};

/// Epoch 0 holds 3 in the end: 1 from before and 2 from the late add, or
/// (`new_map`) 3 from the late add alone, which then installs epoch 0's
/// map after epoch 1's (the installer's RMW of the ring's slots orders
/// the two). The installer's first add at epoch 1 makes the slice heavy
/// (4): its exact step sees the late count or not, stays cold, and bounds
/// the entry at `8 - older`. Its second add (count 5) skips only under a
/// bound that misses the late count. The late add is never a crossing in
/// epoch 0's window (3). If the installer's second add starts after the
/// late add returned, it must see it: 3 + 5 = 8 reports. Otherwise the
/// crossing is left for a later add at epoch 1, which must report it
/// unless the installer's second add did: exactly one report.
fn late_add_race(new_map: bool) {
    let d = Arc::new(detector(8));
    if !new_map {
        assert!(!d.add_at(&7, t(0), 1));
    }
    let done = Arc::new(AtomicBool::new(false));
    let installer = {
        let (d, done) = (d.clone(), done.clone());
        thread::spawn(move || {
            assert!(!d.add_at(&7, t(1), 4));
            let after_late = done.load(Ordering::Acquire);
            let r = d.add_at(&7, t(1), 1);
            if after_late {
                assert!(r, "an add after the late add skipped past the crossing");
            }
            r
        })
    };
    let late = {
        let (d, done) = (d.clone(), done.clone());
        thread::spawn(move || {
            assert!(!d.add_at(&7, t(0), if new_map { 3 } else { 2 }));
            done.store(true, Ordering::Release);
        })
    };
    let second = installer.join().unwrap();
    late.join().unwrap();
    let last = d.add_at(&7, t(1), 1);
    assert!(
        second != last,
        "one report for the crossing: {second} {last}"
    );
}

#[test]
fn a_late_add_is_never_skipped_past() {
    stripecount_loom_tests::model(|| late_add_race(false));
}

/// At a preemption bound of 1: the late add's map install and the
/// installer's two scans of the ring take loom too long at 2.
#[test]
fn a_late_add_into_a_new_slice_is_never_skipped_past() {
    stripecount_loom_tests::model_at_bound(1, || late_add_race(true));
}

/// A bound made stale by a late add is installed again by the next exact
/// step, and never used meanwhile. Threshold 10 in 2 slices (heavy at 5):
/// epoch 1's entry holds 5 and a bound of 9 (epoch 0 held 1); a late add
/// brings epoch 0 to 3 (the window holds 8) and makes that bound stale.
/// Two adds of 1 at epoch 1 race: the first to land brings the window to
/// 9 (cold, so its exact step installs a new bound), the second to 10,
/// which must report, whether it lands before, during or after that
/// install: exactly one of them reports. (An install that took the word
/// without dropping the stale bound would let the second skip.)
#[test]
fn a_stale_bound_is_replaced_never_used() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(10));
        assert!(!d.add_at(&7, t(0), 1));
        assert!(!d.add_at(&7, t(1), 5));
        assert!(!d.add_at(&7, t(0), 2));
        let adds: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, t(1), 1))
            })
            .collect();
        let reports = adds.into_iter().map(|h| h.join().unwrap());
        assert_eq!(
            reports.filter(|&r| r).count(),
            1,
            "one report for the crossing"
        );
        assert_eq!(d.windows().sum_at(&7, t(1)), 10);
    });
}

/// A bound on a striped entry: epoch 1 holds 5 with a bound of 9 (epoch
/// 0 holds 1), then its entry is striped. Two adds of 2 race at epoch 1:
/// together they bring the entry to 9 and the window to the threshold.
/// Each learns the entry's count by reading the stripes after a fence
/// (`Entry::after_striped_add`), so at least one reads 9, which the
/// bound does not cover: exactly one reports. Without the fence, loom
/// finds both reading 7 and skipping the exact step.
#[test]
fn racing_striped_adds_under_a_bound_report_the_crossing() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(10));
        assert!(!d.add_at(&7, t(0), 1));
        assert!(!d.add_at(&7, t(1), 5));
        assert!(d.windows().__stripe(&7, t(1)));
        let adds: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, t(1), 2))
            })
            .collect();
        let reports = adds.into_iter().map(|h| h.join().unwrap());
        assert_eq!(
            reports.filter(|&r| r).count(),
            1,
            "one report for the crossing"
        );
        assert_eq!(d.windows().sum_at(&7, t(1)), 10);
    });
}

/// The protocol on bare atomics (`bound.rs`, "Late adds"): `older` is the
/// key's entry word in the older slice (`WATCHED` and a count), `hot` the
/// newer entry's hot word (`STALE`, or a bound). The installer reads
/// `older` by an RMW that sets `WATCHED` and installs `T - count` unless
/// `STALE`; the late add adds to `older` by an RMW and, if it read
/// `WATCHED`, sets `STALE` under the newer slice's lock. An add that starts
/// after the late one returned must not be told a bound without its count.
/// The naive installer reads `older` with a plain load (and sets no flag).
fn bound_race(naive: bool) {
    const WATCHED: u64 = 1 << 60;
    const STALE: u64 = 1;
    const T: u64 = 8;
    let older = Arc::new(AtomicU64::new(1));
    let hot = Arc::new(AtomicU64::new(0));
    let lock = Arc::new(Mutex::new(()));
    let done = Arc::new(AtomicBool::new(false));
    let last = hot.clone();
    let installer = {
        let (older, hot) = (older.clone(), hot.clone());
        thread::spawn(move || {
            let o = if naive {
                older.load(Ordering::Acquire)
            } else {
                older.fetch_or(WATCHED, Ordering::AcqRel)
            } & !WATCHED;
            let b = (T - o) << 1;
            let mut h = hot.load(Ordering::Acquire);
            while h & STALE == 0 {
                match hot.compare_exchange(h, b, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(a) => h = a,
                }
            }
        })
    };
    let late = {
        let (older, hot, done) = (older.clone(), hot.clone(), done.clone());
        thread::spawn(move || {
            if older.fetch_add(2, Ordering::AcqRel) & WATCHED != 0 {
                let _g = lock.lock().unwrap();
                hot.fetch_or(STALE, Ordering::AcqRel);
            }
            done.store(true, Ordering::Release);
        })
    };
    // The newer slice's next add: if it starts after the late add, the
    // bound it is told (if any) must account for the late count.
    let next = thread::spawn(move || {
        if done.load(Ordering::Acquire) {
            let h = hot.load(Ordering::Acquire);
            if h & STALE == 0 && h != 0 {
                assert_eq!(h >> 1, T - 3, "a bound without the late add's count");
            }
        }
    });
    installer.join().unwrap();
    late.join().unwrap();
    next.join().unwrap();
    let h = last.load(Ordering::Acquire);
    if h & STALE == 0 && h != 0 {
        assert_eq!(h >> 1, T - 3, "a bound without the late add's count");
    }
}

#[test]
fn bound_protocol_sketch() {
    stripecount_loom_tests::model(|| bound_race(false));
}

#[test]
fn naive_bound_with_plain_reads_is_caught() {
    expect_failure("a bound from plain reads of the older counts", || {
        bound_race(true)
    });
}
