//! The per-thread pin slots of the collector (`epoch.rs`), found by the
//! thread's token (`thread_id.rs`): each slot on its own cache line, since
//! its thread writes it twice a lookup and others read it only to collect.
//!
//! # Layout
//! - Tokens `1..=FLAT` have a slot in a static array: the hot path is a
//!   bounds check and an index. A slot holds the bitwise complement of its
//!   pin, so an unpinned slot is all zeros and the array costs no page
//!   until a thread uses it.
//! - Bucket `b` holds the slots of tokens `2^b .. 2^(b+1)` above `FLAT`,
//!   allocated on the first use of one of them and never freed (tokens
//!   are dense, reused lowest-first: the buckets cover the peak number of
//!   threads). Tokens from [`MAX_PINNED`] on get no slot: their guards pin
//!   anonymously.
//!
//! # Invariants
//! 1. A bucket pointer goes once from null to a fully built bucket (a CAS,
//!    `AcqRel`; losers free theirs), read with `Acquire`: a slot is seen
//!    built. A collector that reads a bucket as null reads no slot of it;
//!    that is safe because the thread that installs it does so before its
//!    pin store, which the heavy barrier then orders as any pin store
//!    (`barrier.rs`).
//! 2. Only the thread holding a token writes its slot's words.

use crate::sync::{AtomicU32, AtomicU64};

/// One thread's pin and guard depth (see `epoch.rs`).
pub(crate) struct Slot {
    /// `!pin`: 0 when unpinned ([`INACTIVE`](super::epoch::INACTIVE)),
    /// else the complement of the epoch pinned.
    pub(crate) pin: AtomicU64,
    /// Guards the thread holds (only it reads or writes this).
    pub(crate) depth: AtomicU32,
}

impl Slot {
    #[cfg(not(loom))]
    const fn new() -> Slot {
        Slot {
            pin: AtomicU64::new(0),
            depth: AtomicU32::new(0),
        }
    }

    #[cfg(loom)]
    fn new() -> Slot {
        Slot {
            pin: AtomicU64::new(0),
            depth: AtomicU32::new(0),
        }
    }
}

/// Tokens below this get a slot (`1..MAX_PINNED`).
#[cfg(not(loom))]
const MAX_PINNED: u32 = 1 << BUCKETS;

#[cfg(not(loom))]
const BUCKETS: u32 = 16;

/// Tokens with a static slot.
#[cfg(not(loom))]
const FLAT: usize = 64;

#[cfg(not(loom))]
pub(crate) use self::buckets::Slots;
#[cfg(loom)]
pub(crate) use self::model::Slots;

#[cfg(not(loom))]
mod buckets {
    use super::{Slot, BUCKETS, FLAT, MAX_PINNED};
    use crate::sync::{AtomicPtr, Ordering};
    use crossbeam_utils::CachePadded;
    use std::ptr;

    type Padded = CachePadded<Slot>;

    /// The slots of every token (module docs).
    pub(crate) struct Slots {
        flat: [Padded; FLAT],
        buckets: [AtomicPtr<Padded>; BUCKETS as usize],
    }

    impl Slots {
        pub(crate) const fn new() -> Slots {
            Slots {
                flat: [const { CachePadded::new(Slot::new()) }; FLAT],
                buckets: [const { AtomicPtr::new(ptr::null_mut()) }; BUCKETS as usize],
            }
        }

        /// The slot of `token`, or `None` if it has none (module docs).
        #[inline(always)]
        pub(crate) fn get(&self, token: u32) -> Option<&Slot> {
            match self.flat.get(token.wrapping_sub(1) as usize) {
                Some(s) => Some(s),
                None => self.get_far(token),
            }
        }

        #[cold]
        fn get_far(&self, token: u32) -> Option<&Slot> {
            if token.wrapping_sub(1) >= MAX_PINNED - 1 {
                return None;
            }
            let b = 31 - token.leading_zeros();
            let mut p = self.buckets[b as usize].load(Ordering::Acquire);
            if p.is_null() {
                p = self.install(b);
            }
            // SAFETY: bucket `b` holds `2^b` built slots (invariant 1),
            // never freed, and `token - 2^b < 2^b`.
            Some(unsafe { &*p.add((token - (1 << b)) as usize) })
        }

        #[cold]
        fn install(&self, b: u32) -> *mut Padded {
            let fresh: Box<[Padded]> = (0..1usize << b)
                .map(|_| CachePadded::new(Slot::new()))
                .collect();
            let fresh = Box::into_raw(fresh).cast::<Padded>();
            match self.buckets[b as usize].compare_exchange(
                ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => fresh,
                Err(won) => {
                    // SAFETY: ours, never published, `2^b` long.
                    drop(unsafe {
                        Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, 1usize << b))
                    });
                    won
                }
            }
        }

        /// Calls `f` on every slot of an installed bucket.
        pub(crate) fn for_each(&self, mut f: impl FnMut(&Slot)) {
            self.flat.iter().for_each(|s| f(s));
            for (b, bucket) in self.buckets.iter().enumerate() {
                let p = bucket.load(Ordering::Acquire);
                if p.is_null() {
                    continue;
                }
                // SAFETY: as in `get`: a built bucket of `2^b` slots.
                let slots = unsafe { std::slice::from_raw_parts(p, 1usize << b) };
                slots.iter().for_each(|s| f(s));
            }
        }
    }

    impl Drop for Slots {
        fn drop(&mut self) {
            // Only a test's own slots are ever dropped (the process's are
            // a static): no thread can hold one of them.
            for (b, bucket) in self.buckets.iter_mut().enumerate() {
                let p = *bucket.get_mut();
                if !p.is_null() {
                    // SAFETY: installed by `install`: a boxed slice of
                    // `2^b` slots, exclusively ours now.
                    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, 1usize << b)) });
                }
            }
        }
    }
}

/// Under loom: a few slots, one per model thread's token.
#[cfg(loom)]
mod model {
    use super::Slot;
    use crossbeam_utils::CachePadded;

    pub(crate) struct Slots(Vec<CachePadded<Slot>>);

    impl Slots {
        pub(crate) fn new() -> Slots {
            Slots((0..4).map(|_| CachePadded::new(Slot::new())).collect())
        }

        pub(crate) fn get(&self, token: u32) -> Option<&Slot> {
            self.0.get((token as usize).wrapping_sub(1)).map(|s| &**s)
        }

        pub(crate) fn for_each(&self, mut f: impl FnMut(&Slot)) {
            self.0.iter().for_each(|s| f(s));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;

    #[test]
    fn every_token_below_the_cap_has_its_own_slot_and_the_scan_sees_it() {
        let slots = Slots::new();
        // Under Miri the last token of a small bucket, not of the largest.
        let last = crate::sized(MAX_PINNED - 1, 255);
        let tokens = [1, 2, 63, 64, 65, 66, 127, 128, 1000, last];
        for (i, &t) in tokens.iter().enumerate() {
            let s = slots.get(t).expect("a token below the cap has a slot");
            assert!(
                std::ptr::eq(s, slots.get(t).unwrap()),
                "token {t}: same slot"
            );
            s.pin.store(i as u64 + 1, Ordering::Relaxed);
        }
        for bad in [0, MAX_PINNED, u32::MAX] {
            assert!(slots.get(bad).is_none(), "token {bad} pins anonymously");
        }
        let mut seen = Vec::new();
        slots.for_each(|s| {
            let v = s.pin.load(Ordering::Relaxed);
            if v != 0 {
                seen.push(v);
            }
        });
        seen.sort_unstable();
        assert_eq!(seen, (1..=tokens.len() as u64).collect::<Vec<_>>());
    }
}
