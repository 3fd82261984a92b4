//! A `HotKeySketch` sized for its stream: `memory_for` and
//! `adds_per_second`. A budget below what the rate needs is refused with
//! the memory needed; the memory `memory_for` gives tracks every key of a
//! stream at that rate whose keys sit at the threshold, with a long tail;
//! the same stream in a budget the rule refuses loses hot keys.

use std::collections::BTreeSet;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{ConfigError, HotKeySketch, Timestamp};

#[test]
fn a_budget_too_small_for_the_rate_is_refused_with_the_memory_needed() {
    // 10 s in 10 slices, threshold 500, a million adds a second: a 1 MiB
    // sketch admitted the long tail of a Zipf stream until its slices were
    // full (recall 0.44 at the threshold).
    let (window, slices, threshold, rate) = (Duration::from_secs(10), 10, 500, 1_000_000);
    let needed = HotKeySketch::<u64>::memory_for(window, slices, threshold, rate).unwrap();
    let built = |memory: usize| {
        HotKeySketch::<u64>::builder(window, slices, threshold)
            .memory(memory)
            .adds_per_second(rate)
            .build()
    };
    assert_eq!(
        built(1 << 20).unwrap_err(),
        ConfigError::SketchMemory {
            memory: 1 << 20,
            needed
        }
    );
    assert_eq!(
        built(needed - 1).unwrap_err(),
        ConfigError::SketchMemory {
            memory: needed - 1,
            needed
        }
    );
    let d = built(needed).unwrap();
    // Every key that can reach the threshold has its place in a slice.
    assert!(d.max_keys() >= 10_000_000 / 500, "{}", d.max_keys());
    assert!(d.memory_bytes() <= needed);
    // Without a memory, the rate sizes the sketch.
    let sized = HotKeySketch::<u64>::builder(window, slices, threshold)
        .adds_per_second(rate)
        .build()
        .unwrap();
    assert_eq!(sized.memory_limit(), needed);
    // More slices need no more keys a slice, and a bigger key costs more.
    assert!(
        HotKeySketch::<[u64; 8]>::memory_for(window, slices, threshold, rate).unwrap() > needed
    );
}

#[test]
fn a_rate_no_doorkeeper_holds_and_bad_arguments_are_refused() {
    let w = Duration::from_secs(1);
    // 10M adds in one slice at level 16: more than 64Ki words x 16.
    let e = HotKeySketch::<u64>::memory_for(w, 1, 100, 10_000_000).unwrap_err();
    assert_eq!(
        e,
        ConfigError::SketchRate {
            adds_per_slice: 10_000_000,
            most: 65_536 * 16
        }
    );
    assert!(e.to_string().contains("more slices"), "{e}");
    // The same rate fits in 10 slices with a threshold of 1,000 a slice
    // (level 63), not with 10 a slice (level 5).
    assert!(HotKeySketch::<u64>::memory_for(w, 10, 10_000, 10_000_000).is_ok());
    assert!(matches!(
        HotKeySketch::<u64>::memory_for(w, 10, 100, 10_000_000),
        Err(ConfigError::SketchRate { .. })
    ));
    assert_eq!(
        HotKeySketch::<u64>::memory_for(Duration::ZERO, 10, 100, 1),
        Err(ConfigError::ZeroWindow)
    );
    assert_eq!(
        HotKeySketch::<u64>::memory_for(w, 0, 100, 1),
        Err(ConfigError::ZeroSlices)
    );
    assert!(HotKeySketch::<u64>::memory_for(w, 10, 0, 1).is_err());
    assert!(HotKeySketch::<u64>::memory_for(w, 10, 100, 0).is_err());
    assert!(
        HotKeySketch::<u64>::memory_for(Duration::from_secs(1 << 40), 10, 1, u64::MAX).is_err()
    );
}

const SLICES: usize = 10;
const SLICE_NS: u64 = 100_000_000;
const THRESHOLD: u64 = 1_000;
/// Adds a second: 20,000 a slice of 100 ms.
const RATE: u64 = 200_000;

/// One slice of the stream: 100 keys at 100 adds each (the threshold over
/// a window) and 10,000 keys of one add each, never seen again, mixed.
fn slice_adds(slice: u64) -> Vec<u64> {
    let mut adds = Vec::with_capacity(20_000);
    for i in 0..10_000u64 {
        adds.push(i % 100);
        adds.push(1_000_000 + slice * 10_000 + i);
    }
    adds
}

/// Runs three windows of the stream through `d`; the keys reported hot.
fn run(d: &HotKeySketch<u64, ManualClock>) -> BTreeSet<u64> {
    let mut hot = BTreeSet::new();
    for slice in 0..3 * SLICES as u64 {
        let t = Timestamp::from_nanos(slice * SLICE_NS);
        for k in slice_adds(slice) {
            if d.add_at(&k, t, 1) {
                hot.insert(k);
            }
        }
    }
    hot
}

fn sketch(memory: usize, rate: Option<u64>) -> Result<HotKeySketch<u64, ManualClock>, ConfigError> {
    let b = HotKeySketch::builder(
        Duration::from_nanos(SLICE_NS * SLICES as u64),
        SLICES,
        THRESHOLD,
    )
    .clock(ManualClock::new())
    .memory(memory);
    match rate {
        Some(r) => b.adds_per_second(r).build(),
        None => b.build(),
    }
}

#[test]
fn the_memory_for_the_rate_tracks_every_key_at_the_threshold() {
    let window = Duration::from_nanos(SLICE_NS * SLICES as u64);
    let needed = HotKeySketch::<u64>::memory_for(window, SLICES, THRESHOLD, RATE).unwrap();
    let d = sketch(needed, Some(RATE)).unwrap();
    let hot = run(&d);
    assert_eq!(hot, (0..100).collect::<BTreeSet<u64>>());
    assert_eq!(d.untracked_adds(), 0);
    // The tail was kept back (a key of one add never reaches the level).
    assert!(d.filtered_adds() >= 3 * SLICES as u64 * 10_000);

    // A tenth of it (or the least memory) is refused at this rate; built without the rate, it
    // loses keys at the threshold, and says so only in `untracked_adds`.
    let small = (needed / 10).max(HotKeySketch::<u64>::MIN_MEMORY);
    assert!(small < needed);
    assert!(matches!(
        sketch(small, Some(RATE)),
        Err(ConfigError::SketchMemory { .. })
    ));
    let d = sketch(small, None).unwrap();
    let hot = run(&d);
    assert!(hot.len() < 100, "{} keys reported hot", hot.len());
    assert!(d.untracked_adds() > 0);
}

#[test]
fn slices_past_the_limit_are_refused_before_anything_is_sized() {
    // The slice count multiplies into the sizes: checked first, as the
    // exact detector checks it (a multiply overflow before).
    let huge = 8_446_770_043_974_551_615usize;
    assert_eq!(
        HotKeySketch::<u64>::builder(Duration::ZERO, huge, 1)
            .build()
            .unwrap_err(),
        ConfigError::ZeroWindow
    );
    assert_eq!(
        HotKeySketch::<u64>::builder(Duration::from_secs(1), huge, 1)
            .build()
            .unwrap_err(),
        ConfigError::TooManySlices {
            slices: huge,
            max: stripecount::window::MAX_SLICES
        }
    );
}

#[test]
fn a_sketch_it_builds_holds_no_more_than_its_memory_from_the_start() {
    // Budgets of a few KiB: either refused, or within them when empty and
    // after adds (22-31 KiB held up to 38 KiB after these adds before the
    // least memory was raised to 32 KiB).
    assert_eq!(HotKeySketch::<u64>::MIN_MEMORY, 32 << 10);
    for memory in (1..=96).map(|k| k << 10) {
        for slices in [1, 2, 10, 60, 600] {
            let built = HotKeySketch::<u64>::builder(Duration::from_secs(60), slices, 1_000)
                .memory(memory)
                .clock(ManualClock::new())
                .build();
            let Ok(s) = built else {
                continue;
            };
            assert!(memory >= HotKeySketch::<u64>::MIN_MEMORY);
            assert!(
                s.memory_bytes() <= s.memory_limit(),
                "{memory} B, {slices} slices: {} held of {}",
                s.memory_bytes(),
                s.memory_limit()
            );
            for k in 0..20_000u64 {
                s.add_at(&(k % 3_000), Timestamp::ZERO, 1);
            }
            assert!(
                s.memory_bytes() <= s.memory_limit(),
                "{memory} B, {slices} slices, after adds: {} held of {}",
                s.memory_bytes(),
                s.memory_limit()
            );
        }
    }
    // What the command was given: 6 KiB, one slice of 10 s.
    let s = HotKeySketch::<u64>::builder(Duration::from_secs(10), 1, 1000)
        .memory(6 << 10)
        .build();
    if let Ok(s) = s {
        assert!(s.memory_bytes() <= s.memory_limit());
    }
}

/// Keys that never repeat, each heavy in its slice (a threshold of one
/// add a slice), over four windows: the exact part takes a slice's worth
/// of them in every slice, and every one gets hot state, all of which must
/// fit in the memory. Found by fuzzing `hotkeys` (`--window 10ms --slices
/// 10 --threshold 2 --memory 54KiB` on real time held up to 58,536 bytes:
/// hot state in a map of 128 shards, each key's in a table of its own); at
/// 32-128 KiB the first slice's map of 128 shards went over the same way.
#[test]
fn heavy_keys_that_never_repeat_stay_within_the_memory() {
    for slices in [1usize, 2, 3, 10, 30, 60] {
        for memory in (32..=256).step_by(8).map(|k| k << 10).chain([1 << 20]) {
            let window = Duration::from_millis(slices as u64);
            let built = HotKeySketch::<u64>::builder(window, slices, slices as u64)
                .memory(memory)
                .clock(ManualClock::new())
                .build();
            let Ok(s) = built else {
                continue;
            };
            let mut k = 0u64;
            for slice in 0..4 * slices as u64 + 4 {
                let t = Timestamp::from_nanos(slice * 1_000_000);
                for _ in 0..2 * s.max_keys() {
                    s.add_at(&k, t, 1);
                    k += 1;
                }
                assert!(
                    s.memory_bytes() <= s.memory_limit(),
                    "{memory} B, {slices} slices, slice {slice}: {} held of {}",
                    s.memory_bytes(),
                    s.memory_limit()
                );
            }
            // Each slice took its `max_keys` keys and left the rest
            // untracked; the hot state of `max_keys` keys was taken once
            // more keys than that had turned heavy within two windows.
            let per_slice = s.max_keys() as u64;
            assert!(
                s.untracked_adds() >= (4 * slices as u64 + 4) * per_slice,
                "{memory} B"
            );
            assert!(s.unjudged_adds() > 0, "{memory} B");
        }
    }
}
