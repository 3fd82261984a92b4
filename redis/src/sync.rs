//! The loom switch for the lease word (`lease/word.rs`), the one atomic
//! protocol of this crate that has a loom model: std's atomics, or loom's
//! when built with `RUSTFLAGS="--cfg loom"`. The loom model
//! (`loom-tests/tests/lease_word.rs`) compiles `lease/word.rs` itself with
//! a `sync` module of its own, so the Redis client never builds under loom.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
