//! What the per-key map needs from the state each slot holds inline.

use crate::reclaim::Guard;

/// What the map needs from the per-key state it holds inline.
pub(crate) trait Value: Send + Sync + 'static {
    /// The per-map settings the state's operations need.
    type Cfg: Send + Sync;

    /// The state of a slot that holds no key (every slot starts so).
    fn vacant() -> Self;

    /// Whether [`vacant`](Self::vacant) is all zero bytes, so that tables
    /// can take zeroed memory instead of writing every slot (only outside
    /// loom, whose atomics are not plain memory).
    #[cfg_attr(loom, allow(dead_code))]
    const ZEROED_VACANT: bool = false;

    /// Prepares a vacant slot's state before its key is published: for a
    /// new key, or (`incoming`) for a key whose state is moving in from
    /// another table.
    fn init(&self, cfg: &Self::Cfg, incoming: bool);

    /// Moves the state of `self` (in the table being replaced) into `to`
    /// (already published and prepared with `incoming`). Closes `self` to
    /// writers first; a writer that finds `self` closed looks the key up
    /// again. Runs under the shard lock.
    fn move_into(&self, to: &Self, cfg: &Self::Cfg, guard: &Guard<'_>);

    /// Retires the state if the key is idle at epoch `now`: `true` if it
    /// is now dead (the map then removes its slot). Runs under the shard
    /// lock.
    fn try_retire(&self, now: u64, cfg: &Self::Cfg, guard: &Guard<'_>) -> bool;

    /// Whether the state was retired (an add that finds it so inserts the
    /// key afresh).
    fn is_dead(&self) -> bool;

    /// Whether a [`try_retire`](Value::try_retire) that returned `false`
    /// left the state closed to writers although the key is live (a write
    /// slipped in after its idle check), so that the key must be moved to a
    /// fresh slot: the sweep then rebuilds the shard (see "Bounds and
    /// eviction"). Under the shard lock.
    fn must_move(&self) -> bool {
        false
    }

    /// Heap bytes the state holds outside its slot.
    fn heap_bytes(&self, cfg: &Self::Cfg) -> usize;
}
