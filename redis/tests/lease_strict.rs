//! Strict quotas on the cluster limiter (`ClusterLimiter`), against real
//! redis-servers. A quota of `S` slices holds the limit in any `S`
//! consecutive server slices; a strict one in any `S + 1`, so in every span
//! of its window. Several nodes and threads hammer one key, and every
//! grant's server slice is checked against both spans. A strict refusal
//! waits, and a strict key lives, one slice longer; a return to the slice
//! one window back still counts; the outage policy's local share is strict
//! too.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{Quota, Timestamp};
use stripecount_redis::{ClusterLimiter, Grant, OutagePolicy};
use support::{busiest, recorded, RedisServer};

const SLICE_MS: u64 = 50;
const SLICES: u64 = 4;
const LIMIT: u64 = 40;
const NODES: usize = 3;
const THREADS: usize = 2;
const RUN: Duration = Duration::from_millis(1_200);

fn quota() -> Quota {
    Quota::per(LIMIT, Duration::from_millis(SLICE_MS * SLICES)).slices(SLICES as usize)
}

/// The server's slice now, for slices of `slice_ms`.
fn server_slice(redis: &RedisServer, slice_ms: u64) -> u64 {
    server_us(redis) / (slice_ms * 1_000)
}

/// The server's time now, in Unix microseconds.
fn server_us(redis: &RedisServer) -> u64 {
    let mut c = redis.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
    s * 1_000_000 + us
}

/// `NODES` limiters of `quota` on one server, `THREADS` threads each,
/// all asking for one key (1 or 2 permits at a time) for `RUN`. Returns
/// the permits granted per server slice (from each grant's
/// `slice_start`) and the refusals. Checks, after every node gave back
/// what it held, that Redis holds exactly what was granted in each slice
/// still judged.
fn hammer(ns: &str, quota: Quota) -> (BTreeMap<u64, u64>, u64) {
    let redis = RedisServer::start();
    let nodes: Vec<Arc<ClusterLimiter<String>>> = (0..NODES)
        .map(|_| {
            Arc::new(
                ClusterLimiter::builder(&redis.url(), ns, quota)
                    .max_batch(16)
                    .sweep_interval(Duration::from_millis(10))
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let slice_ns = SLICE_MS * 1_000_000;
    let start = Instant::now();
    let mut threads = Vec::new();
    for (ni, node) in nodes.iter().enumerate() {
        for t in 0..THREADS {
            let node = Arc::clone(node);
            threads.push(std::thread::spawn(move || {
                let mut grants: Vec<(u64, u64)> = Vec::new();
                let mut denied = 0u64;
                let mut i = (ni + t) as u64;
                while start.elapsed() < RUN {
                    i += 1;
                    let n = 1 + i % 2;
                    match node.decide("k", n) {
                        Grant::Granted { slice_start } => {
                            assert_eq!(slice_start.as_nanos() % slice_ns, 0);
                            grants.push((slice_start.as_nanos() / slice_ns, n));
                        }
                        Grant::Refused { .. } => denied += 1,
                        other => panic!("Redis is up: {other:?}"),
                    }
                }
                (grants, denied)
            }));
        }
    }
    let mut per = BTreeMap::new();
    let mut denied = 0;
    for t in threads {
        let (grants, d) = t.join().unwrap();
        denied += d;
        for (e, n) in grants {
            *per.entry(e).or_default() += n;
        }
    }
    for n in &nodes {
        n.release_all().unwrap();
        assert_eq!(n.stats().errors, 0, "{:?}", n.stats());
    }
    // Returns are applied to every slice still judged (the oldest may
    // leave meanwhile: not checked).
    let judged = SLICES + u64::from(quota.is_strict());
    let cur = server_slice(&redis, SLICE_MS);
    let rec = recorded(&redis, ns, "k");
    for e in cur + 2 - judged..=cur {
        assert_eq!(
            rec.get(&e).copied().unwrap_or(0),
            per.get(&e).copied().unwrap_or(0),
            "slice {e}: recorded {rec:?}, granted {per:?}"
        );
    }
    (per, denied)
}

#[test]
fn a_strict_quota_holds_the_limit_in_every_s_plus_1_slices_across_nodes_and_threads() {
    let (per, denied) = hammer("strict", quota().strict());
    assert!(denied > 0, "the key was not overloaded");
    let total: u64 = per.values().sum();
    assert!(total >= 2 * LIMIT, "{total} granted: {per:?}");
    let (w, j) = busiest(&per, SLICES + 1);
    assert!(
        w <= LIMIT,
        "{w} granted in the {} slices ending at {j}: {per:?}",
        SLICES + 1
    );
}

#[test]
fn a_default_quota_holds_the_limit_in_every_s_slices_not_in_s_plus_1() {
    let (per, denied) = hammer("default", quota());
    assert!(denied > 0, "the key was not overloaded");
    let (w, j) = busiest(&per, SLICES);
    assert!(
        w <= LIMIT,
        "{w} granted in the {SLICES} slices ending at {j}: {per:?}"
    );
    // The check has teeth: overloaded, a default quota grants the limit
    // again as soon as the slice that held it leaves the `S` slices, so
    // some `S + 1` slices hold more than the limit.
    let (w, _) = busiest(&per, SLICES + 1);
    assert!(w > LIMIT, "{w} at most in {} slices: {per:?}", SLICES + 1);
}

#[test]
fn a_strict_refusal_waits_and_its_key_lives_one_slice_longer() {
    let redis = RedisServer::start();
    let hour = Duration::from_secs(3_600);
    for (ns, strict) in [("retry", false), ("retry_strict", true)] {
        let q = Quota::per(3, 4 * hour).slices(4);
        let l = ClusterLimiter::<String>::builder(
            &redis.url(),
            ns,
            if strict { q.strict() } else { q },
        )
        .max_batch(8)
        .sweep_interval(Duration::from_secs(3_600))
        .build()
        .unwrap();
        for _ in 0..3 {
            assert!(l.try_acquire("k", 1));
        }
        // All 3 are in the current slice: the request fits when it leaves
        // the slices judged, 4 of them (3 to 4 hours from now), or 5 when
        // strict (4 to 5 hours).
        let (lo, hi) = if strict { (4, 5) } else { (3, 4) };
        match l.decide("k", 1) {
            Grant::Refused {
                retry_after: Some(d),
            } => assert!(d > lo * hour && d <= hi * hour, "{ns}: {d:?}"),
            other => panic!("{ns}: {other:?}"),
        }
        // Its bucket expires after that, within two generations of
        // ceil(J / 2) slices more.
        let mut conn = redis.conn();
        let bucket = (0..4)
            .map(|r| format!("{ns}:lb:{r}"))
            .find(|b| {
                redis::cmd("HEXISTS")
                    .arg(b)
                    .arg("k")
                    .query::<bool>(&mut conn)
                    .unwrap()
            })
            .expect("k has a ring");
        let ttl: i64 = redis::cmd("PTTL").arg(&bucket).query(&mut conn).unwrap();
        let ttl = Duration::from_millis(u64::try_from(ttl).expect("the bucket expires"));
        let g = hi.div_ceil(2);
        assert!(
            ttl > lo * hour && ttl <= (hi + 2 * g - 1) * hour,
            "{ns}: {ttl:?}"
        );
    }
}

/// A lease's unused permits returned when its slice is `S` slices back:
/// out of a default quota's window (nothing to return to), still in a
/// strict one's, where the return frees them.
#[test]
fn a_strict_quota_takes_returns_to_the_slice_one_window_back() {
    let redis = RedisServer::start();
    const SLICE_MS: u64 = 200;
    const S: u64 = 3;
    let slice_us = SLICE_MS * 1_000;
    let quota = Quota::per(100, Duration::from_millis(SLICE_MS * S))
        .slices(S as usize)
        .strict();
    let l: ClusterLimiter<String> = ClusterLimiter::builder(&redis.url(), "back", quota)
        .max_batch(8)
        .sweep_interval(Duration::from_secs(3_600))
        .build()
        .unwrap();
    assert!(l.decide("warm", 1).is_granted()); // connected, script loaded
    for attempt in 0.. {
        assert!(attempt < 10, "no two grants fell in one slice");
        // Start 20 ms into a slice: two round trips stay inside it.
        let now = server_us(&redis);
        let next = (now / slice_us + 1) * slice_us + 20_000;
        std::thread::sleep(Duration::from_micros(next - now));
        let key = format!("k{attempt}");
        // A lease of 1, then one of 8 (a slice's worth at that rate is
        // more): 2 granted, 7 held.
        let slices: Vec<u64> = (0..2)
            .map(|_| match l.decide(key.as_str(), 1) {
                Grant::Granted { slice_start } => slice_start.as_nanos() / (slice_us * 1_000),
                other => panic!("{other:?}"),
            })
            .collect();
        if slices[0] != slices[1] {
            l.release_all().unwrap();
            continue;
        }
        let c = slices[0];
        assert_eq!(recorded(&redis, "back", &key).get(&c), Some(&9));
        // Into slice c + S, 20 ms clear of its edges: slice c has left the
        // quota's S slices but is still among the S + 1 a strict request is
        // judged against.
        let at = (c + S) * slice_us + 20_000;
        std::thread::sleep(Duration::from_micros(at.saturating_sub(server_us(&redis))));
        let returned = l.stats().returned_permits;
        assert_eq!(l.release_all().unwrap(), 7);
        let cur = server_slice(&redis, SLICE_MS);
        if cur != c + S {
            continue; // a loaded host: the moment was missed
        }
        assert_eq!(l.stats().returned_permits, returned + 7);
        assert_eq!(recorded(&redis, "back", &key).get(&c), Some(&2));
        break;
    }
}

/// While Redis is unreachable, [`OutagePolicy::LocalShare`] admits on a
/// local limiter of the same quota, strictness included.
#[test]
fn the_local_share_of_a_strict_quota_is_strict() {
    let t = |ms: u64| Timestamp::from_nanos(ms * 1_000_000);
    let q = Quota::per(4, Duration::from_secs(1)).slices(2); // slices of 500 ms
    for strict in [false, true] {
        let clock = ManualClock::starting_at(t(10_900)); // slice 21
        let l: ClusterLimiter<String, ManualClock> = ClusterLimiter::builder(
            "redis://127.0.0.1:1/",
            "share",
            if strict { q.strict() } else { q },
        )
        .outage(OutagePolicy::LocalShare { expected_nodes: 1 })
        .timeouts(Duration::from_millis(50), Duration::from_millis(50))
        .clock(clock.clone())
        .build()
        .unwrap();
        let admitted = |n: usize| {
            (0..n)
                .filter(|_| l.decide("k", 1) == Grant::OutageAdmitted)
                .count()
        };
        assert_eq!(admitted(5), 4);
        // Slice 23: slice 21 has left the 2 slices, not the 3 a strict
        // request is judged against.
        clock.set(t(11_500));
        assert_eq!(admitted(1), if strict { 0 } else { 1 }, "strict {strict}");
        // Slice 24: gone for both.
        clock.set(t(12_000));
        assert_eq!(admitted(1), 1, "strict {strict}");
    }
}
