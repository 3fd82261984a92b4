//! The take: a node's local counts into the pending buffer (`stage`), and
//! the next batch cut from it and encoded (`cut`). Step 1 of a flush
//! (`flush.rs`), and the cut of step 3.
//!
//! # Invariants
//! - Every count taken is, at every instant, in exactly one of: the local
//!   windows, the pending buffer (staged or in a batch in flight), Redis,
//!   or a counter of dropped counts (`dropped_old`, `dropped_full`,
//!   `dropped_panicked`) (`pending.rs`).
//! - The take runs under the state lock and before any I/O: counts leave
//!   the local ring even while Redis is unreachable (its slots must not be
//!   reused while they hold unflushed counts).
//! - The key's own code (`write_key`, and `Clone` for a key new to the
//!   buffer) runs at the take, under the state lock, once a key a flush.
//!   A panic in it is caught per key (that key's count is dropped and
//!   counted; the take goes on). From there on the key is known by the
//!   name `write_key` wrote: the pending buffer, the cut and the encoding
//!   run none of its code (`pending.rs`).

use crate::bucket::{unescape, write_field};
use crate::health::bump;
use crate::key::RedisKey;
use crate::node::{Inner, Outbox};
use crate::pending::{Entry, Name};
use crate::script::{BatchWriter, Request};
use crate::sync::write;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use stripecount::Clock;

impl<K: RedisKey, C: Clock> Inner<K, C> {
    /// Cuts the next batch from the pending buffer and encodes it, unless
    /// nothing is staged or two batches are in flight.
    pub(crate) fn cut(&self, g: usize) -> Option<Outbox> {
        let (seq, order, request) = write(&self.state).pending[g].cut(
            self.max_batch_keys,
            self.shape.sub_buckets,
            |o, d, seq| self.encode(g, o, d, seq),
        )?;
        Some(Outbox {
            seq,
            order,
            request,
            sends: 0,
        })
    }

    /// Takes the local windows' counts into the pending buffer, drops what
    /// left the window, and prunes the cache and hot set once an epoch.
    /// Returns the first panic of a key's code, if any (each is counted in
    /// `Stats::key_panics`, the counts dropped in `Stats::dropped_panicked`).
    pub(crate) fn stage(&self) -> Option<Box<dyn std::any::Any + Send>> {
        let now = self.time().now();
        let e = now.as_nanos() / self.slice_nanos;
        let s = self.slices as u64;
        let floor = e.saturating_sub(s);
        let mut full = 0u64;
        let mut guard = write(&self.state);
        let st = &mut *guard;
        let slice_nanos = self.slice_nanos;
        let mut name = Vec::new();
        let mut panicked = None;
        let (mut lost, mut panics) = (0u64, 0u64);
        self.windows.take_all(|k, start, c| {
            // The key's code (`write_key`; `Clone` if it is new to the
            // buffer) runs here: a key whose code panics is not staged and
            // its count is dropped, counted; the take goes on.
            let staged = catch_unwind(AssertUnwindSafe(|| {
                write_field(k, &mut name);
                let g = self.groups.of(unescape(&name));
                st.pending[g].stage(k, &name, start.as_nanos() / slice_nanos, c)
            }));
            match staged {
                Ok(true) => {}
                Ok(false) => full = full.saturating_add(c),
                Err(p) => {
                    lost = lost.saturating_add(c);
                    panics += 1;
                    panicked.get_or_insert(p);
                }
            }
        });
        let old = st.pending.iter_mut().fold(0u64, |old, p| {
            old.saturating_add(p.prune(floor, e.saturating_add(s)))
        });
        let new_epoch = e != st.pruned_at;
        if new_epoch {
            // Once a slice: drop the local keys the take emptied (an add
            // racing the eviction is never lost: it inserts the key again).
            self.windows.evict_idle_at(now);
            st.cache.retain(|_, r| r.newest() > floor);
            st.pruned_at = e;
        }
        drop(guard);
        if new_epoch {
            write(&self.hot).prune(e);
        }
        bump(&self.counters.dropped_full, full);
        bump(&self.counters.dropped_old, old);
        bump(&self.counters.key_panics, panics);
        bump(&self.counters.dropped_panicked, lost);
        panicked
    }

    fn encode(
        &self,
        g: usize,
        order: &[Name],
        entries: &HashMap<Name, Entry<K>>,
        seq: u64,
    ) -> Request {
        let names = &self.names[g];
        let mut w = BatchWriter::new(&self.flush_lua.sha, names, order.len());
        for n in order {
            w.key(n, &entries[n].deltas.slices);
        }
        w.finish(&self.shape, seq)
    }
}
