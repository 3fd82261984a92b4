//! The key type's own code (`RedisKey::write_key`) runs when the cluster
//! limiter returns a key's unused permits, and may panic: the other keys'
//! permits are still returned, the panic is counted, the sweeper thread
//! goes on, and `release_all` resumes it once every group was swept.
//! Against a real redis-server, whose per-key counts are read back.

mod support;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Clock, Quota, Timestamp};
use stripecount_redis::ClusterLimiter;
use support::flaky::{Ctl, Flaky};
use support::{wait_until, RedisServer};

/// A limiter of `quota`: a lease lasts at most its slice.
fn limiter(url: &str, ns: &str, sweep: Duration, quota: Quota) -> ClusterLimiter<Flaky> {
    ClusterLimiter::builder(url, ns, quota)
        .max_batch(50)
        .sweep_interval(sweep)
        .build()
        .unwrap()
}

/// Two grants of each key: the second lease is larger than what it
/// serves, so every key then holds unused permits.
fn lease_each<C: Clock>(l: &ClusterLimiter<Flaky, C>, keys: &[Flaky]) {
    for _ in 0..2 {
        for k in keys {
            assert!(l.try_acquire(k, 1));
        }
    }
}

/// The permits Redis counts for the key: leased less returned.
fn counted(redis: &RedisServer, ns: &str, id: u64) -> u64 {
    support::recorded(redis, ns, &id.to_string()).values().sum()
}

fn keys(ctl: &Arc<Ctl>) -> Vec<Flaky> {
    (0..8).map(|id| Flaky::new(id, ctl)).collect()
}

#[test]
fn release_all_returns_the_other_keys_permits_then_resumes_the_panic() {
    let redis = RedisServer::start();
    let ctl = Ctl::new();
    let ks = keys(&ctl);
    // Slices of a day: every lease still holds its unused permits when
    // `release_all` runs (a lease ends with its slice, and then has
    // nothing to return, so no key code would run).
    let l = limiter(
        &redis.url(),
        "lkp",
        Duration::from_secs(3_600),
        Quota::per(1_000, Duration::from_secs(86_400)).slices(1),
    );
    lease_each(&l, &ks);
    assert!(counted(&redis, "lkp", 0) > 2, "unused permits held");
    ctl.bad_name.store(5, Ordering::SeqCst);
    let r = catch_unwind(AssertUnwindSafe(|| l.release_all()));
    assert!(r.is_err(), "the key's panic is resumed");
    assert_eq!(l.stats().key_panics, 1);
    for id in (0..8).filter(|&id| id != 5) {
        assert_eq!(
            counted(&redis, "lkp", id),
            2,
            "key {id}: the unused returned"
        );
    }
    // Key 5's unused permits were not returned: they count against its
    // window (never over the limit).
    assert!(counted(&redis, "lkp", 5) > 2);
    // The limiter goes on: the other keys lease again.
    lease_each(&l, &ks[..5]);
    assert!(l.stats().leases > 16);
}

#[test]
fn the_sweeper_counts_the_panic_and_goes_on() {
    let redis = RedisServer::start();
    let ctl = Ctl::new();
    let ks = keys(&ctl);
    // The node's clock is manual: its leases end when the test moves it
    // past their deadline, not when a busy machine happens to reach the
    // end of a slice (a lease of key 5 swept before its code starts to
    // panic would leave nothing to count).
    let clock = ManualClock::starting_at(Timestamp::from_nanos(1_000_000_000_000));
    let l: ClusterLimiter<Flaky, ManualClock> = ClusterLimiter::builder(
        &redis.url(),
        "lkp_bg",
        // 1,000 an hour in slices of 30 s: the counts stay in the window.
        Quota::per(1_000, Duration::from_secs(3_600)).slices(120),
    )
    .max_batch(50)
    .sweep_interval(Duration::from_millis(5))
    .clock(clock.clone())
    .build()
    .unwrap();
    // The leases first (a request writes its key's name), then key 5's
    // code starts to panic.
    lease_each(&l, &ks);
    assert!(counted(&redis, "lkp_bg", 5) > 2, "unused permits held");
    ctl.bad_name.store(5, Ordering::SeqCst);
    // Past every lease's deadline: the sweeper returns what they left,
    // and meets key 5.
    clock.advance(Duration::from_secs(31));
    wait_until(60, "the sweeper's returns", || {
        (0..8)
            .filter(|&id| id != 5)
            .all(|id| counted(&redis, "lkp_bg", id) == 2)
    });
    wait_until(60, "the panic counted", || l.stats().key_panics == 1);
    // The sweeper thread lives: it returns the next leases' unused permits.
    ctl.bad_name.store(u64::MAX, Ordering::SeqCst);
    lease_each(&l, &ks[..4]);
    clock.advance(Duration::from_secs(31));
    wait_until(60, "the next returns", || {
        (0..4).all(|id| counted(&redis, "lkp_bg", id) == 4)
    });
    assert_eq!(l.stats().key_panics, 1);
}
