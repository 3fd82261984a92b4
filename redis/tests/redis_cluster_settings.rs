//! Settings that cannot work on a real Redis Cluster (3 masters, 3
//! replicas, on loopback ports) fail the build with a typed error: a
//! node built for a single instance (no `redis_cluster`), and
//! `wait_for_replicas` asking for more replicas than a master has. And a
//! node built with one master's URL and no seeds finds that master's
//! replacement after a failover, through the masters its groups were
//! redirected to.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use stripecount::Quota;
use stripecount_redis::{ClusterError, ClusterLimiter, ClusterWindows, Grant};
use support::cluster::RedisCluster;
use support::flush_ok;

const WINDOW: Duration = Duration::from_secs(600);

fn windows(url: &str, seeds: &[String], groups: Option<usize>) -> ClusterWindows<String> {
    try_windows(url, seeds, groups, None).unwrap()
}

fn try_windows(
    url: &str,
    seeds: &[String],
    groups: Option<usize>,
    replicas: Option<u32>,
) -> Result<ClusterWindows<String>, ClusterError> {
    let mut b = ClusterWindows::builder(url, "settings", WINDOW, 10)
        .flush_interval(None)
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .timeouts(Duration::from_secs(2), Duration::from_secs(5));
    if let Some(g) = groups {
        b = b.redis_cluster(g).seeds(seeds);
    }
    if let Some(n) = replicas {
        b = b.wait_for_replicas(n, Duration::from_millis(500));
    }
    b.build()
}

fn try_limiter(
    url: &str,
    seeds: &[String],
    groups: Option<usize>,
    replicas: Option<u32>,
) -> Result<ClusterLimiter<String>, ClusterError> {
    let mut b = ClusterLimiter::builder(url, "settingsl", Quota::per(1_000, WINDOW))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .timeouts(Duration::from_secs(2), Duration::from_secs(5));
    if let Some(g) = groups {
        b = b.redis_cluster(g).seeds(seeds);
    }
    if let Some(n) = replicas {
        b = b.wait_for_replicas(n, Duration::from_millis(500));
    }
    b.build()
}

#[test]
fn settings_a_cluster_cannot_serve_fail_the_build() {
    let c = RedisCluster::start(3, 1);
    let urls: Vec<String> = (0..c.nodes.len()).map(|i| c.url(i)).collect();
    let (url, seeds) = (&urls[0], &urls[1..]);
    let node0 = format!("127.0.0.1:{}", c.nodes[0].port());
    // Built for a single instance: refused at the first connection, with
    // what to call instead; nothing was written.
    let cluster_node = |e: ClusterError| match e {
        ClusterError::ClusterNode { ref server } => {
            assert_eq!(server, &node0);
            assert!(e.is_setting() && !e.is_transient());
            assert!(e.to_string().contains("redis_cluster(groups)"), "{e}");
        }
        e => panic!("not a ClusterNode error: {e:?}"),
    };
    cluster_node(try_windows(url, seeds, None, None).err().unwrap());
    cluster_node(try_limiter(url, seeds, None, None).err().unwrap());
    for i in 0..c.nodes.len() {
        assert_eq!(c.dbsize(i), 0);
    }
    // One replica a master: two asked for cannot be had.
    let too_few = |e: ClusterError| {
        assert!(
            matches!(
                e,
                ClusterError::TooFewReplicas {
                    connected: 1,
                    wanted: 2,
                    ..
                }
            ),
            "{e:?}"
        )
    };
    too_few(try_windows(url, seeds, Some(16), Some(2)).err().unwrap());
    too_few(try_limiter(url, seeds, Some(16), Some(2)).err().unwrap());
    // One can; and the same builders with `redis_cluster` work.
    let w = try_windows(url, seeds, Some(16), Some(1)).unwrap();
    let l = try_limiter(url, seeds, Some(16), Some(1)).unwrap();
    assert!(w.add("k", 2));
    flush_ok(&w);
    assert_eq!(w.fresh_sum("k").unwrap(), 2);
    assert!(matches!(l.decide("k", 1), Grant::Granted { .. }));
    assert_eq!(w.health().replicas_short, 0);
    assert_eq!(l.health().replicas_short, 0);
}

/// Nodes built with master `m`'s URL and no seeds: their groups on other
/// masters were redirected there, and those masters are the seeds that
/// lead the groups of `m` to its replica once `m` is killed and the
/// replica takes over. Every count reaches Redis, every key gets a
/// grant again.
#[test]
fn a_node_without_seeds_finds_a_failed_masters_replacement() {
    let c = RedisCluster::start(3, 1);
    let m = (0..c.nodes.len()).find(|&i| c.is_master(i)).unwrap();
    let r = c.replica_of(m, m);
    let w = windows(&c.url(m), &[], Some(16));
    let l = try_limiter(&c.url(m), &[], Some(16), None).unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let mut want = HashMap::new();
    for k in &keys {
        assert!(w.add(k.as_str(), 1));
        *want.entry(k.clone()).or_insert(0u64) += 1;
        assert!(matches!(l.decide(k.as_str(), 1), Grant::Granted { .. }));
    }
    flush_ok(&w);
    // Everything `m` holds is on its replica before it dies: a write of
    // our own to `m`, then `WAIT` for it (replication is in order).
    let mine = (0..)
        .map(|i| format!("w{i}"))
        .find(|k| c.owner(c.slot(k)) == m)
        .unwrap();
    let mut conn = c.conn(m);
    let _: () = redis::cmd("SET")
        .arg(&mine)
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let reached: u64 = redis::cmd("WAIT")
        .arg(1)
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(reached, 1);
    c.nodes[m].sigkill();
    c.promote(r);
    for k in &keys {
        assert!(w.add(k.as_str(), 2));
        *want.entry(k.clone()).or_insert(0) += 2;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = w.flush() {
        assert!(
            Instant::now() < deadline,
            "no flush reached every master: {e:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let reader = windows(&c.url(r), &[], Some(16));
    for (k, &n) in &want {
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), n, "{k}");
    }
    assert_eq!(w.stats().lost_counts, 0);
    // New keys (no lease held for them: each asks its group's master) are
    // granted, on every master.
    let fresh: Vec<String> = (0..200).map(|i| format!("j{i}")).collect();
    let mut granted = HashSet::new();
    while granted.len() < fresh.len() {
        assert!(
            Instant::now() < deadline,
            "keys never granted after the failover: {} of {}",
            granted.len(),
            fresh.len()
        );
        for k in &fresh {
            if !granted.contains(k) && matches!(l.decide(k.as_str(), 1), Grant::Granted { .. }) {
                granted.insert(k.clone());
            }
        }
    }
}
