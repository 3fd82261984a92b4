//! One node of a cluster as a process: adds a deterministic stream of
//! counts to keys from two threads, with the background flusher on, then
//! shuts down (a final flush, retried until it succeeds) and prints what it
//! added, one `key count` line per key, then `done`.
//!
//! ```text
//! stripecount-redis-node URL NAMESPACE SEED ADDS KEYS
//! ```
//!
//! Several of them against one Redis make a fleet; the multi-process test
//! (`tests/processes.rs`) sums their output and checks it against Redis.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use stripecount_redis::ClusterWindows;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        eprintln!("usage: stripecount-redis-node URL NAMESPACE SEED ADDS KEYS (bad {name})");
        std::process::exit(2)
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url: String = arg(&args, 1, "URL");
    let ns: String = arg(&args, 2, "NAMESPACE");
    let seed: u64 = arg(&args, 3, "SEED");
    let adds: u64 = arg(&args, 4, "ADDS");
    let keys: u64 = arg(&args, 5, "KEYS");
    let node = ClusterWindows::<String>::builder(&url, &ns, Duration::from_secs(600), 10)
        .flush_interval(Some(Duration::from_millis(5)))
        .max_batch_keys(100)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        });
    let node = Arc::new(node);
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let node = Arc::clone(&node);
            std::thread::spawn(move || {
                let mut x = (seed * 2 + t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut mine = HashMap::<String, u64>::new();
                for _ in 0..adds / 2 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Half the adds on the first eighth of the keys.
                    let k = if x & 1 == 0 {
                        (x >> 1) % keys.div_ceil(8)
                    } else {
                        (x >> 1) % keys
                    };
                    let key = format!("k{k}");
                    let c = 1 + (x >> 40) % 3;
                    node.add(key.as_str(), c);
                    *mine.entry(key).or_default() += c;
                }
                mine
            })
        })
        .collect();
    let mut total = HashMap::<String, u64>::new();
    for t in threads {
        for (k, c) in t.join().expect("an adding thread") {
            *total.entry(k).or_default() += c;
        }
    }
    let node = Arc::try_unwrap(node).expect("the threads are done");
    let mut tries = 0;
    while let Err(e) = node.flush() {
        tries += 1;
        if tries > 100 {
            eprintln!("no final flush: {e}");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(node.shutdown());
    let out = std::io::stdout();
    let mut out = out.lock();
    for (k, c) in total {
        let _ = writeln!(out, "{k} {c}");
    }
    let _ = writeln!(out, "done");
}
