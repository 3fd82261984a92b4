//! A thread's memo of the last refusal walk it made on a direct limiter
//! ([`Walk`]), so that a limiter refusing every request of a slice walks its
//! window once per slice and thread, not once per request.
//!
//! # Why it is exact
//! A single-limit refusal at epoch `E` with a history block reads the
//! recorded counts of `E`'s window (`view.rs`, `LevelView::walk`): their
//! total `P(E)`, the oldest slice by which `need` units have left, the
//! newest slice with a count. These are facts of `E`'s window that never
//! change: the slices before `E` are final when the state opens `E`
//! (`roll.rs`), and a state's epochs only increase, so `E` names one window
//! for the state's whole life. The memo therefore keeps a walk under the
//! limiter's identity, `E` and `need`, and a hit is the walk that would be
//! made now. A limiter's identity is a number drawn once from a counter
//! ([`next_id`]), never an address (a new limiter may sit where a dropped
//! one was). Only a walk checked against the state after it was made (the
//! state still held `E`, `decide.rs`) is kept.
//!
//! # Cost
//! One entry per thread, no allocation, no shared write: a thread-local
//! read and three compares on a hit; a miss walks as without the memo and
//! writes the entry. The per-key limiter does not use it: its refusals
//! rarely repeat on one key within a slice, and its states move.

use super::view::Walk;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// A memo entry: a walk and what it was made for.
#[derive(Clone, Copy)]
struct Entry {
    id: u64,
    epoch: u64,
    need: u64,
    walk: Walk,
}

thread_local! {
    /// This thread's last walk (`id` 0: none; identities start at 1).
    static LAST: Cell<Entry> = const {
        Cell::new(Entry {
            id: 0,
            epoch: 0,
            need: 0,
            walk: Walk {
                recorded: 0,
                fits: None,
                newest: None,
            },
        })
    };
}

/// Identities handed out so far. A plain std atomic even under loom: it
/// orders nothing, and every limiter of a model gets its own number.
static IDS: AtomicU64 = AtomicU64::new(1);

/// A new limiter's identity: never 0, never handed out twice (2^64 of them).
pub(crate) fn next_id() -> u64 {
    IDS.fetch_add(1, Ordering::Relaxed)
}

/// The walk this thread made for limiter `id` at epoch `e`, for `need`
/// units.
#[inline]
pub(crate) fn get(id: u64, e: u64, need: u64) -> Option<Walk> {
    LAST.try_with(|m| {
        let x = m.get();
        (x.id == id && x.epoch == e && x.need == need).then_some(x.walk)
    })
    .ok()
    .flatten()
}

/// Keeps `walk`, made for limiter `id` at epoch `e` and `need` units, as
/// this thread's last.
#[inline]
pub(crate) fn put(id: u64, e: u64, need: u64, walk: Walk) {
    let entry = Entry {
        id,
        epoch: e,
        need,
        walk,
    };
    let _ = LAST.try_with(|m| m.set(entry));
}
