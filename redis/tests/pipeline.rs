//! A flush of several batches overlaps the node's work with Redis's: the
//! next batch is cut and encoded while Redis runs the current one (two
//! batches in flight), and sent as soon as the current's reply is read,
//! before that reply is filed. A request or a reply cut by the proxy at
//! every position in the flush: reads stay exact while both batches are
//! held, and after a retry every key's cluster sum is exact, each batch
//! applied once.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use stripecount_redis::ClusterWindows;
use support::proxy::{Fault, Proxy};
use support::{flush_ok, RedisServer};

const KEYS: u64 = 9;
const BATCH: usize = 3; // three batches a flush

fn node(url: &str, ns: &str) -> ClusterWindows<String> {
    ClusterWindows::builder(url, ns, Duration::from_secs(600), 10)
        .flush_interval(None)
        .timeouts(Duration::from_millis(500), Duration::from_millis(500))
        .max_batch_keys(BATCH)
        .build()
        .unwrap()
}

fn count(i: u64) -> u64 {
    i % 7 + 1
}

/// Cuts the batch holding key `k{i}` in a flush of three batches, then
/// retries; returns how many batches Redis acknowledged before the cut.
fn cut_one_batch(redis: &RedisServer, proxy: &Proxy, attempt: u64, drop_reply: bool) -> u64 {
    let ns = format!("pipe{attempt}");
    let n = node(&proxy.url(), &ns);
    // Redis has the script once a batch ran (the first EVALSHA of a fresh
    // server is answered NOSCRIPT).
    n.add("warm", 1);
    flush_ok(&n);
    let mut reference = HashMap::new();
    for i in 0..KEYS {
        assert!(n.add(format!("k{i}").as_str(), count(i)));
        reference.insert(format!("k{i}"), count(i));
    }
    let total: u64 = reference.values().sum();
    let i = attempt % KEYS;
    // The key's field, a bulk string of the batch's request.
    let pattern = format!("\r\nk{i}\r\n").into_bytes();
    let fired = proxy.fired();
    proxy.arm(if drop_reply {
        Fault::DropReply(pattern)
    } else {
        Fault::DropRequest(pattern)
    });
    assert!(n.flush().is_err());
    assert_eq!(proxy.fired(), fired + 1);
    let st = n.stats();
    let before = st.batches_applied - 1; // less the warm-up
    assert!(before < KEYS / BATCH as u64);
    // The cut batch and the one cut while it ran are held: reads count
    // every key once.
    let h = n.health();
    assert!(h.batch_in_flight);
    assert_eq!(h.pending_counts + st.counts_flushed - 1, total);
    for (k, &c) in &reference {
        assert_eq!(n.sum(k.as_str()), c, "key {k} after the cut");
    }
    let r = flush_ok(&n);
    assert_eq!(r.replayed, u64::from(drop_reply));
    assert_eq!(r.batches, KEYS / BATCH as u64 - before);
    let st = n.stats();
    assert_eq!(
        (st.batches_applied, st.batches_replayed),
        (
            1 + KEYS / BATCH as u64 - u64::from(drop_reply),
            u64::from(drop_reply)
        )
    );
    assert_eq!(st.counts_flushed, total + 1);
    assert_eq!(n.health().pending_counts, 0);
    let reader = ClusterWindows::<String>::builder(&redis.url(), &ns, Duration::from_secs(600), 10)
        .flush_interval(None)
        .build()
        .unwrap();
    for (k, &c) in &reference {
        assert_eq!(n.sum(k.as_str()), c, "key {k}");
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), c, "key {k}");
    }
    before
}

/// Cuts until the first, second and third batch of a flush have each been
/// hit (the batch of a key is the hash map's choice).
fn every_position(drop_reply: bool) {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port());
    let mut seen = BTreeSet::new();
    let mut attempt = 0;
    while seen.len() < (KEYS / BATCH as u64) as usize {
        assert!(attempt < 300, "positions hit: {seen:?}");
        seen.insert(cut_one_batch(&redis, &proxy, attempt, drop_reply));
        attempt += 1;
    }
}

#[test]
fn a_request_cut_at_any_batch_of_a_flush_is_sent_again_and_applied_once() {
    every_position(false);
}

#[test]
fn a_reply_cut_at_any_batch_of_a_flush_is_answered_again_and_applied_once() {
    every_position(true);
}
