//! Batches: the `add_many` methods of [`KeyedWindows`], [`HotKeyDetector`]
//! and [`HotKeySketch`], and the runner they share with
//! `KeyedLimiter::try_acquire_many` (`src/limiter/keyed/batch.rs`).
//!
//! # Why
//! One key at a time waits on memory: on a large map a cold key's lookup
//! misses the cache on its control word and on its slot, and nothing else
//! happens meanwhile. A caller with many keys at hand (a log or stream
//! processor, the `hotkeys` command, a batch of requests) lets us start the
//! misses of several keys before waiting on any of them.
//!
//! # How ([`in_groups`])
//! Items are taken from the caller's iterator [`GROUP`] at a time. For
//! each group:
//! 1. pull and hash every item (the key's `Hash`; an item its single call
//!    would not hash, such as an add of 0, is not hashed);
//! 2. pin one guard, find the slice's map once (the batch has one time),
//!    load every item's shard table pointers and start fetching its
//!    control word, then every item's slot (`crate::map`'s prefetch
//!    hints: they change nothing);
//! 3. apply every item in order, each through the engine of its single
//!    call, with its hash, the map and its shard's tables already found
//!    (a lookup whose pointers were loaded in step 2, `map/prefetch.rs`).
//!
//! # Invariants: the single calls, in order
//! - Each item is applied by its single call's own path (one add, one
//!   grant, one hot-rule step), in the order the iterator gives, at the
//!   batch's time: nothing is merged, reordered or skipped, so every other
//!   thread sees what the single calls one after the other would show, and
//!   the batch's results are theirs.
//! - Only *when* the caller's code runs differs: a group's items are pulled
//!   and hashed before any of them is applied. A panic there (the
//!   iterator's `next`, a key's `Hash`) is caught, the items pulled before
//!   it are applied (their single calls came first), then the panic goes
//!   on: what came before the panicking item happened, once, and nothing
//!   after it did. A panic while applying (a key's `Eq`, the caller's
//!   callback) leaves the items before it applied and the rest not
//!   started, as the single calls would. A second panic while the items
//!   before a caught one are applied is what the single calls would have
//!   raised first: it goes on, and the caught one is dropped.
//! - A guard is held for one group at most: nothing found under it (a
//!   map, an entry) is used in the next group.
//!
//! [`KeyedWindows`]: super::KeyedWindows
//! [`HotKeyDetector`]: super::HotKeyDetector
//! [`HotKeySketch`]: super::HotKeySketch

use super::entry::Entry;
use super::slice_map::SliceMap;
use crate::map::{Ahead, Map, Value};
use crate::reclaim::Guard;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Items a group holds: enough misses in flight to fill the memory
/// system's queues (a core tracks 10-20 misses at once), few enough that a
/// group's lines are still in the cache when it is applied.
pub(crate) const GROUP: usize = 16;

/// One item of a group: its key, its count and its hash (0 if its single
/// call does not hash it).
pub(crate) struct Item<'a, Q: ?Sized> {
    pub(crate) key: &'a Q,
    pub(crate) n: u64,
    pub(crate) hash: u64,
}

impl<Q: ?Sized> Clone for Item<'_, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q: ?Sized> Copy for Item<'_, Q> {}

/// Runs a batch (see the module docs): `items` in groups of up to
/// [`GROUP`], each item hashed by `hash(key, n)`, then each group handed
/// whole to `apply`, in order. A panic while a group is pulled and hashed
/// applies the items pulled before it, then goes on.
#[inline]
pub(crate) fn in_groups<'a, Q, I>(
    items: I,
    hash: impl Fn(&Q, u64) -> u64,
    mut apply: impl FnMut(&[Item<'a, Q>]),
) where
    Q: ?Sized + 'a,
    I: IntoIterator<Item = (&'a Q, u64)>,
{
    let mut it = items.into_iter();
    loop {
        // The group's first item: a panic here comes before anything of
        // the group was pulled, so it simply goes on.
        let Some((key, n)) = it.next() else {
            return;
        };
        let first = Item {
            key,
            n,
            hash: hash(key, n),
        };
        let mut buf = [first; GROUP];
        let mut len = 1;
        let pulled = catch_unwind(AssertUnwindSafe(|| {
            while len < GROUP {
                let Some((key, n)) = it.next() else {
                    return false;
                };
                buf[len] = Item {
                    key,
                    n,
                    hash: hash(key, n),
                };
                len += 1;
            }
            true
        }));
        match pulled {
            Ok(more) => {
                apply(&buf[..len]);
                if !more {
                    return;
                }
            }
            Err(panic) => {
                apply(&buf[..len]);
                resume_unwind(panic);
            }
        }
    }
}

/// Starts fetching what the lookups of a group's items in `m` will read:
/// every control word first, then every slot the words name, so that the
/// group's misses overlap; returns each item's [`Ahead`] (its shard's
/// table pointers, loaded once), for its lookup
/// ([`Map::lookup_ahead`](crate::map::Map::lookup_ahead)). Items of
/// `n == 0` are not looked up ([`Ahead::NONE`]).
#[inline(always)]
pub(crate) fn prefetch<'g, K, S, Q: ?Sized>(
    m: &'g SliceMap<K, S>,
    group: &[Item<'_, Q>],
    guard: &'g Guard<'g>,
) -> [Ahead<'g, K, Entry>; GROUP]
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    S: std::hash::BuildHasher,
{
    prefetch_map(&m.map, group, guard, false)
}

/// [`prefetch`] on any map (the limiter's states, `limiter/keyed/batch.rs`),
/// items of `n == 0` included if `all` (the limiter looks up every
/// request whose single call would).
#[inline(always)]
pub(crate) fn prefetch_map<'g, K, V, S, Q: ?Sized>(
    map: &'g Map<K, V, S>,
    group: &[Item<'_, Q>],
    guard: &'g Guard<'g>,
    all: bool,
) -> [Ahead<'g, K, V>; GROUP]
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Value,
    S: std::hash::BuildHasher,
{
    let mut ahead = [Ahead::NONE; GROUP];
    for (a, it) in ahead.iter_mut().zip(group) {
        if all || it.n != 0 {
            *a = map.prefetch_ctrl(it.hash, guard);
        }
    }
    for (a, it) in ahead.iter().zip(group) {
        if all || it.n != 0 {
            map.prefetch_slot(a, it.hash);
        }
    }
    ahead
}
