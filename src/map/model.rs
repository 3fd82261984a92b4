//! For the loom models only (`--cfg loom`; this module does not exist in
//! other builds): a [`Map`] whose guards pin the real collector
//! ([`Graveyard::collecting`]), so that `loom-tests/tests/map_reclaim.rs`
//! can race lock-free lookups against the changes of structure that
//! retire a table (a move to a bigger table, a sweep that rebuilds) and
//! against the inserts that free retired tables. Nothing here is a
//! protocol of its own: each method forwards to the code it names.
//!
//! # A freed table is seen
//! A table's destructor takes its control words exclusively
//! (`Exclusive::read_mut`, loom's `with_mut`), and loom reports one that
//! is not ordered after every load of them: a free racing a probe of the
//! control words. A lookup also reads keys and values, which the
//! destructor does not touch that way, so each key and each slot's value
//! holds a *canary*, a loom `UnsafeCell` made with it, read by every
//! lookup that compares the key or reads the value ([`Probe::read`]), and
//! written by its destructor. Loom reports a write not ordered after a
//! read of the cell, and a read not ordered after its last write: a table
//! freed while a guard that reached it is alive fails the model. A
//! value's canary is also written when the value is prepared for a key
//! ([`Value::init`]), so a slot written while a lookup can read it fails
//! too. (A lookup that runs entirely after such a free reads freed
//! memory: loom reports it while the memory still holds the cell, and
//! otherwise the lookup misreads, e.g. misses a key present throughout;
//! either way the model fails.)
//!
//! # Keys and shards
//! Key `k` hashes to `k << 32`: shard `k % 2` (the map has two shards
//! under loom), control byte 0, probe from group 0. So a model picks the
//! shard of each key, and every key of a shard is compared by a lookup
//! that passes its slot.

use super::{Map, Value, SHARDS};
use crate::reclaim::{Graveyard, Guard};
use crate::sync::{AtomicU64, Ordering};
use loom::cell::UnsafeCell;
use std::hash::{BuildHasher, Hash, Hasher};

/// What a canary holds while its key or value is alive.
const LIVE: u64 = 1;
/// What a destructor writes.
const FREED: u64 = 0;

/// A loom cell read by lookups and written when its owner is made,
/// prepared or dropped (module docs).
struct Canary(UnsafeCell<u64>);

// SAFETY: loom checks every access to the cell: a read and a write that
// are not ordered fail the model, which is what the cell is for.
unsafe impl Sync for Canary {}

impl Canary {
    fn new() -> Canary {
        Canary(UnsafeCell::new(LIVE))
    }

    /// Reads the cell; panics if it holds [`FREED`].
    fn check(&self) {
        // SAFETY: loom tracks the access (the type's docs).
        let v = self.0.with(|p| unsafe { *p });
        assert_eq!(v, LIVE, "read a freed table");
    }

    /// Writes the cell (a value prepared for a key).
    fn renew(&self) {
        // SAFETY: as in `check`.
        self.0.with_mut(|p| unsafe { *p = LIVE });
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        // A table freed as a failed model unwinds: loom has reported.
        if std::thread::panicking() {
            return;
        }
        // SAFETY: as in `check`.
        self.0.with_mut(|p| unsafe { *p = FREED });
    }
}

/// A model's key: a number and a canary (a clone, as a move makes, has
/// a canary of its own).
pub struct Key {
    k: u32,
    canary: Canary,
}

impl Key {
    fn new(k: u32) -> Key {
        Key {
            k,
            canary: Canary::new(),
        }
    }

    /// A lookup's comparison: reads the canary, then the number.
    fn is(&self, k: u32) -> bool {
        self.canary.check();
        self.k == k
    }
}

impl Clone for Key {
    fn clone(&self) -> Key {
        self.canary.check();
        Key::new(self.k)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.k == other.k
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.k.hash(state);
    }
}

/// Hashes key `k` to `k << 32` (module docs).
#[derive(Clone, Copy, Default)]
pub struct ByKey;

/// [`ByKey`]'s hasher.
pub struct ByKeyHasher(u64);

impl Hasher for ByKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("keys hash as a u32")
    }

    fn write_u32(&mut self, k: u32) {
        self.0 = u64::from(k) << 32;
    }
}

impl BuildHasher for ByKey {
    type Hasher = ByKeyHasher;

    fn build_hasher(&self) -> ByKeyHasher {
        ByKeyHasher(0)
    }
}

/// A slot's value: its state word and a canary.
pub struct Probe {
    word: AtomicU64,
    canary: Canary,
}

// A [`Probe`]'s states: a live key's; prepared for a key moving in;
// closed by a move; retired by a sweep; closed by a sweep's retire that
// found the key live (it must move, `Value::must_move`).
const OPEN: u64 = 0;
const INCOMING: u64 = 1;
const MOVED: u64 = 2;
const DEAD: u64 = 3;
const CLOSED: u64 = 4;

impl Probe {
    /// Reads the value as a lookup that found it does: the canary, then
    /// the state word.
    pub fn read(&self) -> u64 {
        self.canary.check();
        self.word.load(Ordering::Acquire)
    }
}

impl Value for Probe {
    type Cfg = ();

    fn vacant() -> Probe {
        Probe {
            word: AtomicU64::new(OPEN),
            canary: Canary::new(),
        }
    }

    fn init(&self, _: &(), incoming: bool) {
        self.canary.renew();
        let w = if incoming { INCOMING } else { OPEN };
        self.word.store(w, Ordering::Relaxed);
    }

    fn move_into(&self, to: &Probe, _: &(), _: &Guard<'_>) {
        let w = self.word.swap(MOVED, Ordering::AcqRel);
        let w = if w == CLOSED { OPEN } else { w };
        to.word.store(w, Ordering::Release);
    }

    /// Every open key is idle; a closed one was found live (module docs
    /// of `sweep.rs`): it stays, and must move.
    fn try_retire(&self, _: u64, _: &(), _: &Guard<'_>) -> bool {
        self.word
            .compare_exchange(OPEN, DEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn is_dead(&self) -> bool {
        self.word.load(Ordering::Acquire) == DEAD
    }

    fn must_move(&self) -> bool {
        self.word.load(Ordering::Acquire) == CLOSED
    }

    fn heap_bytes(&self, _: &()) -> usize {
        0
    }
}

/// A map of [`Key`]s and [`Probe`]s and the graveyard its guards pin on,
/// which runs the real collector.
pub struct ModelMap {
    map: Map<Key, Probe, ByKey>,
    graveyard: Graveyard,
}

/// A guard pinned on a [`ModelMap`]'s graveyard.
pub struct Pinned<'m>(Guard<'m>);

impl ModelMap {
    /// An empty map of two shards.
    #[allow(clippy::new_without_default)]
    pub fn new() -> ModelMap {
        ModelMap {
            map: Map::with_shards(ByKey, SHARDS),
            graveyard: Graveyard::collecting(),
        }
    }

    /// `Guard::pin`: pins the calling thread.
    pub fn pin(&self) -> Pinned<'_> {
        Pinned(Guard::pin(&self.graveyard))
    }

    /// `Map::get_or_insert`: frees one ready table (`Graveyard::free_one`),
    /// then inserts key `k` if it is absent, moving its shard to a bigger
    /// table if the current one is full. Whether `k` was inserted.
    pub fn insert(&self, k: u32, guard: &Pinned<'_>) -> bool {
        let hash = self.map.hash(&k);
        let is = |key: &Key| key.is(k);
        let make = || (Key::new(k), ());
        self.map
            .upsert(
                hash,
                is,
                crate::map::Miss::NONE,
                make,
                &(),
                0,
                &guard.0,
                |_, ()| {},
                |_, inserted| inserted,
            )
            .expect("an unbounded map")
    }

    /// `Map::get`: key `k`'s value, looked up lock-free.
    pub fn get<'g>(&'g self, k: u32, guard: &'g Pinned<'g>) -> Option<&'g Probe> {
        self.map.get(self.map.hash(&k), |key| key.is(k), &guard.0)
    }

    /// `Map::remove_if`, agreeing: removes key `k` (its slot turns `TOMB`).
    pub fn remove(&self, k: u32) -> bool {
        self.map
            .remove_if(self.map.hash(&k), |key| key.is(k), |_| true)
    }

    /// Closes key `k`'s value, as a sweep's retire leaves a key it closed
    /// and then found live (`Value::must_move`): the next sweep of its
    /// shard rebuilds the shard.
    pub fn close(&self, k: u32) {
        let closed = self.map.with_locked(
            self.map.hash(&k),
            |key| key.is(k),
            |v| v.word.store(CLOSED, Ordering::Release),
        );
        assert!(closed.is_some(), "key {k} is held");
    }

    /// `Map::evict_idle`: sweeps every shard (removing the open keys, and
    /// rebuilding a shard that holds a closed one). How many were removed.
    pub fn evict_idle(&self, guard: &Pinned<'_>) -> usize {
        self.map.evict_idle(0, &(), &guard.0)
    }

    /// `Map::rebuild_shard`: moves every key of key `k`'s shard to a new
    /// table, as an insert into a full table would.
    pub fn rebuild(&self, k: u32, guard: &Pinned<'_>) {
        self.map.rebuild_shard(self.map.hash(&k), &(), &guard.0);
    }

    /// A walk (`walk.rs`): `Map::mark_all`, then `Map::for_each_batch`
    /// over the marks, reading each value ([`Probe::read`]). The keys it
    /// visited, in the order visited; panics if it read a value that is
    /// not a live key's (one moved out, or still moving in).
    pub fn walk(&self) -> Vec<u32> {
        self.walk_with(|| {})
    }

    /// [`walk`](Self::walk), calling `between` between the mark and the
    /// visits (a model's move after the mark, on the walking thread).
    pub fn walk_with(&self, between: impl FnOnce()) -> Vec<u32> {
        let g = self.pin();
        let marks = Map::mark_all(&[&self.map], &[0], &g.0).pop().unwrap();
        between();
        let mut seen = Vec::new();
        self.map.for_each_batch(
            &marks,
            &g.0,
            |v| Some(v.read()),
            |batch| {
                for (k, w) in batch.iter() {
                    assert_eq!(*w, OPEN, "key {} read in a state not its live one", k.k);
                    seen.push(k.k);
                }
            },
        );
        seen
    }

    /// The walk the marks replaced, kept as the models' counter-example:
    /// each shard read under its lock as the walk reaches it, with no mark
    /// of the start, so a key inserted into a shard not reached yet is
    /// visited.
    pub fn walk_unmarked(&self) -> Vec<u32> {
        let g = self.pin();
        let mut seen = Vec::new();
        for i in 0..self.map.shards() {
            let _st = crate::sync::lock_whole(&self.map.locks[i]);
            // SAFETY: under the lock, and the guard keeps the table.
            let t = unsafe { self.map.ptrs[i].current.load(Ordering::Acquire).as_ref() };
            if let Some(t) = t {
                t.for_each(|s| {
                    s.value().read();
                    // SAFETY: `FULL`, loaded with `Acquire`.
                    seen.push(unsafe { s.key() }.k);
                });
            }
        }
        drop(g);
        seen
    }

    /// `Graveyard::collect`: collects, then frees every ready table.
    pub fn collect(&self) {
        self.graveyard.collect();
    }
}
