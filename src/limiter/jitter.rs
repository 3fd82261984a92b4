//! [`Jitter`]: a random extra delay for each sleep of a wait (`wait.rs`),
//! or of a retry loop of the caller's own.
//!
//! # Randomness
//! splitmix64 (one add, two multiplies, three shifts per draw), a state per
//! thread, seeded on the thread's first draw from std's `RandomState` (keys
//! the OS's randomness seeds once per thread). Statistical quality far
//! beyond spreading wake-ups, no dependency, no lock, no shared word. A
//! draw in `[0, interval)` is Lemire's multiply and shift (`x * span >>
//! 64`): its bias is below `span / 2^64`, under a nanosecond.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// A random extra delay added to each sleep of a wait, so that waiters
/// refused together do not all wake together: each sleep is the refusal's
/// `retry_after` plus a draw uniform in `[min, min + interval)`, at whole
/// nanoseconds (intervals above 584 years are drawn from their first 584
/// years). [`Jitter::NONE`], the default, adds nothing.
///
/// ```
/// use std::time::Duration;
/// use stripecount::limiter::Jitter;
///
/// let ms = Duration::from_millis;
/// // 10 to 30 ms more than each refusal's retry time.
/// let jitter = Jitter::new(ms(10), ms(20));
/// let sleep = jitter.add_to(ms(100));
/// assert!(ms(110) <= sleep && sleep < ms(130));
/// // Up to 50 ms more.
/// assert!(Jitter::up_to(ms(50)).add_to(ms(100)) < ms(150));
/// assert_eq!(Jitter::NONE.add_to(ms(100)), ms(100));
/// // Never an overflow: a sleep saturates.
/// assert_eq!(Jitter::up_to(Duration::MAX).add_to(Duration::MAX), Duration::MAX);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Jitter {
    min: Duration,
    interval: Duration,
}

impl Jitter {
    /// No jitter: a waiter sleeps exactly the refusal's `retry_after`.
    pub const NONE: Jitter = Jitter::new(Duration::ZERO, Duration::ZERO);

    /// An extra delay uniform in `[min, min + interval)` (`min` exactly when
    /// `interval` is zero).
    pub const fn new(min: Duration, interval: Duration) -> Jitter {
        Jitter { min, interval }
    }

    /// An extra delay uniform in `[0, max)`.
    pub const fn up_to(max: Duration) -> Jitter {
        Jitter::new(Duration::ZERO, max)
    }

    /// `d` plus one draw of this jitter, saturating at `Duration::MAX`: the
    /// sleep a wait takes after a refusal whose `retry_after` is `d`. For
    /// retry loops of your own (a client honouring `Retry-After`).
    pub fn add_to(&self, d: Duration) -> Duration {
        let span = u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX);
        let extra = if span == 0 {
            0
        } else {
            ((u128::from(next_u64()) * u128::from(span)) >> 64) as u64
        };
        d.saturating_add(self.min)
            .saturating_add(Duration::from_nanos(extra))
    }
}

thread_local! {
    /// This thread's splitmix64 state; 0 until the first draw seeds it.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// splitmix64's increment (2^64 / the golden ratio, odd).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A seed: 64 bits hashed under std's per-thread random keys.
fn seed() -> u64 {
    RandomState::new().hash_one(0x5EED_u64)
}

/// splitmix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The next draw of this thread's generator (seeded on its first use; a
/// thread being torn down draws from a fresh seed).
fn next_u64() -> u64 {
    RNG.try_with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = seed();
        }
        x = x.wrapping_add(GAMMA);
        s.set(x);
        mix(x)
    })
    .unwrap_or_else(|_| mix(seed()))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_saturate() {
        let ms = Duration::from_millis;
        let j = Jitter::new(ms(5), ms(10));
        for _ in 0..crate::sized(10_000, 100) {
            let d = j.add_to(ms(1));
            assert!(ms(6) <= d && d < ms(16), "{d:?}");
        }
        assert_eq!(Jitter::new(ms(5), Duration::ZERO).add_to(ms(1)), ms(6));
        let huge = Jitter::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.add_to(Duration::MAX), Duration::MAX);
        assert!(Jitter::up_to(Duration::MAX).add_to(Duration::ZERO) < Duration::MAX);
        assert_eq!(Jitter::default(), Jitter::NONE);
    }

    /// Threads seed differently (two threads drawing the same 8 values in a
    /// row would be a 2^-512 coincidence).
    #[test]
    fn threads_draw_differently() {
        let draws = || (0..8).map(|_| next_u64()).collect::<Vec<_>>();
        let a = std::thread::spawn(draws).join().unwrap();
        let b = std::thread::spawn(draws).join().unwrap();
        assert_ne!(a, b);
    }
}
