//! Memory reclamation: when may memory that one thread unlinked (a
//! replaced table, a retired slice map) be freed while other threads may
//! still be reading it? The map (`crate::map`) and the per-key windows
//! (`crate::keyed`) use this module and nothing of its insides.
//!
//! Lookups take no lock, so a reader can hold a reference into a table
//! that a writer has just replaced. Every operation runs inside a
//! [`Guard`], pinned on its owner's [`Graveyard`]; a writer that unlinks
//! memory hands it to [`Guard::defer_free`], and it is freed only once
//! every guard that could have seen it has ended.
//!
//! # Where each part lives
//! - `epoch.rs`: the protocol (pins, retire epochs, collects) and the
//!   proof that nothing is freed while a guard can reach it.
//! - `pins.rs`: the per-thread pin slots. `barrier.rs`: the two halves of
//!   the store-load fence between a pin and a collect.
//! - `limbo.rs`: one owner's retired objects, freed a piece at a time;
//!   `retired.rs`: a retired object and the parts it hands over.
//!
//! # Axiom: what `membarrier` guarantees
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` returns only after
//! every CPU running a thread of this process has executed a full memory
//! barrier (a thread not running passed one at its context switch;
//! membarrier(2), "the kernel ensures that all running threads of the
//! calling process have passed through a state where all memory accesses
//! to user-space addresses match program order"). The collector takes
//! this as given: for each reader, either its pin store is visible to the
//! scan that follows the call, or the reader's later loads see every
//! store the collector made before it. The C++/Rust memory model has no
//! such operation; loom stands in for it with an RMW on the pin from both
//! sides (`barrier.rs`), whose modification order gives exactly that
//! either-or, and Miri, which cannot make the system call, runs the
//! `SeqCst`-fence strategy that needs no axiom.
//!
//! # Why a collector of our own
//! A guard is taken on every add, so its cost is the add's: `seize`'s
//! guard ends with an `xchg` and crossbeam-epoch's pin is a `SeqCst` RMW,
//! a locked instruction on every lookup. Here a pin and an unpin are
//! plain stores, and the rare collecting thread pays the process-wide
//! barrier. Measured on the per-key limiter (IMPLEMENTATION.md, "The
//! collector"): the guard went from ~33 instructions to ~14, one hot key
//! 23.3 -> 16.4-19.5 ns a request; crossbeam-epoch ran about 20% slower
//! than `seize` on the Zipf stream.
//!
//! # Ownership (no pointer into an owner that can move)
//! An owner (a ring of slice maps, a per-key limiter) holds its
//! [`Graveyard`] by value and pins every guard of its maps on it; a map
//! holds no reference to it and reaches it through the guard it is given
//! ([`Guard::graveyard`]). So an owner can move freely, and what its
//! graveyard frees when dropped (everything left: the owner is being
//! dropped, no guard of it is alive) is only memory of its own maps.
//!
//! # Under loom
//! A [`Graveyard::default`] keeps what it is given until it is dropped (a
//! model is a handful of operations); guards pin nothing. A
//! [`Graveyard::collecting`] runs the real collector in a domain of its
//! own, so that models of the map can put it behind their guards.

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

#[cfg(loom)]
use self::epoch::Domain;
use self::epoch::Pin;
#[cfg(not(loom))]
use self::epoch::DOMAIN;
use self::limbo::Limbo;
#[cfg(not(loom))]
use crossbeam_utils::CachePadded;

/// A pinned section on one owner's [`Graveyard`]: memory unlinked while
/// it is alive is not freed.
pub(crate) struct Guard<'a> {
    #[cfg(not(loom))]
    _pin: Pin<'static>,
    #[cfg(loom)]
    _pin: Option<Pin<'a>>,
    graveyard: &'a Graveyard,
}

impl<'a> Guard<'a> {
    /// Pins the current thread against `graveyard`'s collector.
    #[inline]
    pub(crate) fn pin(graveyard: &'a Graveyard) -> Guard<'a> {
        Guard {
            #[cfg(not(loom))]
            _pin: DOMAIN.pin(),
            #[cfg(loom)]
            _pin: graveyard.domain().map(Domain::pin),
            graveyard,
        }
    }

    /// The graveyard this guard is pinned on: where what its holder
    /// unlinks goes, and what a map's insert drains
    /// ([`Graveyard::free_one`]).
    #[inline]
    pub(crate) fn graveyard(&self) -> &'a Graveyard {
        self.graveyard
    }

    /// Frees `ptr` (from `Box::into_raw`; it holds `bytes`, which set how
    /// soon its list collects) once no guard alive now, or pinned before
    /// this call, can still reach it.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, has been unlinked so that no guard
    /// pinned after this call can reach it, and is handed over exactly
    /// once; it belongs to a map of this guard's graveyard's owner.
    pub(crate) unsafe fn defer_free<T: Send + 'static>(&self, ptr: *mut T, bytes: usize) {
        #[cfg(not(loom))]
        // SAFETY: the caller's contract; this thread holds a pin of `DOMAIN`.
        unsafe {
            self.graveyard.limbo.retire(&DOMAIN, ptr, bytes)
        };
        #[cfg(loom)]
        // SAFETY: the caller's contract.
        unsafe {
            self.graveyard.retire_loom(ptr, bytes)
        };
    }

    /// [`defer_free`](Self::defer_free) for an object that frees its large
    /// parts a piece at a time (`limbo.rs`, "Freed in pieces").
    ///
    /// # Safety
    /// As [`defer_free`](Self::defer_free).
    pub(crate) unsafe fn defer_free_in_parts<T: InParts>(&self, ptr: *mut T) {
        #[cfg(not(loom))]
        // SAFETY: the caller's contract; this thread holds a pin of `DOMAIN`.
        unsafe {
            self.graveyard.limbo.retire_in_parts(&DOMAIN, ptr)
        };
        #[cfg(loom)]
        // SAFETY: the caller's contract.
        unsafe {
            self.graveyard.retire_in_parts_loom(ptr)
        };
    }
}

/// Where an owner's unlinked memory waits until no guard can reach it:
/// its [`Limbo`], in the process's collector domain (module docs).
pub(crate) struct Graveyard {
    /// On a line of its own: an owner holds its graveyard inline, beside
    /// the words every add reads, and a retirement writes the lists.
    #[cfg(not(loom))]
    limbo: CachePadded<Limbo>,
    #[cfg(loom)]
    yard: Yard,
}

#[cfg(not(loom))]
impl Default for Graveyard {
    fn default() -> Graveyard {
        barrier::init();
        Graveyard {
            limbo: CachePadded::new(Limbo::default()),
        }
    }
}

#[cfg(not(loom))]
impl Graveyard {
    /// Frees one object that no guard can reach, if any is waiting: the
    /// map calls it after each insert, outside the shard lock (`limbo.rs`).
    #[inline]
    pub(crate) fn free_one(&self) {
        self.limbo.free_one();
    }
}

/// A sendable raw pointer, for the frees a loom graveyard keeps.
#[cfg(loom)]
struct SendPtr<T>(*mut T);
// SAFETY: the pointee is only ever freed (by its destructor), never used,
// and every pointee is `Send` (`defer_free`'s bound).
#[cfg(loom)]
unsafe impl<T: Send> Send for SendPtr<T> {}

/// A model's graveyard: frees kept until the drop, or the real collector
/// in a domain of the model's own.
#[cfg(loom)]
enum Yard {
    Keep(std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>),
    Collect { domain: Box<Domain>, limbo: Limbo },
}

#[cfg(loom)]
impl Default for Graveyard {
    fn default() -> Graveyard {
        Graveyard {
            yard: Yard::Keep(Default::default()),
        }
    }
}

#[cfg(loom)]
impl Graveyard {
    /// A graveyard that runs the real collector, in a domain of its own.
    pub(crate) fn collecting() -> Graveyard {
        Graveyard {
            yard: Yard::Collect {
                domain: Box::new(Domain::new()),
                limbo: Limbo::default(),
            },
        }
    }

    fn domain(&self) -> Option<&Domain> {
        match &self.yard {
            Yard::Keep(_) => None,
            Yard::Collect { domain, .. } => Some(&**domain),
        }
    }

    fn keep(&self, free: Box<dyn FnOnce() + Send>) {
        match &self.yard {
            Yard::Keep(dead) => dead.lock().unwrap().push(free),
            Yard::Collect { .. } => unreachable!("a collecting graveyard retires"),
        }
    }

    /// [`Guard::defer_free`] under loom.
    ///
    /// # Safety
    /// As [`Guard::defer_free`].
    unsafe fn retire_loom<T: Send + 'static>(&self, ptr: *mut T, bytes: usize) {
        if let Yard::Collect { domain, limbo } = &self.yard {
            // SAFETY: the caller's contract.
            return unsafe { limbo.retire(domain, ptr, bytes) };
        }
        let p = SendPtr(ptr);
        self.keep(Box::new(move || {
            let p = p;
            // SAFETY: freed once, when the graveyard is dropped (its owner
            // is: no guard is left).
            drop(unsafe { Box::from_raw(p.0) });
        }));
    }

    /// [`Guard::defer_free_in_parts`] under loom.
    ///
    /// # Safety
    /// As [`Guard::defer_free`].
    unsafe fn retire_in_parts_loom<T: InParts>(&self, ptr: *mut T) {
        if let Yard::Collect { domain, limbo } = &self.yard {
            // SAFETY: the caller's contract.
            return unsafe { limbo.retire_in_parts(domain, ptr) };
        }
        let p = SendPtr(ptr);
        self.keep(Box::new(move || {
            let p = p;
            // SAFETY: as in `retire_loom`.
            let mut b = unsafe { Box::from_raw(p.0) };
            let mut parts = Parts::default();
            b.take_parts(&mut parts);
            drop(b);
            drop(parts);
        }));
    }

    /// As outside loom: frees one ready object, if any.
    pub(crate) fn free_one(&self) {
        if let Yard::Collect { limbo, .. } = &self.yard {
            limbo.free_one();
        }
    }

    /// A collect now, as a retirement runs one, then every ready object
    /// freed ([`Limbo::collect`]): what a model's thread calls once its
    /// guards have ended, in place of the retirements and inserts that
    /// would free the same objects later.
    pub(crate) fn collect(&self) {
        if let Yard::Collect { domain, limbo } = &self.yard {
            limbo.collect(domain);
        }
    }
}

#[cfg(loom)]
impl Drop for Graveyard {
    fn drop(&mut self) {
        if let Yard::Keep(dead) = &mut self.yard {
            for f in dead.get_mut().unwrap().drain(..) {
                f();
            }
        }
    }
}
