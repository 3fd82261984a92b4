//! Every call the per-key structures make into the caller's code, made to
//! panic: a key whose `Hash`, `Eq`, `Clone` or `Drop` panics on its N-th
//! call, for every N a scripted workload reaches, on [`KeyedWindows`],
//! [`HotKeyDetector`] and [`KeyedLimiter`].
//!
//! Where the caller's code runs (`src/unwind.rs` says what each place
//! guarantees):
//! - `Hash`: at the start of every keyed call, outside every lock; in a
//!   move to a bigger table (under the shard lock: a panic aborts); when a
//!   take gives back what its callback did not get (a panic aborts).
//! - `Eq`: in lock-free lookups; in an insert's probe under the shard lock,
//!   before anything is written; in the detector's home check of a new
//!   entry, before anything is written; in the detector's marking of a new
//!   home and a late add's clearing of newer bounds, after the add landed
//!   (a panic aborts); in reads (`top_at`, `hot_keys_at`) outside every lock.
//! - `Clone`: making a new key, before anything is written; in a move (a
//!   panic aborts); the keys `top_at` and `hot_keys_at` return.
//! - `Drop`: a freed table's keys, at the start of an insert, before it
//!   does anything; a structure's drop (every key is dropped, then the
//!   first panic goes on).
//! - Callbacks: `take` and `take_all` call theirs under no lock; a panic
//!   there gives back the counts not delivered (`keyed_callbacks.rs`).
//!
//! After every step: the bounds hold (`len`). After each run: every count
//! that was added is accounted for (delivered by a take, or still held),
//! never lost and never doubled (an add that panicked may or may not have
//! counted, and nothing else); the structure still counts exactly; and
//! once it is dropped no key is left alive.

mod faulty;

use faulty::{
    paused, quiet_expected_panics, sweep, ts, Faulty, Fixed, Run, Site, CALLS, FAULT, KEYS, LIVE,
    SITES, SLICE,
};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, KeyedLimiter, KeyedWindows, Quota};

type Windows = KeyedWindows<Faulty, ManualClock, Fixed>;

fn windows_scenario(fault: Option<(Site, u32)>) -> [u32; 4] {
    const MAX_KEYS: usize = 4;
    let w: Windows = KeyedWindows::builder(Duration::from_secs(4), 4)
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .max_keys(MAX_KEYS)
        .build()
        .unwrap();
    let run = Run::new(fault);
    let bound = |w: &Windows| assert!(paused(|| w.len()) <= 4 * MAX_KEYS, "the bound holds");
    // One window: every count stays in the ring.
    for e in 0..4u64 {
        for k in 0..KEYS as usize {
            let n = k as u64 + 1;
            run.add(k, n, || w.add_at(&run.keys[k], ts(e * SLICE), n));
            bound(&w);
        }
        let k = e as usize;
        run.step(|| w.sum_at(&run.keys[k], ts(e * SLICE)));
        run.step(|| drop(w.top_at(ts(e * SLICE), 2)));
        if e == 1 {
            run.step(|| w.take(&run.keys[2], |_, c| run.credit(&run.keys[2], c)));
        }
        if e == 2 {
            run.step(|| w.take_all(|key, _, c| run.credit(key, c)));
        }
        bound(&w);
    }
    // Every count added is taken or held, once.
    paused(|| {
        let held: Vec<u64> = run
            .keys
            .iter()
            .map(|k| w.sum_at(k, ts(3 * SLICE)))
            .collect();
        for (k, h) in held.iter().enumerate() {
            let total = run.taken.borrow()[k] + h;
            assert!(
                run.added(k).contains(&total),
                "key {k}: {total} of {:?}",
                run.added(k)
            );
        }
    });
    // Slices leave the window: retired tables are freed (their keys
    // dropped) at later inserts.
    for e in 10..20u64 {
        let k = (e % KEYS) as usize;
        run.step(|| w.add_at(&run.keys[k], ts(e * SLICE), 1));
        bound(&w);
    }
    run.step(|| w.evict_idle_at(ts(40 * SLICE)));
    // Still exact.
    paused(|| {
        for (k, key) in run.keys.iter().enumerate() {
            let now = (50 + k as u64) * SLICE;
            assert!(w.add_at(key, ts(now), 7));
            assert_eq!(w.sum_at(key, ts(now)), 7, "key {k}");
        }
    });
    // Dropped with the fault armed: every key goes even if one panics.
    run.step(|| drop(w));
    let calls = run.disarm(fault);
    run.finish();
    calls
}

#[test]
fn windows_survive_a_panic_at_every_call_into_the_key() {
    sweep("windows", &SITES, windows_scenario);
}

type Limiter = KeyedLimiter<Faulty, ManualClock, Fixed>;

fn limiter_scenario(fault: Option<(Site, u32)>) -> [u32; 4] {
    const LIMIT: u64 = 3;
    const MAX_KEYS: usize = 4;
    let l: Limiter = KeyedLimiter::builder(Quota::per(LIMIT, Duration::from_secs(4)).slices(4))
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .max_keys(MAX_KEYS)
        .build()
        .unwrap();
    let run = Run::new(fault);
    let bound = |l: &Limiter| assert!(paused(|| l.len()) <= MAX_KEYS, "the bound holds");
    run.step(|| l.set_key_limit(&run.keys[4], 5).unwrap());
    for e in 0..4u64 {
        for k in 0..KEYS as usize {
            run.add(k, 1, || l.try_acquire_at(&run.keys[k], ts(e * SLICE), 1));
            bound(&l);
        }
        let k = e as usize;
        run.step(|| l.peek_at(&run.keys[k], ts(e * SLICE), 1));
        run.step(|| l.available_at(&run.keys[k], ts(e * SLICE)));
    }
    // Never over a limit within one window: 3, or key 4's 5 if its
    // override was set (counting the grants that returned).
    for k in 0..KEYS as usize {
        let limit = if k == 4 { 5 } else { LIMIT };
        let granted = *run.added(k).start();
        assert!(granted <= limit, "key {k}: {granted} granted");
    }
    run.step(|| l.clear_key_limits(&run.keys[4]));
    for e in 10..20u64 {
        let k = (e % KEYS) as usize;
        run.step(|| l.try_acquire_at(&run.keys[k], ts(e * SLICE), 1));
        bound(&l);
    }
    run.step(|| l.evict_idle_at(ts(40 * SLICE)));
    // Still exact, with every place under the bound.
    paused(|| {
        l.clear_key_limits(&run.keys[4]);
        l.evict_idle_at(ts(50 * SLICE));
        assert_eq!(l.len(), 0);
        for (k, key) in run.keys.iter().enumerate().take(MAX_KEYS) {
            let now = 60 * SLICE;
            assert_eq!(l.available_at(key, ts(now)), LIMIT, "key {k}");
            assert!(l.try_acquire_at(key, ts(now), LIMIT));
            assert!(!l.try_acquire_at(key, ts(now), 1));
        }
        assert_eq!(l.len(), MAX_KEYS);
    });
    // Dropped with the fault armed: every key goes even if one panics.
    run.step(|| drop(l));
    let calls = run.disarm(fault);
    run.finish();
    calls
}

#[test]
fn a_limiter_survives_a_panic_at_every_call_into_the_key() {
    sweep("limiter", &SITES, limiter_scenario);
}

type Detector = HotKeyDetector<Faulty, ManualClock, Fixed>;

/// The detector: threshold 6 over 4 slices (a slice at 2 is heavy).
fn detector_scenario(fault: Option<(Site, u32)>) -> [u32; 4] {
    let d: Detector = HotKeyDetector::builder(Duration::from_secs(4), 4, 6)
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .max_keys(8)
        .build()
        .unwrap();
    let run = Run::new(fault);
    let mut reports = [0u32; KEYS as usize];
    for e in 0..4u64 {
        for (k, r) in reports.iter_mut().enumerate() {
            let n = k as u64;
            let hot = run.step(|| d.became_hot_at(&run.keys[k], ts(e * SLICE), n));
            match hot {
                Some(h) => run.counted.borrow_mut()[k] += n * u64::from(h.is_some() || n > 0),
                None => run.unsure.borrow_mut()[k] += n,
            }
            *r += u32::from(matches!(hot, Some(Some(_))));
        }
        let k = e as usize;
        run.step(|| d.is_hot_at(&run.keys[k], ts(e * SLICE)));
        run.step(|| drop(d.hot_keys_at(ts(e * SLICE))));
    }
    // Within one window nothing cools: each key crossed at most once, and
    // exactly once with no fault.
    paused(|| {
        for (k, key) in run.keys.iter().enumerate() {
            let sum = d.windows().sum_at(key, ts(3 * SLICE));
            assert!(
                run.added(k).contains(&sum),
                "key {k}: {sum} of {:?}",
                run.added(k)
            );
            assert!(reports[k] <= 1, "key {k}: {reports:?}");
            if fault.is_none() {
                assert_eq!(reports[k], u32::from(sum >= 6), "key {k}");
            }
        }
    });
    for e in 10..20u64 {
        let k = (e % KEYS) as usize;
        run.step(|| d.add_at(&run.keys[k], ts(e * SLICE), 3));
    }
    run.step(|| d.evict_idle_at(ts(40 * SLICE)));
    // Still exact: each key crosses 6 on its second add of 3.
    paused(|| {
        for (k, key) in run.keys.iter().enumerate() {
            let now = 50 * SLICE;
            assert!(!d.add_at(key, ts(now), 3), "key {k}");
            assert!(d.add_at(key, ts(now), 3), "key {k}");
            assert!(d.is_hot_at(key, ts(now)));
        }
    });
    // Dropped with the fault armed: every key goes even if one panics.
    run.step(|| drop(d));
    let calls = run.disarm(fault);
    run.finish();
    calls
}

/// `Eq` is swept apart (`a_detector_survives_or_aborts_on_a_panicking_eq`):
/// a panic while the detector marks a new home's entries aborts.
#[test]
fn a_detector_survives_a_panic_at_every_hash_clone_and_drop() {
    sweep(
        "detector",
        &[Site::Hash, Site::Clone, Site::Drop],
        detector_scenario,
    );
}

/// The detector's check for a home, made by a key's first add in a slice
/// under the slice's shard lock, runs the key's `Eq`: a panic there leaves
/// no key behind and gives back its place under the bound.
#[test]
fn a_panicking_eq_in_a_new_entrys_home_check_leaks_nothing() {
    quiet_expected_panics();
    const MAX_KEYS: usize = 2;
    let d: Detector = HotKeyDetector::builder(Duration::from_secs(4), 4, 6)
        .clock(ManualClock::new())
        .hasher(Fixed::default())
        .max_keys(MAX_KEYS)
        .build()
        .unwrap();
    let run = Run::new(None);
    // Key 0 is heavy in slice 0 (2 of 6 over 4 slices): it has a home.
    assert!(!d.add_at(&run.keys[0], ts(0), 3));
    assert_eq!(d.heavy_keys(), 1);
    // The keys alive: the run's, and slice 0's and the home's clones.
    let live = LIVE.get();
    for round in 0..3 {
        // Its first add in slice 1 checks for the home: the next `Eq`.
        FAULT.set(Some((Site::Eq, CALLS.get()[Site::Eq as usize])));
        assert!(
            run.step(|| d.add_at(&run.keys[0], ts(SLICE), 1)).is_none(),
            "round {round}"
        );
        assert_eq!(LIVE.get(), live, "round {round}: no key left in the slot");
    }
    // Slice 1 still has both its places (the detector's add says whether
    // the key became hot; 4 of 6 is not).
    assert!(!d.add_at(&run.keys[0], ts(SLICE), 1));
    assert!(!d.add_at(&run.keys[1], ts(SLICE), 1));
    assert!(!d.add_at(&run.keys[2], ts(SLICE), 1));
    assert_eq!(d.windows().untracked_adds(), 1, "the bound holds");
    assert_eq!(d.windows().len(), 1 + MAX_KEYS);
    assert_eq!(d.windows().sum_at(&run.keys[0], ts(SLICE)), 4);
    drop(d);
    run.finish();
}

/// In a child process (`keyed_user_code` run again with this variable set
/// to `n`): the detector scenario with its `n`-th `Eq` panicking.
#[cfg(not(miri))]
const EQ_CHILD: &str = "STRIPECOUNT_USER_CODE_EQ_CHILD";

/// The detector's `Eq` calls, each made to panic in a child process: the
/// child survives with every check passing, or aborts saying the detector
/// was marking a new home's entries or clearing a late add's bounds (the
/// two places a panic cannot be undone). Miri cannot start processes.
#[cfg(not(miri))]
#[test]
fn a_detector_survives_or_aborts_on_a_panicking_eq() {
    use std::process::Command;
    if let Some(n) = std::env::var_os(EQ_CHILD) {
        quiet_expected_panics();
        let n: u32 = n.to_str().unwrap().parse().unwrap();
        detector_scenario(Some((Site::Eq, n)));
        return;
    }
    quiet_expected_panics();
    let calls = detector_scenario(None)[Site::Eq as usize];
    assert!(calls > 20, "{calls} Eq calls");
    let (mut survived, mut aborted) = (0, 0);
    for n in 0..calls {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_detector_survives_or_aborts_on_a_panicking_eq",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(EQ_CHILD, n.to_string())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            survived += 1;
            continue;
        }
        assert!(
            stderr.contains("while the hot-key detector marked its entries: aborting")
                || stderr.contains("while a late add cleared the detector's bounds: aborting"),
            "Eq call {n}: the child failed: {stderr}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(6), "Eq call {n}: SIGABRT");
        }
        aborted += 1;
    }
    assert!(
        survived > 0 && aborted > 0,
        "{survived} survived, {aborted} aborted"
    );
}
