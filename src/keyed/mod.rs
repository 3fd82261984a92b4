//! Per-key sliding windows ([`KeyedWindows`]), hot-key detection, exact
//! ([`HotKeyDetector`]) and in fixed memory ([`HotKeySketch`]), and per-key
//! handles ([`KeyHandle`], [`HotKeyHandle`]).

// Design notes (for maintainers; not part of the public docs).
//
// # Where each concept lives
// The engine is built on two modules of their own: `crate::map` (the
// sharded open-addressing map, lock-free lookups, inserts and moves under
// a shard lock, bounds and sweeps; it knows nothing of windows) and
// `crate::reclaim` (the collector that frees what a map unlinks once no
// reader can reach it). Here:
// - `ring.rs`: the engine is *slice-major*: one map of keys per live slice
//   of the window, slot `e mod S` holding the map of epoch `e`; a slice
//   that leaves the window is dropped whole. The `head` hint finds the
//   newest slice's map without a division. `slice_map.rs`: one slice's
//   map, how it is sized from the slice before, and how it is freed (its
//   tables kept as spares for later slices, `crate::map::spares`).
// - `entry.rs`: one key's count in one slice (24 bytes inline in the map's
//   slot): one CAS an add, striped into a [`crate::StripedCounter`] under
//   contention, sealed and lent when its table moves.
// - `batch.rs`: batches (a group of keys hashed, their misses started,
//   then added in order, each by its single call's path); `many.rs`: the
//   types' `add_many` methods on it.
// - `add.rs`: the add path; `windows.rs`: [`KeyedWindows`] (construction,
//   eviction, sizes); `reads.rs`: its reads and takes; `handle.rs`: the
//   handles; `builder.rs`: [`KeyedWindowsBuilder`] and
//   [`HotKeyDetectorBuilder`]. The bounds every per-key method shares
//   ([`Key`], [`KeyRef`], [`KeyHasher`]) are `crate::key`, re-exported
//   here.
// - `home.rs` and `hot.rs`: the hot rule and [`HotKeyDetector`]; state
//   only for *heavy* keys (a slice at `ceil(T / S)` or more). `exact.rs`:
//   a heavy key's exact step. `bound.rs`: how many adds a heavy, cold key
//   takes in a slice without the exact step, and what a late add (older
//   than the newest slice) owes it.
// - `sketch.rs`: [`HotKeySketch`], the detector in fixed memory: a
//   `doorkeeper.rs` in front of a [`HotKeyDetector`] bounded in keys; the
//   doorkeeper admits a key's adds to exact counting once its adds in the
//   slice reach the admission level. `sizing.rs`: the memory a sketch
//   needs at a rate of adds, and the refusal of less.
// - The packed words (an entry's count and flags, its hot word, a home's
//   word) are laid out in `crate::pack`.
//
// # Invariants (the details are at the top of each file)
// - An add is counted in exactly one entry of its key, in the map of its
//   own slice; or dropped as older than the newest slice's window (the
//   add returns `false`); or, when its slice's map is full, not tracked
//   and counted in [`KeyedWindows::untracked_adds`]. An add never lands in
//   a moved entry: it finds it sealed and looks the key up again.
// - A slice's map is freed only after it left its ring slot, through the
//   collector, so no reader holding a guard sees it freed.
// - [`KeyedWindows::len`] (entries: a key once per slice it has adds in)
//   never exceeds `slices * max_keys`.
//
// # Progress
// An add on a key its slice's map holds takes no lock and never waits.
// A key's first add in a slice inserts it under its shard's lock (and may
// move the shard's keys to a bigger table inside that lock hold). Reads
// may wait while a key's entry is moving to a bigger table.
//
// # Memory (measured; 10 slices, `u64` keys, x86-64)
// A key's slot holds the key and its 24-byte entry; with the tables'
// slack and control bytes, 43.3 bytes a key for 1M keys each added once
// (BENCHMARKS.md, per-key engine). A key with adds in every slice of its
// window holds one slot in each slice's map; a key idle for a window
// holds nothing. A contended entry adds a striped counter.

mod add;
pub(crate) mod batch;
mod bound;
mod builder;
mod doorkeeper;
mod entry;
mod exact;
mod handle;
mod home;
mod hot;
mod hot_reads;
mod many;
#[cfg(loom)]
#[doc(hidden)]
pub mod model;
mod reads;
mod ring;
mod sizing;
mod sketch;
mod sketch_builder;
mod slice_map;
mod windows;

pub use self::builder::{HotKeyDetectorBuilder, KeyedWindowsBuilder};
pub use self::handle::{HotKeyHandle, KeyHandle};
pub use self::hot::HotKeyDetector;
pub use self::sketch::{HotKeySketch, HotKeySketchBuilder};
pub use self::windows::KeyedWindows;
pub use crate::key::{Key, KeyHasher, KeyRef};

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync>() {}
    is::<KeyedWindows<String>>();
    is::<HotKeyDetector<u64>>();
    is::<HotKeySketch<String>>();
}
