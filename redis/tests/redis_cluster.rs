//! `ClusterWindows` on a real Redis Cluster (3 masters, 3 replicas, on
//! loopback ports): sums exact with keys over every master, hot crossings
//! once across the cluster, and a slot migrated while batches are in
//! flight.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount_redis::ClusterWindows;
use support::buckets::fields;
use support::cluster::RedisCluster;
use support::{flush_ok, Rng};

const GROUPS: usize = 16;
/// The hot threshold: the hottest keys (an eighth take half the adds) pass it.
const HOT: u64 = 200;

type Crossings = Arc<Mutex<Vec<(String, u64)>>>;

fn node(
    c: &RedisCluster,
    ns: &str,
    every: Option<Duration>,
    sink: &Crossings,
) -> ClusterWindows<String> {
    let sink = Arc::clone(sink);
    ClusterWindows::builder(&c.url(0), ns, Duration::from_secs(600), 10)
        .redis_cluster(GROUPS)
        .seeds([c.url(1), c.url(2)])
        .flush_interval(every)
        .max_batch_keys(64)
        .hot_threshold(HOT)
        .on_hot_crossing(move |k: &String, sum| sink.lock().unwrap().push((k.clone(), sum)))
        .build()
        .unwrap()
}

/// Three nodes, two threads each, adding to `keys` keys while `during`
/// runs; returns the reference counts and every crossing reported.
fn run(
    c: &RedisCluster,
    ns: &str,
    keys: u64,
    during: impl FnOnce(&AtomicBool),
) -> (HashMap<String, u64>, Vec<(String, u64)>) {
    let sink = Crossings::default();
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..3)
        .map(|_| Arc::new(node(c, ns, Some(Duration::from_millis(5)), &sink)))
        .collect();
    let reference = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let mut threads = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            for t in 0..2 {
                let (n, reference, done) = (Arc::clone(n), Arc::clone(&reference), &done);
                threads.push(sc.spawn(move || {
                    let mut rng = Rng::new((i * 10 + t) as u64 + 1);
                    let mut mine = HashMap::<String, u64>::new();
                    let mut j = 0u64;
                    // At least 20,000 adds, and on until `during` is done.
                    while j < 20_000 || !done.load(Ordering::Relaxed) {
                        let k = format!("k{}", rng.key(keys));
                        let c = 1 + rng.next() % 3;
                        assert!(n.add(k.as_str(), c));
                        *mine.entry(k).or_default() += c;
                        j += 1;
                        if j.is_multiple_of(1_000) {
                            std::thread::yield_now();
                        }
                    }
                    let mut r = reference.lock().unwrap();
                    for (k, c) in mine {
                        *r.entry(k).or_default() += c;
                    }
                }));
            }
        }
        let stop = support::StopOnDrop(&done);
        during(&done);
        drop(stop);
        for t in threads {
            t.join().unwrap();
        }
    });
    for n in nodes {
        flush_ok(&n);
        let st = n.stats();
        assert_eq!((st.dropped_old, st.dropped_full), (0, 0), "{st:?}");
    }
    let r = reference.lock().unwrap().clone();
    let crossings = sink.lock().unwrap().clone();
    (r, crossings)
}

/// Every key's cluster sum, read from the cluster by a fresh node.
fn check_sums(c: &RedisCluster, ns: &str, reference: &HashMap<String, u64>) {
    let reader = node(c, ns, None, &Crossings::default());
    for (k, &want) in reference {
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), want, "key {k}");
    }
}

#[test]
fn nodes_sum_exactly_with_keys_on_every_master() {
    let c = RedisCluster::start(3, 1);
    let (reference, crossings) = run(&c, "spread", 3_000, |_| ());
    assert!(reference.len() > 2_900);
    check_sums(&c, "spread", &reference);
    // The keys are on all three masters, none on a replica's own.
    let masters: Vec<usize> = (0..6).filter(|&i| c.is_master(i)).collect();
    assert_eq!(masters.len(), 3);
    for &m in &masters {
        let held = fields(&mut c.conn(m), "spread:*:b:*");
        assert!(held > 500, "master {m} holds {held} keys");
    }
    // Each key at or past the threshold crossed once, across the cluster.
    let mut seen = HashMap::<String, u64>::new();
    for (k, sum) in &crossings {
        assert!(*sum >= HOT);
        *seen.entry(k.clone()).or_default() += 1;
    }
    assert!(seen.len() > 100, "{} keys crossed", seen.len());
    for (k, &total) in &reference {
        let want = u64::from(total >= HOT);
        assert_eq!(
            seen.get(k).copied().unwrap_or(0),
            want,
            "crossings of {k} ({total})"
        );
    }
    // A reader on a replica's URL is redirected to the masters.
    let replica = (0..6).find(|i| !masters.contains(i)).unwrap();
    let via_replica =
        ClusterWindows::<String>::builder(&c.url(replica), "spread", Duration::from_secs(600), 10)
            .redis_cluster(GROUPS)
            .flush_interval(None)
            .build()
            .unwrap();
    let (k, &want) = reference.iter().next().unwrap();
    assert_eq!(via_replica.fresh_sum(k.as_str()).unwrap(), want);
    assert!(via_replica.stats().redirects > 0);
}

#[test]
fn a_slot_migrated_mid_stream_loses_and_doubles_nothing() {
    let c = RedisCluster::start(3, 1);
    // The slot of the group of key "k1" (the hottest keys' neighbours).
    let slot = {
        let n = node(&c, "moving", None, &Crossings::default());
        n.add("k1", 1);
        flush_ok(&n);
        c.slot_of_field("moving:{*}:b:*", "k1")
    };
    let mut moved = (0, 0);
    let (mut reference, _) = run(&c, "moving", 2_000, |_| {
        // Let the nodes write the slot's keys, then move it under them.
        std::thread::sleep(Duration::from_millis(200));
        moved = c.migrate(slot);
        std::thread::sleep(Duration::from_millis(200));
    });
    assert_eq!(c.owner(slot), moved.1);
    *reference.entry("k1".to_string()).or_default() += 1; // the probe's add
    check_sums(&c, "moving", &reference);
}

#[test]
fn cluster_options_are_checked() {
    let b = || {
        ClusterWindows::<String>::builder("redis://127.0.0.1:1/", "ns", Duration::from_secs(10), 10)
    };
    let err = |r: Result<ClusterWindows<String>, stripecount_redis::ClusterError>| {
        r.expect_err("a configuration error").to_string()
    };
    assert!(err(b().redis_cluster(0).build()).contains("0 groups"));
    assert!(err(b().redis_cluster(16_385).build()).contains("16385 groups"));
    assert!(err(b().seeds(["redis://127.0.0.1:2/"]).build()).contains("redis_cluster"));
    let braces = ClusterWindows::<String>::builder(
        "redis://127.0.0.1:1/",
        "a{b}",
        Duration::from_secs(10),
        10,
    );
    assert!(err(braces.redis_cluster(4).build()).contains("brace"));
    assert!(err(b().redis_cluster(4).seeds(["not a url"]).build()).contains("bad redis url"));
    // Nothing listens: built, counting locally, like a single-instance node.
    let n = b().redis_cluster(4).flush_interval(None).build().unwrap();
    assert!(n.add("k", 2));
    assert_eq!(n.sum("k"), 2);
    assert!(n.flush().is_err());
    assert_eq!(n.sum("k"), 2);
}
