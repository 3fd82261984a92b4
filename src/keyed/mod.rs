//! Per-key sliding windows ([`KeyedWindows`]), hot-key detection
//! ([`HotKeyDetector`]) and per-key handles ([`KeyHandle`],
//! [`HotKeyHandle`]).
//!
//! # Where each concept lives
//! - `table.rs`: one open-addressing table, control bytes in groups of
//!   eight, keys and their state **inline** in the slots.
//! - `map/`: the sharded map over tables: lock-free lookups, inserts and
//!   moves under a per-shard lock, the bound on keys and the sweeps that
//!   evict idle keys. Generic over the state it holds (`map::Value`).
//! - `reclaim.rs`: when unlinked tables and windows may be freed (epochs).
//! - `head.rs`: a key's newest slice, inline: nearly every add is one CAS.
//! - `ext.rs`: a key's out-of-line window (older slices, stripe rows of a
//!   contended key, fold marks, the hot word).
//! - `state.rs`: one key's state and the protocols that join the head and
//!   its window: adds, exact reads, eviction, moving to another table.
//! - `hot.rs`: the hot rule and [`HotKeyDetector`].
//! - `windows.rs`: [`KeyedWindows`]; `handle.rs`: the handles;
//!   `key.rs`: the bounds every per-key method shares ([`Key`],
//!   [`KeyRef`]).
//!
//! # Invariants (the details are at the top of each file)
//! - An add is counted in exactly one cell of its key (head, row 0 or a
//!   stripe row), under its own epoch; or dropped as older than the ring
//!   (the add returns `false`); or, when the key cannot be tracked (the
//!   map is full of keys that are not idle), counted in
//!   [`KeyedWindows::untracked_adds`]. An add never lands in an evicted or
//!   moved state: it finds it closed and looks the key up again.
//! - A key is evicted only when it holds no count at an epoch inside or
//!   after the window at the evictor's time and no add is in flight on it.
//! - [`KeyedWindows::len`] never exceeds `max_keys`.
//!
//! # Progress
//! An add on a key the map holds takes no lock and never waits. Inserting
//! a key takes its shard's lock (and may move the shard's keys to a bigger
//! table, or sweep the shard, inside that lock hold). Reads may wait: an
//! exact read retries while a count is folding out of the head, and waits
//! while the key's state is moving to a bigger table.
//!
//! # Memory (measured; 10 slices, `u64` keys, x86-64)
//! A key's slot holds the key and 32 bytes of state (head, filter bound,
//! window pointer); with the table's load and control bytes that is about
//! 40-90 bytes a key for a key seen in one slice per window
//! (`KeyedWindows::memory_bytes`, and BENCHMARKS.md for 1M keys). A key
//! with counts in several slices of its window adds its out-of-line window
//! (a 64-byte header and 16 bytes a slice); a contended key adds a stripe
//! row per CPU.

mod entry;
mod handle;
mod home;
mod hot;
mod key;
pub(crate) mod map;
#[cfg(loom)]
#[doc(hidden)]
pub mod model;
pub(crate) mod reclaim;
mod ring;
mod table;
mod windows;

pub use self::handle::{HotKeyHandle, KeyHandle};
pub use self::hot::HotKeyDetector;
pub use self::key::{Key, KeyHasher, KeyRef};
pub use self::windows::KeyedWindows;

#[allow(dead_code)]
fn _assert_traits() {
    fn is<T: Send + Sync>() {}
    is::<KeyedWindows<String>>();
    is::<HotKeyDetector<u64>>();
}
