//! Stripes with one writer each: the layout shared by [`StripedCounter`],
//! [`SlidingWindow`] and [`MultiWindow`].
//!
//! A structure's state is split into *stripes* (a counter cell, a row of
//! slices) so that threads write different cache lines. There are two kinds:
//!
//! - **Owned stripes**, one per writing thread: the stripe of slot
//!   `(token - 1) & (cap - 1)` (see [`crate::thread_id`]) is created by the
//!   first thread with such a token to write, *for* that thread, and it
//!   stays that token's: only its holder ever writes it, so a write is a
//!   plain load and store ([`Writer::Sole`]), not a locked read-modify-write
//!   (about 2.5x cheaper here, and what lets a striped add beat one
//!   `fetch_add`).
//! - **Shared stripes**, for a thread whose slot holds another thread's
//!   stripe (more threads than slots, or two tokens that share a slot):
//!   written with CAS by any thread ([`Writer::Shared`]), chosen by the
//!   thread's probe and grown on contention exactly as Java's `LongAdder`
//!   grows its cells.
//!
//! So a structure costs one pointer per possible slot until it is written,
//! then one stripe per writing thread up to `cap` (the CPU count rounded up
//! to a power of two: more cannot run at once), plus shared stripes (at most
//! `cap` more) only when more threads than slots write it.
//!
//! # Invariants
//! 1. A pointer in `owned` or `shared`, once installed (CAS from null,
//!    `Release`), never changes and is freed only in `Drop` (`&mut self`),
//!    so `&T` handed out lives as long as `&self`.
//! 2. `owners[i]` is written before `owned[i]` is installed and never
//!    changes after: a reader that loads a non-null `owned[i]` with
//!    `Acquire` reads the right owner.
//! 3. A stripe of `owned[i]` is written only by the holder of token
//!    `owners[i]` (by [`crate::thread_id`]'s invariant 1, one thread at a
//!    time); a shared stripe only by CAS.
//! 4. `shared_len` only grows, is 0 or a power of two `<= cap`, and every
//!    `shared[..shared_len]` is non-null once `shared_len` is seen with
//!    `Acquire` (installed before the `Release` `fetch_max`).
//!
//! Nothing here waits: racing installers each allocate, one CAS wins, the
//! losers free theirs.
//!
//! [`StripedCounter`]: crate::StripedCounter
//! [`SlidingWindow`]: crate::SlidingWindow
//! [`MultiWindow`]: crate::MultiWindow

use crate::sync::{probe, AtomicPtr, AtomicU32, AtomicUsize, Exclusive, Ordering};
use crate::thread_id;

/// The most stripes of each kind any structure grows to, whatever the CPU
/// count: beyond 256 CPUs a collision costs less than the memory of more
/// stripes.
pub(crate) const MAX_STRIPES: usize = 256;

/// Default stripe cap: the CPU count rounded up to a power of two (LongAdder
/// uses the same bound), at least 2 so that two contending threads can
/// always separate, at most [`MAX_STRIPES`].
pub(crate) fn default_cap() -> usize {
    #[cfg(loom)]
    {
        // Loom models run 2-3 threads; 4 slots give each its own.
        4
    }
    #[cfg(not(loom))]
    {
        static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *CAP.get_or_init(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            normalize_cap(cpus)
        })
    }
}

/// Rounds a requested cap up to a power of two in `2..=MAX_STRIPES`.
pub(crate) fn normalize_cap(cap: usize) -> usize {
    cap.clamp(2, MAX_STRIPES)
        .next_power_of_two()
        .min(MAX_STRIPES)
}

/// Installs `Box::new(make())` into `slot` if it is null, without waiting:
/// racing installers each allocate, one CAS wins (`Release`, so readers that
/// load the pointer with `Acquire` see the initialized value), and the
/// losers free their allocation. The pointer is owned by whoever owns
/// `slot` and must be freed with `Box::from_raw` exactly once.
pub(crate) fn install_if_null<T>(slot: &AtomicPtr<T>, make: impl FnOnce() -> T) {
    if !slot.load(Ordering::Acquire).is_null() {
        return;
    }
    let fresh = Box::into_raw(Box::new(make()));
    if slot
        .compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // SAFETY: `fresh` came from `Box::into_raw` just above and was never
        // published (the CAS failed), so we own it.
        drop(unsafe { Box::from_raw(fresh) });
    }
}

/// How the calling thread must write the stripe it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// The thread owns the stripe and is its only writer: plain loads and
    /// (`Release`) stores, no locked instruction.
    Sole,
    /// A shared stripe: every write is a CAS against what was read.
    Shared,
}

pub(crate) struct Stripes<T> {
    /// Slot `i` holds the stripe of the tokens `t` with `(t - 1) & mask ==
    /// i`, created by the first of them to write.
    owned: Box<[AtomicPtr<T>]>,
    /// The token whose stripe `owned[i]` is, 0 while the slot is free
    /// (invariant 2).
    owners: Box<[AtomicU32]>,
    /// Stripes written by CAS, used by threads whose slot is another's.
    shared: Box<[AtomicPtr<T>]>,
    /// Shared stripes in use: 0 until needed, then a power of two.
    shared_len: AtomicUsize,
    /// `cap - 1`.
    mask: usize,
    /// Loom models only: every writer gets a shared stripe, so that the
    /// models of the CAS protocol keep racing writers on one stripe.
    #[cfg(loom)]
    shared_only: bool,
}

impl<T> Stripes<T> {
    /// No stripe yet, room for `cap` (a power of two) of each kind.
    pub(crate) fn new(cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two());
        let nulls = || {
            (0..cap)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect()
        };
        Stripes {
            owned: nulls(),
            owners: (0..cap).map(|_| AtomicU32::new(0)).collect(),
            shared: nulls(),
            shared_len: AtomicUsize::new(0),
            mask: cap - 1,
            #[cfg(loom)]
            shared_only: false,
        }
    }

    /// Loom models only: from now on every writer is handed a shared
    /// stripe (see `shared_only`).
    #[cfg(loom)]
    pub(crate) fn share_all(&mut self) {
        self.shared_only = true;
    }

    /// The most stripes of each kind.
    pub(crate) fn cap(&self) -> usize {
        self.mask + 1
    }

    /// The stripe the calling thread writes, and how. `make()` builds a new
    /// stripe.
    // Always: the fast path is a few loads and a store (the slow path is
    // out of line), and a call would cost as much as the add.
    #[inline(always)]
    pub(crate) fn for_writer(&self, make: impl Fn() -> T) -> (&T, Writer) {
        #[cfg(loom)]
        if self.shared_only {
            return (self.shared_for(probe::get(), &make), Writer::Shared);
        }
        let token = thread_id::current();
        let i = (token.wrapping_sub(1) as usize) & self.mask;
        debug_assert!(i < self.owners.len() && i < self.owned.len());
        // SAFETY: `i <= mask`, and both arrays hold `mask + 1` slots.
        let (owner, slot) = unsafe { (self.owners.get_unchecked(i), self.owned.get_unchecked(i)) };
        if owner.load(Ordering::Relaxed) == token {
            // Our slot: a holder of our token claimed it and installed the
            // stripe before returning (we did, earlier in this thread, or a
            // previous holder whose writes happen-before ours: invariant 2),
            // so the pointer is not null.
            let p = slot.load(Ordering::Acquire);
            debug_assert!(!p.is_null(), "invariant 2");
            // SAFETY: a pointer installed in `owned` came from
            // `Box::into_raw` and lives until `Drop` (invariant 1).
            return (unsafe { &*p }, Writer::Sole);
        }
        self.find(token, i, make)
    }

    /// The slow half of [`Stripes::for_writer`]: claim the thread's slot and
    /// create its stripe if the slot is free, else hand out a shared stripe.
    #[cold]
    #[inline(never)]
    fn find(&self, token: u32, i: usize, make: impl Fn() -> T) -> (&T, Writer) {
        if token != thread_id::NONE
            && self.owners[i]
                .compare_exchange(0, token, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // The slot is ours for good; only we install its stripe.
            let fresh = Box::into_raw(Box::new(make()));
            self.owned[i].store(fresh, Ordering::Release);
            // SAFETY: just allocated, and now owned by `self` (invariant 1).
            return (unsafe { &*fresh }, Writer::Sole);
        }
        (self.shared_for(probe::get(), &make), Writer::Shared)
    }

    /// The shared stripe for `probe`, creating the first one if needed.
    fn shared_for(&self, probe: u32, make: &impl Fn() -> T) -> &T {
        let mut len = self.shared_len.load(Ordering::Acquire);
        if len == 0 {
            install_if_null(&self.shared[0], make);
            self.shared_len.fetch_max(1, Ordering::AcqRel);
            len = self.shared_len.load(Ordering::Acquire);
        }
        let p = self.shared[(probe as usize) & (len - 1)].load(Ordering::Acquire);
        debug_assert!(!p.is_null(), "invariant 4");
        // SAFETY: invariant 4 (non-null below `shared_len`) and invariant 1.
        unsafe { &*p }
    }

    /// A CAS on a shared stripe failed because another thread wrote it: move
    /// the thread to another shared stripe and double them (up to the cap),
    /// never waiting.
    #[cold]
    pub(crate) fn contended(&self, make: impl Fn() -> T) {
        probe::rehash();
        let len = self.shared_len.load(Ordering::Acquire).max(1);
        let target = (len * 2).min(self.cap());
        if target <= len {
            return;
        }
        for slot in &self.shared[..target] {
            install_if_null(slot, &make);
        }
        self.shared_len.fetch_max(target, Ordering::AcqRel);
    }

    /// Every stripe allocated now: owned ones by slot, then shared ones.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        let shared = self.shared_len.load(Ordering::Acquire);
        self.owned
            .iter()
            .chain(&self.shared[..shared])
            .filter_map(|slot| {
                let p = slot.load(Ordering::Acquire);
                // SAFETY: invariant 1.
                (!p.is_null()).then(|| unsafe { &*p })
            })
    }

    /// Heap bytes of the slot arrays (the stripes themselves not included).
    pub(crate) fn header_bytes(&self) -> usize {
        self.cap() * (2 * std::mem::size_of::<usize>() + std::mem::size_of::<u32>())
    }

    /// Stripes allocated now (0 until the first write).
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }
}

impl<T> Drop for Stripes<T> {
    fn drop(&mut self) {
        for slot in self.owned.iter_mut().chain(self.shared.iter_mut()) {
            let p = slot.read_mut();
            if !p.is_null() {
                // SAFETY: non-null pointers came from `Box::into_raw` and
                // are freed only here, once, with exclusive access.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}
