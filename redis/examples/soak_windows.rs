//! `ClusterWindows` adds for a soak while the redis-server under them is
//! SIGKILLed and restarted (`scripts/soak.sh` does the killing): the sums
//! must come out exact.
//!
//! ```sh
//! cargo run --release -p stripecount-redis --example soak_windows -- redis://127.0.0.1:PORT/ SECS
//! ```
//!
//! Three nodes (`ClusterWindows<String>`, a window of one hour in 60
//! slices, so nothing added leaves it during the run), each on a thread of
//! its own adding 1 to keys drawn from 1000 (about 100,000 adds a second a
//! node), flushing every 5 ms. A line every 10 s. After `SECS` seconds the
//! adds stop, every node flushes until a flush succeeds (the server may be
//! restarting), and a fresh node reads every key's cluster sum. Checked:
//! no count dropped (`dropped_old`, `dropped_full`), and every key's sum
//! is exactly what was added to it, minus what the nodes report as lost
//! (`lost_counts`; with the append-only file fsynced on every write,
//! which the script sets, that is nothing: then every key is exact).
//! Exits non-zero otherwise.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount_redis::{ClusterError, ClusterWindows, Stats};

const KEYS: u64 = 1000;
const NODES: u64 = 3;

fn node(url: &str) -> Result<ClusterWindows<String>, ClusterError> {
    ClusterWindows::builder(url, "soak", Duration::from_secs(3600), 60)
        .flush_interval(Some(Duration::from_millis(5)))
        .backoff(Duration::from_millis(5), Duration::from_millis(100))
        .timeouts(Duration::from_secs(2), Duration::from_secs(2))
        .max_batch_keys(100)
        .build()
}

/// Tries `f` until it succeeds, for at most two minutes (the server may
/// be down for a restart).
fn retry<T>(what: &str, mut f: impl FnMut() -> Result<T, ClusterError>) -> Result<T, String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(format!("{what}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn sum(nodes: &[Arc<ClusterWindows<String>>], f: impl Fn(&Stats) -> u64) -> u64 {
    nodes.iter().map(|n| f(&n.stats())).sum()
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, secs] = &args[..] else {
        return Err("usage: soak_windows REDIS_URL SECS".into());
    };
    let secs: u64 = secs.parse().map_err(|e| format!("SECS: {e}"))?;
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..NODES)
        .map(|_| node(url).map(Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("build: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let added = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..NODES)
        .map(|i| {
            let (n, stop, added) = (
                Arc::clone(&nodes[i as usize]),
                Arc::clone(&stop),
                Arc::clone(&added),
            );
            std::thread::spawn(move || {
                let mut x = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut mine = HashMap::<String, u64>::new();
                while !stop.load(Ordering::Acquire) {
                    for _ in 0..100 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = format!("k{}", x % KEYS);
                        assert!(n.add(k.as_str(), 1), "a key not tracked");
                        *mine.entry(k).or_default() += 1;
                    }
                    added.fetch_add(100, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
                mine
            })
        })
        .collect();

    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(10).min(end - Instant::now()));
        println!(
            "t={:.0}s added={} applied={} flush_errors={} connects={} lost_counts={}",
            start.elapsed().as_secs_f64(),
            added.load(Ordering::Relaxed),
            sum(&nodes, |s| s.batches_applied),
            sum(&nodes, |s| s.flush_errors),
            sum(&nodes, |s| s.connects),
            sum(&nodes, |s| s.lost_counts),
        );
    }
    stop.store(true, Ordering::Release);
    let mut reference = HashMap::<String, u64>::new();
    for t in threads {
        for (k, c) in t.join().map_err(|_| "an adding thread panicked")? {
            *reference.entry(k).or_default() += c;
        }
    }
    for n in &nodes {
        retry("the last flush", || n.flush())?;
    }
    let reader = retry("the reader", || node(url))?;
    let (mut got, mut short, mut over) = (0u64, 0u64, 0u64);
    for (k, &want) in &reference {
        let have = retry("a sum", || reader.fresh_sum(k.as_str()))?;
        got += have;
        short += want.saturating_sub(have);
        over += have.saturating_sub(want);
    }
    let total: u64 = reference.values().sum();
    let lost = sum(&nodes, |s| s.lost_counts);
    let dropped = sum(&nodes, |s| s.dropped_old + s.dropped_full);
    println!(
        "done: added {total} to {} keys in {:.0} s; Redis holds {got}; short {short}, over {over}; \
         lost_counts {lost}, lost_batches {}, dropped {dropped}; batches applied {}, replayed {}, \
         resent {}, flush errors {}, connects {}",
        reference.len(),
        start.elapsed().as_secs_f64(),
        sum(&nodes, |s| s.lost_batches),
        sum(&nodes, |s| s.batches_applied),
        sum(&nodes, |s| s.batches_replayed),
        sum(&nodes, |s| s.resends),
        sum(&nodes, |s| s.flush_errors),
        sum(&nodes, |s| s.connects),
    );
    if over > 0 || dropped > 0 || short != lost || (lost == 0 && got != total) {
        return Err(format!(
            "the sums are not exact: {short} short and {over} over, {lost} reported lost, \
             {dropped} dropped"
        ));
    }
    println!("ok: every key's sum is what was added to it, minus the {lost} reported lost");
    Ok(())
}
