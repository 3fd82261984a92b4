//! `until_ready`: waiters are granted, never beyond the limit; a dropped
//! waiter has taken nothing; requests that can never fit are errors; each
//! sleep is the refusal's retry time plus a draw of the jitter. Most tests
//! run on tokio's paused clock (`TokioClock`), so sleeps are exact and take
//! no time; two run on real time across threads, one of them on a runtime
//! that is not tokio (futures' executor, futures-timer's timer), and the
//! jitter's test on a manual clock that the sleep itself moves.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount::clock::{ManualClock, TokioClock};
use stripecount::limiter::Jitter;
use stripecount::{Decision, Denied, KeyedLimiter, MultiLimiter, Quota, RateLimiter};
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

const SEC: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

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
            lim.until_ready("k", 1).await.unwrap();
            start.elapsed()
        });
    }
    let mut per_second = [0u32; 10];
    while let Some(r) = set.join_next().await {
        let at = r.unwrap();
        assert_eq!(at.subsec_nanos(), 0, "granted at {at:?}");
        per_second[at.as_secs() as usize] += 1;
    }
    assert_eq!(per_second, [3; 10]);
    assert_eq!(start.elapsed(), 9 * SEC);
    // Another key was never held up.
    assert!(lim.until_ready("other", 1).await.is_ok());
    assert_eq!(start.elapsed(), 9 * SEC);
}

/// The direct limiter: 30 waiters on 3 a second, 3 granted in each of ten
/// seconds, exactly at its start; the grant's decision is returned.
#[tokio::test(start_paused = true)]
async fn rate_limiter_waiters_are_granted_at_exact_times() {
    let quota = Quota::per_second(3).slices(1);
    let lim = Arc::new(
        RateLimiter::builder(quota)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..30 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let d = lim.until_ready(1).await.unwrap();
            assert!(d.is_granted());
            assert!(d.remaining() < 3);
            start.elapsed()
        });
    }
    let mut per_second = [0u32; 10];
    while let Some(r) = set.join_next().await {
        let at = r.unwrap();
        assert_eq!(at.subsec_nanos(), 0, "granted at {at:?}");
        per_second[at.as_secs() as usize] += 1;
    }
    assert_eq!(per_second, [3; 10]);
    // Two at once wait for a window with room for both.
    tokio::time::sleep(SEC).await;
    assert!(lim.try_acquire(2));
    let d = lim.until_ready(2).await.unwrap();
    assert_eq!((start.elapsed(), d.remaining()), (11 * SEC, 1));
}

/// Several limits, all or nothing: 2 a second (fixed) and 5 per 10 s (in
/// slices of a second). One waiter after another is granted at 0, 0, 1, 1,
/// 2 s; then the 10 s limit holds it until the grants of second 0 expire
/// (10 s: room for 2), and second 2's (11 s).
#[tokio::test(start_paused = true)]
async fn multi_limiter_waiters_are_granted_at_exact_times() {
    let quotas = [
        Quota::per_second(2).slices(1),
        Quota::per(5, 10 * SEC).slices(10),
    ];
    let lim = MultiLimiter::builder(quotas)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let start = Instant::now();
    let mut at = Vec::new();
    for _ in 0..8 {
        let d = lim.until_ready(1).await.unwrap();
        assert!(d.is_granted());
        at.push(start.elapsed().as_secs_f64());
    }
    assert_eq!(at, [0.0, 0.0, 1.0, 1.0, 2.0, 10.0, 10.0, 11.0]);
    assert_eq!(lim.until_ready(3).await.unwrap_err(), Denied::ExceedsLimit);
    assert_eq!(start.elapsed(), 11 * SEC);
}

/// A limiter on tokio's clock, waited on for one key ("k" for a per-key
/// limiter), so that one test body checks both kinds.
trait Waits: Send + Sync + 'static {
    fn wait(self: Arc<Self>, n: u64) -> impl Future<Output = Result<Decision, Denied>> + Send;
    fn take(&self, n: u64) -> bool;
    fn available(&self) -> u64;
}

impl Waits for KeyedLimiter<String, TokioClock> {
    async fn wait(self: Arc<Self>, n: u64) -> Result<Decision, Denied> {
        self.until_ready("k", n).await
    }
    fn take(&self, n: u64) -> bool {
        self.try_acquire("k", n)
    }
    fn available(&self) -> u64 {
        self.available("k")
    }
}

impl Waits for RateLimiter<TokioClock> {
    async fn wait(self: Arc<Self>, n: u64) -> Result<Decision, Denied> {
        self.until_ready(n).await
    }
    fn take(&self, n: u64) -> bool {
        self.try_acquire(n)
    }
    fn available(&self) -> u64 {
        self.available()
    }
}

/// Waiters dropped while sleeping (timeouts shorter than their wait) take
/// nothing: after they are gone the key's budget is whole, and the only
/// permits ever taken are those of waiters that returned.
#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_holds_no_permit() {
    dropped_waiters_hold_no_permit(limiter(4, 2 * SEC, 2)).await;
}

/// The same for the direct limiter.
#[tokio::test(start_paused = true)]
async fn a_dropped_direct_waiter_holds_no_permit() {
    let quota = Quota::per(4, 2 * SEC).slices(2);
    let lim = RateLimiter::builder(quota).clock(TokioClock::new()).build();
    dropped_waiters_hold_no_permit(Arc::new(lim.unwrap())).await;
}

/// `lim`: 4 per 2 s in slices of 1 s, on a `TokioClock` made now.
async fn dropped_waiters_hold_no_permit<L: Waits>(lim: Arc<L>) {
    assert!(lim.take(4));
    // The window is full until 2 s. Waiters give up at 100..1900 ms.
    let mut set = JoinSet::new();
    for i in 1..20u64 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let r = timeout(ms(100 * i), lim.wait(1 + i % 3)).await;
            assert!(r.is_err(), "waiter {i} should have timed out");
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(lim.available(), 0);
    tokio::time::sleep(SEC).await; // now 2.9 s: the 4 of 0 s left at 2 s
    assert_eq!(lim.available(), 4, "a dropped waiter took a permit");

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
                tokio::time::sleep_until(start + ms(600 + 1000 * k)).await;
                used.push((start.elapsed(), 4 - lim.available()));
            }
            used
        })
    };
    let mut set = JoinSet::new();
    for i in 0..40u64 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let n = 1 + i % 2;
            let d = timeout(ms(100 * (3 + 2 * i)), lim.wait(n)).await;
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
    let slice = |at: Duration| (at + ms(2900)).as_secs();
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
    let err = lim.until_ready("k", 3).await.unwrap_err();
    assert_eq!(err, Denied::ExceedsLimit);
    // A full map of busy keys: an error at once, not a wait.
    let full = Arc::new(
        KeyedLimiter::<String>::builder(Quota::per(2, SEC).slices(1))
            .clock(TokioClock::new())
            .max_keys(1)
            .build()
            .unwrap(),
    );
    full.until_ready("a", 1).await.unwrap();
    assert_eq!(
        full.until_ready("b", 1).await.unwrap_err(),
        Denied::TooManyKeys
    );
    assert_eq!(
        full.until_ready_jittered("b", 1, Jitter::up_to(SEC))
            .await
            .unwrap_err(),
        Denied::TooManyKeys
    );
    // The direct limiters too.
    let direct = RateLimiter::builder(Quota::per_second(2))
        .clock(TokioClock::new())
        .build()
        .unwrap();
    assert_eq!(
        direct.until_ready(3).await.unwrap_err(),
        Denied::ExceedsLimit
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Nothing to take: granted at once.
    assert!(lim.until_ready("k", 0).await.unwrap().is_granted());
    assert!(direct.until_ready(0).await.unwrap().is_granted());
}

/// Real time, several threads: tasks on a multi-threaded runtime wait for
/// 5 permits per 40 ms window; every one is granted, and the grants'
/// slices (from their decisions) never hold more than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_threads_in_real_time() {
    let lim: Arc<KeyedLimiter<String>> =
        Arc::new(KeyedLimiter::new(Quota::per(5, ms(40)).slices(4)).unwrap());
    let mut set = JoinSet::new();
    for i in 0..24 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            let key = if i % 2 == 0 { "even" } else { "odd" };
            let d = lim.until_ready(key, 1).await.unwrap();
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
        assert_within_limit(&slices, 4, 5, key);
    }
}

/// Every window of `slices` consecutive slices holds at most `limit` of
/// the grants' slices.
fn assert_within_limit(grants: &[u64], slices: u64, limit: usize, what: &str) {
    for &e in grants {
        let w = grants.iter().filter(|&&s| s + slices > e && s <= e).count();
        assert!(w <= limit, "{what}: window ending in slice {e} holds {w}");
    }
}

/// Any runtime: plain threads, each driving its waits with futures'
/// `block_on` and sleeping on futures-timer's timer thread (no tokio),
/// with jitter, on a direct and a per-key limiter of 5 per 40 ms. Every
/// waiter is granted and no window holds more than the limit.
#[test]
fn waiters_on_another_runtime_in_real_time() {
    let quota = Quota::per(5, ms(40)).slices(4);
    let direct = RateLimiter::new(quota).unwrap();
    let keyed = KeyedLimiter::<u64>::new(quota).unwrap();
    let jitter = Jitter::up_to(ms(3));
    let (direct_grants, keyed_grants) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (direct, keyed) = (&direct, &keyed);
                s.spawn(move || {
                    futures_executor::block_on(async {
                        let mut mine = (Vec::new(), Vec::new());
                        for _ in 0..5 {
                            let d = direct
                                .until_ready_with(1, jitter, futures_timer::Delay::new)
                                .await
                                .unwrap();
                            mine.0.push(d.__slice().unwrap());
                            let d = keyed
                                .until_ready_with(&(t % 2), 1, jitter, futures_timer::Delay::new)
                                .await
                                .unwrap();
                            mine.1.push((t % 2, d.__slice().unwrap()));
                        }
                        mine
                    })
                })
            })
            .collect();
        let (mut d, mut k) = (Vec::new(), Vec::new());
        for t in threads {
            let (a, b) = t.join().unwrap();
            d.extend(a);
            k.extend(b);
        }
        (d, k)
    });
    assert_eq!(direct_grants.len(), 20);
    assert_within_limit(&direct_grants, 4, 5, "direct");
    for key in [0, 1] {
        let slices: Vec<u64> = (keyed_grants.iter())
            .filter(|g| g.0 == key)
            .map(|g| g.1)
            .collect();
        assert_eq!(slices.len(), 10);
        assert_within_limit(&slices, 4, 5, "keyed");
    }
}

/// Each sleep is the refusal's retry time plus a draw in `[min, min +
/// interval)`: a sleep that records what it was asked for and moves a
/// manual clock by it, on futures' executor. Over 1998 draws the extra
/// delays are spread over the interval: the mean within 10% of its middle
/// (15 standard deviations) and every quarter of it drawn at least 300
/// times of the expected 500 (10 standard deviations), so neither bound
/// fails by chance.
#[test]
fn each_sleep_is_the_retry_time_plus_a_draw_of_the_jitter() {
    let (min, interval) = (ms(100), ms(400));
    let jitter = Jitter::new(min, interval);
    let clock = ManualClock::new();
    let direct = RateLimiter::builder(Quota::per_second(1).slices(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let keyed: KeyedLimiter<u8, _> = KeyedLimiter::builder(Quota::per_second(1).slices(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let extra = Mutex::new(Vec::new());
    let record = |retry_after: Option<Duration>, d: Duration| {
        let retry_after = retry_after.expect("a refusal that can fit");
        assert!(retry_after > Duration::ZERO);
        assert!(d >= retry_after + min, "slept {d:?} after {retry_after:?}");
        assert!(
            d < retry_after + min + interval,
            "slept {d:?} after {retry_after:?}"
        );
        extra.lock().unwrap().push(d - retry_after - min);
        clock.advance(d);
        std::future::ready(())
    };
    futures_executor::block_on(async {
        for _ in 0..1000 {
            let sleep = |d| record(direct.retry_after(1), d);
            direct.until_ready_with(1, jitter, sleep).await.unwrap();
        }
        for _ in 0..1000 {
            let sleep = |d| record(keyed.retry_after(&7, 1), d);
            keyed.until_ready_with(&7, 1, jitter, sleep).await.unwrap();
        }
    });
    let extra = extra.into_inner().unwrap();
    // Each limiter's first wait is granted at once; every other one sleeps
    // once (its sleep ends past the second that holds the last grant).
    assert_eq!(extra.len(), 1998);
    let mean = extra.iter().sum::<Duration>() / extra.len() as u32;
    let middle = (interval * 4 / 10, interval * 6 / 10);
    assert!(
        middle.0 < mean && mean < middle.1,
        "mean extra delay {mean:?}"
    );
    let mut quarters = [0u32; 4];
    for e in &extra {
        quarters[(e.as_nanos() * 4 / interval.as_nanos()) as usize] += 1;
    }
    assert!(quarters.iter().all(|&q| q >= 300), "{quarters:?}");
    let mut distinct = extra.clone();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() > 1900, "{} distinct draws", distinct.len());
}

/// On tokio: waiters refused together wake apart. 20 waiters on a full
/// window of 20 a second, jittered by up to 500 ms, are granted from 1 s
/// to 1.5 s, not all at once.
#[tokio::test(start_paused = true)]
async fn jittered_waiters_wake_apart() {
    let lim = limiter(20, SEC, 1);
    assert!(lim.try_acquire("k", 20));
    let start = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..20 {
        let lim = Arc::clone(&lim);
        set.spawn(async move {
            lim.until_ready_jittered("k", 1, Jitter::up_to(ms(500)))
                .await
                .unwrap();
            start.elapsed()
        });
    }
    let mut at = Vec::new();
    while let Some(r) = set.join_next().await {
        at.push(r.unwrap());
    }
    // tokio's timer fires on whole milliseconds, rounding up.
    assert!(at.iter().all(|&t| SEC <= t && t <= ms(1500)), "{at:?}");
    at.sort();
    at.dedup();
    assert!(at.len() > 10, "granted at only {} instants", at.len());
}
