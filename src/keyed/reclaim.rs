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
//! The collector is `seize`'s, one per map ([`Graveyard`]). Its readers
//! announce themselves with a plain store and a compiler fence; on Linux
//! the rare reclaiming thread pays a process-wide barrier (`membarrier`)
//! instead, and elsewhere seize falls back to a `SeqCst` store. The epoch
//! pin of crossbeam-epoch is a locked instruction on every lookup, which
//! serializes an add's memory accesses with the next add's: on the issue-10
//! Zipf stream it measured about 20% slower (IMPLEMENTATION.md).
//!
//! Under `--cfg loom` there is no collector (crossbeam-epoch is not built
//! for loom models): guards are empty and deferred frees are kept in a list
//! that the owner frees when it is dropped (a model is a handful of
//! operations, so nothing needs reclaiming earlier).

/// A pinned section: memory unlinked while it is alive is not freed.
pub(crate) struct Guard<'a> {
    #[cfg(not(loom))]
    inner: seize::LocalGuard<'a>,
    #[cfg(loom)]
    _map: std::marker::PhantomData<&'a ()>,
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
        #[cfg(loom)]
        let _ = graveyard;
        Guard {
            #[cfg(not(loom))]
            inner: graveyard.collector.enter(),
            #[cfg(loom)]
            _map: std::marker::PhantomData,
        }
    }

    /// Frees `ptr` (from `Box::into_raw`) once no guard alive now, or
    /// pinned before this call, can still reach it.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, has been unlinked so that no guard
    /// pinned after this call can reach it, and is handed over exactly once.
    pub(crate) unsafe fn defer_free<T: Send + 'static>(&self, ptr: *mut T, graveyard: &Graveyard) {
        #[cfg(not(loom))]
        {
            use seize::Guard as _;
            let _ = graveyard;
            // SAFETY: the caller's contract.
            unsafe { self.inner.defer_retire(ptr, seize::reclaim::boxed) };
        }
        #[cfg(loom)]
        graveyard.keep(SendPtr(ptr));
    }
}

/// Where deferred frees wait under loom (see the module docs); empty
/// otherwise.
#[derive(Default)]
pub(crate) struct Graveyard {
    #[cfg(not(loom))]
    collector: seize::Collector,
    #[cfg(loom)]
    dead: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl Graveyard {
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
