//! Several nodes in one process against a real redis-server: exact cluster
//! sums, reads, expiry, shapes and cluster hot keys.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount_redis::{ClusterError, ClusterWindows, LinkState};
use support::buckets::stored_ring;
use support::{flush_ok, RedisServer, Rng};

fn node(url: &str, ns: &str) -> ClusterWindows<String> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(None)
        .build()
        .unwrap()
}

/// Waits until `n`'s background flusher has applied a batch (it runs every
/// few milliseconds; a minute without one is a failure, not a slow machine).
fn wait_for_a_flush(n: &ClusterWindows<String>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while n.stats().batches_applied == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the flusher applied nothing in 60 s: {:?}",
            n.stats()
        );
        std::thread::yield_now();
    }
}

#[test]
fn nodes_adding_concurrently_sum_exactly() {
    let redis = RedisServer::start();
    let url = redis.url();
    // Three nodes with background flushers every 5 ms, two threads each.
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..3)
        .map(|_| {
            Arc::new(
                ClusterWindows::builder(&url, "conc", Duration::from_secs(600), 10)
                    .flush_interval(Some(Duration::from_millis(5)))
                    .max_batch_keys(64)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let reference = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let mut threads = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for t in 0..2 {
            let (n, reference) = (Arc::clone(n), Arc::clone(&reference));
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng::new((i * 10 + t) as u64 + 1);
                let mut mine = HashMap::<String, u64>::new();
                for j in 0..20_000 {
                    if j == 10_000 {
                        // Half the adds go in before the node's flusher has
                        // applied a batch and half after: the flushes overlap
                        // the adds whatever the scheduler does.
                        wait_for_a_flush(&n);
                    }
                    let k = format!("k{}", rng.key(500));
                    let c = 1 + rng.next() % 3;
                    assert!(n.add(k.as_str(), c));
                    *mine.entry(k).or_default() += c;
                }
                let mut r = reference.lock().unwrap();
                for (k, c) in mine {
                    *r.entry(k).or_default() += c;
                }
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    let nodes: Vec<_> = nodes
        .into_iter()
        .map(|n| Arc::try_unwrap(n).unwrap())
        .collect();
    let mut flushed = 0;
    for n in nodes {
        let _ = n.shutdown().unwrap();
    }
    let reader = node(&url, "conc");
    let reference = reference.lock().unwrap();
    let total: u64 = reference.values().sum();
    for (k, &c) in reference.iter() {
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), c, "key {k}");
        flushed += c;
    }
    assert_eq!(flushed, total);
    assert_eq!(reader.fresh_sum("never-added").unwrap(), 0);
}

#[test]
fn flush_acknowledges_everything_and_counts_it() {
    let redis = RedisServer::start();
    let a = node(&redis.url(), "ack");
    for i in 0..3000u64 {
        assert!(a.add(format!("k{i}").as_str(), i % 7 + 1));
    }
    let r = a.flush().unwrap();
    let total: u64 = (0..3000u64).map(|i| i % 7 + 1).sum();
    assert_eq!(
        (r.batches, r.key_deltas, r.counts, r.replayed),
        (3, 3000, total, 0)
    );
    let st = a.stats();
    assert_eq!(
        (st.batches_applied, st.counts_flushed, st.dropped_old),
        (3, total, 0)
    );
    let h = a.health();
    assert_eq!(h.state, LinkState::Connected);
    assert_eq!(
        (h.pending_counts, h.staged_keys, h.batch_in_flight),
        (0, 0, false)
    );
    assert!(h.time_uncertainty.unwrap() < Duration::from_millis(100));
    // Nothing left: a second flush sends nothing.
    let r = a.flush().unwrap();
    assert_eq!(r.batches, 0);
}

#[test]
fn reads_combine_the_cluster_ring_pending_and_local_counts() {
    let redis = RedisServer::start();
    let a = node(&redis.url(), "reads");
    let b = node(&redis.url(), "reads");
    a.add("k", 5);
    assert_eq!(a.sum("k"), 5);
    let p = a.sum_parts_at("k", a.now());
    assert_eq!((p.cluster, p.pending, p.local), (0, 0, 5));
    a.flush().unwrap();
    let p = a.sum_parts_at("k", a.now());
    assert_eq!((p.cluster, p.pending, p.local), (5, 0, 0));
    // b does not know a's counts until it flushes the key or reads it.
    b.add("k", 3);
    assert_eq!(b.sum("k"), 3);
    b.flush().unwrap();
    assert_eq!(b.sum("k"), 8); // the flush returned the cluster ring
    assert_eq!(a.sum("k"), 5); // a's ring is from its own flush
    assert_eq!(a.fresh_sum("k").unwrap(), 8);
    assert_eq!(a.sum("k"), 8);
    a.add("k", 1);
    assert_eq!(a.sum("k"), 9);
    assert_eq!(b.fresh_sum("k").unwrap(), 8); // a's 1 is not flushed
}

#[test]
fn redis_holds_no_slice_older_than_the_window() {
    let redis = RedisServer::start();
    let n = node(&redis.url(), "exp");
    let mut conn = redis.conn();
    n.add("k", 1);
    n.flush().unwrap();
    // The key's bucket expires a generation (5 slices of 60 s) after the
    // newest slice its generation can hold leaves the window (a flush
    // deletes it before then).
    let st = stored_ring(&mut conn, "exp", "k").expect("k is stored");
    let newest = f64::from_le_bytes(st.ring[8..16].try_into().unwrap()) as i64;
    assert_eq!(st.generation, newest / 5);
    let at: i64 = redis::cmd("PEXPIRETIME")
        .arg(&st.bucket)
        .query(&mut conn)
        .unwrap();
    assert_eq!(at, ((st.generation + 2) * 5 - 1 + 10) * 60_000);
    // A count stamped 1000 s ago is older than the window of the node's
    // newest slice: refused by the local add (as any `KeyedWindows` add
    // older than the ring), so nothing is held or sent. (Counts that age
    // out while held during an outage are counted in `dropped_old`: see
    // faults.rs.)
    let now = n.now();
    assert!(!n.add_at("old", now - Duration::from_nanos(1_000_000_000_000), 4));
    let r = n.flush().unwrap();
    assert_eq!(r.batches, 0);
    assert_eq!(n.stats().dropped_old, 0);
    assert!(stored_ring(&mut conn, "exp", "old").is_none());
}

/// The window as built: its length, slices and slice length.
#[test]
fn a_node_reports_its_window() {
    let n: ClusterWindows<String> = ClusterWindows::builder(
        "redis://127.0.0.1:1/",
        "shape",
        Duration::from_secs(600),
        12,
    )
    .flush_interval(None)
    .build()
    .unwrap();
    assert_eq!(n.window(), Duration::from_secs(600));
    assert_eq!(n.slices(), 12);
    assert_eq!(n.slice_len(), Duration::from_secs(50));
}

#[test]
fn a_node_with_another_window_shape_is_refused() {
    let redis = RedisServer::start();
    let a = node(&redis.url(), "shape");
    a.add("k", 1);
    a.flush().unwrap();
    let b: ClusterWindows<String> =
        ClusterWindows::builder(&redis.url(), "shape", Duration::from_secs(600), 20)
            .flush_interval(None)
            .build()
            .unwrap();
    b.add("k", 1);
    match b.flush() {
        Err(ClusterError::ShapeMismatch(m)) => assert!(m.contains("10:60000"), "{m}"),
        r => panic!("expected a shape mismatch, got {r:?}"),
    }
    assert_eq!(b.health().pending_counts, 1); // held, not applied
    assert!(matches!(
        b.fresh_sum("k"),
        Err(ClusterError::ShapeMismatch(_))
    ));
    assert_eq!(a.fresh_sum("k").unwrap(), 1);
}

#[test]
fn cluster_hot_keys_are_reported_once_per_crossing_and_seen_by_every_node() {
    let redis = RedisServer::start();
    let reports = Arc::new(Mutex::new(Vec::<(usize, String, u64)>::new()));
    let nodes: Vec<ClusterWindows<String>> = (0..3)
        .map(|i| {
            let r = Arc::clone(&reports);
            ClusterWindows::builder(&redis.url(), "hot", Duration::from_secs(600), 10)
                .flush_interval(None)
                .hot_threshold(100)
                .on_hot_crossing(move |k: &String, s| r.lock().unwrap().push((i, k.clone(), s)))
                .build()
                .unwrap()
        })
        .collect();
    // 3 nodes x 20 rounds x 2 = 120 adds to "h" (crosses 100 once), 3 x 20
    // to "c" (stays cold), flushing each round.
    let mut in_reports = 0;
    for _ in 0..20 {
        for n in &nodes {
            n.add("h", 2);
            n.add("c", 1);
            in_reports += flush_ok(n).crossings.len();
        }
    }
    let reports = reports.lock().unwrap().clone();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(in_reports, 1);
    assert_eq!(reports[0].1, "h");
    assert_eq!(reports[0].2, 100, "{reports:?}");
    let total: u64 = nodes.iter().map(|n| n.stats().hot_crossings).sum();
    assert_eq!(total, 1);
    for n in &nodes {
        flush_ok(n);
        assert!(n.is_cluster_hot("h"));
        assert!(!n.is_cluster_hot("c"));
        assert_eq!(n.cluster_hot_keys(), vec!["h".to_string()]);
    }
    // A node that never added to "h" learns the hot set from its flush.
    let late = node(&redis.url(), "hot");
    assert!(!late.is_cluster_hot("h"));
    late.refresh_hot().unwrap();
    assert_eq!(late.cluster_hot_keys(), Vec::<String>::new()); // no threshold
    let late: ClusterWindows<String> =
        ClusterWindows::builder(&redis.url(), "hot", Duration::from_secs(600), 10)
            .flush_interval(None)
            .hot_threshold(100)
            .build()
            .unwrap();
    late.flush().unwrap();
    assert!(late.is_cluster_hot("h"));
}

#[test]
fn a_cooled_key_that_crosses_again_is_reported_again() {
    let redis = RedisServer::start();
    let count = Arc::new(AtomicU64::new(0));
    let c2 = Arc::clone(&count);
    // A short window on the real clock (slices of 1 s): the key cools in
    // real time.
    let n: ClusterWindows<String> =
        ClusterWindows::builder(&redis.url(), "cool", Duration::from_secs(2), 2)
            .flush_interval(None)
            .hot_threshold(10)
            .on_hot_crossing(move |_, _| {
                c2.fetch_add(1, Ordering::Relaxed);
            })
            .build()
            .unwrap();
    n.add("k", 10);
    flush_ok(&n);
    assert_eq!(count.load(Ordering::Relaxed), 1);
    assert!(n.is_cluster_hot("k"));
    n.add("k", 1);
    flush_ok(&n);
    assert_eq!(count.load(Ordering::Relaxed), 1); // the same crossing
                                                  // Cooled for the node (its view runs on its estimate of Redis's time)
                                                  // and for Redis, whose clock judges the next crossing: the hot set
                                                  // (`ns:hot`) holds the epoch at which the key cools. The node's
                                                  // estimate may run a little ahead of Redis's clock (by up to half a
                                                  // round trip of its time sample): waiting for the node alone, the
                                                  // next flush could reach Redis just before the key cooled there, and
                                                  // report nothing.
    support::wait_until(30, "the key to cool", || !n.is_cluster_hot("k"));
    let until: u64 = redis::cmd("ZSCORE")
        .arg("cool:hot")
        .arg("k")
        .query(&mut redis.conn())
        .unwrap();
    support::wait_until(30, "Redis's clock to reach the cooling", || {
        // Epochs of 1 s slices are Unix seconds.
        let (secs, _us): (u64, u64) = redis::cmd("TIME").query(&mut redis.conn()).unwrap();
        secs >= until
    });
    // And the window empty (the second add may be a slice younger than
    // the first, on a slow machine).
    support::wait_until(30, "the key's window to empty", || {
        n.fresh_sum("k").unwrap() == 0
    });
    n.add("k", 10);
    flush_ok(&n);
    assert_eq!(count.load(Ordering::Relaxed), 2);
    assert!(n.is_cluster_hot("k"));
}
