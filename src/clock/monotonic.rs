//! [`MonotonicClock`] and the process's timeline: one origin, one source.
//!
//! # The timeline
//! Every `MonotonicClock` (and `CoarseClock`, whose ticker reads a
//! `MonotonicClock`) reads the one process-wide [`Timeline`]: nanoseconds
//! since an `Instant` taken at its first use, from one source chosen then:
//! - the CPU's time-stamp counter ([`super::tsc`]), calibrated against
//!   `Instant` and clamped per thread ([`super::clamp`]), where it is
//!   trusted and the `tsc` feature (a default one) is on: ~10 ns a read;
//! - otherwise `Instant` itself (~25 ns a read on the development machine),
//!   which the OS keeps monotonic.
//!
//! Both sources measure from the same origin, so a time read from one is
//! comparable with the other's (to within the calibration, a few ppm).
//!
//! # Across threads
//! On one thread the time never goes backwards. Across threads the TSC is
//! as ordered as the hardware keeps it: on a machine whose counters are in
//! step (Linux only uses the TSC when they are), a read ordered after
//! another thread's read returns at least that read's time, less the few
//! tens of nanoseconds an unordered `rdtsc` may run ahead of the loads
//! before it; if the counters are not in step, less at most [`GRANULE`]
//! (about 65 µs; see the clamp's invariant 2).
//! Every structure of this crate tolerates both (windows file an add by its
//! own time; limiters never let their time run backwards).

use super::clamp::GRANULE;
use super::tsc::{self, Tsc};
use super::{duration_nanos, Clock, Timestamp};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The time on the process's timeline: the TSC where it is trusted,
/// `Instant` otherwise (see [`MonotonicClock::uses_tsc`]), in nanoseconds
/// since the first time any `MonotonicClock` (or `CoarseClock`) was used.
///
/// Never goes backwards on a thread. Across threads, a read that
/// happens-after another thread's read may return a slightly earlier time,
/// by at most [`MAX_LAG`](Self::MAX_LAG) (65 µs: the per-thread clamp
/// publishes to a shared floor once per 65 µs, not on every read); on a
/// machine whose cores' counters are in step, by the few tens of
/// nanoseconds an unordered `rdtsc` may run ahead. `CoarseClock` reads the
/// same timeline.
///
/// The TSC is read when the `tsc` feature is on (the default) and the
/// machine's counter is one clock for all its cores: on Linux, when the
/// kernel's own clocksource is `tsc`; on other x86_64 systems, when CPUID
/// reports an invariant TSC; never on other architectures. It is then
/// calibrated against `Instant` once per process, at the first use: a busy
/// wait of 2 ms, which [`new`](Self::new) and `Default` pay up front (a
/// `MonotonicClock` literal pays it at its first `now()`).
///
/// ```
/// use stripecount::clock::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock;

impl MonotonicClock {
    /// The most a read can return below a time that another thread's read
    /// returned before it (happens-before): 65,536 ns, the clamp's
    /// publishing interval. On a machine whose cores' counters are in step
    /// the lag is at most the few tens of nanoseconds of an unordered
    /// `rdtsc`; on one thread there is none.
    pub const MAX_LAG: Duration = Duration::from_nanos(GRANULE);

    /// The clock (a zero-sized handle); the first one in the process
    /// chooses and calibrates the timeline's source.
    ///
    /// ```
    /// let clock = stripecount::clock::MonotonicClock::new();
    /// # let _ = clock;
    /// ```
    pub fn new() -> Self {
        Timeline::get();
        MonotonicClock
    }

    /// Whether the timeline reads the CPU's time-stamp counter (`false`:
    /// it reads `Instant`).
    ///
    /// ```
    /// let clock = stripecount::clock::MonotonicClock::new();
    /// println!("reading the TSC: {}", clock.uses_tsc());
    /// ```
    pub fn uses_tsc(&self) -> bool {
        matches!(Timeline::get().source, Source::Tsc(_))
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(Timeline::get().now())
    }
}

/// Where a timeline's time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The calibrated counter.
    Tsc(Tsc),
    /// `Instant`.
    Os,
}

/// An origin and a source (module docs).
#[derive(Debug)]
pub(crate) struct Timeline {
    origin: Instant,
    source: Source,
}

/// The process's timeline.
static TIMELINE: OnceLock<Timeline> = OnceLock::new();

/// The process timeline's clamp: the floor all threads share, and each
/// thread's record (`Seen` needs no destructor, so the thread-local is
/// always accessible).
#[cfg(not(loom))]
static FLOOR: crossbeam_utils::CachePadded<super::clamp::Floor> =
    crossbeam_utils::CachePadded::new(super::clamp::Floor::new());

#[cfg(not(loom))]
std::thread_local! {
    static SEEN: std::cell::Cell<super::clamp::Seen> =
        const { std::cell::Cell::new(super::clamp::Seen::NEW) };
}

impl Timeline {
    /// The process's timeline (chosen and calibrated on the first call).
    #[inline]
    pub(crate) fn get() -> &'static Timeline {
        TIMELINE.get_or_init(|| Timeline::choose(Instant::now()))
    }

    /// The TSC if it is enabled, trusted and calibrates; `Instant`
    /// otherwise.
    fn choose(origin: Instant) -> Timeline {
        if cfg!(all(feature = "tsc", not(loom))) {
            if let Some(tsc) = Tsc::calibrate(origin) {
                return Timeline {
                    origin,
                    source: Source::Tsc(tsc),
                };
            }
        }
        Timeline::os(origin)
    }

    /// A timeline that reads `Instant` (the fallback, and what tests force).
    pub(crate) fn os(origin: Instant) -> Timeline {
        Timeline {
            origin,
            source: Source::Os,
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match self.source {
            Source::Tsc(tsc) => clamped(tsc.nanos(tsc::read())),
            Source::Os => duration_nanos(Instant::now().saturating_duration_since(self.origin)),
        }
    }
}

/// `raw` through the calling thread's clamp on the process floor.
#[cfg(not(loom))]
#[inline]
fn clamped(raw: u64) -> u64 {
    SEEN.try_with(|cell| {
        let mut seen = cell.get();
        let t = FLOOR.clamp(raw, &mut seen);
        cell.set(seen);
        t
    })
    .unwrap_or_else(|_| raw.max(FLOOR.get()))
}

/// Loom builds never read the TSC.
#[cfg(loom)]
fn clamped(raw: u64) -> u64 {
    raw
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_reads_instant_from_the_origin() {
        let origin = Instant::now();
        let t = Timeline::os(origin);
        let a = t.now();
        let mid = duration_nanos(origin.elapsed());
        let b = t.now();
        assert!(a <= mid && mid <= b, "{a} {mid} {b}");
        let mut last = b;
        for _ in 0..crate::sized(10_000, 100) {
            let now = t.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn a_forced_fallback_and_the_tsc_share_the_origin() {
        // The process timeline, whatever its source, and an `Instant`
        // timeline from the same origin agree within the calibration and
        // the brackets: 1 ms here (the clamp may hold a thread back by
        // GRANULE on a machine whose counters disagree).
        let process = Timeline::get();
        let os = Timeline::os(process.origin);
        for _ in 0..crate::sized(1_000, 50) {
            let a = os.now();
            let p = process.now();
            let b = os.now();
            assert!(
                p + GRANULE + 1_000_000 >= a && p <= b + 1_000_000,
                "{a} {p} {b}"
            );
        }
    }

    #[test]
    fn the_source_follows_the_feature() {
        let tsc = MonotonicClock::new().uses_tsc();
        assert!(cfg!(feature = "tsc") || !tsc);
        assert_eq!(tsc, matches!(Timeline::get().source, Source::Tsc(_)));
    }
}
