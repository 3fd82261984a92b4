//! Loom models of the hot-key detector's home check (`src/keyed/hot.rs`,
//! "Why the check runs under the slice's shard lock"): a key's first add
//! in a new slice learns that an older slice of the window is heavy,
//! whenever the older slice becomes heavy. The protocol's sketches, with
//! the naive check (lock-free on both sides) and a naive scan of the ring
//! as counter-examples, are in `keyed_naive.rs`; a third thread installing
//! the new slice's map is modeled there (through the real types it takes
//! loom too long).
//!
//! Windows are 2 slices of 1 ns, so the time in nanoseconds is the epoch.
//! A threshold of 5 in 2 slices makes a slice heavy at 3.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use stripecount_loom_tests::{detector, t};

/// A key's first adds in a slice that is heavy in an older slice: one
/// thread makes epoch 0 heavy (3 of a threshold of 5 in 2 slices, so
/// `H = 3`) while another creates the key's entry at epoch 1. Whichever
/// way they interleave, the entry learns of the home (`hot.rs`, "Why the
/// check runs under the slice's shard lock"), so the add that takes the
/// window to 5 reports.
#[test]
fn a_new_slice_learns_of_a_heavy_older_slice() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(5));
        assert!(!d.add_at(&7, t(0), 2));
        let crosser = {
            let d = d.clone();
            thread::spawn(move || assert!(!d.add_at(&7, t(0), 1)))
        };
        let creator = {
            let d = d.clone();
            thread::spawn(move || assert!(!d.add_at(&7, t(1), 1)))
        };
        crosser.join().unwrap();
        creator.join().unwrap();
        assert_eq!(d.became_hot_at(&7, t(1), 1), Some(5));
    });
}
