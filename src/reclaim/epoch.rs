//! The collector behind the per-key map's guards (`reclaim.rs`): when may
//! memory that one thread unlinked be freed, while other threads may still
//! be reading it? Epoch-based reclamation, with the reader's fence moved to
//! the collector (`barrier.rs`), so that a reader's pin and unpin are plain
//! stores: no locked instruction on a lookup.
//!
//! # Words
//! - `epoch` (one per [`Domain`]; the process has one): only increases.
//!   Every retirement bumps it by one with an `AcqRel` RMW, after its
//!   object was unlinked; the value the bump read is the object's *retire
//!   epoch* `r`.
//! - A pin slot per thread (by its thread token, `thread_id.rs`, which at
//!   most one thread holds at a time; `pins.rs`): [`INACTIVE`], or the
//!   epoch its thread read when it pinned (stored complemented, so that a
//!   zeroed slot is unpinned). Only its holder writes it, and only while
//!   it holds the token (it unpins before it exits).
//! - `anon`: the number of guards held by threads without a token (a thread
//!   tearing down its thread-locals): pins of unknown epoch.
//!
//! # Protocol
//! - **Pin** (a thread's outermost guard; inner guards only count, in
//!   `depth`, which only the holder touches): `e = epoch` (`Acquire`), store
//!   `e` in the slot (`Release`), the barrier's light half; then the
//!   guarded loads.
//! - **Unpin** (the outermost guard ends): store `INACTIVE` (`Release`).
//! - **Collect** (holding a retired list, `limbo.rs`): the heavy half, then `m =` the
//!   least pin read ([`barrier::scan`]; 0 if `anon` is not 0); free every
//!   object with `r < m` (`limbo.rs`, which says when a list collects).
//!
//! # Invariant: an object is freed only when no guard can reach it
//! A guard reaches an object only through a load made while pinned, and the
//! object was unlinked before its retirement's bump, which is before the
//! heavy half of any collect that frees it (the list's mutex orders them).
//! A thread's life is a sequence of pinned *sections*, each a pin store,
//! guarded loads, and an unpin store (`INACTIVE`, `Release`), all on its
//! own slot. Take any thread, and the value `v` a collect's scan
//! (`Acquire`, after the heavy half) read of its slot; every section of
//! the thread is before the store of `v`, is the one `v` pinned, or is
//! after it:
//! 1. **Sections before the store of `v`.** That store (a pin or an unpin)
//!    is a `Release` store sequenced after all of them, and the scan read
//!    it with `Acquire`: every load they made happens-before the free.
//!    (It must be the store itself that releases: a `Relaxed` pin after a
//!    `Release` unpin is not in the unpin's release sequence, so reading
//!    the pin would order nothing of the section before it.)
//! 2. **The section `v` pinned, `v = p > r`.** Its `Acquire` load of
//!    `epoch` read a value the retirement's bump (`Release`) or a later RMW
//!    wrote: a release sequence, so the unlink happens-before its loads. It
//!    cannot reach the object.
//! 3. **Sections after the store of `v`**, whose pin store the scan did not
//!    see: by the barrier (`barrier.rs`) that pin store did not precede the
//!    heavy half, so the section's loads follow it and see the unlink. It
//!    cannot reach the object.
//! 4. **The section `v` pinned, `v = p <= r`:** the object is not freed.
//!
//! A thread that pins after the collect is case 3. `epoch` is a `u64`
//! bumped once per retirement: it does not wrap.
//!
//! # One domain for the process
//! Every map shares the epoch and the pins (a map of its own slots would
//! cost 8 KB an instance). So, as with crossbeam-epoch's global collector,
//! a guard held long (a `take_all` whose callback blocks) delays freeing
//! what any map of the process retires meanwhile: memory waits, nothing
//! else does, and it is freed at the first collect after the guard ends.
//!
//! The retired lists, and when they collect, are `limbo.rs`.

use super::barrier;
use super::pins::{Slot, Slots};
use crate::sync::{AtomicU64, Ordering};
use crate::thread_id;
use crossbeam_utils::CachePadded;

/// A slot's value while its thread holds no guard.
pub(crate) const INACTIVE: u64 = u64::MAX;

/// The epoch, the pins and the anonymous pins (module docs).
pub struct Domain {
    epoch: CachePadded<AtomicU64>,
    anon: CachePadded<AtomicU64>,
    slots: Slots,
}

/// The process's domain, shared by every map.
#[cfg(not(loom))]
pub(crate) static DOMAIN: Domain = Domain::new();

impl Domain {
    /// A domain of its own (the process's is [`DOMAIN`]; tests and loom
    /// models make theirs).
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Domain {
        Domain {
            epoch: CachePadded::new(AtomicU64::new(0)),
            anon: CachePadded::new(AtomicU64::new(0)),
            slots: Slots::new(),
        }
    }

    /// A domain of its own, for one model.
    #[cfg(loom)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Domain {
        Domain {
            epoch: CachePadded::new(AtomicU64::new(0)),
            anon: CachePadded::new(AtomicU64::new(0)),
            slots: Slots::new(),
        }
    }
}

/// A pinned section of one thread in a [`Domain`]; not `Send`: it is its
/// thread's.
pub struct Pin<'d> {
    /// The thread's slot, or `None` for an anonymous pin.
    slot: Option<&'d Slot>,
    domain: &'d Domain,
    _not_send: std::marker::PhantomData<*mut ()>,
}

impl Domain {
    /// Pins the calling thread (module docs, "Pin").
    #[inline]
    pub fn pin(&self) -> Pin<'_> {
        let slot = self.slots.get(thread_id::current());
        match slot {
            Some(s) => {
                let d = s.depth.load(Ordering::Relaxed);
                s.depth.store(d + 1, Ordering::Relaxed);
                if d == 0 {
                    barrier::pin(&s.pin, !self.epoch.load(Ordering::Acquire));
                }
            }
            None => self.pin_anon(),
        }
        Pin {
            slot,
            domain: self,
            _not_send: std::marker::PhantomData,
        }
    }

    /// A retirement's bump, after its unlink: the object's retire epoch.
    pub(super) fn bump(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::AcqRel)
    }

    #[cold]
    fn pin_anon(&self) {
        self.anon.fetch_add(1, Ordering::SeqCst);
    }

    /// Everything retired below the returned epoch may be freed: the heavy
    /// half, then the least pin (module docs, "Collect").
    pub(super) fn safe_below(&self) -> u64 {
        if !barrier::heavy() {
            return 0;
        }
        let mut m = INACTIVE;
        self.slots.for_each(|s| m = m.min(!barrier::scan(&s.pin)));
        if barrier::scan(&self.anon) != 0 {
            m = 0;
        }
        m
    }
}

impl Drop for Pin<'_> {
    #[inline]
    fn drop(&mut self) {
        match self.slot {
            Some(s) => {
                let d = s.depth.load(Ordering::Relaxed);
                s.depth.store(d - 1, Ordering::Relaxed);
                if d == 1 {
                    s.pin.store(!INACTIVE, Ordering::Release);
                }
            }
            None => {
                self.domain.anon.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
pub(super) mod tests {
    use super::*;
    use crate::reclaim::limbo::{Limbo, COLLECT_BYTES};
    use crate::sync::AtomicUsize;
    use std::sync::{mpsc, Arc};

    /// Counts its drops.
    pub(in crate::reclaim) struct Counted(pub(in crate::reclaim) Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Retires an object that counts its drop in `freed`.
    pub(in crate::reclaim) fn retire(limbo: &Limbo, d: &Domain, freed: &Arc<AtomicUsize>) {
        let p = Box::into_raw(Box::new(Counted(freed.clone())));
        // SAFETY: never published, retired once.
        unsafe { limbo.retire(d, p, COLLECT_BYTES) };
    }

    /// A thread pinned (and holding a nested guard) until told to go.
    fn pinned_thread(
        d: &'static Domain,
        nested: bool,
    ) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (pinned_tx, pinned_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let _outer = d.pin();
            if nested {
                drop(d.pin());
            }
            pinned_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        pinned_rx.recv().unwrap();
        (go_tx, t)
    }

    #[test]
    fn an_object_waits_for_a_guard_pinned_before_it_was_retired() {
        static D: Domain = Domain::new();
        for nested in [false, true] {
            let (limbo, freed) = (Limbo::default(), Arc::new(AtomicUsize::new(0)));
            let (go, t) = pinned_thread(&D, nested);
            retire(&limbo, &D, &freed);
            limbo.collect(&D);
            assert_eq!(freed.load(Ordering::SeqCst), 0, "freed under a guard");
            assert_eq!(limbo.held(), (1, 0));
            go.send(()).unwrap();
            t.join().unwrap();
            limbo.collect(&D);
            assert_eq!(freed.load(Ordering::SeqCst), 1);
            assert_eq!(limbo.held(), (0, 0));
        }
    }

    #[test]
    fn a_guard_pinned_after_a_retirement_does_not_hold_it() {
        static D: Domain = Domain::new();
        let (limbo, freed) = (Limbo::default(), Arc::new(AtomicUsize::new(0)));
        retire(&limbo, &D, &freed);
        let (go, t) = pinned_thread(&D, false);
        limbo.collect(&D);
        assert_eq!(freed.load(Ordering::SeqCst), 1);
        go.send(()).unwrap();
        t.join().unwrap();
    }

    /// A thread-local destructor that runs after the thread gave its token
    /// back pins anonymously; while it is pinned, nothing is freed.
    #[test]
    fn a_thread_without_a_token_pins_anonymously_and_holds_every_object() {
        static D: Domain = Domain::new();
        static SEEN: AtomicU64 = AtomicU64::new(0);
        struct AtExit;
        impl Drop for AtExit {
            fn drop(&mut self) {
                let no_token = thread_id::current() == thread_id::NONE;
                let (limbo, freed) = (Limbo::default(), Arc::new(AtomicUsize::new(0)));
                let pin = D.pin();
                retire(&limbo, &D, &freed);
                limbo.collect(&D);
                let held = freed.load(Ordering::SeqCst) == 0;
                drop(pin);
                limbo.collect(&D);
                let after = freed.load(Ordering::SeqCst) == 1;
                SEEN.store(
                    u64::from(no_token) | u64::from(held) << 1 | u64::from(after) << 2,
                    Ordering::SeqCst,
                );
            }
        }
        std::thread_local!(static EXIT: AtExit = const { AtExit });
        std::thread::spawn(|| {
            // Registered before the token's holder, so destroyed after it
            // (thread-local destructors run last-registered first).
            EXIT.with(|_| ());
            drop(D.pin());
        })
        .join()
        .unwrap();
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            0b111,
            "bits: no token, held, freed after"
        );
    }

    /// Readers keep loading and checking a shared object while a writer
    /// replaces and retires it: a freed object read would show a wrong
    /// value (its destructor clears it first).
    #[test]
    fn readers_never_see_a_freed_object_under_churn() {
        static D: Domain = Domain::new();
        struct Obj(AtomicU64);
        impl Drop for Obj {
            fn drop(&mut self) {
                self.0.store(0, Ordering::Relaxed);
            }
        }
        const MAGIC: u64 = 0x5eed_cafe;
        let limbo = Limbo::default();
        let shared =
            crate::sync::AtomicPtr::new(Box::into_raw(Box::new(Obj(AtomicU64::new(MAGIC)))));
        let stop = crate::sync::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let _pin = D.pin();
                        let p = shared.load(Ordering::Acquire);
                        // SAFETY: loaded under a pin: not freed yet.
                        assert_eq!(unsafe { &*p }.0.load(Ordering::Relaxed), MAGIC);
                    }
                });
            }
            for _ in 0..crate::sized(20_000, 300) {
                let fresh = Box::into_raw(Box::new(Obj(AtomicU64::new(MAGIC))));
                let pin = D.pin();
                let old = shared.swap(fresh, Ordering::AcqRel);
                // SAFETY: unlinked by the swap, retired once.
                unsafe { limbo.retire(&D, old, COLLECT_BYTES) };
                drop(pin);
                // As an owner's next insert does: free what is ready.
                limbo.free_one();
            }
            stop.store(true, Ordering::Relaxed);
        });
        // SAFETY: the last object, never retired.
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    }
}
