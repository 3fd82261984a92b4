//! Building a [`ClusterWindows`] from its validated builder: the local
//! windows, the groups (`group.rs`) with a sender and a link each, the
//! first probe of every group, and the flusher thread.

use crate::acked::Acked;
use crate::config::ClusterWindowsBuilder;
use crate::error::ClusterError;
use crate::flusher::Flusher;
use crate::health::Counters;
use crate::hot::HotSet;
use crate::key::RedisKey;
use crate::node::{ClusterWindows, Inner, Sender, State};
use crate::pending::Pending;
use crate::script::{Lua, Names, Shape, FLUSH, HOT_READ, RING_READ};
use crate::seeds::NodeLinks;
use crate::sync::lock;
use crate::timeline::ServerTime;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use stripecount::{Clock, KeyedWindows};

impl<K: RedisKey, C: Clock> ClusterWindows<K, C> {
    pub(crate) fn from_builder(b: ClusterWindowsBuilder<K, C>) -> Result<Self, ClusterError> {
        // Slices leave the local ring whole: when an add opens the slice a
        // window after them, or at the eviction right after a take
        // (`stage`). A flush interval within the window less one slice
        // (the builder checks it) takes every slice before it leaves.
        let mut local = KeyedWindows::builder(b.window, b.slices).clock(ServerTime::new(b.clock));
        if let Some(m) = b.max_keys {
            local = local.max_keys(m);
        }
        let windows = local.build()?;
        let slice_nanos = u64::try_from(windows.slice_len().as_nanos())
            .map_err(|_| ClusterError::Config("the slice is too long".into()))?;
        let slice_ms = slice_nanos / 1_000_000;
        let window_ms = slice_ms * b.slices as u64;
        let node_id = format!("{:032x}", rand::random::<u128>());
        let groups = b.cluster.groups();
        let n_groups = groups.len();
        let sub_buckets = crate::bucket::sub_buckets(n_groups);
        let (flush_lua, hot_lua, ring_lua) =
            (Lua::new(FLUSH), Lua::new(HOT_READ), Lua::new(RING_READ));
        let links = NodeLinks::new(&b.url, &b.cluster, &b.link)?;
        let senders = (0..groups.len())
            .map(|group| {
                let mut link = links.link(groups.slot(group))?;
                link.preload(&flush_lua);
                link.preload(&hot_lua);
                Ok(Mutex::new(Sender {
                    group,
                    link,
                    outbox: None,
                    next: None,
                    stash: Vec::new(),
                    acked: Acked::default(),
                }))
            })
            .collect::<Result<Vec<_>, ClusterError>>()?;
        let inner = Arc::new(Inner {
            windows,
            slices: b.slices,
            slice_nanos,
            max_batch_keys: b.max_batch_keys,
            shape: Shape {
                slices: b.slices,
                slice_ms,
                threshold: b.hot_threshold.unwrap_or(0),
                record_ttl_ms: window_ms + slice_ms + 300_000,
                cluster_groups: b.cluster.config_groups(),
                sub_buckets,
            },
            names: (0..groups.len())
                .map(|g| Names::new(&b.namespace, groups.tag(g), &node_id, sub_buckets))
                .collect(),
            groups,
            durability: b.cluster.durability,
            flush_lua,
            hot_lua,
            ring_lua,
            node_id,
            state: RwLock::new(State {
                // The bound on staged keys, split evenly over the groups (a
                // key's group is a hash of it).
                pending: (0..senders.len())
                    .map(|_| Pending::new(b.max_pending_keys.div_ceil(senders.len())))
                    .collect(),
                cache: HashMap::new(),
                pruned_at: 0,
            }),
            hot: RwLock::new(HotSet::new(senders.len())),
            senders,
            counters: Counters::new(n_groups),
            on_hot: b.on_hot,
        });
        // Every group's master is met now: a setting it cannot serve
        // (`checks.rs`) fails the build; a server that cannot be reached
        // does not (the flushes retry it).
        for sender in &inner.senders {
            let mut s = lock(sender);
            let r = inner.redirecting(&mut s, |i, s| i.probe(s));
            inner.settle(&mut s, &r);
            if let Err(e) = r {
                if e.is_setting() {
                    return Err(e);
                }
            }
        }
        let flusher = match b.flush_interval {
            Some(every) => Some(
                Flusher::start(Arc::clone(&inner), every)
                    .map_err(|e| ClusterError::Config(format!("no flusher thread: {e}")))?,
            ),
            None => None,
        };
        Ok(ClusterWindows { inner, flusher })
    }
}
