//! Building a [`ClusterLimiter`] from its validated builder: the quota's
//! shape in Redis's terms (the slices judged, one more when strict), the
//! groups with a sender and a link each, the local limiter of
//! `OutagePolicy::LocalShare`, the first connection of every group, and
//! the lanes' threads.

use super::config::{ClusterLimiterBuilder, OutagePolicy};
use super::driver::Drivers;
use super::lane::Lane;
use super::layout::LeaseNames;
use super::limiter::ClusterLimiter;
use super::remote::{Sender, Shared, TimeRef};
use super::script::{LeaseShape, LEASE};
use super::sizes::Sizes;
use super::stats::LeaseCounters;
use crate::error::ClusterError;
use crate::health::Counters;
use crate::key::RedisKey;
use crate::script::Lua;
use crate::seeds::NodeLinks;
use crate::sync::lock;
use crate::timeline::ServerTime;
use scc::HashIndex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use stripecount::hash::RandomState;
use stripecount::{Clock, KeyedLimiter, Quota};

/// Size records (`sizes.rs`) a limiter keeps, spread over its groups:
/// 128 KiB in all.
const SIZE_RECORDS: usize = 16_384;

impl<K: RedisKey, C: Clock> ClusterLimiter<K, C> {
    pub(crate) fn from_builder(b: ClusterLimiterBuilder<K, C>) -> Result<Self, ClusterError> {
        let q = b.quota;
        let slice_ns = u64::try_from(q.slice_len().as_nanos())
            .map_err(|_| ClusterError::Config("the slice is too long".into()))?;
        let slice_ms = slice_ns / 1_000_000;
        // The slices a request is judged against: one more when strict, so
        // that every span of the window is covered (see `mod.rs`).
        let judged = q.slice_count() as u64 + u64::from(q.is_strict());
        let time = Arc::new(ServerTime::new(b.clock));
        let local = match b.policy {
            OutagePolicy::LocalShare { expected_nodes } => {
                let share = Quota::per((q.limit() / expected_nodes).max(1), q.window())
                    .slices(q.slice_count());
                let share = if q.is_strict() { share.strict() } else { share };
                Some(
                    KeyedLimiter::builder(share)
                        .clock(TimeRef(Arc::clone(&time)))
                        .build()?,
                )
            }
            _ => None,
        };
        let node_id = format!("{:032x}", rand::random::<u128>());
        let groups = b.cluster.groups();
        let n_groups = groups.len();
        let lua = Lua::new(LEASE);
        let links = NodeLinks::new(&b.url, &b.cluster, &b.link)?;
        let senders = (0..groups.len())
            .map(|group| {
                let mut link = links.link(groups.slot(group))?;
                link.preload(&lua);
                Ok(Mutex::new(Sender {
                    group,
                    link,
                    seq: 0,
                    outbox: None,
                    held: HashMap::new(),
                    sizes: Sizes::new(SIZE_RECORDS / n_groups),
                    returns: Vec::new(),
                    wakes: Vec::new(),
                    wake_on_send: Vec::new(),
                    turn_at: None,
                }))
            })
            .collect::<Result<Vec<_>, ClusterError>>()?;
        let shape = LeaseShape {
            slices: q.slice_count() as u64,
            judged,
            strict: q.is_strict(),
            slice_ms,
            limit: q.limit(),
            record_ttl_ms: slice_ms * (judged + 1) + 300_000,
            cluster_groups: b.cluster.config_groups(),
        };
        let inner = Arc::new(Shared {
            words: HashIndex::with_hasher(RandomState::new()),
            memo: HashIndex::with_hasher(RandomState::new()),
            memo_on: b.refusal_memo,
            renew_early: b.renew_early,
            time,
            judged,
            slice_ns,
            window_ns: slice_ns.saturating_mul(judged),
            quota: q,
            max_batch: b.max_batch,
            max_batch_keys: b.max_batch_keys,
            margin_ns: u64::try_from(b.margin.as_nanos()).unwrap_or(u64::MAX),
            durability: b.cluster.durability,
            policy: b.policy,
            shed: b.shed,
            local,
            names: (0..groups.len())
                .map(|g| LeaseNames::new(&b.namespace, groups.tag(g), &node_id))
                .collect(),
            lease_args: shape.fixed_args(),
            lua,
            node_id,
            in_flight: senders.iter().map(|_| AtomicBool::new(false)).collect(),
            lanes: senders.iter().map(|_| Lane::new(b.max_queue)).collect(),
            last_rtt: senders.iter().map(|_| AtomicU64::new(0)).collect(),
            senders,
            groups,
            link_health: Counters::new(n_groups),
            counters: LeaseCounters::default(),
        });
        // Every group's master is met now (the first group's connection
        // samples the server's time): a setting it cannot serve
        // (`checks.rs`) fails the build; a server that cannot be reached
        // does not (the leases retry it).
        for sender in &inner.senders {
            if let Err(e) = inner.connect(&mut lock(sender)) {
                if e.is_setting() {
                    return Err(e);
                }
            }
        }
        let drivers = Drivers::start(&inner, b.sweep_interval)
            .map_err(|e| ClusterError::Config(format!("no lane thread: {e}")))?;
        Ok(ClusterLimiter {
            inner,
            drivers: Some(drivers),
        })
    }
}
