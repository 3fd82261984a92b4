//! [`TokioClock`]: a limiter clock on tokio's time (feature `tokio`).

use super::{Clock, Timestamp};

/// A [`Clock`] on tokio's time ([`tokio::time::Instant`]), from the moment
/// it was made: the same time `until_ready`'s sleeps run on. In a runtime
/// with paused time (tokio's `test-util`), a limiter on this clock sees
/// the paused clock, so tests of waiting code are exact and take no time;
/// otherwise it reads the monotonic clock as `std::time::Instant` does.
///
/// ```
/// use stripecount::clock::TokioClock;
/// use stripecount::Clock;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let clock = TokioClock::new();
/// tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
/// assert_eq!(clock.now().as_nanos(), 1_500_000_000);
/// # });
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: ::tokio::time::Instant,
}

impl TokioClock {
    /// A clock at 0 now.
    pub fn new() -> TokioClock {
        TokioClock {
            origin: ::tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> Timestamp {
        let d = ::tokio::time::Instant::now().saturating_duration_since(self.origin);
        Timestamp::from_duration(d)
    }
}
