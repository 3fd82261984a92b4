#![cfg(loom)]
//! Loom models of `MultiWindow`: adds racing a roll at two levels at once
//! lose nothing at either level, and a late add racing a roll is never
//! filed under the new epoch. The naive two-level design ("publish the new
//! epoch, then zero the count") is kept as a counter-example loom must
//! catch.
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

const LEVELS: [(Duration, usize); 2] = [(Duration::from_nanos(2), 2), (Duration::from_nanos(4), 2)];
const L0: Duration = Duration::from_nanos(2);
const L1: Duration = Duration::from_nanos(4);

fn window_with_old_count() -> Arc<MultiWindow> {
    let w = MultiWindow::new(&LEVELS).unwrap();
    w.add_at(0, 5); // epoch 0 at both levels, slot 0 at both levels
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
        let a = thread::spawn(move || w2.add_at(4, 1));
        w.add_at(4, 2);
        for span in [L0, L1] {
            let s = w.sum_over_at(4, span);
            assert!(s == 2 || s == 3, "racing read over {span:?}: {s}");
        }
        a.join().unwrap();
        assert_eq!(w.sum_over_at(4, L0), 3);
        assert_eq!(w.sum_over_at(4, L1), 3);
        // The next slice at each level starts empty.
        assert_eq!(w.sum_over_at(6, L0), 0);
        assert_eq!(w.sum_over_at(8, L1), 0);
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
        let a = thread::spawn(move || wa.add_at(4, 1));
        let b = thread::spawn(move || wb.add_at(4, 2));
        for span in [L0, L1] {
            let s = w.sum_over_at(4, span);
            assert!(s <= 3, "racing read over {span:?}: {s}");
        }
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(w.sum_over_at(4, L0), 3);
        assert_eq!(w.sum_over_at(4, L1), 3);
    });
}

/// A late add at epoch 0 races the roll of its slot at both levels: it is
/// counted in epoch 0 (expired) or dropped, never in the new epochs.
#[test]
fn a_late_add_racing_a_roll_is_never_filed_under_the_new_epoch() {
    stripecount_loom_tests::model(|| {
        let w = window_with_old_count();
        let w2 = Arc::clone(&w);
        let late = thread::spawn(move || w2.add_at(1, 7)); // epochs 1 and 0
        w.add_at(4, 2);
        late.join().unwrap();
        assert_eq!(w.sum_over_at(4, L0), 2);
        assert_eq!(w.sum_over_at(4, L1), 2);
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
            wa.add_at(4, 1); // epochs 4 and 2: slot 0 at both levels
            da.store(1, Ordering::Release);
        });
        let wb = Arc::clone(&w);
        let b = thread::spawn(move || wb.add_at(5, 2)); // epochs 5 and 2
        if done.load(Ordering::Acquire) == 1 {
            let (s0, s1) = (w.sum_over_at(5, L0), w.sum_over_at(5, L1));
            assert!(s0 == 1 || s0 == 3, "level 0 after the add: {s0}");
            assert!(s1 == 1 || s1 == 3, "level 1 after the add: {s1}");
        }
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(w.sum_over_at(5, L0), 3);
        assert_eq!(w.sum_over_at(5, L1), 3);
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
