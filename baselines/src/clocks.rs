//! Clock baselines: the bare counter read, and the obvious clamp (one
//! shared `fetch_max` on every read) that `stripecount`'s per-thread clamp
//! avoids.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};

/// The CPU's time-stamp counter, unconverted and unclamped (`rdtsc`): the
/// floor under any TSC clock. Elsewhere than x86_64, nanoseconds from
/// `Instant` (there is no counter to compare with).
#[inline]
pub fn raw_counter() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory
        // effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// A clock made monotonic across all threads the obvious way: every read
/// raises one shared word with `fetch_max` and returns the result. Each
/// read that moves time forward writes the shared line, so at two threads
/// every read contends.
#[derive(Debug)]
pub struct SharedMaxClock<F> {
    source: F,
    max: CachePadded<AtomicU64>,
}

impl<F: Fn() -> u64> SharedMaxClock<F> {
    /// Clamps the times of `source`.
    pub fn new(source: F) -> Self {
        SharedMaxClock {
            source,
            max: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// The larger of `source()` and every time returned before.
    #[inline]
    pub fn now(&self) -> u64 {
        let t = (self.source)();
        self.max.fetch_max(t, Ordering::Relaxed).max(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_max_never_goes_back() {
        let times = [5u64, 3, 9, 1, 9, 12];
        let i = AtomicU64::new(0);
        let c = SharedMaxClock::new(|| times[i.fetch_add(1, Ordering::Relaxed) as usize]);
        let seen: Vec<u64> = (0..times.len()).map(|_| c.now()).collect();
        assert_eq!(seen, [5, 5, 9, 9, 9, 12]);
    }
}
