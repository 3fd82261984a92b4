//! A fleet-wide limiter's warm path for instruction counts by callgrind
//! (`scripts/callgrind-lease.sh`): decides on keys whose leases the node
//! holds; the timed loop is `timed`. Arguments: a Redis URL, the timed
//! decides, the untimed ones.

use std::hint::black_box;
use std::time::Duration;
use stripecount::Quota;
use stripecount_redis::{ClusterLimiter, MAX_LEASE};

const KEYS: u64 = 4096;

#[inline(never)]
fn timed(l: &ClusterLimiter<u64>, ops: u64, now: stripecount::Timestamp) -> u64 {
    let mut granted = 0;
    for i in 0..ops {
        granted += u64::from(l.try_acquire_at(&black_box(i % KEYS), now, 1));
    }
    granted
}

fn main() {
    let mut a = std::env::args().skip(1);
    let url = a.next().expect("a Redis URL");
    let ops: u64 = a.next().map_or(1_000_000, |s| s.parse().unwrap());
    let warm: u64 = a.next().map_or(1_000_000, |s| s.parse().unwrap());
    let quota = Quota::per(1 << 50, Duration::from_secs(86_400)).slices(1);
    let ns = format!("steady-{}", std::process::id());
    let l: ClusterLimiter<u64> = ClusterLimiter::builder(&url, &ns, quota)
        .max_batch(MAX_LEASE)
        .build()
        .expect("a limiter");
    for k in 0..KEYS {
        assert!(l.try_acquire(&k, 1) && l.try_acquire(&k, 1));
    }
    let now = l.now();
    black_box(timed(&l, warm, now));
    let g = timed(&l, ops, now);
    let s = l.stats();
    println!("granted {g} of {ops}; round trips {}", s.round_trips);
}
