//! The report's rows: one entry per implementation and operation.
//!
//! A row builds a fresh instance for each point (so growth, map population
//! and stripe expansion happen in that point's warm-up, never in a previous
//! point) and returns the [`Job`] every thread of the point runs against
//! that ONE shared instance. Every operation adds (or requests) 1.
//!
//! Shared settings, chosen so that every row of a group does the same work:
//! - Windows: 1 s in 10 slices of 100 ms, so slices roll over during every
//!   measurement (a window that never rolls measures only the easy path).
//!   `MultiWindow` adds a 1 min / 60 and a 1 h / 60 level to that window.
//! - "caller time" rows read `MonotonicClock` once per batch of
//!   [`BATCH`](stripecount_baselines::harness::BATCH) operations and pass it to `add_at`, as a
//!   service that stamps each request once does. The `add` rows read their
//!   clock on every operation.
//! - Limiters: the admitting quota is 1e9 per second (above any rate reached
//!   here, so every request is granted); the refusing quota is 1000 per
//!   second (spent in the warm-up, so nearly every request is refused).
//!   governor gets the same quotas (its burst equals the per-second rate).
//!   Every limiter reads its clock on every request: ours `CoarseClock` (one
//!   atomic load, this crate's advice for hot paths), governor its default
//!   (the TSC, through quanta). The two-limit rows add a per-minute limit of
//!   60 times the quota: `MultiLimiter` (one CAS a grant, all or nothing)
//!   and two governor limiters checked in turn (what governor users do).
//! - Keyed rows: one key for all threads ("one hot key"), or the Zipf stream
//!   of `stripecount_baselines::zipf` (1M keys, s = 1), each thread starting at its own
//!   offset. The detector uses the windows' settings, `CoarseClock` and a
//!   threshold of [`HOT_THRESHOLD`]; the map of atomics is a `DashMap`
//!   (the map governor itself uses). Per-key limiters: `KeyedLimiter` with
//!   the report's window on `CoarseClock`, governor keyed on its default
//!   clock, each with the limiters' admitting and refusing quotas (every
//!   key gets the quota).
//! - `fast-counter` is sized as its docs suggest, one cell per core.
//! - Clock rows ([`clocks`]) read a clock once per operation.

mod clocks;

use super::args::cores;
use dashmap::DashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use stripecount::{
    Clock, CoarseClock, FixedWindowLimiter, HotKeyDetector, KeyedLimiter, KeyedWindows,
    MonotonicClock, MultiLimiter, MultiWindow, SlidingWindow, SlidingWindowLimiter, StripedCounter,
};
use stripecount_baselines::counters::AtomicCounter;
use stripecount_baselines::harness::{batches, batches_at, Job};
use stripecount_baselines::rings::{MutexRing, NaiveAtomicRing};
use stripecount_baselines::zipf::ZipfStream;

/// The length of every window in the report.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Slices per window (100 ms each).
pub const SLICES: usize = 10;
/// The admitting limiters' permits per [`WINDOW`].
pub const ADMIT_LIMIT: u32 = 1_000_000_000;
/// The refusing limiters' permits per [`WINDOW`].
pub const REFUSE_LIMIT: u32 = 1_000;
/// The hot-key threshold (window sum) of the detector rows.
pub const HOT_THRESHOLD: u64 = 1_000;
/// The key of the "one hot key" rows.
pub const HOT_KEY: u64 = 42;

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Plain counters.
    Counters,
    /// Sliding time windows.
    Windows,
    /// Rate limiters.
    Limiters,
    /// Per-key counting.
    Keyed,
    /// Clock reads.
    Clocks,
}

impl Group {
    /// The group's name in the table, CSV and plot.
    pub fn name(self) -> &'static str {
        match self {
            Group::Counters => "counters",
            Group::Windows => "windows",
            Group::Limiters => "limiters",
            Group::Keyed => "keyed",
            Group::Clocks => "clocks",
        }
    }

    /// The plot panel's title.
    pub fn title(self) -> &'static str {
        match self {
            Group::Counters => "Counters: add(1)",
            Group::Windows => "Sliding windows (1 s / 10 slices): add 1",
            Group::Limiters => "Rate limiters: acquire 1 permit",
            Group::Keyed => "Per-key counting: add 1 to a key",
            Group::Clocks => "Clocks: now()",
        }
    }
}

/// Whose implementation a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// stripecount.
    Ours,
    /// A naive design (stripecount-baselines).
    Baseline,
    /// A crate people use today.
    Peer,
}

impl Origin {
    /// The origin's name in the CSV.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Ours => "stripecount",
            Origin::Baseline => "baseline",
            Origin::Peer => "peer",
        }
    }
}

/// Data shared by rows and built at most once, outside every timed region.
#[derive(Default)]
pub struct Setup {
    zipf: OnceLock<Arc<ZipfStream>>,
}

impl Setup {
    /// The Zipf key stream (drawn on first use).
    pub fn zipf(&self) -> Arc<ZipfStream> {
        self.zipf
            .get_or_init(|| Arc::new(ZipfStream::new()))
            .clone()
    }
}

/// One implementation and operation.
pub struct Row {
    /// Its name in the table (unique).
    pub name: &'static str,
    /// What it measures.
    pub group: Group,
    /// Whose it is.
    pub origin: Origin,
    /// Builds a fresh shared instance for a point with `threads` threads and
    /// returns the job they run.
    pub make: Make,
}

/// The name of the reference row every ratio is taken against.
pub const REFERENCE: &str = "AtomicU64 fetch_add";

impl Row {
    /// Whether this is the reference row.
    pub fn is_reference(&self) -> bool {
        self.name == REFERENCE
    }

    /// Whether `--only pattern` selects this row.
    pub fn matches(&self, pattern: &str) -> bool {
        let p = pattern.to_lowercase();
        self.name.to_lowercase().contains(&p) || self.group.name().contains(&p)
    }
}

/// Builds a row.
type Make = fn(&Setup, usize) -> Job;

fn group(group: Group, rows: &[(&'static str, Origin, Make)]) -> Vec<Row> {
    rows.iter()
        .map(|&(name, origin, make)| Row {
            name,
            group,
            origin,
            make,
        })
        .collect()
}

/// Every row, in table order (the reference first).
pub fn all() -> Vec<Row> {
    use Origin::*;
    let counters = group(
        Group::Counters,
        &[
            (REFERENCE, Baseline, atomic_u64),
            ("Mutex<u64>", Baseline, mutex_u64),
            ("fast-counter ConcurrentCounter", Peer, fast_counter),
            ("StripedCounter add", Ours, striped_counter),
        ],
    );
    let windows = group(
        Group::Windows,
        &[
            ("SlidingWindow add_at (caller time)", Ours, window_add_at),
            ("SlidingWindow add (CoarseClock)", Ours, window_add_coarse),
            (
                "SlidingWindow add (MonotonicClock)",
                Ours,
                window_add_monotonic,
            ),
            (
                "MultiWindow 3 levels add_at (caller time)",
                Ours,
                multi_add_at,
            ),
            ("MutexRing add_at (caller time)", Baseline, mutex_ring),
            ("NaiveAtomicRing add_at (racy)", Baseline, naive_ring),
        ],
    );
    let limiters = group(
        Group::Limiters,
        &[
            ("SlidingWindowLimiter, admitting", Ours, sliding_admitting),
            ("SlidingWindowLimiter, refusing", Ours, sliding_refusing),
            ("FixedWindowLimiter, admitting", Ours, fixed_admitting),
            ("FixedWindowLimiter, refusing", Ours, fixed_refusing),
            (
                "SlidingWindowLimiter decision, refusing",
                Ours,
                sliding_decision_refusing,
            ),
            ("MultiLimiter 1 s + 1 min, admitting", Ours, multi_admitting),
            ("governor direct, admitting", Peer, governor_admitting),
            ("governor direct, refusing", Peer, governor_refusing),
            (
                "governor direct x2, admitting",
                Peer,
                governor_two_admitting,
            ),
        ],
    );
    let keyed = group(
        Group::Keyed,
        &[
            ("KeyedWindows add, one hot key", Ours, windows_hot),
            ("KeyedWindows add, Zipf keys", Ours, windows_zipf),
            (
                "KeyedWindows add_and_sum, one hot key",
                Ours,
                windows_sum_hot,
            ),
            ("HotKeyDetector, one hot key", Ours, detector_hot),
            ("HotKeyDetector, Zipf keys", Ours, detector_zipf),
            ("DashMap<u64,AtomicU64>, one hot key", Peer, dashmap_hot),
            ("DashMap<u64,AtomicU64>, Zipf keys", Peer, dashmap_zipf),
            ("governor keyed, one hot key", Peer, governor_keyed_hot),
            ("governor keyed, Zipf keys", Peer, governor_keyed_zipf),
            (
                "KeyedLimiter, one hot key, admitting",
                Ours,
                keyed_limiter_hot_admitting,
            ),
            (
                "KeyedLimiter, one hot key, refusing",
                Ours,
                keyed_limiter_hot_refusing,
            ),
            (
                "KeyedLimiter, Zipf keys, admitting",
                Ours,
                keyed_limiter_zipf_admitting,
            ),
            (
                "KeyedLimiter, Zipf keys, refusing",
                Ours,
                keyed_limiter_zipf_refusing,
            ),
            (
                "governor keyed, one hot key, refusing",
                Peer,
                governor_keyed_hot_refusing,
            ),
            (
                "governor keyed, Zipf keys, refusing",
                Peer,
                governor_keyed_zipf_refusing,
            ),
        ],
    );
    let clocks = group(
        Group::Clocks,
        &[
            ("MonotonicClock now()", Ours, clocks::monotonic),
            ("CoarseClock now()", Ours, clocks::coarse),
            ("Instant::now()", Baseline, clocks::instant),
            ("quanta Clock::now()", Peer, clocks::quanta),
        ],
    );
    [counters, windows, limiters, keyed, clocks]
        .into_iter()
        .flatten()
        .collect()
}

/// The caller's clock of the `*_at` rows, read once per batch.
fn caller_now() -> u64 {
    MonotonicClock.now()
}

fn window<C: Clock>(clock: C) -> SlidingWindow<C> {
    SlidingWindow::with_clock(WINDOW, SLICES, clock).expect("1 s / 10 slices is a valid window")
}

fn slice_nanos() -> u64 {
    (WINDOW / SLICES as u32).as_nanos() as u64
}

// ---- counters -------------------------------------------------------------

fn atomic_u64(_: &Setup, _: usize) -> Job {
    let c = Arc::new(AtomicCounter::default());
    Arc::new(move |_, stop| batches(stop, || c.add(1)))
}

fn mutex_u64(_: &Setup, _: usize) -> Job {
    let c = Arc::new(Mutex::new(0u64));
    Arc::new(move |_, stop| {
        batches(stop, || {
            *c.lock().unwrap() += 1;
        })
    })
}

fn fast_counter(_: &Setup, _: usize) -> Job {
    // Sized as its docs suggest: one cell per core (rounded up to a power of two).
    let c = Arc::new(fast_counter::ConcurrentCounter::new(cores()));
    Arc::new(move |_, stop| batches(stop, || c.add(1)))
}

fn striped_counter(_: &Setup, _: usize) -> Job {
    let c = Arc::new(StripedCounter::new());
    Arc::new(move |_, stop| batches(stop, || c.add(1)))
}

// ---- windows ----------------------------------------------------------------

fn window_add_at(_: &Setup, _: usize) -> Job {
    let w = Arc::new(window(MonotonicClock));
    Arc::new(move |_, stop| {
        batches_at(stop, caller_now, |t| {
            black_box(w.add_at(t, 1));
        })
    })
}

fn window_add_coarse(_: &Setup, _: usize) -> Job {
    let w = Arc::new(window(CoarseClock::new()));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add(1));
        })
    })
}

fn window_add_monotonic(_: &Setup, _: usize) -> Job {
    let w = Arc::new(window(MonotonicClock));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add(1));
        })
    })
}

/// The multi-resolution levels: the report's 1 s window, then 1 min and 1 h
/// (each slice length a whole multiple of the previous level's).
pub const MULTI_LEVELS: [(Duration, usize); 3] = [
    (WINDOW, SLICES),
    (Duration::from_secs(60), 60),
    (Duration::from_secs(3600), 60),
];

fn multi_add_at(_: &Setup, _: usize) -> Job {
    let w = Arc::new(MultiWindow::new(&MULTI_LEVELS).expect("valid levels"));
    Arc::new(move |_, stop| {
        batches_at(stop, caller_now, |t| {
            black_box(w.add_at(t, 1));
        })
    })
}

fn mutex_ring(_: &Setup, _: usize) -> Job {
    let r = Arc::new(MutexRing::new(slice_nanos(), SLICES));
    Arc::new(move |_, stop| batches_at(stop, caller_now, |t| r.add_at(t, 1)))
}

fn naive_ring(_: &Setup, _: usize) -> Job {
    let r = Arc::new(NaiveAtomicRing::new(slice_nanos(), SLICES));
    Arc::new(move |_, stop| batches_at(stop, caller_now, |t| r.add_at(t, 1)))
}

// ---- limiters ---------------------------------------------------------------

// Our limiters read their clock on every request, as governor does; they
// use `CoarseClock` (one atomic load), the clock this crate recommends for
// hot paths (governor's default clock reads the TSC).

/// A job of requests for one permit, each result kept alive.
fn acquire_job(acquire: impl Fn() -> bool + Send + Sync + 'static) -> Job {
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(acquire());
        })
    })
}

fn sliding(limit: u32) -> SlidingWindowLimiter<CoarseClock> {
    SlidingWindowLimiter::with_clock(limit.into(), WINDOW, SLICES, CoarseClock::new())
        .expect("a valid limiter")
}

fn fixed(limit: u32) -> FixedWindowLimiter<CoarseClock> {
    FixedWindowLimiter::with_clock(limit.into(), WINDOW, CoarseClock::new())
        .expect("a valid limiter")
}

fn governor_direct(per_second: u32) -> governor::DefaultDirectRateLimiter {
    let quota = governor::Quota::per_second(NonZeroU32::new(per_second).expect("non-zero quota"));
    governor::RateLimiter::direct(quota)
}

fn sliding_admitting(_: &Setup, _: usize) -> Job {
    let l = sliding(ADMIT_LIMIT);
    acquire_job(move || l.try_acquire())
}

fn sliding_refusing(_: &Setup, _: usize) -> Job {
    let l = sliding(REFUSE_LIMIT);
    acquire_job(move || l.try_acquire())
}

fn fixed_admitting(_: &Setup, _: usize) -> Job {
    let l = fixed(ADMIT_LIMIT);
    acquire_job(move || l.try_acquire())
}

fn fixed_refusing(_: &Setup, _: usize) -> Job {
    let l = fixed(REFUSE_LIMIT);
    acquire_job(move || l.try_acquire())
}

fn sliding_decision_refusing(_: &Setup, _: usize) -> Job {
    let l = sliding(REFUSE_LIMIT);
    acquire_job(move || l.try_acquire_decision(1).is_granted())
}

/// The report's limit per second and 60 times it per minute (60 slices):
/// two limits, all or nothing, one CAS a grant.
fn multi(limit: u32) -> MultiLimiter<CoarseClock> {
    let per_minute = (60 * u64::from(limit), 60 * WINDOW, 60);
    MultiLimiter::with_clock(
        &[(limit.into(), WINDOW, SLICES), per_minute],
        CoarseClock::new(),
    )
    .expect("a valid limiter")
}

fn multi_admitting(_: &Setup, _: usize) -> Job {
    let l = multi(ADMIT_LIMIT);
    acquire_job(move || l.try_acquire())
}

/// Two governor limiters (per second and per minute) checked in turn, as
/// governor users combine limits (not atomic: a refusal by the second
/// leaves the first's cell spent).
fn governor_two_admitting(_: &Setup, _: usize) -> Job {
    let per_minute = NonZeroU32::new(ADMIT_LIMIT.saturating_mul(60)).expect("non-zero quota");
    let a = governor_direct(ADMIT_LIMIT);
    let b = governor::RateLimiter::direct(governor::Quota::per_minute(per_minute));
    acquire_job(move || a.check().is_ok() && b.check().is_ok())
}

fn governor_admitting(_: &Setup, _: usize) -> Job {
    let l = governor_direct(ADMIT_LIMIT);
    acquire_job(move || l.check().is_ok())
}

fn governor_refusing(_: &Setup, _: usize) -> Job {
    let l = governor_direct(REFUSE_LIMIT);
    acquire_job(move || l.check().is_ok())
}

// ---- keyed ------------------------------------------------------------------

/// The per-key windows of the keyed rows: the report's window, on
/// `CoarseClock`.
fn windows() -> KeyedWindows<u64, CoarseClock> {
    KeyedWindows::with_clock(WINDOW, SLICES, CoarseClock::new()).expect("a valid window")
}

fn windows_hot(_: &Setup, _: usize) -> Job {
    let w = Arc::new(windows());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add(&HOT_KEY, 1));
        })
    })
}

/// The add that returns the key's exact window sum: on a hot key shared by
/// threads it reads every thread's stripe (its documented cost).
fn windows_sum_hot(_: &Setup, _: usize) -> Job {
    let w = Arc::new(windows());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(w.add_and_sum(&HOT_KEY, 1));
        })
    })
}

fn windows_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, windows(), |w, k| {
        black_box(w.add(&k, 1));
    })
}

/// The detector of the keyed rows: the report's window, on `CoarseClock`.
fn detector() -> HotKeyDetector<u64, CoarseClock> {
    HotKeyDetector::with_clock(WINDOW, SLICES, HOT_THRESHOLD, CoarseClock::new())
        .expect("a valid detector")
}

fn detector_hot(_: &Setup, _: usize) -> Job {
    let d = Arc::new(detector());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(d.add(&HOT_KEY, 1));
        })
    })
}

fn detector_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, detector(), |d, k| {
        black_box(d.add(&k, 1));
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

fn dashmap_hot(_: &Setup, _: usize) -> Job {
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

fn dashmap_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, DashMap::<u64, AtomicU64>::new(), |m, k| {
        dashmap_add(m, k)
    })
}

type GovernorKeyed = governor::DefaultKeyedRateLimiter<u64>;

fn governor_keyed_with(per_second: u32) -> GovernorKeyed {
    let quota = governor::Quota::per_second(NonZeroU32::new(per_second).expect("non-zero quota"));
    governor::RateLimiter::keyed(quota)
}

fn governor_keyed() -> GovernorKeyed {
    governor_keyed_with(ADMIT_LIMIT)
}

fn governor_keyed_hot(_: &Setup, _: usize) -> Job {
    let l = Arc::new(governor_keyed());
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(l.check_key(&HOT_KEY).is_ok());
        })
    })
}

fn governor_keyed_zipf(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, governor_keyed(), |l, k| {
        black_box(l.check_key(&k).is_ok());
    })
}

fn governor_keyed_hot_refusing(_: &Setup, _: usize) -> Job {
    let l = Arc::new(governor_keyed_with(REFUSE_LIMIT));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(l.check_key(&HOT_KEY).is_ok());
        })
    })
}

fn governor_keyed_zipf_refusing(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, governor_keyed_with(REFUSE_LIMIT), |l, k| {
        black_box(l.check_key(&k).is_ok());
    })
}

/// The per-key limiter of the keyed rows: the report's window, on
/// `CoarseClock`, `limit` permits per window for every key.
fn keyed_limiter(limit: u32) -> KeyedLimiter<u64, CoarseClock> {
    KeyedLimiter::with_clock(limit.into(), WINDOW, SLICES, CoarseClock::new())
        .expect("a valid limiter")
}

fn keyed_limiter_hot(limit: u32) -> Job {
    let l = Arc::new(keyed_limiter(limit));
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(l.try_acquire(&HOT_KEY));
        })
    })
}

fn keyed_limiter_hot_admitting(_: &Setup, _: usize) -> Job {
    keyed_limiter_hot(ADMIT_LIMIT)
}

fn keyed_limiter_hot_refusing(_: &Setup, _: usize) -> Job {
    keyed_limiter_hot(REFUSE_LIMIT)
}

fn keyed_limiter_zipf_admitting(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, keyed_limiter(ADMIT_LIMIT), |l, k| {
        black_box(l.try_acquire(&k));
    })
}

fn keyed_limiter_zipf_refusing(setup: &Setup, threads: usize) -> Job {
    zipf_job(setup, threads, keyed_limiter(REFUSE_LIMIT), |l, k| {
        black_box(l.try_acquire(&k));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use stripecount_baselines::harness::BATCH;

    #[test]
    fn names_are_unique_and_the_reference_is_first() {
        let rows = all();
        assert!(rows[0].is_reference());
        assert_eq!(rows.iter().filter(|r| r.is_reference()).count(), 1);
        let names: HashSet<_> = rows.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), rows.len());
        assert!(rows
            .iter()
            .all(|r| !r.name.contains('\t') && !r.name.contains('\n')));
    }

    #[test]
    fn only_matches_names_and_groups_case_insensitively() {
        let rows = all();
        let striped: Vec<_> = rows
            .iter()
            .filter(|r| r.matches("stripedcounter"))
            .collect();
        assert_eq!(striped.len(), 1);
        assert_eq!(striped[0].name, "StripedCounter add");
        // "windows" names a group, and is part of the KeyedWindows rows'
        // names: it selects exactly those.
        for r in &rows {
            let expected = r.group == Group::Windows || r.name.contains("KeyedWindows");
            assert_eq!(r.matches("windows"), expected, "{}", r.name);
        }
    }

    /// Requests one permit `n` times; returns how many were granted.
    fn grants(n: u64, acquire: impl Fn() -> bool) -> u64 {
        (0..n).map(|_| u64::from(acquire())).sum()
    }

    #[test]
    fn the_limiter_regimes_are_what_their_rows_say() {
        // Admitting: every request of a short burst is granted.
        let n = 100_000;
        let l = sliding(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire()), n);
        let l = fixed(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire()), n);
        let l = governor_direct(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.check().is_ok()), n);
        let l = multi(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire()), n);
        let l = keyed_limiter(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire(&HOT_KEY)), n);
        let l = governor_keyed();
        assert_eq!(grants(n, || l.check_key(&HOT_KEY).is_ok()), n);
        // Refusing: the quota, then refusals. The sliding window frees no
        // permit until its first slice is a window old (1 s); the fixed
        // window may start one new window during the burst; governor
        // replenishes one permit per millisecond.
        let started = std::time::Instant::now();
        let l = sliding(REFUSE_LIMIT);
        assert_eq!(grants(n, || l.try_acquire()), REFUSE_LIMIT as u64);
        let l = sliding(REFUSE_LIMIT);
        let decided = grants(n, || l.try_acquire_decision(1).is_granted());
        assert_eq!(decided, REFUSE_LIMIT as u64);
        let l = keyed_limiter(REFUSE_LIMIT);
        assert_eq!(grants(n, || l.try_acquire(&HOT_KEY)), REFUSE_LIMIT as u64);
        let l = fixed(REFUSE_LIMIT);
        let granted = grants(n, || l.try_acquire());
        assert!((1000..=2000).contains(&granted), "{granted}");
        let l = governor_direct(REFUSE_LIMIT);
        let granted = grants(n, || l.check().is_ok());
        let replenished = started.elapsed().as_millis() as u64 + 1;
        assert!((1000..=1000 + replenished).contains(&granted), "{granted}");
    }

    #[test]
    fn a_raised_stop_flag_runs_exactly_one_batch() {
        // Every job runs one batch, then sees the flag; and can be run on
        // any thread without its own set-up.
        let setup = Setup::default();
        let stop = AtomicBool::new(true);
        for r in all().iter().filter(|r| !r.name.contains("Zipf")) {
            let job = (r.make)(&setup, 1);
            assert_eq!(job(0, &stop), BATCH, "{}", r.name);
        }
    }
}
