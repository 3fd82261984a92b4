//! [`ManualClock`]: time moved by hand, for tests and simulations.

use super::{duration_nanos, Clock, Timestamp};
use crate::sync::{Arc, AtomicU64, Ordering};
use std::time::Duration;

/// A clock moved by hand, starting at 0. Clones share one time.
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{Clock, Timestamp};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let view = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(view.now().as_nanos(), 5_000_000);
/// clock.set(Timestamp::from_nanos(7));
/// assert_eq!(view.now(), Timestamp::from_nanos(7));
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

    /// A clock at `now`.
    pub fn starting_at(now: Timestamp) -> Self {
        let c = Self::new();
        c.set(now);
        c
    }

    /// Sets the time (it may move backwards: that is what tests need).
    pub fn set(&self, now: Timestamp) {
        self.nanos.store(now.as_nanos(), Ordering::Release);
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
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}
