//! `until_ready`: waiters are granted, never beyond the limit; a dropped
//! waiter has taken nothing; requests that can never fit are errors. Most
//! tests run on tokio's paused clock (`TokioClock`), so sleeps are exact
//! and take no time; one runs on real time across threads.

use std::sync::Arc;
use std::time::Duration;
use stripecount::{Denied, KeyedLimiter, Quota};
use stripecount_tower::{TokioClock, UntilReady};
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

const SEC: Duration = Duration::from_secs(1);

fn limiter(limit: u64, window: Duration, slices: usize) -> Arc<KeyedLimiter<String, TokioClock>> {
    let quota = Quota::per(limit, window).slices(slices);
    Arc::new(
        KeyedLimiter::builder(quota)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    )
}

/// 30 waiters on one key limited to 3 a second: 3 granted in each of ten
/// seconds, each exactly at its second (woken by `retry_after`).
#[tokio::test(start_paused = true)]
async fn waiters_are_eventually_granted_never_beyond_the_limit() {
    let lim = limiter(3, SEC, 1);
    let start = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..30 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let d = lim.until_ready("k").await.unwrap();
            (start.elapsed(), d.remaining())
        });
    }
    let mut per_second = [0u32; 10];
    while let Some(r) = set.join_next().await {
        let (at, _) = r.unwrap();
        assert_eq!(at.subsec_nanos(), 0, "granted at {at:?}");
        per_second[at.as_secs() as usize] += 1;
    }
    assert_eq!(per_second, [3; 10]);
    assert_eq!(start.elapsed(), 9 * SEC);
    // Another key was never held up.
    assert!(lim.until_ready("other").await.is_ok());
    assert_eq!(start.elapsed(), 9 * SEC);
}

/// Waiters dropped while sleeping (timeouts shorter than their wait) take
/// nothing: after they are gone the key's budget is whole, and the only
/// permits ever taken are those of waiters that returned.
#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_holds_no_permit() {
    let lim = limiter(4, 2 * SEC, 2);
    assert!(lim.try_acquire("k", 4));
    // The window is full until 2 s. Waiters give up at 100..1900 ms.
    let mut set = JoinSet::new();
    for i in 1..20u64 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let r = timeout(
                Duration::from_millis(100 * i),
                lim.until_ready_n("k", 1 + i % 3),
            )
            .await;
            assert!(r.is_err(), "waiter {i} should have timed out");
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(lim.available("k"), 0);
    tokio::time::sleep(SEC).await; // now 2.9 s: the 4 of 0 s left at 2 s
    assert_eq!(lim.available("k"), 4, "a dropped waiter took a permit");

    // Mixed: 40 waiters for 1 or 2 permits with timeouts from 0.3 to 8.1 s,
    // some at the very instants slices open (0.1 s past each second from
    // `start`); whatever times out took nothing, so the permits the
    // limiter holds are exactly those of the waiters that returned. A
    // monitor reads them in the middle of every slice (no grant happens
    // then: slices open at .1 s, waiters wake only then).
    let start = Instant::now();
    let monitor = {
        let lim = Arc::clone(&lim);
        tokio::spawn(async move {
            let mut used = Vec::new();
            for k in 0..10u64 {
                tokio::time::sleep_until(start + Duration::from_millis(600 + 1000 * k)).await;
                used.push((start.elapsed(), 4 - lim.available("k")));
            }
            used
        })
    };
    let mut set = JoinSet::new();
    for i in 0..40u64 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let n = 1 + i % 2;
            let wait = Duration::from_millis(100 * (3 + 2 * i));
            let d = timeout(wait, lim.until_ready_n("k", n)).await;
            d.ok().map(|d| (start.elapsed(), n, d.unwrap()))
        });
    }
    let mut grants = Vec::new();
    while let Some(r) = set.join_next().await {
        grants.extend(r.unwrap());
    }
    assert!(grants.len() > 4, "only {} waiters granted", grants.len());
    // Windows of 2 s, slices of 1 s counted from the clock's origin, 2.9 s
    // before `start`.
    let slice = |at: Duration| (at + Duration::from_millis(2900)).as_secs();
    let in_window = |e: u64| -> u64 {
        (grants.iter())
            .filter(|g| slice(g.0) + 1 >= e && slice(g.0) <= e)
            .map(|g| g.1)
            .sum()
    };
    for (at, used) in monitor.await.unwrap() {
        assert!(used <= 4);
        assert_eq!(used, in_window(slice(at)), "at {at:?}: {grants:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn requests_that_cannot_be_waited_for_are_errors() {
    let lim = limiter(2, SEC, 1);
    let start = Instant::now();
    let err = lim.until_ready_n("k", 3).await.unwrap_err();
    assert_eq!(err, Denied::ExceedsLimit);
    // A full map of busy keys: an error at once, not a wait.
    let full = Arc::new(
        KeyedLimiter::<String>::builder(Quota::per(2, SEC).slices(1))
            .clock(TokioClock::new())
            .max_keys(1)
            .build()
            .unwrap(),
    );
    full.until_ready("a").await.unwrap();
    assert_eq!(
        full.until_ready("b").await.unwrap_err(),
        Denied::TooManyKeys
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Nothing to take: granted at once.
    assert!(lim.until_ready_n("k", 0).await.unwrap().is_granted());
}

/// Real time, several threads: tasks on a multi-threaded runtime wait for
/// 5 permits per 40 ms window; every one is granted, and the grants'
/// slices (from their decisions) never hold more than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_threads_in_real_time() {
    let lim: Arc<KeyedLimiter<String>> =
        Arc::new(KeyedLimiter::new(Quota::per(5, Duration::from_millis(40)).slices(4)).unwrap());
    let mut set = JoinSet::new();
    for i in 0..24 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let key = if i % 2 == 0 { "even" } else { "odd" };
            let d = lim.until_ready(key).await.unwrap();
            assert_eq!(d.result(), Ok(()));
            (key, d.__slice().expect("a grant's slice"))
        });
    }
    let mut grants: Vec<(&str, u64)> = Vec::new();
    while let Some(r) = set.join_next().await {
        grants.push(r.unwrap());
    }
    assert_eq!(grants.len(), 24);
    for key in ["even", "odd"] {
        let slices: Vec<u64> = grants.iter().filter(|g| g.0 == key).map(|g| g.1).collect();
        for &e in &slices {
            let w = slices.iter().filter(|&&s| s + 4 > e && s <= e).count();
            assert!(w <= 5, "{key}: window ending in slice {e} holds {w}");
        }
    }
}
