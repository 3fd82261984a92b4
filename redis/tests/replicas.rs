//! `wait_for_replicas(n)` against a master with fewer than `n` replicas
//! connected, on a real `redis-server` and a real replica of it: the
//! build fails with `ClusterError::TooFewReplicas`, and a node whose
//! master loses its replica reports the groups held back in
//! `health().replicas_short` until a replica is back, then sends what it
//! held.

mod support;

use std::time::Duration;
use stripecount::Quota;
use stripecount_redis::{ClusterError, ClusterLimiter, ClusterWindows, Grant};
use support::{flush_ok, wait_until, RedisServer};

fn windows(m: &RedisServer, replicas: u32) -> Result<ClusterWindows<String>, ClusterError> {
    ClusterWindows::builder(&m.url(), "rep", Duration::from_secs(600), 10)
        .flush_interval(None)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .wait_for_replicas(replicas, Duration::from_millis(500))
        .build()
}

fn limiter(m: &RedisServer, replicas: u32) -> Result<ClusterLimiter<String>, ClusterError> {
    ClusterLimiter::builder(
        &m.url(),
        "repl",
        Quota::per(1_000, Duration::from_secs(600)),
    )
    .backoff(Duration::from_millis(1), Duration::from_millis(1))
    .wait_for_replicas(replicas, Duration::from_millis(500))
    .build()
}

fn connected_replicas(m: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut m.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_slaves:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Replicas of `m` done with their first sync (`state=online`): a write
/// `WAIT`s for them only then, and a replica connected but still syncing
/// (a full sync starts after `repl-diskless-sync-delay`, 5 s by default)
/// acknowledges nothing.
fn online_replicas(m: &RedisServer) -> usize {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut m.conn())
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}

/// Makes `r` a replica of `m` (or a master again, `None`).
fn replica_of(r: &RedisServer, m: Option<&RedisServer>) {
    let mut cmd = redis::cmd("REPLICAOF");
    match m {
        Some(m) => cmd.arg("127.0.0.1").arg(m.port()),
        None => cmd.arg("NO").arg("ONE"),
    };
    let _: String = cmd.query(&mut r.conn()).unwrap();
}

fn too_few(e: &ClusterError, connected: u64, wanted: u32) -> bool {
    matches!(e, ClusterError::TooFewReplicas { connected: c, wanted: w, .. }
        if (*c, *w) == (connected, wanted))
}

#[test]
fn a_build_asking_for_more_replicas_than_connected_fails() {
    let m = RedisServer::start();
    let Err(e) = windows(&m, 1) else {
        panic!("no replica: the build fails")
    };
    assert!(too_few(&e, 0, 1), "{e:?}");
    assert!(e.is_setting() && e.is_transient());
    assert!(e.to_string().contains("0 replicas connected"), "{e}");
    let Err(e) = limiter(&m, 1) else {
        panic!("no replica: the build fails")
    };
    assert!(too_few(&e, 0, 1), "{e:?}");
    // With one replica, asking for two still fails; one is fine.
    let r = RedisServer::start();
    replica_of(&r, Some(&m));
    wait_until(30, "the replica to connect", || connected_replicas(&m) == 1);
    assert!(too_few(&windows(&m, 2).err().unwrap(), 1, 2));
    assert!(too_few(&limiter(&m, 2).err().unwrap(), 1, 2));
    assert_eq!(windows(&m, 1).unwrap().health().replicas_short, 0);
    assert_eq!(limiter(&m, 1).unwrap().health().replicas_short, 0);
}

/// Drops every client connection of `m` but the caller's: the nodes'
/// next requests open new connections, which are checked.
fn cut_clients(m: &RedisServer) {
    let _: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut m.conn())
        .unwrap();
}

#[test]
fn a_master_that_loses_its_replica_is_reported_until_one_is_back() {
    let m = RedisServer::start();
    let r = RedisServer::start();
    replica_of(&r, Some(&m));
    wait_until(30, "the replica's first sync", || online_replicas(&m) == 1);
    let w = windows(&m, 1).unwrap();
    let l = limiter(&m, 1).unwrap();
    assert!(w.add("a", 3));
    flush_ok(&w);
    assert!(matches!(l.decide("a", 1), Grant::Granted { .. }));
    // The replica leaves (a failover's promoted master has none either).
    replica_of(&r, None);
    wait_until(30, "the replica to leave", || connected_replicas(&m) == 0);
    cut_clients(&m);
    assert!(w.add("a", 4));
    wait_until(
        30,
        "a flush refused for want of replicas",
        || matches!(w.flush(), Err(e) if too_few(&e, 0, 1)),
    );
    let h = w.health();
    assert_eq!((h.replicas_short, h.groups_disconnected), (1, 1), "{h:?}");
    assert!(h.last_error.is_some_and(|e| too_few(&e, 0, 1)));
    wait_until(30, "a lease refused for want of replicas", || {
        // Each request is an outage (fail closed) until a replica is back.
        assert!(!matches!(l.decide("b", 1), Grant::Granted { .. }));
        l.health().replicas_short == 1
    });
    // A replica is back: what was held goes through, and health is clear.
    replica_of(&r, Some(&m));
    wait_until(30, "the replica's sync", || online_replicas(&m) == 1);
    flush_ok(&w);
    assert_eq!(w.health().replicas_short, 0);
    assert_eq!(w.fresh_sum("a").unwrap(), 7);
    wait_until(30, "a lease granted again", || {
        matches!(l.decide("b", 1), Grant::Granted { .. })
    });
    assert_eq!(l.health().replicas_short, 0);
}
