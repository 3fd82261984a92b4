//! A Redis Cluster master SIGKILLed while nodes add and flush, and its
//! replica promoted. The replica is held back first (stopped, its link to
//! the master cut, until the master is dead), so the master acknowledges
//! batches the replica never gets, whatever the machine's speed: with `wait_for_replicas` those batches are held and reach the
//! promoted replica (sums exact); without, they are lost and the nodes
//! report exactly what was lost.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount_redis::{ClusterError, ClusterWindows};
use support::cluster::RedisCluster;
use support::{flush_ok, Rng};

fn node(c: &RedisCluster, ns: &str, wait: bool, every: Option<Duration>) -> ClusterWindows<String> {
    let urls: Vec<String> = (0..c.nodes.len()).map(|i| c.url(i)).collect();
    let b = ClusterWindows::builder(&urls[0], ns, Duration::from_secs(600), 10)
        .redis_cluster(16)
        .seeds(&urls[1..])
        .flush_interval(every)
        .backoff(Duration::from_millis(10), Duration::from_millis(200))
        .timeouts(Duration::from_secs(2), Duration::from_secs(5));
    let b = if wait {
        b.wait_for_replicas(1, Duration::from_millis(100))
    } else {
        b
    };
    b.build().unwrap()
}

fn failover(wait: bool) {
    let mut c = RedisCluster::start(3, 1);
    let ns = "failover";
    let m = (0..c.nodes.len()).find(|&i| c.is_master(i)).unwrap();
    let r = c.replica_of(m, m);
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..3)
        .map(|_| Arc::new(node(&c, ns, wait, Some(Duration::from_millis(5)))))
        .collect();
    let reference = Mutex::new(HashMap::<String, u64>::new());
    let count = |k: String, n: u64| *reference.lock().unwrap().entry(k).or_default() += n;
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        for (i, n) in nodes.iter().enumerate().skip(1) {
            let (done, count) = (&done, &count);
            sc.spawn(move || {
                let mut rng = Rng::new(i as u64);
                while !done.load(Ordering::Relaxed) {
                    let k = format!("k{}", rng.key(2_000));
                    assert!(n.add(k.as_str(), 1));
                    count(k, 1);
                    std::thread::sleep(Duration::from_micros(50));
                }
            });
        }
        let _stop = support::StopOnDrop(&done);
        std::thread::sleep(Duration::from_millis(100));
        // Hold the replica back: stopped, and cut from its master (which
        // cannot reach it again before it dies).
        c.hold_back_replica(m, r);
        // Batches the master applies now reach no replica.
        for i in 0..1_000 {
            let k = format!("before{i}");
            assert!(nodes[0].add(k.as_str(), 1));
            count(k, 1);
        }
        match nodes[0].flush() {
            Err(ClusterError::NotReplicated {
                reached: 0,
                wanted: 1,
            }) if wait => {}
            Ok(_) if !wait => {}
            r => panic!("flush with wait = {wait}: {r:?}"),
        }
        c.nodes[m].sigkill();
        // The replica takes over.
        c.promote(r);
        std::thread::sleep(Duration::from_millis(100));
    });
    if wait {
        // The promoted replica has no replica of its own: its groups' batches
        // are held until the old master is back, as its replica.
        assert!(nodes[0].flush().is_err());
        c.nodes[m].restart();
        c.wait_replica_up(m);
    }
    // One more batch to every group from every node: where Redis lost
    // acknowledged batches, the node learns it now.
    for n in &nodes {
        for i in 0..1_000 {
            let k = format!("after{i}");
            assert!(n.add(k.as_str(), 1));
            count(k, 1);
        }
        flush_ok(n);
    }
    let reference = reference.into_inner().unwrap();
    let want: u64 = reference.values().sum();
    let reader = node(&c, ns, false, None);
    let mut got = 0;
    let mut exact = true;
    for (k, &n) in &reference {
        let s = reader.fresh_sum(k.as_str()).unwrap();
        exact &= s == n;
        got += s;
    }
    let lost: u64 = nodes.iter().map(|n| n.stats().lost_counts).sum();
    let held: u64 = nodes.iter().map(|n| n.stats().not_replicated).sum();
    for n in &nodes {
        assert_eq!(n.stats().dropped_old, 0);
    }
    if wait {
        assert!(held > 0);
        assert_eq!((got, lost), (want, 0));
        assert!(exact);
    } else {
        assert!(lost > 0, "the probe's counts on the dead master at least");
        assert_eq!(got + lost, want, "reported loss {lost}");
    }
}

#[test]
fn a_failover_with_wait_for_replicas_loses_nothing() {
    failover(true);
}

#[test]
fn a_failover_without_wait_reports_exactly_what_it_lost() {
    failover(false);
}
