#![cfg(loom)]
//! Loom models of `MultiWindow`. On shared rows (every writer CASes,
//! `__loom_shared`): adds racing a roll at two levels at once lose nothing
//! at either level, a late add racing a roll is never filed under the new
//! epoch, and a reader racing a fold (a count moving from a finer ring into
//! a coarser one, two rings deep) sees every count exactly once. On owned
//! rows (one writer, plain stores): a reader racing the owner's fold, one
//! and two rings deep, sees every count exactly once. The naive designs
//! are kept as counter-examples loom must catch:
//! "publish the new epoch, then zero the count", and a fold that readers do
//! not check ("take, then add" lets them miss the count, "add, then take"
//! count it twice).
//!
//! Levels in every model: level 0 is 2 ns in 2 slices of 1 ns, level 1 is
//! 4 ns in 2 slices of 2 ns; both rings have 2 slots, so the add at t = 4
//! lands in slot 0 at both levels (epochs 4 and 2), the slot that the setup
//! add at t = 0 left holding epoch 0 with a count of 5 at both levels.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::MultiWindow;
use stripecount_loom_tests::t;

const LEVELS: [(Duration, usize); 2] = [(Duration::from_nanos(2), 2), (Duration::from_nanos(4), 2)];
const L0: Duration = Duration::from_nanos(2);
const L1: Duration = Duration::from_nanos(4);

/// Three rings of 2 slots: slices of 1, 2 and 4 ns (windows 2, 4, 8 ns).
const LEVELS3: [(Duration, usize); 3] = [
    (Duration::from_nanos(2), 2),
    (Duration::from_nanos(4), 2),
    (Duration::from_nanos(8), 2),
];
const L2: Duration = Duration::from_nanos(8);

fn window_with_old_count() -> Arc<MultiWindow> {
    let w = MultiWindow::new(&LEVELS).unwrap().__loom_shared();
    w.add_at(t(0), 5); // epoch 0 at both levels, slot 0 at both levels
    Arc::new(w)
}

/// Two adds both roll slot 0 from epoch 0 to the new epoch at both levels:
/// both are counted once at each level, the expired 5 is never counted,
/// and each adder's own sum at both levels sees its add.
#[test]
fn adds_racing_a_roll_at_two_levels_lose_nothing() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let w2 = Arc::clone(&w);
        let a = thread::spawn(move || w2.add_at(t(4), 1));
        w.add_at(t(4), 2);
        for span in [L0, L1] {
            let s = w.sum_over_at(t(4), span);
            assert!(s == 2 || s == 3, "racing read over {span:?}: {s}");
        }
        a.join().unwrap();
        assert_eq!(w.sum_over_at(t(4), L0), 3);
        assert_eq!(w.sum_over_at(t(4), L1), 3);
        // The next slice at each level starts empty.
        assert_eq!(w.sum_over_at(t(6), L0), 0);
        assert_eq!(w.sum_over_at(t(8), L1), 0);
    });
}

/// Two adders roll slot 0 at both levels while a third thread reads both
/// levels: the reader never sees the expired 5 nor a torn count, and after
/// the joins both levels hold exactly both adds.
#[test]
fn a_reader_racing_two_rolls_sees_only_whole_adds() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let (wa, wb) = (Arc::clone(&w), Arc::clone(&w));
        let a = thread::spawn(move || wa.add_at(t(4), 1));
        let b = thread::spawn(move || wb.add_at(t(4), 2));
        for span in [L0, L1] {
            let s = w.sum_over_at(t(4), span);
            assert!(s <= 3, "racing read over {span:?}: {s}");
        }
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(w.sum_over_at(t(4), L0), 3);
        assert_eq!(w.sum_over_at(t(4), L1), 3);
    });
}

/// A late add at epoch 0 races the roll of its slot at both levels: it is
/// counted in epoch 0 (expired) or dropped, never in the new epochs.
#[test]
fn a_late_add_racing_a_roll_is_never_filed_under_the_new_epoch() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let w2 = Arc::clone(&w);
        let late = thread::spawn(move || w2.add_at(t(1), 7)); // epochs 1 and 0
        w.add_at(t(4), 2);
        late.join().unwrap();
        assert_eq!(w.sum_over_at(t(4), L0), 2);
        assert_eq!(w.sum_over_at(t(4), L1), 2);
    });
}

/// Three threads: two adds roll level 1's slot 0 at once while landing in
/// different level-0 slots, and a reader that saw the first add finish
/// (through a flag) must see it at both levels.
#[test]
fn a_read_after_an_add_sees_it_at_both_levels_during_a_roll() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let done = Arc::new(AtomicU64::new(0));
        let (wa, da) = (Arc::clone(&w), Arc::clone(&done));
        let a = thread::spawn(move || {
            wa.add_at(t(4), 1); // epochs 4 and 2: slot 0 at both levels
            da.store(1, Ordering::Release);
        });
        let wb = Arc::clone(&w);
        let b = thread::spawn(move || wb.add_at(t(5), 2)); // epochs 5 and 2
        if done.load(Ordering::Acquire) == 1 {
            let (s0, s1) = (w.sum_over_at(t(5), L0), w.sum_over_at(t(5), L1));
            assert!(s0 == 1 || s0 == 3, "level 0 after the add: {s0}");
            assert!(s1 == 1 || s1 == 3, "level 1 after the add: {s1}");
        }
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(w.sum_over_at(t(5), L0), 3);
        assert_eq!(w.sum_over_at(t(5), L1), 3);
    });
}

/// Setup for the fold models: 5 at t = 0 and 3 at t = 4. The second add
/// rolled ring 0's slot 0 from epoch 0 to 4 and folded the 5 into ring 1's
/// epoch 0 (slot 0). Now ring 0 holds (4: 3) and ring 1 holds (0: 5).
fn window_with_a_fold_done(levels: &[(Duration, usize)]) -> Arc<MultiWindow> {
    let w = MultiWindow::new(levels).unwrap().__loom_shared();
    w.add_at(t(0), 5);
    w.add_at(t(4), 3);
    assert_eq!(w.sum_over_at(t(1), levels[1].0), 5); // level 1's epoch 0
    assert_eq!(w.sum_over_at(t(4), levels[1].0), 3); // its epochs 1 and 2
    Arc::new(w)
}

/// A reader of level 1 races the add that folds the 5 out of ring 0: it
/// sees the 5 exactly once (in ring 0 before the take, in ring 1 after the
/// fold; never in neither, never in both).
#[test]
fn a_reader_racing_a_fold_sees_the_count_exactly_once() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let w2 = Arc::clone(&w);
        let a = thread::spawn(move || w2.add_at(t(4), 1)); // folds 5 into ring 1
                                                           // Level 1 at t = 1: its epoch 0 only (t in [0, 2)).
        assert_eq!(
            w.sum_over_at(t(1), L1),
            5,
            "racing read of the folded epoch"
        );
        a.join().unwrap();
        assert_eq!(w.sum_over_at(t(1), L1), 5);
        assert_eq!(w.sum_over_at(t(4), L0), 1);
        assert_eq!(w.sum_over_at(t(4), L1), 1);
    });
}

/// Two adds at t = 6 both need slot 0 of ring 0 (holding epoch 4: 3) and,
/// through the fold of that 3 into ring 1's epoch 2, slot 0 of ring 1
/// (holding epoch 0: 5, expired at t = 6 and dropped): a roll at two
/// levels at once. Nothing is lost at either level, the expired 5 is never
/// counted, and each adder's own reads see its add.
#[test]
fn adds_racing_a_roll_at_two_levels_through_a_fold_lose_nothing() {
    stripecount_loom_tests::model(|| {
        let w = window_with_a_fold_done(&LEVELS);
        let w2 = Arc::clone(&w);
        let a = thread::spawn(move || w2.add_at(t(6), 1));
        w.add_at(t(6), 2);
        // Level 0 at 6: epochs 5, 6. Level 1 at 6: epochs 2 (t 4-5: the
        // folded 3) and 3 (t 6-7).
        let s0 = w.sum_over_at(t(6), L0);
        assert!(s0 == 2 || s0 == 3, "racing read of level 0: {s0}");
        let s1 = w.sum_over_at(t(6), L1);
        assert!(s1 == 5 || s1 == 6, "racing read of level 1: {s1}");
        a.join().unwrap();
        assert_eq!(w.sum_over_at(t(6), L0), 3);
        assert_eq!(w.sum_over_at(t(6), L1), 6);
    });
}

/// One add folds a count two rings deep (ring 0's 3 into ring 1, which
/// rolls and folds its 5 into ring 2) while a reader of level 2 runs: the
/// reader sees 5 and 3 exactly once each, with or without the new add.
#[test]
fn a_reader_racing_a_two_ring_fold_sees_every_count_once() {
    stripecount_loom_tests::model(|| {
        let w = window_with_a_fold_done(&LEVELS3);
        let w2 = Arc::clone(&w);
        let a = thread::spawn(move || w2.add_at(t(6), 1));
        // Level 2 at 6: epochs 0 and 1 of 4 ns, i.e. t in [0, 8).
        let s = w.sum_over_at(t(6), L2);
        assert!(s == 8 || s == 9, "racing read of level 2: {s}");
        a.join().unwrap();
        assert_eq!(w.sum_over_at(t(6), L2), 9);
        assert_eq!(w.sum_over_at(t(6), LEVELS3[1].0), 4); // epochs 2, 3 of 2 ns
        assert_eq!(w.sum_over_at(t(6), LEVELS3[0].0), 1);
    });
}

/// A late add at epoch 0 races the add that seals and folds epoch 0: it
/// lands in ring 0 before the take (and is folded with the 5) or finds the
/// cell sealed and is filed in ring 1 directly; either way level 1 counts
/// it once.
#[test]
fn a_late_add_racing_a_fold_is_counted_once_at_the_coarse_level() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let w2 = Arc::clone(&w);
        let a = thread::spawn(move || w2.add_at(t(4), 1));
        w.add_at(t(0), 7);
        a.join().unwrap();
        assert_eq!(w.sum_over_at(t(1), L1), 12);
        assert_eq!(w.sum_over_at(t(4), L0), 1);
    });
}

/// The owner adds 5 at t = 0, then adds at t = 4, which rolls its ring-0
/// slot and folds the 5 into ring 1, while a reader of level 1 (on its own
/// thread) runs: once the 5 is in, the reader sees it exactly once.
#[test]
fn a_reader_racing_the_owners_fold_sees_the_count_exactly_once() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(MultiWindow::new(&LEVELS).unwrap());
        let in_ = Arc::new(AtomicU64::new(0));
        let (w2, in2) = (Arc::clone(&w), Arc::clone(&in_));
        let owner = thread::spawn(move || {
            w2.add_at(t(0), 5);
            in2.store(1, Ordering::Release);
            w2.add_at(t(4), 1); // folds the 5 into ring 1
        });
        let (w3, in3) = (Arc::clone(&w), Arc::clone(&in_));
        let reader = thread::spawn(move || {
            let seen = in3.load(Ordering::Acquire) == 1;
            let s = w3.sum_over_at(t(1), L1); // level 1's epoch 0
            if seen {
                assert_eq!(s, 5, "racing read of the folded epoch");
            }
        });
        owner.join().unwrap();
        reader.join().unwrap();
        assert_eq!(w.sum_over_at(t(1), L1), 5);
        assert_eq!(w.sum_over_at(t(4), L1), 1);
    });
}

/// The owner's add at t = 6 folds its 3 from ring 0 into ring 1, which
/// rolls and folds its 5 into ring 2, while a reader of level 2 runs: it
/// sees 5 and 3 exactly once each, with or without the new add.
#[test]
fn a_reader_racing_the_owners_two_ring_fold_sees_every_count_once() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(MultiWindow::new(&LEVELS3).unwrap());
        let in_ = Arc::new(AtomicU64::new(0));
        let (w2, in2) = (Arc::clone(&w), Arc::clone(&in_));
        let owner = thread::spawn(move || {
            w2.add_at(t(0), 5);
            w2.add_at(t(4), 3); // folds the 5 into ring 1
            in2.store(1, Ordering::Release);
            w2.add_at(t(6), 1); // two rings deep
        });
        let (w3, in3) = (Arc::clone(&w), Arc::clone(&in_));
        let reader = thread::spawn(move || {
            let seen = in3.load(Ordering::Acquire) == 1;
            let s = w3.sum_over_at(t(6), L2);
            if seen {
                assert!(s == 8 || s == 9, "racing read of level 2: {s}");
            }
        });
        owner.join().unwrap();
        reader.join().unwrap();
        assert_eq!(w.sum_over_at(t(6), L2), 9);
        assert_eq!(w.sum_over_at(t(6), LEVELS3[0].0), 1);
    });
}

/// A naive fold: a fine and a coarse counter, the folder moves the fine
/// count into the coarse one in two steps, and the reader adds both
/// without checking for a fold in progress.
struct NaiveFold {
    fine: AtomicU64,
    coarse: AtomicU64,
}

impl NaiveFold {
    fn new() -> Self {
        NaiveFold {
            fine: AtomicU64::new(5),
            coarse: AtomicU64::new(0),
        }
    }

    fn read(&self) -> u64 {
        self.fine.load(Ordering::SeqCst) + self.coarse.load(Ordering::SeqCst)
    }
}

/// "Take, then add": loom must find the reader that sees the count in
/// neither place.
#[test]
fn naive_fold_take_then_add_loses_the_count_for_readers() {
    stripecount_loom_tests::expect_failure("fold: take, then add", || {
        let f = Arc::new(NaiveFold::new());
        let f2 = Arc::clone(&f);
        let a = thread::spawn(move || {
            let c = f2.fine.swap(0, Ordering::SeqCst);
            f2.coarse.fetch_add(c, Ordering::SeqCst);
        });
        assert_eq!(f.read(), 5, "the reader missed the count");
        a.join().unwrap();
    });
}

/// "Add, then take": loom must find the reader that counts it twice.
#[test]
fn naive_fold_add_then_take_counts_twice_for_readers() {
    stripecount_loom_tests::expect_failure("fold: add, then take", || {
        let f = Arc::new(NaiveFold::new());
        let f2 = Arc::clone(&f);
        let a = thread::spawn(move || {
            let c = f2.fine.load(Ordering::SeqCst);
            f2.coarse.fetch_add(c, Ordering::SeqCst);
            f2.fine.fetch_sub(c, Ordering::SeqCst);
        });
        assert_eq!(f.read(), 5, "the reader counted the count twice");
        a.join().unwrap();
    });
}

/// The naive design: per level, one slot of `epoch` and `count` words; an
/// add that sees a stale epoch publishes the new epoch, then zeroes.
struct NaiveLevel {
    epoch: AtomicU64,
    count: AtomicU64,
}

impl NaiveLevel {
    fn new() -> Self {
        NaiveLevel {
            epoch: AtomicU64::new(0),
            count: AtomicU64::new(5), // the expired slice's count
        }
    }

    fn add(&self, e: u64, n: u64) {
        if self.epoch.load(Ordering::SeqCst) != e {
            self.epoch.store(e, Ordering::SeqCst);
            self.count.store(0, Ordering::SeqCst);
        }
        self.count.fetch_add(n, Ordering::SeqCst);
    }
}

/// Loom must find the interleaving where one add sees the new epoch, adds,
/// and is then wiped by the other add's late zeroing.
#[test]
fn naive_two_level_publish_then_zero_loses_adds() {
    let result = std::panic::catch_unwind(|| {
        stripecount_loom_tests::model(|| {
            let levels = Arc::new([NaiveLevel::new(), NaiveLevel::new()]);
            let l2 = Arc::clone(&levels);
            let a = thread::spawn(move || {
                l2[0].add(4, 1);
                l2[1].add(2, 1);
            });
            levels[0].add(4, 2);
            levels[1].add(2, 2);
            a.join().unwrap();
            for l in levels.iter() {
                assert_eq!(l.count.load(Ordering::SeqCst), 3, "an add was lost");
            }
        });
    });
    assert!(
        result.is_err(),
        "loom must catch the naive roll losing an add"
    );
}
