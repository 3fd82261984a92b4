//! The slowest requests of a `KeyedLimiter` (`kl`, refusing: 1 permit per
//! window) or `KeyedWindows` (`kw`) on the benchmarks' Zipf stream
//! (`stripecount_baselines::zipf`: Zipf(1.0) over 1M keys, every key added
//! once first), one thread, past `warm` requests (by
//! default the first window: 40,960,000; 0 times the first window too):
//! each request timed on its own, then percentiles and the requests over
//! 100 µs. Time advances 1 ms
//! every 4096 requests (`keyed_steady`'s pace), so a 1 s slice opens every
//! 4,096,000 requests: what shows here is the work done when a slice
//! opens, such as the limiter's automatic sweep of idle keys (BENCHMARKS.md,
//! "The refusal count; the sweep spread over the epoch") or the windows'
//! new slice map.
//!
//! With `QUIET=n` nothing is filled first and the warm-up is a quiet
//! spell (one request a millisecond, over `n` keys), so the first busy
//! slice's map is sized from a quiet one's (BENCHMARKS.md, "A busy slice
//! after a quiet one"); it also prints
//! the structure's memory after the quiet spell.
//!
//! ```sh
//! cargo run --release --example keyed_tail -- [kl|kw] [ops] [warm]
//! QUIET=100 cargo run --release --example keyed_tail -- kw 8192000 40960000
//! ```
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{KeyedLimiter, KeyedWindows, Quota, Timestamp};
use stripecount_baselines::zipf::ZipfStream;

const START: u64 = 1_000_000_000;
/// What counts as a slow request (ns).
const THRESHOLD: u64 = 100_000;

fn now_of(i: u64) -> Timestamp {
    Timestamp::from_nanos(START + (i / 4096) * 1_000_000)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map_or("kl", |s| s.as_str());
    let ops: u64 = args
        .get(2)
        .map(|s| s.parse().expect("ops: a number"))
        .unwrap_or(16_384_000);
    let warm: u64 = args
        .get(3)
        .map(|s| s.parse().expect("warm: a number"))
        .unwrap_or(40_960_000);
    let window = Duration::from_secs(10);
    let (lim, win);
    let memory: Box<dyn Fn() -> usize + '_>;
    let op: &dyn Fn(u64, Timestamp) = match which {
        "kl" => {
            lim = KeyedLimiter::builder(Quota::per(1, window).slices(10))
                .clock(ManualClock::new())
                .build()
                .expect("a valid configuration");
            memory = Box::new(|| lim.memory_bytes());
            &|k, now| {
                std::hint::black_box(lim.try_acquire_at(&k, now, 1));
            }
        }
        "kw" => {
            win = KeyedWindows::builder(window, 10)
                .clock(ManualClock::new())
                .build()
                .expect("a valid configuration");
            memory = Box::new(|| win.memory_bytes());
            &|k, now| {
                std::hint::black_box(win.add_at(&k, now, 1));
            }
        }
        _ => panic!("kl | kw"),
    };
    let z = ZipfStream::new();
    // `QUIET=n`: no fill, and the warm-up is a quiet spell, one request a
    // millisecond over `n` keys, so the first busy slice's map is sized
    // from a quiet one's.
    let quiet: Option<u64> = std::env::var("QUIET")
        .ok()
        .map(|v| v.parse().expect("QUIET: a number"));
    match quiet {
        None => {
            for k in z.all_keys() {
                op(k, Timestamp::from_nanos(START));
            }
            for i in 0..warm {
                op(z.key(i as usize), now_of(i));
            }
        }
        Some(n) => {
            for i in (0..warm).step_by(4096) {
                op(i / 4096 % n.max(1), now_of(i));
            }
        }
    }
    if quiet.is_some() {
        println!("memory after the quiet spell: {} bytes", memory());
    }
    let mut lat: Vec<u64> = Vec::with_capacity(ops as usize);
    for i in warm..warm + ops {
        let k = z.key(i as usize);
        let t = Instant::now();
        op(k, now_of(i));
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let slow: Vec<(u64, u64)> = (warm..)
        .zip(lat.iter().copied())
        .filter(|&(_, ns)| ns > THRESHOLD)
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
    println!("{} requests over 100 µs (index, ns): {slow:?}", slow.len());
}
