//! A [`Limbo`]: one owner's retired objects (a ring's or a map's), waiting
//! until no guard can reach them (`epoch.rs`: the protocol, and why an
//! object retired at `r` may go once every pin is above `r`), then freed
//! one at a time.
//!
//! # Freed in pieces
//! An object no guard can reach is *ready*. A collect (run by a
//! retirement, which may hold a shard lock) only moves the ready objects to
//! the `ready` list; the owner frees one at the start of each insert
//! ([`Limbo::free_one`], outside every lock and before the insert does
//! anything, since freeing a table drops its keys: the caller's `Drop`). An object that owns large parts (a slice map owns a table
//! per shard) is retired with [`Limbo::retire_in_parts`]: when it is
//! freed, it hands those parts to the `ready` list ([`Parts`]) and frees
//! only the rest. So no request frees more than one table, where it used to
//! free a whole retired slice map (a few hundred thousand keys, 7.7-10.8 ms
//! on the benchmarks' Zipf stream; BENCHMARKS.md). A slice map's table is not
//! always freed: the ring may keep it for a later slice (`spares.rs`).
//!
//! # Memory held
//! - **Waiting:** fewer than [`COLLECT_AT`] objects or [`COLLECT_BYTES`]
//!   (at most [`COLLECT_MAX`] objects), plus those retired at or after the
//!   oldest pin the list's last collect saw (a retiring thread
//!   is itself pinned, so the object it has just retired waits for the
//!   next collect). An object retired in parts collects at once: the map
//!   a ring retires at one rotation is freed at the next.
//! - **Ready:** tables, and the maps that held them. Each was made on the
//!   way to an insert (a shard's first table, a move to a bigger one, a
//!   new slice's map), and each insert frees one ready object, so they are
//!   freed about as fast as they are made (a sweep's rebuild also makes a
//!   table). While nothing is inserted they wait.
//!
//! The owner frees everything left when it is dropped: it then has no guard.
//!
//! # Invariants
//! 1. An object is freed once: taken out of the lists under their mutex,
//!    then freed outside it (a destructor may retire into the same list).
//!    If its destructor panics (a key's `Drop`), the parts it handed over
//!    go back to the ready list and the panic goes on.
//! 2. It is freed only when its retire epoch is below what
//!    [`Domain::safe_below`] returned after it was in the list; a part is
//!    freed only after the object that owned it was, which was ready: no
//!    guard can reach it either.
//!
//! What a list holds, and an object's parts, are `retired.rs`.

use super::epoch::Domain;
use super::retired::{free_box, free_in_parts, Free, Retired};
// Public for the loom models, which name them from here (`__loom_epoch`).
pub use super::retired::{InParts, Parts};
use crate::sync::{lock_whole as lock, AtomicUsize, Mutex, Ordering};

/// A [`Limbo`] collects when it holds this many objects of at least
/// [`COLLECT_BYTES`] in all, or [`COLLECT_MAX`] objects: each collect is a
/// system call that interrupts every CPU running a thread of ours
/// (`barrier.rs`), so it is amortized over several retirements; and little
/// memory waits (a retired table can be megabytes). One under loom, so
/// that a model collects on every retirement.
#[cfg(not(loom))]
pub(crate) const COLLECT_AT: usize = 4;
#[cfg(loom)]
pub(crate) const COLLECT_AT: usize = 1;

/// The bytes [`COLLECT_AT`] objects must hold for a collect: small tables
/// (a map's first tables, replaced as they grow) wait for more company. A
/// map with every shard growing from one group retires about 2,000 tables
/// on its way to 1M keys: collecting every fourth made 685 `membarrier`
/// calls in `keyed_tail`'s warm-up, each interrupting every CPU that runs
/// one of our threads; with this threshold, 130 (BENCHMARKS.md).
/// (Under loom `COLLECT_AT` is 1, and a list of one collects at once.)
pub(crate) const COLLECT_BYTES: usize = 1 << 20;

/// A [`Limbo`] collects when it holds this many objects, whatever their
/// size.
pub(crate) const COLLECT_MAX: usize = 64;

/// The retired objects of one owner: waiting for the pins, and ready.
#[derive(Default)]
struct Lists {
    waiting: Vec<Retired>,
    /// Bytes the waiting objects hold.
    waiting_bytes: usize,
    ready: Vec<Retired>,
}

/// One owner's retired objects (module docs).
#[derive(Default)]
pub struct Limbo {
    /// Locked poisoned or not (`lock_whole`): a panic while holding it
    /// leaves the lists whole (one push, `retain` or pop).
    lists: Mutex<Lists>,
    /// `lists.ready.len()`, written under the mutex: lets
    /// [`free_one`](Self::free_one) return without taking it.
    ready: AtomicUsize,
}

impl Limbo {
    /// Retires `ptr`, which holds `bytes`: it is freed whole once no guard
    /// pinned in `domain` can reach it. Collects if the list is long enough.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is unlinked (no guard pinned from
    /// now on can load it), and is handed over exactly once; the caller
    /// holds a pin of `domain` or none.
    pub unsafe fn retire<T: Send + 'static>(&self, domain: &Domain, ptr: *mut T, bytes: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.push(domain, ptr.cast(), free_box::<T>, bytes, COLLECT_AT) }
    }

    /// [`retire`](Self::retire) for an object freed in parts: once no guard
    /// can reach it, its [`InParts::take_parts`] hands its parts to the
    /// ready list, which frees them one at a time.
    ///
    /// # Safety
    /// As [`retire`](Self::retire).
    pub unsafe fn retire_in_parts<T: InParts>(&self, domain: &Domain, ptr: *mut T) {
        // SAFETY: the caller's contract.
        unsafe { self.push(domain, ptr.cast(), free_in_parts::<T>, 0, 1) }
    }

    /// Retires, and collects if `collect_at` objects wait holding
    /// [`COLLECT_BYTES`] (or [`COLLECT_MAX`] objects): `collect_at` is
    /// [`COLLECT_AT`], or 1 for an object in parts (a slice map: large,
    /// and retired once a slice, so it should not wait for three more).
    ///
    /// # Safety
    /// As [`retire`](Self::retire), `free` being the pointee's.
    unsafe fn push(
        &self,
        domain: &Domain,
        ptr: *mut (),
        free: Free,
        bytes: usize,
        collect_at: usize,
    ) {
        let epoch = domain.bump();
        let mut lists = lock(&self.lists);
        lists.waiting.push(Retired {
            ptr,
            free,
            epoch,
            bytes,
        });
        lists.waiting_bytes += bytes;
        let n = lists.waiting.len();
        if collect_at == 1
            || (n >= collect_at && lists.waiting_bytes >= COLLECT_BYTES)
            || n >= COLLECT_MAX
        {
            self.promote(domain, &mut lists);
        }
    }

    /// Frees one ready object, if any (called at the start of each
    /// insert, outside every lock; one load when there is none).
    #[inline]
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn free_one(&self) {
        if self.ready.load(Ordering::Relaxed) != 0 {
            self.free_ready(1);
        }
    }

    /// Frees every object no guard can reach any more.
    #[cfg(any(loom, test))]
    pub fn collect(&self, domain: &Domain) {
        self.promote(domain, &mut lock(&self.lists));
        self.free_ready(usize::MAX);
    }

    /// Moves the objects no guard can reach to the ready list.
    fn promote(&self, domain: &Domain, lists: &mut Lists) {
        let m = domain.safe_below();
        let Lists {
            waiting,
            waiting_bytes,
            ready,
        } = lists;
        waiting.retain(|r| {
            if r.epoch < m {
                *waiting_bytes -= r.bytes;
                ready.push(*r);
                false
            } else {
                true
            }
        });
        self.ready.store(ready.len(), Ordering::Relaxed);
    }

    /// Frees up to `n` ready objects, each outside the mutex (a destructor
    /// may retire into this limbo); the parts they hand over join the
    /// ready list.
    fn free_ready(&self, n: usize) {
        let mut parts = Parts::default();
        for _ in 0..n {
            let next = {
                let mut lists = lock(&self.lists);
                lists.ready.append(&mut parts.0);
                let next = lists.ready.pop();
                self.ready.store(lists.ready.len(), Ordering::Relaxed);
                next
            };
            let Some(r) = next else { return };
            // The parts an object handed over before its destructor
            // panicked (a key's `Drop`) stay ready: `parts` goes back to the
            // list as the panic passes.
            let keep = KeepParts(self, &mut parts);
            // SAFETY: retired once and taken out of the lists once
            // (invariant 1); ready, so no guard can reach it (invariant 2).
            unsafe { (r.free)(r.ptr, keep.1) };
            std::mem::forget(keep);
        }
        if !parts.0.is_empty() {
            let mut lists = lock(&self.lists);
            lists.ready.append(&mut parts.0);
            self.ready.store(lists.ready.len(), Ordering::Relaxed);
        }
    }

    /// Objects waiting for the pins, and ready.
    #[cfg(test)]
    pub fn held(&self) -> (usize, usize) {
        let lists = lock(&self.lists);
        (lists.waiting.len(), lists.ready.len())
    }
}

/// Hands the parts a freed object gave back to the ready list if the
/// object's destructor unwinds (`Limbo::free_ready`).
struct KeepParts<'a>(&'a Limbo, &'a mut Parts);

impl Drop for KeepParts<'_> {
    fn drop(&mut self) {
        let mut lists = lock(&self.0.lists);
        lists.ready.append(&mut self.1 .0);
        self.0.ready.store(lists.ready.len(), Ordering::Relaxed);
    }
}

impl Drop for Limbo {
    fn drop(&mut self) {
        // The owner is being dropped: no guard of it is alive, so every
        // object is ready, and `Parts` frees what it holds when dropped.
        let mut lists = lock(&self.lists);
        let mut all = Parts(std::mem::take(&mut lists.waiting));
        all.0.append(&mut lists.ready);
        drop(lists);
        drop(all);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::epoch::tests::{retire, Counted};
    use std::sync::Arc;

    #[test]
    fn a_limbo_collects_by_itself_frees_one_an_insert_and_the_rest_when_dropped() {
        static D: Domain = Domain::new();
        let freed = Arc::new(AtomicUsize::new(0));
        let count = || freed.load(Ordering::SeqCst);
        let limbo = Limbo::default();
        let _pin = D.pin();
        for _ in 0..COLLECT_AT - 1 {
            retire(&limbo, &D, &freed);
        }
        assert_eq!(limbo.held(), (COLLECT_AT - 1, 0));
        drop(_pin);
        // Unpinned: the retirement that fills the list makes all of it
        // ready, and frees none.
        retire(&limbo, &D, &freed);
        assert_eq!((count(), limbo.held()), (0, (0, COLLECT_AT)));
        // Each insert frees one; with none ready, nothing happens.
        for n in 1..=COLLECT_AT + 1 {
            limbo.free_one();
            assert_eq!(count(), n.min(COLLECT_AT));
        }
        assert_eq!(limbo.held(), (0, 0));
        let _pin = D.pin();
        retire(&limbo, &D, &freed);
        drop(limbo);
        assert_eq!(count(), COLLECT_AT + 1);
    }

    #[test]
    fn small_objects_wait_for_more_bytes_or_more_company() {
        static D: Domain = Domain::new();
        let freed = Arc::new(AtomicUsize::new(0));
        let small = |limbo: &Limbo, bytes: usize| {
            let p = Box::into_raw(Box::new(Counted(freed.clone())));
            // SAFETY: never published, retired once.
            unsafe { limbo.retire(&D, p, bytes) };
        };
        // Tiny objects: no collect until `COLLECT_MAX` wait.
        let limbo = Limbo::default();
        for n in 1..COLLECT_MAX {
            small(&limbo, 16);
            assert_eq!(limbo.held(), (n, 0));
        }
        small(&limbo, 16);
        assert_eq!(limbo.held(), (0, COLLECT_MAX));
        // `COLLECT_AT` objects holding `COLLECT_BYTES` between them collect.
        let limbo = Limbo::default();
        for n in 1..COLLECT_AT {
            small(&limbo, COLLECT_BYTES / COLLECT_AT);
            assert_eq!(limbo.held(), (n, 0));
        }
        small(&limbo, COLLECT_BYTES / COLLECT_AT);
        assert_eq!(limbo.held(), (0, COLLECT_AT));
    }

    /// Owns `n` parts, each counting its drop in `parts`; counts its own
    /// drop in `shell`.
    struct Owner {
        // Boxed: each part is its own allocation, as a table is.
        #[allow(clippy::vec_box)]
        parts: Vec<Box<Counted>>,
        _shell: Counted,
    }

    impl InParts for Owner {
        fn take_parts(&mut self, parts: &mut Parts) {
            for p in self.parts.drain(..) {
                parts.push(p);
            }
        }
    }

    fn owner(n: usize, parts: &Arc<AtomicUsize>, shell: &Arc<AtomicUsize>) -> *mut Owner {
        Box::into_raw(Box::new(Owner {
            parts: (0..n).map(|_| Box::new(Counted(parts.clone()))).collect(),
            _shell: Counted(shell.clone()),
        }))
    }

    #[test]
    fn an_object_retired_in_parts_collects_at_once_and_frees_one_part_at_a_time() {
        static D: Domain = Domain::new();
        let (parts, shell) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let count = || (shell.load(Ordering::SeqCst), parts.load(Ordering::SeqCst));
        let limbo = Limbo::default();
        // Retired by a pinned thread, as a ring retires: it waits.
        let pin = D.pin();
        // SAFETY: never published, retired once.
        unsafe { limbo.retire_in_parts(&D, owner(5, &parts, &shell)) };
        assert_eq!((count(), limbo.held()), ((0, 0), (1, 0)));
        drop(pin);
        // The next one collects at once (not at `COLLECT_AT`): the first
        // owner is ready; the next insert frees it, and its parts wait,
        // ready.
        let pin = D.pin();
        // SAFETY: as above.
        unsafe { limbo.retire_in_parts(&D, owner(3, &parts, &shell)) };
        drop(pin);
        assert_eq!((count(), limbo.held()), ((0, 0), (1, 1)));
        limbo.free_one();
        assert_eq!((count(), limbo.held()), ((1, 0), (1, 5)));
        // Each insert frees one part.
        for n in 1..=4 {
            limbo.free_one();
            assert_eq!((count(), limbo.held()), ((1, n), (1, 5 - n)));
        }
        // The second owner, freed whole when the limbo is dropped, with
        // the part left of the first.
        drop(limbo);
        assert_eq!(count(), (2, 8));
    }
}
