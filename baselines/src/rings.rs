//! Sliding-window baselines: the rings stripecount replaces.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A ring of slices behind one `Mutex`: correct, but every add takes the
/// lock.
#[derive(Debug)]
pub struct MutexRing {
    slice_nanos: u64,
    inner: Mutex<Vec<(u64, u64)>>, // (epoch, count) per slot
}

impl MutexRing {
    /// `slices` slices of `slice_nanos` each.
    pub fn new(slice_nanos: u64, slices: usize) -> Self {
        MutexRing {
            slice_nanos,
            inner: Mutex::new((0..slices as u64).map(|j| (j, 0)).collect()),
        }
    }
    /// Adds `n` at `now`.
    #[inline]
    pub fn add_at(&self, now: u64, n: u64) {
        let e = now / self.slice_nanos;
        let mut g = self.inner.lock().unwrap();
        let len = g.len() as u64;
        let slot = &mut g[(e % len) as usize];
        if slot.0 == e {
            slot.1 += n;
        } else if slot.0 < e {
            *slot = (e, n);
        }
    }
    /// The window sum at `now`.
    pub fn sum_at(&self, now: u64) -> u64 {
        let e = now / self.slice_nanos;
        let g = self.inner.lock().unwrap();
        let s = g.len() as u64;
        g.iter()
            .filter(|(se, _)| *se <= e && e - *se < s)
            .map(|(_, c)| c)
            .sum()
    }
}

/// The naive atomic ring of the published leap arrays: a slot's epoch is
/// *published, then* its count is zeroed, then the add lands. RACY: an add
/// that sees the new epoch before the zeroing is wiped (the loom models in
/// `loom-tests/` show it). Kept as a speed reference only.
#[derive(Debug)]
pub struct NaiveAtomicRing {
    slice_nanos: u64,
    epochs: Box<[AtomicU64]>,
    counts: Box<[AtomicU64]>,
}

impl NaiveAtomicRing {
    /// `slices` slices of `slice_nanos` each.
    pub fn new(slice_nanos: u64, slices: usize) -> Self {
        NaiveAtomicRing {
            slice_nanos,
            epochs: (0..slices as u64).map(AtomicU64::new).collect(),
            counts: (0..slices).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    /// Adds `n` at `now` (racy across slice boundaries, see the type docs).
    #[inline]
    pub fn add_at(&self, now: u64, n: u64) {
        let e = now / self.slice_nanos;
        let i = (e % self.epochs.len() as u64) as usize;
        let seen = self.epochs[i].load(Ordering::Acquire);
        if seen < e
            && self.epochs[i]
                .compare_exchange(seen, e, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.counts[i].store(0, Ordering::Release);
        }
        self.counts[i].fetch_add(n, Ordering::AcqRel);
    }
    /// The window sum at `now`.
    pub fn sum_at(&self, now: u64) -> u64 {
        let e = now / self.slice_nanos;
        let s = self.epochs.len() as u64;
        (0..self.epochs.len())
            .filter(|&i| {
                let se = self.epochs[i].load(Ordering::Acquire);
                se <= e && e - se < s
            })
            .map(|i| self.counts[i].load(Ordering::Acquire))
            .sum()
    }
}
