//! Prefetching a lookup's slots (`Table::prefetch_group`, used by `find`),
//! the slot a later read will want (`Table::prefetch`, used by
//! `KeyedWindows::read_in` and by batches) and the control word a later
//! lookup will read (`Table::prefetch_ctrl`, the first step of a batch).
//! Hints only: they change no state and no result, only when the lines
//! arrive (why and what it gained: at
//! [`Table::prefetch_group`]).

use super::ctrl::GROUP;
use super::{Slot, Table};
use crate::map::lines::LINE;
#[cfg(not(loom))]
use {
    super::ctrl::{first, h2, matches},
    crate::sync::Ordering,
};

/// The most lines of a group's slots a lookup prefetches
/// ([`Table::prefetch_group`]): all of them with 32-byte slots.
const PREFETCH_LINES: usize = 4;

impl<K, V> Table<K, V> {
    /// Starts fetching the slots of group `g` (up to [`PREFETCH_LINES`]
    /// lines, from its first slot: inserts fill a group from its first
    /// slot), before its control word is read.
    ///
    /// A lookup reads the control word, then the slot it names: two
    /// dependent loads. On a large table both miss the L2 (a 1M-key
    /// map's control bytes are 1.7 MB; its slots over 40 MB), so
    /// without this the slot's miss starts only when the control word's
    /// has ended. Fetching the group's lines alongside overlaps the two.
    /// On the benchmarks' Zipf stream (1M keys, one thread, steady state)
    /// that took `KeyedLimiter`'s grant from 80.9 to 61.6 ns and
    /// `KeyedWindows`'s add from 57.1 to 45.9 ns (medians of five
    /// alternating runs, BENCHMARKS.md: a lookup prefetches its group's
    /// slots), for up to 3 lines a lookup
    /// fetches and does not use; a key past its first group gains nothing.
    /// A hint: it changes nothing.
    #[inline(always)]
    pub(super) fn prefetch_group(&self, g: usize) {
        let first = self.slots.as_ptr().wrapping_add(g * GROUP).cast::<u8>();
        let bytes = GROUP * std::mem::size_of::<Slot<K, V>>();
        for line in 0..bytes.div_ceil(LINE).min(PREFETCH_LINES) {
            // `wrapping_add`: an address, never dereferenced here.
            crate::sync::prefetch(first.wrapping_add(line * LINE));
        }
    }

    /// Starts fetching the control word of the group a lookup of `hash`
    /// reads first, without reading anything of the table but its length:
    /// the first step of a batch (`crate::keyed::batch`), which issues it
    /// for a group of keys before any of them waits, then
    /// [`prefetch`](Self::prefetch)es each key's slot from the word. A
    /// hint: it changes nothing.
    #[inline]
    pub(crate) fn prefetch_ctrl(&self, hash: u64) {
        let g = self.home(hash);
        // `wrapping_add`: an address, never dereferenced here (`g < n`).
        crate::sync::prefetch(self.ctrl.as_ptr().wrapping_add(g));
    }

    /// Starts fetching the line of the slot a lookup of `hash` most likely
    /// ends at: the first tag match in its first group (or that group's
    /// last slot). Branch-free on the loaded control word, so that calls on
    /// several tables in a row overlap their misses (`KeyedWindows::read_in`
    /// reads one key in every slice). A hint: it changes nothing.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let g = self.home(hash);
        // SAFETY: `g < n`, the group count (`home`).
        let group = unsafe { self.ctrl.get_unchecked(g) }.load(Ordering::Relaxed);
        let i = g * GROUP + first(matches(group, h2(hash))).min(GROUP - 1);
        // The slot's address, computed without a bounds check or a branch
        // (`i < n * GROUP`; `wrapping_add` keeps it defined regardless).
        let p = self.slots.as_ptr().wrapping_add(i);
        crate::sync::prefetch(p);
    }
}
