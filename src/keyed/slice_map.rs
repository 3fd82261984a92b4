//! The map of one slice: every key with adds in that slice and its count
//! (an [`Entry`] inline in the map's slot), how a new slice's map is sized
//! from the slice before it, and how a retired one is freed. The ring of
//! these maps is `ring.rs`.
//!
//! # Sizing
//! A new map is sized for the keys the newest map holds (slices of a
//! steady stream see similar keys): as many shards as keep about
//! [`KEYS_PER_SHARD`] keys a shard (at least [`min_shards`]), each shard's
//! first table presized so that filling the map needs no rebuild. With no
//! newest map to go by (the ring's first), every shard: a busy first slice
//! spread over `min_shards()` grew tables of 250K keys on the benchmarks'
//! Zipf stream, moved 190K keys on one request (7.8 ms) and took 1.3 ms a table
//! to free; the other shards cost about 6 KB, once. A bounded ring's
//! first map is sized for its bound instead, and a bounded ring's maps
//! have a shard for each [`BOUNDED_KEYS_PER_SHARD`] keys of the bound at
//! most: a sketch's memory is counted with them (`sketch.rs`).
//!
//! # Freeing
//! A retired map is freed a table at a time (`limbo.rs`, "Freed in
//! pieces"; freed whole, a map of a few hundred thousand keys held one
//! request for 7.7-10.8 ms), each table kept as a spare for a later map if
//! it fits (`spares.rs`).
//!
//! # Invariants
//! 1. A map's epoch and `start` never change; `start = epoch *
//!    slice_nanos`, so a time `now` is in the map's slice iff `now - start <
//!    slice_nanos` (wrapping: no division).
//! 2. A map's spares are its ring's (shared by `Arc`: whichever of the
//!    ring, the map and the parts it hands over goes last frees them), and
//!    every guard on the map is pinned on the ring's graveyard.
//! 3. An entry is never retired on its own: whole slices leave
//!    ([`Value::try_retire`] is `false`).

use super::entry::Entry;
use crate::map::spares::Spares;
use crate::map::{Map, Value, SHARDS};
use crate::reclaim::Guard;
use crate::reclaim::{InParts, Parts};
use crate::sync::Arc;

/// Keys a slice map's shard holds, about, before the next slice's map is
/// given more shards.
const KEYS_PER_SHARD: usize = 2048;

/// The least keys a shard of a bounded slice map is for (its bound
/// permitting): a sketch's maps hold a few dozen keys at its least memory,
/// and at `min_shards()` shards each key took a table of its own.
const BOUNDED_KEYS_PER_SHARD: usize = 64;

/// The fewest shards a slice map has: twice the CPUs (rounded up to a
/// power of two), so that threads inserting at once rarely share a lock.
fn min_shards() -> usize {
    2 * crate::stripes::default_cap()
}

/// The shards of a map for `n` keys in a ring bounded at `max_keys` a
/// slice: about [`KEYS_PER_SHARD`] keys a shard, at least [`min_shards`],
/// but under a small bound a shard for each [`BOUNDED_KEYS_PER_SHARD`] keys
/// (so that a few keys do not each take a shard's least table).
fn shards_for(n: usize, max_keys: usize) -> usize {
    (n / KEYS_PER_SHARD)
        .max(min_shards())
        .min(max_keys.div_ceil(BOUNDED_KEYS_PER_SHARD).max(1))
}

/// The bytes a slice map of a ring bounded at `max_keys` keys a slice
/// holds besides 1.5 slots a key: the map, its shards' pointers, locks and
/// table headers, and two groups of slots a shard (a table is a whole
/// number of groups, and the keys do not spread evenly over the shards; a
/// sketch's sizing counts it, `sketch.rs`).
pub(crate) fn fixed_bytes<K, S>(max_keys: usize) -> usize
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    S: std::hash::BuildHasher,
{
    let groups = 2 * crate::map::table::GROUP * (std::mem::size_of::<(K, Entry)>() + 1);
    std::mem::size_of::<SliceMap<K, S>>()
        + shards_for(max_keys, max_keys).next_power_of_two()
            * (Map::<K, Entry, S>::shard_bytes() + groups)
}

/// The map of one slice.
pub(crate) struct SliceMap<K, S> {
    /// The slice (epoch) this map counts.
    pub(crate) epoch: u64,
    /// The slice's first nanosecond (invariant 1).
    pub(super) start: u64,
    /// Every key with adds in this slice, and its count.
    pub(crate) map: Map<K, Entry, S>,
}

impl<K, S> SliceMap<K, S>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    S: std::hash::BuildHasher,
{
    /// The map of epoch `e` (slices of `slice_nanos`), sized for `prev`
    /// keys, the newest map's (`None`: there is none; module docs,
    /// "Sizing"), holding at most `max_keys`, its tables taken from and
    /// given back to `spares`.
    pub(crate) fn new(
        e: u64,
        slice_nanos: u64,
        prev: Option<usize>,
        hasher: S,
        spares: &Arc<Spares<K, Entry>>,
        max_keys: usize,
    ) -> Self {
        // The first map of a bounded ring has the shards of its bound, and
        // under a small bound (a sketch's) is presized for it: it never
        // grows (a growth moves keys, and runs their code). A large bound
        // is a cap, not a size to allocate.
        let keys = match prev {
            Some(n) => Some(n),
            None => (max_keys < usize::MAX).then_some(max_keys),
        };
        let shards = keys.map_or(SHARDS, |n| shards_for(n, max_keys));
        let mut map = Map::with_shards(hasher, shards);
        spares.keep_at_most(map.shards());
        map.set_spares(Arc::clone(spares));
        map.set_max_keys(max_keys);
        let per_shard = keys.unwrap_or(0).div_ceil(map.shards());
        let per_shard = if prev.is_none() && per_shard > KEYS_PER_SHARD {
            0
        } else {
            per_shard
        };
        map.presize(|_| per_shard);
        SliceMap {
            epoch: e,
            start: e.saturating_mul(slice_nanos),
            map,
        }
    }
}

impl<K: Send + Sync + 'static, S: Send + 'static> InParts for SliceMap<K, S> {
    fn take_parts(&mut self, parts: &mut Parts) {
        self.map.take_tables(parts);
    }
}

impl Value for Entry {
    type Cfg = ();

    fn vacant() -> Self {
        Entry::vacant()
    }

    // Two zero words and a null pointer (`Entry::vacant`).
    #[cfg(not(loom))]
    const ZEROED_VACANT: bool = true;

    #[inline]
    fn init(&self, _cfg: &(), incoming: bool) {
        Entry::init(self, incoming);
    }

    fn move_into(&self, to: &Self, _cfg: &(), _guard: &Guard<'_>) {
        Entry::move_into(self, to);
    }

    fn try_retire(&self, _now: u64, _cfg: &(), _guard: &Guard<'_>) -> bool {
        false // whole slices retire, never one key (invariant 3)
    }

    fn is_dead(&self) -> bool {
        false
    }

    fn heap_bytes(&self, _cfg: &()) -> usize {
        Entry::heap_bytes(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::map::Miss;
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    use std::sync::Arc;

    #[test]
    fn a_slice_map_hands_every_table_to_its_parts_and_each_key_is_dropped_once() {
        let spares = Arc::new(Spares::new(Entry::vacant));
        let graveyard = crate::reclaim::Graveyard::default();
        let hasher = RandomState::new();
        let keys: Vec<Arc<u64>> = (0..crate::sized(5000, 1500)).map(Arc::new).collect();
        let guard = Guard::pin(&graveyard);
        let mut m = SliceMap::new(0, 1, None, hasher.clone(), &spares, usize::MAX);
        // Room from the start (twice a shard's even share): no move leaves
        // a key's clone in a retired table.
        let per_shard = 2 * keys.len() / m.map.shards() + 16;
        m.map.presize(|_| per_shard);
        for k in &keys {
            let h = hasher.hash_one(k);
            m.map
                .get_or_insert(h, |x| x == k, Miss::NONE, || k.clone(), &(), 0, &guard);
        }
        assert_eq!(m.map.len(), keys.len());
        assert!(keys.iter().all(|k| Arc::strong_count(k) == 2));
        let mut parts = Parts::default();
        m.take_parts(&mut parts);
        // The keys reach every shard: a table each.
        assert_eq!(parts.len(), m.map.shards());
        drop(m);
        assert!(
            keys.iter().all(|k| Arc::strong_count(k) == 2),
            "keys live in the parts"
        );
        drop(parts);
        assert!(
            keys.iter().all(|k| Arc::strong_count(k) == 1),
            "each key dropped once"
        );
    }

    /// A ring of two slices, each slice's map filled with the same keys,
    /// each key added `e + k` times in slice `e`: the new maps take the
    /// retired maps' tables, and every count stays exact. (Other tests pin
    /// the process's collector too, and may hold a retired map back for a
    /// while: slices go on until the spares served 20 tables.)
    #[test]
    fn a_ring_reuses_its_retired_maps_tables_and_every_count_stays_exact() {
        use crate::keyed::ring::Ring;
        use crate::reclaim::Guard;
        const KEYS: u64 = crate::sized(1000, 20);
        let ring = Ring::new(2, 1, RandomState::new());
        let mut e = 0u64;
        while ring.spares.taken() < 20 {
            assert!(e < 2000, "{e} slices, and the spares served too few tables");
            let guard = Guard::pin(ring.graveyard());
            let m = ring.for_add(e, &guard).expect("the newest slice");
            for k in 0..KEYS {
                let h = ring.hash(&k);
                let en = m
                    .map
                    .get_or_insert(h, |x| *x == k, Miss::NONE, || k, &(), e, &guard);
                // Added onto what the entry holds: a key left behind by a
                // badly cleared table would show its old count too.
                let en = en.expect("unbounded");
                assert!(matches!(
                    en.add(e + k),
                    crate::keyed::entry::Add::Done(_) | crate::keyed::entry::Add::Striped(_)
                ));
            }
            // Both slices of the window hold every key's exact count.
            for f in e.saturating_sub(1)..=e {
                let m = ring.get(f, &guard).expect("in the window");
                for k in 0..KEYS {
                    let h = ring.hash(&k);
                    let got = m.map.get(h, |x| *x == k, &guard).and_then(|en| en.read());
                    assert_eq!(got, Some(f + k), "slice {f} key {k}");
                }
            }
            e += 1;
        }
    }
}
