//! Clocks: manual time is shared by clones; monotonic and coarse clocks
//! never go backwards, share one timeline, and keep `Instant`'s rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount::clock::{CoarseClock, ManualClock, MonotonicClock};
use stripecount::{Clock, Timestamp};

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

static_assertions::assert_impl_all!(MonotonicClock: Default, Clone, std::fmt::Debug, Clock);
static_assertions::assert_impl_all!(CoarseClock: Default, Clone, std::fmt::Debug, Clock);
static_assertions::assert_impl_all!(ManualClock: Default, Clone, std::fmt::Debug, Clock);

#[test]
fn manual_clock_is_shared_and_settable() {
    let c = ManualClock::new();
    assert_eq!(c.now(), t(0));
    let view = c.clone();
    c.advance(Duration::from_secs(2));
    assert_eq!(view.now(), t(2_000_000_000));
    view.set(t(5));
    assert_eq!(c.now(), t(5));
    c.set(t(u64::MAX - 1));
    c.advance(Duration::from_secs(1));
    assert_eq!(c.now(), t(u64::MAX), "advance saturates");
    assert_eq!(ManualClock::starting_at(t(42)).now(), t(42));
}

#[test]
fn monotonic_clock_never_goes_backwards() {
    let c = MonotonicClock::new();
    let mut last = c.now();
    for _ in 0..100_000 {
        let t = c.now();
        assert!(t >= last);
        last = t;
    }
}

/// Eight threads read in a loop: each thread's times never decrease, and
/// a read never returns less than `MAX_LAG` below a time another thread
/// returned before it (published through `latest`: a read that saw it
/// happens-after the read that produced it).
#[test]
fn monotonic_clock_is_monotonic_under_many_threads() {
    let clock = MonotonicClock::new();
    let lag = nanos(MonotonicClock::MAX_LAG);
    let latest = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let latest = latest.clone();
            std::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..100_000 {
                    let before = latest.load(Ordering::Acquire);
                    let t = clock.now().as_nanos();
                    assert!(t >= last, "went back on one thread: {t} < {last}");
                    assert!(t + lag > before, "{t} lags {before} by more than {lag}");
                    latest.fetch_max(t, Ordering::AcqRel);
                    last = t;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Reads `Instant::now()` between two reads of `clock`, until the bracket
/// is narrower than 100 µs (at most 1,000 tries: a preemption inside one
/// only costs a retry). Returns `(instant, before, after)`.
fn bracket(clock: &MonotonicClock) -> (Instant, u64, u64) {
    let mut widest = (Instant::now(), 0, u64::MAX);
    for _ in 0..1_000 {
        let before = clock.now().as_nanos();
        let i = Instant::now();
        let after = clock.now().as_nanos();
        if after - before < 100_000 {
            return (i, before, after);
        }
        widest = (i, before, after);
    }
    widest
}

/// Over a real interval of at least 50 ms (a bounded busy loop, not a
/// sleep), the clock advances as `Instant` does, to within 0.1% and the
/// brackets' widths: whatever its source, TSC or `Instant`.
#[test]
fn monotonic_clock_keeps_instants_rate() {
    let clock = MonotonicClock::new();
    let (i0, a0, b0) = bracket(&clock);
    while i0.elapsed() < Duration::from_millis(50) {
        std::hint::spin_loop();
    }
    let (i1, a1, b1) = bracket(&clock);
    let theirs = nanos(i1 - i0);
    // Our elapsed time lies in [a1 - b0, b1 - a0].
    let slack = theirs / 1000;
    assert!(
        a1 - b0 <= theirs + slack && theirs <= b1 - a0 + slack,
        "Instant: {theirs} ns; ours between {} and {} ns (uses TSC: {})",
        a1 - b0,
        b1 - a0,
        clock.uses_tsc()
    );
}

/// The `tsc` feature (a default one) is what lets the clock read the TSC:
/// without it, the clock reads `Instant` (`scripts/test.sh` runs this file
/// with `--no-default-features` too, so every test above also runs on the
/// fallback).
#[test]
fn the_tsc_is_read_only_with_the_feature() {
    let reads_tsc = MonotonicClock::new().uses_tsc();
    if !cfg!(feature = "tsc") {
        assert!(!reads_tsc);
    }
    // Where the kernel's clocksource is the TSC, the feature uses it.
    #[cfg(all(feature = "tsc", target_os = "linux", target_arch = "x86_64"))]
    {
        let source = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
        if std::fs::read_to_string(source).is_ok_and(|s| s.trim() == "tsc") {
            assert!(reads_tsc);
        }
    }
}

#[test]
fn coarse_clock_trails_monotonic_and_advances() {
    let coarse = CoarseClock::new();
    let mono = MonotonicClock::new();
    let lag = nanos(MonotonicClock::MAX_LAG);
    let mut last = coarse.now();
    // Coarse time is a copy of an earlier monotonic reading (on the ticker
    // thread): never ahead of a later read by more than the clock's
    // cross-thread lag.
    for _ in 0..10_000 {
        let c = coarse.now();
        assert!(c >= last, "coarse went backwards");
        assert!(
            c.as_nanos() <= mono.now().as_nanos() + lag,
            "coarse ahead of monotonic"
        );
        last = c;
    }
    // Liveness: the ticker moves it forward (bounded wait, not a race fix).
    let t0 = coarse.now();
    let deadline = Instant::now() + Duration::from_secs(10);
    while coarse.now() == t0 {
        assert!(Instant::now() < deadline, "coarse clock never advanced");
        std::thread::yield_now();
    }
}

#[test]
fn clocks_through_pointers() {
    let c = std::sync::Arc::new(ManualClock::starting_at(t(9)));
    assert_eq!(Clock::now(&c), t(9));
    let b: Box<dyn Clock> = Box::new(ManualClock::starting_at(t(3)));
    assert_eq!(b.now(), t(3));
}
