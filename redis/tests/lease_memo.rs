//! The cluster limiter's refusal memo, against real redis-servers: a key
//! Redis refused is refused locally, without a round trip, until the
//! retry time Redis gave (with the time left, decreasing); requests of
//! fewer permits still ask; after the retry time the next request asks
//! Redis again and sees the permits returned meanwhile; with the memo off
//! every refused request asks; outage refusals are not remembered; a
//! flood of distinct refused keys is forgotten by a sweep; and three nodes
//! never exceed the limit with the memo on or off.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount::{Clock, Quota, Timestamp};
use stripecount_redis::{ClusterLimiter, ClusterLimiterBuilder, Grant, OutagePolicy, WallClock};
use support::proxy::Proxy;
use support::{RedisServer, Rng};

/// The system clock (Redis's, on this machine), moved forward by `off`
/// nanoseconds the test sets: a node clock that runs in real time and
/// jumps when told.
#[derive(Clone)]
struct Shifted {
    wall: WallClock,
    off: Arc<AtomicU64>,
}

impl Shifted {
    fn new() -> Shifted {
        Shifted {
            wall: WallClock::new(),
            off: Arc::new(AtomicU64::new(0)),
        }
    }

    fn advance(&self, by: Duration) {
        self.off.fetch_add(by.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl Clock for Shifted {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(
            self.wall
                .now()
                .as_nanos()
                .wrapping_add(self.off.load(Ordering::Relaxed)),
        )
    }
}

/// A limiter of `limit` per day in one slice (no slice ends during a
/// test), with no background sweep.
fn builder(url: &str, ns: &str, limit: u64) -> ClusterLimiterBuilder<String> {
    ClusterLimiter::builder(
        url,
        ns,
        Quota::per(limit, Duration::from_secs(86_400)).slices(1),
    )
    .max_batch(8)
    .timeouts(Duration::from_secs(2), Duration::from_secs(5))
    .backoff(Duration::from_millis(1), Duration::from_millis(5))
    .sweep_interval(Duration::from_secs(3_600))
}

fn retry_of(g: Grant) -> Duration {
    match g {
        Grant::Refused {
            retry_after: Some(d),
        } => d,
        other => panic!("not a refusal with a retry time: {other:?}"),
    }
}

#[test]
fn a_refused_key_makes_no_round_trip_until_its_retry_time() {
    let redis = RedisServer::start();
    let l = builder(&redis.url(), "memo", 10).build().unwrap();
    assert!(l.try_acquire("k", 6)); // 6 of 10 leased and granted
    let before = l.stats();
    // 5 do not fit: Redis refuses, with the time the day's slice leaves
    // the window.
    let d = retry_of(l.decide("k", 5));
    assert!(d > Duration::ZERO && d <= Duration::from_secs(86_400));
    let refused = l.stats();
    assert_eq!(refused.round_trips, before.round_trips + 1);
    assert_eq!((refused.refusals, refused.memo_refusals), (1, 0));
    // Every request of at least 5 is refused from the memo: no round trip.
    for _ in 0..1_000 {
        assert!(retry_of(l.decide("k", 5)) <= d);
        assert!(!l.try_acquire("k", 5));
        assert!(retry_of(l.decide("k", 7)) <= d);
        assert!(retry_of(l.decide_from_lease("k", 6).expect("decided")) <= d);
    }
    let s = l.stats();
    assert_eq!(s.round_trips, refused.round_trips, "no round trip: {s:?}");
    assert_eq!((s.refusals, s.memo_refusals), (1, 4_000), "{s:?}");
    // The time left falls with the node's clock, to the nanosecond.
    let now = l.now().as_nanos();
    let left: Vec<Duration> = (0..10u64)
        .map(|i| {
            let at = Timestamp::from_nanos(now + i * 1_000_000);
            retry_of(l.decide_from_lease_at("k", at, 5).expect("decided"))
        })
        .collect();
    for w in left.windows(2) {
        assert_eq!(w[0] - w[1], Duration::from_millis(1), "{left:?}");
    }
    // Fewer permits may fit sooner: 4 ask Redis, and fit.
    assert_eq!(l.decide_from_lease("k", 4), None);
    assert!(matches!(l.decide("k", 4), Grant::Granted { .. }));
    assert_eq!(l.stats().round_trips, s.round_trips + 1);
    // Full now: 1 is refused by Redis once, then by the memo.
    retry_of(l.decide("k", 1));
    let s = l.stats();
    for _ in 0..100 {
        retry_of(l.decide_from_lease("k", 1).expect("decided"));
        retry_of(l.decide("k", 1));
    }
    assert_eq!(l.stats().round_trips, s.round_trips);
    assert_eq!(l.stats().refusals, 2);
}

#[test]
fn after_its_retry_time_a_refused_key_asks_again_and_sees_the_permits_returned_meanwhile() {
    let redis = RedisServer::start();
    let clock = Shifted::new();
    let a = builder(&redis.url(), "after", 10)
        .clock(clock.clone())
        .build()
        .unwrap();
    let b = builder(&redis.url(), "after", 10).build().unwrap();
    // b leases 1, then 5 (half the room left: 4 held unused); a leases
    // the other 4.
    for _ in 0..2 {
        assert!(b.try_acquire("k", 1));
    }
    assert_eq!(b.stats().leased_permits, 6);
    assert!(a.try_acquire("k", 4));
    let d = retry_of(a.decide("k", 1));
    // b gives its 4 back: a does not see them until its retry time (the
    // memo's cost), and asks Redis nothing meanwhile.
    assert_eq!(b.release_all().unwrap(), 4);
    let s = a.stats();
    for _ in 0..100 {
        retry_of(a.decide("k", 1));
        retry_of(a.decide_from_lease("k", 1).expect("decided"));
    }
    assert_eq!(a.stats().round_trips, s.round_trips);
    // a's clock passes the retry time: the next request asks Redis, and
    // gets the returned permits.
    clock.advance(d + Duration::from_millis(1));
    assert_eq!(a.decide_from_lease("k", 1), None);
    assert!(matches!(a.decide("k", 1), Grant::Granted { .. }));
    let s2 = a.stats();
    assert_eq!(s2.round_trips, s.round_trips + 1, "{s2:?}");
    assert_eq!(s2.memo_refusals, 200);
}

#[test]
fn with_the_memo_off_every_refused_request_makes_a_round_trip() {
    let redis = RedisServer::start();
    let l = builder(&redis.url(), "off", 10)
        .refusal_memo(false)
        .build()
        .unwrap();
    assert!(l.try_acquire("k", 10));
    let s = l.stats();
    for _ in 0..50 {
        retry_of(l.decide("k", 1));
        assert_eq!(l.decide_from_lease("k", 1), None);
    }
    let s2 = l.stats();
    assert_eq!(s2.round_trips, s.round_trips + 50, "{s2:?}");
    assert_eq!((s2.refusals, s2.memo_refusals), (50, 0), "{s2:?}");
}

#[test]
fn outage_refusals_are_not_remembered_and_redis_refusals_outlast_an_outage() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let l = builder(&proxy.url(), "outage", 10)
        .outage(OutagePolicy::FailClosed)
        .build()
        .unwrap();
    assert!(l.try_acquire("full", 10));
    retry_of(l.decide("full", 1));
    proxy.set_down(true);
    // The outage policy's refusal asks again next time.
    assert_eq!(l.decide("other", 1), Grant::OutageRefused);
    assert_eq!(l.decide_from_lease("other", 1), None);
    // Redis's refusal still holds, without asking.
    retry_of(l.decide("full", 1));
    proxy.set_down(false);
    support::wait_until(10, "a lease after the outage", || {
        matches!(l.decide("other", 1), Grant::Granted { .. })
    });
    assert_eq!(l.stats().memo_refusals, 1);
}

#[test]
fn a_flood_of_distinct_refused_keys_is_forgotten_by_a_sweep_after_their_retry_times() {
    let redis = RedisServer::start();
    let l = builder(&redis.url(), "flood", 1).build().unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert!(l.try_acquire(k, 1));
        retry_of(l.decide(k, 1));
    }
    let now = l.now();
    let refused = |l: &ClusterLimiter<String>| {
        keys.iter()
            .filter(|k| l.decide_from_lease_at(k.as_str(), now, 1).is_some())
            .count()
    };
    assert_eq!(refused(&l), 200);
    // Not yet expired: kept.
    l.sweep_at(now).unwrap();
    assert_eq!(refused(&l), 200);
    // Two days on, every retry time has passed: all dropped.
    l.sweep_at(Timestamp::from_nanos(
        now.as_nanos() + 2 * 86_400_000_000_000,
    ))
    .unwrap();
    assert_eq!(refused(&l), 0);
    assert_eq!(l.stats().memo_refusals, 400);
}

/// Three nodes, two threads each, one key, deciding as the tower layer
/// does (from the lease, else a round trip): every window of the grants'
/// server slices holds at most the limit.
fn three_nodes_hammer(memo: bool, strict: bool) {
    const LIMIT: u64 = 40;
    const SLICES: u64 = 4;
    const SLICE_MS: u64 = 50;
    let redis = RedisServer::start();
    let q = Quota::per(LIMIT, Duration::from_millis(SLICE_MS * SLICES)).slices(SLICES as usize);
    let q = if strict { q.strict() } else { q };
    let ns = format!("hammer{}{}", u8::from(memo), u8::from(strict));
    let nodes: Vec<Arc<ClusterLimiter<String>>> = (0..3)
        .map(|_| {
            Arc::new(
                ClusterLimiter::builder(&redis.url(), &ns, q)
                    .max_batch(8)
                    .sweep_interval(Duration::from_millis(20))
                    .refusal_memo(memo)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    // At least 0.8 s, and until the key was refused a few times (and,
    // with the memo, refused by it): on a slow machine the run takes
    // longer, and the verdict is the same.
    let run = Duration::from_millis(800);
    let start = Instant::now();
    let all: Vec<Arc<ClusterLimiter<String>>> = nodes.clone();
    let refusals = Arc::new(AtomicU64::new(0));
    let go_on = {
        let refusals = Arc::clone(&refusals);
        move || {
            let t = start.elapsed();
            assert!(t < Duration::from_secs(120), "the key was never refused");
            let by_memo: u64 = all.iter().map(|n| n.stats().memo_refusals).sum();
            t < run || refusals.load(Ordering::Relaxed) < 20 || (memo && by_memo == 0)
        }
    };
    let mut threads = Vec::new();
    for (ni, node) in nodes.iter().enumerate() {
        for t in 0..2u64 {
            let node = Arc::clone(node);
            let (go_on, refusals) = (go_on.clone(), Arc::clone(&refusals));
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng::new(ni as u64 * 10 + t + 1);
                let mut grants: Vec<(u64, u64)> = Vec::new();
                let mut refused = 0u64;
                while go_on() {
                    let n = 1 + rng.next() % 2;
                    let g = node
                        .decide_from_lease("k", n)
                        .unwrap_or_else(|| node.decide("k", n));
                    match g {
                        Grant::Granted { slice_start } => {
                            grants.push((slice_start.as_nanos() / (SLICE_MS * 1_000_000), n))
                        }
                        Grant::Refused { .. } => {
                            refused += 1;
                            refusals.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("Redis is up: {other:?}"),
                    }
                }
                (grants, refused)
            }));
        }
    }
    let mut per: HashMap<u64, u64> = HashMap::new();
    let mut refused = 0;
    for t in threads {
        let (grants, r) = t.join().unwrap();
        refused += r;
        for (slice, n) in grants {
            *per.entry(slice).or_default() += n;
        }
    }
    assert!(refused > 0, "the key was not overloaded");
    let judged = SLICES + u64::from(strict);
    let (lo, hi) = (*per.keys().min().unwrap(), *per.keys().max().unwrap());
    for j in lo..=hi {
        let w: u64 = (j.saturating_sub(judged - 1)..=j)
            .filter_map(|e| per.get(&e))
            .sum();
        assert!(w <= LIMIT, "{w} granted in the {judged} slices up to {j}");
    }
    let memo_refusals: u64 = nodes.iter().map(|n| n.stats().memo_refusals).sum();
    let round_trips: u64 = nodes.iter().map(|n| n.stats().round_trips).sum();
    eprintln!(
        "memo {memo}, strict {strict}: {} granted over slices {lo}..={hi}, {refused} refused, {memo_refusals} by the memo, {round_trips} round trips",
        per.values().sum::<u64>()
    );
    if memo {
        assert!(memo_refusals > 0);
    } else {
        assert_eq!(memo_refusals, 0);
    }
}

#[test]
fn three_nodes_never_exceed_the_limit_with_the_memo() {
    three_nodes_hammer(true, false);
    three_nodes_hammer(true, true);
}

#[test]
fn three_nodes_never_exceed_the_limit_without_the_memo() {
    three_nodes_hammer(false, false);
}
