//! Clocks: where "now" comes from.
//!
//! Time is `u64` nanoseconds on a clock's own monotonic timeline. Every
//! structure takes a [`Clock`] and also offers `*_at(now)` methods, because
//! reading a clock can cost more than the add it stamps (`Instant::now` is
//! ~25 ns on the development machines, an uncontended atomic add ~2.5 ns).
//!
//! - [`MonotonicClock`]: `std::time::Instant` against a process-wide origin.
//! - [`CoarseClock`]: a cached timestamp refreshed about every millisecond
//!   by one shared ticker thread; `now()` is a single atomic load.
//! - [`ManualClock`]: moved by hand; for tests and simulations.
//!
//! A clock that steps backwards is survived: windows tag each slice with
//! its epoch, so an add stamped in the past lands in its own (older) slice
//! or, if that slice has been recycled, is dropped and reported; limiters
//! never let their time run backwards.

use crate::sync::{Arc, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of monotonic time in nanoseconds.
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since this clock's origin.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

#[cfg(loom)]
impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &'static C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

fn origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Converts a duration to nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `std::time::Instant` measured from a process-wide origin (the first time
/// any `MonotonicClock` is read). Never goes backwards.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl MonotonicClock {
    /// The clock (a zero-sized handle).
    pub fn new() -> Self {
        MonotonicClock
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(origin()))
    }
}

/// A clock of about 1 ms resolution whose `now()` is one atomic load.
///
/// The first `CoarseClock` starts one process-wide ticker thread that stores
/// [`MonotonicClock::now`] into a shared atomic every [`CoarseClock::TICK`]
/// (1 ms). The thread exits about a second after the last `CoarseClock` is
/// dropped and is restarted by the next one. `now()` never goes backwards
/// and is on the same timeline as `MonotonicClock`, at most one tick (plus
/// scheduling delay) behind it.
///
/// Why a ticker and not `CLOCK_MONOTONIC_COARSE`: on the development machines
/// that clock's resolution is 4 ms (the kernel's tick), and it costs ~6 ns
/// against ~1 ns for a cached load.
#[derive(Debug)]
pub struct CoarseClock {
    _live: coarse::Live,
}

impl CoarseClock {
    /// How often the ticker refreshes the cached time.
    pub const TICK: Duration = Duration::from_millis(1);

    /// A handle on the shared coarse clock (starts the ticker if needed).
    pub fn new() -> Self {
        CoarseClock {
            _live: coarse::Live::acquire(),
        }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for CoarseClock {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> u64 {
        coarse::now()
    }
}

/// The shared ticker behind [`CoarseClock`]. It uses std atomics directly on
/// purpose: a process-wide static cannot be a loom atomic, and loom models
/// never use `CoarseClock` (they pass explicit times).
mod coarse {
    use super::{Clock, MonotonicClock};
    use crate::sync::process_wide::{AtomicU64, AtomicUsize, Ordering};
    use crossbeam_utils::CachePadded;
    use std::sync::Mutex;

    /// The time every `CoarseClock::now()` in the process reads: alone on
    /// its 128-byte line pair, so that no unrelated static written nearby
    /// (the linker packs statics of every crate together) turns each read
    /// into a cache miss. Measured: unpadded, it shared a pair of lines with
    /// other crates' statics and two threads reading it ran at 0.4x.
    static NOW: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
    static LIVE: AtomicUsize = AtomicUsize::new(0);
    /// Serializes starting and stopping the ticker thread (never touched by
    /// `now()`).
    static TICKER: Mutex<bool> = Mutex::new(false);

    #[derive(Debug)]
    pub(super) struct Live(());

    impl Live {
        pub(super) fn acquire() -> Live {
            LIVE.fetch_add(1, Ordering::AcqRel);
            // Publish a fresh time before the first `now()` can run.
            NOW.fetch_max(MonotonicClock.now(), Ordering::AcqRel);
            let mut running = TICKER.lock().unwrap_or_else(|e| e.into_inner());
            if !*running {
                *running = true;
                let spawned = std::thread::Builder::new()
                    .name("stripecount-coarse-clock".into())
                    .spawn(tick);
                if spawned.is_err() {
                    // No thread: `now()` falls back to the precise clock.
                    *running = false;
                }
            }
            Live(())
        }
    }

    impl Drop for Live {
        fn drop(&mut self) {
            LIVE.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn tick() {
        let mut idle_ticks = 0u32;
        loop {
            NOW.fetch_max(MonotonicClock.now(), Ordering::Release);
            std::thread::sleep(super::CoarseClock::TICK);
            if LIVE.load(Ordering::Acquire) == 0 {
                idle_ticks += 1;
                // Linger for a second so short-lived clocks do not respawn
                // the thread over and over.
                if idle_ticks >= 1000 {
                    let mut running = TICKER.lock().unwrap_or_else(|e| e.into_inner());
                    if LIVE.load(Ordering::Acquire) == 0 {
                        *running = false;
                        return;
                    }
                    idle_ticks = 0;
                }
            } else {
                idle_ticks = 0;
            }
        }
    }

    #[inline]
    pub(super) fn now() -> u64 {
        NOW.load(Ordering::Acquire)
    }
}

/// A clock moved by hand, starting at 0. Clones share one time.
///
/// ```
/// use stripecount::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let view = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(view.now(), 5_000_000);
/// clock.set(7);
/// assert_eq!(view.now(), 7);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl ManualClock {
    /// A clock at time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `nanos`.
    pub fn starting_at(nanos: u64) -> Self {
        let c = Self::new();
        c.set(nanos);
        c
    }

    /// Sets the time (it may move backwards: that is what tests need).
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Release);
    }

    /// Moves the time forward by `by`, saturating at `u64::MAX`.
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        let mut cur = self.nanos.load(Ordering::Acquire);
        loop {
            match self.nanos.compare_exchange_weak(
                cur,
                cur.saturating_add(by),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}
