//! The sync facade: the only module that names atomics, thread-locals and
//! spin hints.
//!
//! Every other module imports its atomics from here, so building with
//! `RUSTFLAGS="--cfg loom"` swaps them all for loom's model-checked versions
//! (the pattern of tokio's `src/loom/mod.rs` and sharded-slab's `src/sync.rs`).
//! Nothing else in the crate may `use std::sync::atomic` directly.

/// Fences: the two halves of the per-key collector's barrier
/// (`reclaim/barrier.rs`; under loom it models them with RMWs instead).
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{compiler_fence, fence};
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// Loom models `fence(SeqCst)` (not `SeqCst` accesses): the hot-key
/// detector's read of a striped count uses it (`keyed/entry.rs`).
#[cfg(loom)]
pub(crate) use loom::sync::atomic::fence;
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
/// The per-key map's shard locks (see `keyed/map/`): taken only to change
/// a shard's structure (inserting or removing a key, moving its keys to a
/// bigger table), never by an add on a key the map holds.
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

/// Locks `m`, poisoned or not: for a mutex whose data a panic cannot leave
/// half-changed (each caller says why). Loom's mutex does not poison.
pub(crate) fn lock_whole<T>(m: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    #[cfg(not(loom))]
    return m.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(loom)]
    return m.lock().unwrap();
}

/// The value of an atomic its owner holds exclusively (`&mut`, as in a
/// `Drop`): std's `get_mut`, or loom's `with_mut`, behind one name.
pub(crate) trait Exclusive {
    /// The atomic's value type.
    type Value: Copy;
    /// The value, read with exclusive access.
    fn read_mut(&mut self) -> Self::Value;
    /// Sets the value with exclusive access.
    fn write_mut(&mut self, v: Self::Value);
}

macro_rules! exclusive {
    ($([$($generic:tt)*] $atomic:ty => $value:ty),* $(,)?) => {$(
        impl<$($generic)*> Exclusive for $atomic {
            type Value = $value;
            #[inline]
            fn read_mut(&mut self) -> $value {
                #[cfg(not(loom))]
                {
                    *self.get_mut()
                }
                #[cfg(loom)]
                {
                    self.with_mut(|v| *v)
                }
            }
            #[inline]
            fn write_mut(&mut self, v: $value) {
                #[cfg(not(loom))]
                {
                    *self.get_mut() = v;
                }
                #[cfg(loom)]
                {
                    self.with_mut(|x| *x = v);
                }
            }
        }
    )*};
}

exclusive!([T] AtomicPtr<T> => *mut T, [] AtomicU64 => u64, [] AtomicUsize => usize);

/// Std atomics for process-wide statics (the coarse clock's ticker, the
/// probe seed). Loom cannot model a `static`, and these never take part in a
/// modeled protocol, so they stay std atomics even under `--cfg loom`.
pub(crate) mod process_wide {
    #[allow(unused_imports)]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
}

/// Asks the CPU to start loading the line at `p` into every cache level.
/// A hint: it never faults, whatever `p` is, and changes no value.
#[inline(always)]
#[allow(unused_variables)]
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: `prefetcht0` does not access memory architecturally: it
    // never faults, on any address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
}

/// A hint to the CPU that we are in a retry loop (never a wait: every loop
/// that calls it retries only because another thread made progress).
#[inline]
#[allow(dead_code)]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::hint::spin_loop();
}

/// One round of waiting for another thread to finish a short step (a
/// multi-level window's fold; see `crate::multi`): a few CPU spin hints,
/// then the rest of the time slice handed back, in case the thread we wait
/// for was descheduled mid-step. Under loom every round yields, so that the
/// model explores the other thread's progress.
#[inline]
#[allow(dead_code)]
pub(crate) fn wait_hint(rounds: &mut u32) {
    *rounds = rounds.saturating_add(1);
    #[cfg(not(loom))]
    {
        if *rounds <= 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// The calling thread's stripe probe: a non-zero hash that picks the thread's
/// cell in every striped structure, and that is re-hashed when the thread
/// meets contention (the `threadLocalRandomProbe` of Java's `LongAdder`).
pub(crate) mod probe {
    use std::cell::Cell;

    #[cfg(not(loom))]
    std::thread_local! {
        static PROBE: Cell<u32> = const { Cell::new(0) };
    }
    #[cfg(loom)]
    loom::thread_local! {
        static PROBE: Cell<u32> = Cell::new(0);
    }

    #[cfg(not(loom))]
    fn seed() -> u32 {
        use super::process_wide::{AtomicU32, Ordering};
        // Weyl sequence: consecutive threads get well-spread probes.
        // Only 0 is reserved (it means "not yet seeded"); forcing the low
        // bit instead would start every thread on the same odd stripe.
        static NEXT: AtomicU32 = AtomicU32::new(0x9E37_79B9);
        let s = NEXT.fetch_add(0x9E37_79B9, Ordering::Relaxed);
        if s == 0 {
            0x9E37_79B9
        } else {
            s
        }
    }

    #[cfg(loom)]
    fn seed() -> u32 {
        // Loom re-runs a model many times and needs every run to be
        // deterministic, so derive the seed from loom's thread id, which is
        // the same in every run. Thread 0 (the model's main thread) gets
        // probe 1, thread 1 probe 2, ...: each starts on its own index, and
        // collisions only come from the stripe mask being small.
        let id = format!("{:?}", loom::thread::current().id());
        let digits: String = id.chars().filter(|c| c.is_ascii_digit()).collect();
        digits.parse::<u32>().unwrap_or(0).wrapping_add(1)
    }

    /// The current thread's probe (never 0).
    #[inline]
    pub(crate) fn get() -> u32 {
        PROBE.with(|p| {
            let v = p.get();
            if v != 0 {
                v
            } else {
                let s = seed();
                p.set(s);
                s
            }
        })
    }

    /// Moves the current thread to another stripe after contention (xorshift).
    #[inline]
    pub(crate) fn rehash() -> u32 {
        PROBE.with(|p| {
            let mut x = p.get();
            if x == 0 {
                x = seed();
            }
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let x = if x == 0 { 1 } else { x };
            p.set(x);
            x
        })
    }
}
