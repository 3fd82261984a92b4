//! The crate's synchronization helpers.
//!
//! - The loom switch for the cluster limiter's two concurrent protocols
//!   with loom models: the lease word (`lease/word.rs`) and the lanes
//!   of requests with the hand-off of their answers (`lease/lane.rs`):
//!   std's atomics, locks and threads, or loom's when built with
//!   `RUSTFLAGS="--cfg loom"`. The loom models
//!   (`loom-tests/tests/lease_word.rs`, `lease_lane.rs`) compile those files
//!   themselves with a `sync` module of their own, so the Redis client
//!   never builds under loom.
//! - Locking that ignores poisoning ([`lock`], [`read`], [`write`]): a
//!   panic in one thread while it held a lock does not turn every later
//!   flush, read or lease request of the node into a panic; the guarded
//!   data is used as the panicking thread left it.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::thread::{current, park, Thread};

use std::sync::{MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

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
