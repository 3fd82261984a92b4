//! The contention report (placeholder: a small demonstration of threads
//! counting into one sliding window; the report work replaces it).

use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use stripecount::{CoarseClock, SlidingWindow, StripedCounter};

pub fn run(_args: &[String]) -> ExitCode {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
    let window = Arc::new(
        SlidingWindow::with_clock(Duration::from_secs(1), 10, CoarseClock::new())
            .expect("1 s / 10 slices is a valid window"),
    );
    let total = Arc::new(StripedCounter::new());
    let barrier = Arc::new(Barrier::new(threads + 1));
    let run_for = Duration::from_millis(500);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (window, total, barrier) = (window.clone(), total.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let start = Instant::now();
                let mut n = 0u64;
                while start.elapsed() < run_for {
                    for _ in 0..1024 {
                        window.add(1);
                    }
                    n += 1024;
                }
                total.add(n);
            })
        })
        .collect();
    barrier.wait();
    for h in handles {
        h.join().expect("worker panicked");
    }
    let in_window = window.sum();
    println!(
        "{threads} threads added {} in {run_for:?}; the last 1 s window holds {in_window} ({} stripes)",
        total.sum(),
        window.stripes()
    );
    if in_window == total.sum() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
