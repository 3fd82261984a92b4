//! Hints for a batch of lookups (`crate::keyed::batch`): start fetching,
//! for each key of a group, the control word its lookup will read first
//! ([`Map::prefetch_ctrl`]), then, once those are on their way, the slot
//! the word names ([`Map::prefetch`], in `mod.rs`), so that the group's
//! misses overlap instead of following each other. Hints only: nothing
//! here changes a state or a result.

use super::{Map, Value};
use crate::reclaim::Guard;
use crate::sync::Ordering;
use std::hash::{BuildHasher, Hash};

impl<K, V, S> Map<K, V, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: BuildHasher,
{
    /// Starts fetching the control word a lookup of `hash` reads first, in
    /// the shard's current table (`Table::prefetch_ctrl`): one load of
    /// the shard's table pointer (a small array every lookup reads), no
    /// load of the table's own words.
    #[inline]
    pub(crate) fn prefetch_ctrl(&self, hash: u64, _guard: &Guard<'_>) {
        let cur = self.ptrs[self.shard(hash)].current.load(Ordering::Acquire);
        // SAFETY: a non-null table pointer loaded under a guard stays valid
        // until the guard is dropped (tables are freed through the
        // collector: `mod.rs`, invariant 1).
        if let Some(t) = unsafe { cur.as_ref() } {
            t.prefetch_ctrl(hash);
        }
    }
}
