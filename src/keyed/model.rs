//! For the loom models only (`--cfg loom`; this module does not exist in
//! other builds): one key's entry in one slice (`entry.rs`), one call
//! each, so that `loom-tests/` can race its protocols directly. Nothing
//! here is a protocol of its own; each method forwards to the code it
//! names.

use super::entry::{Add, Entry};

/// An entry, as a slice map's slot holds it.
pub struct ModelEntry(Entry);

impl ModelEntry {
    /// A fresh entry of a new key.
    pub fn new() -> ModelEntry {
        Self::prepared(false)
    }

    /// A slot prepared for a key moving in (see [`ModelEntry::move_into`]).
    pub fn incoming() -> ModelEntry {
        Self::prepared(true)
    }

    fn prepared(incoming: bool) -> ModelEntry {
        let e = Entry::vacant();
        e.init(incoming);
        ModelEntry(e)
    }

    /// `Entry::try_add`, the fast path, then `Entry::add` if it declined
    /// (as `KeyedWindows::add_in` does): `false` if the entry moved.
    pub fn add(&self, n: u64) -> bool {
        if self.0.try_add(n).is_some() {
            return true;
        }
        self.0.add(n) != Add::Moved
    }

    /// `Entry::read`: the count, `None` if the entry moved.
    pub fn read(&self) -> Option<u64> {
        self.0.read()
    }

    /// `Entry::take` (as a flush, under the shard lock).
    pub fn take(&self) -> u64 {
        self.0.take()
    }

    /// `Entry::stripe` (a model cannot force a failed CAS).
    pub fn stripe(&self) {
        self.0.stripe()
    }

    /// Whether adds go to stripes.
    pub fn is_striped(&self) -> bool {
        self.0.is_striped()
    }

    /// `Entry::move_into` (as a table rebuild, under the shard lock).
    pub fn move_into(&self, to: &ModelEntry) {
        self.0.move_into(&to.0)
    }
}

impl Default for ModelEntry {
    fn default() -> Self {
        Self::new()
    }
}

/// The fixed-memory detector's doorkeeper (`doorkeeper.rs`).
pub struct ModelDoorkeeper(super::doorkeeper::Doorkeeper);

impl ModelDoorkeeper {
    /// A doorkeeper of one word (every key shares it) admitting at `level`.
    pub fn new(level: u64) -> ModelDoorkeeper {
        ModelDoorkeeper(super::doorkeeper::Doorkeeper::new(8, 1, level))
    }

    /// `Doorkeeper::admit`: whether an add of `n` at `epoch` is admitted.
    pub fn admit(&self, hash: u64, epoch: u64, n: u64) -> bool {
        self.0.admit(hash, epoch, n)
    }
}
