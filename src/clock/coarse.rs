//! [`CoarseClock`]: the process timeline, cached by one ticker thread.

use super::{Clock, Timestamp};
use std::time::Duration;

/// A clock of about 1 ms resolution whose `now()` is one atomic load.
///
/// The first `CoarseClock` starts one process-wide ticker thread that stores
/// [`MonotonicClock::now`](crate::clock::MonotonicClock) into a shared
/// atomic every [`CoarseClock::TICK`] (1 ms). The thread exits about a
/// second after the last `CoarseClock` is dropped and is restarted by the
/// next one. `now()` never goes backwards and reads the same timeline as
/// `MonotonicClock` (the ticker reads a `MonotonicClock`: the same source,
/// TSC or `Instant`, and the same origin), at most one tick (plus
/// scheduling delay) behind it.
///
/// ```
/// use std::time::Duration;
/// use stripecount::clock::{Clock, CoarseClock, MonotonicClock};
///
/// let coarse = CoarseClock::new();
/// let precise = MonotonicClock::new();
/// // One timeline: the coarse time is an earlier precise time.
/// assert!(coarse.now() <= precise.now() + Duration::from_millis(1));
/// ```
///
/// Why a ticker and not `CLOCK_MONOTONIC_COARSE`: on the development machines
/// that clock's resolution is 4 ms (the kernel's tick), and it costs ~6 ns
/// against ~1 ns for a cached load.
#[derive(Debug)]
pub struct CoarseClock {
    _live: ticker::Live,
}

impl CoarseClock {
    /// How often the ticker refreshes the cached time.
    pub const TICK: Duration = Duration::from_millis(1);

    /// A handle on the shared coarse clock (starts the ticker if needed).
    pub fn new() -> Self {
        CoarseClock {
            _live: ticker::Live::acquire(),
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
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(ticker::now())
    }
}

/// The shared ticker behind [`CoarseClock`]. It uses std atomics directly on
/// purpose: a process-wide static cannot be a loom atomic, and loom models
/// never use `CoarseClock` (they pass explicit times).
mod ticker {
    use crate::clock::{Clock, MonotonicClock};
    use crate::sync::process_wide::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use crossbeam_utils::CachePadded;
    use std::sync::Mutex;

    /// The time every `CoarseClock::now()` in the process reads: alone on
    /// its 128-byte line pair, so that no unrelated static written nearby
    /// (the linker packs statics of every crate together) turns each read
    /// into a cache miss. Measured: unpadded, it shared a pair of lines with
    /// other crates' statics and two threads reading it ran at 0.4x.
    static SHARED: CachePadded<Shared> = CachePadded::new(Shared {
        now: AtomicU64::new(0),
        no_ticker: AtomicBool::new(false),
    });

    /// What every `now()` reads, on one line: the cached time, and whether
    /// the ticker could not be started (then `now()` reads the precise
    /// clock itself, so time never stands still).
    struct Shared {
        now: AtomicU64,
        no_ticker: AtomicBool,
    }
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
            SHARED
                .now
                .fetch_max(MonotonicClock.now().as_nanos(), Ordering::AcqRel);
            let mut running = TICKER.lock().unwrap_or_else(|e| e.into_inner());
            if !*running {
                *running = true;
                let spawned = std::thread::Builder::new()
                    .name("stripecount-coarse-clock".into())
                    .spawn(tick);
                // No thread: `now()` reads the precise clock until a later
                // `CoarseClock` starts one.
                *running = spawned.is_ok();
                SHARED.no_ticker.store(spawned.is_err(), Ordering::Release);
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
            SHARED
                .now
                .fetch_max(MonotonicClock.now().as_nanos(), Ordering::Release);
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
        if SHARED.no_ticker.load(Ordering::Relaxed) {
            return precise();
        }
        SHARED.now.load(Ordering::Acquire)
    }

    /// The fallback: the precise time, never below what `now()` returned
    /// before (a `fetch_max` on the shared word: contended, but only when
    /// the process cannot start the ticker thread).
    #[cold]
    fn precise() -> u64 {
        let t = MonotonicClock.now().as_nanos();
        SHARED.now.fetch_max(t, Ordering::AcqRel).max(t)
    }

    /// Tests only: pretend the ticker could not be started (or could).
    #[cfg(test)]
    pub(super) fn force_no_ticker(on: bool) {
        SHARED.no_ticker.store(on, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Without a ticker thread `now()` reads the precise clock (it used to
    /// return the last cached time, which stood still): each read is at
    /// least a precise read taken just before it, which a cached time (up
    /// to a tick old) almost never is. Back on the ticker, it never goes
    /// back.
    #[test]
    fn without_a_ticker_now_follows_the_precise_clock() {
        let c = CoarseClock::new();
        let precise = crate::clock::MonotonicClock::new();
        ticker::force_no_ticker(true);
        let mut last = Timestamp::ZERO;
        for _ in 0..100 {
            let p = precise.now();
            last = c.now();
            assert!(last >= p, "{last:?} < {p:?}: a cached time");
        }
        ticker::force_no_ticker(false);
        assert!(c.now() >= last, "back on the ticker, time never goes back");
    }
}
