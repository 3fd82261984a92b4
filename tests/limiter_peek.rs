//! What a peek reports, against the decide it stands for: the same
//! verdict and retry time; the window as it is (the request not counted)
//! for `remaining` and `reset_after`. And a new key of a `KeyedLimiter`
//! judged at the eviction floor, later than its stamp.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, Quota, RateLimiter, Timestamp};

const SLICE: u64 = 1_000_000_000;

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Random requests on random quotas: each decide is preceded by a peek of
/// the same request at the same time, on a direct and on a per-key limiter.
#[test]
fn a_peek_reports_the_window_as_it_is() {
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let slices = rng.random_range(1..6usize);
        let limit = rng.random_range(1..20u64);
        let q = Quota::per(limit, Duration::from_nanos(SLICE * slices as u64)).slices(slices);
        let q = if rng.random_bool(0.5) { q.strict() } else { q };
        let direct = RateLimiter::builder(q)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let keyed: KeyedLimiter<u8, ManualClock> = KeyedLimiter::builder(q)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let mut now = 0;
        for _ in 0..50 {
            now += rng.random_range(0..SLICE);
            let n = rng.random_range(0..limit + 2);
            let peeks = [direct.peek_at(ts(now), n), keyed.peek_at(&1, ts(now), n)];
            let decides = [
                direct.decide_at(ts(now), n),
                keyed.decide_at(&1, ts(now), n),
            ];
            for (p, d) in peeks.iter().zip(&decides) {
                let ctx = format!("seed {seed}, n {n}: {p:?} / {d:?}");
                assert_eq!(p.is_granted(), d.is_granted(), "{ctx}");
                assert_eq!(p.retry_after(), d.retry_after(), "{ctx}");
                if d.is_granted() {
                    // Before the request, and the window as it was.
                    assert_eq!(p.remaining(), d.remaining() + n, "{ctx}");
                    assert!(p.reset_after() <= d.reset_after(), "{ctx}");
                    if n > 0 {
                        assert!(d.reset_after() > Duration::ZERO, "{ctx}");
                    }
                } else {
                    assert_eq!(p.remaining(), d.remaining(), "{ctx}");
                    assert_eq!(p.reset_after(), d.reset_after(), "{ctx}");
                }
            }
        }
    }
}

/// An empty window: a peek's reset is zero, the grant's is the window
/// (the request's slice leaving it).
#[test]
fn a_peek_of_an_empty_window_resets_now() {
    let q = Quota::per(5, Duration::from_secs(2)).slices(2);
    let lim = RateLimiter::builder(q)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let p = lim.peek_at(ts(0), 2);
    assert!(p.is_granted());
    assert_eq!((p.remaining(), p.reset_after()), (5, Duration::ZERO));
    let d = lim.decide_at(ts(0), 2);
    assert_eq!(
        (d.remaining(), d.reset_after()),
        (3, Duration::from_secs(2))
    );
}

/// A key evicted at 10 s raises the floor to that slice: a new key's
/// request stamped at 5 s is counted in the slice of 10 s (never earlier
/// than a window that may have held the evicted key's grants).
#[test]
fn a_new_key_is_judged_at_the_eviction_floor() {
    let q = Quota::per(2, Duration::from_secs(2)).slices(2);
    let lim: KeyedLimiter<&str> = KeyedLimiter::new(q).unwrap();
    assert!(lim.try_acquire_at(&"old", ts(0), 2));
    assert_eq!(lim.evict_idle_at(ts(10 * SLICE)), 1);
    let d = lim.decide_at(&"new", ts(5 * SLICE), 1);
    assert!(d.is_granted());
    assert_eq!(d.__slice(), Some(10), "counted in the floor's slice");
    assert_eq!(d.reset_after(), Duration::from_secs(7));
    // The evicted key again, stamped before the eviction: the same.
    let d = lim.decide_at(&"old", ts(SLICE), 2);
    assert_eq!(d.__slice(), Some(10));
}
