//! `MultiWindow`, one thread: configuration errors, the exact `sum_over_at`
//! semantics against the reference model of `multi_model` (random levels,
//! random add sequences, many spans at every level), agreement with one
//! `SlidingWindow` per level, late adds and saturation. Threads are in
//! `multi_threads.rs`.

mod multi_model;

use multi_model::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::window::{MAX_COUNT_PER_SLICE, MAX_LEVELS, MAX_SLICES};
use stripecount::{ConfigError, MultiWindow, SlidingWindow};

#[test]
fn random_sequences_match_the_reference_at_every_level() {
    let mut rng = StdRng::seed_from_u64(0x00C0_FFEE);
    let mut checks = 0u64;
    for case in 0..300 {
        let levels = random_levels(&mut rng);
        let w = MultiWindow::new(&levels).unwrap_or_else(|e| panic!("{levels:?}: {e}"));
        let windows: Vec<SlidingWindow> = levels
            .iter()
            .map(|&(d, s)| SlidingWindow::new(d, s).unwrap())
            .collect();
        let l0 = levels[0].0.as_nanos() as u64 / levels[0].1 as u64;
        let largest = levels.last().unwrap().0.as_nanos() as u64;
        let mut t = rng.random_range(0..1000u64);
        let mut adds = Vec::new();
        for _ in 0..200 {
            t += match rng.random_range(0..20) {
                0 => rng.random_range(0..=largest * 2),
                1 => rng.random_range(0..=largest / 2 + 1),
                _ => rng.random_range(0..=l0 * 2),
            };
            let n = rng.random_range(1..=5u64);
            w.add_at(ts(t), n);
            for sw in &windows {
                assert!(sw.add_at(ts(t), n));
            }
            adds.push((t, n));
            if rng.random_range(0..4) == 0 {
                let now = t + rng.random_range(0..=l0 * 3);
                for span in spans(&levels, &mut rng) {
                    let got = w.sum_over_at(ts(now), span);
                    let want = reference(&levels, &adds, now, span);
                    assert_eq!(
                        got, want,
                        "case {case} levels {levels:?} now {now} span {span:?}"
                    );
                    checks += 1;
                }
                // A level's own window is exactly that level's window sum.
                for (&(d, _), sw) in levels.iter().zip(&windows) {
                    assert_eq!(
                        w.sum_over_at(ts(now), d),
                        sw.sum_at(ts(now)),
                        "case {case} {d:?}"
                    );
                }
            }
        }
    }
    assert!(checks > 100_000, "only {checks} checks");
}

#[test]
fn span_selects_the_finest_sufficient_level() {
    // Level 0: 10 ns in 10 slices of 1 ns; level 1: 100 ns in 10 of 10 ns;
    // level 2: 1000 ns in 5 of 200 ns.
    let levels = [(ns(10), 10), (ns(100), 10), (ns(1000), 5)];
    let w = MultiWindow::new(&levels).unwrap();
    assert_eq!(w.levels(), 3);
    assert_eq!(w.level(1), Some((ns(100), 10)));
    assert_eq!(w.level(3), None);
    for t in 0..1000 {
        w.add_at(ts(t), 1); // one add per nanosecond
    }
    let now = 999;
    // Level 0, k = span: the last `span` nanoseconds exactly.
    for span in 1..=10 {
        assert_eq!(w.sum_over_at(ts(now), ns(span)), span);
    }
    // Level 1: k = ceil(span / 10) slices of 10 ns, now's slice (990..=999)
    // complete here because now is its last nanosecond.
    assert_eq!(w.sum_over_at(ts(now), ns(11)), 20);
    assert_eq!(w.sum_over_at(ts(now), ns(20)), 20);
    assert_eq!(w.sum_over_at(ts(now), ns(21)), 30);
    assert_eq!(w.sum_over_at(ts(now), ns(100)), 100);
    // Level 2: slices of 200 ns; epochs 0..=4, now in epoch 4 (800..=999).
    assert_eq!(w.sum_over_at(ts(now), ns(101)), 200);
    assert_eq!(w.sum_over_at(ts(now), ns(201)), 400);
    assert_eq!(w.sum_over_at(ts(now), ns(1000)), 1000);
    // Clamped to the largest window; zero is zero.
    assert_eq!(w.sum_over_at(ts(now), ns(5000)), 1000);
    assert_eq!(w.sum_over_at(ts(now), Duration::MAX), 1000);
    assert_eq!(w.sum_over_at(ts(now), Duration::ZERO), 0);
    // Early in now's slice the answer covers less time (the resolution):
    // at t = 1000 level 1's current slice has one nanosecond in it.
    w.add_at(ts(1000), 1);
    assert_eq!(w.sum_over_at(ts(1000), ns(100)), 91);
    assert_eq!(w.sum_over_at(ts(1000), ns(10)), 10);
}

#[test]
fn minutes_and_a_day_from_two_slice_lengths() {
    // 5, 10, 30 and 60 minutes by the minute (one shared ring) and 24
    // hours by the hour.
    const MIN: u64 = 60_000_000_000;
    let m = |n: u64| Duration::from_nanos(n * MIN);
    let levels = [
        (m(5), 5),
        (m(10), 10),
        (m(30), 30),
        (m(60), 60),
        (m(1440), 24),
    ];
    let w = MultiWindow::new(&levels).unwrap();
    // One add at the start of every minute for 3 hours: n = minute + 1.
    let mut adds = Vec::new();
    for minute in 0..180 {
        w.add_at(ts(minute * MIN), minute + 1);
        adds.push((minute * MIN, minute + 1));
    }
    let now = 180 * MIN - 1; // the last nanosecond of minute 179
    let minutes = |from: u64| (from..180).map(|x| x + 1).sum::<u64>();
    assert_eq!(w.sum_over_at(ts(now), m(5)), minutes(175));
    assert_eq!(w.sum_over_at(ts(now), m(10)), minutes(170));
    assert_eq!(w.sum_over_at(ts(now), m(30)), minutes(150));
    assert_eq!(w.sum_over_at(ts(now), m(60)), minutes(120));
    // 2 hours at the hour level: hours 1 and 2 (minutes 60..=179).
    assert_eq!(w.sum_over_at(ts(now), m(120)), minutes(60));
    assert_eq!(w.sum_over_at(ts(now), m(1440)), minutes(0));
    for &(span, _) in &levels {
        assert_eq!(
            w.sum_over_at(ts(now), span),
            reference(&levels, &adds, now, span)
        );
    }
}

#[test]
fn clock_api_reads_one_time_for_every_level() {
    let clock = ManualClock::new();
    let w = MultiWindow::builder(&[(ns(10), 10), (ns(60), 6)])
        .clock(clock.clone())
        .build()
        .unwrap();
    w.add(4);
    clock.set(ts(15));
    w.add(1);
    assert_eq!(w.sum_over(ns(10)), 1);
    assert_eq!(w.sum_over(ns(60)), 5);
    clock.set(ts(59));
    assert_eq!(w.sum_over(ns(60)), 5);
    clock.set(ts(60));
    assert_eq!(w.sum_over(ns(60)), 1);
    clock.set(ts(70));
    assert_eq!(w.sum_over(ns(60)), 0);
    w.add(0); // a no-op
    assert_eq!(w.sum_over(ns(60)), 0);
    let dbg = format!("{w:?}");
    assert!(dbg.starts_with("MultiWindow"), "{dbg}");
    assert!(dbg.contains("10ns"), "{dbg}");
}

#[test]
fn late_adds_count_where_their_slice_is_still_held() {
    // Level 0: 10 slices of 1 ns (ring of 16); level 1: 10 of 10 ns.
    let w = MultiWindow::new(&[(ns(10), 10), (ns(100), 10)]).unwrap();
    w.add_at(ts(1000), 1);
    w.add_at(ts(995), 2); // 5 ns late: its own slice at both levels
    assert_eq!(w.sum_over_at(ts(1000), ns(10)), 3);
    assert_eq!(w.sum_over_at(ts(1000), ns(100)), 3);
    // 16 ns late: level 0's slot holds epoch 1000, so it is dropped there
    // (it is outside every level-0 window at 1000); level 1 still holds
    // epoch 98 and counts it.
    w.add_at(ts(984), 7);
    assert_eq!(w.sum_over_at(ts(1000), ns(10)), 3);
    assert_eq!(w.sum_over_at(ts(1000), ns(100)), 10);
    // 100 ns late: counted in epoch 90 at level 1, outside (90, 100].
    w.add_at(ts(900), 4);
    assert_eq!(w.sum_over_at(ts(1000), ns(100)), 10);
}

#[test]
fn a_jump_by_the_tag_space_does_not_revive_old_counts() {
    // Rings of 2 slots (slices of 1 ns and 4 ns); 2^16 * 2 epochs later a
    // slot's 16-bit tag repeats: at level 0 for the first jump, at both
    // levels for the second.
    for far in [(1u64 << 16) * 2, (1 << 16) * 2 * 4] {
        let w = MultiWindow::new(&[(ns(2), 2), (ns(8), 2)]).unwrap();
        w.add_at(ts(0), 5);
        w.add_at(ts(far), 1);
        assert_eq!(w.sum_over_at(ts(far), ns(2)), 1, "{far}");
        assert_eq!(w.sum_over_at(ts(far), ns(8)), 1, "{far}");
    }
}

#[test]
fn counts_saturate_instead_of_wrapping() {
    let w = MultiWindow::new(&[(ns(10), 10), (ns(100), 10)]).unwrap();
    w.add_at(ts(5), u64::MAX);
    w.add_at(ts(5), u64::MAX);
    w.add_at(ts(5), 3);
    assert_eq!(w.sum_over_at(ts(5), ns(10)), MAX_COUNT_PER_SLICE);
    assert_eq!(w.sum_over_at(ts(5), ns(100)), MAX_COUNT_PER_SLICE);
}

#[test]
fn saturated_counts_fold_without_wrapping() {
    // Level 0: 2 slices of 1 ns (ring of 2); level 1: 4 slices of 4 ns.
    let w = MultiWindow::new(&[(ns(2), 2), (ns(16), 4)]).unwrap();
    w.add_at(ts(0), MAX_COUNT_PER_SLICE); // saturates ring 0's epoch 0
    w.add_at(ts(1), 7);
    w.add_at(ts(2), u64::MAX); // rolls epoch 0 out: folds MAX into ring 1
    w.add_at(ts(3), 1); // folds the 7
    w.add_at(ts(4), 1); // folds the second saturated count: ring 1 saturates
    assert_eq!(w.sum_over_at(ts(4), ns(2)), 2); // epochs 3 and 4

    // Level 1's epoch 0 (t 0-3) is one saturated ring-1 cell plus the 1
    // still in ring 0's epoch 3; epoch 1 holds the add at 4.
    assert_eq!(w.sum_over_at(ts(4), ns(16)), MAX_COUNT_PER_SLICE + 1 + 1);
    assert_eq!(w.sum_over_at(ts(u64::MAX), ns(16)), 0);
}

#[test]
fn times_at_the_end_of_u64_fold_and_read_exactly() {
    let levels = [(ns(2), 2), (ns(16), 4), (ns(96), 2)];
    let w = MultiWindow::new(&levels).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut adds = Vec::new();
    for i in 0..200u64 {
        let t = u64::MAX - 199 + i;
        w.add_at(ts(t), i + 1);
        adds.push((t, i + 1));
        for now in [t, u64::MAX] {
            for span in spans(&levels, &mut rng) {
                assert_eq!(
                    w.sum_over_at(ts(now), span),
                    reference(&levels, &adds, now, span),
                    "now {now} span {span:?}"
                );
            }
        }
    }
}
#[test]
fn config_errors() {
    use ConfigError::*;
    let s = Duration::from_secs;
    let err = |levels: &[(Duration, usize)]| MultiWindow::new(levels).unwrap_err();
    assert_eq!(err(&[]), NoLevels);
    // Each level must be a valid window.
    assert_eq!(err(&[(Duration::ZERO, 1)]), ZeroWindow);
    assert_eq!(err(&[(s(1), 10), (s(2), 0)]), ZeroSlices);
    assert_eq!(
        err(&[(s(1), 10), (s(100), MAX_SLICES + 1)]),
        TooManySlices {
            slices: MAX_SLICES + 1,
            max: MAX_SLICES
        }
    );
    assert_eq!(
        err(&[(ns(10), 3)]),
        UnevenSlices {
            window: ns(10),
            slices: 3
        }
    );
    assert_eq!(
        err(&[(Duration::MAX, 1)]),
        WindowTooLong {
            window: Duration::MAX
        }
    );
    // Windows strictly increase.
    assert_eq!(
        err(&[(s(10), 10), (s(10), 5)]),
        LevelsNotIncreasing { level: 1 }
    );
    assert_eq!(
        err(&[(s(1), 1), (s(10), 10), (s(5), 5)]),
        LevelsNotIncreasing { level: 2 }
    );
    // Slice lengths are whole multiples: 1 s then 1.5 s; 2 s then 3 s.
    assert_eq!(
        err(&[(s(10), 10), (s(15), 10)]),
        LevelSliceMismatch { level: 1 }
    );
    assert_eq!(
        err(&[(s(1), 1), (s(10), 5), (s(30), 10)]),
        LevelSliceMismatch { level: 2 }
    );
    // Finer slices at a coarser level are not a whole multiple either.
    assert_eq!(
        err(&[(s(10), 1), (s(20), 20)]),
        LevelSliceMismatch { level: 1 }
    );
    // Too many levels.
    let many: Vec<(Duration, usize)> = (1..=MAX_LEVELS as u64 + 1)
        .map(|i| (s(i), i as usize))
        .collect();
    assert!(matches!(err(&many), Invalid(_)));
    assert_eq!(
        MultiWindow::new(&many[..MAX_LEVELS]).unwrap().levels(),
        MAX_LEVELS
    );
    // Same slice length at two levels (ratio 1) is fine.
    assert!(MultiWindow::new(&[(s(10), 10), (s(60), 60)]).is_ok());
    // Error messages name the level.
    assert!(LevelSliceMismatch { level: 2 }
        .to_string()
        .contains("level 2"));
}

#[test]
fn is_send_sync_debug() {
    fn check<T: Send + Sync + std::fmt::Debug>() {}
    check::<MultiWindow>();
    check::<MultiWindow<ManualClock>>();
}
