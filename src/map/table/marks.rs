//! What a walk needs of a table (`map/walk.rs`): which slots are `FULL`
//! at its start, the slots still `FULL` of those later, and whether a
//! value found by a lookup is still in a `FULL` slot of the table. Each
//! rests on invariant 1 of `mod.rs`: a slot is never reused, so a slot
//! `FULL` at two moments held the same key in between.

use super::ctrl::{first, full_mask, is_full};
use super::{Slot, Table, GROUP};
use crate::sync::Ordering;

impl<K, V> Table<K, V> {
    /// Appends, per control group, the high bit of every `FULL` byte (a
    /// walk's marks, `map/walk.rs`). Under the shard lock, so that no slot
    /// changes state meanwhile.
    pub(crate) fn full_bits(&self, into: &mut Vec<u64>) {
        into.extend(
            self.ctrl
                .iter()
                .map(|w| full_mask(w.load(Ordering::Acquire))),
        );
    }

    /// Calls `f` on every slot that is `FULL` now and whose bit is set in
    /// `marks` (this table's [`full_bits`](Self::full_bits) of an earlier
    /// moment): the keys held then and still held, each once (a slot is
    /// never reused, invariant 1).
    pub(crate) fn for_each_marked<'t>(&'t self, marks: &[u64], mut f: impl FnMut(&'t Slot<K, V>)) {
        debug_assert_eq!(marks.len(), self.ctrl.len());
        for (g, (word, &marked)) in self.ctrl.iter().zip(marks).enumerate() {
            let mut m = marked & full_mask(word.load(Ordering::Acquire));
            while m != 0 {
                f(&self.slots[g * GROUP + first(m)]);
                m &= m - 1;
            }
        }
    }

    /// Whether `v` is the value of one of this table's slots and that slot
    /// is `FULL` now (so the key it was found with is still there: a slot
    /// is never reused, invariant 1). Only addresses are compared.
    pub(crate) fn holds(&self, v: &V) -> bool {
        let size = std::mem::size_of::<Slot<K, V>>();
        let base = self.slots.as_ptr() as usize;
        let at = v as *const V as usize;
        if size == 0 || at < base || at >= base + self.slots.len() * size {
            return false;
        }
        let i = (at - base) / size;
        let (g, b) = (i / GROUP, i % GROUP);
        std::ptr::eq(&self.slots[i].value, v)
            && is_full(self.ctrl[g].load(Ordering::Acquire).to_ne_bytes()[b])
    }
}
