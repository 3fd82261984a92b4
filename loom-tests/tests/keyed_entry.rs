//! Loom models of one key's entry in one slice (`src/keyed/entry.rs`),
//! raced directly through `__loom_keyed::ModelEntry`: adds racing a move
//! to a bigger table (plain and striped entries, a striping in progress),
//! a reader of an entry being moved in, a take (flush) racing adds, and
//! adds racing the striping of their entry. The naive designs these
//! replace are in `keyed_naive.rs`.
//!
//! Counts are chosen so that an add lost or counted twice gives a total
//! no interleaving could give.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_keyed::ModelEntry;

fn entry_with(n: u64) -> Arc<ModelEntry> {
    let e = ModelEntry::new();
    if n > 0 {
        assert!(e.add(n));
    }
    Arc::new(e)
}

/// An add as a writer makes it: on the entry it looked up, or, if that
/// moved, on the new slot (which a new lookup finds).
fn add_following(from: &ModelEntry, to: &ModelEntry, n: u64) {
    if !from.add(n) {
        assert!(to.add(n), "the new slot never refuses");
    }
}

/// A move (as a table rebuild runs it) races an add: the add lands in the
/// old entry before the seal (and is carried) or finds it sealed and goes
/// to the new slot. The new slot ends with every count, once.
fn move_races_add(striped: bool) {
    stripecount_loom_tests::model(move || {
        let from = entry_with(5);
        if striped {
            from.stripe();
        }
        let to = Arc::new(ModelEntry::incoming());
        let adder = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || add_following(&from, &to, 1))
        };
        let mover = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || from.move_into(&to))
        };
        adder.join().unwrap();
        mover.join().unwrap();
        assert_eq!(to.read(), Some(6));
        assert_eq!(from.read(), None, "the old entry reads as moved");
        assert_eq!(to.is_striped(), striped);
    });
}

#[test]
fn add_racing_a_move_is_counted_once() {
    move_races_add(false);
}

/// The stripes move with the key: writers that saw `STRIPED` before the
/// seal still add to the same counter, which the new slot now owns.
#[test]
fn striped_add_racing_a_move_is_counted_once() {
    move_races_add(true);
}

/// A thread stripes the entry (as after a failed CAS) and adds while the
/// entry moves: a `STRIPED` set after the seal is never followed by an add
/// (writers check the seal first), and one set before moves with the key.
#[test]
fn striping_racing_a_move() {
    stripecount_loom_tests::model(|| {
        let from = entry_with(5);
        let to = Arc::new(ModelEntry::incoming());
        let striper = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || {
                from.stripe();
                add_following(&from, &to, 1);
            })
        };
        let mover = {
            let (from, to) = (from.clone(), to.clone());
            thread::spawn(move || from.move_into(&to))
        };
        striper.join().unwrap();
        mover.join().unwrap();
        assert_eq!(to.read(), Some(6));
    });
}

/// A reader of the new slot waits while the key moves in, then sees the
/// moved count (and an add that raced into the new slot, or not).
#[test]
fn reader_of_an_entry_moving_in_waits_for_it() {
    stripecount_loom_tests::model(|| {
        let from = entry_with(5);
        let to = Arc::new(ModelEntry::incoming());
        let reader = {
            let to = to.clone();
            thread::spawn(move || to.read())
        };
        let adder = {
            let to = to.clone();
            thread::spawn(move || assert!(to.add(1)))
        };
        from.move_into(&to);
        let seen = reader.join().unwrap().unwrap();
        adder.join().unwrap();
        assert!(seen == 5 || seen == 6, "reader saw {seen}");
        assert_eq!(to.read(), Some(6));
    });
}

/// A take (a flush) races an add: every count is taken once or stays once.
fn take_races_add(striped: bool) {
    stripecount_loom_tests::model(move || {
        let e = entry_with(5);
        if striped {
            e.stripe();
        }
        let adder = {
            let e = e.clone();
            thread::spawn(move || assert!(e.add(1)))
        };
        let taker = {
            let e = e.clone();
            thread::spawn(move || e.take())
        };
        adder.join().unwrap();
        let taken = taker.join().unwrap();
        assert_eq!(taken + e.read().unwrap(), 6, "taken {taken}");
    });
}

#[test]
fn take_racing_an_add_is_exact() {
    take_races_add(false);
}

#[test]
fn take_racing_a_striped_add_is_exact() {
    take_races_add(true);
}

/// Two adds race while one of them stripes the entry: both are counted,
/// whichever part (the word or the stripes) each lands in, and a reader
/// in between sees a count no interleaving rules out.
#[test]
fn adds_racing_the_striping_of_their_entry() {
    stripecount_loom_tests::model(|| {
        let e = entry_with(5);
        let a = {
            let e = e.clone();
            thread::spawn(move || assert!(e.add(1)))
        };
        let b = {
            let e = e.clone();
            thread::spawn(move || {
                e.stripe();
                assert!(e.add(2));
            })
        };
        let reader = {
            let e = e.clone();
            thread::spawn(move || e.read().unwrap())
        };
        a.join().unwrap();
        b.join().unwrap();
        let seen = reader.join().unwrap();
        assert!([5, 6, 7, 8].contains(&seen), "reader saw {seen}");
        assert_eq!(e.read(), Some(8));
        assert!(e.is_striped());
    });
}
