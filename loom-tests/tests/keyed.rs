//! Loom models of the per-key protocol: the hot word's single reporting
//! CAS, concurrent insertion of a new key, the eviction handshake (entry
//! guards) racing adds, on cold and on striped keys, and the compact row 0's
//! base crossings (a key idle for 2^16 epochs, whose packed tags repeat)
//! racing stale adds, other crossers, sums and evictions. Plus the naive
//! designs, which loom must catch.
//!
//! Windows are 2 slices of 1 ns, so the time in nanoseconds is the epoch.
//! Under loom the map is a modeled `Mutex<HashMap>`: these models check
//! our protocol around the map, not the map's internals.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::time::Duration;
use stripecount::{HotKeyDetector, KeyedWindows, ManualClock};
use stripecount_loom_tests::expect_failure;

mod keyed_support;
use keyed_support::PackedRow;

fn windows() -> KeyedWindows<u32, ManualClock> {
    KeyedWindows::with_clock(Duration::from_nanos(2), 2, ManualClock::new())
        .unwrap()
        .with_auto_evict(false)
}

fn detector(threshold: u64) -> HotKeyDetector<u32, ManualClock> {
    HotKeyDetector::with_clock(Duration::from_nanos(2), 2, threshold, ManualClock::new())
        .unwrap()
        .with_auto_evict(false)
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
        let mut seen: Vec<u64> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        seen.sort_unstable();
        // Each add saw its own add; at least one saw both.
        assert!(seen[0] >= 1 && seen[1] == 2, "{seen:?}");
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
        let after = w.add_at(&7, 2, 1);
        let evicted = evictor.join().unwrap();
        assert_eq!(after, 1);
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
        w.record_at(&7, 2, 1);
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
        w.record_at(&7, 2, 1);
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
        let mut h = w.handle(&7);
        h.record_at(2, 1);
        evictor.join().unwrap();
        assert_eq!(w.sum_at(&7, 2), 1);
        assert_eq!(w.len(), 1);
    });
}

/// Counter-example: "read the sum, remove the entry if it is 0" loses an
/// add made through an entry looked up before the removal.
#[test]
fn naive_eviction_is_caught() {
    let r = std::panic::catch_unwind(|| {
        stripecount_loom_tests::model(|| {
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
    });
    assert!(r.is_err(), "loom must catch the naive eviction");
}

/// Counter-example: "if the sum reached the threshold and the flag is not
/// set, set it and report" lets two racing adds both report.
#[test]
fn naive_hot_flag_is_caught() {
    let r = std::panic::catch_unwind(|| {
        stripecount_loom_tests::model(|| {
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
    });
    assert!(r.is_err(), "loom must catch the naive hot flag");
}

/// An epoch with the same 16-bit tag and the same slot as epoch 1, 2^16
/// epochs later (several blocks on): the first add there crosses.
const FAR: u64 = 1 + (1 << 16);

/// A stale add at epoch 1 races an add at `FAR` that crosses `base` to
/// `FAR`'s block. The count 5 at epoch 1 (same slot, same tag as `FAR`)
/// must never be read as `FAR`'s, and the add at `FAR` is never lost,
/// whether it crossed or was sent to the striped rows.
#[test]
fn stale_add_racing_a_same_tag_crossing() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 1, 5);
        let stale = {
            let w = w.clone();
            thread::spawn(move || w.add_at(&7, 1, 1))
        };
        let mine = w.add_at(&7, FAR, 1);
        let theirs = stale.join().unwrap();
        assert_eq!(mine, 1, "the window at FAR holds only its own add");
        assert!(theirs <= 6, "{theirs}");
        assert_eq!(w.sum_at(&7, FAR), 1);
        assert_eq!(w.sum_at(&7, FAR + 1), 1);
        assert_eq!(w.sum_at(&7, FAR + 2), 0);
        // Row 0 (or the stripes) keep counting at FAR.
        assert_eq!(w.add_at(&7, FAR, 2), 3);
    });
}

/// Two adds that both need to cross (to `FAR` and `FAR + 1`) race: at most
/// one crosses, the other goes to the striped rows; both are counted and
/// nothing from epoch 1 aliases.
#[test]
fn two_crossers_racing() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 1, 5);
        let other = {
            let w = w.clone();
            thread::spawn(move || w.add_at(&7, FAR, 1))
        };
        let mine = w.add_at(&7, FAR + 1, 1);
        let theirs = other.join().unwrap();
        assert!((1..=2).contains(&mine), "{mine}");
        assert!((1..=2).contains(&theirs), "{theirs}");
        assert_eq!(w.sum_at(&7, FAR), 1);
        assert_eq!(w.sum_at(&7, FAR + 1), 2);
        assert_eq!(w.sum_at(&7, FAR + 2), 1);
        assert_eq!(w.sum_at(&7, FAR + 3), 0);
    });
}

/// A sum at `FAR` races the crossing add: it sees the add or not, but
/// never the count 5 of epoch 1 (whose tag and slot are `FAR`'s). The sum
/// runs on the spawned thread: loom's DPOR keeps only the last access to
/// each atomic, so a reader that ran first would be shadowed by the
/// crosser's own loads of the words it then stores, and its races missed
/// (the naive reader below is caught only in this arrangement).
#[test]
fn sum_racing_a_crossing_never_counts_an_aliased_count() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 1, 5);
        let reader = {
            let w = w.clone();
            thread::spawn(move || w.sum_at(&7, FAR))
        };
        w.record_at(&7, FAR, 1);
        let seen = reader.join().unwrap();
        assert!(seen <= 1, "read an aliased count: {seen}");
        assert_eq!(w.sum_at(&7, FAR), 1);
    });
}

/// An eviction at `FAR` (epoch 1 has left the window) races the crossing
/// add at `FAR`: the evictor reads row 0 by the reader rule, and the add
/// is never lost.
#[test]
fn eviction_racing_a_crossing_never_loses_the_add() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 1, 5);
        let evictor = {
            let w = w.clone();
            thread::spawn(move || w.evict_idle_at(FAR))
        };
        w.record_at(&7, FAR, 1);
        evictor.join().unwrap();
        assert_eq!(w.sum_at(&7, FAR), 1);
        assert_eq!(w.len(), 1);
    });
}

/// The three-way race: an eviction of a striped key retires its striped
/// rows, so two adds at `FAR` fall back to row 0; one crosses, which the
/// other's row-0 pin then finds in progress. That add must not wait for
/// the evictor (bound to fail: the crosser is pinned) to restore the rows:
/// it restores them itself. Both adds are counted, once.
///
/// Four threads: fixed at bound 2 (about a minute here), which already
/// reaches the restore (evictor preempted after retiring, crosser preempted
/// mid-crossing, the refused add runs); bound 3 would take CI's budget.
#[test]
fn an_add_refused_by_a_crossing_frees_rows_of_a_doomed_eviction() {
    stripecount_loom_tests::model_at_bound(2, || {
        let w = Arc::new(windows());
        w.add_at(&7, 1, 5);
        assert!(w.__stripe(&7));
        // The main thread only spawns and joins, so that the interleaving
        // "evictor retires, one add crosses, the other is refused" costs
        // two preemptions, within the default bound.
        let evictor = {
            let w = w.clone();
            thread::spawn(move || w.evict_idle_at(FAR))
        };
        let adds: Vec<_> = [1, 2]
            .into_iter()
            .map(|n| {
                let w = w.clone();
                thread::spawn(move || w.record_at(&7, FAR, n))
            })
            .collect();
        evictor.join().unwrap();
        for a in adds {
            a.join().unwrap();
        }
        assert_eq!(w.sum_at(&7, FAR), 3);
        assert_eq!(w.len(), 1);
    });
}

/// Two row-0 adds in one block race: a stale one at 99_998 (below `base`,
/// which the entry's first add set to 99_999) and one at 100_002 that
/// raises `base`, both on slot 0. Each loads its cell before `base`, so
/// neither decodes the other's word from a `base` older than it: the add
/// at 100_002 is never overwritten.
#[test]
fn stale_and_fresh_row0_adds_in_one_block() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        w.add_at(&7, 99_999, 1);
        let fresh = {
            let w = w.clone();
            thread::spawn(move || w.record_at(&7, 100_002, 1))
        };
        w.record_at(&7, 99_998, 1);
        fresh.join().unwrap();
        assert_eq!(w.sum_at(&7, 100_002), 1, "the add at 100_002 was lost");
        assert_eq!(w.sum_at(&7, 100_003), 1);
    });
}

/// Counter-example: a writer that loads `base` before the cell. A stale add
/// at 99_998 loads `base` (100_000); an add at 100_002 (same slot) raises
/// `base` and writes its count; the stale add then loads that cell, decodes
/// its tag from its old `base` as an epoch 2^16 older, and overwrites the
/// live count. The real order (cell, then `base`) passes the same model.
fn packed_writers(base_first: bool) {
    let row = Arc::new(PackedRow::new(100_000, [99_996, 99_999]));
    let stale = {
        let row = row.clone();
        thread::spawn(move || row.add(99_998, 1, base_first))
    };
    row.add(100_002, 1, false);
    stale.join().unwrap();
    assert_eq!(row.sum(100_002, true), 1, "a live count was overwritten");
}

#[test]
fn packed_writer_loading_cell_then_base_is_exact() {
    stripecount_loom_tests::model(|| packed_writers(false));
}

#[test]
fn naive_packed_writer_loading_base_first_is_caught() {
    expect_failure("packed writer loading base before the cell", || {
        packed_writers(true)
    });
}

/// Counter-example: a reader that decodes with the `base` it loads after
/// the cells but does not check that a crossing did not complete while it
/// read them. It can read the old count 5 at epoch 1, then the crossing's
/// new `base` `FAR`, and decode the 5 as `FAR`'s (same tag).
fn packed_reader(check_b1: bool) {
    let row = Arc::new(PackedRow::new(1, [0, 1]));
    row.add(1, 5, false);
    // The reader is the spawned thread: loom's DPOR keeps only the last
    // access to each atomic, so a reader that runs first would be shadowed
    // by the crosser's own loads of the words it then stores.
    let reader = {
        let row = row.clone();
        thread::spawn(move || row.sum(FAR, check_b1))
    };
    // floor(FAR): the lowest epoch a cell may hold in FAR's block.
    let lo = (FAR | ((1 << 13) - 1)) - ((1 << 16) - 1);
    row.cross(FAR, 1, lo);
    let seen = reader.join().unwrap();
    assert!(seen <= 1, "read an aliased count: {seen}");
}

#[test]
fn packed_reader_checking_both_bases_is_exact() {
    stripecount_loom_tests::model(|| packed_reader(true));
}

#[test]
fn naive_packed_reader_is_caught() {
    expect_failure("packed reader without the B1 check", || {
        packed_reader(false)
    });
}
