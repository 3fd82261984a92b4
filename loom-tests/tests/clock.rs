//! Loom models of the clock's clamp (`src/clock/clamp.rs`): raw times from
//! two cores whose counters disagree, a read ordered after another
//! thread's read never lagging it by `GRANULE` or more, each thread's times
//! never decreasing; and the naive per-thread clamp loom must catch (a
//! thread on the lagging core stays on its own timeline).
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_clamp::{Floor, Seen, GRANULE};
use stripecount_loom_tests::{expect_failure, model};

/// Thread A's core counts 1,000 granules ahead of thread B's.
const SKEW: u64 = 1_000 * GRANULE;

/// What a thread does with a raw time: our clamp, or a naive one.
type Clamp = fn(&Floor, u64, &mut Seen) -> u64;

fn ours(floor: &Floor, raw: u64, seen: &mut Seen) -> u64 {
    floor.clamp(raw, seen)
}

/// A thread publishes its time (two reads, the second past its first
/// publish's granule) while another thread on the lagging core reads
/// twice, the second time after it saw a published time. Every time the
/// reader returns after seeing `t` is above `t - GRANULE`, and its times
/// never decrease.
fn skewed_cores(clamp: Clamp) {
    let floor = Arc::new(Floor::new());
    let published = Arc::new(AtomicU64::new(0));
    let (f, p) = (floor.clone(), published.clone());
    let ahead = thread::spawn(move || {
        let mut seen = Seen::NEW;
        for raw in [SKEW + 10, SKEW + 10 + 2 * GRANULE] {
            let t = clamp(&f, raw, &mut seen);
            p.store(t, Ordering::Release);
        }
    });
    let (f, p) = (floor.clone(), published.clone());
    let behind = thread::spawn(move || {
        let mut seen = Seen::NEW;
        let mut last = 0;
        for raw in [20, 30] {
            let saw = p.load(Ordering::Acquire);
            let t = clamp(&f, raw, &mut seen);
            assert!(t >= last, "went back on one thread: {t} < {last}");
            assert!(t + GRANULE > saw, "{t} lags a published {saw}");
            last = t;
        }
    });
    ahead.join().unwrap();
    behind.join().unwrap();
    // The floor is a time some thread returned: never ahead of the counter
    // that is ahead.
    assert!(floor.get() <= SKEW + 10 + 2 * GRANULE);
}

#[test]
fn a_read_after_another_threads_read_lags_it_by_less_than_a_granule() {
    model(|| skewed_cores(ours));
}

/// Two threads on the same (lagging) timeline racing publishes: each
/// thread's times never decrease and the floor ends at the largest time
/// returned with a publish.
#[test]
fn racing_publishes_keep_the_largest() {
    model(|| {
        let floor = Arc::new(Floor::new());
        let hs: Vec<_> = [[5, 3], [4, 9]]
            .into_iter()
            .map(|raws| {
                let f = floor.clone();
                thread::spawn(move || {
                    let mut seen = Seen::NEW;
                    let mut out = [0; 2];
                    for (i, raw) in raws.into_iter().enumerate() {
                        out[i] = f.clamp(raw * GRANULE, &mut seen);
                    }
                    assert!(out[1] >= out[0]);
                    out
                })
            })
            .collect();
        let outs: Vec<[u64; 2]> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        // The largest time returned (9 granules, a granule past its
        // thread's first publish) is published: the floor ends there.
        let max = outs.iter().flatten().copied().max().unwrap();
        assert_eq!(floor.get(), max);
    });
}

/// The naive clamp: each thread only keeps its own last time. A thread on
/// the lagging core then lives on its own timeline, 1,000 granules behind.
#[test]
fn naive_per_thread_clamp_is_caught() {
    fn per_thread_only(_: &Floor, raw: u64, seen: &mut Seen) -> u64 {
        // `Seen` keeps its fields private: the naive design is a thread's
        // own maximum, kept here in a private floor of the thread's own.
        thread_local_max(raw, seen)
    }
    expect_failure("per-thread clamp only", || skewed_cores(per_thread_only));
}

/// A thread's own maximum, through a floor no other thread shares.
fn thread_local_max(raw: u64, seen: &mut Seen) -> u64 {
    Floor::new().clamp(raw, seen)
}
