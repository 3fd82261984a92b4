//! One timeline for the whole cluster: Redis server time.
//!
//! [`WallClock`] is a node's own estimate of Unix time (a monotonic clock
//! anchored to the system clock once). [`ServerTime`] is that clock plus an
//! offset to the Redis server's `TIME`, sampled by the node and kept as an
//! offset so that reading it costs one relaxed load more than the node
//! clock. Every epoch (slice number) a node files a count under is taken
//! from `ServerTime`, so a node whose clock is off files its counts in the
//! same slices as every other node.
//!
//! # Accuracy
//! A sample sends `TIME` at node time `t0` and reads the reply at `t1`: the
//! server's time was read between the two, so `offset = server - (t0 +
//! t1) / 2` is off by at most `(t1 - t0) / 2` (half the round trip) plus the
//! server's 1 us resolution. Between samples the node clock may drift; the
//! error bound kept ([`ServerTime::uncertainty`]) grows by `DRIFT_PPM` of
//! the time since the sample, and a new sample replaces the offset only if
//! its own bound is no worse. Until the first sample the node's own clock
//! is used and the bound is unknown (`None`).
//!
//! # Orderings
//! The offset and the bound are independent relaxed atomics: a reader may
//! see a new offset with an old bound for an instant, which changes
//! nothing a caller can rely on (both are estimates).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stripecount::clock::MonotonicClock;
use stripecount::{Clock, Timestamp};

/// How fast a node clock is assumed to drift, at most (parts per million).
pub const DRIFT_PPM: u64 = 100;

/// A node's estimate of Unix time: `inner` anchored to the system clock
/// when created, read as a [`Timestamp`] of nanoseconds since the Unix
/// epoch. Monotonic if `inner` is; the default runs on
/// [`MonotonicClock`]. Use `WallClock::over(CoarseClock::new())` for ~1 ns
/// reads at ~1 ms resolution.
///
/// ```
/// use stripecount::Clock;
/// use stripecount_redis::WallClock;
/// use std::time::{SystemTime, UNIX_EPOCH};
///
/// let c = WallClock::new();
/// let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
/// assert!(c.now().as_nanos().abs_diff(unix) < 1_000_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct WallClock<C: Clock = MonotonicClock> {
    inner: C,
    anchor: u64,
}

impl WallClock {
    /// Over the monotonic clock.
    pub fn new() -> Self {
        Self::over(MonotonicClock)
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> WallClock<C> {
    /// Over `inner`, anchored to the system clock now.
    pub fn over(inner: C) -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let anchor = unix.wrapping_sub(inner.now().as_nanos());
        WallClock { inner, anchor }
    }
}

impl<C: Clock> Clock for WallClock<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.inner.now().as_nanos().wrapping_add(self.anchor))
    }
}

/// Not sampled yet.
const UNKNOWN: u64 = u64::MAX;

#[derive(Debug)]
struct Offset {
    /// `server - node`, wrapping.
    offset: AtomicU64,
    /// Half the round trip of the sample in use, in nanoseconds.
    bound: AtomicU64,
    /// Node time of the sample in use.
    at: AtomicU64,
}

/// The cluster's timeline: a node clock `C` (read as Unix time) plus the
/// offset to the Redis server's time. Its [`now`](Clock::now) is the
/// node's estimate of the server's Unix time. Clones share the offset.
///
/// ```
/// use stripecount::clock::ManualClock;
/// use stripecount::{Clock, Timestamp};
/// use stripecount_redis::ServerTime;
/// use std::time::Duration;
///
/// let t = |ns| Timestamp::from_nanos(ns);
/// let node = ManualClock::starting_at(t(1_000));
/// let server = ServerTime::new(node.clone());
/// assert_eq!(server.now(), t(1_000)); // not sampled: the node clock
/// assert_eq!(server.uncertainty(), None);
/// // TIME answered 5_000 ns between node times 990 and 1_010.
/// assert!(server.sample(t(990), t(1_010), t(5_000)));
/// assert_eq!(server.now(), t(5_000));
/// // Half the round trip plus the server's 1 us resolution.
/// assert_eq!(server.uncertainty(), Some(Duration::from_nanos(10 + 1_000)));
/// ```
#[derive(Debug)]
pub struct ServerTime<C> {
    clock: C,
    state: Arc<Offset>,
}

impl<C: Clone> Clone for ServerTime<C> {
    fn clone(&self) -> Self {
        ServerTime {
            clock: self.clock.clone(),
            state: Arc::clone(&self.state),
        }
    }
}

impl<C: Clock> ServerTime<C> {
    /// Over the node clock `clock`, not sampled yet.
    pub fn new(clock: C) -> Self {
        ServerTime {
            clock,
            state: Arc::new(Offset {
                offset: AtomicU64::new(0),
                bound: AtomicU64::new(UNKNOWN),
                at: AtomicU64::new(0),
            }),
        }
    }

    /// The node clock.
    pub fn node_clock(&self) -> &C {
        &self.clock
    }

    /// Records a `TIME` sample: the server answered `server` (its Unix
    /// time) to a request sent at node time `t0` and answered at `t1`.
    /// Returns whether the sample replaced the offset (its error bound is
    /// no worse than the current one's, drift included).
    pub fn sample(&self, t0: Timestamp, t1: Timestamp, server: Timestamp) -> bool {
        let (t0, t1) = (t0.as_nanos(), t1.as_nanos());
        let server_ns = server.as_nanos();
        let (t0, t1) = (t0.min(t1), t0.max(t1));
        let half = (t1 - t0) / 2;
        let mid = t0 + half;
        let new_bound = half + 1_000; // the server's 1 us resolution
        if let Some(cur) = self.bound_at(t1) {
            if new_bound > cur {
                return false;
            }
        }
        let s = &self.state;
        s.offset
            .store(server_ns.wrapping_sub(mid), Ordering::Relaxed);
        s.at.store(mid, Ordering::Relaxed);
        s.bound.store(new_bound, Ordering::Relaxed);
        true
    }

    /// The error bound at node time `now`: the sample's bound plus drift.
    fn bound_at(&self, now: u64) -> Option<u64> {
        let b = self.state.bound.load(Ordering::Relaxed);
        if b == UNKNOWN {
            return None;
        }
        let age = now.saturating_sub(self.state.at.load(Ordering::Relaxed));
        Some(b.saturating_add(age / (1_000_000 / DRIFT_PPM)))
    }

    /// How far [`now`](Clock::now) may be from the server's time, at most
    /// (`None` before the first sample).
    pub fn uncertainty(&self) -> Option<Duration> {
        self.uncertainty_at(self.clock.now())
    }

    /// [`uncertainty`](Self::uncertainty) at node time `now` (the bound
    /// widens with the drift since the sample).
    pub fn uncertainty_at(&self, now: Timestamp) -> Option<Duration> {
        self.bound_at(now.as_nanos()).map(Duration::from_nanos)
    }

    /// `server - node`, in nanoseconds (0 before the first sample).
    pub fn offset(&self) -> i64 {
        self.state.offset.load(Ordering::Relaxed) as i64
    }

    /// Forgets the samples (the next one is accepted whatever its bound):
    /// after a reconnect, to another server maybe.
    pub(crate) fn reset_bound(&self) {
        self.state.bound.store(UNKNOWN, Ordering::Relaxed);
    }
}

impl<C: Clock> ServerTime<C> {
    /// The node's estimate of the server's time at node time `node_ns`.
    #[inline]
    pub(crate) fn server_at(&self, node_ns: u64) -> u64 {
        node_ns.wrapping_add(self.state.offset.load(Ordering::Relaxed))
    }

    /// The node clock now, in nanoseconds.
    #[inline]
    pub(crate) fn node_ns(&self) -> u64 {
        self.clock.now().as_nanos()
    }
}

impl<C: Clock> Clock for ServerTime<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.server_at(self.node_ns()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stripecount::clock::ManualClock;

    fn ts(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    fn ns(ns: u64) -> Option<Duration> {
        Some(Duration::from_nanos(ns))
    }

    #[test]
    fn keeps_the_tightest_sample_and_lets_drift_widen_it() {
        let c = ManualClock::starting_at(ts(10_000_000));
        let t = ServerTime::new(c.clone());
        assert!(t.sample(ts(10_000_000), ts(10_200_000), ts(50_000_000))); // rtt 200 us
        assert_eq!(t.now(), ts(50_000_000 - 100_000));
        assert_eq!(t.uncertainty(), ns(101_000));
        // A slower sample right after is refused.
        assert!(!t.sample(ts(10_000_000), ts(10_400_000), ts(60_000_000)));
        assert_eq!(t.offset(), 50_000_000 - 10_100_000);
        // Ten seconds later (less the 100 us since the sample's midpoint)
        // drift has widened the bound by 100 ppm of that.
        c.advance(Duration::from_secs(10));
        assert_eq!(t.uncertainty(), ns(101_000 + 999_990));
        assert_eq!(t.uncertainty_at(c.now()), t.uncertainty());
        let now = c.now();
        assert!(t.sample(now, now + Duration::from_nanos(400_000), ts(70_000_000)));
        assert_eq!(t.now(), ts(70_000_000 - 200_000));
    }

    #[test]
    fn a_negative_offset_wraps() {
        let c = ManualClock::starting_at(ts(5_000_000_000));
        let t = ServerTime::new(c);
        assert!(t.sample(ts(5_000_000_000), ts(5_000_000_000), ts(0)));
        assert_eq!(t.offset(), -5_000_000_000);
        assert_eq!(t.now(), ts(0));
    }
}
