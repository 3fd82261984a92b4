//! Clocks: manual time is shared by clones; monotonic and coarse clocks
//! never go backwards and share one timeline.

use std::time::{Duration, Instant};
use stripecount::{Clock, CoarseClock, ManualClock, MonotonicClock};

static_assertions::assert_impl_all!(MonotonicClock: Default, Clone, std::fmt::Debug, Clock);
static_assertions::assert_impl_all!(CoarseClock: Default, Clone, std::fmt::Debug, Clock);
static_assertions::assert_impl_all!(ManualClock: Default, Clone, std::fmt::Debug, Clock);

#[test]
fn manual_clock_is_shared_and_settable() {
    let c = ManualClock::new();
    assert_eq!(c.now(), 0);
    let view = c.clone();
    c.advance(Duration::from_secs(2));
    assert_eq!(view.now(), 2_000_000_000);
    view.set(5);
    assert_eq!(c.now(), 5);
    c.set(u64::MAX - 1);
    c.advance(Duration::from_secs(1));
    assert_eq!(c.now(), u64::MAX, "advance saturates");
    assert_eq!(ManualClock::starting_at(42).now(), 42);
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

#[test]
fn coarse_clock_trails_monotonic_and_advances() {
    let coarse = CoarseClock::new();
    let mono = MonotonicClock;
    let mut last = coarse.now();
    // Coarse time is a copy of an earlier monotonic reading: never ahead.
    for _ in 0..10_000 {
        let c = coarse.now();
        assert!(c >= last, "coarse went backwards");
        assert!(c <= mono.now(), "coarse ahead of monotonic");
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
    let c = std::sync::Arc::new(ManualClock::starting_at(9));
    assert_eq!(Clock::now(&c), 9);
    let b: Box<dyn Clock> = Box::new(ManualClock::starting_at(3));
    assert_eq!(b.now(), 3);
}
