//! A flush over every group: the masters at once, and the hot crossings
//! delivered to the user's callback after every lock is released.
//!
//! # Concurrency
//! On a Redis Cluster a node's keys are in several groups, each with its
//! own sender (connection, flush sequence, batches in flight). The groups
//! whose links point at the same server are flushed one after another (a
//! server runs one script at a time anyway); the servers are flushed at
//! once: the calling thread takes the first server's groups, a scoped
//! thread each takes another's. A single instance (one group) never
//! spawns a thread. If a thread cannot be spawned, its groups run on the
//! calling thread.
//!
//! Nothing here is a new atomic protocol: each sender is behind its own
//! mutex and the shared state behind the state lock, exactly as when the
//! groups ran in turn, and a group's batches still reach Redis one at a
//! time, in sequence. The threads only change which senders run at the
//! same time. Which server a link points at is read with its sender
//! locked; a sender another flush holds is set apart (a blocking flush
//! waits for it on a thread of its own, the background flusher skips it).
//!
//! # Idle groups
//! With hot keys off, a group with nothing staged or in flight skips its
//! flush (its probe would learn nothing), except the first group (its
//! probe samples the timeline's `TIME`) and a group whose last attempt
//! failed (it tries again, to be marked up once its master answers).
//!
//! # The hot-crossing callback
//! User code is never called with a lock of the node held: the crossings
//! come back in the flushes' reports and [`Inner::deliver`] calls the
//! callback once per crossing afterwards, on the calling thread. So the
//! callback may use the node (add, read, even flush). A panic in it
//! loses nothing: every count was filed before; the crossings after it
//! are still delivered; the background flusher counts it and goes on
//! (`Stats::callback_panics`), a `flush()` resumes it in its caller.
//!
//! # The key's own code
//! A flush runs the key type's code in two places, under the node's
//! locks, and a panic in either is caught where it cannot leave a protocol
//! half done. At the take (`write_key`, and `Clone` for a new key), per
//! key: that key's count is dropped and counted, the others are staged;
//! from there on keys are known by name and the pending buffer, the cut
//! and the encoding run none of their code (`pending.rs`). When a reply
//! is filed (`Clone`, `Hash`, `Eq` of the cache and the hot set), after
//! the batch was acknowledged and counted: a panic there misses only
//! cached rings, and it is caught around the group's flush, which resets
//! the connection (no reply is left unread; the batches in flight are
//! resent, applied once).
//! The background flusher counts each (`Stats::key_panics`) and goes on;
//! `flush()` flushes every group, delivers the crossings, then resumes
//! the first.

use crate::health::bump;
use crate::key::RedisKey;
use crate::node::{Inner, Sender};
use crate::results::FlushReport;
use crate::sync::{lock, read, try_lock};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Instant;
use stripecount::Clock;

impl<K: RedisKey, C: Clock> Inner<K, C> {
    /// The background flusher's step: take the local counts (always, so
    /// the local ring never reuses a slot that holds unflushed counts;
    /// once for all the groups), flush each group unless another flush of
    /// it is running or its backoff says wait, then deliver the crossings
    /// (a panic of the callback or of a key's code is counted, not
    /// propagated: the flusher goes on).
    pub(crate) fn tick(&self) {
        let _ = self.stage();
        let reports = self.each_server(false, |me, s| {
            if !s.link.backoff.ready(Instant::now()) {
                return None;
            }
            match catch_unwind(AssertUnwindSafe(|| me.flush_locked(s))) {
                Ok(r) => r.ok(),
                Err(_) => {
                    bump(&me.counters.key_panics, 1);
                    None
                }
            }
        });
        for r in &reports {
            let _ = self.deliver(&r.crossings);
        }
    }

    /// Takes the local counts and flushes every group (waiting for a group
    /// another flush holds), then delivers the crossings. Returns the
    /// merged report, or the first error after every group was tried. A
    /// panic of a key's code, else of the callback, is resumed after every
    /// group was flushed and every crossing delivered.
    pub(crate) fn flush_all(&self) -> Result<FlushReport<K>, crate::ClusterError> {
        let mut panicked = self.stage();
        let results = self.each_server(true, |me, s| {
            Some(catch_unwind(AssertUnwindSafe(|| me.flush_locked(s))))
        });
        let mut report = FlushReport::new();
        let mut first = None;
        for r in results {
            match r {
                Ok(Ok(r)) => report.merge(r),
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(p) => {
                    bump(&self.counters.key_panics, 1);
                    panicked.get_or_insert(p);
                }
            }
        }
        let delivered = self.deliver(&report.crossings);
        if let Some(p) = panicked {
            resume_unwind(p);
        }
        if let Err(p) = delivered {
            resume_unwind(p);
        }
        match first {
            None => Ok(report),
            Some(e) => Err(e),
        }
    }

    /// Calls the hot-crossing callback for each crossing, each call caught:
    /// returns the first panic after all were made (module docs). Called
    /// with no lock of the node held.
    pub(crate) fn deliver(&self, crossings: &[(K, u64)]) -> std::thread::Result<()> {
        let Some(f) = &self.on_hot else {
            return Ok(());
        };
        let mut first = Ok(());
        for (k, sum) in crossings {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(k, *sum))) {
                bump(&self.counters.callback_panics, 1);
                if first.is_ok() {
                    first = Err(p);
                }
            }
        }
        first
    }

    /// Runs `f` on every group's sender, the groups of one server in turn
    /// and the servers concurrently (module docs); `block`: wait for a
    /// sender another flush holds, else skip it. Returns what the runs
    /// returned, in no set order. A panic in a run is resumed here once
    /// every run ended.
    pub(crate) fn each_server<T: Send>(
        &self,
        block: bool,
        f: impl Fn(&Self, &mut Sender<K>) -> Option<T> + Sync,
    ) -> Vec<T> {
        let servers = self.by_server();
        let run = |groups: &[usize]| {
            let mut out = Vec::new();
            for &g in groups {
                let m = &self.senders[g];
                let guard = if block { Some(lock(m)) } else { try_lock(m) };
                if let Some(mut s) = guard {
                    out.extend(f(self, &mut s));
                }
            }
            out
        };
        let Some((mine, rest)) = servers.split_first() else {
            return Vec::new();
        };
        if rest.is_empty() {
            return run(mine);
        }
        std::thread::scope(|scope| {
            let mut inline = Vec::new();
            let spawned: Vec<_> = rest
                .iter()
                .filter_map(|groups| {
                    let t = std::thread::Builder::new()
                        .name("stripecount-redis-flush".into())
                        .spawn_scoped(scope, || run(groups));
                    if t.is_err() {
                        inline.push(groups);
                    }
                    t.ok()
                })
                .collect();
            let mut out = run(mine);
            for groups in inline {
                out.extend(run(groups));
            }
            let mut panic = None;
            for t in spawned {
                match t.join() {
                    Ok(v) => out.extend(v),
                    Err(p) => {
                        panic.get_or_insert(p);
                    }
                }
            }
            if let Some(p) = panic {
                resume_unwind(p);
            }
            out
        })
    }

    /// Whether the sender's group can skip its flush's round trips: it
    /// has nothing staged or in flight, it is not the group whose server
    /// keeps the node's timeline (the first samples `TIME` at every flush)
    /// and hot keys are off (else the probe learns the cluster's
    /// crossings), and its last attempt did not fail (a group marked down
    /// tries again, so that it is marked up once its master is back). An
    /// idle cluster node then costs one round trip a flush,
    /// not one a group. (With hot keys off no crossing waits in `stash`.)
    pub(crate) fn idle(&self, s: &Sender<K>) -> bool {
        if s.group == 0
            || self.shape.threshold != 0
            || s.outbox.is_some()
            || self.counters.is_down(s.group)
        {
            return false;
        }
        read(&self.state).pending[s.group].is_empty()
    }

    /// The groups by the server their links point at, in group order; a
    /// group whose sender another flush holds is a server of its own.
    fn by_server(&self) -> Vec<Vec<usize>> {
        if self.senders.len() == 1 {
            return vec![vec![0]];
        }
        let mut servers: Vec<(Option<String>, Vec<usize>)> = Vec::new();
        for (g, m) in self.senders.iter().enumerate() {
            let at = try_lock(m).map(|s| s.link.server());
            match servers.iter_mut().find(|(s, _)| at.is_some() && *s == at) {
                Some((_, gs)) => gs.push(g),
                None => servers.push((at, vec![g])),
            }
        }
        servers.into_iter().map(|(_, gs)| gs).collect()
    }
}
