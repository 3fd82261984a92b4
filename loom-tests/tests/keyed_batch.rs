//! Loom models of the batch methods (`src/keyed/batch.rs`,
//! `src/keyed/many.rs`, `src/limiter/keyed/batch.rs`) racing single calls
//! and a table move: a batch is its items' single calls, one after the
//! other, so every add counts once, every crossing is reported once and no
//! key is over-admitted, whatever the interleaving. And the naive batch
//! the real one is not, as a counter-example loom must catch: one that
//! looks its keys up first and adds later to the entries it found (a move
//! in between loses the add; the real batch only prefetches before it
//! applies, and each add looks its key up and adds by CAS, refusing a
//! sealed entry).
//!
//! Windows are 2 slices of 1 ns, so the time in nanoseconds is the epoch.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, KeyedWindows, Quota};
use stripecount_loom_tests::{detector, expect_failure, t, Fixed};

/// Hashes a `u32` key `k` to `k << 33`: every key in shard 0, with the
/// same control byte, starting its probe at group 0 (as `keyed.rs`'s), so
/// that keys `1..=7` fill a table and the next insert moves them.
#[derive(Clone, Default)]
struct OneShard;

struct OneShardHasher(u64);

impl Hasher for OneShardHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0 << 8 | u64::from(b);
        }
    }
    fn write_u32(&mut self, k: u32) {
        self.0 = u64::from(k) << 33;
    }
}

impl BuildHasher for OneShard {
    type Hasher = OneShardHasher;
    fn build_hasher(&self) -> OneShardHasher {
        OneShardHasher(0)
    }
}

/// Keys `1..=7` fill a one-group table: the next insert moves them all.
fn full_table() -> Arc<KeyedWindows<u32, ManualClock, OneShard>> {
    let w = KeyedWindows::builder(Duration::from_nanos(2), 2)
        .clock(ManualClock::new())
        .hasher(OneShard)
        .build()
        .unwrap();
    for k in 1..=7 {
        assert!(w.add_at(&k, t(0), 1));
    }
    Arc::new(w)
}

/// A batch adds to a key being moved (and to a new key) while an insert
/// moves the table: every add counted once, in the old entry before it
/// closed or in the new one.
#[test]
fn a_batch_racing_a_table_move_counts_every_add_once() {
    stripecount_loom_tests::model(|| {
        let w = full_table();
        let inserter = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&8, t(0), 1)))
        };
        let batch = {
            let w = w.clone();
            thread::spawn(move || w.add_many_at([(&1, 1), (&9, 2), (&1, 1)], t(0)))
        };
        inserter.join().unwrap();
        assert_eq!(batch.join().unwrap(), 3);
        assert_eq!(w.sum_at(&1, t(0)), 3);
        assert_eq!(w.sum_at(&8, t(0)), 1);
        assert_eq!(w.sum_at(&9, t(0)), 2);
    });
}

/// A batch's two adds and a single add race across a key's threshold (2
/// held, threshold 4): exactly one of the three adds reports the crossing.
#[test]
fn a_batch_and_a_single_add_crossing_report_once() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(4));
        assert!(!d.add_at(&7, t(0), 2));
        let batch = {
            let d = d.clone();
            thread::spawn(move || {
                let mut reports = Vec::new();
                d.add_many_at([(&7, 1), (&7, 1)], t(0), |_, sum| reports.push(sum));
                reports
            })
        };
        let single = {
            let d = d.clone();
            thread::spawn(move || d.became_hot_at(&7, t(0), 1))
        };
        let mut reports = batch.join().unwrap();
        reports.extend(single.join().unwrap());
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!((4..=5).contains(&reports[0]));
        assert_eq!(d.windows().sum_at(&7, t(0)), 5);
    });
}

/// A batch of two requests and a single request race for a key's last two
/// permits: two granted, never three; the batch's verdicts are in order.
#[test]
fn a_batch_of_requests_never_over_admits() {
    stripecount_loom_tests::model(|| {
        let lim = KeyedLimiter::builder(Quota::per(3, Duration::from_nanos(2)).slices(2))
            .clock(ManualClock::new())
            .hasher(Fixed::default())
            .build()
            .unwrap();
        assert!(lim.try_acquire_at(&7u32, t(0), 1));
        let lim = Arc::new(lim);
        let batch = {
            let lim = lim.clone();
            thread::spawn(move || {
                let mut verdicts = Vec::new();
                lim.try_acquire_many_at([(&7u32, 1), (&7u32, 1)], t(0), |i, ok| {
                    verdicts.push((i, ok))
                });
                verdicts
            })
        };
        let single = {
            let lim = lim.clone();
            thread::spawn(move || lim.try_acquire_at(&7u32, t(0), 1))
        };
        let verdicts = batch.join().unwrap();
        let single = single.join().unwrap();
        assert_eq!(verdicts.iter().map(|v| v.0).collect::<Vec<_>>(), [0, 1]);
        let granted = verdicts.iter().filter(|v| v.1).count() + usize::from(single);
        assert_eq!(granted, 2);
        // A refused request saw the window full: nothing after it fits.
        if !verdicts[0].1 {
            assert!(!verdicts[1].1);
        }
        assert_eq!(lim.available_at(&7u32, t(0)), 0);
    });
}

/// Counter-example: a batch that looks its keys up first, then adds to
/// the entries it found with a plain add. A move between the two (seal
/// the old entry, fold its count into the new one, publish the new table)
/// loses the add made to the old entry.
#[test]
fn naive_batch_that_adds_to_entries_found_before_is_caught() {
    const SEALED: u64 = 1 << 63;
    expect_failure("look up the group, then add to what was found", || {
        // Entry 0 (the old table's) holds 5; entry 1 is the new table's.
        let entries = Arc::new([AtomicU64::new(5), AtomicU64::new(0)]);
        let table = Arc::new(AtomicUsize::new(0));
        let mover = {
            let (entries, table) = (entries.clone(), table.clone());
            thread::spawn(move || {
                let w = entries[0].fetch_or(SEALED, Ordering::SeqCst);
                entries[1].fetch_add(w & !SEALED, Ordering::SeqCst);
                table.store(1, Ordering::SeqCst);
            })
        };
        // The batch's lookup pass, then its add pass.
        let found = table.load(Ordering::SeqCst);
        entries[found].fetch_add(1, Ordering::SeqCst);
        mover.join().unwrap();
        assert_eq!(entries[1].load(Ordering::SeqCst), 6, "an add was lost");
    });
}
