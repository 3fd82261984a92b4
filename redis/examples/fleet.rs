//! Three nodes of a fleet (threads here; processes or machines in a
//! service) share per-key windows through one Redis.
//!
//! ```text
//! redis-server --port 6379 --save '' &
//! cargo run -p stripecount-redis --example fleet -- redis://127.0.0.1:6379/
//! ```

use std::sync::Arc;
use std::time::Duration;
use stripecount_redis::ClusterWindows;

fn main() -> Result<(), stripecount_redis::ClusterError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let nodes: Vec<Arc<ClusterWindows<String>>> = (0..3)
        .map(|_| {
            let ns = format!("fleet-example-{}", std::process::id());
            ClusterWindows::builder(&url, &ns, Duration::from_secs(60), 60)
                .flush_interval(Some(Duration::from_millis(50)))
                .hot_threshold(1_000)
                .on_hot_crossing(|k, sum| println!("crossing: {k} reached {sum} across the fleet"))
                .build()
                .map(Arc::new)
        })
        .collect::<Result<_, _>>()?;
    if nodes[0].health().consecutive_failures > 0 {
        eprintln!("cannot reach {url}: {:?}", nodes[0].health().last_error);
        std::process::exit(1);
    }
    // Each node serves its share of the traffic: "popular" from all three.
    let threads: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let n = Arc::clone(n);
            std::thread::spawn(move || {
                for j in 0..2_000 {
                    n.add("popular", 1);
                    n.add(format!("client-{i}-{}", j % 10).as_str(), 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a node thread");
    }
    for n in &nodes {
        n.flush()?;
    }
    let n = &nodes[0];
    println!("popular: {} across the fleet", n.fresh_sum("popular")?);
    println!(
        "client-1-3: {} (only node 1 saw it)",
        n.fresh_sum("client-1-3")?
    );
    n.refresh_hot()?;
    println!("hot across the fleet: {:?}", n.cluster_hot_keys());
    println!("node 0: {:?}", n.stats());
    Ok(())
}
