//! Nodes as separate processes (the `stripecount-redis-node` binary)
//! adding concurrently against one real redis-server: after their final
//! flushes every key's cluster sum equals the sum of what they added.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;
use stripecount_redis::ClusterWindows;
use support::RedisServer;

#[test]
fn three_node_processes_sum_exactly() {
    let redis = RedisServer::start();
    let children: Vec<_> = (0..3)
        .map(|seed| {
            Command::new(env!("CARGO_BIN_EXE_stripecount-redis-node"))
                .args([&redis.url(), "procs", &seed.to_string(), "60000", "400"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the node binary")
        })
        .collect();
    let mut reference = HashMap::<String, u64>::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success() && stdout.ends_with("done\n"),
            "a node failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in stdout.lines().filter(|l| *l != "done") {
            let (k, c) = line.split_once(' ').unwrap();
            *reference.entry(k.to_string()).or_default() += c.parse::<u64>().unwrap();
        }
    }
    assert!(reference.len() > 300);
    assert!(reference.values().sum::<u64>() > 180_000);
    let reader: ClusterWindows<String> =
        ClusterWindows::builder(&redis.url(), "procs", Duration::from_secs(600), 10)
            .flush_interval(None)
            .build()
            .unwrap();
    for (k, &c) in &reference {
        assert_eq!(reader.fresh_sum(k.as_str()).unwrap(), c, "key {k}");
    }
}
