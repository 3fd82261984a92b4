//! A per-key limiter's map slot: an [`AdmissionState`] held **inline** in a
//! slot of the per-key map (`crate::map`, the engine
//! [`KeyedWindows`](crate::KeyedWindows) runs on), with the owner protocol
//! of `src/limiter/lifecycle.rs` as the map's [`Value`]. No second per-key
//! store: a key's slot is its key and these 24 bytes.
//!
//! # The slot's life
//! - **Vacant** (every slot of a new table): `pending()`; it is never reused
//!   after its key is removed (`map/table/`, invariant 1).
//! - **New key** (`init`, not incoming): under the shard lock and before the
//!   slot is published, `start` at the *floor* epoch (below); the control
//!   byte's release store publishes it.
//! - **Moving in** (`init` incoming, then `move_into` from the old slot, both
//!   under the shard lock): the new slot stays `pending()` until
//!   `copy_into` (seal the old state, copy, `epoch` last) makes it live.
//!   Requests that meet the sealed old state or the pending new one are
//!   told `Refused::Sealed` and look the key up again (`acquire.rs`); the
//!   mover finishes each key's copy right after publishing its slot, so the
//!   wait is one copy long.
//! - **Eviction** (`try_retire`, under the shard lock, by the rolling sweep
//!   or by an insert into a full map): check idle at the sweep's time `t`,
//!   seal, check idle **again**. Idle: the state is dead and the map removes
//!   its slot in the same lock hold; a request still holding the slot is
//!   told `Sealed`, looks the key up again, finds it absent and inserts it
//!   afresh (at the floor). A grant that
//!   slipped in between the first check and the seal is in the sealed
//!   state: the key is live, its state closed for good, and it *must move*
//!   (`must_move`): the sweep rebuilds the shard before releasing the lock,
//!   which copies it into a fresh, open slot (`keyed/map/`). Nothing is lost.
//!
//! # The floor (time never runs backwards for a key)
//! An evicted key forgets its grants; its next state must not judge a
//! request in a window that still held them. Every eviction raises
//! `floor` to the newest epoch it judged idleness at (the sweep's, or the
//! state's own if later) before it returns, under the shard lock; a new
//! key's state starts at `floor`, read under the same shard's lock. So a
//! request stamped before an eviction's time is judged at that time, where
//! the evicted window is empty. (The floor is shared by all keys: a key
//! never seen before also starts there, which only moves its first grant's
//! slice forward, never over-admits.)
//!
//! # Invariants
//! 1. A `FULL` slot's state is live, or sealed for good while the shard
//!    lock is held (an eviction in progress, or a key that must move), or
//!    pending while the lock is held (a move in progress). When the lock
//!    is free every `FULL` slot of a `current` table is live.
//! 2. A state is dropped only with its table, freed through the collector
//!    (`reclaim.rs`) after every request that could hold it has finished.
//! 3. No grant is ever made on a sealed or pending state (`lifecycle.rs`),
//!    and a live state's count includes every grant its key ever had within
//!    its window (a move copies the sealed count; an eviction happens only
//!    when that count is zero in every window at or after `floor`).

use crate::limiter::config::Config;
use crate::limiter::state::AdmissionState;
use crate::map::Value;
use crate::reclaim::Guard;
use crate::sync::{AtomicU64, Ordering};

/// What every slot of one per-key limiter shares: the admission states'
/// [`Config`] and the eviction floor (module docs).
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    /// The newest epoch any eviction judged idleness at.
    floor: AtomicU64,
}

impl Shared {
    pub(crate) fn new(cfg: Config) -> Shared {
        Shared {
            cfg,
            floor: AtomicU64::new(0),
        }
    }

    /// The time (ns) at which finest epoch `e` starts: where the map's
    /// epochs become a state's `now`.
    #[inline]
    fn start_of(&self, e: u64) -> u64 {
        e.saturating_mul(self.cfg.slice_nanos())
    }
}

impl Value for AdmissionState {
    type Cfg = Shared;

    fn vacant() -> Self {
        AdmissionState::pending()
    }

    fn init(&self, sh: &Shared, incoming: bool) {
        if !incoming {
            // Under the shard lock, as every eviction of this shard's keys:
            // the floor read here is at least any of theirs.
            self.start(&sh.cfg, sh.floor.load(Ordering::Acquire));
        }
        // Incoming: the slot stays pending until `move_into` copies.
    }

    fn move_into(&self, to: &Self, sh: &Shared, _: &Guard<'_>) {
        let copied = self.copy_into(&sh.cfg, to);
        debug_assert!(copied, "invariant 1: a FULL slot is never pending here");
    }

    fn try_retire(&self, now: u64, sh: &Shared, _: &Guard<'_>) -> bool {
        let cfg = &sh.cfg;
        let t = sh.start_of(now);
        if !self.is_idle_at(cfg, t) {
            return false; // the cheap pre-filter: nothing is closed
        }
        self.seal(cfg);
        // Sealed: the state is final, and so is this answer.
        if !self.is_idle_at(cfg, t) {
            return false; // a grant slipped in: `must_move`
        }
        sh.floor.fetch_max(self.newest(cfg, t), Ordering::AcqRel);
        true
    }

    fn is_dead(&self) -> bool {
        // A retired state's slot is removed in the lock hold that retired
        // it: no `FULL` slot holds one when the lock is free (invariant 1).
        false
    }

    fn must_move(&self) -> bool {
        self.is_sealed()
    }

    fn heap_bytes(&self, sh: &Shared) -> usize {
        AdmissionState::heap_bytes(self, &sh.cfg)
    }
}
