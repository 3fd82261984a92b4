//! Loom models of one key's state (`src/keyed/state.rs`, `head.rs`,
//! `ext.rs`, `hot.rs`), raced directly through `__loom_keyed::ModelKey`:
//! the head's fold racing readers, late adds and other folds; eviction
//! (`try_retire`) racing adds on the head, on a fold, on a late add and on a
//! striped key; a move to another table racing adds, folds and readers; a
//! take (flush) racing adds; the hot step's single reporting CAS across a
//! fold. The naive designs these replace are in `keyed_naive.rs`.
//!
//! Windows are 2 slices and times are epochs. Counts are chosen so that a
//! count missed or counted twice gives a sum no linearization could give
//! (e.g. 5 at epoch 0, then 1 at epoch 1: a reader sees 5 or 6, never 1 or
//! 11).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_keyed::{ModelAdd, ModelKey};

const S: usize = 2;

fn key_with(adds: &[(u64, u64)]) -> Arc<ModelKey> {
    let k = ModelKey::new(S);
    for &(e, n) in adds {
        assert!(matches!(
            k.add(e, n),
            ModelAdd::Head(_) | ModelAdd::Elsewhere
        ));
    }
    Arc::new(k)
}

fn spawn<T: Send + 'static>(
    k: &Arc<ModelKey>,
    f: impl FnOnce(&ModelKey) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let k = k.clone();
    thread::spawn(move || f(&k))
}

fn counted(o: ModelAdd) -> bool {
    matches!(o, ModelAdd::Head(_) | ModelAdd::Elsewhere)
}

/// An add at epoch 1 folds the head's 5 (epoch 0) into row 0 while a
/// reader sums epoch 1: it sees 5 (before the add) or 6 (after), never
/// the count in flight missed (1) or twice (11).
#[test]
fn reader_racing_a_fold_sees_the_count_once() {
    stripecount_loom_tests::model(|| {
        let k = key_with(&[(0, 5)]);
        let adder = spawn(&k, |k| k.add(1, 1));
        let reader = spawn(&k, |k| k.sum(1));
        assert_eq!(adder.join().unwrap(), ModelAdd::Head(1));
        let seen = reader.join().unwrap().unwrap();
        assert!(seen == 5 || seen == 6, "reader saw {seen}");
        assert_eq!(k.sum(1), Some(6));
    });
}

/// A fold into epoch 1 races a late add at epoch 0 (which lands in the
/// head if it comes first, in row 0 if it comes after the seal): both are
/// counted, once.
#[test]
fn late_add_racing_a_fold() {
    stripecount_loom_tests::model(|| {
        let k = key_with(&[(0, 5)]);
        let folder = spawn(&k, |k| k.add(1, 1));
        let late = spawn(&k, |k| k.add(0, 2));
        assert!(counted(folder.join().unwrap()));
        assert!(counted(late.join().unwrap()));
        assert_eq!(k.sum(1), Some(8));
        assert_eq!(k.sum(0), Some(7));
    });
}

/// Two adds move the head past epoch 0 at once, to epochs 1 and 2: the
/// 5 at epoch 0 is folded (for epoch 1's window) or dropped (it is outside
/// epoch 2's); the add at 1 is counted in the head or, if epoch 2 got there
/// first, in row 0 as a late add.
#[test]
fn two_adds_moving_the_head_at_once() {
    stripecount_loom_tests::model(|| {
        let k = key_with(&[(0, 5)]);
        let a = spawn(&k, |k| k.add(1, 1));
        let b = spawn(&k, |k| k.add(2, 2));
        assert!(counted(a.join().unwrap()));
        assert!(counted(b.join().unwrap()));
        assert_eq!(k.sum(2), Some(3));
    });
}

/// An eviction at epoch `now` (`try_retire`, as a sweep runs it) races one
/// add. Whatever the interleaving: if the key survived, the add was
/// counted and the sum at `check.0` is `check.1`; if it was evicted, the
/// key held nothing in `now`'s window before, and the add either found it
/// dead (`Retry`: its caller looks the key up again) or was counted at an
/// epoch already outside `now`'s window (so no read at or after `now` can
/// miss it).
fn eviction_races(
    prep: &'static [(u64, u64)],
    striped: bool,
    add: (u64, u64),
    now: u64,
    check: (u64, u64),
) {
    stripecount_loom_tests::model(move || {
        let k = key_with(prep);
        if striped {
            k.stripe();
        }
        let before = k.sum(now).unwrap();
        let adder = spawn(&k, move |k| k.add(add.0, add.1));
        let evictor = spawn(&k, move |k| k.retire(now));
        let o = adder.join().unwrap();
        let dead = evictor.join().unwrap();
        assert_eq!(dead, k.is_dead());
        if dead {
            assert_eq!(before, 0, "a key with counts in its window was evicted");
            let outside = add.0 + S as u64 <= now;
            assert!(
                o == ModelAdd::Retry || (counted(o) && outside),
                "{o:?} landed in an evicted key"
            );
        } else {
            assert!(counted(o), "{o:?} on a live key");
            assert_eq!(k.sum(check.0), Some(check.1), "the add was lost or doubled");
        }
    });
}

/// The head's 5 (epoch 0) left the window at 2; the add at 2 recycles the
/// head, dropping the 5.
#[test]
fn eviction_racing_an_add_on_the_head() {
    eviction_races(&[(0, 5)], false, (2, 1), 2, (2, 1));
}

/// Row 0 holds 5 at epoch 0 and the head 1 at epoch 1, both idle at 3; the
/// add at 2 folds the head's count (inside epoch 2's window) into row 0.
#[test]
fn eviction_racing_a_fold() {
    eviction_races(&[(0, 5), (1, 1)], false, (2, 1), 3, (2, 2));
}

/// The head holds 1 at epoch 2, live at 3: the eviction must fail whatever
/// the add at 3 (a fold of the head into row 0) is doing.
#[test]
fn eviction_of_a_live_key_racing_a_fold_fails() {
    eviction_races(&[(0, 5), (2, 1)], false, (3, 1), 3, (3, 2));
}

/// A striped key: the add goes to the thread's stripe row, pinned.
#[test]
fn eviction_racing_a_striped_add() {
    eviction_races(&[(0, 5)], true, (2, 1), 2, (2, 1));
}

/// A late add at epoch 0 (the head holds epoch 1) goes to row 0, pinned,
/// while the key, idle at 3, is evicted: the add is refused and retried,
/// or lands before the eviction's snapshot (outside 3's window, so the
/// eviction may go on), or makes the eviction fail.
#[test]
fn eviction_racing_a_late_add() {
    eviction_races(&[(0, 5), (1, 1)], false, (0, 2), 3, (1, 8));
}

/// A late add inside the window of the evictor's time: the head holds 1
/// at epoch 3, so the key is live at 3 and the eviction fails; the late
/// add at 2 lands in row 0 once.
#[test]
fn eviction_of_a_live_key_racing_a_late_add_fails() {
    eviction_races(&[(0, 5), (3, 1)], false, (2, 2), 3, (3, 3));
}

/// A move (`move_into`, as a table rebuild runs it) races an add that
/// folds: the add either lands in the old state before it closes (and is
/// replayed) or is told to retry and lands in the new slot, as a writer
/// that looks the key up again would. Nothing is lost or doubled, and the
/// new slot stops being `INCOMING`.
#[test]
fn move_racing_a_folding_add() {
    stripecount_loom_tests::model(|| {
        let from = key_with(&[(0, 5)]);
        let to = Arc::new(ModelKey::incoming(S));
        let adder = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || {
                if from.add(1, 1) == ModelAdd::Retry {
                    assert!(counted(to.add(1, 1)));
                }
            })
        };
        let mover = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || from.move_into(&to))
        };
        adder.join().unwrap();
        mover.join().unwrap();
        assert!(!to.is_incoming());
        assert_eq!(to.sum(1), Some(6));
        assert_eq!(from.sum(1), None, "the old state reads as moved");
    });
}

/// A reader of the new slot waits while the key moves in, then sees every
/// count the old state held.
#[test]
fn reader_of_a_key_moving_in_waits_for_it() {
    stripecount_loom_tests::model(|| {
        let from = key_with(&[(0, 5), (1, 1)]);
        let to = Arc::new(ModelKey::incoming(S));
        let reader = spawn(&to, |to| to.sum(1));
        let mover = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || from.move_into(&to))
        };
        mover.join().unwrap();
        assert_eq!(reader.join().unwrap(), Some(6));
    });
}

/// A move of a striped key races a striped add: the add is replayed or
/// retried into the new slot, never lost or doubled.
#[test]
fn move_racing_a_striped_add() {
    stripecount_loom_tests::model(|| {
        let from = key_with(&[(0, 5)]);
        from.stripe();
        let to = Arc::new(ModelKey::incoming(S));
        let adder = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || {
                if from.add(0, 1) == ModelAdd::Retry {
                    assert!(counted(to.add(0, 1)));
                }
            })
        };
        let mover = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || from.move_into(&to))
        };
        adder.join().unwrap();
        mover.join().unwrap();
        assert_eq!(to.sum(1), Some(6));
    });
}

/// A take (the flush of `take_all`) races an add that folds: every count
/// is taken once or stays once.
#[test]
fn take_racing_a_folding_add() {
    stripecount_loom_tests::model(|| {
        let k = key_with(&[(0, 5)]);
        let adder = spawn(&k, |k| k.add(1, 1));
        let taker = spawn(&k, |k| k.take());
        assert!(counted(adder.join().unwrap()));
        let taken = taker.join().unwrap();
        assert_eq!(taken + k.sum(1).unwrap(), 6, "taken {taken}");
    });
}

/// Two hot-rule adds at epoch 1 cross a threshold of 7 on a key holding 5
/// at epoch 0: the first folds the head, both go through the filter
/// (`head + up`) and possibly the exact step: exactly one reports.
#[test]
fn hot_crossing_across_a_fold_reports_once() {
    stripecount_loom_tests::model(|| {
        let k = key_with(&[(0, 5)]);
        let hs: Vec<_> = (0..2).map(|_| spawn(&k, |k| k.hot_add(1, 1, 7))).collect();
        let reports: Vec<u64> = hs.into_iter().filter_map(|h| h.join().unwrap()).collect();
        assert_eq!(reports, vec![7]);
    });
}

/// Two striped adds cross a threshold of 7: exactly one reports.
#[test]
fn hot_crossing_on_a_striped_key_reports_once() {
    stripecount_loom_tests::model(|| {
        let k = key_with(&[(0, 5)]);
        k.stripe();
        let hs: Vec<_> = (0..2).map(|_| spawn(&k, |k| k.hot_add(0, 1, 7))).collect();
        let reports = hs.into_iter().filter_map(|h| h.join().unwrap()).count();
        assert_eq!(reports, 1);
    });
}
