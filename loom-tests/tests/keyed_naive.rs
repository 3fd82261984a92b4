//! The naive per-key designs that `keyed.rs` and `keyed_state.rs` replace,
//! as counter-examples loom must catch (so those suites are known to be
//! able to fail):
//! - the hot-key detector's "if the sum reached the threshold and the flag
//!   is not set, set it and report" (two racing adds both report);
//! - "read the count, remove the entry if it is 0" eviction (an add made
//!   through an entry looked up before the removal is lost);
//! - a fold that takes the head's count and then places it in the older
//!   slices with nothing to tell readers a count is in flight (a reader
//!   misses it).
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// A head of `epoch << 32 | count` and one older slice, folded with no
/// marks: the count taken out of the head is in no cell until it is placed.
struct NaiveKey {
    head: AtomicU64,
    older: AtomicU64,
}

impl NaiveKey {
    /// An add at a later epoch: take the head's count, then place it.
    fn add_folding(&self, e: u64, n: u64) {
        let prev = self.head.swap(e << 32 | n, Ordering::SeqCst);
        self.older.fetch_add(prev & 0xffff_ffff, Ordering::SeqCst);
    }

    /// Head, then the older slice (the window holds both epochs).
    fn sum(&self) -> u64 {
        let h = self.head.load(Ordering::SeqCst) & 0xffff_ffff;
        h + self.older.load(Ordering::SeqCst)
    }
}

/// Counter-example: the key holds 5 at epoch 0; an add of 1 at epoch 1
/// folds it; a reader sees 5 or 6 in a correct design, and 1 here (the 5
/// is in flight). `keyed_state.rs::reader_racing_a_fold_sees_the_count_once`
/// is the same race on the real head, with fold marks.
#[test]
fn naive_fold_without_marks_is_caught() {
    expect_failure("fold without marks", || {
        let k = Arc::new(NaiveKey {
            head: AtomicU64::new(5),
            older: AtomicU64::new(0),
        });
        let adder = {
            let k = k.clone();
            thread::spawn(move || k.add_folding(1, 1))
        };
        let reader = {
            let k = k.clone();
            thread::spawn(move || k.sum())
        };
        adder.join().unwrap();
        let seen = reader.join().unwrap();
        assert!(seen == 5 || seen == 6, "reader saw {seen}");
    });
}
