//! SlidingWindow against a reference model: random single-threaded
//! sequences (explicit times and ManualClock), config errors, saturation,
//! and a multi-threaded stress test crossing thousands of slice boundaries
//! with exact totals checked at barriers.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::window::{MAX_COUNT_PER_SLICE, MAX_SLICES};
use stripecount::{ConfigError, SlidingWindow, Timestamp};

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

static_assertions::assert_impl_all!(SlidingWindow: Send, Sync, std::fmt::Debug, Default);
static_assertions::assert_impl_all!(SlidingWindow<ManualClock>: Send, Sync, std::fmt::Debug);
static_assertions::assert_impl_all!(ConfigError: std::error::Error, Send, Sync, Clone, PartialEq);

/// The specification, written the slow and obvious way.
///
/// - `slots[j]` is the epoch slot `j` holds and its count (the "already
///   holds" of the too-old rule);
/// - `ledger` is every recorded add's total per epoch.
struct Model {
    slice: u64,
    s: u64,
    slots: Vec<(u64, u64)>,
    ledger: BTreeMap<u64, u64>,
    newest: Option<u64>,
}

impl Model {
    fn new(slice: u64, s: usize) -> Model {
        Model {
            slice,
            s: s as u64,
            slots: (0..s as u64).map(|j| (j, 0)).collect(),
            ledger: BTreeMap::new(),
            newest: None,
        }
    }

    fn add_at(&mut self, t: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let e = t / self.slice;
        let j = (e % self.s) as usize;
        let (se, sc) = self.slots[j];
        if se > e {
            return false;
        }
        let c = if se == e { sc } else { 0 };
        self.slots[j] = (e, c.saturating_add(n).min(MAX_COUNT_PER_SLICE));
        let l = self.ledger.entry(e).or_insert(0);
        *l = l.saturating_add(n);
        self.newest = Some(self.newest.map_or(e, |x| x.max(e)));
        true
    }

    /// What the ring holds for the window ending at `t`.
    fn sum_at(&self, t: u64) -> u64 {
        let e = t / self.slice;
        self.slots
            .iter()
            .filter(|(se, _)| *se <= e && e - se < self.s)
            .map(|(_, c)| c)
            .sum()
    }

    fn slice_counts_at(&self, t: u64) -> Vec<u64> {
        let e = t / self.slice;
        (0..self.s)
            .map(|i| {
                // epoch e - (s - 1) + i, if it exists
                let back = self.s - 1 - i;
                if back > e {
                    return 0;
                }
                let ep = e - back;
                let (se, sc) = self.slots[(ep % self.s) as usize];
                if se == ep {
                    sc
                } else {
                    0
                }
            })
            .collect()
    }

    /// The spec's exact answer from the ledger (valid when `t` is at or
    /// after the newest recorded add, and no slice saturated).
    fn ledger_sum_at(&self, t: u64) -> u64 {
        let e = t / self.slice;
        let lo = (e + 1).saturating_sub(self.s);
        self.ledger.range(lo..=e).map(|(_, c)| c).sum()
    }
}

fn random_time(rng: &mut impl Rng, t: u64, slice: u64, s: u64) -> u64 {
    match rng.random_range(0..100) {
        0..=59 => t + rng.random_range(0..slice * 2), // mostly forward, small steps
        60..=74 => t + rng.random_range(0..slice * s * 3), // across the window
        75..=84 => t.saturating_sub(rng.random_range(0..slice * s * 2)), // backwards
        85..=89 => t + slice * s * (1 << 16) * rng.random_range(1..3), // tag-space jump
        90..=94 => t + rng.random_range(0..slice * s * 1000), // long idle
        _ => t,
    }
}

#[test]
fn random_sequences_match_the_model() {
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let s = *[1usize, 2, 3, 5, 10, 16, 60]
            .get(rng.random_range(0..7))
            .unwrap();
        let slice = rng.random_range(1..50u64);
        let w = SlidingWindow::builder(Duration::from_nanos(slice * s as u64), s)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let mut m = Model::new(slice, s);
        let mut t = rng.random_range(0..slice * 100);
        for step in 0..400 {
            t = random_time(&mut rng, t, slice, s as u64);
            let n = if rng.random_bool(0.05) {
                0
            } else {
                rng.random_range(1..1000)
            };
            assert_eq!(
                w.add_at(ts(t), n),
                m.add_at(t, n),
                "seed {seed} step {step} add_at({t}, {n})"
            );
            let q = random_time(&mut rng, t, slice, s as u64);
            assert_eq!(
                w.sum_at(ts(q)),
                m.sum_at(q),
                "seed {seed} step {step} sum_at({q})"
            );
            assert_eq!(
                w.slice_counts_at(ts(q)),
                m.slice_counts_at(q),
                "seed {seed} step {step}"
            );
            // At or after the newest recorded add, the answer is the spec's.
            let newest_t = m.newest.map_or(0, |e| e * slice);
            let q2 = newest_t.max(q);
            assert_eq!(
                w.sum_at(ts(q2)),
                m.ledger_sum_at(q2),
                "seed {seed} step {step} exact at {q2}"
            );
        }
        assert_eq!(w.stripes(), 1);
    }
}

#[test]
fn manual_clock_sequences_match_the_model() {
    for seed in 0..100u64 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let clock = ManualClock::new();
        let w = SlidingWindow::builder(Duration::from_millis(100), 10)
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut m = Model::new(10_000_000, 10);
        let mut t = 0u64;
        for _ in 0..300 {
            t = random_time(&mut rng, t, 10_000_000, 10);
            clock.set(ts(t));
            let n = rng.random_range(0..50);
            w.add(n);
            m.add_at(t, n);
            assert_eq!(w.sum(), m.sum_at(t));
        }
    }
}

#[test]
fn window_semantics_by_hand() {
    // 4 slices of 10 ns.
    let w = SlidingWindow::builder(Duration::from_nanos(40), 4)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(w.add_at(ts(0), 1)); // epoch 0
    assert!(w.add_at(ts(15), 2)); // epoch 1
    assert!(w.add_at(ts(39), 4)); // epoch 3
    assert_eq!(w.sum_at(ts(39)), 7);
    assert_eq!(w.slice_counts_at(ts(39)), vec![1, 2, 0, 4]);
    assert_eq!(w.sum_at(ts(40)), 6); // epoch 0 left the window
    assert_eq!(w.slice_counts_at(ts(40)), vec![2, 0, 4, 0]);
    assert_eq!(w.sum_last_at(ts(39), 1), 4);
    assert_eq!(w.sum_last_at(ts(39), 3), 6);
    assert_eq!(w.sum_last_at(ts(39), 100), 7);
    assert!(w.add_at(ts(41), 8)); // epoch 4 recycles slot 0
    assert!(
        !w.add_at(ts(2), 16),
        "epoch 0 is older than the ring: dropped"
    );
    assert_eq!(w.sum_at(ts(41)), 14);
    assert_eq!(
        w.slice_counts_at(ts(5)),
        vec![0, 0, 0, 0],
        "epochs before 0 and a recycled slot read 0"
    );
    assert_eq!(w.sum_at(ts(10_000)), 0);
    assert!(w.add_at(ts(5), 0), "an add of 0 is trivially recorded");
    assert_eq!(w.window(), Duration::from_nanos(40));
    assert_eq!(w.slices(), 4);
    assert_eq!(w.slice_len(), Duration::from_nanos(10));
    // 39 ns lies in epoch 3: 39 / the slice length.
    assert_eq!(39 / w.slice_len().as_nanos(), 3);
}

#[test]
fn rate_per_second() {
    let w = SlidingWindow::builder(Duration::from_secs(2), 4)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    w.add_at(ts(1), 10);
    assert_eq!(w.rate_per_sec_at(ts(1)), 5.0);
}

#[test]
fn config_errors() {
    let ms = Duration::from_millis;
    assert_eq!(
        SlidingWindow::new(Duration::ZERO, 10).unwrap_err(),
        ConfigError::ZeroWindow
    );
    assert_eq!(
        SlidingWindow::new(ms(10), 0).unwrap_err(),
        ConfigError::ZeroSlices
    );
    assert_eq!(
        SlidingWindow::new(Duration::from_secs(10), MAX_SLICES + 1).unwrap_err(),
        ConfigError::TooManySlices {
            slices: MAX_SLICES + 1,
            max: MAX_SLICES
        }
    );
    assert!(SlidingWindow::new(Duration::from_nanos(MAX_SLICES as u64 * 1000), MAX_SLICES).is_ok());
    assert_eq!(
        SlidingWindow::new(Duration::from_nanos(10), 3).unwrap_err(),
        ConfigError::UnevenSlices {
            window: Duration::from_nanos(10),
            slices: 3
        }
    );
    assert_eq!(
        SlidingWindow::new(Duration::MAX, 1).unwrap_err(),
        ConfigError::WindowTooLong {
            window: Duration::MAX
        }
    );
    // Each error explains itself.
    for e in [
        ConfigError::ZeroWindow,
        ConfigError::ZeroSlices,
        SlidingWindow::new(Duration::from_nanos(10), 3).unwrap_err(),
    ] {
        assert!(e.to_string().len() > 10);
    }
    assert!(SlidingWindow::new(Duration::from_nanos(1), 1).is_ok());
}

#[test]
fn slice_counts_saturate_at_the_cell_maximum() {
    let w = SlidingWindow::builder(Duration::from_nanos(2), 2)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(w.add_at(ts(0), MAX_COUNT_PER_SLICE - 1));
    assert!(w.add_at(ts(0), 7));
    assert!(w.add_at(ts(0), u64::MAX));
    assert_eq!(w.sum_at(ts(0)), MAX_COUNT_PER_SLICE);
    assert!(w.add_at(ts(1), u64::MAX));
    assert_eq!(
        w.sum_at(ts(1)),
        2 * MAX_COUNT_PER_SLICE,
        "sums of saturated slices do not wrap"
    );
}

#[test]
fn extreme_times_do_not_overflow() {
    let w = SlidingWindow::builder(Duration::from_nanos(10), 10)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(w.add_at(ts(u64::MAX), 3));
    assert_eq!(w.sum_at(ts(u64::MAX)), 3);
    assert_eq!(w.slice_counts_at(ts(u64::MAX)).last(), Some(&3));
    assert_eq!(w.sum_at(ts(0)), 0);
}

#[test]
fn idle_size_is_documented() {
    let w = SlidingWindow::new(Duration::from_secs(10), 16).unwrap();
    // No row before the first add: a header and 20 bytes per possible
    // stripe; then 16 slices x 16 bytes = 256 bytes of row per writing
    // thread (plus the row header: its handle and slice cache, 32 bytes).
    let header = w.memory_bytes();
    assert!(header <= 256 + 20 * 256, "{header}");
    assert_eq!(w.stripes(), 0);
    assert!(w.add(1));
    assert_eq!(w.stripes(), 1);
    assert_eq!(w.memory_bytes(), header + 256 + 32);
}

/// Threads add at explicit times, all within `slices - 1` epochs of each
/// other in each round; rounds advance 1..=3 slices, crossing thousands of
/// boundaries and recycling every slot hundreds of times. After each round's
/// barrier the totals must be exact.
#[test]
fn stress_exact_totals_at_barriers() {
    let threads = 4;
    let s = 8usize;
    let slice = 1_000u64;
    let rounds = 3_000;
    let w = Arc::new(
        SlidingWindow::builder(Duration::from_nanos(slice * s as u64), s)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let barrier = Arc::new(Barrier::new(threads + 1));
    // Each round's base epoch, shared by everyone (deterministic).
    let bases: Arc<Vec<u64>> = Arc::new({
        let mut rng = StdRng::seed_from_u64(7);
        let mut b = 0u64;
        (0..rounds)
            .map(|_| {
                b += rng.random_range(1..=3);
                b
            })
            .collect()
    });
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (w, barrier, bases) = (w.clone(), barrier.clone(), bases.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t as u64);
                let mut mine = Vec::with_capacity(rounds);
                for &b in bases.iter() {
                    let mut ledger = Vec::new();
                    for _ in 0..50 {
                        let e = b + rng.random_range(0..s as u64);
                        let n = rng.random_range(1..5u64);
                        let time = e * slice + rng.random_range(0..slice);
                        assert!(w.add_at(ts(time), n), "within the ring: never too old");
                        ledger.push((e, n));
                    }
                    mine.push(ledger);
                    barrier.wait(); // round done
                    barrier.wait(); // checked
                }
                mine
            })
        })
        .collect();
    // The main thread cannot see the threads' random adds until they return,
    // so it checks each round against the window itself and saves the
    // answers; the ledgers are compared after the join.
    let mut answers = Vec::with_capacity(rounds);
    for &b in bases.iter() {
        barrier.wait();
        let newest = (b + s as u64 - 1) * slice;
        answers.push((w.sum_at(ts(newest)), w.slice_counts_at(ts(newest))));
        barrier.wait();
    }
    let ledgers: Vec<Vec<Vec<(u64, u64)>>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let mut per_epoch: BTreeMap<u64, u64> = BTreeMap::new();
    for (r, &b) in bases.iter().enumerate() {
        for l in &ledgers {
            for &(e, n) in &l[r] {
                *per_epoch.entry(e).or_insert(0) += n;
            }
        }
        let last = b + s as u64 - 1;
        let expected: Vec<u64> = (b..=last)
            .map(|e| *per_epoch.get(&e).unwrap_or(&0))
            .collect();
        assert_eq!(answers[r].1, expected, "round {r}: slice counts");
        assert_eq!(answers[r].0, expected.iter().sum::<u64>(), "round {r}: sum");
    }
}
