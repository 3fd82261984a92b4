//! The release-sequence rule behind the collector's pin
//! (`src/reclaim/barrier.rs`, `pin`; `src/reclaim/epoch.rs`, case 1): a
//! collect that reads a reader's *newer* pin must also be ordered after
//! every load of the reader's previous pinned section. The unpin that
//! ended that section is a `Release` store, but a later store of the same
//! thread is not in its release sequence (C++20 [intro.races]: a release
//! sequence continues only through read-modify-writes), so a `Relaxed`
//! re-pin orders nothing of the section before it, and a collector that
//! reads it may free an object the section loaded and is still reading
//! (in the order the collector sees). The pin must itself release.
//!
//! The protocol is written out here, with the barrier of the fence
//! strategy (`barrier.rs`, "Elsewhere": a `SeqCst` fence after the pin
//! store and before the scan), because the real code cannot show the
//! rule under loom: there the pin is a swap, and a read-modify-write is
//! in the release sequence of the store it reads whatever its ordering.
//! Loom models both halves of the rule (loom 0.7, `src/rt/atomic.rs`): a
//! plain store starts a fresh synchronization point holding only the
//! thread's last release fence (`Atomic::store` passes
//! `Synchronize::new()`), while an RMW stores the synchronization point of
//! the store it read (`State::rmw`: "our (hacky) way to establish a
//! release sequence"). Its `SeqCst` fences are stronger than C++'s (each
//! joins the clocks of every earlier one), which can only hide a race,
//! not invent one.
//!
//! The object's payload is a loom `UnsafeCell`, read by the reader and
//! written by its destructor: loom reports a free that is not ordered
//! after the read. The pin the real code stores outside loom (`Release`,
//! then the barrier) is out of loom's reach; Miri's data-race detector
//! runs it, in `readers_never_see_a_freed_object_under_churn` (`epoch.rs`),
//! which reports a `Relaxed` pin under some schedules only (one seed of
//! `-Zmiri-many-seeds=0..16` in one run): `scripts/miri.sh` runs it over
//! those sixteen seeds, and this model checks the rule on every schedule.
//!
//! Models: the `Relaxed` re-pin, caught (loom's counter-example: the
//! reader's first section loads the old object, it re-pins at the newer
//! epoch with a `Relaxed` store, and the collector reads that pin and
//! frees the object while the first section's read is unordered with the
//! free); the `Release` re-pin, which passes; and the re-pin by an RMW,
//! which passes even when `Relaxed`, as the loom build's pin does.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use stripecount_loom_tests::{expect_failure, model};

/// A pin slot's value while its thread holds no guard.
const INACTIVE: u64 = u64::MAX;

/// An object a writer swaps out: its destructor writes the payload.
struct Obj(UnsafeCell<u64>);

impl Obj {
    fn boxed(v: u64) -> *mut Obj {
        Box::into_raw(Box::new(Obj(UnsafeCell::new(v))))
    }

    /// Reads the payload.
    fn read(p: *mut Obj) -> u64 {
        // SAFETY: the protocol keeps `p` allocated while the reader is
        // pinned; a free that races the read is what loom reports.
        unsafe { (*p).0.with(|v| *v) }
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.0.with_mut(|v| unsafe { *v = 0 });
    }
}

/// How the reader pins its second section.
#[derive(Clone, Copy)]
enum RePin {
    Store(Ordering),
    Swap(Ordering),
}

/// One reader with two pinned sections, the second pinned with `re_pin`
/// and loading nothing; one writer that swaps the object out, bumps the
/// epoch, runs its half of the barrier, reads the pin, and frees the old
/// object if the pin is newer than its retire epoch (or inactive). Both
/// run on spawned threads: the main thread only spawns and joins, so the
/// counter-example (the writer between its bump and its fence while the
/// reader runs both sections up to the re-pin) takes two preemptions.
fn two_sections_and_a_collect(re_pin: RePin) {
    let epoch = Arc::new(AtomicU64::new(0));
    let pin = Arc::new(AtomicU64::new(INACTIVE));
    let shared = Arc::new(AtomicPtr::new(Obj::boxed(1)));
    let reader = {
        let (epoch, pin, shared) = (epoch.clone(), pin.clone(), shared.clone());
        thread::spawn(move || {
            // Section 1: pin, load the object, read it, unpin.
            pin.store(epoch.load(Ordering::Acquire), Ordering::Release);
            fence(Ordering::SeqCst);
            let v = Obj::read(shared.load(Ordering::Acquire));
            assert!(v == 1 || v == 2, "read a freed object");
            pin.store(INACTIVE, Ordering::Release);
            // Section 2, at the epoch now read.
            let e = epoch.load(Ordering::Acquire);
            match re_pin {
                RePin::Store(o) => pin.store(e, o),
                RePin::Swap(o) => drop(pin.swap(e, o)),
            }
            fence(Ordering::SeqCst);
            pin.store(INACTIVE, Ordering::Release);
        })
    };
    let writer = {
        let (epoch, pin, shared) = (epoch.clone(), pin.clone(), shared.clone());
        thread::spawn(move || {
            let old = shared.swap(Obj::boxed(2), Ordering::AcqRel);
            let r = epoch.fetch_add(1, Ordering::AcqRel);
            fence(Ordering::SeqCst);
            if pin.load(Ordering::Acquire) > r {
                // SAFETY: unlinked by the swap; freed once.
                drop(unsafe { Box::from_raw(old) });
                None
            } else {
                Some(old as usize)
            }
        })
    };
    let kept = writer.join().unwrap();
    reader.join().unwrap();
    if let Some(old) = kept {
        // SAFETY: as above; the reader is gone.
        drop(unsafe { Box::from_raw(old as *mut Obj) });
    }
    // SAFETY: the last object, never retired.
    drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
}

/// The `Relaxed` re-pin: loom finds the collect that reads it and frees
/// the object the first section is reading.
#[test]
fn a_relaxed_re_pin_is_caught() {
    expect_failure("a re-pin with a Relaxed store", || {
        two_sections_and_a_collect(RePin::Store(Ordering::Relaxed))
    });
}

/// The pin the real code stores outside loom: `Release`.
#[test]
fn a_release_re_pin_orders_the_section_before_it() {
    model(|| two_sections_and_a_collect(RePin::Store(Ordering::Release)));
}

/// A re-pin by an RMW (the loom build's pin is a swap) is in the unpin's
/// release sequence even when `Relaxed`: why this rule needs the
/// hand-written protocol to be seen under loom.
#[test]
fn a_re_pin_by_an_rmw_continues_the_unpins_release_sequence() {
    model(|| two_sections_and_a_collect(RePin::Swap(Ordering::Relaxed)));
}
