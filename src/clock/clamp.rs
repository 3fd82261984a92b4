//! The clamp that keeps a hardware counter's time monotonic, without a
//! shared write on every read.
//!
//! A raw time (from the TSC) can step back: a thread moves to a core whose
//! counter is offset from the last one's, or a counter restarts. Each
//! thread therefore keeps the last time it returned ([`Seen`]) and never
//! returns less. That alone would let two threads live on two timelines
//! (a thread on a core 1.6 s behind, quanta issue #111, would stay 1.6 s
//! behind the others), so the threads also share a [`Floor`]: every read
//! returns at least the floor, and a thread raises the floor to its own
//! time once per [`GRANULE`] of its time, not on every read.
//!
//! # Invariants
//! 1. On one thread, returned times never decrease (`Seen::last`).
//! 2. Across threads: if a read returning `t` happens-before another
//!    thread's read, that read returns more than `t - GRANULE`. The first
//!    thread's latest publish `p` satisfies `t < p + GRANULE` (a read at
//!    `p + GRANULE` or later publishes itself), the publish is sequenced
//!    before its read, and the floor only grows; so the later read, which
//!    loads the floor after (write-read coherence), sees at least `p`.
//! 3. The floor is only ever a time some thread returned, so it is never
//!    ahead of the timeline (a counter that jumps ahead is the exception:
//!    everyone then waits at the jumped-to time until the counter catches
//!    up, as with any clamp).
//!
//! # Orderings
//! `Relaxed` throughout: the bound of invariant 2 follows from coherence of
//! the one floor word alone, and a clock orders nothing else.
//!
//! # Cost
//! A read is a thread-local load and store and a load of the floor (a line
//! written once per [`GRANULE`] per thread, so nearly always shared and
//! cached). A `fetch_max` on one shared word on every read, the obvious
//! clamp, is a contended line at two threads; `benches/clock.rs` measures
//! both.

use crate::sync::{AtomicU64, Ordering};

/// How far (ns) a thread's time may run ahead of the floor before the
/// thread publishes it: the bound of invariant 2 (about 65 µs).
pub const GRANULE: u64 = 1 << 16;

/// What one thread has returned: its last time, and the time at which it
/// publishes to the floor next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    last: u64,
    publish_at: u64,
}

impl Seen {
    /// A thread that has read nothing yet.
    pub const NEW: Seen = Seen {
        last: 0,
        publish_at: 0,
    };
}

/// The time shared by all readers of one timeline.
#[derive(Debug, Default)]
pub struct Floor(AtomicU64);

impl Floor {
    /// A floor at time 0.
    #[cfg(not(loom))]
    pub const fn new() -> Floor {
        Floor(AtomicU64::new(0))
    }

    /// A floor at time 0.
    #[cfg(loom)]
    pub fn new() -> Floor {
        Floor(AtomicU64::new(0))
    }

    /// The time to return for a raw reading `raw` on the thread whose
    /// record is `seen`: at least `raw`, the thread's last time and the
    /// floor (see the module docs).
    #[inline]
    pub fn clamp(&self, raw: u64, seen: &mut Seen) -> u64 {
        let t = raw.max(seen.last).max(self.0.load(Ordering::Relaxed));
        seen.last = t;
        if t >= seen.publish_at {
            self.0.fetch_max(t, Ordering::Relaxed);
            seen.publish_at = t.saturating_add(GRANULE);
        }
        t
    }

    /// The floor now.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_never_goes_back_and_publishes_once_per_granule() {
        let floor = Floor::new();
        let mut seen = Seen::NEW;
        assert_eq!(floor.clamp(1_000, &mut seen), 1_000);
        assert_eq!(floor.get(), 1_000, "the first read publishes");
        assert_eq!(floor.clamp(900, &mut seen), 1_000, "a step back is clamped");
        assert_eq!(floor.clamp(1_500, &mut seen), 1_500);
        assert_eq!(floor.get(), 1_000, "within a granule: no publish");
        let next = 1_000 + GRANULE;
        assert_eq!(floor.clamp(next, &mut seen), next);
        assert_eq!(floor.get(), next);
        assert_eq!(floor.clamp(u64::MAX, &mut seen), u64::MAX);
        assert_eq!(floor.clamp(5, &mut seen), u64::MAX, "saturated, no wrap");
    }

    #[test]
    fn a_thread_behind_the_others_is_lifted_to_the_floor() {
        // Thread a runs on a core 1.6 s ahead of thread b's (quanta #111).
        let floor = Floor::new();
        let (mut a, mut b) = (Seen::NEW, Seen::NEW);
        let skew = 1_600_000_000;
        let mut last_a = 0;
        for step in 0..1_000u64 {
            let now = step * 10_000;
            last_a = floor.clamp(now + skew, &mut a);
            let tb = floor.clamp(now, &mut b);
            // b reads after a: within a granule of a's time, never ahead.
            assert!(tb + GRANULE > last_a && tb <= last_a, "{tb} vs {last_a}");
        }
        assert!(last_a >= skew);
    }
}
