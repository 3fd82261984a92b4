//! Limiter baselines: a correct sliding-window limiter behind a `Mutex`,
//! and the two naive lock-free designs stripecount's limiters replace (both
//! RACY: they over-admit; kept as speed references only, and modelled as
//! loom counter-examples in `loom-tests/tests/limiter.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

struct Ring {
    /// `(epoch, count)` per slot.
    slots: Vec<(u64, u64)>,
    newest: u64,
}

/// An exact sliding-window limiter: a ring of slices behind one `Mutex`.
/// Correct and strict, but every request takes the lock.
pub struct MutexLimiter {
    limit: u64,
    slice_nanos: u64,
    inner: Mutex<Ring>,
}

impl std::fmt::Debug for MutexLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexLimiter")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl MutexLimiter {
    /// `limit` permits per window of `slices` slices of `slice_nanos` each.
    pub fn new(limit: u64, slice_nanos: u64, slices: usize) -> Self {
        MutexLimiter {
            limit,
            slice_nanos: slice_nanos.max(1),
            inner: Mutex::new(Ring {
                slots: (0..slices.max(1) as u64).map(|j| (j, 0)).collect(),
                newest: 0,
            }),
        }
    }

    /// Takes `n` permits at `now`; `true` if granted.
    #[inline]
    pub fn try_acquire_at(&self, now: u64, n: u64) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = (now / self.slice_nanos).max(g.newest);
        g.newest = e;
        let s = g.slots.len() as u64;
        let used: u64 = g
            .slots
            .iter()
            .filter(|(se, _)| *se <= e && e - *se < s)
            .fold(0u64, |a, (_, c)| a.saturating_add(*c));
        if n > self.limit || used.saturating_add(n) > self.limit {
            return false;
        }
        let slot = &mut g.slots[(e % s) as usize];
        if slot.0 == e {
            slot.1 += n;
        } else {
            *slot = (e, n);
        }
        true
    }
}

/// RACY: a fixed window that reads the count, checks it, and adds later
/// ("check the sum, then add"). Two threads that both read `limit - 1`
/// both add: over-admission.
#[derive(Debug)]
pub struct CheckThenAddLimiter {
    limit: u64,
    window_nanos: u64,
    window: AtomicU64,
    count: AtomicU64,
}

impl CheckThenAddLimiter {
    /// `limit` permits per fixed window of `window_nanos`.
    pub fn new(limit: u64, window_nanos: u64) -> Self {
        CheckThenAddLimiter {
            limit,
            window_nanos: window_nanos.max(1),
            window: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Takes one permit at `now` (racy, see the type docs).
    #[inline]
    pub fn try_acquire_at(&self, now: u64) -> bool {
        let w = now / self.window_nanos;
        let cur = self.window.load(Ordering::Acquire);
        if w > cur
            && self
                .window
                .compare_exchange(cur, w, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.count.store(0, Ordering::Release);
        }
        if self.count.load(Ordering::Acquire) < self.limit {
            self.count.fetch_add(1, Ordering::AcqRel);
            true
        } else {
            false
        }
    }
}

/// RACY: the published fixed-window limiter: CAS the next window start,
/// then store `count = 1`; otherwise `count < limit && ++count <= limit`.
/// Grants that land between the CAS and the store are wiped, so the window
/// over-admits.
#[derive(Debug)]
pub struct NaiveFixedWindowLimiter {
    limit: u64,
    window_nanos: u64,
    start: AtomicU64,
    count: AtomicU64,
}

impl NaiveFixedWindowLimiter {
    /// `limit` permits per fixed window of `window_nanos`.
    pub fn new(limit: u64, window_nanos: u64) -> Self {
        NaiveFixedWindowLimiter {
            limit,
            window_nanos: window_nanos.max(1),
            start: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Takes one permit at `now` (racy, see the type docs).
    #[inline]
    pub fn try_acquire_at(&self, now: u64) -> bool {
        let start = self.start.load(Ordering::Acquire);
        if now >= start.saturating_add(self.window_nanos) {
            let next = now - now % self.window_nanos;
            if self
                .start
                .compare_exchange(start, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.count.store(1, Ordering::Release);
                return self.limit >= 1;
            }
        }
        self.count.load(Ordering::Acquire) < self.limit
            && self.count.fetch_add(1, Ordering::AcqRel) < self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutex_limiter_is_a_sliding_window() {
        let l = MutexLimiter::new(4, 10, 3);
        assert!(l.try_acquire_at(0, 2));
        assert!(l.try_acquire_at(10, 2));
        assert!(!l.try_acquire_at(20, 2));
        assert!(l.try_acquire_at(30, 2));
        assert!(!l.try_acquire_at(0, 1), "judged at the newest time");
    }

    #[test]
    fn naive_limiters_work_single_threaded() {
        let a = CheckThenAddLimiter::new(2, 10);
        let b = NaiveFixedWindowLimiter::new(2, 10);
        for t in [0u64, 10, 25] {
            assert!(a.try_acquire_at(t) && a.try_acquire_at(t) && !a.try_acquire_at(t));
            assert!(b.try_acquire_at(t) && b.try_acquire_at(t) && !b.try_acquire_at(t));
        }
    }
}
