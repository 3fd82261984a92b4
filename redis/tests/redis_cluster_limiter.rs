//! `ClusterLimiter` on a real Redis Cluster (3 masters, 3 replicas, on
//! loopback ports): keys on every master, no window of any key over the
//! limit, and with `wait_for_replicas` none while a master is SIGKILLed
//! (its replica held back first, so the master grants leases the replica
//! never gets) and the replica takes over, nor while a group's slot moves
//! to another master under them. Every verdict waits for what it
//! judges (a refusal of every key, a decision on every key after the
//! failover) instead of for a time, so it is the same on any machine and
//! in any build.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use stripecount::Quota;
use stripecount_redis::{ClusterLimiter, Grant};
use support::cluster::RedisCluster;
use support::Rng;

const LIMIT: u64 = 40;
const SLICES: u64 = 4;
const KEYS: u64 = 24;

fn limiter(c: &RedisCluster, ns: &str, slice_ms: u64, wait: bool) -> ClusterLimiter<String> {
    let urls: Vec<String> = (0..c.nodes.len()).map(|i| c.url(i)).collect();
    let quota = Quota::per(LIMIT, Duration::from_millis(slice_ms * SLICES)).slices(SLICES as usize);
    let b = ClusterLimiter::builder(&urls[0], ns, quota)
        .redis_cluster(16)
        .seeds(&urls[1..])
        .max_batch(8)
        .sweep_interval(Duration::from_millis(20))
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .timeouts(Duration::from_secs(2), Duration::from_secs(5));
    let b = if wait {
        b.wait_for_replicas(1, Duration::from_millis(50))
    } else {
        b
    };
    b.build().unwrap()
}

/// Three threads a limiter asking for keys `k0..k{KEYS}` until every key
/// was refused at least once (its window full: the limit was tested on
/// every key); returns the permits granted per key and server slice, and
/// how many requests Redis refused and how many met an outage.
type PerKey = HashMap<String, HashMap<u64, u64>>;

fn hammer(nodes: &[Arc<ClusterLimiter<String>>]) -> (PerKey, u64, u64) {
    let slice_ns = u64::try_from(nodes[0].slice_len().as_nanos()).unwrap();
    // Bit `k` set once key `k` was refused.
    let refused_keys = AtomicU64::new(0);
    let all = (1u64 << KEYS) - 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    std::thread::scope(|sc| {
        let threads: Vec<_> = nodes
            .iter()
            .enumerate()
            .flat_map(|(ni, n)| (0..3).map(move |t| (ni, t, n)))
            .map(|(ni, t, n)| {
                let refused_keys = &refused_keys;
                sc.spawn(move || {
                    let mut rng = Rng::new(ni as u64 * 10 + t + 1);
                    let (mut grants, mut refused, mut outage) = (Vec::new(), 0u64, 0u64);
                    while refused_keys.load(Ordering::Relaxed) != all {
                        assert!(std::time::Instant::now() < deadline, "keys never refused");
                        let k = rng.next() % KEYS;
                        let key = format!("k{k}");
                        let want = 1 + rng.next() % 2;
                        match n.decide(key.as_str(), want) {
                            Grant::Granted { slice_start } => {
                                let slice = slice_start.as_nanos() / slice_ns;
                                grants.push((key, slice, want));
                            }
                            Grant::Refused { .. } => {
                                refused += 1;
                                refused_keys.fetch_or(1 << k, Ordering::Relaxed);
                            }
                            _ => outage += 1,
                        }
                    }
                    (grants, refused, outage)
                })
            })
            .collect();
        let mut per = PerKey::new();
        let (mut refused, mut outage) = (0, 0);
        for t in threads {
            let (g, r, o) = t.join().unwrap();
            refused += r;
            outage += o;
            for (k, e, n) in g {
                *per.entry(k).or_default().entry(e).or_default() += n;
            }
        }
        (per, refused, outage)
    })
}

/// No `SLICES` consecutive slices of any key grant more than the limit.
fn never_over(per: &PerKey) {
    support::never_over(per, SLICES, LIMIT);
}

#[test]
fn limiters_never_exceed_the_limit_with_keys_on_every_master() {
    let c = RedisCluster::start(3, 1);
    // Slices of 1 s: every key's window fills (and refuses) however slow
    // the machine is.
    let nodes: Vec<_> = (0..3)
        .map(|_| Arc::new(limiter(&c, "lim", 1_000, false)))
        .collect();
    let (per, refused, outage) = hammer(&nodes);
    assert_eq!(outage, 0);
    assert!(refused > 0);
    assert_eq!(per.len() as u64, KEYS);
    never_over(&per);
    for n in &nodes {
        n.release_all().unwrap();
        let s = n.stats();
        assert_eq!(s.errors, 0, "{s:?}");
    }
    for i in (0..6).filter(|&i| c.is_master(i)) {
        assert!(c.dbsize(i) > 0, "master {i} holds no key");
    }
}

/// Every thread of every limiter asks for 2 permits of each key, 30
/// times over; into `per` (key, server slice), and into `decided` the keys
/// that got an answer other than an outage; returns the requests that met
/// an outage.
fn ask_all(
    nodes: &[Arc<ClusterLimiter<String>>],
    keys: &[String],
    per: &mut PerKey,
    decided: &mut HashSet<String>,
) -> u64 {
    let slice_ns = u64::try_from(nodes[0].slice_len().as_nanos()).unwrap();
    type Asked = (Vec<(String, u64)>, Vec<String>, u64);
    let results: Vec<Asked> = std::thread::scope(|sc| {
        let threads: Vec<_> = nodes
            .iter()
            .flat_map(|n| (0..3).map(move |_| n))
            .map(|n| {
                sc.spawn(move || {
                    let (mut grants, mut refused, mut outage) = (Vec::new(), Vec::new(), 0u64);
                    for _ in 0..30 {
                        for k in keys {
                            match n.decide(k.as_str(), 2) {
                                Grant::Granted { slice_start } => {
                                    grants.push((k.clone(), slice_start.as_nanos() / slice_ns))
                                }
                                Grant::Refused { .. } => refused.push(k.clone()),
                                _ => outage += 1,
                            }
                        }
                    }
                    (grants, refused, outage)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut outage = 0;
    for (grants, refused, o) in results {
        outage += o;
        decided.extend(refused);
        for (k, e) in grants {
            decided.insert(k.clone());
            *per.entry(k).or_default().entry(e).or_default() += 2;
        }
    }
    outage
}

/// The keys' permits are taken in full while a master's replica is held
/// back (stopped, cut from it: `RedisCluster::hold_back_replica`), the
/// master is SIGKILLed, the replica is resumed and takes over, and then
/// other nodes ask for every key until each got a decision, all within one
/// window (slices of 30 s: a failover takes seconds). Without
/// `wait_for_replicas` the promoted replica never had the dead master's
/// leases and grants them again: the dead master's keys get more than the
/// limit in one window.
fn failover(wait: bool) -> (PerKey, u64, u64) {
    let mut c = RedisCluster::start(3, 1);
    let m = (0..c.nodes.len()).find(|&i| c.is_master(i)).unwrap();
    let r = c.replica_of(m, m);
    let nodes: Vec<_> = (0..3)
        .map(|_| Arc::new(limiter(&c, "limfo", 30_000, wait)))
        .collect();
    let keys: Vec<String> = (0..48).map(|i| format!("a{i}")).collect();
    let mut per = PerKey::new();
    c.hold_back_replica(m, r);
    let outage = ask_all(&nodes, &keys, &mut per, &mut HashSet::new());
    c.nodes[m].sigkill();
    c.promote(r);
    if wait {
        // The promoted replica has no replica of its own: until the old
        // master is back, as its replica, its keys' leases are not used.
        c.nodes[m].restart();
        c.wait_replica_up(m);
    }
    // Other nodes ask now (the first ones remember their refusals until
    // the window frees room: they would not ask), until every key was
    // decided: the promoted replica's keys meet outages while the nodes
    // find it (and, with `wait`, while its new replica catches up).
    let others: Vec<_> = (0..3)
        .map(|_| Arc::new(limiter(&c, "limfo", 30_000, wait)))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut decided = HashSet::new();
    let mut after = 0;
    while decided.len() < keys.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "keys never decided after the failover: {:?}",
            keys.iter()
                .filter(|k| !decided.contains(*k))
                .collect::<Vec<_>>()
        );
        after += ask_all(&others, &keys, &mut per, &mut decided);
    }
    let not_replicated = nodes
        .iter()
        .chain(&others)
        .map(|n| n.stats().not_replicated)
        .sum();
    (per, outage + after, not_replicated)
}

#[test]
fn a_failover_with_wait_for_replicas_never_exceeds_the_limit() {
    let (per, outage, not_replicated) = failover(true);
    // The dead master's keys were refused while its replica was held back,
    // and granted by the promoted replica once it had a replica.
    assert!(outage > 0 && not_replicated > 0);
    assert_eq!(per.len(), 48);
    never_over(&per);
}

/// The counter-example: without `wait_for_replicas` the failover above
/// grants some key more than its limit in a window.
#[test]
fn a_failover_without_wait_exceeds_the_limit() {
    let (per, _, _) = failover(false);
    let over = per.values().any(|slices| {
        support::busiest(&slices.iter().map(|(&e, &n)| (e, n)).collect(), SLICES).0 > LIMIT
    });
    assert!(over, "no key over its limit: {per:?}");
}

/// A group's slot moved from one master to another (`RedisCluster::migrate`,
/// as `redis-cli --cluster reshard` does: its keys a few at a time, so
/// requests meet `ASK` and `TRYAGAIN` while the slot is split) while three
/// limiters ask for every key: no window of any key over the limit, and
/// every key decided by Redis again once the slot has moved.
#[test]
fn a_slot_migrated_under_the_limiters_never_exceeds_the_limit() {
    let c = RedisCluster::start(3, 1);
    let nodes: Vec<_> = (0..3)
        .map(|_| Arc::new(limiter(&c, "limmig", 1_000, false)))
        .collect();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("m{i}")).collect();
    // The slot of the group of key "m0": its buckets hold the key's ring.
    let slice_ns = u64::try_from(nodes[0].slice_len().as_nanos()).unwrap();
    let Grant::Granted { slice_start } = nodes[0].decide("m0", 1) else {
        panic!("the probe is refused")
    };
    let mut per = PerKey::new();
    *per.entry("m0".into())
        .or_default()
        .entry(slice_start.as_nanos() / slice_ns)
        .or_default() += 1;
    let slot = c.slot_of_field("limmig:{*}:lb:*", "m0");
    let (from, to) = std::thread::scope(|sc| {
        let moving = sc.spawn(|| c.migrate(slot));
        let mut decided = HashSet::new();
        while !moving.is_finished() {
            ask_all(&nodes, &keys, &mut per, &mut decided);
        }
        moving.join().unwrap()
    });
    assert_ne!(from, to);
    assert_eq!(c.owner(slot), to);
    // After the move, every key gets a decision from Redis again.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut decided = HashSet::new();
    while decided.len() < keys.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "keys never decided after the move"
        );
        ask_all(&nodes, &keys, &mut per, &mut decided);
    }
    never_over(&per);
    let moved_errors: u64 = nodes.iter().map(|n| n.stats().errors).sum();
    println!("errors met while the slot moved: {moved_errors}");
}
