//! `MultiWindow` under threads: adds from many threads counted once at
//! every level, and readers racing the folds seeing every count exactly
//! once (against the reference model of `multi_model`).

mod multi_model;

use multi_model::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::Arc;
use stripecount::MultiWindow;

#[test]
fn adds_from_many_threads_are_counted_once_at_every_level() {
    // Threads add on one shared schedule of times, so they roll the same
    // slices at every level concurrently (and grow stripes on contention).
    let levels = [(ns(40), 4), (ns(200), 10), (ns(1200), 6)];
    let w = Arc::new(MultiWindow::new(&levels).unwrap());
    let threads = 4u64;
    let per_thread = 20_000u64;
    let time = |i: u64| i / 8; // 8 adds per nanosecond per thread
    let handles: Vec<_> = (0..threads)
        .map(|th| {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    w.add_at(ts(time(i)), th + 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // An add dropped as older than its ring (a slow thread behind a fast
    // one in the same stripe) is outside every window at the final time,
    // so the totals are exact.
    let adds: Vec<(u64, u64)> = (0..threads)
        .flat_map(|th| (0..per_thread).map(move |i| (time(i), th + 1)))
        .collect();
    let now = time(per_thread - 1);
    let mut rng = StdRng::seed_from_u64(7);
    for span in spans(&levels, &mut rng) {
        assert_eq!(
            w.sum_over_at(ts(now), span),
            reference(&levels, &adds, now, span),
            "{span:?}"
        );
    }
    // Level 2 at 2499: epochs 7..=12 of 200 ns, i.e. times 1400..=2499.
    assert_eq!(w.sum_over_at(ts(now), ns(1200)), 1100 * 8 * (1 + 2 + 3 + 4));
}

/// Readers of the top level race the folds that move the previous round's
/// counts from ring 0 to ring 1 to ring 2, and must see every count exactly
/// once, every time: each read covers only completed rounds that the
/// running round does not roll out.
#[test]
fn reads_racing_folds_are_exact() {
    // Slices of 1, 8 and 256 ns; rings of 4, 8 and 4 slots. A round is the
    // 256 ns of one level-2 epoch: its adds roll (and fold) the previous
    // round's cells out of rings 0 and 1.
    let levels = [(ns(4), 4), (ns(64), 8), (ns(1024), 4)];
    let w = Arc::new(MultiWindow::new(&levels).unwrap());
    let adders = 3u64;
    let rounds = 40u64;
    let per_round: u64 = (1..=adders).map(|n| 256 * n).sum();
    let barrier = Arc::new(std::sync::Barrier::new(adders as usize + 1));
    let handles: Vec<_> = (0..adders)
        .map(|th| {
            let (w, barrier) = (Arc::clone(&w), Arc::clone(&barrier));
            std::thread::spawn(move || {
                for r in 0..rounds {
                    barrier.wait();
                    for t in 256 * r..256 * (r + 1) {
                        w.add_at(ts(t), th + 1);
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    let mut reads = 0u64;
    for r in 0..rounds {
        barrier.wait();
        // The last three level-2 slices before 256 r: rounds r-3..r-1.
        // (Round r-4, the fourth slice of that window, is being dropped
        // from ring 2 by round r's adds, which are newer than this read.)
        let want = r.min(3) * per_round;
        for _ in 0..200 {
            if r > 0 {
                assert_eq!(w.sum_over_at(ts(256 * r - 1), ns(768)), want, "round {r}");
                reads += 1;
            }
        }
        barrier.wait();
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(w.sum_over_at(ts(256 * rounds - 1), ns(1024)), 4 * per_round);
    assert_eq!(reads, 200 * (rounds - 1));
}
