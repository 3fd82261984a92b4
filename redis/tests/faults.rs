//! Failures between nodes and a real redis-server: requests and replies
//! cut by a proxy, outages, Redis SIGKILLed and restarted, skewed clocks.
//! Sums stay exact.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Clock, Timestamp};
use stripecount_redis::{ClusterError, ClusterWindows, LinkState, WallClock};
use support::buckets::stored_ring;
use support::proxy::{Fault, Proxy};
use support::{flush_ok, wait_until, RedisServer, Rng, Skewed};

fn builder(url: &str, ns: &str) -> stripecount_redis::ClusterWindowsBuilder<String> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(None)
        .timeouts(Duration::from_secs(5), Duration::from_secs(5))
}

fn node(url: &str, ns: &str) -> ClusterWindows<String> {
    builder(url, ns).build().unwrap()
}

/// Adds `n` keys of counts `1..=7` and returns the total.
fn add_keys(node: &ClusterWindows<String>, n: u64) -> u64 {
    (0..n)
        .map(|i| {
            let c = i % 7 + 1;
            assert!(node.add(format!("k{i}").as_str(), c));
            c
        })
        .sum()
}

/// Every key's cluster sum, read fresh by a node connected directly.
fn check_sums(redis: &RedisServer, ns: &str, reference: &HashMap<String, u64>) {
    let reader = node(&redis.url(), ns);
    for (k, &c) in reference {
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), c, "key {k}");
    }
}

fn keys(n: u64) -> HashMap<String, u64> {
    (0..n).map(|i| (format!("k{i}"), i % 7 + 1)).collect()
}

#[test]
fn a_batch_cut_before_it_reaches_redis_is_sent_again_and_applied_once() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let n = node(&proxy.url(), "cutreq");
    let total = add_keys(&n, 200);
    proxy.arm(Fault::DropRequest(b"cutreq:n:".to_vec()));
    let e = n.flush().unwrap_err();
    assert!(matches!(e, ClusterError::Connection(_)), "{e:?}");
    assert_eq!(proxy.fired(), 1);
    let h = n.health();
    assert!(h.batch_in_flight);
    assert_eq!(h.pending_counts, total);
    assert_eq!(h.state, LinkState::Disconnected);
    assert_eq!(n.sum("k3"), 4); // held: counted once by reads
    let r = flush_ok(&n);
    assert_eq!((r.batches, r.replayed, r.counts), (1, 0, total));
    let st = n.stats();
    assert_eq!(
        (st.batches_applied, st.batches_replayed, st.resends),
        (1, 0, 1)
    );
    assert_eq!(st.counts_flushed, total);
    assert_eq!(n.health().state, LinkState::Connected);
    check_sums(&redis, "cutreq", &keys(200));
}

#[test]
fn a_reply_cut_after_redis_applied_the_batch_is_not_applied_twice() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let n = node(&proxy.url(), "cutrep");
    // Redis has the script once a batch ran (the first EVALSHA of a fresh
    // server is answered NOSCRIPT: the fault must hit a batch's reply).
    n.add("warm", 1);
    n.flush().unwrap();
    let total = add_keys(&n, 200);
    proxy.arm(Fault::DropReply(b"cutrep:n:".to_vec()));
    assert!(n.flush().is_err());
    assert_eq!(proxy.fired(), 1);
    // Redis has the batch; the node does not know: it still holds it, and
    // its reads count it once (pending, not yet in its cached rings).
    check_sums(&redis, "cutrep", &keys(200));
    assert_eq!(n.health().pending_counts, total);
    assert_eq!(n.sum("k3"), 4);
    let r = flush_ok(&n);
    assert_eq!((r.batches, r.replayed, r.counts), (1, 1, total));
    let st = n.stats();
    assert_eq!((st.batches_applied, st.batches_replayed), (1, 1)); // warm, cut
    assert_eq!(n.sum("k3"), 4);
    check_sums(&redis, "cutrep", &keys(200));
}

#[test]
fn a_crossing_whose_reply_was_cut_is_reported_once() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    let n: ClusterWindows<String> = builder(&proxy.url(), "hotcut")
        .hot_threshold(10)
        .on_hot_crossing(move |k: &String, s| s2.lock().unwrap().push((k.clone(), s)))
        .build()
        .unwrap();
    n.add("warm", 1);
    n.flush().unwrap();
    n.add("h", 12);
    proxy.arm(Fault::DropReply(b"hotcut:n:".to_vec()));
    assert!(n.flush().is_err());
    assert!(seen.lock().unwrap().is_empty());
    let r = flush_ok(&n);
    assert_eq!(r.replayed, 1);
    assert_eq!(r.crossings, vec![("h".to_string(), 12)]);
    assert_eq!(*seen.lock().unwrap(), vec![("h".to_string(), 12)]);
    n.add("h", 1);
    let r = flush_ok(&n);
    assert!(r.crossings.is_empty());
    assert_eq!(n.stats().hot_crossings, 1);
    assert!(n.is_cluster_hot("h"));
}

#[test]
fn nodes_under_random_cuts_sum_exactly() {
    let redis = RedisServer::start();
    let proxy = Arc::new(Proxy::start(redis.port()));
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..3)
        .map(|_| {
            Arc::new(
                builder(&proxy.url(), "storm")
                    .flush_interval(Some(Duration::from_millis(5)))
                    .backoff(Duration::from_millis(1), Duration::from_millis(20))
                    .max_batch_keys(50)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    // Arms a fault whenever the last one fired, alternating the kinds.
    let faults = {
        let (proxy, done) = (Arc::clone(&proxy), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !done.load(Ordering::Acquire) {
                if !proxy.armed() {
                    i += 1;
                    let p = b"storm:n:".to_vec();
                    proxy.arm(if i.is_multiple_of(2) {
                        Fault::DropReply(p)
                    } else {
                        Fault::DropRequest(p)
                    });
                }
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    let reference = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let threads: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (n, reference) = (Arc::clone(n), Arc::clone(&reference));
            std::thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 7);
                let mut mine = HashMap::<String, u64>::new();
                for j in 0..30_000u64 {
                    let k = format!("k{}", rng.key(300));
                    assert!(n.add(k.as_str(), 1));
                    *mine.entry(k).or_default() += 1;
                    if j % 1000 == 0 {
                        std::thread::yield_now();
                    }
                }
                let mut r = reference.lock().unwrap();
                for (k, c) in mine {
                    *r.entry(k).or_default() += c;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Enough faults fired while the nodes flushed.
    wait_until(30, "20 faults", || proxy.fired() >= 20);
    done.store(true, Ordering::Release);
    faults.join().unwrap();
    let mut replayed = 0;
    for n in &nodes {
        flush_ok(n);
        replayed += n.stats().batches_replayed;
    }
    assert!(replayed >= 1, "some cut replies were resent as replays");
    check_sums(&redis, "storm", &reference.lock().unwrap());
}

#[test]
fn an_outage_holds_counts_and_the_flusher_reconnects() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let n: ClusterWindows<String> = builder(&proxy.url(), "outage")
        .flush_interval(Some(Duration::from_millis(10)))
        .backoff(Duration::from_millis(5), Duration::from_millis(40))
        .build()
        .unwrap();
    proxy.set_down(true);
    let mut reference = HashMap::new();
    for i in 0..5_000u64 {
        let k = format!("k{}", i % 100);
        assert!(n.add(k.as_str(), 1)); // never blocks, never fails
        *reference.entry(k).or_insert(0u64) += 1;
    }
    wait_until(20, "the flusher to see the outage", || {
        let h = n.health();
        h.state == LinkState::Disconnected && h.consecutive_failures >= 3
    });
    let h = n.health();
    assert!(h
        .last_error
        .as_ref()
        .is_some_and(ClusterError::is_transient));
    // Held, and read exactly once.
    assert_eq!(n.sum("k7"), 50);
    proxy.set_down(false);
    // The flush files its counts before it records its success in the
    // health: both are waited for.
    wait_until(20, "the flusher to reconnect and flush", || {
        n.stats().counts_flushed == 5_000 && n.health().state == LinkState::Connected
    });
    assert!(n.stats().connects >= 2);
    assert_eq!(n.stats().dropped_old, 0);
    check_sums(&redis, "outage", &reference);
}

#[test]
fn counts_older_than_the_window_are_dropped_and_counted_during_an_outage() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let clock = ManualClock::starting_at(Timestamp::from_nanos(1_000_000_000_000_000_000));
    let n: ClusterWindows<String, ManualClock> =
        ClusterWindows::builder(&proxy.url(), "old", Duration::from_secs(10), 10)
            .flush_interval(None)
            .timeouts(Duration::from_secs(2), Duration::from_secs(2))
            .clock(clock.clone())
            .build()
            .unwrap();
    n.add("a", 3);
    n.add("b", 4);
    proxy.set_down(true);
    assert!(n.flush().is_err()); // takes them into the pending buffer
    n.add("b", 5);
    // Explicit flushes keep the pace the flusher would (a take within the
    // window less one slice): the failed flush takes the 5 as well.
    assert!(n.flush().is_err());
    assert_eq!(n.health().pending_counts, 12);
    // 10 s later (the node's clock) every one of them has left the window.
    clock.advance(Duration::from_secs(10));
    n.add("c", 1);
    assert!(n.flush().is_err());
    let st = n.stats();
    assert_eq!(st.dropped_old, 12);
    assert_eq!(n.health().pending_counts, 1);
    proxy.set_down(false);
    // The node's clock now runs 10 s ahead of Redis: the probe re-samples
    // the offset, and the count stamped ahead lands in Redis's current
    // slice.
    flush_ok(&n);
    let reader: ClusterWindows<String> =
        ClusterWindows::builder(&redis.url(), "old", Duration::from_secs(10), 10)
            .flush_interval(None)
            .build()
            .unwrap();
    assert_eq!(reader.fresh_sum("c").unwrap(), 1);
    assert_eq!(reader.fresh_sum("b").unwrap(), 0);
}

#[test]
fn redis_killed_and_restarted_with_aof_always_loses_and_doubles_nothing() {
    let mut redis = RedisServer::start_aof();
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..3)
        .map(|_| {
            Arc::new(
                builder(&redis.url(), "aof")
                    .flush_interval(Some(Duration::from_millis(5)))
                    .backoff(Duration::from_millis(5), Duration::from_millis(50))
                    .max_batch_keys(100)
                    .build()
                    .unwrap(),
            )
        })
        .collect();
    let adding = Arc::new(AtomicU64::new(0));
    let reference = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (n, reference, stop, adding) = (
                Arc::clone(n),
                Arc::clone(&reference),
                Arc::clone(&stop),
                Arc::clone(&adding),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 100);
                let mut mine = HashMap::<String, u64>::new();
                while !stop.load(Ordering::Acquire) {
                    for _ in 0..100 {
                        let k = format!("k{}", rng.key(400));
                        assert!(n.add(k.as_str(), 1));
                        *mine.entry(k).or_default() += 1;
                    }
                    adding.fetch_add(100, Ordering::Relaxed);
                    std::thread::yield_now();
                }
                let mut r = reference.lock().unwrap();
                for (k, c) in mine {
                    *r.entry(k).or_default() += c;
                }
            })
        })
        .collect();
    let applied = || nodes.iter().map(|n| n.stats().batches_applied).sum::<u64>();
    wait_until(30, "flushes before the kill", || applied() >= 30);
    redis.kill();
    wait_until(30, "the nodes to see the outage", || {
        nodes.iter().all(|n| n.stats().flush_errors >= 1)
    });
    redis.restart();
    let before = applied();
    wait_until(30, "flushes after the restart", || applied() >= before + 30);
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().unwrap();
    }
    for n in &nodes {
        flush_ok(n);
        assert_eq!(n.stats().dropped_old, 0);
    }
    assert!(adding.load(Ordering::Relaxed) > 0);
    check_sums(&redis, "aof", &reference.lock().unwrap());
}

#[test]
fn a_restart_with_persistence_off_loses_what_was_flushed_before() {
    let mut redis = RedisServer::start();
    let n: ClusterWindows<String> = builder(&redis.url(), "volatile")
        .hot_threshold(5)
        .build()
        .unwrap();
    n.add("k", 5);
    n.flush().unwrap();
    assert!(n.is_cluster_hot("k"));
    redis.restart(); // nothing on disk: an empty server
    n.add("k", 3);
    flush_ok(&n);
    // The 5 flushed before are gone; the 3 are counted once; the hot set
    // was replaced by the server's (empty: 3 < 5).
    assert_eq!(n.fresh_sum("k").unwrap(), 3);
    assert!(!n.is_cluster_hot("k"));
    assert!(n.stats().connects >= 2);
}

#[test]
fn a_node_whose_clock_is_5s_off_files_counts_in_the_same_slices() {
    let redis = RedisServer::start();
    let slice = 1_000_000_000u64; // 10 s in 10 slices
    let mk = |off: i64| -> ClusterWindows<String, Skewed> {
        ClusterWindows::builder(&redis.url(), "skew", Duration::from_secs(10), 10)
            .flush_interval(None)
            .timeouts(Duration::from_secs(2), Duration::from_secs(2))
            .clock(Skewed {
                wall: WallClock::new(),
                off: off as u64,
            })
            .build()
            .unwrap()
    };
    let right = mk(0);
    let ahead = mk(5_000_000_000);
    let behind = mk(-5_000_000_000);
    // Their own clocks are 5 slices apart; their server time is not.
    let own = |n: &ClusterWindows<String, Skewed>| n.time().node_clock().now().as_nanos() / slice;
    assert!(own(&ahead) >= own(&right) + 4);
    assert!(own(&behind) + 4 <= own(&right));
    let mut conn = redis.conn();
    let server_us = |c: &mut redis::Connection| -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
        s * 1_000_000 + us
    };
    // Repeat until the three adds fall inside one server slice, 50 ms
    // clear of its edges, as seen from outside, and the nodes' estimates
    // are within 50 ms (their uncertainty, checked below; an attempt on a
    // loaded machine where it is not is repeated).
    for attempt in 0.. {
        assert!(attempt < 50, "no attempt fell inside one slice");
        let key = format!("k{attempt}");
        let t0 = server_us(&mut conn).saturating_sub(50_000);
        for n in [&right, &ahead, &behind] {
            assert!(n.add(key.as_str(), 1));
        }
        let t1 = server_us(&mut conn) + 50_000;
        let e0 = t0 / 1_000_000;
        if e0 != t1 / 1_000_000 {
            // Too near a slice edge. Attempts are ~100 us apart, so retrying
            // at once would spend all 50 inside the same 100 ms; wait (on
            // the server's clock) until the edge is 60 ms behind.
            let edge = (t1 / 1_000_000) * 1_000_000;
            let past = edge + 60_000;
            let now = server_us(&mut conn);
            std::thread::sleep(Duration::from_micros(past.saturating_sub(now)));
            continue;
        }
        let mut loose = false;
        for n in [&right, &ahead, &behind] {
            n.flush().unwrap();
            loose |= n.time().uncertainty().unwrap() >= Duration::from_nanos(50_000_000);
        }
        if loose {
            // A round trip of 100 ms or more (a loaded machine): the 50 ms
            // margin does not cover the nodes' estimates; try again.
            continue;
        }
        let v = stored_ring(&mut conn, "skew", &key).expect("stored").ring;
        let words: Vec<f64> = v
            .chunks_exact(8)
            .map(|w| f64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        // until, then one (epoch, count) slice: all three in e0's slice.
        assert_eq!(words, vec![0.0, e0 as f64, 3.0], "attempt {attempt}");
        break;
    }
}
