//! The cluster limiter (`ClusterLimiter`) against real redis-servers:
//! three nodes hammering hot and cold keys never grant more than the limit
//! in any window (each grant attributed to its lease's slice) and grant
//! most of it; each outage policy while a proxy cuts Redis off; lost
//! replies of a lease and of a return; bad configuration. Leases meeting
//! their slices' ends are in `lease_slices.rs`.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount::Quota;
use stripecount_redis::{
    ClusterError, ClusterLimiter, ClusterLimiterBuilder, Grant, LinkState, OutagePolicy, WallClock,
};
use support::proxy::{Fault, Proxy};
use support::{recorded, RedisServer, Rng, Skewed};

/// The system clock, Unix nanoseconds.
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The server's slice now, for slices of `slice_ms`.
fn server_slice(redis: &RedisServer, slice_ms: u64) -> u64 {
    let mut c = redis.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
    (s * 1_000_000 + us) / (slice_ms * 1_000)
}

#[test]
fn three_nodes_one_5s_ahead_one_5s_behind_never_exceed_the_limit_and_grant_most_of_it() {
    let redis = RedisServer::start();
    const LIMIT: u64 = 300;
    const SLICES: u64 = 4;
    const SLICE_MS: u64 = 200;
    const HOT: u64 = 2;
    const COLD: u64 = 40;
    let nodes: Vec<Arc<ClusterLimiter<String, Skewed>>> = [0i64, 5_000_000_000, -5_000_000_000]
        .iter()
        .map(|&off| {
            Arc::new(
                ClusterLimiter::builder(
                    &redis.url(),
                    "hammer",
                    Quota::per(LIMIT, Duration::from_millis(SLICE_MS * SLICES))
                        .slices(SLICES as usize),
                )
                .max_batch(64)
                .sweep_interval(Duration::from_millis(20))
                .clock(Skewed {
                    wall: WallClock::new(),
                    off: off as u64,
                })
                .build()
                .unwrap(),
            )
        })
        .collect();
    // At least 2.4 s, and until the hot keys were refused (overloaded)
    // a few times: on a slow machine the run takes longer, and the verdict
    // is the same.
    let run = Duration::from_millis(2_400);
    let start = Instant::now();
    let hot_refused = Arc::new(AtomicU64::new(0));
    let go_on = {
        let hot_refused = Arc::clone(&hot_refused);
        move || {
            let t = start.elapsed();
            assert!(
                t < Duration::from_secs(120),
                "the hot keys were never refused"
            );
            t < run || hot_refused.load(Ordering::Relaxed) < 20
        }
    };
    let mut threads = Vec::new();
    for (ni, node) in nodes.iter().enumerate() {
        for t in 0..3u64 {
            let node = Arc::clone(node);
            let (go_on, hot_refused) = (go_on.clone(), Arc::clone(&hot_refused));
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng::new(ni as u64 * 10 + t + 1);
                let mut grants: Vec<(String, u64, u64)> = Vec::new();
                // Each grant's slice bounds its time: it was granted between
                // the two readings of the system clock (Redis's, on this
                // machine) around the call, and within its lease's slice.
                let slice_ns = SLICE_MS * 1_000_000;
                let mut late = 0u64;
                let mut denied = 0u64;
                while go_on() {
                    let r = rng.next();
                    let key = if r % 10 < 7 {
                        format!("hot{}", (r >> 8) % HOT)
                    } else {
                        format!("cold{}", (r >> 8) % COLD)
                    };
                    let n = 1 + (r >> 20) % 3;
                    let before = unix_ns();
                    let g = node.decide(key.as_str(), n);
                    let after = unix_ns();
                    match g {
                        Grant::Granted { slice_start } => {
                            let slice = slice_start.as_nanos() / slice_ns;
                            if before >= (slice + 1) * slice_ns || after < slice * slice_ns {
                                late += 1;
                            }
                            grants.push((key, slice, n))
                        }
                        Grant::Refused { .. } => {
                            denied += 1;
                            if key.starts_with("hot") {
                                hot_refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        other => panic!("Redis is up: {other:?}"),
                    }
                }
                assert_eq!(late, 0, "grants outside their lease's slice");
                (grants, denied)
            }));
        }
    }
    let mut per: HashMap<String, HashMap<u64, u64>> = HashMap::new();
    let mut by_node = [0u64; 3];
    let mut denied = 0;
    for (i, t) in threads.into_iter().enumerate() {
        let (grants, d) = t.join().unwrap();
        denied += d;
        by_node[i / 3] += grants.len() as u64;
        for (k, e, n) in grants {
            *per.entry(k).or_default().entry(e).or_default() += n;
        }
    }
    assert!(denied > 0, "the hot keys were not overloaded");
    assert!(
        by_node.iter().all(|&g| g > 0),
        "every node granted: {by_node:?}"
    );
    // No window of any key holds more than the limit.
    support::never_over(&per, SLICES, LIMIT);
    // The hot keys, overloaded throughout: their windows wholly inside the
    // run (the first full one after the first slice, up to the one before
    // the last) grant at least 80% of the limit on average.
    for h in 0..HOT {
        let slices = &per[&format!("hot{h}")];
        let (lo, hi) = (*slices.keys().min().unwrap(), *slices.keys().max().unwrap());
        let ends: Vec<u64> = (lo + SLICES..hi).collect();
        assert!(ends.len() >= 3, "too few whole windows: {lo}..{hi}");
        let total: u64 = ends
            .iter()
            .map(|&j| {
                (j + 1 - SLICES..=j)
                    .filter_map(|e| slices.get(&e))
                    .sum::<u64>()
            })
            .sum();
        let avg = total / ends.len() as u64;
        eprintln!(
            "hot{h}: {avg} of {LIMIT} per whole window on average, {} windows",
            ends.len()
        );
        assert!(
            avg * 10 >= LIMIT * 8,
            "hot{h}: {avg} of {LIMIT} granted per window on average ({slices:?})"
        );
    }
    // Every node gives back what it holds: Redis then holds, for every
    // live slice, exactly the permits granted in it (none returned twice,
    // none lost).
    for n in &nodes {
        n.release_all().unwrap();
    }
    let cur = server_slice(&redis, SLICE_MS);
    for (k, slices) in &per {
        let rec = recorded(&redis, "hammer", k);
        for e in cur + 2 - SLICES..=cur {
            assert_eq!(
                rec.get(&e).copied().unwrap_or(0),
                slices.get(&e).copied().unwrap_or(0),
                "{k} slice {e}"
            );
        }
    }
    for n in &nodes {
        let s = n.stats();
        assert_eq!(s.errors, 0, "{s:?}");
        assert!(s.returned_permits > 0, "{s:?}");
    }
}

/// A node behind a proxy, with one slice a day (no lease ends mid-test).
fn proxied(url: &str, ns: &str, limit: u64, policy: OutagePolicy) -> ClusterLimiter<String> {
    builder(url, ns, limit).outage(policy).build().unwrap()
}

fn builder(url: &str, ns: &str, limit: u64) -> ClusterLimiterBuilder<String> {
    builder_of(
        url,
        ns,
        Quota::per(limit, Duration::from_secs(86_400)).slices(1),
    )
}

fn builder_of(url: &str, ns: &str, quota: Quota) -> ClusterLimiterBuilder<String> {
    ClusterLimiter::builder(url, ns, quota)
        .max_batch(8)
        .timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        // No background sweep: each test decides when requests are resent.
        .sweep_interval(Duration::from_secs(3_600))
}

/// Takes 2 permits while Redis is up: a lease of 1, which runs out at
/// once, then one of `max_batch` (8: a slice's worth at that rate is
/// more), so 7 are held after.
fn take_two(l: &ClusterLimiter<String>, key: &str) {
    for _ in 0..2 {
        assert!(matches!(l.decide(key, 1), Grant::Granted { .. }));
    }
    let s = l.stats();
    assert_eq!((s.leases, s.leased_permits), (2, 9), "{s:?}");
}

/// Decisions of 40 single permits while Redis is cut off.
fn during_outage(l: &ClusterLimiter<String>, key: &str) -> HashMap<&'static str, u64> {
    let mut m = HashMap::new();
    for _ in 0..40 {
        let k = match l.decide(key, 1) {
            Grant::Granted { .. } => "lease",
            Grant::Refused { .. } => "refused",
            Grant::OutageAdmitted => "admitted",
            Grant::OutageRefused => "outage_refused",
            _ => "other",
        };
        *m.entry(k).or_default() += 1;
    }
    m
}

#[test]
fn fail_closed_grants_only_what_its_leases_hold_while_redis_is_cut_off() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let l = proxied(&proxy.url(), "closed", 100, OutagePolicy::FailClosed);
    take_two(&l, "k");
    proxy.set_down(true);
    let m = during_outage(&l, "k");
    assert_eq!(m.get("lease"), Some(&7)); // the held lease, to its last permit
    assert_eq!(m.get("outage_refused"), Some(&33));
    assert_eq!(m.len(), 2);
    let h = l.health();
    assert_eq!(h.state, LinkState::Disconnected);
    assert!(h.last_error.is_some_and(|e| e.is_transient()));
    assert_eq!(l.stats().outage_refused, 33);
    // Back: leases again, and Redis counts every grant once.
    proxy.set_down(false);
    support::wait_until(10, "a lease after the outage", || {
        matches!(l.decide("k", 1), Grant::Granted { .. })
    });
    l.release_all().unwrap();
    let rec: u64 = recorded(&redis, "closed", "k").values().sum();
    assert_eq!(rec, 10); // 2 + 7 + 1 granted
}

#[test]
fn fail_open_admits_everything_while_redis_is_cut_off() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let l = proxied(&proxy.url(), "open", 40, OutagePolicy::FailOpen);
    take_two(&l, "k");
    proxy.set_down(true);
    let m = during_outage(&l, "k");
    // 2 + 40 granted against a limit of 40: the limit is not enforced.
    assert_eq!(m.get("lease"), Some(&7));
    assert_eq!(m.get("admitted"), Some(&33));
    assert_eq!(l.stats().outage_admitted, 33);
}

#[test]
fn local_share_admits_the_nodes_share_of_the_limit_while_redis_is_cut_off() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let l = proxied(
        &proxy.url(),
        "share",
        100,
        OutagePolicy::LocalShare { expected_nodes: 4 },
    );
    take_two(&l, "k");
    proxy.set_down(true);
    let m = during_outage(&l, "k");
    assert_eq!(m.get("lease"), Some(&7));
    assert_eq!(m.get("admitted"), Some(&25)); // 100 / 4, per window
    assert_eq!(m.get("outage_refused"), Some(&8));
}

#[test]
fn a_lease_whose_reply_was_lost_is_granted_once() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let l = proxied(&proxy.url(), "lostlease", 100, OutagePolicy::FailClosed);
    take_two(&l, "k"); // and 8 more next time (max_batch)
    for _ in 0..7 {
        assert!(l.try_acquire("k", 1));
    }
    // The next request of the namespace (each names its buckets).
    proxy.arm(Fault::DropReply(b"lostlease:lb:3\r\n".to_vec()));
    assert_eq!(l.decide("k", 1), Grant::OutageRefused);
    assert_eq!(proxy.fired(), 1);
    assert!(l.health().batch_in_flight);
    // Redis applied it: 9 + 8.
    assert_eq!(recorded(&redis, "lostlease", "k").values().sum::<u64>(), 17);
    // The next request resends it (Redis answers from its record), then
    // grants from the lease it made.
    support::wait_until(10, "the resend", || {
        matches!(l.decide("k", 1), Grant::Granted { .. })
    });
    let s = l.stats();
    assert_eq!((s.replays, s.leases, s.leased_permits), (1, 3, 17), "{s:?}");
    assert!(!l.health().batch_in_flight);
    // 9 granted before, 1 now: the other 7 of the lease are held, and
    // given back once.
    l.release_all().unwrap();
    assert_eq!(recorded(&redis, "lostlease", "k").values().sum::<u64>(), 10);
}

#[test]
fn a_return_whose_reply_was_lost_is_applied_once() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let l = proxied(&proxy.url(), "lostret", 100, OutagePolicy::FailClosed);
    take_two(&l, "k"); // 2 granted, 7 held, 9 leased
    proxy.arm(Fault::DropReply(b"lostret:lb:3\r\n".to_vec()));
    assert!(l.release_all().is_err());
    assert_eq!(proxy.fired(), 1);
    assert_eq!(recorded(&redis, "lostret", "k").values().sum::<u64>(), 2);
    support::wait_until(10, "the resend", || l.release_all().is_ok());
    let s = l.stats();
    assert_eq!((s.replays, s.returned_permits), (1, 7), "{s:?}");
    // Returned twice would leave 0 (and 105 would fit below).
    assert_eq!(recorded(&redis, "lostret", "k").values().sum::<u64>(), 2);
    // The permits are free again: 98 more fit.
    let more = (0..200).filter(|_| l.try_acquire("k", 1)).count();
    assert_eq!(more, 98);
}

#[test]
fn a_node_with_another_limit_is_refused_by_redis_and_bad_configs_are_typed() {
    let redis = RedisServer::start();
    let a = builder(&redis.url(), "shape", 10).build().unwrap();
    assert!(a.try_acquire("k", 1));
    let b = builder(&redis.url(), "shape", 11).build().unwrap();
    assert_eq!(b.decide("k", 1), Grant::OutageRefused);
    assert!(matches!(
        b.health().last_error,
        Some(ClusterError::ShapeMismatch(_))
    ));
    let bad = |b: ClusterLimiterBuilder<String>| matches!(b.build(), Err(ClusterError::Config(_)));
    let url = redis.url();
    assert!(bad(builder(&url, "x", 0)));
    assert!(bad(builder(&url, "", 1)));
    let per = |window: Duration, slices: usize| Quota::per(1, window).slices(slices);
    assert!(bad(builder_of(&url, "x", per(Duration::from_secs(1), 0))));
    assert!(bad(builder_of(
        &url,
        "x",
        per(Duration::from_millis(1500), 1000)
    )));
    assert!(bad(builder_of(
        &url,
        "x",
        per(Duration::from_secs(2 * 86_400), 1)
    )));
    assert!(bad(builder(&url, "x", 1).max_batch(0)));
    assert!(bad(
        builder(&url, "x", 1).outage(OutagePolicy::LocalShare { expected_nodes: 0 })
    ));
    // More than the limit never fits; nothing is leased for it.
    assert_eq!(a.decide("k", 11), Grant::Refused { retry_after: None });
    assert!(a.try_acquire("k", 0));
}

/// `decide_from_lease` decides from the held lease only: `None` (nothing
/// taken) before a round trip leased a batch, then grants from it without
/// I/O (Redis killed meanwhile: still granted) exactly what the lease
/// holds, and `None` once it is used up. (A day's slice: no slice ends
/// during the test.)
#[test]
fn decide_from_lease_grants_from_the_held_lease_only() {
    let mut redis = RedisServer::start();
    let l = builder(&redis.url(), "held", 100).build().unwrap();
    assert_eq!(l.decide_from_lease("k", 1), None);
    assert_eq!(l.stats().leases, 0, "no round trip");
    take_two(&l, "k");
    let leased = l.stats();
    redis.kill();
    let mut from_lease = 0;
    while let Some(g) = l.decide_from_lease("k", 1) {
        assert!(matches!(g, Grant::Granted { .. }), "{g:?}");
        from_lease += 1;
        assert!(from_lease <= 100, "at most the limit");
    }
    assert_eq!(from_lease, leased.leased_permits - 2, "what the lease held");
    assert_eq!(l.stats().round_trips, leased.round_trips, "no I/O");
    assert_eq!(
        l.decide_from_lease("k", 101),
        Some(Grant::Refused { retry_after: None })
    );
}
