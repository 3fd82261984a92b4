//! The slowest requests of a `KeyedLimiter` on the issue-10 Zipf stream
//! (1M keys), one thread, past the first window: each request timed on its
//! own, then percentiles and the requests over 1 ms. Time advances 1 ms
//! every 4096 requests (`keyed_steady`'s pace), so a 1 s slice opens every
//! 4,096,000 requests: what shows here is the automatic sweep of idle keys
//! (BENCHMARKS.md, issue 11, "The sweep, spread over the epoch").
//!
//! ```sh
//! cargo run --release --example keyed_tail -- [ops]
//! ```
use std::time::{Duration, Instant};
use stripecount::{KeyedLimiter, ManualClock};
use stripecount_baselines::zipf::ZipfStream;

const START: u64 = 1_000_000_000;

fn now_of(i: u64) -> u64 {
    START + (i / 4096) * 1_000_000
}

fn main() {
    let ops: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("ops: a number"))
        .unwrap_or(16_384_000);
    let z = ZipfStream::new();
    let lim = KeyedLimiter::with_clock(1, Duration::from_secs(10), 10, ManualClock::new())
        .expect("a valid configuration");
    for k in z.all_keys() {
        lim.try_acquire_at(&k, START, 1);
    }
    let warm = 40_960_000u64;
    for i in 0..warm {
        lim.try_acquire_at(&z.key(i as usize), now_of(i), 1);
    }
    let mut lat: Vec<u64> = Vec::with_capacity(ops as usize);
    for i in warm..warm + ops {
        let k = z.key(i as usize);
        let t = Instant::now();
        std::hint::black_box(lim.try_acquire_at(&k, now_of(i), 1));
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let slow: Vec<(u64, u64)> = (warm..)
        .zip(lat.iter().copied())
        .filter(|&(_, ns)| ns > 1_000_000)
        .collect();
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    println!(
        "ns: p50 {} p99 {} p99.9 {} p99.99 {} max {}",
        q(0.5),
        q(0.99),
        q(0.999),
        q(0.9999),
        lat[lat.len() - 1]
    );
    println!("{} requests over 1 ms (index, ns): {slow:?}", slow.len());
}
