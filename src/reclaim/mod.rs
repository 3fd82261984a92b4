//! Memory reclamation for the per-key map: when may a table or a key's
//! window, unlinked by one thread, be freed while other threads may still
//! be reading it?
//!
//! Lookups take no lock, so a reader can hold a reference into a table
//! (or a key's out-of-line window) that a writer has just replaced or
//! unlinked. Every operation on the map runs inside a [`Guard`]; a writer
//! that unlinks memory hands it to [`Guard::defer_free`], and it is freed
//! only once every guard that could have seen it has been dropped.
//!
//! The collector is ours (`epoch.rs`, the protocol and why it is safe;
//! `pins.rs`, the per-thread slots; `barrier.rs`, the fences; `limbo.rs`,
//! the retired lists): a guard's
//! pin and unpin are plain stores, and the rare collecting thread pays a
//! process-wide barrier (`membarrier` on Linux). It replaced `seize`,
//! whose guard ends with an `xchg`: one locked instruction per lookup,
//! about 5 ns of a 23 ns request on one hot key (IMPLEMENTATION.md, "The
//! collector"). The epoch pin of crossbeam-epoch is a locked instruction
//! too.
//!
//! Under `--cfg loom` the maps' models run without a collector: guards are
//! empty and deferred frees are kept in a list that the owner frees when it
//! is dropped (a model is a handful of operations, so nothing needs
//! reclaiming earlier). The collector has its own model
//! (`loom-tests/tests/reclaim.rs`).

mod barrier;
#[cfg(not(loom))]
pub(crate) mod epoch;
/// Loom models only: the collector, driven directly.
#[cfg(loom)]
pub mod epoch;
#[cfg(not(loom))]
mod limbo;
/// Loom models only: the retired lists, driven directly.
#[cfg(loom)]
pub mod limbo;
mod pins;
mod retired;

pub(crate) use self::retired::{InParts, Parts};

#[cfg(not(loom))]
use self::epoch::{Pin, DOMAIN};
#[cfg(not(loom))]
use self::limbo::Limbo;

/// A pinned section: memory unlinked while it is alive is not freed.
pub(crate) struct Guard<'a> {
    #[cfg(not(loom))]
    _pin: Pin<'static>,
    _map: std::marker::PhantomData<&'a Graveyard>,
}

/// A raw pointer kept for a deferred free (loom); `Send` because the
/// pointee is only ever freed (by its destructor), never used, and every
/// pointee type is `Send`.
#[cfg(loom)]
struct SendPtr<T>(*mut T);
// SAFETY: see the type's docs; `T: Send` is required where it is built.
#[cfg(loom)]
unsafe impl<T: Send> Send for SendPtr<T> {}

impl<'a> Guard<'a> {
    /// Pins the current thread against `graveyard`'s collector.
    #[inline]
    pub(crate) fn pin(graveyard: &'a Graveyard) -> Guard<'a> {
        let _ = graveyard;
        Guard {
            #[cfg(not(loom))]
            _pin: DOMAIN.pin(),
            _map: std::marker::PhantomData,
        }
    }

    /// Frees `ptr` (from `Box::into_raw`; it holds `bytes`, which set how
    /// soon its list collects) once no guard alive now, or pinned before
    /// this call, can still reach it.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, has been unlinked so that no guard
    /// pinned after this call can reach it, and is handed over exactly once.
    pub(crate) unsafe fn defer_free<T: Send + 'static>(
        &self,
        ptr: *mut T,
        bytes: usize,
        graveyard: &Graveyard,
    ) {
        #[cfg(not(loom))]
        // SAFETY: the caller's contract; this thread holds a pin of `DOMAIN`.
        unsafe {
            graveyard.limbo.retire(&DOMAIN, ptr, bytes)
        };
        #[cfg(loom)]
        let _ = bytes;
        #[cfg(loom)]
        graveyard.keep(SendPtr(ptr));
    }

    /// [`defer_free`](Self::defer_free) for an object that frees its large
    /// parts a piece at a time (`limbo.rs`, "Freed in pieces").
    ///
    /// # Safety
    /// As [`defer_free`](Self::defer_free).
    pub(crate) unsafe fn defer_free_in_parts<T: InParts>(
        &self,
        ptr: *mut T,
        graveyard: &Graveyard,
    ) {
        #[cfg(not(loom))]
        // SAFETY: the caller's contract; this thread holds a pin of `DOMAIN`.
        unsafe {
            graveyard.limbo.retire_in_parts(&DOMAIN, ptr)
        };
        #[cfg(loom)]
        graveyard.keep_in_parts(SendPtr(ptr));
    }
}

/// Where a map's deferred frees wait: its [`Limbo`] (`epoch.rs`), or under
/// loom a list freed with the map (see the module docs).
#[cfg_attr(loom, derive(Default))]
pub(crate) struct Graveyard {
    #[cfg(not(loom))]
    limbo: Limbo,
    #[cfg(loom)]
    dead: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

#[cfg(not(loom))]
impl Default for Graveyard {
    fn default() -> Graveyard {
        barrier::init();
        Graveyard {
            limbo: Limbo::default(),
        }
    }
}

impl Graveyard {
    /// Frees one object that no guard can reach, if any is waiting: the
    /// map calls it after each insert, outside the shard lock (`limbo.rs`).
    /// Nothing under loom, where frees wait for the owner's drop.
    #[inline]
    pub(crate) fn free_one(&self) {
        #[cfg(not(loom))]
        self.limbo.free_one();
    }

    /// As `keep`, through the object's parts, as the collector frees it.
    #[cfg(loom)]
    fn keep_in_parts<T: InParts>(&self, p: SendPtr<T>) {
        self.dead.lock().unwrap().push(Box::new(move || {
            let p = p;
            // SAFETY: freed once, when the owner is dropped (no guard left).
            let mut b = unsafe { Box::from_raw(p.0) };
            let mut parts = Parts::default();
            b.take_parts(&mut parts);
            drop(b);
            drop(parts);
        }));
    }

    #[cfg(loom)]
    fn keep<T: Send + 'static>(&self, p: SendPtr<T>) {
        self.dead.lock().unwrap().push(Box::new(move || {
            let p = p;
            // SAFETY: freed once, when the owner is dropped (no guard left).
            drop(unsafe { Box::from_raw(p.0) });
        }));
    }
}

#[cfg(loom)]
impl Drop for Graveyard {
    fn drop(&mut self) {
        for f in self.dead.get_mut().unwrap().drain(..) {
            f();
        }
    }
}
