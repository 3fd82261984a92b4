//! A boxed slice whose first element starts a cache line: the slot array
//! of a per-key table (`table/`).
//!
//! # Why
//! A `Box<[T]>` is aligned to `T` only. A large one comes from `mmap`
//! through the allocator's chunk header, so glibc returns it 16 bytes past
//! a page boundary. With 32-byte slots (a `u64` key and a 24-byte entry)
//! every second slot then straddles two 64-byte lines: its key and count
//! in one, its stripes pointer and hot word in the next. An add that reads
//! the hot word (the hot-key detector, on every add) or a limiter state
//! that spans the slot then misses twice where once would do. Starting
//! the array on a line boundary puts every 32-byte slot inside one line
//! (measured with callgrind: BENCHMARKS.md, per-key engine).
//!
//! # How
//! The allocation is [`LINE`] bytes longer than the elements, with `T`'s
//! own alignment, and the elements start at its first line boundary. An
//! allocation aligned to 64 would be simpler, but the allocator zeroes
//! such a one by writing it (`posix_memalign` and a `memset`), where an
//! ordinary one comes from `calloc`, whose fresh pages are zero already:
//! a slice map's table of several MB would be written twice.
//!
//! # Invariants
//! `base` is an allocation made with [`LineSlice::layout`]`(len)`, or
//! dangling when that layout is `None` (no bytes to hold); `ptr` points to
//! `len` initialized elements inside it, at most `LINE - 1` bytes past
//! `base`. The slice owns and drops the elements, then frees `base` with
//! the same layout.

use std::alloc::Layout;
use std::ops::Deref;
use std::ptr::NonNull;

/// The alignment of the first element: one cache line on the machines we
/// target (x86_64 and most aarch64 cores).
pub(crate) const LINE: usize = 64;

/// A boxed slice aligned to [`LINE`] (see the module docs).
pub(crate) struct LineSlice<T> {
    base: NonNull<u8>,
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: a `LineSlice<T>` owns its elements as a `Box<[T]>` does.
unsafe impl<T: Send> Send for LineSlice<T> {}
// SAFETY: shared access hands out `&T` only, as `Box<[T]>` does.
unsafe impl<T: Sync> Sync for LineSlice<T> {}

impl<T> LineSlice<T> {
    /// The allocation for `len` elements: `None` when they take no bytes.
    fn layout(len: usize) -> Option<Layout> {
        let bytes = Layout::array::<T>(len)
            .expect("a table fits in isize")
            .size();
        if bytes == 0 {
            return None;
        }
        let size = bytes.checked_add(LINE).expect("a table fits in isize");
        Some(
            Layout::from_size_align(size, std::mem::align_of::<T>())
                .expect("a table fits in isize"),
        )
    }

    /// Allocates room for `len` elements, uninitialized; returns the
    /// allocation and the first element's place.
    fn alloc(len: usize, zeroed: bool) -> (NonNull<u8>, NonNull<T>) {
        let Some(layout) = Self::layout(len) else {
            return (NonNull::dangling(), NonNull::dangling());
        };
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe {
            if zeroed {
                std::alloc::alloc_zeroed(layout)
            } else {
                std::alloc::alloc(layout)
            }
        };
        let base = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // `base` is aligned to `T` and `LINE` is a multiple of any smaller
        // power of two, so the offset keeps `T`'s alignment; it is below
        // `LINE`, the allocation's slack.
        let offset = (LINE - base.as_ptr() as usize % LINE) % LINE;
        // SAFETY: `offset < LINE`: inside the allocation.
        let ptr = unsafe { base.add(offset) }.cast::<T>();
        (base, ptr)
    }

    /// `len` elements, element `i` built by `f(i)`. If `f` panics, the
    /// elements built so far and the allocation leak (nothing is dropped
    /// twice or read uninitialized).
    pub(crate) fn from_fn(len: usize, mut f: impl FnMut(usize) -> T) -> Self {
        let (base, ptr) = Self::alloc(len, false);
        for i in 0..len {
            // SAFETY: `i < len`, inside the allocation (or `T` is
            // zero-sized and any aligned pointer is valid for it).
            unsafe { ptr.as_ptr().add(i).write(f(i)) };
        }
        LineSlice { base, ptr, len }
    }

    /// `len` elements of all-zero bytes, from the allocator's zeroed memory
    /// (fresh pages of a large allocation are zero already, so nothing is
    /// written until an element is used).
    ///
    /// # Safety
    /// All-zero bytes are a valid `T`.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) unsafe fn zeroed(len: usize) -> Self {
        let (base, ptr) = Self::alloc(len, true);
        if std::mem::size_of::<T>() == 0 {
            // No bytes were allocated: make each (zero-sized) value as the
            // caller's contract allows.
            for i in 0..len {
                // SAFETY: the caller's contract; zero-sized, any aligned
                // pointer is valid.
                unsafe { ptr.as_ptr().add(i).write(std::mem::zeroed()) };
            }
        }
        LineSlice { base, ptr, len }
    }
}

impl<T> Deref for LineSlice<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialized elements at `ptr` (invariants).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for LineSlice<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for LineSlice<T> {
    fn drop(&mut self) {
        // SAFETY: the elements are initialized and dropped once, here; then
        // the allocation is freed with the layout it was made with.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            if let Some(layout) = Self::layout(self.len) {
                std::alloc::dealloc(self.base.as_ptr(), layout);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn starts_a_line_and_drops_every_element_once() {
        let marker = Arc::new(());
        for len in [0, 1, 7, crate::sized(100_000, 1_000)] {
            let s = LineSlice::from_fn(len, |i| (i as u64, Arc::clone(&marker)));
            assert_eq!(s.len(), len);
            // (An empty slice allocates nothing: its pointer is dangling.)
            assert!(len == 0 || s.as_ptr() as usize % LINE == 0);
            assert!(s.iter().enumerate().all(|(i, x)| x.0 == i as u64));
            assert_eq!(Arc::strong_count(&marker), len + 1);
            drop(s);
            assert_eq!(Arc::strong_count(&marker), 1);
        }
    }

    #[test]
    fn zeroed_is_zero_and_aligned() {
        // Large enough for the allocator to map fresh pages.
        // SAFETY: all-zero bytes are a valid `[u64; 4]`.
        let s = unsafe { LineSlice::<[u64; 4]>::zeroed(crate::sized(1 << 16, 1 << 10)) };
        assert_eq!(s.as_ptr() as usize % LINE, 0);
        assert!(s.iter().all(|x| *x == [0; 4]));
        // SAFETY: `()` has no bytes.
        let z = unsafe { LineSlice::<()>::zeroed(3) };
        assert_eq!(z.len(), 3);
    }
}
