//! What the crate does when the caller's code panics: a key's `Hash`,
//! `Eq`, `Clone` or `Drop`, a hasher, a clock, a callback.
//!
//! # The rule
//! A panic in the caller's code either leaves every structure whole (the
//! call that ran it unwinds; nothing it did is half done, nothing is
//! leaked, every bound holds) or aborts the process where no state could
//! be repaired ([`AbortOnUnwind`]); each place says which, and the
//! per-key tests (`tests/keyed_user_code.rs`, `tests/keyed_panics.rs`,
//! `tests/keyed_callbacks.rs`) drive every one with keys and callbacks
//! that panic on their N-th call, or call back.
//!
//! # Where the caller's code runs, and what a panic there does
//! - **A hasher and a key's `Hash`** (`keyed/ring.rs`, `map/mod.rs`):
//!   first, on every add, read, take and limiter request, before anything
//!   changes. The call unwinds.
//! - **A key's `Eq`** in a probe (`map/table/`): before the probe writes.
//!   In an insert's new-entry check (`map/insert.rs`, the detector's home
//!   check in `keyed/exact.rs`): before the slot's key is written; the
//!   reservation (and its `max_keys` place) is given back.
//! - **A key's `Clone`** at its first add in a slice (`map/insert.rs`):
//!   before the slot is written; the reservation is given back. In reads
//!   that return owned keys (`keyed/reads.rs`): the read changed nothing.
//! - **Aborts** ([`AbortOnUnwind`], the message says which): a `Clone` or
//!   `Hash` while a shard moves to a bigger table (`map/grow.rs`: half the
//!   keys would be in each table); an `Eq` while the detector marks a new
//!   heavy key's slices (`keyed/exact.rs`) or clears a late add's bounds
//!   (`keyed/bound.rs`): a half-marked key would stay uncounted.
//! - **A key's `Drop`**, wherever keys are dropped: a table dropped
//!   (`map/table/`), a retired table freed (`reclaim/retired.rs`), a map
//!   or a ring dropped (`map/teardown.rs`, `keyed/ring.rs`). Every other
//!   key is still dropped, then the first panic goes on.
//! - **A clock's `now()`**: before anything changes.
//! - **`take`/`take_all` callbacks** (`keyed/reads.rs`): after the counts
//!   are taken out, under no lock
//!   ([`Map::for_each_batch`](crate::map::Map::for_each_batch)), so a
//!   callback may call back into the structure; a count not yet delivered
//!   when one panics is added back (the key holds it again), never lost
//!   or doubled.
//!
//! Where the caller's code runs in a loop that must finish (dropping the
//! keys of a table, freeing the objects of a list), [`each_then_resume`]
//! runs every step and only then lets the first panic go on, as dropping
//! a `Vec` whose element panics still drops the others.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Aborts the process if dropped: held across code whose unwinding would
/// leave a state no one can repair, and forgotten once that code returns.
/// Costs nothing unless a panic unwinds through it.
pub(crate) struct AbortOnUnwind(pub(crate) &'static str);

impl Drop for AbortOnUnwind {
    #[cold]
    fn drop(&mut self) {
        eprintln!("stripecount: {}: aborting", self.0);
        std::process::abort();
    }
}

/// The first panic a loop caught, to be resumed once the loop is done.
#[derive(Default)]
pub(crate) struct FirstPanic(Option<Box<dyn Any + Send>>);

impl FirstPanic {
    /// Runs `f`; keeps its panic if it is the first.
    #[inline]
    pub(crate) fn run(&mut self, f: impl FnOnce()) {
        // `AssertUnwindSafe`: `f` is one step of the caller's loop; after a
        // panic the loop goes on with other items, which `f` did not touch.
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            self.0.get_or_insert(p);
        }
    }

    /// Resumes the panic kept, if any.
    pub(crate) fn resume(self) {
        if let Some(p) = self.0 {
            resume_unwind(p);
        }
    }
}

/// Calls `f` on every item, even if some call panics; then resumes the
/// first panic, if any (the others' payloads are dropped).
pub(crate) fn each_then_resume<T>(items: impl IntoIterator<Item = T>, mut f: impl FnMut(T)) {
    let mut first = FirstPanic::default();
    for x in items {
        first.run(|| f(x));
    }
    first.resume();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_visited_and_the_first_panic_goes_on() {
        let mut seen = Vec::new();
        let r = catch_unwind(AssertUnwindSafe(|| {
            each_then_resume(0..5, |i| {
                seen.push(i);
                if i == 1 || i == 3 {
                    std::panic::panic_any(i);
                }
            })
        }));
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(*r.unwrap_err().downcast::<i32>().unwrap(), 1);
    }
}
