//! How a map's own tables are freed: with the map ([`Drop`]), or, for a
//! retired slice map, handed to the collector's ready list one table at a
//! time ([`Map::take_tables`]; `limbo.rs`, "Freed in pieces"), each
//! cleared and kept as a spare when the map has spares (`spares.rs`).
//!
//! # Invariants
//! 1. The tables in a shard's `current` and `old` are the map's own: a
//!    table is handed to the collector only after it was unlinked from
//!    both (`grow.rs`), so freeing them here frees nothing twice.
//! 2. Both run with `&mut self`: no lookup is running, and no guard can
//!    reach the map (a retired map is freed by the collector only once
//!    every guard that could reach it has ended; `reclaim.rs`).

use super::spares::Spare;
use super::Map;
use crate::reclaim::Parts;
use crate::sync::Exclusive;
use crate::unwind::each_then_resume;
use std::ptr;

impl<K: Send + 'static, V: Send + 'static, S> Map<K, V, S> {
    /// Moves every table out of the map to `parts`, to be freed (or kept
    /// as spares) one at a time (`limbo.rs`, "Freed in pieces"); the map,
    /// left without tables, is only to be dropped. Called when the
    /// collector frees a retired map: no guard can reach it.
    pub(crate) fn take_tables(&mut self, parts: &mut Parts) {
        for p in self.ptrs.iter_mut() {
            for t in [&mut p.current, &mut p.old] {
                let raw = t.read_mut();
                if !raw.is_null() {
                    t.write_mut(ptr::null_mut());
                    // SAFETY: `&mut self`, and a table in `current`/`old`
                    // was never handed to the collector (as in `drop`).
                    let table = unsafe { Box::from_raw(raw) };
                    match &self.spares {
                        Some(to) => parts.push(Box::new(Spare::new(table, to))),
                        None => parts.push(table),
                    }
                }
            }
        }
    }
}

impl<K, V, S> Drop for Map<K, V, S> {
    /// Frees every table, even if a key's `Drop` panics in one of them
    /// (then the first panic goes on: `crate::unwind`).
    fn drop(&mut self) {
        let tables = self
            .ptrs
            .iter_mut()
            .flat_map(|p| [p.current.read_mut(), p.old.read_mut()]);
        each_then_resume(tables.filter(|t| !t.is_null()), |raw| {
            // SAFETY: `&mut self`: no lookup is running, and a table in
            // `current`/`old` was never handed to the collector (that
            // happens only after it is unlinked).
            drop(unsafe { Box::from_raw(raw) });
        });
    }
}
