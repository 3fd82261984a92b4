//! [`CoarseClock`]: the process timeline, cached by one ticker thread.

use super::Clock;
use std::time::Duration;

/// A clock of about 1 ms resolution whose `now()` is one atomic load.
///
/// The first `CoarseClock` starts one process-wide ticker thread that stores
/// [`MonotonicClock::now`](crate::MonotonicClock) into a shared atomic every
/// [`CoarseClock::TICK`] (1 ms). The thread exits about a second after the
/// last `CoarseClock` is dropped and is restarted by the next one. `now()`
/// never goes backwards and reads the same timeline as `MonotonicClock`
/// (the ticker reads a `MonotonicClock`: the same source, TSC or `Instant`,
/// and the same origin), at most one tick (plus scheduling delay) behind
/// it.
///
/// ```
/// use stripecount::{Clock, CoarseClock, MonotonicClock};
///
/// let coarse = CoarseClock::new();
/// let precise = MonotonicClock::new();
/// // One timeline: the coarse time is an earlier precise time.
/// assert!(coarse.now() <= precise.now() + 1_000_000);
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
    fn now(&self) -> u64 {
        ticker::now()
    }
}

/// The shared ticker behind [`CoarseClock`]. It uses std atomics directly on
/// purpose: a process-wide static cannot be a loom atomic, and loom models
/// never use `CoarseClock` (they pass explicit times).
mod ticker {
    use crate::clock::{Clock, MonotonicClock};
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
