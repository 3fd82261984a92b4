//! For the loom models only (`--cfg loom`; this module does not exist in
//! other builds): one key's state and its protocols, one call each, so
//! that `loom-tests/` can race them directly. Nothing here is a protocol
//! of its own; each method forwards to the code it names.

use super::hot::hot_step;
use super::map::Value;
use super::reclaim::{Graveyard, Guard};
use super::state::{Cfg, KeyState, Outcome, Read};

/// What an add did (see `state.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelAdd {
    /// Counted in the head; its count right after.
    Head(u64),
    /// Counted in the key's window (a late add, or a stripe row).
    Elsewhere,
    /// Older than the window of the key's newest add: dropped.
    TooOld,
    /// The key is dead (evicted) or moved: look it up again.
    Retry,
}

/// One key's state, as a map slot holds it, with its own collector.
pub struct ModelKey {
    st: KeyState,
    cfg: Cfg,
    graveyard: Graveyard,
}

impl ModelKey {
    /// A fresh key of `slices` slices (two stripe rows once striped).
    pub fn new(slices: usize) -> ModelKey {
        Self::prepared(slices, false)
    }

    /// A slot prepared for a key moving in (see [`ModelKey::move_into`]).
    pub fn incoming(slices: usize) -> ModelKey {
        Self::prepared(slices, true)
    }

    fn prepared(slices: usize, incoming: bool) -> ModelKey {
        let k = ModelKey {
            st: KeyState::vacant(),
            cfg: Cfg { slices, stripes: 2 },
            graveyard: Graveyard::default(),
        };
        k.st.init(&k.cfg, incoming);
        k
    }

    /// `KeyState::add`.
    pub fn add(&self, e: u64, n: u64) -> ModelAdd {
        match self.st.add(e, n, &self.cfg) {
            Outcome::Head(c) => ModelAdd::Head(c),
            Outcome::Elsewhere => ModelAdd::Elsewhere,
            Outcome::TooOld => ModelAdd::TooOld,
            Outcome::Retry => ModelAdd::Retry,
        }
    }

    /// `KeyState::try_add`, the fast path (`None`: take `add`).
    pub fn try_add(&self, e: u64, n: u64) -> Option<u64> {
        self.st.try_add(e, n)
    }

    /// `KeyState::sum` at epoch `last`; `None` if the key moved.
    pub fn sum(&self, last: u64) -> Option<u64> {
        match self.st.sum(last, &self.cfg) {
            Read::Sum(s) => Some(s),
            Read::Moved => None,
        }
    }

    /// An add followed by the hot rule's step (`hot.rs`): `Some(after)` if
    /// this add made the key hot. A move during the step reads as `None`.
    pub fn hot_add(&self, e: u64, n: u64, threshold: u64) -> Option<u64> {
        let o = self.st.add(e, n, &self.cfg);
        // A move during the step (`Err(Moved)`) reads as `None`.
        hot_step(&self.st, o, e, n, threshold, &self.cfg).unwrap_or_default()
    }

    /// `KeyState::try_retire` at epoch `now` (as a sweep would, holding the
    /// shard lock); `true` if the key is dead now.
    pub fn retire(&self, now: u64) -> bool {
        let guard = Guard::pin(&self.graveyard);
        self.st.try_retire(now, &self.cfg, &guard, &self.graveyard)
    }

    /// `KeyState::move_into` (as a table rebuild would, holding the lock).
    pub fn move_into(&self, to: &ModelKey) {
        let guard = Guard::pin(&self.graveyard);
        self.st
            .move_into(&to.st, &self.cfg, &guard, &self.graveyard);
    }

    /// `KeyState::take`: the total taken (as a flush would, holding the
    /// shard lock).
    pub fn take(&self) -> u64 {
        let mut total = 0;
        self.st.take(&self.cfg, &mut |_, c| total += c);
        total
    }

    /// Gives the key its stripe rows as if it had seen contention (loom
    /// cannot force a failed CAS).
    pub fn stripe(&self) {
        self.st.stripe(&self.cfg);
    }

    /// The filter bound `up` (see `state.rs`).
    pub fn up(&self) -> u64 {
        self.st.up_synced()
    }

    /// Whether the key was evicted.
    pub fn is_dead(&self) -> bool {
        self.st.is_dead()
    }

    /// Whether adds go to stripe rows.
    pub fn is_striped(&self) -> bool {
        self.st.is_striped()
    }

    /// Whether the slot still waits for a moved key's state.
    pub fn is_incoming(&self) -> bool {
        self.st.is_incoming()
    }
}
