//! How a flush goes over a node's groups on a real Redis Cluster (3
//! masters on loopback ports): the masters at once, an idle group without
//! a round trip, and the link's health group by group.

mod support;

use std::time::Duration;
use stripecount_redis::{ClusterWindows, LinkState};
use support::buckets::fields;
use support::cluster::RedisCluster;
use support::flush_ok;

const GROUPS: usize = 16;

fn node(c: &RedisCluster, ns: &str, io: Duration) -> ClusterWindows<String> {
    ClusterWindows::builder(&c.url(0), ns, Duration::from_secs(600), 10)
        .redis_cluster(GROUPS)
        .seeds([c.url(1), c.url(2)])
        .flush_interval(None)
        .timeouts(Duration::from_secs(5), io)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap()
}

/// The node serving the first of `GROUPS` equal slot ranges, where the
/// first group's slot lies (whose server keeps the node's timeline).
fn first_range_master(c: &RedisCluster) -> usize {
    let first = c.owner(0);
    assert_eq!(first, c.owner((16384 / GROUPS - 1) as u16));
    first
}

/// Holds node `i`'s write commands, scripts included (`CLIENT PAUSE ...
/// WRITE`: reads still answer, and so does the `CLIENT UNPAUSE` that ends
/// it), until dropped.
struct Paused<'a>(&'a RedisCluster, usize);

impl<'a> Paused<'a> {
    fn new(c: &'a RedisCluster, i: usize) -> Paused<'a> {
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(600_000)
            .arg("WRITE")
            .exec(&mut c.conn(i))
            .unwrap();
        Paused(c, i)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let _ = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .exec(&mut self.0.conn(self.1));
    }
}

/// One flush sends to the masters at once: while the master of the first
/// groups (the first slot range) holds every script (`CLIENT PAUSE
/// WRITE`), the other masters receive their groups' batches; a flush that
/// went over the groups in turn would wait on the first group and send
/// nothing else. After the pause every sum is exact.
#[test]
fn a_flush_does_not_wait_on_one_master_to_send_to_the_others() {
    let c = RedisCluster::start(3, 0);
    let n = node(&c, "paused", Duration::from_secs(300));
    let add = |from: u64, to: u64| {
        for i in from..to {
            n.add(format!("k{i}").as_str(), 1 + i % 3);
        }
    };
    add(0, 600);
    flush_ok(&n); // every group's link now points at its master
    let first = first_range_master(&c);
    let others: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let held = |i: usize| fields(&mut c.conn(i), "paused:*:b:*");
    let before: Vec<u64> = others.iter().map(|&i| held(i)).collect();
    add(600, 1200);
    // Unpaused on every way out (else the flush would wait 300 s).
    let paused = Paused::new(&c, first);
    std::thread::scope(|sc| {
        let flush = sc.spawn(|| n.flush());
        support::wait_until(120, "the other masters to receive their batches", || {
            others.iter().zip(&before).all(|(&i, &b)| held(i) > b)
        });
        assert!(!flush.is_finished(), "the flush waits on the paused master");
        drop(paused);
        flush.join().unwrap().expect("the flush after the pause");
    });
    for i in 0..1200u64 {
        assert_eq!(
            n.fresh_sum(format!("k{i}").as_str()).unwrap(),
            1 + i % 3,
            "k{i}"
        );
    }
}

/// With hot keys off, a group with nothing to send makes no round trip: a
/// flush with nothing to send probes the first group only (the timeline's
/// `TIME`), whatever the number of groups. A connected group with a batch
/// makes that batch's round trip only: no probe but the first group's.
#[test]
fn an_idle_group_costs_no_round_trip_and_a_busy_one_only_its_batch() {
    let c = RedisCluster::start(3, 0);
    let n = node(&c, "idle", Duration::from_secs(5));
    n.add("warm", 1);
    flush_ok(&n);
    let calls = |cmd: &str| -> u64 {
        (0..3)
            .map(|i| {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(&mut c.conn(i))
                    .unwrap();
                let at = format!("cmdstat_{cmd}:calls=");
                info.lines()
                    .find_map(|l| l.strip_prefix(at.as_str()))
                    .map_or(0, |r| r.split(',').next().unwrap().parse().unwrap())
            })
            .sum()
    };
    let reset = || {
        for i in 0..3 {
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .exec(&mut c.conn(i))
                .unwrap();
        }
    };
    // Nothing to send: the first group's probe only (a `GET` of its hot
    // version and a `TIME`), not one for each of the 16 groups.
    reset();
    flush_ok(&n);
    assert_eq!((calls("get"), calls("time"), calls("evalsha")), (1, 1, 0));
    // A group with counts still flushes.
    n.add("k", 1);
    flush_ok(&n);
    assert_eq!(n.fresh_sum("k").unwrap(), 1);
    // Every group with counts, every group connected: one batch each, and
    // the first group's probe only (the others' replies carry their hot
    // versions).
    let keys: Vec<String> = (0..400).map(|i| format!("b{i}")).collect();
    for k in &keys {
        n.add(k.as_str(), 1);
    }
    flush_ok(&n);
    for k in &keys {
        n.add(k.as_str(), 1);
    }
    reset();
    flush_ok(&n);
    // Redis counts the commands a script calls too: each batch's script
    // makes four `GET`s (the config, the node's record, the slots'
    // generations, the hot version) and one `TIME`; beyond them, one probe.
    let batches = calls("evalsha");
    assert_eq!(batches, GROUPS as u64);
    assert_eq!(
        (calls("get"), calls("time")),
        (4 * batches + 1, batches + 1)
    );
    for k in keys.iter().step_by(37) {
        assert_eq!(n.fresh_sum(k.as_str()).unwrap(), 2, "{k}");
    }
}

/// The health is the worst of the groups': while one master holds every
/// script past the node's I/O timeout, its groups' flushes fail and the
/// node is disconnected however the other groups' flushes end, at every
/// flush, with those groups counted; once the master answers, the held
/// batches go through and the node is connected.
#[test]
fn one_master_timing_out_marks_the_node_disconnected_until_it_answers() {
    let c = RedisCluster::start(3, 0);
    let n = node(&c, "health", Duration::from_millis(300));
    for i in 0..200 {
        n.add(format!("k{i}").as_str(), 1);
    }
    flush_ok(&n);
    assert_eq!(n.health().state, LinkState::Connected);
    // Not the first range's master: the first group stays up.
    let down = (0..3).find(|&i| i != first_range_master(&c)).unwrap();
    let paused = Paused::new(&c, down);
    for round in 0..3 {
        for i in 0..200 {
            n.add(format!("k{i}").as_str(), 1);
        }
        assert!(n.flush().is_err(), "round {round}");
        // A later success of an up group (an exact read) does not mark the
        // node connected while other groups are down.
        let read = (0..200).find_map(|i| n.fresh_sum(format!("k{i}").as_str()).ok());
        assert!(read.is_some(), "round {round}: no group answers");
        let h = n.health();
        assert_eq!(h.state, LinkState::Disconnected, "round {round}: {h:?}");
        assert!(
            (1..GROUPS).contains(&h.groups_disconnected),
            "round {round}: {h:?}"
        );
        assert!(h.consecutive_failures > round, "round {round}: {h:?}");
    }
    drop(paused);
    // The held batches, resent.
    let r = flush_ok(&n);
    assert!(r.batches > 0);
    let h = n.health();
    assert_eq!(
        (h.state, h.groups_disconnected),
        (LinkState::Connected, 0),
        "{h:?}"
    );
    for i in 0..200 {
        assert_eq!(n.fresh_sum(format!("k{i}").as_str()).unwrap(), 4, "k{i}");
    }
}
