//! [`StripedCounter`] as a counter of the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`).
//!
//! `StripedCounter` implements [`metrics::CounterFn`], so a recorder can
//! hand out `metrics::Counter::from_arc(Arc<StripedCounter>)` where it would
//! hand out an `Arc<AtomicU64>`: `counter!(..).increment(n)` then adds to
//! the calling thread's cell instead of fighting over one word.
//!
//! ```
//! use std::sync::Arc;
//! use stripecount::StripedCounter;
//!
//! let requests = Arc::new(StripedCounter::new());
//! let handle = metrics::Counter::from_arc(Arc::clone(&requests));
//! let workers: Vec<_> = (0..4)
//!     .map(|_| {
//!         let handle = handle.clone();
//!         std::thread::spawn(move || {
//!             for _ in 0..1000 {
//!                 handle.increment(1);
//!             }
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap();
//! }
//! assert_eq!(requests.sum(), 4000);
//!
//! // `absolute` raises the total to at least the value, never lowers it.
//! handle.absolute(5000);
//! handle.absolute(4500); // an older reading of the same external counter
//! assert_eq!(requests.sum(), 5000);
//! ```
//!
//! # Invariants
//! - `increment(n)` is [`StripedCounter::add`]: one CAS on the thread's
//!   cell, saturating at `u64::MAX`; it never reads other cells and never
//!   takes a lock.
//! - `absolute(v)` leaves the total at least `v` and adds nothing when the
//!   total already is (the facade's rule: callers mirroring an external
//!   counter may deliver its readings out of order). The total of a striped
//!   counter is the sum of its cells, so "raise to `v`" is a read (`sum`)
//!   followed by an add of the difference, and two of those racing would
//!   both add the same difference. So raises are serialized by one
//!   process-wide lock, which only `absolute` takes: `increment` never
//!   waits for it. The unlock of one raise happens before the next raise's
//!   lock, so the next `sum` sees every add of the previous raise.
//!   Increments racing a raise only make the total larger (they are not
//!   lost: each is in a cell, counted by a later `sum`).
//! - `absolute` is for a counter that mirrors an external one; mixing it
//!   with `increment` on one counter is allowed but sums the two.
//!
//! # No `GaugeFn`
//! `StripedCounter` does not implement `metrics::GaugeFn`: a gauge must be
//! decremented and `set`, and a striped counter has unsigned cells that only
//! grow (a decrement could not be filed in a cell without going below zero)
//! and no atomic `set` (`reset` then `add` lets a reader see zero in between
//! and lets two racing sets add up). A gauge is one shared value that is
//! set, not many threads adding to one count; a plain atomic is the right
//! store for it.

use crate::StripedCounter;
use std::sync::{Mutex, PoisonError};

/// Serializes every [`CounterFn::absolute`](::metrics::CounterFn::absolute)
/// on a `StripedCounter` (see the module docs). Held for one `sum` and at
/// most one `add`; `increment` never takes it.
static RAISE: Mutex<()> = Mutex::new(());

impl ::metrics::CounterFn for StripedCounter {
    #[inline]
    fn increment(&self, value: u64) {
        self.add(value);
    }

    fn absolute(&self, value: u64) {
        // Nothing under the lock can panic; a poisoned lock still serializes.
        let _raise = RAISE.lock().unwrap_or_else(PoisonError::into_inner);
        let total = self.sum();
        if value > total {
            self.add(value - total);
        }
    }
}
