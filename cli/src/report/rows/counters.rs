//! The counter rows: one shared `AtomicU64` (the reference), a `Mutex<u64>`,
//! fast-counter's `ConcurrentCounter` and our `StripedCounter`, each adding 1.

use super::Setup;
use crate::report::args::cores;
use std::sync::{Arc, Mutex};
use stripecount::StripedCounter;
use stripecount_baselines::counters::AtomicCounter;
use stripecount_baselines::harness::{batches, Job};

pub(super) fn atomic_u64(_: &Setup, _: usize) -> Job {
    let c = Arc::new(AtomicCounter::default());
    Arc::new(move |_, stop| batches(stop, || c.add(1)))
}

pub(super) fn mutex_u64(_: &Setup, _: usize) -> Job {
    let c = Arc::new(Mutex::new(0u64));
    Arc::new(move |_, stop| {
        batches(stop, || {
            *c.lock().unwrap() += 1;
        })
    })
}

pub(super) fn fast_counter(_: &Setup, _: usize) -> Job {
    // Sized as its docs suggest: one cell per core (rounded up to a power of two).
    let c = Arc::new(fast_counter::ConcurrentCounter::new(cores()));
    Arc::new(move |_, stop| batches(stop, || c.add(1)))
}

pub(super) fn striped_counter(_: &Setup, _: usize) -> Job {
    let c = Arc::new(StripedCounter::new());
    Arc::new(move |_, stop| batches(stop, || c.add(1)))
}
