//! The flush script's fast path (one delta into a ring's newest slice,
//! nothing to drop, a key not hot that stays below the threshold: only
//! the last count is rewritten) stores exactly what its general path
//! (decode, merge, re-encode) stores. Three nodes get the same random
//! adds: `fast` has no hot detection and `fast_hot` a threshold never
//! reached (the fast path applies to both); `general` has a threshold of 1,
//! so every key with a count is hot and the general path always runs.
//! After every round, every key's stored bytes and its bucket's expiry are the
//! same in `fast` and `fast_hot`, and in `general` but for the ring's first
//! 8 bytes (its hot horizon, 0 in the others); every sum is the
//! reference's.

mod support;

use std::collections::HashMap;
use std::time::Duration;
use stripecount_redis::ClusterWindows;
use support::buckets::stored_ring;
use support::{flush_ok, RedisServer, Rng};

const SLICES: u64 = 10;
/// Slices of 10 minutes: adds land in the newest five, so a slice that
/// begins during the test drops nothing.
const SLICE_S: u64 = 600;
const KEYS: u64 = 60;
/// The `crossing` namespace's threshold: about half the keys reach it.
const CROSS: u64 = 250;

fn node(redis: &RedisServer, ns: &str, threshold: Option<u64>) -> ClusterWindows<String> {
    let mut b = ClusterWindows::builder(
        &redis.url(),
        ns,
        Duration::from_secs(SLICE_S * SLICES),
        SLICES as usize,
    )
    .flush_interval(None)
    .max_batch_keys(16); // several batches a flush
    if let Some(t) = threshold {
        b = b.hot_threshold(t);
    }
    b.build().unwrap()
}

/// A key's stored ring and its bucket's expiry (Unix ms).
fn stored(conn: &mut redis::Connection, ns: &str, key: &str) -> (Option<Vec<u8>>, i64) {
    match stored_ring(conn, ns, key) {
        Some(s) => {
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&s.bucket)
                .query(conn)
                .unwrap();
            (Some(s.ring), at)
        }
        None => (None, -2),
    }
}

#[test]
fn the_fast_path_stores_what_the_general_path_stores() {
    let redis = RedisServer::start();
    let fast = node(&redis, "fast", None);
    let fast_hot = node(&redis, "fast_hot", Some(1 << 52));
    let general = node(&redis, "general", Some(1));
    // Keys cross this one during the test, most through the fast path's
    // check (the batch that reaches it must leave the fast path).
    let crossing = node(&redis, "crossing", Some(CROSS));
    let mut conn = redis.conn();
    let mut rng = Rng::new(13);
    let mut reference: HashMap<String, u64> = HashMap::new();
    let slice_ns = SLICE_S * 1_000_000_000;
    for round in 0..40 {
        let now = fast.now();
        // Even rounds: one add a key, now (the steady state). Odd rounds:
        // up to three adds a key in any of the newest five slices (rings
        // of several slices, deltas before the newest).
        for i in 0..KEYS {
            let key = format!("k{i}");
            let adds = if round % 2 == 0 { 1 } else { rng.next() % 4 };
            for a in 0..adds {
                let t = if round % 2 == 0 || a == 0 && rng.next().is_multiple_of(2) {
                    now
                } else {
                    now - Duration::from_nanos((rng.next() % 5) * slice_ns)
                };
                let c = rng.next() % 9 + 1;
                for n in [&fast, &fast_hot, &general, &crossing] {
                    assert!(n.add_at(key.as_str(), t, c));
                }
                *reference.entry(key.clone()).or_default() += c;
            }
        }
        for n in [&fast, &fast_hot, &general, &crossing] {
            flush_ok(n);
        }
        for i in 0..KEYS {
            let key = format!("k{i}");
            let a = stored(&mut conn, "fast", &key);
            assert_eq!(
                a,
                stored(&mut conn, "fast_hot", &key),
                "round {round}, {key}"
            );
            let g = stored(&mut conn, "general", &key);
            let ring = |v: &Option<Vec<u8>>| v.as_ref().map(|v| v[8..].to_vec());
            assert_eq!((ring(&a.0), a.1), (ring(&g.0), g.1), "round {round}, {key}");
            let want = reference.get(&key).copied().unwrap_or(0);
            assert_eq!(a.0.is_some(), want > 0, "round {round}, {key}");
            assert!(a.0.is_none() || a.1 > 0, "round {round}, {key}: no expiry");
            assert!(
                a.0.is_none() || a.0.as_ref().unwrap()[..8] == [0; 8],
                "round {round}, {key}: a horizon"
            );
            for n in [&fast, &fast_hot, &general, &crossing] {
                assert_eq!(n.sum(key.as_str()), want, "round {round}, {key}");
            }
        }
    }
    assert_eq!(
        fast.stats().hot_crossings + fast_hot.stats().hot_crossings,
        0
    );
    assert!(general.stats().hot_crossings >= KEYS / 2);
    // Every key that reached the threshold crossed it once (nothing left
    // the window), and no other.
    let crossed: Vec<u64> = (0..KEYS)
        .filter(|i| reference.get(&format!("k{i}")).is_some_and(|&c| c >= CROSS))
        .collect();
    assert!(crossed.len() as u64 > KEYS / 4 && (crossed.len() as u64) < KEYS);
    assert_eq!(crossing.stats().hot_crossings, crossed.len() as u64);
    for i in crossed {
        assert!(crossing.is_cluster_hot(format!("k{i}").as_str()), "k{i}");
    }
}

/// A batch whose deltas exceed one bulk decode (the script decodes at most
/// 4000 doubles a call: the Lua stack's bound) is applied whole.
#[test]
fn a_batch_larger_than_one_decode_call_is_applied_whole() {
    let redis = RedisServer::start();
    let n = ClusterWindows::<String>::builder(
        &redis.url(),
        "big",
        Duration::from_secs(SLICE_S * SLICES),
        SLICES as usize,
    )
    .flush_interval(None)
    .max_batch_keys(5000)
    .build()
    .unwrap();
    let slice_ns = SLICE_S * 1_000_000_000;
    let now = n.now();
    let mut reference = HashMap::new();
    // 3000 keys, two slices each: 3000 * (1 + 2 * 2) = 15,000 doubles.
    for round in 0..2u64 {
        for i in 0..3000u64 {
            let key = format!("k{i}");
            for (j, c) in [(0, i % 5 + 1), (2, round + 1)] {
                assert!(n.add_at(key.as_str(), now - Duration::from_nanos(j * slice_ns), c));
                *reference.entry(key.clone()).or_insert(0u64) += c;
            }
        }
        let r = flush_ok(&n);
        assert_eq!((r.batches, r.key_deltas), (1, 6000));
    }
    let reader = node(&redis, "big", None);
    for (k, &c) in &reference {
        assert_eq!(n.sum(k.as_str()), c, "{k}");
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), c, "{k}");
    }
}

/// Rings of one slice (every add now) reach the threshold through the
/// fast path's check: each key crosses in the flush that takes its sum
/// from 49 to 56, exactly once, and not before.
#[test]
fn a_one_slice_ring_crosses_the_threshold_once() {
    let redis = RedisServer::start();
    let n = node(&redis, "one_slice", Some(50));
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    for round in 1..=10u64 {
        let now = n.now();
        for k in &keys {
            assert!(n.add_at(k.as_str(), now, 7));
        }
        let mut crossed: Vec<(String, u64)> = flush_ok(&n).crossings;
        crossed.sort();
        let want: Vec<(String, u64)> = if round == 8 {
            let mut w: Vec<_> = keys.iter().map(|k| (k.clone(), 56)).collect();
            w.sort();
            w
        } else {
            Vec::new()
        };
        assert_eq!(crossed, want, "round {round}");
    }
    assert_eq!(n.stats().hot_crossings, 20);
}
