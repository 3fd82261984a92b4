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

/// Sends `CLUSTER MEET` for every pair of nodes that do not know each
/// other yet, once every node has left the fresh state (its config epoch
/// set by redis-cli: a node that knows another refuses that).
fn meet_missing(nodes: &[RedisServer]) {
    let info = |n: &RedisServer| -> Option<String> {
        let mut c = redis::Client::open(n.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        redis::cmd("CLUSTER")
            .arg("NODES")
            .query::<String>(&mut c)
            .ok()
    };
    let views: Vec<Option<String>> = nodes.iter().map(info).collect();
    let epoch_set = |v: &str| {
        v.lines()
            .find(|l| l.contains("myself"))
            .and_then(|l| l.split(' ').nth(6))
            .is_some_and(|e| e != "0")
    };
    if !views.iter().all(|v| v.as_deref().is_some_and(epoch_set)) {
        return;
    }
    for (i, v) in views.iter().enumerate() {
        let v = v.as_deref().unwrap();
        for (j, other) in nodes.iter().enumerate() {
            if i != j && !v.contains(&format!(":{}@", other.port())) {
                let mut c = nodes[i].conn();
                let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(other.port())
                    .arg(other.cluster_port())
                    .query(&mut c);
            }
        }
    }
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
        let out_path = std::env::temp_dir().join(format!(
            "stripecount-cluster-create-{}-{}.log",
            std::process::id(),
            nodes[0].port()
        ));
        let out = std::fs::File::create(&out_path).expect("a log file");
        let mut child = cmd
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-cli ({e}): the cluster tests need redis-cli on the PATH (Debian's redis-tools)")
            });
        // redis-cli waits, without end, until every node knows every other.
        // A node drops a handshake that takes longer than the node timeout
        // (a loaded machine), and nothing meets them again: once every node
        // has its epoch (redis-cli's `CLUSTER MEET`s come after), the pairs
        // that still do not know each other are met again, every second.
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut next_meet = Instant::now() + Duration::from_secs(2);
        let status = loop {
            if let Some(st) = child.try_wait().expect("redis-cli") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "redis-cli --cluster create did not finish in 120 s: {}",
                    std::fs::read_to_string(&out_path).unwrap_or_default()
                );
            }
            if Instant::now() > next_meet {
                next_meet = Instant::now() + Duration::from_secs(1);
                meet_missing(&nodes);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(&out_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        assert!(status.success(), "redis-cli --cluster create failed: {log}");
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

    /// Moves `slot` from its master to another master by hand, as `redis-cli
    /// --cluster reshard` does: importing and migrating, the keys a few at a
    /// time (so batches meet `ASK` and `TRYAGAIN` while the slot is split),
    /// then the slot's new owner announced to every master.
    pub fn migrate(&self, slot: u16) -> (usize, usize) {
        let from = self.owner(slot);
        let to = (0..self.nodes.len())
            .find(|&i| i != from && self.is_master(i))
            .unwrap();
        let (from_id, to_id) = (self.id(from), self.id(to));
        let setslot = |i: usize, how: &str, id: &str| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query(&mut self.conn(i))
                .unwrap();
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        let port = self.nodes[to].port();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(2)
                .query(&mut self.conn(from))
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(port)
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut self.conn(from))
                .unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        setslot(to, "NODE", &to_id);
        setslot(from, "NODE", &to_id);
        for i in 0..self.nodes.len() {
            if i != from && i != to && self.is_master(i) {
                setslot(i, "NODE", &to_id);
            }
        }
        (from, to)
    }

    /// The slot of the bucket (a key matching `pattern` on any master)
    /// that holds field `field`; exactly one must.
    pub fn slot_of_field(&self, pattern: &str, field: &str) -> u16 {
        let names: Vec<String> = (0..self.nodes.len())
            .filter(|&i| self.is_master(i))
            .flat_map(|i| {
                let mut conn = self.conn(i);
                let buckets: Vec<String> =
                    redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap();
                buckets.into_iter().filter(move |b| {
                    redis::cmd("HEXISTS")
                        .arg(b)
                        .arg(field)
                        .query::<bool>(&mut conn)
                        .unwrap()
                })
            })
            .collect();
        assert_eq!(names.len(), 1, "{field} in {names:?}");
        self.slot(&names[0])
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

    /// Holds replica `r` of master `m` back until [`promote`](Self::promote):
    /// the replica is stopped (SIGSTOP), then cut from its master (`CLIENT
    /// KILL TYPE replica`, answered before this returns). A stopped process
    /// cannot connect again, so nothing `m` writes from now on reaches any
    /// replica, whatever the time until `m` is killed: what the failover
    /// tests need, on any machine and build. (Stopped without the cut, the
    /// replica would still get what the master wrote to the connection
    /// before dying: the kernel buffers it, several MB, and the stopped
    /// replica reads it when resumed.)
    pub fn hold_back_replica(&self, m: usize, r: usize) {
        assert!(
            !self.is_master(r) && self.replica_up(r),
            "{r} is not an attached replica"
        );
        self.nodes[r].signal("STOP");
        let cut: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut self.conn(m))
            .unwrap();
        assert_eq!(cut, 1, "master {m} had one replica connected");
    }

    /// Resumes replica `r` held back by [`hold_back_replica`](Self::hold_back_replica)
    /// (its master killed meanwhile) and makes it take over its master's
    /// slots at once (`CLUSTER FAILOVER FORCE`: no handshake with the dead
    /// master; the other masters vote), then waits as [`wait_promoted`](Self::wait_promoted).
    /// A replica whose automatic failover started first answers that it is a
    /// master already: fine.
    pub fn promote(&self, r: usize) {
        self.nodes[r].signal("CONT");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let res: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .arg("FORCE")
                .query(&mut self.conn(r));
            match res {
                Ok(_) => break,
                Err(_) if self.is_master(r) => break,
                Err(e) => {
                    // Just resumed: it may not know yet that its master is
                    // gone (`CLUSTER FAILOVER` needs a replica).
                    assert!(
                        Instant::now() < deadline,
                        "CLUSTER FAILOVER FORCE on {r}: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        self.wait_promoted(r);
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
