//! Lazily grown stripes: the growth protocol shared by [`StripedCounter`]
//! and [`SlidingWindow`].
//!
//! A `Stripes<T>` holds stripe 0 inline and up to `cap - 1` more stripes
//! behind atomic pointers that start null. `len` (a power of two) says how
//! many stripes are in use; a thread uses stripe `probe & (len - 1)`.
//! Growth is triggered by a failed CAS (contention) and doubles `len` until
//! `cap`, the number of CPUs rounded up to a power of two: more stripes than
//! CPUs cannot reduce contention, only memory locality.
//!
//! # Invariants
//! - `len` only grows, is a power of two, and `1 <= len <= cap`.
//! - Every pointer in `rest[..len - 1]` is non-null once `len` is observed
//!   with `Acquire` (a grower installs the pointers, each with a `Release`
//!   CAS, before it raises `len` with a `Release` `fetch_max`).
//! - A pointer, once installed, never changes and is freed only in `Drop`
//!   (`&mut self`), so `&T` handed out by [`Stripes::get`] lives as long as
//!   `&self`.
//!
//! Growth never blocks: two growers racing for one slot both allocate, one
//! CAS wins, the loser frees its allocation. No thread ever waits for
//! another to finish growing; a reader that sees a null slot (impossible by
//! the invariant, but cheap to guard) falls back to stripe 0.
//!
//! [`StripedCounter`]: crate::StripedCounter
//! [`SlidingWindow`]: crate::SlidingWindow

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};

/// The most stripes any structure grows to, whatever the CPU count: beyond
/// 256 CPUs the probe hash spreads threads well enough that a collision
/// costs less than the memory of more stripes.
pub(crate) const MAX_STRIPES: usize = 256;

/// Default stripe cap: the CPU count rounded up to a power of two (LongAdder
/// uses the same bound), at least 2 so that two contending threads can
/// always separate, at most [`MAX_STRIPES`].
pub(crate) fn default_cap() -> usize {
    #[cfg(loom)]
    {
        // Loom models run 2-3 threads; 4 stripes let a model grow twice.
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

/// Rounds a requested cap up to a power of two in `1..=MAX_STRIPES`.
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

pub(crate) struct Stripes<T> {
    first: T,
    rest: Box<[AtomicPtr<T>]>,
    len: AtomicUsize,
}

impl<T> Stripes<T> {
    /// One stripe in use, room for `cap` (a power of two).
    pub(crate) fn new(first: T, cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two());
        let rest = (1..cap)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect();
        Stripes {
            first,
            rest,
            len: AtomicUsize::new(1),
        }
    }

    /// Stripes in use now.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// The most stripes this can grow to.
    pub(crate) fn cap(&self) -> usize {
        self.rest.len() + 1
    }

    /// The stripe for `probe`.
    #[inline]
    pub(crate) fn for_probe(&self, probe: u32) -> &T {
        let len = self.len();
        self.get((probe as usize) & (len - 1))
    }

    /// Stripe `i` (`i < len()`).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &T {
        if i == 0 {
            return &self.first;
        }
        let p = self.rest[i - 1].load(Ordering::Acquire);
        if p.is_null() {
            return &self.first;
        }
        // SAFETY: a non-null pointer in `rest` came from `Box::into_raw` in
        // `grow`, is never replaced or freed before `Drop` (which takes
        // `&mut self`), so it is valid for the lifetime of `&self`.
        unsafe { &*p }
    }

    /// Doubles the stripes in use (up to the cap). Never waits: racing
    /// growers each try to install every missing stripe; losers free theirs.
    pub(crate) fn grow(&self, make: impl Fn() -> T) {
        let len = self.len();
        let target = (len * 2).min(self.cap());
        if target <= len {
            return;
        }
        for slot in &self.rest[len - 1..target - 1] {
            install_if_null(slot, &make);
        }
        self.len.fetch_max(target, Ordering::AcqRel);
    }

    /// Every stripe in use, stripe 0 first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }
}

impl<T> Drop for Stripes<T> {
    fn drop(&mut self) {
        for slot in self.rest.iter_mut() {
            #[cfg(not(loom))]
            let p = *slot.get_mut();
            #[cfg(loom)]
            let p = slot.with_mut(|p| *p);
            if !p.is_null() {
                // SAFETY: non-null pointers in `rest` came from
                // `Box::into_raw` in `grow` and are freed only here, once,
                // with exclusive access.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}
