//! Test support: a real `redis-server` per test, and a fault-injecting TCP
//! proxy to put between nodes and it. Never a mock of Redis.
#![allow(dead_code)] // each test binary uses its own part

pub mod buckets;
pub mod cluster;
pub mod flaky;
pub mod proxy;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A `redis-server` of this test's own, on a free loopback port, in a
/// directory of its own; killed (and its directory removed) when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    aof: bool,
    /// A Redis Cluster node with this `cluster-node-timeout` (ms).
    cluster: Option<u64>,
    /// Its cluster bus port (kept across restarts).
    cport: Option<u16>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port nothing listens on now (the OS's choice).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl RedisServer {
    /// Persistence off (no RDB snapshots, no append-only file).
    pub fn start() -> RedisServer {
        Self::launch(false, None)
    }

    /// A Redis Cluster node (persistence off) with a cluster bus port of
    /// its own and `cluster-node-timeout` `node_timeout_ms`; not yet part
    /// of a cluster (`cluster.rs` makes one).
    pub fn start_cluster_node(node_timeout_ms: u64) -> RedisServer {
        Self::launch(false, Some(node_timeout_ms))
    }

    /// Append-only file with `appendfsync always`: every write is on disk
    /// before Redis replies.
    pub fn start_aof() -> RedisServer {
        Self::launch(true, None)
    }

    fn launch(aof: bool, cluster: Option<u64>) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "stripecount-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut last = String::new();
        for _ in 0..5 {
            // Made for each try: a failed try's server is dropped, and its
            // drop removes the directory.
            std::fs::create_dir_all(&dir).expect("a temp dir");
            let mut s = RedisServer {
                child: None,
                port: free_port(),
                dir: dir.clone(),
                aof,
                cluster,
                cport: None,
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last = e, // the port was taken meanwhile: another
            }
        }
        panic!("redis-server did not start: {last}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--dir", self.dir.to_str().expect("utf-8 temp dir")])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(["--logfile", "redis.log"]);
        if let Some(timeout) = self.cluster {
            // The bus port is the OS's choice too (port + 10000, the
            // default, may be past 65535 or taken).
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args([
                "--cluster-port",
                &self.cport.get_or_insert_with(free_port).to_string(),
            ])
            .args(["--cluster-node-timeout", &timeout.to_string()])
            // A replica cut from its master may still take over (its data
            // age is what the test is about).
            .args(["--cluster-replica-validity-factor", "0"])
            // A replica's first sync starts at once (not after 5 s).
            .args(["--repl-diskless-sync-delay", "0"]);
        }
        if self.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-server ({e}). The Redis tests need a real redis-server \
                     on the PATH: `bash scripts/test.sh` installs Debian's redis-server package \
                     when run as root, or install it yourself (apt-get install redis-server)."
                )
            });
        self.child = Some(child);
        // Ready when it answers PING (it may be loading its append-only file).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let mut err = String::new();
                if let Some(mut e) = self.child.take().and_then(|mut c| c.stderr.take()) {
                    let _ = e.read_to_string(&mut err);
                }
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                return Err(format!("redis-server exited ({st}): {err} {log}"));
            }
            if self.ping() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("redis-server did not answer PING within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the server answers `PING` with `PONG` (a raw socket: the
    /// check must not depend on the crate under test).
    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).is_ok() && line.starts_with("+PONG")
    }

    /// SIGKILL, without waiting (for a node another thread may be
    /// talking to; `Drop` reaps it).
    pub fn sigkill(&self) {
        if let Some(c) = &self.child {
            let st = std::process::Command::new("kill")
                .args(["-9", &c.id().to_string()])
                .status()
                .expect("kill");
            assert!(st.success());
        }
    }

    /// Sends `sig` (`"STOP"`, `"CONT"`, `"9"`, ...) to the server process.
    pub fn signal(&self, sig: &str) {
        let c = self.child.as_ref().expect("a running server");
        let st = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &c.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{sig}");
    }

    /// Freezes the server (SIGSTOP): a request sent to it meanwhile waits,
    /// certainly, until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port of a cluster node.
    pub fn cluster_port(&self) -> u16 {
        self.cport.expect("a cluster node")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A plain connection, to inspect what the nodes wrote.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .expect("a connection to the test's redis-server")
    }

    /// SIGKILL (no shutdown, no final write), and wait for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL on Unix
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory (reading its
    /// append-only file, if it has one).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("restart failed: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Permits of `key` Redis holds as leased by namespace `ns`'s cluster
/// limiters, per slice: the key's ring, a field of one of the namespace's
/// four buckets, pairs of little-endian doubles (slice, permits).
pub fn recorded(redis: &RedisServer, ns: &str, key: &str) -> HashMap<u64, u64> {
    let mut c = redis.conn();
    let mut out = HashMap::new();
    for r in 0..4 {
        let ring: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(format!("{ns}:lb:{r}"))
            .arg(key)
            .query(&mut c)
            .unwrap();
        for p in ring.unwrap_or_default().chunks_exact(16) {
            let d = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap()) as u64;
            assert!(
                out.insert(d(&p[..8]), d(&p[8..])).is_none(),
                "{key}: one ring"
            );
        }
    }
    out
}

/// A node clock that runs in real time, `off` nanoseconds (wrapping:
/// negative is behind) from the system clock, which is Redis's on this
/// machine.
#[derive(Clone)]
pub struct Skewed {
    pub wall: stripecount_redis::WallClock,
    pub off: u64,
}

impl stripecount::Clock for Skewed {
    fn now(&self) -> stripecount::Timestamp {
        stripecount::Timestamp::from_nanos(self.wall.now().as_nanos().wrapping_add(self.off))
    }
}

/// Whether the server on `port` answers `PING` within `timeout` (a
/// server in `DEBUG SLEEP` does not).
pub fn answers_ping(port: u16, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).is_ok() && line.starts_with("+PONG")
}

/// Sets its flag when dropped: a test's stop signal to the threads it
/// scoped, set even when the test panics (else the scope would wait for
/// them forever).
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The most permits granted in any `span` consecutive slices, and the
/// last slice of the first span that holds that many.
pub fn busiest(per: &std::collections::BTreeMap<u64, u64>, span: u64) -> (u64, u64) {
    let (lo, hi) = (*per.keys().next().unwrap(), *per.keys().last().unwrap());
    (lo..=hi + span)
        .map(|j| {
            let w: u64 = per
                .range(j.saturating_sub(span - 1)..=j)
                .map(|(_, n)| n)
                .sum();
            (w, j)
        })
        .fold((0, 0), |b, x| if x.0 > b.0 { x } else { b })
}

/// Asserts that no `span` consecutive slices of any key grant more than
/// `limit` (`per`: permits granted per key and slice).
pub fn never_over(per: &HashMap<String, HashMap<u64, u64>>, span: u64, limit: u64) {
    for (k, slices) in per {
        let (w, j) = busiest(&slices.iter().map(|(&e, &n)| (e, n)).collect(), span);
        assert!(
            w <= limit,
            "{k}: {w} granted in the window ending at slice {j}"
        );
    }
}

/// Polls `cond` until it holds or `secs` pass (for conditions that become
/// true on another thread, e.g. a flusher's progress); panics on timeout.
pub fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Flushes until a flush succeeds (a bounded number of tries: the first
/// ones may meet a connection a fault just cut).
pub fn flush_ok<K: stripecount_redis::RedisKey, C: stripecount::Clock>(
    node: &stripecount_redis::ClusterWindows<K, C>,
) -> stripecount_redis::FlushReport<K> {
    let mut last = None;
    for _ in 0..50 {
        match node.flush() {
            Ok(r) => return r,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no flush succeeded: {last:?}");
}

/// A small deterministic generator (xorshift), so that failures replay.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A key index in `0..n`, skewed: half the draws go to the first
    /// eighth of the keys (hot and cold keys).
    pub fn key(&mut self, n: u64) -> u64 {
        let r = self.next();
        if r & 1 == 0 {
            (r >> 1) % n.div_ceil(8)
        } else {
            (r >> 1) % n
        }
    }
}
