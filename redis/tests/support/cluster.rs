//! A real Redis Cluster on loopback ports: `redis-server
//! --cluster-enabled yes` per node, each in a directory of its own, joined
//! by `redis-cli --cluster create`; every node killed when dropped.

use super::RedisServer;
use std::process::Command;
use std::time::{Duration, Instant};

/// A Redis Cluster of this test's own.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, every slot
    /// assigned; returns once every node sees the cluster as `ok`.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_cluster_node(1_000))
            .collect();
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let out = cmd.output().unwrap_or_else(|e| {
            panic!("cannot run redis-cli ({e}): the cluster tests need redis-cli on the PATH (Debian's redis-tools)")
        });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = RedisCluster { nodes };
        c.wait_ok(masters * (1 + replicas));
        // Every replica attached and in sync with its master.
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..c.nodes.len() {
            while !c.is_master(i) && !c.replica_up(i) {
                assert!(Instant::now() < deadline, "replica {i} is not in sync");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        c
    }

    /// Waits until every node reports `cluster_state:ok` with every slot
    /// assigned and all `known` nodes.
    pub fn wait_ok(&self, known: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in &self.nodes {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut n.conn())
                    .unwrap();
                if info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_assigned:16384")
                    && info.contains(&format!("cluster_known_nodes:{known}\r"))
                {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster is not ok: {info}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// A plain connection to node `i`.
    pub fn conn(&self, i: usize) -> redis::Connection {
        self.nodes[i].conn()
    }

    /// Node `i`'s cluster id.
    pub fn id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.conn(i))
            .unwrap()
    }

    /// Whether node `i` is a master now.
    pub fn is_master(&self, i: usize) -> bool {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut self.conn(i)).unwrap();
        matches!(&role[0], redis::Value::BulkString(b) if b == b"master")
    }

    /// The replica of master `i`, as node `of` sees the cluster (waiting
    /// until it sees one: a replica's link to its master is gossiped).
    pub fn replica_of(&self, i: usize, of: usize) -> usize {
        let id = self.id(i);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut self.conn(of))
                .unwrap();
            if let Some(line) = nodes
                .lines()
                .find(|l| l.split(' ').nth(3) == Some(id.as_str()))
            {
                let port: u16 = line
                    .split(' ')
                    .nth(1)
                    .unwrap()
                    .split([':', '@'])
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap();
                return self.nodes.iter().position(|n| n.port() == port).unwrap();
            }
            assert!(Instant::now() < deadline, "no replica of {id}: {nodes}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The node serving `slot` (as node 0 sees the cluster).
    pub fn owner(&self, slot: u16) -> usize {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.conn(0))
            .unwrap();
        for line in nodes.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if !f[2].contains("master") {
                continue;
            }
            for r in &f[8..] {
                let (lo, hi) = match r.split_once('-') {
                    Some((a, b)) => (a.parse::<u16>(), b.parse::<u16>()),
                    None => (r.parse::<u16>(), r.parse::<u16>()),
                };
                if let (Ok(lo), Ok(hi)) = (lo, hi) {
                    if (lo..=hi).contains(&slot) {
                        let port: u16 = f[1].split([':', '@']).nth(1).unwrap().parse().unwrap();
                        return self.nodes.iter().position(|n| n.port() == port).unwrap();
                    }
                }
            }
        }
        panic!("no master serves slot {slot}: {nodes}");
    }

    /// The slot of a key, as the cluster computes it.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.conn(0))
            .unwrap()
    }

    /// Whether node `i` reports `cluster_state:ok`.
    pub fn state_ok(&self, i: usize) -> bool {
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut self.conn(i))
            .unwrap()
            .contains("cluster_state:ok")
    }

    /// Whether node `i` is a replica with its link to its master up.
    pub fn replica_up(&self, i: usize) -> bool {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut self.conn(i))
            .unwrap();
        info.contains("role:slave") && info.contains("master_link_status:up")
    }

    /// Waits until node `i` is a replica with its link to its master up.
    pub fn wait_replica_up(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.replica_up(i) {
            assert!(
                Instant::now() < deadline,
                "node {i} is not a replica in sync"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Holds replica `r` of master `m` back: asleep for `secs` (`DEBUG
    /// SLEEP`, on the thread returned, which ends when it wakes), then cut
    /// from its master (`CLIENT KILL TYPE replica`), which it cannot reach
    /// again while asleep. What `m` writes from now on reaches no replica.
    pub fn hold_back_replica(&self, m: usize, r: usize, secs: u64) -> std::thread::JoinHandle<()> {
        let mut conn = self.conn(r);
        let sleeper = std::thread::spawn(move || {
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(secs)
                .query(&mut conn)
                .unwrap();
        });
        while super::answers_ping(self.nodes[r].port(), Duration::from_millis(50)) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let cut: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut self.conn(m))
            .unwrap();
        assert_eq!(cut, 1);
        sleeper
    }

    /// Waits until node `r` is a master and every live node sees the
    /// cluster `ok` (a replica taking over its dead master's slots: the
    /// other nodes learn of it a little later, and answer `CLUSTERDOWN`
    /// until then).
    pub fn wait_promoted(&self, r: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let all_ok = || {
            (0..self.nodes.len())
                .filter(|&i| super::answers_ping(self.nodes[i].port(), Duration::from_millis(50)))
                .all(|i| self.state_ok(i))
        };
        while !(self.is_master(r) && all_ok()) {
            assert!(Instant::now() < deadline, "no failover to node {r}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Keys stored on node `i`.
    pub fn dbsize(&self, i: usize) -> u64 {
        redis::cmd("DBSIZE").query(&mut self.conn(i)).unwrap()
    }
}
