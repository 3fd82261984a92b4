//! The roll's cost on one thread: a `RateLimiter` (10 slices) whose
//! every request falls in a new slice, so every request rolls its state
//! (advance, seal, history, unseal) before it is granted; beside it the
//! same limiter with every request in one slice (no roll), and governor's
//! direct limiter (`check`, one CAS, no history) as the peer. Prints ns per
//! request for three rounds of each.
//!
//! ```sh
//! cargo run --release --example roll_every_request
//! ```
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{Quota, RateLimiter, Timestamp};

const N: u64 = 20_000_000;

fn timed(name: &str, mut f: impl FnMut(u64) -> bool) {
    for round in 0..3 {
        let t0 = Instant::now();
        let mut granted = 0u64;
        for i in 0..N {
            granted += u64::from(black_box(f(round * N + i)));
        }
        let ns = t0.elapsed().as_nanos() as f64 / N as f64;
        println!("{name}: {ns:.2} ns/request ({granted} granted)");
    }
}

/// A limit no request reaches, over `window` in 10 slices.
fn limiter(window: Duration) -> RateLimiter<ManualClock> {
    let quota = Quota::per(u64::from(u32::MAX), window).slices(10);
    RateLimiter::builder(quota)
        .clock(ManualClock::new())
        .build()
        .expect("a valid window")
}

fn main() {
    // 1 ns slices: request `i` at time `i` is in slice `i`.
    let lim = limiter(Duration::from_nanos(10));
    timed("ours, a roll on every request", |i| {
        lim.try_acquire_at(Timestamp::from_nanos(i), 1)
    });
    let lim = limiter(Duration::from_secs(10));
    timed("ours, no roll", |_| lim.try_acquire_at(Timestamp::ZERO, 1));
    let gov = governor::RateLimiter::direct(governor::Quota::per_second(NonZeroU32::MAX));
    timed("governor direct", |_| gov.check().is_ok());
}
