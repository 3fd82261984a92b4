//! A [`Limbo`]: one owner's retired objects (a ring's or a map's), waiting
//! until no guard can reach them (`epoch.rs`: the protocol, and why an
//! object retired at `r` may go once every pin is above `r`).
//!
//! # Memory held
//! A list holds fewer than [`COLLECT_AT`] objects, plus those retired at or
//! after the oldest pin its last collect saw (a retiring thread is itself
//! pinned, so the object it has just retired waits for the next collect).
//! The owner frees the rest when it is dropped: it then has no guard.
//!
//! # Invariants
//! 1. An object is freed once: taken out of the list under its mutex,
//!    then freed outside it (a destructor may retire into the same list).
//! 2. It is freed only when its retire epoch is below what
//!    [`Domain::safe_below`] returned after it was in the list.

use super::epoch::Domain;
use crate::sync::Mutex;

/// A [`Limbo`] collects when it holds this many objects: each collect is a
/// system call that interrupts every CPU running a thread of ours
/// (`barrier.rs`), so it is amortized over several retirements; and few
/// objects wait (a retired table can be megabytes). One under loom, so
/// that a model collects on every retirement.
#[cfg(not(loom))]
pub(crate) const COLLECT_AT: usize = 4;
#[cfg(loom)]
pub(crate) const COLLECT_AT: usize = 1;

/// An object waiting to be freed, with the epoch it was retired at.
#[derive(Clone, Copy)]
struct Retired {
    ptr: *mut (),
    free: unsafe fn(*mut ()),
    epoch: u64,
}

// SAFETY: a retired object is only ever freed (by `free`, its own drop),
// never used, and `Limbo::retire` requires its type to be `Send`.
unsafe impl Send for Retired {}

/// One owner's retired objects (module docs, "Memory held").
#[derive(Default)]
pub struct Limbo {
    list: Mutex<Vec<Retired>>,
}

/// Frees a `T` from `Box::into_raw`.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw` and is freed once.
unsafe fn free_box<T>(p: *mut ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
}

impl Limbo {
    /// Retires `ptr`: it is freed once no guard pinned in `domain` can
    /// reach it. Collects if the list is long enough.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is unlinked (no guard pinned from
    /// now on can load it), and is handed over exactly once; the caller
    /// holds a pin of `domain` or none.
    pub unsafe fn retire<T: Send + 'static>(&self, domain: &Domain, ptr: *mut T) {
        let epoch = domain.bump();
        let mut list = lock(&self.list);
        list.push(Retired {
            ptr: ptr.cast(),
            free: free_box::<T>,
            epoch,
        });
        if list.len() >= COLLECT_AT {
            Self::collect_locked(domain, list);
        }
    }

    /// Frees every object no guard can reach any more.
    #[cfg(any(loom, test))]
    pub fn collect(&self, domain: &Domain) {
        Self::collect_locked(domain, lock(&self.list));
    }

    fn collect_locked(domain: &Domain, mut list: impl std::ops::DerefMut<Target = Vec<Retired>>) {
        let m = domain.safe_below();
        let mut ready = Vec::new();
        list.retain(|r| {
            if r.epoch < m {
                ready.push(*r);
                false
            } else {
                true
            }
        });
        // Freed outside the lock: a destructor may retire into this list.
        drop(list);
        for r in ready {
            // SAFETY: retired once (`retire`'s contract), and no guard can
            // reach it (module docs, the invariant).
            unsafe { (r.free)(r.ptr) };
        }
    }

    /// Objects waiting.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        lock(&self.list).len()
    }
}

impl Drop for Limbo {
    fn drop(&mut self) {
        // The owner is being dropped: no guard of it is alive.
        for r in lock(&self.list).drain(..) {
            // SAFETY: as in `collect_locked`; no guard can reach it.
            unsafe { (r.free)(r.ptr) };
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    // A panic while holding the list leaves it whole (one push or one
    // `retain`), so a poisoned lock is used.
    #[cfg(not(loom))]
    return m.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(loom)]
    return m.lock().unwrap();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::keyed::epoch::tests::retire;
    use crate::sync::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_limbo_collects_by_itself_and_frees_the_rest_when_dropped() {
        static D: Domain = Domain::new();
        let freed = Arc::new(AtomicUsize::new(0));
        let limbo = Limbo::default();
        let _pin = D.pin();
        for _ in 0..COLLECT_AT - 1 {
            retire(&limbo, &D, &freed);
        }
        assert_eq!(limbo.waiting(), COLLECT_AT - 1);
        drop(_pin);
        // Unpinned: the retirement that fills the list frees all of it.
        retire(&limbo, &D, &freed);
        assert_eq!(
            (freed.load(Ordering::SeqCst), limbo.waiting()),
            (COLLECT_AT, 0)
        );
        let _pin = D.pin();
        retire(&limbo, &D, &freed);
        drop(limbo);
        assert_eq!(freed.load(Ordering::SeqCst), COLLECT_AT + 1);
    }
}
