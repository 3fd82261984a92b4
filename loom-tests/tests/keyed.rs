//! Loom models of the per-key engine through its public types, the ring
//! of slice maps and the maps included (`src/keyed/ring.rs`, `src/map/`,
//! `src/keyed/hot.rs`): the hot rule's single reporting CAS (cold and
//! striped keys, handles, re-crossing), concurrent insertion of a new
//! key, rotations of the ring racing adds, readers, late adds and
//! evictions, and adds and reads racing a map's move to a bigger table.
//! One entry's protocols are raced directly in `keyed_entry.rs`; a new
//! slice learning of a heavy older one in `keyed_home.rs`; the naive
//! designs are in `keyed_naive.rs`.
//!
//! Windows are 2 slices of 1 ns, so the time in nanoseconds is the epoch.
//! Under loom the map has two shards.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, KeyedWindows};
use stripecount_loom_tests::{detector, t, windows, Fixed};

/// A key made heavy beforehand (2 of a threshold of 4 in 2 slices, so
/// `H = 2`): its home exists, and racing adds take the exact step.
fn heavy_detector() -> Arc<HotKeyDetector<u32, ManualClock, Fixed>> {
    let d = detector(4);
    assert!(!d.add_at(&7, t(0), 2));
    Arc::new(d)
}

/// Two adds race across the threshold: whatever the interleaving, exactly
/// one reports "became hot", with the sum it saw.
#[test]
fn two_threads_crossing_report_once() {
    stripecount_loom_tests::model(|| {
        let d = heavy_detector();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.became_hot_at(&7, t(0), 1))
            })
            .collect();
        let reports: Vec<u64> = hs.into_iter().filter_map(|h| h.join().unwrap()).collect();
        assert_eq!(reports, vec![4]);
        assert!(d.is_hot_at(&7, t(0)));
    });
}

/// The same on a striped entry (a model cannot force a failed CAS): the
/// adds' counts are not known from their CAS, and the exact step reads
/// the stripes.
#[test]
fn two_threads_crossing_a_striped_key_report_once() {
    stripecount_loom_tests::model(|| {
        let d = heavy_detector();
        assert!(d.windows().__stripe(&7, t(0)));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, t(0), 1))
            })
            .collect();
        let reports = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&b| b)
            .count();
        assert_eq!(reports, 1);
        assert_eq!(d.windows().sum_at(&7, t(0)), 4);
    });
}

/// A striped key with no home yet (a threshold of 5 in 2 slices, so
/// `H = 3`) at 1: two racing adds of 1 make its slice heavy, and one of
/// them must see it (each reads the stripes after a fence,
/// `Entry::after_striped_add`). Else the key gets no home, and the
/// add of the next slice that brings its window to the threshold is taken
/// for one far from it. Without the fence, loom finds both reading 2.
#[test]
fn racing_striped_adds_that_make_a_slice_heavy_are_seen() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(5));
        assert!(!d.add_at(&7, t(0), 1));
        assert!(d.windows().__stripe(&7, t(0)));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, t(0), 1))
            })
            .collect();
        for h in hs {
            assert!(!h.join().unwrap(), "3 is below the threshold");
        }
        assert_eq!(d.heavy_keys(), 1, "the heavy slice went unseen");
        assert!(d.add_at(&7, t(1), 2), "3 + 2 reaches the threshold");
    });
}

/// The same race where one add can stop at its own stripe (`entry.rs`,
/// "The mark of a striped entry"): a threshold of 36 in 2 slices (`H =
/// 18`), 1 in the word, and at most 8 stripes under loom, so a stripe
/// below `(18 - 1 - 1) / 8 = 2` says the count is below `H`. The add of 1
/// stops there unless it finds `NEAR`; the add of 16 sets it. Whatever
/// the interleaving, one of them reads 18. Without the fence after the
/// add, or without `NEAR`, the add of 16 can read 17 while the add of 1
/// stops: the slice is heavy and nobody saw it.
#[test]
fn a_striped_add_that_stops_at_its_stripe_leaves_no_heavy_slice_unseen() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(36));
        assert!(!d.add_at(&7, t(0), 1));
        assert!(d.windows().__stripe(&7, t(0)));
        let hs: Vec<_> = [16, 1]
            .into_iter()
            .map(|n| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, t(0), n))
            })
            .collect();
        for h in hs {
            assert!(!h.join().unwrap(), "18 is below the threshold");
        }
        assert_eq!(d.heavy_keys(), 1, "the heavy slice went unseen");
        assert!(d.add_at(&7, t(1), 18), "18 + 18 reaches the threshold");
    });
}

/// A handle and a map add race across one crossing: one report.
#[test]
fn handle_and_map_add_crossing_report_once() {
    stripecount_loom_tests::model(|| {
        let d = heavy_detector();
        let map_add = {
            let d = d.clone();
            thread::spawn(move || d.add_at(&7, t(0), 1))
        };
        let h = {
            let d = d.clone();
            thread::spawn(move || d.handle(&7).add_at(t(0), 1))
        };
        let theirs = map_add.join().unwrap();
        let mine = h.join().unwrap();
        assert_eq!(usize::from(mine) + usize::from(theirs), 1);
    });
}

/// A key hot at epoch 0 whose window emptied: an add at epoch 2 (a new
/// slice, which it makes heavy) cools it; two more cross again, and
/// exactly one of them reports.
#[test]
fn re_crossing_after_cooling_reports_once() {
    stripecount_loom_tests::model(|| {
        let d = Arc::new(detector(4));
        assert!(d.add_at(&7, t(0), 4));
        assert!(!d.add_at(&7, t(2), 2));
        assert!(!d.is_hot_at(&7, t(2)));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || d.add_at(&7, t(2), 1))
            })
            .collect();
        let reports = hs
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&b| b)
            .count();
        assert_eq!(reports, 1);
        assert!(d.is_hot_at(&7, t(2)));
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
                thread::spawn(move || w.add_at(&7, t(0), 1))
            })
            .collect();
        for h in hs {
            assert!(h.join().unwrap());
        }
        assert_eq!(w.sum_at(&7, t(0)), 2);
        assert_eq!(w.len(), 1);
    });
}

/// An add at epoch 2 replaces slot 0's map (epoch 0, which left the
/// window) while another thread adds at epoch 1 and a third evicts the
/// slices older than epoch 2's window: every add inside the window is
/// counted once, whatever the order.
#[test]
fn rotation_racing_adds_and_an_eviction() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        assert!(w.add_at(&7, t(0), 5));
        let rotator = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&7, t(2), 1)))
        };
        let adder = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&7, t(1), 2)))
        };
        let evictor = {
            let w = w.clone();
            thread::spawn(move || w.evict_idle_at(t(2)))
        };
        rotator.join().unwrap();
        adder.join().unwrap();
        assert!(evictor.join().unwrap() <= 1);
        assert_eq!(w.sum_at(&7, t(2)), 3);
        assert_eq!(w.len(), 2, "the slices of epochs 1 and 2");
    });
}

/// Two adds install the map of a new slice at once: one CAS wins, the
/// loser adds to the winner's map; both are counted.
#[test]
fn racing_installs_of_a_slice_count_both_adds() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        assert!(w.add_at(&7, t(0), 5));
        let hs: Vec<_> = [7u32, 8]
            .into_iter()
            .map(|k| {
                let w = w.clone();
                thread::spawn(move || assert!(w.add_at(&k, t(2), 1)))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.sum_at(&7, t(2)), 1);
        assert_eq!(w.sum_at(&8, t(2)), 1);
        assert_eq!(w.len(), 2);
    });
}

/// A reader of epoch 2 races the add that installs epoch 2's slice: it
/// sees the count at epoch 1, with or without the new add.
#[test]
fn reader_racing_a_rotation() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        assert!(w.add_at(&7, t(0), 5));
        assert!(w.add_at(&7, t(1), 1));
        let rotator = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&7, t(2), 2)))
        };
        let reader = {
            let w = w.clone();
            thread::spawn(move || w.sum_at(&7, t(2)))
        };
        rotator.join().unwrap();
        let seen = reader.join().unwrap();
        assert!(seen == 1 || seen == 3, "reader saw {seen}");
    });
}

/// An add older than the ring (its slot holds a later epoch, or the
/// newest slice's window has passed it) races the add that makes it so:
/// it is counted in its own slice or dropped and reported, never filed
/// under the newer slice.
#[test]
fn late_add_racing_a_rotation_is_never_misfiled() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        assert!(w.add_at(&7, t(0), 5));
        let late = {
            let w = w.clone();
            thread::spawn(move || w.add_at(&7, t(0), 1))
        };
        let rotator = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&7, t(2), 2)))
        };
        rotator.join().unwrap();
        let _counted_or_dropped = late.join().unwrap();
        assert_eq!(w.sum_at(&7, t(2)), 2, "the late add was misfiled");
    });
}

/// The ring's `head` hint (`ring.rs`, invariant 4) can be left naming
/// an old slot: the installer of epoch 1 stores its hint after the
/// installer of epoch 4 stored its own. Slot 1 still holds the map of
/// epoch 1, which is older than the window of 4. An add at epoch 1 after
/// both finished must be dropped (`false`), never counted in that map
/// because the hint named it and the time matched its slice.
#[test]
fn stale_head_hint_never_counts_a_too_old_add() {
    stripecount_loom_tests::model(|| {
        let w = Arc::new(windows());
        assert!(w.add_at(&7, t(0), 5));
        let hs: Vec<_> = [1u64, 4]
            .into_iter()
            .map(|e| {
                let w = w.clone();
                thread::spawn(move || w.add_at(&7, t(e), 1))
            })
            .collect();
        let counted: Vec<bool> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(counted[1], "the add that installs epoch 4 counts");
        assert!(
            !w.add_at(&7, t(1), 1),
            "an add older than the window was counted"
        );
        assert_eq!(w.sum_at(&7, t(4)), 1);
        // The next add at the newest slice mends the hint.
        assert!(w.add_at(&7, t(4), 1));
        assert_eq!(w.sum_at(&7, t(4)), 2);
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

/// An insert that moves the shard to a bigger table races an add on a key
/// being moved: the add lands in the old state before it closes (and is
/// replayed) or finds it closed and follows the key to the new table.
#[test]
fn add_racing_a_table_move_is_counted_once() {
    stripecount_loom_tests::model(|| {
        let w = full_table();
        let inserter = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&8, t(0), 1)))
        };
        let adder = {
            let w = w.clone();
            thread::spawn(move || assert!(w.add_at(&1, t(0), 1)))
        };
        inserter.join().unwrap();
        adder.join().unwrap();
        assert_eq!(w.sum_at(&1, t(0)), 2);
        assert_eq!(w.sum_at(&8, t(0)), 1);
        assert_eq!(w.len(), 8);
    });
}

/// A striped key of a detector moves to a bigger table while an add of 16
/// to it lands (a threshold of 36 in 2 slices, `H = 18`, 1 in the word
/// before: `entry.rs`, "The mark of a striped entry"). The add may set
/// `NEAR` on the old entry after the move copied its `hot` word, so the
/// move gives the new entry `NEAR` itself: without that, the add of 1
/// that follows stops at its stripe, and the slice reaches 18 unseen.
#[test]
fn a_striped_key_moving_keeps_its_near_mark() {
    stripecount_loom_tests::model(|| {
        let d = HotKeyDetector::builder(Duration::from_nanos(2), 2, 36)
            .clock(ManualClock::new())
            .hasher(OneShard)
            .build()
            .unwrap();
        for k in 1..=7 {
            assert!(!d.add_at(&k, t(0), 1));
        }
        assert!(d.windows().__stripe(&1, t(0)));
        let d = Arc::new(d);
        let inserter = {
            let d = d.clone();
            thread::spawn(move || assert!(!d.add_at(&8, t(0), 1)))
        };
        let adder = {
            let d = d.clone();
            thread::spawn(move || assert!(!d.add_at(&1, t(0), 16)))
        };
        inserter.join().unwrap();
        adder.join().unwrap();
        assert!(!d.add_at(&1, t(0), 1));
        assert_eq!(d.windows().sum_at(&1, t(0)), 18);
        assert_eq!(d.heavy_keys(), 1, "the heavy slice went unseen");
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
            thread::spawn(move || assert!(w.add_at(&8, t(0), 1)))
        };
        let reader = {
            let w = w.clone();
            thread::spawn(move || w.sum_at(&7, t(0)))
        };
        inserter.join().unwrap();
        assert_eq!(reader.join().unwrap(), 1);
    });
}
