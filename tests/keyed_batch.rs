//! The batch methods (`add_many_at` of `KeyedWindows`, `HotKeyDetector`,
//! `HotKeySketch`; `KeyedLimiter::try_acquire_many_at`) against their
//! single calls made one after the other, on twin structures (same
//! configuration, same hasher seed, same operations):
//! - random streams (keys of a skewed set, counts of 0 to 3, times that
//!   move on, come late and fall out of the window, batches of 0 to 70
//!   items so that groups are full, partial and split), every result and
//!   every count compared after every batch;
//! - the caller's code panicking in the middle of a batch (a key's `Hash`
//!   or `Eq`, the iterator, the batch's callback): the batch must leave
//!   exactly what the single calls leave when the same call panics in the
//!   same loop (what came before stays, once; nothing after happens).
//!
//! Single-threaded, so Miri runs it (`scripts/miri.sh`); the batches'
//! concurrent behaviour is modelled with loom (`loom-tests/tests/keyed_batch.rs`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::hash::RandomState;
use stripecount::{HotKeyDetector, HotKeySketch, KeyedLimiter, KeyedWindows, Quota, Timestamp};

const fn sized<T: Copy>(full: T, miri: T) -> T {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

const SLICE: u64 = 1_000;
const SLICES: usize = 4;
const KEYS: u64 = 300;

fn window() -> Duration {
    Duration::from_nanos(SLICE * SLICES as u64)
}

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Which of a key's calls panics, and on which key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Site {
    Hash,
    Eq,
}

thread_local! {
    static ARMED: Cell<Option<(Site, u64)>> = const { Cell::new(None) };
}

fn arm(site: Site, id: u64) {
    ARMED.with(|a| a.set(Some((site, id))));
}

fn disarm() {
    ARMED.with(|a| a.set(None));
}

fn fires(site: Site, id: u64) -> bool {
    ARMED.with(|a| a.get() == Some((site, id)))
}

/// A key whose `Hash` or `Eq` panics when armed for it.
#[derive(Clone, Debug)]
struct Key(u64);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        if fires(Site::Hash, self.0) {
            panic!("Hash of key {} panics", self.0);
        }
        self.0.hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        if fires(Site::Eq, self.0) || fires(Site::Eq, other.0) {
            panic!("Eq of key {} panics", self.0);
        }
        self.0 == other.0
    }
}

impl Eq for Key {}

/// One batch: its time and its items.
struct Batch {
    at: u64,
    items: Vec<(Key, u64)>,
}

/// A random stream of batches: mostly forward in time (a slice every few
/// batches), now and then late (within the window or older than it).
fn stream(seed: u64, batches: usize) -> Vec<Batch> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut now = SLICE;
    (0..batches)
        .map(|_| {
            now += rng.random_range(0..SLICE / 2);
            let at = match rng.random_range(0..10) {
                0 => now.saturating_sub(rng.random_range(0..SLICE * SLICES as u64 * 2)),
                _ => now,
            };
            let len = rng.random_range(0..=70);
            let items = (0..len)
                .map(|_| {
                    // Skewed: low ids come often (hot keys), high ids rarely.
                    let r: f64 = rng.random();
                    let id = (r * r * r * KEYS as f64) as u64;
                    let n = match rng.random_range(0..8) {
                        0 => 0,
                        x => 1 + x % 3,
                    };
                    (Key(id), n)
                })
                .collect();
            Batch { at, items }
        })
        .collect()
}

fn items(b: &Batch) -> impl Iterator<Item = (&Key, u64)> {
    b.items.iter().map(|(k, n)| (k, *n))
}

/// Twin windows (same seed), bounded so that full slices show.
fn windows(h: &RandomState) -> KeyedWindows<Key, ManualClock, RandomState> {
    KeyedWindows::builder(window(), SLICES)
        .clock(ManualClock::new())
        .hasher(h.clone())
        .max_keys(60)
        .build()
        .unwrap()
}

fn detector(h: &RandomState) -> HotKeyDetector<Key, ManualClock, RandomState> {
    HotKeyDetector::builder(window(), SLICES, 12)
        .clock(ManualClock::new())
        .hasher(h.clone())
        .max_keys(60)
        .build()
        .unwrap()
}

fn sketch(h: &RandomState) -> HotKeySketch<Key, ManualClock, RandomState> {
    HotKeySketch::builder(window(), SLICES, 12)
        .clock(ManualClock::new())
        .hasher(h.clone())
        .memory(64 << 10)
        .admission_level(3)
        .build()
        .unwrap()
}

fn limiter(h: &RandomState, two: bool) -> KeyedLimiter<Key, ManualClock, RandomState> {
    let q = Quota::per(6, window()).slices(SLICES);
    let quotas: &[Quota] = if two {
        &[q, Quota::per(10, window() * 3).slices(3 * SLICES)]
    } else {
        &[q]
    };
    KeyedLimiter::builder(quotas)
        .clock(ManualClock::new())
        .hasher(h.clone())
        .max_keys(60)
        .build()
        .unwrap()
}

fn same_windows<C: stripecount::Clock>(
    a: &KeyedWindows<Key, C, RandomState>,
    b: &KeyedWindows<Key, C, RandomState>,
    at: u64,
) {
    // Under Miri every 10th key: reading all 300 after each batch was most
    // of each test's time there (about 95 s a test), and the full runs
    // check them all.
    for id in (0..KEYS).step_by(sized(1, 10)) {
        assert_eq!(
            a.sum_at(&Key(id), ts(at)),
            b.sum_at(&Key(id), ts(at)),
            "key {id}"
        );
    }
    assert_eq!(a.len(), b.len());
    assert_eq!(a.untracked_adds(), b.untracked_adds());
}

#[test]
fn windows_batches_are_their_single_adds() {
    for seed in 0..sized(8, 1) {
        let h = RandomState::new();
        let (a, b) = (windows(&h), windows(&h));
        for batch in stream(seed, sized(400, 12)) {
            let single = items(&batch)
                .filter(|&(k, n)| a.add_at(k, ts(batch.at), n))
                .count();
            assert_eq!(b.add_many_at(items(&batch), ts(batch.at)), single);
            same_windows(&a, &b, batch.at);
        }
    }
}

#[test]
fn detector_batches_report_what_their_single_adds_report() {
    for seed in 0..sized(8, 1) {
        let h = RandomState::new();
        let (a, b) = (detector(&h), detector(&h));
        for batch in stream(100 + seed, sized(400, 12)) {
            let mut single = Vec::new();
            for (k, n) in items(&batch) {
                if let Some(sum) = a.became_hot_at(k, ts(batch.at), n) {
                    single.push((k.0, sum));
                }
            }
            let mut many = Vec::new();
            b.add_many_at(items(&batch), ts(batch.at), |k, sum| many.push((k.0, sum)));
            assert_eq!(many, single);
            same_windows(a.windows(), b.windows(), batch.at);
            let (mut x, mut y) = (a.hot_keys_at(ts(batch.at)), b.hot_keys_at(ts(batch.at)));
            x.sort_by_key(|k| k.0);
            y.sort_by_key(|k| k.0);
            assert!(x.iter().map(|k| k.0).eq(y.iter().map(|k| k.0)));
        }
    }
}

#[test]
fn sketch_batches_report_what_their_single_adds_report() {
    for seed in 0..sized(8, 1) {
        let h = RandomState::new();
        let (a, b) = (sketch(&h), sketch(&h));
        for batch in stream(200 + seed, sized(400, 12)) {
            let mut single = Vec::new();
            for (k, n) in items(&batch) {
                if let Some(sum) = a.became_hot_at(k, ts(batch.at), n) {
                    single.push((k.0, sum));
                }
            }
            let mut many = Vec::new();
            b.add_many_at(items(&batch), ts(batch.at), |k, sum| many.push((k.0, sum)));
            assert_eq!(many, single);
            assert_eq!(a.filtered_adds(), b.filtered_adds());
            same_windows(a.windows(), b.windows(), batch.at);
        }
    }
}

#[test]
fn limiter_batches_grant_what_their_single_requests_grant() {
    for seed in 0..sized(8, 1) {
        for two in [false, true] {
            let h = RandomState::new();
            let (a, b) = (limiter(&h, two), limiter(&h, two));
            for batch in stream(300 + seed, sized(400, 12)) {
                let single: Vec<bool> = items(&batch)
                    .map(|(k, n)| a.try_acquire_at(k, ts(batch.at), n))
                    .collect();
                let mut many = vec![None; batch.items.len()];
                b.try_acquire_many_at(items(&batch), ts(batch.at), |i, ok| {
                    assert!(many[i].replace(ok).is_none(), "one verdict a request");
                });
                let many: Vec<bool> = many.into_iter().map(|v| v.unwrap()).collect();
                assert_eq!(many, single);
                // Under Miri every 10th key, as in `same_windows`.
                for id in (0..KEYS).step_by(sized(1, 10)) {
                    let k = Key(id);
                    assert_eq!(
                        a.available_at(&k, ts(batch.at)),
                        b.available_at(&k, ts(batch.at))
                    );
                }
                assert_eq!(a.len(), b.len());
                assert_eq!(a.refusals(), b.refusals());
                assert_eq!(a.untracked_decisions(), b.untracked_decisions());
            }
        }
    }
}

/// Where the caller's code panics in a batch of `len` items: the item at
/// `at` (or the iterator, or the callback, right after it).
#[derive(Clone, Copy, Debug)]
enum Fault {
    Hash,
    Eq,
    Iter,
    Callback,
}

/// A batch of `len` distinct keys (ids `base..`), each added `1 + i % 3`;
/// the test makes the one at a position faulty (its id is unique in the
/// batch, and held beforehand, so that its lookup calls its `Eq`).
fn faulty_batch(len: usize, base: u64) -> Vec<(Key, u64)> {
    (0..len)
        .map(|i| (Key(base + i as u64), 1 + i as u64 % 3))
        .collect()
}

/// The iterator of a batch, panicking instead of yielding item `at` when
/// told to.
fn iter_of(
    batch: &[(Key, u64)],
    at: usize,
    fault: Fault,
) -> impl Iterator<Item = (&Key, u64)> + '_ {
    batch.iter().enumerate().map(move |(i, (k, n))| {
        if matches!(fault, Fault::Iter) && i == at {
            panic!("the iterator panics at item {i}");
        }
        (k, *n)
    })
}

/// Runs `f` with the fault armed for key `id`, expecting it to panic.
fn panics(fault: Fault, id: u64, f: impl FnOnce()) {
    match fault {
        Fault::Hash => arm(Site::Hash, id),
        Fault::Eq => arm(Site::Eq, id),
        _ => {}
    }
    let r = catch_unwind(AssertUnwindSafe(f));
    disarm();
    assert!(r.is_err(), "{fault:?} was to panic");
}

/// The positions of a faulty item tried: the first, a group's first and
/// last, the middle of a later group, the last.
fn positions(len: usize) -> Vec<usize> {
    let mut p = vec![0, 1, 15, 16, 17, 31, 40, len - 1];
    p.retain(|&x| x < len);
    if cfg!(miri) {
        p = vec![0, 17, len - 1];
    }
    p
}

#[test]
fn a_panic_in_a_batch_leaves_what_the_single_adds_leave() {
    std::panic::set_hook(Box::new(|_| {}));
    let len = sized(50, 20);
    for fault in [Fault::Hash, Fault::Eq, Fault::Iter, Fault::Callback] {
        for at in positions(len) {
            let h = RandomState::new();
            let (a, b) = (detector(&h), detector(&h));
            let (wa, wb) = (windows(&h), windows(&h));
            let batch = faulty_batch(len, 1000);
            let bad = batch[at].0 .0;
            // Held before, so that `Eq` is called on it; and hot at its
            // next add (threshold 12), so that a callback fires there.
            for d in [&a, &b] {
                assert!(!d.add_at(&Key(bad), ts(0), 11));
            }
            for w in [&wa, &wb] {
                assert!(w.add_at(&Key(bad), ts(0), 1));
            }
            let t = ts(0);
            // The detector: the single calls, then the batch. `stop`: the
            // item whose call panicked (`at`, unless another key's lookup
            // compared the faulty key first: then both panic there).
            let stop = Cell::new(usize::MAX);
            panics(fault, bad, || {
                for (i, (k, n)) in batch.iter().enumerate() {
                    stop.set(i);
                    if matches!(fault, Fault::Iter) && i == at {
                        panic!("the loop's iterator panics");
                    }
                    if a.became_hot_at(k, t, *n).is_some() && matches!(fault, Fault::Callback) {
                        panic!("the callback panics");
                    }
                }
            });
            panics(fault, bad, || {
                b.add_many_at(iter_of(&batch, at, fault), t, |_, _| {
                    if matches!(fault, Fault::Callback) {
                        panic!("the callback panics");
                    }
                })
            });
            same_windows(a.windows(), b.windows(), 0);
            // What came before the faulty item stays, once; what came
            // after did not happen; the faulty item's own add happened
            // only where the fault comes after it (its callback).
            let stop = stop.get();
            assert!(stop <= at);
            for (i, (k, n)) in batch.iter().enumerate() {
                let held = if k.0 == bad { 11 } else { 0 };
                let added = match i.cmp(&stop) {
                    std::cmp::Ordering::Less => *n,
                    std::cmp::Ordering::Equal if matches!(fault, Fault::Callback) => *n,
                    _ => 0,
                };
                assert_eq!(
                    b.windows().sum_at(k, t),
                    held + added,
                    "{fault:?} at {at}: item {i}"
                );
            }
            // The windows (no callback: the fault ends their loop).
            if !matches!(fault, Fault::Callback) {
                panics(fault, bad, || {
                    for (i, (k, n)) in batch.iter().enumerate() {
                        if matches!(fault, Fault::Iter) && i == at {
                            panic!("the loop's iterator panics");
                        }
                        wa.add_at(k, t, *n);
                    }
                });
                panics(fault, bad, || {
                    wb.add_many_at(iter_of(&batch, at, fault), t);
                });
                same_windows(&wa, &wb, 0);
            }
        }
    }
    let _ = std::panic::take_hook();
}

#[test]
fn a_panic_in_a_batch_of_requests_leaves_what_the_single_requests_leave() {
    std::panic::set_hook(Box::new(|_| {}));
    let len = sized(50, 20);
    for fault in [Fault::Hash, Fault::Eq, Fault::Iter, Fault::Callback] {
        for at in positions(len) {
            let h = RandomState::new();
            let (a, b) = (limiter(&h, false), limiter(&h, false));
            let batch = faulty_batch(len, 2000);
            let bad = batch[at].0 .0;
            for l in [&a, &b] {
                assert!(l.try_acquire_at(&Key(bad), ts(0), 1));
            }
            let t = ts(0);
            let mut single = Vec::new();
            let stop = Cell::new(usize::MAX);
            panics(fault, bad, || {
                for (i, (k, n)) in batch.iter().enumerate() {
                    stop.set(i);
                    if matches!(fault, Fault::Iter) && i == at {
                        panic!("the loop's iterator panics");
                    }
                    single.push(a.try_acquire_at(k, t, *n));
                    if i == at && matches!(fault, Fault::Callback) {
                        panic!("the callback panics");
                    }
                }
            });
            let mut many = Vec::new();
            panics(fault, bad, || {
                b.try_acquire_many_at(iter_of(&batch, at, fault), t, |i, ok| {
                    many.push(ok);
                    if i == at && matches!(fault, Fault::Callback) {
                        panic!("the callback panics");
                    }
                })
            });
            assert_eq!(many, single, "{fault:?} at {at}");
            // Every request before the one that panicked was decided once,
            // and that one too where the panic came after its verdict.
            let decided = stop.get() + usize::from(matches!(fault, Fault::Callback));
            assert_eq!(many.len(), decided);
            for (k, _) in &batch {
                assert_eq!(
                    a.available_at(k, t),
                    b.available_at(k, t),
                    "{fault:?} at {at}"
                );
            }
            assert_eq!(a.len(), b.len());
            assert_eq!(a.refusals(), b.refusals());
        }
    }
    let _ = std::panic::take_hook();
}
