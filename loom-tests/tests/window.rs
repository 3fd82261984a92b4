//! Loom models of `SlidingWindow`'s epoch-tagged slices.
//!
//! Shared rows (every writer CASes; `__loom_shared`): adds racing the
//! recycle of a slot, adds racing a too-old add, a sum racing adds, and a
//! jump by a multiple of the 16-bit tag space.
//!
//! Owned rows (one writer per row, plain stores): the owner recycling a
//! slot, jumping by the tag space, and adding through its slice cache while
//! a reader (on its own thread) sums; and threads with rows of their own
//! adding at once.
//!
//! Then the naive rings of the published leap arrays, which loom must catch
//! losing an add, and a single writer that publishes a slot's new epoch
//! before clearing its count, which loom must catch being read wrong.
//!
//! Times are explicit (`add_at`); the window is 2 slices of 10 ns, so
//! epochs 0 and 2 share slot 0, epochs 1 and 3 share slot 1.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::SlidingWindow;
use stripecount_loom_tests::{expect_failure, model, t};

const L: u64 = 10;

/// A window whose every writer CASes a shared row.
fn window() -> SlidingWindow<ManualClock> {
    owned_window().__loom_shared()
}

/// A window whose writers each own a row.
fn owned_window() -> SlidingWindow<ManualClock> {
    SlidingWindow::builder(Duration::from_nanos(2 * L), 2)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// Slot 0 holds epoch 0 (count 5). Two threads add at epoch 2 (recycling
/// slot 0) while a third adds at epoch 3: once all returned, the window at
/// epoch 3 holds exactly their adds, each in its own slice, and the expired
/// count is gone.
#[test]
fn adds_racing_a_recycle_are_exact() {
    model(|| {
        let w = Arc::new(window());
        assert!(w.add_at(t(0), 5));
        let hs: Vec<_> = [(2 * L, 1u64), (2 * L + 3, 10), (3 * L, 100)]
            .into_iter()
            .map(|(at, n)| {
                let w = w.clone();
                thread::spawn(move || assert!(w.add_at(t(at), n)))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.sum_at(t(3 * L)), 111);
        assert_eq!(w.slice_counts_at(t(3 * L)), vec![11, 100]);
        assert_eq!(w.sum_at(t(2 * L)), 11);
    });
}

/// A too-old add (epoch 0) racing the first add of epoch 2 into the same
/// slot: it is either recorded under epoch 0 (and expired) or dropped;
/// never counted in epoch 2.
#[test]
fn too_old_add_is_never_filed_under_the_new_epoch() {
    model(|| {
        let w = Arc::new(window());
        let w2 = w.clone();
        let old = thread::spawn(move || w2.add_at(t(0), 1000));
        assert!(w.add_at(t(2 * L), 1));
        let _recorded = old.join().unwrap();
        assert_eq!(w.sum_at(t(2 * L)), 1);
        assert_eq!(w.slice_counts_at(t(3 * L)), vec![1, 0]);
    });
}

/// A sum racing an add that recycles a slot: it sees the old count only in
/// windows that contain the old epoch, the new add whole or not at all, and
/// never both.
#[test]
fn sum_racing_a_recycle_counts_each_add_once_in_its_window() {
    model(|| {
        let w = Arc::new(window());
        assert!(w.add_at(t(L), 5)); // epoch 1, slot 1
        let w2 = w.clone();
        let h = thread::spawn(move || {
            assert!(w2.add_at(t(3 * L), 1)); // epoch 3 recycles slot 1
        });
        let at3 = w.sum_at(t(3 * L)); // window {2, 3}: 0 or 1, never 5
        assert!(at3 == 0 || at3 == 1, "at3 = {at3}");
        let at2 = w.sum_at(t(2 * L)); // window {1, 2}: 5 before the recycle, 0 after
        assert!(at2 == 5 || at2 == 0, "at2 = {at2}");
        h.join().unwrap();
        assert_eq!(w.sum_at(t(3 * L)), 1);
    });
}

/// After an add has returned, a sum that starts later sees it.
#[test]
fn sum_after_add_sees_it() {
    model(|| {
        let w = Arc::new(window());
        let w2 = w.clone();
        let h = thread::spawn(move || {
            w2.add_at(t(2 * L), 7);
        });
        h.join().unwrap();
        assert_eq!(w.sum_at(t(2 * L)), 7);
    });
}

/// Two threads jump a slot forward by exactly 2^16 ring laps (so the
/// 16-bit tag of the new epoch equals the old one) while adding: the old
/// count must not be read as the new epoch's.
#[test]
fn jump_by_tag_space_multiple_does_not_alias() {
    model(|| {
        let w = Arc::new(window());
        assert!(w.add_at(t(0), 9)); // epoch 0
        let far = (1u64 << 16) * 2 * L; // epoch 2^17: same slot, same tag
        let hs: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|n| {
                let w = w.clone();
                thread::spawn(move || assert!(w.add_at(t(far), n)))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.sum_at(t(far)), 3);
    });
}

/// The owner recycles slot 1 (epoch 1, count 5, to epoch 3) and adds
/// again through its slice cache while a reader sums: the reader sees the
/// old count only in windows that hold epoch 1, the new adds whole, never
/// both.
#[test]
fn owner_recycle_racing_a_reader_counts_each_add_once() {
    model(|| {
        let w = Arc::new(owned_window());
        let w2 = w.clone();
        let writer = thread::spawn(move || {
            assert!(w2.add_at(t(L), 5)); // epoch 1, slot 1
            assert!(w2.add_at(t(3 * L), 1)); // recycles slot 1
            assert!(w2.add_at(t(3 * L + 1), 2)); // the slice cache's fast path
        });
        let w3 = w.clone();
        let reader = thread::spawn(move || {
            let at3 = w3.sum_at(t(3 * L)); // window {2, 3}: 0, 1 or 3; never 5
            assert!([0, 1, 3].contains(&at3), "at3 = {at3}");
            let at2 = w3.sum_at(t(2 * L)); // window {1, 2}: 0 or 5
            assert!(at2 == 0 || at2 == 5, "at2 = {at2}");
        });
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(w.sum_at(t(3 * L)), 3);
        assert_eq!(w.slice_counts_at(t(3 * L)), vec![0, 3]);
    });
}

/// The owner jumps slot 0 by exactly 2^16 ring laps (same 16-bit tag) while
/// a reader sums at the far epoch: the old count is never read as the new
/// epoch's.
#[test]
fn owner_jump_by_tag_space_racing_a_reader_does_not_alias() {
    model(|| {
        let w = Arc::new(owned_window());
        let far = (1u64 << 16) * 2 * L; // epoch 2^17: slot 0, tag of epoch 0
        let w2 = w.clone();
        let writer = thread::spawn(move || {
            assert!(w2.add_at(t(0), 9));
            assert!(w2.add_at(t(far), 1));
        });
        let w3 = w.clone();
        let reader = thread::spawn(move || {
            let s = w3.sum_at(t(far));
            assert!(s == 0 || s == 1, "sum at far = {s}");
        });
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(w.sum_at(t(far)), 1);
    });
}

/// Two threads with rows of their own recycle slots of their rows and add
/// through their slice caches while a third adds at an old epoch: every
/// total is exact, each in its own epoch's slice.
#[test]
fn owners_adding_at_once_are_exact() {
    model(|| {
        let w = Arc::new(owned_window());
        let hs: Vec<_> = [(2 * L, 1u64), (3 * L, 10)]
            .into_iter()
            .map(|(at, n)| {
                let w = w.clone();
                thread::spawn(move || {
                    assert!(w.add_at(t(at), n));
                    assert!(w.add_at(t(at + 1), n));
                })
            })
            .collect();
        assert!(w.add_at(t(0), 100)); // epoch 0: expired at epoch 3
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.slice_counts_at(t(3 * L)), vec![2, 20]);
        assert_eq!(w.sum_at(t(L)), 100);
    });
}

/// A single writer that keeps a slot's epoch and count in two words and,
/// to recycle, stores the new epoch and then a zero count: a reader that
/// reads the epoch and then the count can pair the new epoch with the
/// expired count. (The cell's tag in the count word is what lets a reader
/// tell the two apart.) Loom must find it.
#[test]
fn naive_single_writer_publish_then_clear_is_read_wrong() {
    expect_failure("single writer: publish epoch, then clear", || {
        let epoch = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(5)); // epoch 0's count
        let (e2, c2) = (epoch.clone(), count.clone());
        let reader = thread::spawn(move || {
            let e = e2.load(Ordering::Acquire);
            (e, c2.load(Ordering::Acquire))
        });
        epoch.store(2, Ordering::Release);
        count.store(1, Ordering::Release); // epoch 2's first add
        let (e, c) = reader.join().unwrap();
        if e == 2 {
            assert_ne!(c, 5, "the expired count was read as epoch 2's");
        }
    });
}

/// The naive atomic ring of the published leap arrays: a writer that finds
/// a stale epoch CASes the new epoch in, *then* zeroes the count, then adds.
/// Another writer that sees the new epoch and adds before the zeroing is
/// wiped. Loom must find the lost add.
#[test]
fn naive_publish_then_zero_ring_loses_adds() {
    expect_failure("publish epoch, then zero, then add", || {
        let epoch = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(5)); // epoch 0's count
        let add = |epoch: &AtomicU64, count: &AtomicU64, e: u64, n: u64| {
            let seen = epoch.load(Ordering::Acquire);
            if seen < e
                && epoch
                    .compare_exchange(seen, e, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                count.store(0, Ordering::Release);
            }
            count.fetch_add(n, Ordering::AcqRel);
        };
        let (e2, c2) = (epoch.clone(), count.clone());
        let h = thread::spawn(move || add(&e2, &c2, 2, 1));
        add(&epoch, &count, 2, 10);
        h.join().unwrap();
        assert_eq!(count.load(Ordering::Acquire), 11, "an add was wiped");
    });
}

/// The other naive order: zero the count, then publish the epoch. An add
/// of the old epoch that lands between the two is filed under the new one.
#[test]
fn naive_zero_then_publish_ring_misfiles_adds() {
    expect_failure("zero, then publish epoch", || {
        let epoch = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(0));
        let (e2, c2) = (epoch.clone(), count.clone());
        // An add at the old epoch 0.
        let h = thread::spawn(move || {
            if e2.load(Ordering::Acquire) == 0 {
                c2.fetch_add(1000, Ordering::AcqRel);
            }
        });
        // The first add of epoch 2: zero, publish, add.
        count.store(0, Ordering::Release);
        epoch.store(2, Ordering::Release);
        count.fetch_add(1, Ordering::AcqRel);
        h.join().unwrap();
        assert_eq!(
            count.load(Ordering::Acquire),
            1,
            "an epoch-0 add was filed under epoch 2"
        );
    });
}
