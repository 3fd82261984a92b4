//! The cluster limiter: [`ClusterLimiter`], a per-key `Quota` across
//! nodes on Redis that never over-admits (the quota-lease design of
//! Sentinel's token server and Google's Doorman).
//!
//! # The invariant: in any `J` consecutive server slices, permits granted across all nodes <= limit
//! `J` is the number of slices a request is judged against: the quota's
//! `S` slices, or `S + 1` for a strict quota (`Quota::strict`). Every
//! span of `window - L` (slices of length `L`) lies within `S`
//! consecutive slices, and every span of the whole window within `S + 1`
//! (it starts inside one), so a default quota holds the limit in every
//! span of `window - L` and a strict one in every span of `window`, as the
//! local limiters do (`stripecount::limiter::Quota`).
//!
//! Redis keeps, per key, the permits leased in each server slice (less
//! those returned): the key's ring, one field of a bucket hash
//! (`layout.rs`). The lease script runs on the server's
//! clock: in slice `c`, it adds a batch to slice `c` only if the window's
//! live slices (`c - J + 1 ..= c`) plus the batch fit in the limit.
//! A node grants a lease's permits only while the lease's slice is current
//! on the server's clock: after the script ran (so not before the slice
//! began) and before its deadline, which is before the slice ends
//! (`remote.rs` computes it from the lease's own round trip and the
//! clock-drift bound). Returns only lower a slice's count, and only by
//! permits no grant can take any more (`word.rs`, invariant 1).
//!
//! So every permit granted is counted in the slice it is granted in, and
//! for any `J` slices ending at slice `j`: take the last lease of a slice
//! `c <= j` among them (none: nothing granted in them). At that script's
//! run, every one of the `J` slices had all its leases (none come later in
//! slices `<= c`, none in `c+1 ..= j`), and each slice's count then was at
//! least what is ever granted from it (grants <= leased less returned,
//! and returns after that run only lower the count by permits never
//! granted). The script checked that those counts, the slices
//! `c - J + 1 ..= c`, which include the `J` slices up to `j` that hold
//! anything, fit in the limit. ∎ Nothing here depends on a node's clock
//! agreeing with the server's: a node 5 s off obeys the limit (tested).
//!
//! Everything that depends on the window's length uses `J`: the script's
//! sum, the buckets' generations and expiry (`layout.rs`),
//! which returns still lower a count (a return to a slice among the last
//! `J` is applied; an older one changes nothing, its slice counts no
//! more), the retry time of a refusal, the node's pruning of queued
//! returns and idle keys, the lifetime of a node's record (`script.rs`),
//! and the local limiter of `OutagePolicy::LocalShare` (the same quota,
//! strictness included).
//!
//! # What it leaves unused
//! A lease request is refused when the window's recorded permits plus the
//! request exceed the limit; recorded = granted + permits leased and not
//! yet used or returned. So a refusal under-admits by at most what other
//! nodes hold unused at that moment (and what this node's queued returns
//! will give back): at most `max_batch` per other node, and less near the
//! limit, since the script leases at most half the room left beyond the
//! request (batches shrink to 1 near the limit). Unused permits of a
//! lease whose slice ended count against the window until returned: the
//! next miss of the key returns them, or its group's thread within the
//! sweep interval (`sweep.rs`).
//!
//! The refusal memo (`memo.rs`, on by default) adds one more: a refusal
//! with a retry time `T` is remembered, and until `T` the node refuses the
//! key's requests of at least the refused permits without a round trip.
//! It only refuses, so the invariant above is untouched; but until `T`
//! this node does not see permits other nodes (or its own queued returns)
//! give back for that key, so it under-admits the key at most until `T`,
//! when the script said the request would fit anyway. Requests of fewer
//! permits still make the round trip (they may fit sooner).
//!
//! # Modules
//! `limiter.rs` the limiter and its hot path; `build.rs` its
//! construction; `word.rs` the lease word (its loom model:
//! `loom-tests/tests/lease_word.rs`); `remote.rs` what the paths share,
//! the miss path's entry and the outage policy; `lane.rs` a group's queue
//! of requests and the hand-off of their answers (loom model:
//! `loom-tests/tests/lease_lane.rs`); `batch.rs` forming a batch, `reply.rs`
//! filing its reply, `request.rs` sending it; `driver.rs` the groups' threads;
//! `future.rs` the async decision; `sizes.rs` the sizes of keys that hold
//! no lease; `memo.rs` the refusal memo; `sweep.rs`
//! the sweeper; `grant.rs` the decision; `script.rs` and `lease.lua` the
//! script and its exactly-once protocol; `layout.rs` where Redis keeps
//! the counts; `config.rs` the builder;
//! `stats.rs` counters.

mod batch;
mod build;
mod config;
mod driver;
mod future;
mod grant;
mod lane;
mod layout;
mod limiter;
mod memo;
mod remote;
mod reply;
mod request;
mod script;
mod sizes;
mod stats;
mod sweep;
mod word;

use crate::sync;

#[cfg(feature = "fuzzing")]
pub(crate) use script::LeaseReply;

pub use config::{ClusterLimiterBuilder, OutagePolicy, Shed, MAX_BATCH_KEYS};
pub use future::GrantFuture;
pub use grant::Grant;
pub use limiter::ClusterLimiter;
pub use stats::LeaseStats;
pub use word::MAX_LEASE;
