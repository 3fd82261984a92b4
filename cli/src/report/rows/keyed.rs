//! The keyed rows: one key for all threads ("one hot key"), or the Zipf
//! stream of `stripecount_baselines::zipf` (1M keys, s = 1), each thread
//! starting at its own offset. `KeyedWindows` and the detectors use the
//! report's window on `CoarseClock` (the detectors a threshold of
//! [`HOT_THRESHOLD`], `HotKeySketch` in [`SKETCH_MEMORY`]); heavykeeper's
//! `TopK`, the fixed-memory peer, counts the same stream with the settings
//! of the hot-key bench (`heavykeeper_topk`); the map of atomics is a
//! `DashMap` (the map governor itself uses); `KeyedLimiter` and governor
//! keyed get the limiters' admitting and refusing quotas (every key gets
//! the quota).

use super::{Setup, ADMIT_LIMIT, HOT_KEY, HOT_THRESHOLD, REFUSE_LIMIT, SLICES, WINDOW};
use dashmap::DashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use stripecount::clock::CoarseClock;
use stripecount::{HotKeyDetector, HotKeySketch, KeyedLimiter, KeyedWindows, Quota};
use stripecount_baselines::harness::{batches, Job};

/// The per-key windows of the keyed rows: the report's window, on
/// `CoarseClock`.
fn windows() -> KeyedWindows<u64, CoarseClock> {
    KeyedWindows::builder(WINDOW, SLICES)
        .clock(CoarseClock::new())
        .build()
        .expect("a valid window")
}

pub(super) fn windows_hot(_: &Setup, _: usize) -> Job {
    let w = Arc::new(windows());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add(&HOT_KEY, 1));
        })
    })
}

/// The add that returns the key's exact window sum: on a hot key shared by
/// threads it reads every thread's stripe (its documented cost).
pub(super) fn windows_sum_hot(_: &Setup, _: usize) -> Job {
    let w = Arc::new(windows());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add_and_sum(&HOT_KEY, 1));
        })
    })
}

pub(super) fn windows_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, windows(), |w, k| {
        black_box(w.add(&k, 1));
    })
}

/// The detector of the keyed rows: the report's window, on `CoarseClock`.
fn detector() -> HotKeyDetector<u64, CoarseClock> {
    HotKeyDetector::builder(WINDOW, SLICES, HOT_THRESHOLD)
        .clock(CoarseClock::new())
        .build()
        .expect("a valid detector")
}

pub(super) fn detector_hot(_: &Setup, _: usize) -> Job {
    let d = Arc::new(detector());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(d.add(&HOT_KEY, 1));
        })
    })
}

pub(super) fn detector_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, detector(), |d, k| {
        black_box(d.add(&k, 1));
    })
}

/// The memory of the `HotKeySketch` rows (their name says it).
const SKETCH_MEMORY: usize = 8 << 20;

/// The fixed-memory detector of the keyed rows: the detector's settings,
/// in [`SKETCH_MEMORY`].
fn sketch() -> HotKeySketch<u64, CoarseClock> {
    HotKeySketch::builder(WINDOW, SLICES, HOT_THRESHOLD)
        .memory(SKETCH_MEMORY)
        .clock(CoarseClock::new())
        .build()
        .expect("a valid sketch")
}

pub(super) fn sketch_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, sketch(), |d, k| {
        black_box(d.add(&k, 1));
    })
}

/// heavykeeper's `TopK` as the hot-key bench configures it: the top 100,
/// 4096 buckets wide, 4 deep, decay 0.9 (about 128 KiB of buckets).
fn heavykeeper_topk() -> heavykeeper::TopK<u64> {
    heavykeeper::TopK::new(100, 4096, 4, 0.9)
}

/// heavykeeper's `TopK` adds through `&mut self`: shared by several
/// threads it sits behind a `Mutex` locked for each add (what a user
/// sharing one must do); on one thread the job holds the lock for its
/// whole run, so that point is the sketch's own single-threaded speed.
pub(super) fn heavykeeper_zipf(setup: &Setup, threads: usize) -> Job {
    let z = setup.zipf();
    let topk = Arc::new(Mutex::new(heavykeeper_topk()));
    Arc::new(move |t, stop| {
        let keys = &z.keys;
        let mask = keys.len() - 1;
        let mut i = z.offset(t, threads);
        let lock = || topk.lock().unwrap_or_else(PoisonError::into_inner);
        if threads == 1 {
            let mut topk = lock();
            return batches(stop, || {
                topk.add(&keys[i & mask], 1);
                i = i.wrapping_add(1);
            });
        }
        batches(stop, || {
            lock().add(&keys[i & mask], 1);
            i = i.wrapping_add(1);
        })
    })
}

/// Adds one to `key` the way users of a concurrent map of atomics do: a
/// shared lookup, and an insert only for a key not yet present.
#[inline(always)]
fn dashmap_add(m: &DashMap<u64, AtomicU64>, key: u64) {
    if let Some(c) = m.get(&key) {
        c.fetch_add(1, Ordering::Relaxed);
        return;
    }
    m.entry(key)
        .or_insert_with(|| AtomicU64::new(0))
        .fetch_add(1, Ordering::Relaxed);
}

pub(super) fn dashmap_hot(_: &Setup, _: usize) -> Job {
    let m = Arc::new(DashMap::<u64, AtomicU64>::new());
    Arc::new(move |_, stop| batches(stop, || dashmap_add(&m, HOT_KEY)))
}

/// A job walking the Zipf stream from thread `t`'s offset, calling `op` on
/// each key.
fn zipf_job<S: Send + Sync + 'static>(
    setup: &Setup,
    threads: usize,
    state: S,
    op: fn(&S, u64),
) -> Job {
    let z = setup.zipf();
    let state = Arc::new(state);
    Arc::new(move |t, stop| {
        let keys = &z.keys;
        let mask = keys.len() - 1;
        let mut i = z.offset(t, threads);
        batches(stop, || {
            op(&state, keys[i & mask]);
            i = i.wrapping_add(1);
        })
    })
}

pub(super) fn dashmap_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, DashMap::<u64, AtomicU64>::new(), |m, k| {
        dashmap_add(m, k)
    })
}

type GovernorKeyed = governor::DefaultKeyedRateLimiter<u64>;

fn governor_keyed_with(per_second: u32) -> GovernorKeyed {
    let quota = governor::Quota::per_second(NonZeroU32::new(per_second).expect("non-zero quota"));
    governor::RateLimiter::keyed(quota)
}

pub(super) fn governor_keyed() -> GovernorKeyed {
    governor_keyed_with(ADMIT_LIMIT)
}

pub(super) fn governor_keyed_hot(_: &Setup, _: usize) -> Job {
    let l = Arc::new(governor_keyed());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(l.check_key(&HOT_KEY).is_ok());
        })
    })
}

pub(super) fn governor_keyed_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, governor_keyed(), |l, k| {
        black_box(l.check_key(&k).is_ok());
    })
}

pub(super) fn governor_keyed_hot_refusing(_: &Setup, _: usize) -> Job {
    let l = Arc::new(governor_keyed_with(REFUSE_LIMIT));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(l.check_key(&HOT_KEY).is_ok());
        })
    })
}

pub(super) fn governor_keyed_zipf_refusing(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, governor_keyed_with(REFUSE_LIMIT), |l, k| {
        black_box(l.check_key(&k).is_ok());
    })
}

/// The per-key limiter of the keyed rows: the report's window, on
/// `CoarseClock`, `limit` permits per window for every key.
pub(super) fn keyed_limiter(limit: u32) -> KeyedLimiter<u64, CoarseClock> {
    KeyedLimiter::builder(Quota::per(limit.into(), WINDOW).slices(SLICES))
        .clock(CoarseClock::new())
        .build()
        .expect("a valid limiter")
}

fn keyed_limiter_hot(limit: u32) -> Job {
    let l = Arc::new(keyed_limiter(limit));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(l.try_acquire(&HOT_KEY, 1));
        })
    })
}

pub(super) fn keyed_limiter_hot_admitting(_: &Setup, _: usize) -> Job {
    keyed_limiter_hot(ADMIT_LIMIT)
}

pub(super) fn keyed_limiter_hot_refusing(_: &Setup, _: usize) -> Job {
    keyed_limiter_hot(REFUSE_LIMIT)
}

pub(super) fn keyed_limiter_zipf_admitting(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, keyed_limiter(ADMIT_LIMIT), |l, k| {
        black_box(l.try_acquire(&k, 1));
    })
}

pub(super) fn keyed_limiter_zipf_refusing(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, keyed_limiter(REFUSE_LIMIT), |l, k| {
        black_box(l.try_acquire(&k, 1));
    })
}
