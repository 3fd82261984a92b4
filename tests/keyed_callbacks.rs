//! Callbacks the per-key windows call (`take`, `take_all`): they run
//! under no lock, so they may call back into the structure (read, add, take
//! again), and a panicking one gets the panic passed on with every count it
//! was not given added back. Every count is delivered once or still held.

use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedWindows, Timestamp};

const SLICE: u64 = 1_000_000_000;

/// The time `ns` nanoseconds after the origin.
const fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Windows of 4 s in 4 slices of [`SLICE`], on a manual clock.
fn windows() -> KeyedWindows<u64, ManualClock> {
    KeyedWindows::builder(Duration::from_secs(4), 4)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// A callback given to `take_all` or `take` runs under no lock: it may
/// read, add (to new keys too) and take again; every count is delivered
/// once or still held.
#[test]
fn take_callbacks_may_call_back_into_the_windows() {
    let w = windows();
    const N: u64 = if cfg!(miri) { 40 } else { 400 };
    for k in 0..N {
        assert!(w.add_at(&k, ts(0), k + 1));
    }
    let mut added: u64 = (1..=N).sum();
    let mut delivered = 0;
    let mut inner = 0;
    w.take_all(|&k, start, c| {
        // Keys added by this callback may be met later, with 1 (all in
        // the slice starting at 0).
        assert_eq!((start, c), (ts(0), if k < N { k + 1 } else { 1 }));
        if k >= N {
            delivered += c;
            return;
        }
        delivered += c;
        assert!(!w.is_empty());
        assert_eq!(w.sum_at(&k, ts(0)), 0, "taken before the callback");
        // A new key, and more on a key already taken.
        assert!(w.add_at(&(N + k), ts(0), 1));
        assert!(w.add_at(&k, ts(0), 1));
        added += 2;
        if k % 50 == 0 {
            w.take(&(N + k), |_, c| inner += c);
        }
    });
    w.take_all(|_, _, c| delivered += c);
    assert_eq!(delivered + inner, added);
    assert_eq!(w.sum_at(&0, ts(0)), 0);
}

/// A callback that panics: the panic goes on, and the counts it did not
/// get are added back.
#[test]
fn a_panicking_take_callback_gives_back_what_it_did_not_get() {
    let w = windows();
    const N: u64 = if cfg!(miri) { 30 } else { 300 };
    for e in 0..2 {
        for k in 0..N {
            assert!(w.add_at(&k, ts(e * SLICE), k + 1));
        }
    }
    let total = 2 * (1..=N).sum::<u64>();
    for fail_at in [0, 1, 7, N / 2] {
        let mut delivered = 0;
        let mut calls = 0;
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            w.take_all(|_, _, c| {
                if calls == fail_at {
                    panic!("the callback failed");
                }
                calls += 1;
                delivered += c;
            })
        }));
        assert!(r.is_err());
        let held: u64 = (0..N).map(|k| w.sum_at(&k, ts(SLICE))).sum();
        assert_eq!(delivered + held, total, "failing at call {fail_at}");
        // Put the delivered counts back for the next round.
        let mut left = delivered;
        for k in 0..N {
            let n = left.min(1_000);
            if n > 0 {
                assert!(w.add_at(&k, ts(SLICE), n));
                left -= n;
            }
        }
    }
    // One key's take: the failing slice's count goes back.
    let before = w.sum_at(&3, ts(SLICE));
    let r = panic::catch_unwind(AssertUnwindSafe(|| w.take(&3, |_, _| panic!("no"))));
    assert!(r.is_err());
    assert_eq!(w.sum_at(&3, ts(SLICE)), before);
}
