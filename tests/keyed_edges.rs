//! Per-key windows at the edges of single operations: handles, zero adds,
//! saturation (of a slice's count and of a window sum), borrowed lookups,
//! memory per key, configuration errors, the real clock, and the
//! detector's access to its windows. The ring model is in `keyed.rs`.

mod keyed_model;
mod keyed_support;

use keyed_model::COUNT_MAX;
use keyed_support::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::window::MAX_SLICES;
use stripecount::{ConfigError, HotKeyDetector, KeyedWindows};

#[test]
fn handles_add_read_and_reinsert() {
    let w = windows();
    let h = w.handle(&1);
    assert_eq!(*h.key(), 1);
    assert_eq!(h.add_and_sum_at(ts(0), 2), 2);
    assert!(h.add_at(ts(0), 3));
    assert!(h.add_at(ts(0), 0));
    assert_eq!(h.sum_at(ts(0)), 5);
    assert_eq!(h.add_and_sum_at(ts(SLICE), 1), 6);
    assert_eq!(w.len(), 2, "one entry in each of two slices");
    // The handle and the map agree.
    assert_eq!(w.sum_at(&1, ts(SLICE)), 6);
    // A window after slice 1 both slices are out: evicted whole.
    let later = 6 * SLICE;
    assert_eq!(w.evict_idle_at(ts(later)), 2);
    assert_eq!(w.len(), 0);
    assert_eq!(h.sum_at(ts(SLICE)), 0);
    // The handle's next add inserts the key again.
    assert_eq!(h.add_and_sum_at(ts(later), 4), 4);
    assert_eq!(w.sum_at(&1, ts(later)), 4);
    assert_eq!(w.len(), 1);
    // An add older than the ring through a handle is dropped too.
    assert!(!h.add_at(ts(0), 1));
    assert_eq!(h.add_and_sum_at(ts(0), 1), 0);
    // `add` reads the windows' clock.
    w.clock().set(ts(later));
    assert!(h.add(1));
    assert_eq!(h.sum_at(ts(later)), 5);
}

#[test]
fn handle_counts_untracked_when_full() {
    let w = windows_builder(SLICE, SLICES).max_keys(1).build().unwrap();
    assert!(w.add_at(&1, ts(0), 1));
    let h = w.handle(&2);
    assert!(!h.add_at(ts(0), 1));
    assert_eq!(h.add_and_sum_at(ts(0), 1), 0);
    assert_eq!(w.untracked_adds(), 2);
    // Another slice has room for it.
    assert!(h.add_at(ts(SLICE), 1));
    assert_eq!(h.sum_at(ts(SLICE)), 1);
    assert_eq!(w.sum_at(&1, ts(SLICE)), 1);
    assert_eq!(w.len(), 2);
    let hd = detector_builder(SLICE, SLICES, 2)
        .max_keys(1)
        .build()
        .unwrap();
    assert!(!hd.add_at(&1, ts(0), 1));
    assert!(
        !hd.handle(&2).add_at(ts(0), 5),
        "untracked: decides nothing"
    );
    assert!(!hd.is_hot_at(&2, ts(0)));
    assert_eq!(hd.windows().untracked_adds(), 1);
}

#[test]
fn zero_adds_record_nothing() {
    let w = windows();
    assert!(w.add_at(&1, ts(10 * SLICE), 0));
    assert!(w.handle(&1).add_at(ts(10 * SLICE), 0));
    assert_eq!(w.add_and_sum_at(&1, ts(10 * SLICE), 0), 0);
    assert_eq!(w.len(), 0);
    // Nothing was installed: epoch 0 is not older than the ring.
    assert!(w.add_at(&1, ts(0), 1));
    assert_eq!(w.add_and_sum_at(&1, ts(0), 0), 1);
    assert_eq!(w.len(), 1);
    let d = HotKeyDetector::builder(Duration::from_secs(1), 10, 1)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(!d.add_at(&1u8, ts(0), 0));
    assert_eq!(d.became_hot_at(&1u8, ts(0), 0), None);
    assert!(!d.is_hot_at(&1u8, ts(0)));
    assert!(d.windows().is_empty());
    assert!(d.add_at(&1u8, ts(0), 1));
}

/// A key's count in one slice saturates at 2^60 - 1; a window sum
/// saturates at `u64::MAX` instead of wrapping.
#[test]
fn saturates_instead_of_wrapping() {
    // 16 saturated slices: 16 * (2^60 - 1) = 2^64 - 16 still fits.
    let w = windows_of(SLICE, 16);
    for e in 0..16u64 {
        assert!(w.add_at(&1, ts(e * SLICE), u64::MAX));
        assert!(
            w.add_at(&1, ts(e * SLICE), 1),
            "a saturated slice still counts"
        );
    }
    assert_eq!(w.sum_at(&1, ts(0)), COUNT_MAX);
    assert_eq!(w.sum_at(&1, ts(15 * SLICE)), 16 * COUNT_MAX);
    assert_eq!(w.add_and_sum_at(&1, ts(15 * SLICE), 5), u64::MAX - 15);
    // 18 of them: the sum saturates.
    let w = windows_of(SLICE, 18);
    for e in 0..18u64 {
        w.add_at(&1, ts(e * SLICE), COUNT_MAX - 1);
        w.add_at(&1, ts(e * SLICE), 2);
    }
    assert_eq!(w.sum_at(&1, ts(17 * SLICE)), u64::MAX);
    assert_eq!(w.top_at(ts(17 * SLICE), 1), vec![(1, u64::MAX)]);
    let mut taken = 0u32;
    w.take(&1, |_, c| {
        assert_eq!(c, COUNT_MAX);
        taken += 1;
    });
    assert_eq!(taken, 18);
    // The detector crosses `u64::MAX` with a saturated sum.
    let d = detector(SLICE, 18, u64::MAX);
    for e in 0..16u64 {
        assert_eq!(d.became_hot_at(&1, ts(e * SLICE), u64::MAX), None);
    }
    assert_eq!(
        d.became_hot_at(&1, ts(16 * SLICE), u64::MAX),
        Some(u64::MAX)
    );
    assert!(d.is_hot_at(&1, ts(17 * SLICE)));
}

/// An add larger than what a slice's count can still take, to a key its
/// slice already holds (the one-CAS fast path), saturates too; it never
/// wraps the count or reaches the entry's flag bits. (Checked with `take`,
/// which does not wait on the flags, before any read that would.)
#[test]
fn huge_adds_to_a_held_key_saturate() {
    let w = windows();
    assert!(w.add_at(&1, ts(0), 5));
    assert!(w.add_at(&1, ts(0), u64::MAX));
    let mut taken = Vec::new();
    w.take(&1, |start, c| taken.push((slice_epoch(start, SLICE), c)));
    assert_eq!(taken, vec![(0, COUNT_MAX)]);
    assert!(w.add_at(&2, ts(0), 1));
    assert!(w.add_at(&2, ts(0), 1 << 62));
    taken.clear();
    w.take(&2, |start, c| taken.push((slice_epoch(start, SLICE), c)));
    assert_eq!(taken, vec![(0, COUNT_MAX)]);
    assert!(w.add_at(&3, ts(0), 1));
    assert!(w.add_at(&3, ts(0), COUNT_MAX));
    assert_eq!(w.sum_at(&3, ts(0)), COUNT_MAX);
    assert!(!w.is_striped_at(&2, ts(0)));
    assert_eq!(w.add_and_sum_at(&2, ts(0), 1), 1);
    assert_eq!(w.sum_at(&1, ts(0)), 0);
}

/// `String` keys looked up by `&str` (and `Vec<u8>` by `&[u8]`) through
/// every per-key method.
#[test]
fn borrowed_lookups() {
    let w: KeyedWindows<String, ManualClock> = KeyedWindows::builder(Duration::from_secs(1), 10)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(w.add_at("alpha", ts(0), 2));
    assert!(w.add_at(&"alpha".to_string(), ts(0), 1));
    assert_eq!(w.add_and_sum_at("beta", ts(0), 1), 1);
    assert_eq!(w.sum_at("alpha", ts(0)), 3);
    assert_eq!(
        w.top_at(ts(0), 5),
        vec![("alpha".to_string(), 3), ("beta".to_string(), 1)]
    );
    let h = w.handle("alpha");
    assert_eq!(h.key(), "alpha");
    assert_eq!(h.add_and_sum_at(ts(0), 1), 4);
    assert!(!w.is_striped_at("alpha", ts(0)));
    assert_eq!(w.key_memory_bytes("alpha"), 0);
    let mut taken = Vec::new();
    let slice_ns = w.slice_len().as_nanos() as u64;
    w.take("alpha", |start, c| {
        taken.push((slice_epoch(start, slice_ns), c))
    });
    assert_eq!(taken, vec![(0, 4)]);
    let d: HotKeyDetector<String, ManualClock> =
        HotKeyDetector::builder(Duration::from_secs(1), 10, 2)
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert!(!d.add_at("x", ts(0), 1));
    assert_eq!(d.became_hot_at("x", ts(0), 1), Some(2));
    assert!(d.is_hot_at("x", ts(0)));
    assert_eq!(d.hot_keys_at(ts(0)), vec!["x".to_string()]);
    let b: KeyedWindows<Vec<u8>, ManualClock> = KeyedWindows::builder(Duration::from_secs(1), 10)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(b.add_at(&b"k"[..], ts(0), 3));
    assert_eq!(b.sum_at(&b"k"[..], ts(0)), 3);
}

/// Memory of 100k `u64` keys each added once in one slice: a slot of 32
/// bytes (the key and its entry) plus a control byte, in tables kept
/// between 7/12 and 7/8 full (`map.rs`, "Growth"), is 38 to 57 bytes a key
/// (measured on x86-64: 47.1 in the ring's first map, which has every
/// shard; 42.7 when it had four); asserted at most 96, which also holds for
/// tables that grow by doubling from half full (66). Keys that were never
/// contended hold nothing outside their slots.
///
/// Not under Miri: the bounds hold for a large count of keys (at a few
/// hundred the fixed cost of the first slice's 128 shards dominates), and
/// 200k adds would take Miri hours.
#[cfg(not(miri))]
#[test]
fn memory_per_key() {
    const KEYS: u64 = 100_000;
    let w: KeyedWindows<u64, ManualClock> = KeyedWindows::builder(Duration::from_secs(10), 10)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let empty = w.memory_bytes();
    for k in 0..KEYS {
        assert!(w.add_at(&k, ts(5), 1));
    }
    assert_eq!(w.len(), KEYS as usize);
    let per_key = (w.memory_bytes() - empty) as f64 / KEYS as f64;
    println!("memory per key (100k u64 keys, one slice): {per_key:.1} bytes");
    assert!(per_key >= 32.0, "{per_key}");
    assert!(per_key <= 96.0, "{per_key}");
    for k in (0..KEYS).step_by(997) {
        assert_eq!(w.key_memory_bytes(&k), 0);
        assert!(!w.is_striped_at(&k, ts(5)));
    }
    assert_eq!(w.key_memory_bytes(&KEYS), 0, "an absent key");
    // The same keys in a second slice: twice the entries, about twice the
    // memory.
    for k in 0..KEYS {
        assert!(w.add_at(&k, ts(1_000_000_000), 1));
    }
    assert_eq!(w.len(), 2 * KEYS as usize);
    assert_eq!(w.sum_at(&7, ts(1_000_000_000)), 2);
    // Both slices leave the window: dropped whole.
    assert_eq!(w.evict_idle_at(ts(1 << 60)), 2 * KEYS as usize);
    assert_eq!(w.len(), 0);
    assert!(w.memory_bytes() <= empty, "{} > {empty}", w.memory_bytes());
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let err =
        |window: Duration, slices: usize| KeyedWindows::<u8>::new(window, slices).unwrap_err();
    assert_eq!(err(Duration::ZERO, 10), ConfigError::ZeroWindow);
    assert_eq!(err(Duration::from_secs(1), 0), ConfigError::ZeroSlices);
    assert_eq!(
        err(Duration::from_secs(1), MAX_SLICES + 1),
        ConfigError::TooManySlices {
            slices: MAX_SLICES + 1,
            max: MAX_SLICES
        }
    );
    assert_eq!(
        err(Duration::from_nanos(10), 3),
        ConfigError::UnevenSlices {
            window: Duration::from_nanos(10),
            slices: 3
        }
    );
    assert_eq!(
        err(Duration::MAX, 1),
        ConfigError::WindowTooLong {
            window: Duration::MAX
        }
    );
    assert!(KeyedWindows::<u8>::new(Duration::from_nanos(MAX_SLICES as u64), MAX_SLICES).is_ok());
    assert!(matches!(
        HotKeyDetector::<u8>::new(Duration::from_secs(1), 10, 0).unwrap_err(),
        ConfigError::Invalid(_)
    ));
    assert_eq!(
        HotKeyDetector::<u8>::new(Duration::from_secs(1), 0, 5).unwrap_err(),
        ConfigError::ZeroSlices
    );
    assert!(matches!(
        detector_builder(SLICE, SLICES, 0).build().unwrap_err(),
        ConfigError::Invalid(_)
    ));
}

#[test]
fn real_clock_adds() {
    let d = HotKeyDetector::new(Duration::from_secs(3600), 10, 2).unwrap();
    assert!(!d.add(&"x", 1));
    assert!(d.add(&"x", 1));
    assert!(d.is_hot(&"x"));
    let w = KeyedWindows::new(Duration::from_secs(3600), 10).unwrap();
    assert_eq!(w.add_and_sum(&1u8, 3), 3);
    assert!(w.add(&1u8, 1));
    assert!(w.add(&1u8, 1));
    assert_eq!(w.sum(&1u8), 5);
    assert!(w.handle(&1u8).add(1));
    assert_eq!(w.sum(&1u8), 6);
    assert_eq!(w.window(), Duration::from_secs(3600));
    assert_eq!(w.slices(), 10);
    assert_eq!(w.slice_len(), Duration::from_secs(360));
    // 720 s is in slice 2 (slices of 360 s): a take gives that slice's
    // start.
    let at = KeyedWindows::new(Duration::from_secs(3600), 10).unwrap();
    assert!(at.add_at(&1u8, ts(720_000_000_000), 1));
    let slice_ns = at.slice_len().as_nanos() as u64;
    let mut epochs = Vec::new();
    at.take(&1u8, |start, _| epochs.push(slice_epoch(start, slice_ns)));
    assert_eq!(epochs, vec![2]);
}

/// `take_all` through a detector's windows and the clock accessors of a
/// detector (smoke of the plumbing the CLI uses).
#[test]
fn detector_windows_take_and_debug() {
    let d = detector(SLICE, SLICES, 3);
    d.add_at(&1, ts(0), 2);
    d.add_at(&1, ts(SLICE), 2);
    let mut got = Vec::new();
    d.windows()
        .take_all(|k, start, c| got.push((*k, slice_epoch(start, SLICE), c)));
    got.sort_unstable();
    assert_eq!(got, vec![(1, 0, 2), (1, 1, 2)]);
    assert!(format!("{d:?}").contains("threshold: 3"));
    assert!(format!("{:?}", d.windows()).contains("slices: 5"));
    let counter = AtomicUsize::new(0);
    d.windows().take(&1, |_, _| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(counter.load(Ordering::Relaxed), 0, "everything was taken");
}

/// A bound is a cap, not a size: a ring bounded at 60 billion keys a slice
/// holds what its keys need (found by fuzzing `hotkeys --max-keys
/// 59999999980`, when a bounded ring's first map was presized for its
/// bound: 468M keys a shard).
#[test]
fn a_huge_bound_allocates_nothing_for_it() {
    for max in [59_999_999_980usize, usize::MAX - 1, 1 << 20] {
        let w: KeyedWindows<u64, ManualClock> = KeyedWindows::builder(Duration::from_secs(1), 10)
            .clock(ManualClock::new())
            .max_keys(max)
            .build()
            .unwrap();
        for k in 0..100u64 {
            assert!(w.add_at(&k, stripecount::Timestamp::ZERO, 1));
        }
        assert!(
            w.memory_bytes() < 1 << 20,
            "{max}: {} bytes",
            w.memory_bytes()
        );
    }
}
