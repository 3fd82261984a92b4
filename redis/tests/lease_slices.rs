//! The cluster limiter (`ClusterLimiter`) against a real redis-server, where
//! leases meet their slices' ends: the sweeper returns what a lease held
//! when its slice ended, a cold key leases one permit a slice, a refusal
//! says when the window frees enough, and a request at a slice's end waits
//! for the next slice instead of being refused.

mod support;

use std::collections::HashMap;
use std::time::Duration;
use stripecount::{Clock, Quota};
use stripecount_redis::{ClusterLimiter, Grant};
use support::{recorded, RedisServer};

#[test]
fn the_sweeper_returns_what_a_lease_held_when_its_slice_ended() {
    let redis = RedisServer::start();
    let quota = Quota::per(100, Duration::from_millis(400)).slices(2);
    let l: ClusterLimiter<String> = ClusterLimiter::builder(&redis.url(), "sweep", quota)
        .max_batch(8)
        .sweep_interval(Duration::from_millis(10))
        .build()
        .unwrap();
    // A lease of 1, then one of 8: one or both granted in a slice (a
    // slice edge may fall between them).
    let mut granted: HashMap<u64, u64> = HashMap::new();
    let slice_ns = 200_000_000;
    for _ in 0..2 {
        match l.decide("k", 1) {
            Grant::Granted { slice_start } => {
                *granted
                    .entry(slice_start.as_nanos() / slice_ns)
                    .or_default() += 1
            }
            other => panic!("{other:?}"),
        }
    }
    let leased = l.stats().leased_permits;
    assert!(leased > 2);
    support::wait_until(10, "the sweeper's return", || {
        l.stats().returned_permits == leased - 2
    });
    // Redis holds what was granted in each slice still in the window.
    let rec = recorded(&redis, "sweep", "k");
    for (e, n) in &rec {
        assert_eq!(
            granted.get(e),
            Some(n),
            "slice {e}: {rec:?} against {granted:?}"
        );
    }
}

#[test]
fn a_cold_key_keeps_leasing_one_permit_at_a_time() {
    let redis = RedisServer::start();
    let quota = Quota::per(100, Duration::from_millis(400)).slices(4);
    let l: ClusterLimiter<String> = ClusterLimiter::builder(&redis.url(), "cold", quota)
        .max_batch(64)
        .build()
        .unwrap();
    let slice = 100_000_000;
    let mut last = 0;
    for _ in 0..5 {
        // One request a slice: each lease runs out, and its slice ends
        // before the next request (the sweeper judged it by then).
        support::wait_until(10, "the next slice", || {
            l.time().now().as_nanos() / slice > last
        });
        l.sweep().unwrap();
        match l.decide("k", 1) {
            Grant::Granted { slice_start } => last = slice_start.as_nanos() / slice,
            other => panic!("{other:?}"),
        }
    }
    // Every lease was of one permit. A slice may end while a request's
    // lease is in flight (a loaded host): that lease is returned and the
    // request leases again in the new slice, so count what was kept.
    let s = l.stats();
    assert_eq!(s.leased_permits, s.leases, "{s:?}");
    assert_eq!(s.leased_permits - s.returned_permits, 5, "{s:?}");
}

#[test]
fn a_refusal_says_when_the_window_frees_enough() {
    let redis = RedisServer::start();
    let hour = Duration::from_secs(3_600);
    let l =
        ClusterLimiter::<String>::builder(&redis.url(), "retry", Quota::per(3, 4 * hour).slices(4))
            .max_batch(8)
            .sweep_interval(Duration::from_secs(3_600))
            .build()
            .unwrap();
    for _ in 0..3 {
        assert!(l.try_acquire("k", 1));
    }
    // Near the limit the leases shrink to the request: nothing is held.
    assert_eq!(l.stats().leased_permits, 3);
    // All 3 are in the current slice: the request fits when it leaves the
    // window, 3 to 4 hours from now.
    match l.decide("k", 1) {
        Grant::Refused {
            retry_after: Some(d),
        } => assert!(d > 3 * hour && d <= 4 * hour, "{d:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.stats().refusals, 1);
}

/// A request that comes within the margin of a slice's end gets a lease
/// that is dead on arrival. It waits for the server's next slice and is
/// granted there; it used to ask the dying slice again (each round trip far
/// shorter than the margin) and be refused after four tries, with room in
/// the window.
#[test]
fn a_request_at_a_slice_end_waits_for_the_next_slice() {
    let redis = RedisServer::start();
    let slice_us = 100_000;
    let quota = Quota::per(100, Duration::from_millis(200)).slices(2);
    let l: ClusterLimiter<String> = ClusterLimiter::builder(&redis.url(), "edge", quota)
        .margin(Duration::from_millis(5))
        .build()
        .unwrap();
    assert!(l.decide("warm", 1).is_granted()); // connected, script loaded
    let mut conn = redis.conn();
    for attempt in 0.. {
        assert!(
            attempt < 20,
            "no request fell within the margin of a slice end"
        );
        // 2 ms before the server's next slice edge: inside the 5 ms margin.
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        let now = s * 1_000_000 + us;
        let edge = (now / slice_us + 1) * slice_us;
        std::thread::sleep(Duration::from_micros((edge - 2_000).saturating_sub(now)));
        let leases = l.stats().leases;
        let g = l.decide(format!("k{attempt}").as_str(), 1);
        let st = l.stats();
        let Grant::Granted { slice_start } = g else {
            panic!("attempt {attempt}: {g:?} {st:?}");
        };
        if st.leases >= leases + 2 {
            // A dead lease, then one from the next slice.
            let slice = slice_start.as_nanos() / (slice_us * 1_000);
            assert_eq!(slice, edge / slice_us, "{st:?}");
            assert!(st.returned_permits >= 1, "{st:?}");
            break;
        }
    }
}
