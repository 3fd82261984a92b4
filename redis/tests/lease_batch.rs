//! The cluster limiter's batches, against a real redis-server: requests
//! that queue behind a round trip go to Redis together in the next one,
//! a full queue sheds at once, an async request waits without a thread
//! (and a dropped one is not sent, or leaves its permits to the key's
//! next request), and a panic of the key's code in a batch reaches its
//! caller only.
//!
//! The queue is made certain, not timed: the server is frozen (SIGSTOP)
//! while the first request is in flight, the test waits until the others
//! are queued (`ClusterLimiter::waiting`), then resumes it.

mod support;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use stripecount::{Quota, Timestamp};
use stripecount_redis::{
    ClusterLimiter, ClusterLimiterBuilder, Grant, OutagePolicy, RedisKey, Shed,
};
use support::flaky::{Ctl, Flaky};
use support::{recorded, wait_until, RedisServer};

/// 100 a day per key in one slice (a lease lives in its slice: a slice
/// of a day is not crossed by a test, and the assertions that count round
/// trips check that it was not). Long I/O timeouts: a frozen server makes
/// requests wait, not fail.
fn builder<K: RedisKey>(url: &str, ns: &str) -> ClusterLimiterBuilder<K> {
    ClusterLimiter::builder(
        url,
        ns,
        Quota::per(100, Duration::from_secs(86_400)).slices(1),
    )
    .timeouts(Duration::from_secs(5), Duration::from_secs(60))
}

fn decide_on_thread(l: &Arc<ClusterLimiter<String>>, key: String) -> JoinHandle<Grant> {
    let l = Arc::clone(l);
    std::thread::spawn(move || l.decide(key.as_str(), 1))
}

fn slice_of(g: Grant) -> Timestamp {
    match g {
        Grant::Granted { slice_start } => slice_start,
        other => panic!("not granted: {other:?}"),
    }
}

/// Freezes the server with a first request in flight (its thread
/// returned).
fn freeze_with_one_in_flight(
    redis: &RedisServer,
    l: &Arc<ClusterLimiter<String>>,
    key: &str,
) -> JoinHandle<Grant> {
    redis.pause();
    let first = decide_on_thread(l, key.to_owned());
    wait_until(10, "the first request in flight", || {
        l.health().batch_in_flight
    });
    first
}

#[test]
fn requests_queued_behind_a_round_trip_go_to_redis_in_one_batch() {
    let redis = RedisServer::start();
    let l = Arc::new(builder(&redis.url(), "batch").build().unwrap());
    assert!(l.decide("warm", 1).is_granted()); // connected, script loaded
    let first = freeze_with_one_in_flight(&redis, &l, "k0");
    let rest: Vec<_> = (1..=20)
        .map(|i| decide_on_thread(&l, format!("k{i}")))
        .collect();
    wait_until(10, "20 requests queued", || l.waiting() == 20);
    let before = l.stats();
    redis.resume();
    let mut slices = vec![slice_of(first.join().unwrap())];
    slices.extend(rest.into_iter().map(|h| slice_of(h.join().unwrap())));
    let s = l.stats();
    assert_eq!(l.waiting(), 0);
    assert_eq!(s.leases - before.leases, 21, "{s:?}");
    if slices.iter().all(|&x| x == slices[0]) {
        // No slice ended meanwhile (no lease arrived dead): the first
        // request, then the 20 others together.
        assert_eq!(s.round_trips - before.round_trips, 2, "{s:?}");
    }
    // Each key leased once, of the one permit its request took.
    for i in 0..=20 {
        let counts = recorded(&redis, "batch", &format!("k{i}"));
        assert_eq!(counts.values().sum::<u64>(), 1, "k{i}: {counts:?}");
    }
    // A key seen once holds nothing on the node: its next request leases
    // again (a lease sized to its rate).
    assert!(l.decide("k1", 1).is_granted());
    assert_eq!(l.stats().leases, s.leases + 1);
}

#[test]
fn several_requests_of_one_key_in_a_batch_share_its_lease() {
    let redis = RedisServer::start();
    let l = Arc::new(builder(&redis.url(), "share").build().unwrap());
    assert!(l.decide("warm", 1).is_granted());
    let first = freeze_with_one_in_flight(&redis, &l, "other");
    let same: Vec<_> = (0..6).map(|_| decide_on_thread(&l, "k".into())).collect();
    wait_until(10, "6 requests queued", || l.waiting() == 6);
    let before = l.stats();
    redis.resume();
    assert!(first.join().unwrap().is_granted());
    for h in same {
        assert!(h.join().unwrap().is_granted());
    }
    let s = l.stats();
    // One lease of the key, of what its 6 requests needed together.
    assert_eq!(s.leases - before.leases, 2, "{s:?}");
    assert_eq!(recorded(&redis, "share", "k").values().sum::<u64>(), 6);
}

#[test]
fn a_full_queue_sheds_at_once_with_the_time_to_drain_it() {
    let redis = RedisServer::start();
    // Leases of at most 4 permits: too small for a renewal before they run
    // out.
    let l = Arc::new(
        builder(&redis.url(), "shed")
            .max_queue(4)
            .max_batch(4)
            .build()
            .unwrap(),
    );
    // Twice: the second lease follows the key's rate, more than it takes.
    assert!(l.decide("warm", 1).is_granted() && l.decide("warm", 1).is_granted());
    // A key whose lease ran out: 1, then 4, used up.
    for _ in 0..5 {
        assert!(l.decide("spent", 1).is_granted());
    }
    assert_eq!(l.stats().leased_permits, 1 + 4 + 1 + 4);
    let first = freeze_with_one_in_flight(&redis, &l, "k0");
    let queued: Vec<_> = (1..=4)
        .map(|i| decide_on_thread(&l, format!("k{i}")))
        .collect();
    wait_until(10, "4 requests queued", || l.waiting() == 4);
    // The fifth waiting request: shed on this thread, the server frozen.
    match l.decide("k5", 1) {
        Grant::Overloaded { retry_after } => assert!(retry_after > Duration::ZERO),
        other => panic!("{other:?}"),
    }
    assert!(!l.try_acquire("k5", 1));
    // A key whose lease this node holds is not held up; one whose lease ran
    // out joins the warm keys' queue, ahead, which the flood does not fill.
    assert!(l.decide("warm", 1).is_granted());
    assert_eq!(l.stats().shed, 2);
    let spent = decide_on_thread(&l, "spent".into());
    wait_until(10, "the warm key queued", || l.waiting() == 5);
    redis.resume();
    assert!(first.join().unwrap().is_granted());
    for h in queued {
        assert!(h.join().unwrap().is_granted());
    }
    assert!(spent.join().unwrap().is_granted());
    // Nothing of the shed requests reached Redis.
    assert!(recorded(&redis, "shed", "k5").is_empty());
    assert!(l.decide("k5", 1).is_granted());
}

#[test]
fn shed_by_the_outage_policy_when_asked_to() {
    let redis = RedisServer::start();
    let l = Arc::new(
        builder(&redis.url(), "shedout")
            .max_queue(1)
            .shed(Shed::Outage)
            .outage(OutagePolicy::FailOpen)
            .build()
            .unwrap(),
    );
    assert!(l.decide("warm", 1).is_granted());
    let first = freeze_with_one_in_flight(&redis, &l, "k0");
    let queued = decide_on_thread(&l, "k1".into());
    wait_until(10, "1 request queued", || l.waiting() == 1);
    assert_eq!(l.decide("k2", 1), Grant::OutageAdmitted);
    let s = l.stats();
    assert_eq!((s.shed, s.outage_admitted), (1, 1), "{s:?}");
    redis.resume();
    assert!(first.join().unwrap().is_granted());
    assert!(queued.join().unwrap().is_granted());
}

#[test]
fn an_async_request_waits_without_a_thread_and_a_dropped_one_is_not_sent() {
    let redis = RedisServer::start();
    let l = Arc::new(builder(&redis.url(), "async").build().unwrap());
    // Twice: the second lease follows the key's rate, more than it takes.
    assert!(l.decide("warm", 1).is_granted() && l.decide("warm", 1).is_granted());
    // From a held lease: ready at once.
    assert!(l.decide_async("warm", 1).is_ready());
    redis.pause();
    // The lane's thread sends the first; the others queue behind it.
    let first = l.decide_async("a0", 1);
    assert!(!first.is_ready());
    wait_until(10, "the first request in flight", || {
        l.health().batch_in_flight
    });
    let rest: Vec<_> = (1..=8)
        .map(|i| l.decide_async(format!("a{i}").as_str(), 1))
        .collect();
    let gone = l.decide_async("gone", 1);
    assert_eq!(l.waiting(), 9);
    drop(gone);
    redis.resume();
    assert!(futures_executor::block_on(first).is_granted());
    for f in rest {
        assert!(futures_executor::block_on(f).is_granted());
    }
    wait_until(10, "the batch filed", || !l.health().batch_in_flight);
    // The dropped request was never sent.
    assert!(recorded(&redis, "async", "gone").is_empty());
    for i in 0..=8 {
        assert_eq!(
            recorded(&redis, "async", &format!("a{i}"))
                .values()
                .sum::<u64>(),
            1
        );
    }
}

#[test]
fn permits_leased_for_a_request_dropped_in_flight_serve_the_keys_next_one() {
    let redis = RedisServer::start();
    let l = Arc::new(builder(&redis.url(), "dropped").build().unwrap());
    assert!(l.decide("warm", 1).is_granted());
    redis.pause();
    let f = l.decide_async("k", 1);
    wait_until(10, "the request in flight", || l.health().batch_in_flight);
    drop(f);
    redis.resume();
    wait_until(10, "its reply filed", || !l.health().batch_in_flight);
    let trips = l.stats().round_trips;
    // The lease's permit was kept for the key: granted without a round
    // trip, and counted once in Redis.
    assert!(l.decide("k", 1).is_granted());
    assert_eq!(l.stats().round_trips, trips);
    assert_eq!(recorded(&redis, "dropped", "k").values().sum::<u64>(), 1);
}

/// A key whose `Hash` panics on a limiter's lane thread (the driver of
/// a batch), and nowhere else.
#[derive(Clone, PartialEq, Eq)]
struct LaneBomb(u64);

impl std::hash::Hash for LaneBomb {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let lane = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("stripecount-redis-lane"));
        assert!(!(lane && self.0 == 13), "Hash panics on the lane thread");
        self.0.hash(h);
    }
}

impl RedisKey for LaneBomb {
    fn write_key(&self, out: &mut Vec<u8>) {
        self.0.write_key(out);
    }
    fn read_key(bytes: &[u8]) -> Option<Self> {
        u64::read_key(bytes).map(LaneBomb)
    }
}

#[test]
fn a_panic_of_the_key_code_in_a_batch_reaches_its_caller_only() {
    let redis = RedisServer::start();
    let l: ClusterLimiter<LaneBomb> = builder(&redis.url(), "kpanic").build().unwrap();
    // An async request is sent by the lane's thread, whose screen hashes
    // the key: the panic is the request's answer, resumed where it is
    // awaited.
    let f = l.decide_async(&LaneBomb(13), 1);
    let r = catch_unwind(AssertUnwindSafe(|| futures_executor::block_on(f)));
    assert!(r.is_err(), "the key's panic is resumed on its caller");
    assert_eq!(l.stats().key_panics, 1);
    // Nothing was leased for it; the limiter goes on with the other keys,
    // whoever drives their batch.
    assert!(recorded(&redis, "kpanic", "13").is_empty());
    assert!(l.decide(&LaneBomb(14), 1).is_granted());
    assert!(futures_executor::block_on(l.decide_async(&LaneBomb(15), 1)).is_granted());
    assert_eq!(recorded(&redis, "kpanic", "14").values().sum::<u64>(), 1);
    assert_eq!(l.stats().key_panics, 1);
}

#[test]
fn a_panic_of_the_key_code_filing_a_lease_loses_and_doubles_nothing() {
    let redis = RedisServer::start();
    let ctl = Ctl::new();
    let l: ClusterLimiter<Flaky> = builder(&redis.url(), "kfile").max_batch(8).build().unwrap();
    assert!(l.decide(&Flaky::new(2, &ctl), 1).is_granted());
    // The key's second lease (8, sized to its rate) has permits left, so
    // filing it keeps a record of the key: the caller's clone is the
    // first, the record's (after the request was granted) panics.
    ctl.clones.store(0, Ordering::SeqCst);
    ctl.panic_at.store(2, Ordering::SeqCst);
    ctl.armed.store(true, Ordering::SeqCst);
    let g = l.decide(&Flaky::new(2, &ctl), 1);
    ctl.armed.store(false, Ordering::SeqCst);
    assert!(g.is_granted(), "decided before the panic: {g:?}");
    let s = l.stats();
    assert_eq!((s.key_panics, s.leased_permits), (1, 1 + 8), "{s:?}");
    // The 7 permits it could not keep go back with the next request.
    assert!(l.decide(&Flaky::new(3, &ctl), 1).is_granted());
    assert_eq!(recorded(&redis, "kfile", "2").values().sum::<u64>(), 2);
    assert!(l.decide(&Flaky::new(2, &ctl), 1).is_granted());
}

/// Two nodes, 12 threads each (half of them async), 8 keys, 1 or 2 permits
/// at a time, a strict limit of 30 per 400 ms in 4 slices, for 2 s: the
/// batches carry several keys and several requests of a key at once. No
/// key's grants exceed the limit in any 5 consecutive slices, and once the
/// nodes gave back what they held, Redis holds exactly what was granted in
/// every slice still judged.
#[test]
fn batches_of_many_keys_and_threads_never_exceed_the_limit_and_count_exactly() {
    const LIMIT: u64 = 30;
    const SLICE_MS: u64 = 100;
    const SLICES: u64 = 4;
    let redis = RedisServer::start();
    let quota = Quota::per(LIMIT, Duration::from_millis(SLICE_MS * SLICES))
        .slices(SLICES as usize)
        .strict();
    let nodes: Vec<Arc<ClusterLimiter<String>>> = (0..2)
        .map(|_| {
            Arc::new(
                ClusterLimiter::builder(&redis.url(), "many", quota)
                    .max_batch(8)
                    .sweep_interval(Duration::from_millis(10))
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let slice_ns = SLICE_MS * 1_000_000;
    let start = std::time::Instant::now();
    let run = Duration::from_secs(2);
    let threads: Vec<_> = nodes
        .iter()
        .flat_map(|n| (0..12u64).map(move |t| (Arc::clone(n), t)))
        .map(|(node, t)| {
            std::thread::spawn(move || {
                let mut rng = support::Rng::new(t + 1);
                let mut grants = Vec::new();
                while start.elapsed() < run {
                    let key = format!("k{}", rng.next() % 8);
                    let n = 1 + rng.next() % 2;
                    let g = if t % 2 == 0 {
                        node.decide(key.as_str(), n)
                    } else {
                        futures_executor::block_on(node.decide_async(key.as_str(), n))
                    };
                    match g {
                        Grant::Granted { slice_start } => {
                            grants.push((key, slice_start.as_nanos() / slice_ns, n))
                        }
                        Grant::Refused { .. } => {}
                        other => panic!("Redis is up: {other:?}"),
                    }
                }
                grants
            })
        })
        .collect();
    let mut per: std::collections::HashMap<String, std::collections::HashMap<u64, u64>> =
        Default::default();
    for t in threads {
        for (k, e, n) in t.join().unwrap() {
            *per.entry(k).or_default().entry(e).or_default() += n;
        }
    }
    support::never_over(&per, SLICES + 1, LIMIT);
    for n in &nodes {
        n.release_all().unwrap();
        assert_eq!(n.stats().errors, 0, "{:?}", n.stats());
    }
    let mut conn = redis.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let cur = (s * 1_000_000 + us) / (SLICE_MS * 1_000);
    for (k, granted) in &per {
        let rec = recorded(&redis, "many", k);
        // Returns are applied to every slice still judged (the oldest may
        // leave meanwhile: not checked).
        for e in cur + 2 - (SLICES + 1)..=cur {
            assert_eq!(
                rec.get(&e).copied().unwrap_or(0),
                granted.get(&e).copied().unwrap_or(0),
                "{k}, slice {e}: recorded {rec:?}, granted {granted:?}"
            );
        }
    }
    let total: u64 = per.values().flat_map(|s| s.values()).sum();
    assert!(total > 8 * LIMIT, "{total} granted: the keys were not busy");
}

/// A lease that falls below a quarter of what it held asks for the next
/// one while it still grants: the key's requests never wait for Redis,
/// the old lease's rest is returned once the new one is in, and Redis
/// counts exactly what was granted once everything is given back.
#[test]
fn a_lease_running_low_is_renewed_before_it_runs_out() {
    let redis = RedisServer::start();
    let day = Duration::from_secs(86_400);
    let l: ClusterLimiter<String> =
        ClusterLimiter::builder(&redis.url(), "renew", Quota::per(10_000, day).slices(1))
            .max_batch(100)
            .renew_early(true)
            .build()
            .unwrap();
    // One permit, then a lease sized to the key's rate: 100, one taken.
    assert!(l.decide("k", 1).is_granted() && l.decide("k", 1).is_granted());
    let s0 = l.stats();
    assert_eq!((s0.leases, s0.leased_permits, s0.renewals), (2, 101, 0));
    // 99 held, renewal mark 16: the grant from 16 to 15 asks.
    for i in 0..84 {
        let g = l.decide_from_lease("k", 1);
        assert!(matches!(g, Some(Grant::Granted { .. })), "grant {i}: {g:?}");
    }
    assert_eq!(l.stats().renewals, 1);
    wait_until(10, "the renewal filed", || l.stats().leases == 3);
    // The held lease never ran dry: 15 were left when the new one came.
    let s = l.stats();
    assert_eq!(s.renewals, 1, "{s:?}");
    assert_eq!(s.leased_permits, 101 + 85, "{s:?}");
    // 85 held, mark 16: 60 more stay above it (no second renewal).
    for i in 0..60 {
        let g = l.decide_from_lease("k", 1);
        assert!(
            matches!(g, Some(Grant::Granted { .. })),
            "grant {i} of the new lease: {g:?}"
        );
    }
    assert_eq!(l.stats().renewals, 1);
    l.release_all().unwrap();
    assert_eq!(
        recorded(&redis, "renew", "k").values().sum::<u64>(),
        2 + 84 + 60
    );
}
