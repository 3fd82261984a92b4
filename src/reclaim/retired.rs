//! What a [`Limbo`](super::limbo::Limbo) holds: a [`Retired`] object (a
//! type-erased pointer, the function that frees it, its retire epoch and
//! its size), and the [`Parts`] an object retired in parts hands over when
//! it is freed ([`InParts`]: a slice map hands over a table per shard,
//! `slice_map.rs`).
//!
//! # Invariants
//! 1. A `Retired` is freed at most once, by its own `free`, and never
//!    used otherwise: it came from `Box::into_raw` of a `Send` type.
//! 2. A part is ready when it is made: the object that owned it was
//!    ready (no guard could reach it), so no guard can reach the part.
//!    A part's epoch is 0 and it is never put back among the waiting.
//! 3. Whatever a [`Parts`] still holds when it is dropped is freed then:
//!    nothing leaks if the limbo never takes the parts (a panic in a
//!    destructor, or the limbo's own drop).

/// Frees the object at a pointer, handing any parts it owns to [`Parts`].
pub(super) type Free = unsafe fn(*mut (), &mut Parts);

/// A retired object, with the epoch it was retired at (0 for a part,
/// which is ready when it is made) and the bytes it holds.
#[derive(Clone, Copy)]
pub(super) struct Retired {
    pub(super) ptr: *mut (),
    pub(super) free: Free,
    pub(super) epoch: u64,
    pub(super) bytes: usize,
}

// SAFETY: a retired object is only ever freed (by `free`, its own drop),
// never used, and `Limbo::retire` requires its type to be `Send`.
unsafe impl Send for Retired {}

/// An object that frees its large parts a piece at a time
/// ([`Limbo::retire_in_parts`](super::limbo::Limbo::retire_in_parts)).
pub trait InParts: Send + 'static {
    /// Moves the parts that are costly to free (each a `Box`) to `parts`;
    /// the object itself is then dropped with what remains.
    fn take_parts(&mut self, parts: &mut Parts);
}

/// Parts of a freed object, to be freed later, each on its own: they are
/// ready, since the object that owned them was.
#[derive(Default)]
pub struct Parts(pub(super) Vec<Retired>);

impl Parts {
    /// Adds a part, freed whole.
    pub fn push<T: Send + 'static>(&mut self, part: Box<T>) {
        self.0.push(Retired {
            ptr: Box::into_raw(part).cast(),
            free: free_box::<T>,
            epoch: 0,
            bytes: 0,
        });
    }

    /// Parts held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Drop for Parts {
    /// Frees what is still held: nothing when the limbo has taken the
    /// parts; everything when the limbo is dropped (a panic in a destructor
    /// may leave some too).
    ///
    /// A destructor that panics (a key's `Drop`) does not stop the others:
    /// everything is freed, then the first panic goes on (`crate::unwind`).
    fn drop(&mut self) {
        let mut first = FirstPanic::default();
        while let Some(r) = self.0.pop() {
            let mut more = Parts::default();
            // SAFETY: held once, and ready: a part (the type's docs), or
            // an object of a limbo being dropped (`Limbo::drop`).
            first.run(|| unsafe { (r.free)(r.ptr, &mut more) });
            self.0.append(&mut more.0);
        }
        first.resume();
    }
}

use crate::unwind::FirstPanic;

/// Frees a `T` from `Box::into_raw`.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw` and is freed once.
pub(super) unsafe fn free_box<T>(p: *mut (), _: &mut Parts) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
}

/// Frees a `T` from `Box::into_raw`, its parts first handed to `parts`.
///
/// # Safety
/// As [`free_box`].
pub(super) unsafe fn free_in_parts<T: InParts>(p: *mut (), parts: &mut Parts) {
    // SAFETY: the caller's contract.
    let mut b = unsafe { Box::from_raw(p.cast::<T>()) };
    b.take_parts(parts);
    drop(b);
}
