//! Loom models of the per-key engine through its public types, the map
//! included (`src/keyed/map.rs`, `table.rs`): the hot rule's single
//! reporting CAS, concurrent insertion of a new key, sweeps (evictions)
//! racing adds on cold and striped keys and through handles, and lookups
//! racing a shard's move to a bigger table. One key's state protocols are
//! raced directly in `keyed_state.rs`; the naive designs are in
//! `keyed_naive.rs`.
//!
//! Windows are 2 slices of 1 ns, so the time in nanoseconds is the epoch.
//! Under loom the map has two shards.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use std::collections::hash_map::DefaultHasher;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::time::Duration;
use stripecount::{HotKeyDetector, KeyedWindows, ManualClock};

/// SipHash with fixed keys: loom re-runs a model many times and needs every
/// run to touch the same atomics (a `RandomState` would move the key to
/// another shard or slot in each run).
type Fixed = BuildHasherDefault<DefaultHasher>;

fn windows() -> KeyedWindows<u32, ManualClock, Fixed> {
    KeyedWindows::with_hasher(
        Duration::from_nanos(2),
        2,
        ManualClock::new(),
        Fixed::default(),
    )
    .unwrap()
    .with_auto_evict(false)
}

fn detector(threshold: u64) -> HotKeyDetector<u32, ManualClock, Fixed> {
    HotKeyDetector::over(windows(), threshold).unwrap()
}

/// Two threads each add 1 at the same time to a cold key with threshold
/// 2: whatever the interleaving, exactly one add reports "became hot".
#[test]
fn two_threads_crossing_report_once() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(2));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, 0, 1))
            })
            .collect();
        let reports = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&b| b)
            .count();
        assert_eq!(reports, 1);
        assert!(d.is_hot_at(&7, 0));
        assert_eq!(d.windows().sum_at(&7, 0), 2);
    });
}

/// Three adds (two spawned threads and the main thread) cross a threshold
/// of 3 on a key that already has striped rows: exactly one reports.
#[test]
fn three_threads_crossing_a_striped_key_report_once() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(4));
        assert!(!d.add_at(&7, 0, 1));
        assert!(d.windows().__stripe(&7));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, 0, 1))
            })
            .collect();
        let mine = d.add_at(&7, 0, 1);
        let reports = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&b| b)
            .count()
            + usize::from(mine);
        assert_eq!(reports, 1);
        assert_eq!(d.windows().sum_at(&7, 0), 4);
    });
}

/// A handle and a map add race across one crossing: one report.
#[test]
fn handle_and_map_add_crossing_report_once() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(2));
        let t = {
            let d = d.clone();
            thread::spawn(move || d.add_at(&7, 0, 1))
        };
        let mine = d.handle(&7).add_at(0, 1);
        let theirs = t.join().unwrap();
        assert_eq!(usize::from(mine) + usize::from(theirs), 1);
    });
}

/// A key that was hot at epoch 0 and whose window emptied: two adds at
/// epoch 2 cross again; exactly one reports, whatever the stale views.
#[test]
fn re_crossing_after_cooling_reports_once() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(2));
        assert!(d.add_at(&7, 0, 2));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, 2, 1))
            })
            .collect();
        let reports = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&b| b)
            .count();
        assert_eq!(reports, 1);
        assert!(d.is_hot_at(&7, 2));
    });
}

/// Two threads insert the same new key: one window holds both adds.
#[test]
fn concurrent_insert_of_a_new_key_yields_one_window() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || w.add_at(&7, 0, 1))
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap());
        }
        assert_eq!(w.sum_at(&7, 0), 2);
        assert_eq!(w.len(), 1);
    });
}

/// An eviction at time 2 (the add at time 0 has left the window) races an
/// add at time 2: the add is never lost, and at most one entry remains.
fn eviction_races_add(striped: bool) {
    stripecount_loom_tests::model(move || {
        let w = Arc::new(windows());
        w.add_at(&7, 0, 1);
        if striped {
            assert!(w.__stripe(&7));
        }
        let evictor = {
            let w = w.clone();
            thread::spawn(move || w.evict_idle_at(2))
        };
        assert!(w.add_at(&7, 2, 1));
        let evicted = evictor.join().unwrap();
        assert_eq!(w.sum_at(&7, 2), 1, "the add was lost (evicted {evicted})");
        assert_eq!(w.len(), 1);
        // A later eviction at time 4 finds the key idle and drops it.
        assert_eq!(w.evict_idle_at(4), 1);
        assert_eq!(w.len(), 0);
    });
}

#[test]
fn eviction_racing_an_add_never_loses_it() {
    eviction_races_add(false);
}

#[test]
fn eviction_racing_an_add_on_a_striped_key_never_loses_it() {
    eviction_races_add(true);
}

/// Two evictions of a striped key race an add: an eviction that gives up
/// restores only the rows it retired, the other's work is never undone,
/// and the add is never lost.
#[test]
fn two_evictions_racing_an_add_on_a_striped_key() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 0, 1);
        assert!(w.__stripe(&7));
        let evictors: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || w.evict_idle_at(2))
            })
            .collect();
        assert!(w.add_at(&7, 2, 1));
        // Both may succeed: one on the old entry, one on the fresh entry
        // the add inserted, before the add landed in it (the add then
        // finds it dead and inserts again).
        for e in evictors {
            e.join().unwrap();
        }
        assert_eq!(w.sum_at(&7, 2), 1);
        assert_eq!(w.len(), 1);
    });
}

/// An eviction races a thread that gives the key its striped rows and
/// then adds to them: rows go live only after a version bump of row 0, so
/// either the eviction fails or the add finds the entry dead and re-inserts.
#[test]
fn eviction_racing_striping_never_loses_the_add() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 0, 1);
        let evictor = {
            let w = w.clone();
            thread::spawn(move || w.evict_idle_at(2))
        };
        w.__stripe(&7);
        assert!(w.add_at(&7, 2, 1));
        evictor.join().unwrap();
        assert_eq!(w.sum_at(&7, 2), 1);
        assert_eq!(w.len(), 1);
    });
}

/// A handle holding an entry that gets evicted re-looks the key up.
#[test]
fn eviction_racing_a_handle_never_loses_its_add() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 0, 1);
        let evictor = {
            let w = w.clone();
            thread::spawn(move || w.evict_idle_at(2))
        };
        let h = w.handle(&7);
        assert!(h.add_at(2, 1));
        evictor.join().unwrap();
        assert_eq!(w.sum_at(&7, 2), 1);
        assert_eq!(w.len(), 1);
    });
}

/// Hashes a `u32` key `k` to `k << 33`: every key in shard 0 (bit 32),
/// with the same control byte (bits 57..), starting its probe at group 0,
/// so a model controls which keys share a table.
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

/// Keys `1..=7` fill a one-group table (7/8 of 8 slots): the next insert
/// moves all of them to a two-group table.
fn full_table() -> Arc<KeyedWindows<u32, ManualClock, OneShard>> {
    let w = KeyedWindows::with_hasher(Duration::from_nanos(2), 2, ManualClock::new(), OneShard)
        .unwrap()
        .with_auto_evict(false);
    for k in 1..=7 {
        assert!(w.add_at(&k, 0, 1));
    }
    Arc::new(w)
}

/// An insert that moves the shard to a bigger table races an add on a key
/// being moved: the add lands in the old state before it closes (and is
/// replayed) or finds it closed and follows the key to the new table.
#[test]
fn add_racing_a_table_move_is_counted_once() {
    stripecount_loom_tests::model(|| {
        let w = full_table();
        let inserter = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&8, 0, 1)))
        };
        let adder = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&1, 0, 1)))
        };
        inserter.join().unwrap();
        adder.join().unwrap();
        assert_eq!(w.sum_at(&1, 0), 2);
        assert_eq!(w.sum_at(&8, 0), 1);
        assert_eq!(w.len(), 8);
    });
}

/// A reader racing the same move never reports a key present throughout
/// as absent (the lookup re-checks both table pointers) and never reads a
/// half-moved state (it waits while the new slot is `INCOMING`).
#[test]
fn read_racing_a_table_move_sees_the_key() {
    stripecount_loom_tests::model(|| {
        let w = full_table();
        let inserter = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&8, 0, 1)))
        };
        let reader = {
            let w = w.clone();
            thread::spawn(move || w.sum_at(&7, 0))
        };
        inserter.join().unwrap();
        assert_eq!(reader.join().unwrap(), 1);
    });
}
