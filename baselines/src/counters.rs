//! Counter baselines.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// One shared `AtomicU64` (`fetch_add`): every thread fights for one line.
#[derive(Debug, Default)]
pub struct AtomicCounter(AtomicU64);

impl AtomicCounter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The total.
    pub fn sum(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A `Mutex<u64>`.
#[derive(Debug, Default)]
pub struct MutexCounter(Mutex<u64>);

impl MutexCounter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        *self.0.lock().unwrap() += n;
    }
    /// The total.
    pub fn sum(&self) -> u64 {
        *self.0.lock().unwrap()
    }
}

/// The ideal a striped counter approaches: one padded atomic per thread,
/// each thread told its index up front (no hashing, no growth).
#[derive(Debug)]
pub struct PerThreadCounter {
    cells: Box<[CachePadded<AtomicU64>]>,
    next: AtomicUsize,
}

impl PerThreadCounter {
    /// Room for `threads` threads.
    pub fn new(threads: usize) -> Self {
        PerThreadCounter {
            cells: (0..threads.max(1))
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }
    /// Hands out the next thread slot (call once per thread).
    pub fn register(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.cells.len()
    }
    /// Adds `n` to slot `slot`.
    #[inline]
    pub fn add(&self, slot: usize, n: u64) {
        self.cells[slot].fetch_add(n, Ordering::Relaxed);
    }
    /// The total.
    pub fn sum(&self) -> u64 {
        self.cells.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}
