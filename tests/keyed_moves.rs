//! Per-key structures moved while their maps are live: into a `Box`, an
//! `Arc`, across threads. Every map of a ring
//! reaches the ring's shared parts (its collector, its spare tables) on its
//! own inserts, so a pointer into an owner that moved would be read after
//! the move. These tests are sized to run under Miri (Stacked and Tree
//! Borrows), which reports such a read as undefined behaviour; natively
//! they check the counts.

use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, KeyedWindows, Timestamp};

const SLICE: u64 = 1_000_000_000;

/// The time `ns` nanoseconds after the origin.
const fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Keys per slice: enough that a slice's maps grow past their first
/// tables (every shard of the ring's first map starts with one group).
const KEYS: u64 = if cfg!(miri) { 300 } else { 3_000 };

fn windows() -> KeyedWindows<u64, ManualClock> {
    KeyedWindows::builder(Duration::from_secs(4), 4)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// Adds one to each of `keys` at slice `e`; every add is counted.
fn add_all(w: &KeyedWindows<u64, ManualClock>, e: u64, keys: std::ops::Range<u64>) {
    for k in keys {
        assert!(w.add_at(&k, ts(e * SLICE), 1), "key {k} at slice {e}");
    }
}

#[test]
fn windows_moved_after_their_first_adds_keep_counting() {
    let w = windows();
    add_all(&w, 0, 0..2);
    // Moved with a live map whose tables have not grown yet.
    let w = Box::new(w);
    add_all(&w, 0, 2..KEYS);
    let w = Arc::new(*w);
    // Later slices retire the first ones and take their tables as spares.
    for e in 1..8 {
        add_all(&w, e, 0..KEYS);
    }
    let w = Arc::try_unwrap(w).unwrap();
    for k in [0, KEYS / 2, KEYS - 1] {
        assert_eq!(w.sum_at(&k, ts(7 * SLICE)), 4, "key {k}");
    }
    assert_eq!(w.len(), 4 * KEYS as usize);
}

#[test]
fn windows_moved_between_threads_keep_counting() {
    let w = windows();
    add_all(&w, 0, 0..KEYS / 2);
    let w = std::thread::spawn(move || {
        add_all(&w, 0, KEYS / 2..KEYS);
        add_all(&w, 1, 0..KEYS);
        w
    })
    .join()
    .unwrap();
    add_all(&w, 2, 0..KEYS);
    assert_eq!(w.sum_at(&1, ts(2 * SLICE)), 3);
}

/// A detector whose keys turn heavy (and get the hot state the detector
/// keeps beside the windows) after it was built (bounded) and moved.
#[test]
fn a_detector_moved_and_bounded_after_it_was_built_finds_hot_keys() {
    let d = HotKeyDetector::builder(Duration::from_secs(4), 4, 8)
        .clock(ManualClock::new())
        .max_keys(1000)
        .build()
        .unwrap();
    let d = Box::new(d);
    let d = Arc::new(*d);
    // Threshold 8 over 4 slices: a slice at 2 makes a key heavy.
    let hot: Vec<u64> = (0..20)
        .filter(|k| (0..8).any(|_| d.add_at(k, ts(0), 1)))
        .collect();
    assert_eq!(hot, (0..20).collect::<Vec<_>>(), "each key crosses 8 once");
    assert_eq!(d.heavy_keys(), 20);
    let d = Arc::try_unwrap(d).unwrap();
    let d = std::thread::spawn(move || {
        assert!(!d.add_at(&3, ts(SLICE), 1), "already hot");
        d
    })
    .join()
    .unwrap();
    assert!(d.is_hot_at(&3, ts(SLICE)));
    assert_eq!(d.windows().sum_at(&3, ts(SLICE)), 9);
}

/// Two threads share a detector built and moved before they start.
#[test]
fn a_moved_detector_shared_by_threads_reports_each_crossing_once() {
    let (per_thread, threshold) = if cfg!(miri) { (40, 10) } else { (400, 150) };
    let d = HotKeyDetector::builder(Duration::from_secs(4), 4, threshold)
        .clock(ManualClock::new())
        .max_keys(1000)
        .build()
        .unwrap();
    let d = Arc::new(d);
    let reports: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = &d;
                s.spawn(move || {
                    (0..per_thread)
                        .filter(|i| d.add_at(&(i % 4), ts(0), 1))
                        .count()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // Each of the 4 keys gets `per_thread / 2` adds, over the threshold.
    assert_eq!(reports, 4);
    for k in 0..4 {
        assert_eq!(d.windows().sum_at(&k, ts(0)), per_thread / 2);
    }
}
