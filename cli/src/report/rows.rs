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
//!   `RateLimiter` rows count the quota in the window's 10 slices, the
//!   "fixed window" rows in one slice; the `decide` row asks for the full
//!   `Decision` instead of a bool. Every limiter reads its clock on every
//!   request: ours `CoarseClock` (one atomic load, this crate's advice for
//!   hot paths), governor its default (the TSC, through quanta). The two-limit rows add a per-minute limit of
//!   60 times the quota: `MultiLimiter` (one CAS a grant, all or nothing)
//!   and two governor limiters checked in turn (what governor users do).
//! - Keyed rows: one key for all threads ("one hot key"), or the Zipf stream
//!   of `stripecount_baselines::zipf` (1M keys, s = 1), each thread starting at its own
//!   offset. The detector uses the windows' settings, `CoarseClock` and a
//!   threshold of [`HOT_THRESHOLD`], exactly or as `HotKeySketch` in 8 MiB;
//!   its fixed-memory peer is heavykeeper's `TopK` (top 100, width 4096,
//!   depth 4, decay 0.9, as the hot-key bench sets it), single-threaded, so
//!   behind a `Mutex` locked for each add when threads share it (one
//!   thread holds the lock for its whole run); the map of atomics is a
//!   `DashMap` (the map governor itself uses). Per-key limiters: `KeyedLimiter` with
//!   the report's window on `CoarseClock`, governor keyed on its default
//!   clock, each with the limiters' admitting and refusing quotas (every
//!   key gets the quota).
//! - `fast-counter` is sized as its docs suggest, one cell per core.
//! - Clock rows ([`clocks`]) read a clock once per operation.

mod clocks;
mod counters;
mod keyed;
mod limiters;
mod windows;

use std::sync::{Arc, OnceLock};
use std::time::Duration;
use stripecount_baselines::harness::Job;
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
            (REFERENCE, Baseline, counters::atomic_u64),
            ("Mutex<u64>", Baseline, counters::mutex_u64),
            (
                "fast-counter ConcurrentCounter",
                Peer,
                counters::fast_counter,
            ),
            ("StripedCounter add", Ours, counters::striped_counter),
        ],
    );
    let windows = group(
        Group::Windows,
        &[
            (
                "SlidingWindow add_at (caller time)",
                Ours,
                windows::window_add_at,
            ),
            (
                "SlidingWindow add (CoarseClock)",
                Ours,
                windows::window_add_coarse,
            ),
            (
                "SlidingWindow add (MonotonicClock)",
                Ours,
                windows::window_add_monotonic,
            ),
            (
                "MultiWindow 3 levels add_at (caller time)",
                Ours,
                windows::multi_add_at,
            ),
            (
                "MutexRing add_at (caller time)",
                Baseline,
                windows::mutex_ring,
            ),
            (
                "NaiveAtomicRing add_at (racy)",
                Baseline,
                windows::naive_ring,
            ),
        ],
    );
    let limiters = group(
        Group::Limiters,
        &[
            ("RateLimiter, admitting", Ours, limiters::sliding_admitting),
            ("RateLimiter, refusing", Ours, limiters::sliding_refusing),
            (
                "RateLimiter fixed window, admitting",
                Ours,
                limiters::fixed_admitting,
            ),
            (
                "RateLimiter fixed window, refusing",
                Ours,
                limiters::fixed_refusing,
            ),
            (
                "RateLimiter decide, refusing",
                Ours,
                limiters::sliding_decision_refusing,
            ),
            (
                "MultiLimiter 1 s + 1 min, admitting",
                Ours,
                limiters::multi_admitting,
            ),
            (
                "governor direct, admitting",
                Peer,
                limiters::governor_admitting,
            ),
            (
                "governor direct, refusing",
                Peer,
                limiters::governor_refusing,
            ),
            (
                "governor direct x2, admitting",
                Peer,
                limiters::governor_two_admitting,
            ),
        ],
    );
    let keyed = group(
        Group::Keyed,
        &[
            ("KeyedWindows add, one hot key", Ours, keyed::windows_hot),
            ("KeyedWindows add, Zipf keys", Ours, keyed::windows_zipf),
            (
                "KeyedWindows add_and_sum, one hot key",
                Ours,
                keyed::windows_sum_hot,
            ),
            ("HotKeyDetector, one hot key", Ours, keyed::detector_hot),
            ("HotKeyDetector, Zipf keys", Ours, keyed::detector_zipf),
            ("HotKeySketch 8 MiB, Zipf keys", Ours, keyed::sketch_zipf),
            (
                "heavykeeper TopK (Mutex), Zipf keys",
                Peer,
                keyed::heavykeeper_zipf,
            ),
            (
                "DashMap<u64,AtomicU64>, one hot key",
                Peer,
                keyed::dashmap_hot,
            ),
            (
                "DashMap<u64,AtomicU64>, Zipf keys",
                Peer,
                keyed::dashmap_zipf,
            ),
            (
                "governor keyed, one hot key",
                Peer,
                keyed::governor_keyed_hot,
            ),
            (
                "governor keyed, Zipf keys",
                Peer,
                keyed::governor_keyed_zipf,
            ),
            (
                "KeyedLimiter, one hot key, admitting",
                Ours,
                keyed::keyed_limiter_hot_admitting,
            ),
            (
                "KeyedLimiter, one hot key, refusing",
                Ours,
                keyed::keyed_limiter_hot_refusing,
            ),
            (
                "KeyedLimiter, Zipf keys, admitting",
                Ours,
                keyed::keyed_limiter_zipf_admitting,
            ),
            (
                "KeyedLimiter, Zipf keys, refusing",
                Ours,
                keyed::keyed_limiter_zipf_refusing,
            ),
            (
                "governor keyed, one hot key, refusing",
                Peer,
                keyed::governor_keyed_hot_refusing,
            ),
            (
                "governor keyed, Zipf keys, refusing",
                Peer,
                keyed::governor_keyed_zipf_refusing,
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

#[cfg(test)]
mod tests {
    use super::keyed::{governor_keyed, keyed_limiter};
    use super::limiters::{fixed, governor_direct, multi, sliding};
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
        assert_eq!(grants(n, || l.try_acquire(1)), n);
        let l = fixed(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire(1)), n);
        let l = governor_direct(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.check().is_ok()), n);
        let l = multi(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire(1)), n);
        let l = keyed_limiter(ADMIT_LIMIT);
        assert_eq!(grants(n, || l.try_acquire(&HOT_KEY, 1)), n);
        let l = governor_keyed();
        assert_eq!(grants(n, || l.check_key(&HOT_KEY).is_ok()), n);
        // Refusing: the quota, then refusals. The sliding window frees no
        // permit until its first slice is a window old (1 s); the fixed
        // window may start one new window during the burst; governor
        // replenishes one permit per millisecond.
        let started = std::time::Instant::now();
        let l = sliding(REFUSE_LIMIT);
        assert_eq!(grants(n, || l.try_acquire(1)), REFUSE_LIMIT as u64);
        let l = sliding(REFUSE_LIMIT);
        let decided = grants(n, || l.decide(1).is_granted());
        assert_eq!(decided, REFUSE_LIMIT as u64);
        let l = keyed_limiter(REFUSE_LIMIT);
        assert_eq!(
            grants(n, || l.try_acquire(&HOT_KEY, 1)),
            REFUSE_LIMIT as u64
        );
        let l = fixed(REFUSE_LIMIT);
        let granted = grants(n, || l.try_acquire(1));
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
