//! The per-key map's collector (`src/reclaim/epoch.rs`, `barrier.rs`): a
//! reader that loads a pointer while pinned never reads an object after a
//! writer that swapped it out has freed it.
//!
//! An object's payload is a loom `UnsafeCell`, read by readers and written
//! by its destructor: loom reports a free that is not ordered after every
//! read of it. Under loom the barrier's two halves are RMWs on the pin
//! (`barrier.rs`, "Strategies"); the collector collects on every
//! retirement (`COLLECT_AT` is 1).
//!
//! Mutations of the real code each model was checked against (each fails):
//! - `collect` frees `r <= m` instead of `r < m`;
//! - the pin is a plain store (no light half) or the scan a plain load (no
//!   heavy half);
//! - the pin reads `epoch` with `Relaxed`, or a retirement bumps it with
//!   `Relaxed`;
//! - the unpin stores with `Relaxed`;
//! - a nested guard's end unpins (`a_nested_guard_keeps_its_thread_pinned`);
//! - an object retired in parts hands its parts over when it is retired,
//!   not when it is freed (`a_part_outlives_every_guard_that_reached_its_owner`).
//!
//! The counter-example: the same protocol with plain stores and loads
//! for the pin and the scan, no barrier (a reader's pin store is not yet
//! seen by the scan while its load of the pointer reads the old value).
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount::__loom_epoch::{Domain, InParts, Limbo, Parts};
use stripecount_loom_tests::{expect_failure, model};

/// A retired object: its destructor writes the payload.
struct Obj(UnsafeCell<u64>);

impl Obj {
    fn boxed(v: u64) -> *mut Obj {
        Box::into_raw(Box::new(Obj(UnsafeCell::new(v))))
    }

    /// Reads the payload (`p` is live while the caller's guard is).
    fn read(p: *mut Obj) -> u64 {
        // SAFETY: the collector keeps `p` allocated while the reader is
        // pinned; a free that races the read is what loom reports.
        unsafe { (*p).0.with(|v| *v) }
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.0.with_mut(|v| unsafe { *v = 0 });
    }
}

/// A model's collector, its retired list and the shared pointer (to an
/// object holding 1).
fn setup() -> (Arc<Domain>, Arc<Limbo>, Arc<AtomicPtr<Obj>>) {
    (
        Arc::new(Domain::new()),
        Arc::new(Limbo::default()),
        Arc::new(AtomicPtr::new(Obj::boxed(1))),
    )
}

/// One reader, one writer that swaps the object out and retires it
/// (collecting at once, unpinned).
#[test]
fn a_retired_object_outlives_every_guard_that_loaded_it() {
    model(|| {
        let (domain, limbo, shared) = setup();
        let reader = {
            let (domain, shared) = (domain.clone(), shared.clone());
            thread::spawn(move || {
                let _pin = domain.pin();
                let v = Obj::read(shared.load(Ordering::Acquire));
                assert!(v == 1 || v == 2, "read a freed object");
            })
        };
        let old = shared.swap(Obj::boxed(2), Ordering::AcqRel);
        // SAFETY: unlinked by the swap, retired once.
        unsafe { limbo.retire(&domain, old, 0) };
        reader.join().unwrap();
        limbo.collect(&domain);
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    });
}

/// As the map retires: the writer is pinned (its own collect cannot free
/// what it just retired), and the reader nests a second guard inside the
/// first, whose end must not unpin it.
#[test]
fn a_nested_guard_keeps_its_thread_pinned() {
    model(|| {
        let (domain, limbo, shared) = setup();
        let reader = {
            let (domain, shared) = (domain.clone(), shared.clone());
            thread::spawn(move || {
                let _outer = domain.pin();
                let p = shared.load(Ordering::Acquire);
                drop(domain.pin());
                assert_ne!(Obj::read(p), 0, "read a freed object");
            })
        };
        {
            let _pin = domain.pin();
            let old = shared.swap(Obj::boxed(2), Ordering::AcqRel);
            // SAFETY: unlinked by the swap, retired once.
            unsafe { limbo.retire(&domain, old, 0) };
        }
        limbo.collect(&domain);
        reader.join().unwrap();
        limbo.collect(&domain);
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    });
}

/// The naive collector: pin with a plain store, scan with a plain load.
#[test]
fn a_collector_without_the_barrier_is_caught() {
    expect_failure("epoch reclamation without the store-load barrier", || {
        let epoch = Arc::new(AtomicU64::new(0));
        let pin = Arc::new(AtomicU64::new(u64::MAX));
        let shared = Arc::new(AtomicPtr::new(Obj::boxed(1)));
        let reader = {
            let (epoch, pin, shared) = (epoch.clone(), pin.clone(), shared.clone());
            thread::spawn(move || {
                pin.store(epoch.load(Ordering::Acquire), Ordering::Release);
                let v = Obj::read(shared.load(Ordering::Acquire));
                pin.store(u64::MAX, Ordering::Release);
                assert!(v == 1 || v == 2);
            })
        };
        let old = shared.swap(Obj::boxed(2), Ordering::AcqRel);
        let r = epoch.fetch_add(1, Ordering::AcqRel);
        if r < pin.load(Ordering::Acquire) {
            drop(unsafe { Box::from_raw(old) });
        } else {
            reader.join().unwrap();
            drop(unsafe { Box::from_raw(old) });
            drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
            return;
        }
        reader.join().unwrap();
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    });
}

/// Two retirements, and a reader that pins twice: a second pinned section
/// must not be treated as the first (its pin is newer), and neither may
/// read an object freed under it.
#[test]
fn a_reader_pinning_again_is_judged_by_its_new_pin() {
    model(|| {
        let (domain, limbo, shared) = setup();
        let reader = {
            let (domain, shared) = (domain.clone(), shared.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    let _pin = domain.pin();
                    let v = Obj::read(shared.load(Ordering::Acquire));
                    assert!((1..=3).contains(&v), "read a freed object");
                }
            })
        };
        for next in [2, 3] {
            let old = shared.swap(Obj::boxed(next), Ordering::AcqRel);
            // SAFETY: unlinked by the swap, retired once.
            unsafe { limbo.retire(&domain, old, 0) };
        }
        reader.join().unwrap();
        limbo.collect(&domain);
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    });
}

/// An object that owns a part, as a slice map owns its tables.
struct Owner {
    own: Obj,
    part: Option<Box<Obj>>,
}

impl Owner {
    fn boxed(v: u64) -> *mut Owner {
        Box::into_raw(Box::new(Owner {
            own: Obj(UnsafeCell::new(v)),
            part: Some(Box::new(Obj(UnsafeCell::new(v)))),
        }))
    }
}

impl InParts for Owner {
    fn take_parts(&mut self, parts: &mut Parts) {
        if let Some(p) = self.part.take() {
            parts.push(p);
        }
    }
}

/// Retired in parts (`limbo.rs`, "Freed in pieces"): the collector frees
/// the owner, then its part as a ready object of its own; a reader that
/// reached the part through the owner still reads both.
#[test]
fn a_part_outlives_every_guard_that_reached_its_owner() {
    model(|| {
        let (domain, limbo) = (Arc::new(Domain::new()), Arc::new(Limbo::default()));
        let shared = Arc::new(AtomicPtr::new(Owner::boxed(1)));
        let reader = {
            let (domain, shared) = (domain.clone(), shared.clone());
            thread::spawn(move || {
                let _pin = domain.pin();
                let o = shared.load(Ordering::Acquire);
                // SAFETY: pinned: the collector keeps the owner and its
                // part allocated (what loom checks).
                let (own, part) = unsafe {
                    let part: *const Obj = &**(*o).part.as_ref().unwrap();
                    ((*o).own.0.with(|v| *v), (*part).0.with(|v| *v))
                };
                assert!(own == part && (own == 1 || own == 2), "read a freed object");
            })
        };
        let old = shared.swap(Owner::boxed(2), Ordering::AcqRel);
        // SAFETY: unlinked by the swap, retired once.
        unsafe { limbo.retire_in_parts(&domain, old) };
        reader.join().unwrap();
        limbo.collect(&domain);
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    });
}
