//! The crate's synchronization helpers.
//!
//! - The loom switch for the lease word (`lease/word.rs`), the one atomic
//!   protocol of this crate that has a loom model: std's atomics, or loom's
//!   when built with `RUSTFLAGS="--cfg loom"`. The loom model
//!   (`loom-tests/tests/lease_word.rs`) compiles `lease/word.rs` itself with
//!   a `sync` module of its own, so the Redis client never builds under
//!   loom.
//! - Locking that ignores poisoning ([`lock`], [`read`], [`write`]): a
//!   panic in one thread while it held a lock does not turn every later
//!   flush, read or lease request of the node into a panic; the guarded
//!   data is used as the panicking thread left it.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// Locks `m`, poisoned or not (module docs).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks `m` if no other thread holds it, poisoned or not (module docs).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Read-locks `m`, poisoned or not (module docs).
pub(crate) fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

/// Write-locks `m`, poisoned or not (module docs).
pub(crate) fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}
