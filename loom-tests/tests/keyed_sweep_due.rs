#![cfg(loom)]
//! Loom model of the per-key limiter's sweep pre-filter
//! (`src/limiter/keyed/acquire.rs`, `sweep_step`): a request calls the map's
//! `maybe_sweep` only when its time is past `sweep_due`, and after the call
//! raises `sweep_due` to the start of the epoch after the one the map *has
//! swept through* (read back from the map), not after its own epoch.
//!
//! Why it matters: `maybe_sweep(e)` moves the map's swept epoch by one CAS
//! from the value it read, and does nothing when that CAS fails. A request
//! in epoch 2 whose CAS loses to one in epoch 1 has not swept epoch 2; if
//! it raised `sweep_due` past epoch 2 anyway, every later request in epoch
//! 2 would skip the sweep, and epoch 2 would never be swept until time moved
//! on. The naive design below does exactly that and loom must catch it.
//!
//! Mutation of the real code caught: `due` computed from the request's own
//! epoch instead of `swept_through()`.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota};
use stripecount_loom_tests::{expect_failure, model, t, Fixed};

type Keyed = KeyedLimiter<u32, ManualClock, Fixed>;

/// Two requests race in epochs 2 and 1 (1 ns slices), then one more in
/// epoch 2 after both: the map must have swept through epoch 2.
#[test]
fn a_lost_sweep_is_not_skipped_by_the_pre_filter() {
    model(|| {
        let lim: Arc<Keyed> = Arc::new(
            KeyedLimiter::builder(Quota::per(100, Duration::from_nanos(2)).slices(2))
                .clock(ManualClock::new())
                .hasher(Fixed::default())
                .build()
                .unwrap(),
        );
        let (a, b) = (lim.clone(), lim.clone());
        let ta = thread::spawn(move || a.try_acquire_at(&1, t(2), 1));
        let tb = thread::spawn(move || b.try_acquire_at(&2, t(1), 1));
        assert!(ta.join().unwrap() && tb.join().unwrap());
        assert!(lim.try_acquire_at(&3, t(2), 1));
        assert!(lim.__swept_through() >= 2, "epoch 2 was never swept");
    });
}

/// The pre-filter and the map's swept epoch, reduced to their words:
/// `maybe_sweep` as the map's, and `sweep_due` raised from the request's own
/// epoch (`naive`) or from the swept epoch read back (the real design).
fn pre_filter(naive: bool) {
    let swept = Arc::new(AtomicU64::new(0));
    let due = Arc::new(AtomicU64::new(0));
    let request = {
        let (swept, due) = (swept.clone(), due.clone());
        move |e: u64| {
            if e < due.load(Ordering::Relaxed) {
                return; // the pre-filter: nothing to sweep
            }
            let last = swept.load(Ordering::Relaxed);
            if e > last {
                let _ = swept.compare_exchange(last, e, Ordering::AcqRel, Ordering::Relaxed);
            }
            let next = if naive {
                e
            } else {
                swept.load(Ordering::Relaxed)
            } + 1;
            due.fetch_max(next, Ordering::Relaxed);
        }
    };
    let (a, b) = (request.clone(), request.clone());
    let ta = thread::spawn(move || a(2));
    let tb = thread::spawn(move || b(1));
    ta.join().unwrap();
    tb.join().unwrap();
    request(2);
    assert!(
        swept.load(Ordering::Relaxed) >= 2,
        "epoch 2 was never swept"
    );
}

#[test]
fn the_pre_filter_from_the_swept_epoch_holds() {
    model(|| pre_filter(false));
}

#[test]
fn loom_catches_the_pre_filter_raised_from_its_own_epoch() {
    expect_failure("sweep_due from the request's own epoch", || {
        pre_filter(true)
    });
}
