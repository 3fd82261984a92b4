//! The flush: how a node's counts get to Redis and back (the methods of
//! the node's shared state that [`ClusterWindows`](crate::ClusterWindows)
//! and the flusher thread call).
//!
//! # One flush
//! 1. **Take** (`stage`, `take.rs`): the local windows' counts move into
//!    the pending buffer under the state lock; slices that left the window
//!    are dropped and counted; once a slice, the emptied local keys are
//!    evicted and the cache and hot set pruned. This runs before any I/O,
//!    so counts move out of the local ring even while Redis is
//!    unreachable.
//! 2. **Probe** (`probe.rs`): connect if needed (three `TIME` samples on a
//!    new connection), then one round trip of `TIME` (a sample) and the
//!    hot version. Skipped by a connected group other than the first with
//!    a batch to send (`needs_probe`).
//! 3. **Batches**: resend the batch in flight if there is one, else cut the
//!    next from the pending buffer; each reply acknowledges its batch
//!    (pending out, rings into the cache, in one critical section) and
//!    carries its crossings. Any failure ends the flush with the batches
//!    kept. The node's work overlaps Redis's, while Redis still sees one
//!    batch at a time in sequence (the exactly-once protocol of
//!    `script.rs` is unchanged): while Redis runs batch `k`, the node cuts
//!    and encodes `k + 1` (both are in flight for reads); once `k`'s reply
//!    is read and decoded, `k + 1` is sent, and `k`'s reply is filed while
//!    Redis runs `k + 1`. A failure of `k` leaves both held, `k + 1`
//!    unsent; a failure to send `k + 1` still files `k`.
//! 4. **Hot set** (`probe.rs`): if the hot version moved, read the
//!    changes.
//!
//! Every outcome is recorded in the health counters and the backoff
//! (`settle`).

use crate::error::ClusterError;
use crate::health::bump;
use crate::key::RedisKey;
use crate::link::{Link, MAX_REDIRECTS};
use crate::node::{Inner, Outbox, Sender};
use crate::results::FlushReport;
use crate::ring::Ring;
use crate::script::FlushReply;
use crate::sync::{read, write};
use crate::timeline::ServerTime;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Instant;
use stripecount::Clock;

impl<K: RedisKey, C: Clock> Inner<K, C> {
    pub(crate) fn time(&self) -> &ServerTime<C> {
        self.windows.clock()
    }

    /// Flushes what the sender's group holds: its batch in flight, then
    /// its staged counts (the caller takes the local counts first, `stage`,
    /// before any I/O: even when Redis is unreachable they move to the
    /// pending buffer, where they are held and pruned safely).
    pub(crate) fn flush_locked(&self, s: &mut Sender<K>) -> Result<FlushReport<K>, ClusterError> {
        let mut report = FlushReport::new();
        if self.idle(s) {
            // Not a round trip: neither the health nor the counters move.
            return Ok(report);
        }
        let r = self.redirecting(s, |me, s| me.try_flush(s, &mut report));
        self.settle(s, &r);
        match r {
            Ok(()) => {
                self.counters.flushed();
                let mut stash = std::mem::take(&mut s.stash);
                stash.append(&mut report.crossings);
                report.crossings = stash;
                Ok(report)
            }
            Err(e) => {
                bump(&self.counters.flush_errors, 1);
                s.stash.append(&mut report.crossings);
                Err(e)
            }
        }
    }

    /// Runs `f`, and again at once after a redirection (the group's slot
    /// is served elsewhere: `MOVED`, or `ASK` while it migrates), a few
    /// times. Batches in flight are resent unchanged, which the
    /// exactly-once protocol makes safe wherever they land.
    pub(crate) fn redirecting<T>(
        &self,
        s: &mut Sender<K>,
        mut f: impl FnMut(&Self, &mut Sender<K>) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        let mut r = self.resetting(s, &mut f);
        for _ in 0..MAX_REDIRECTS {
            match &r {
                Err(e) if s.link.redirected(e) => {
                    bump(&self.counters.redirects, 1);
                    r = self.resetting(s, &mut f);
                }
                _ => break,
            }
        }
        r
    }

    /// Runs `f`; if it panics (in the code of a key), resets the
    /// connection before the panic goes on: a request may be written and
    /// its reply unread. The batches in flight stay held and are resent
    /// on a new connection (the exactly-once protocol makes that safe).
    fn resetting<T>(
        &self,
        s: &mut Sender<K>,
        f: &mut impl FnMut(&Self, &mut Sender<K>) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        match catch_unwind(AssertUnwindSafe(|| f(self, s))) {
            Ok(r) => r,
            Err(p) => {
                s.link.reset();
                resume_unwind(p)
            }
        }
    }

    /// Records the outcome of a round trip in the health and the backoff.
    pub(crate) fn settle<T>(&self, s: &mut Sender<K>, r: &Result<T, ClusterError>) {
        match r {
            Ok(_) => {
                self.counters.up(s.group);
                s.link.backoff.succeeded();
            }
            Err(e) => {
                self.counters.down(s.group, e);
                s.link.backoff.failed(Instant::now());
            }
        }
    }

    fn try_flush(
        &self,
        s: &mut Sender<K>,
        report: &mut FlushReport<K>,
    ) -> Result<(), ClusterError> {
        let mut version = if self.needs_probe(s) {
            Some(self.probe(s)?)
        } else {
            None
        };
        // Whether `s.outbox`'s request is written on this connection and
        // its reply not yet read.
        let mut sent = false;
        loop {
            if s.outbox.is_none() {
                s.outbox = s.next.take().or_else(|| self.cut(s.group));
            }
            let Some(ob) = s.outbox.as_mut() else {
                break;
            };
            if !sent {
                self.send_request(&mut s.link, ob)?;
            }
            // While Redis runs it: cut and encode the next batch.
            if s.next.is_none() {
                s.next = self.cut(s.group);
            }
            let ob = s.outbox.as_ref().expect("a batch in flight");
            let v = s.link.receive_eval(&self.flush_lua, &ob.request.bytes)?;
            let reply = FlushReply::decode(v, ob.order.len())?;
            self.check_acknowledgement(s, &reply)?;
            // Redis applied it: send the next before filing this reply, so
            // that the filing overlaps Redis's run of the next. Redis still
            // sees one batch at a time, in sequence.
            let ob = s.outbox.take().expect("a batch in flight");
            s.outbox = s.next.take();
            let sent_next = match s.outbox.as_mut() {
                Some(next) => self.send_request(&mut s.link, next),
                None => Ok(()),
            };
            let seq = ob.seq;
            version = match self.file(s.group, ob, reply, report) {
                Ok((v, counts)) => {
                    s.acked.push(seq, counts, self.record_ttl());
                    Some(v)
                }
                Err(e) => {
                    // The next's reply would be left unread on the stream.
                    s.link.reset();
                    return Err(e);
                }
            };
            sent_next?;
            sent = s.outbox.is_some();
        }
        let version = match version {
            Some(v) => v,
            // A batch's reply sets it whenever the probe was skipped; the
            // probe stands in should none have been sent.
            None => self.probe(s)?,
        };
        self.read_hot_if(s, version)
    }

    /// Whether a flush of the group starts with a probe round trip. The
    /// first group's always does (it samples the timeline's `TIME`, and
    /// finds an unreachable server before a batch is cut). Another group's
    /// probe only connects and reads the hot version, which the reply of
    /// a batch carries too: a connected group with a batch to send skips
    /// it (on a cluster of 16 groups, 15 round trips a flush fewer).
    fn needs_probe(&self, s: &Sender<K>) -> bool {
        s.group == 0
            || !s.link.connected()
            || (s.outbox.is_none() && read(&self.state).pending[s.group].staged_keys() == 0)
    }

    /// Writes a batch's request (its reply is read by `receive_eval`).
    fn send_request(&self, link: &mut Link, ob: &mut Outbox) -> Result<(), ClusterError> {
        if ob.sends > 0 {
            bump(&self.counters.resends, 1);
        }
        ob.sends += 1;
        link.send(&ob.request.bytes)
    }

    /// Sends the oldest batch in flight, waits for its reply and files it
    /// (the next batch, if one is cut, becomes the oldest, unsent); returns
    /// the hot version the reply carries.
    pub(crate) fn send_outbox(
        &self,
        s: &mut Sender<K>,
        report: &mut FlushReport<K>,
    ) -> Result<u64, ClusterError> {
        let ob = s.outbox.as_mut().expect("a batch in flight");
        self.send_request(&mut s.link, ob)?;
        let v = s.link.receive_eval(&self.flush_lua, &ob.request.bytes)?;
        let reply = FlushReply::decode(v, ob.order.len())?;
        self.check_acknowledgement(s, &reply)?;
        let ob = s.outbox.take().expect("a batch in flight");
        s.outbox = s.next.take();
        let seq = ob.seq;
        let (version, counts) = self.file(s.group, ob, reply, report)?;
        s.acked.push(seq, counts, self.record_ttl());
        Ok(version)
    }

    /// How long Redis keeps a node's record after its last batch.
    fn record_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.shape.record_ttl_ms)
    }

    /// What a batch's reply must pass before the batch counts as
    /// acknowledged: with `wait_for_replicas`, enough replicas have it
    /// (else it stays held, to be resent); and the batches Redis lost
    /// since the last acknowledgement (its record's sequence went back)
    /// are counted.
    fn check_acknowledgement(
        &self,
        s: &mut Sender<K>,
        reply: &FlushReply,
    ) -> Result<(), ClusterError> {
        if let Some((wanted, timeout)) = self.durability {
            let reached = s.link.wait(wanted, timeout)?;
            if reached < u64::from(wanted) {
                bump(&self.counters.not_replicated, 1);
                return Err(ClusterError::NotReplicated { reached, wanted });
            }
        }
        if !reply.replayed {
            let (batches, counts) = s.acked.lost_after(reply.prev_seq);
            bump(&self.counters.lost_batches, batches);
            bump(&self.counters.lost_counts, counts);
        }
        Ok(())
    }

    /// Files the reply that acknowledged `ob` (the oldest batch in
    /// flight): its counts leave the pending buffer and its rings enter
    /// the cache in one critical section; returns the hot version the
    /// reply carries and the counts the batch added.
    fn file(
        &self,
        g: usize,
        ob: Outbox,
        reply: FlushReply,
        report: &mut FlushReport<K>,
    ) -> Result<(u64, u64), ClusterError> {
        let e = self.time().now().as_nanos() / self.slice_nanos;
        let mut hot = Vec::new();
        let mut crossings = Vec::with_capacity(reply.crossings.len());
        let mut guard = write(&self.state);
        let st = &mut *guard;
        let Some(mut batch) = st.pending[g].acknowledge(ob.seq) else {
            return Err(ClusterError::Protocol(
                "acknowledged a batch that was not in flight".into(),
            ));
        };
        // Acknowledged and counted before any code of the key runs (its
        // `Clone`, `Hash`, `Eq` below): a panic there leaves the batch
        // filed, and misses only this reply's cached rings, hot entries
        // and crossings from that key on.
        let c = &self.counters;
        if reply.replayed {
            bump(&c.batches_replayed, 1);
            report.replayed += 1;
        } else {
            bump(&c.batches_applied, 1);
        }
        let counts = batch.counts.saturating_sub(reply.dropped);
        bump(&c.key_deltas_flushed, batch.key_deltas);
        bump(&c.counts_flushed, counts);
        bump(&c.dropped_old, reply.dropped);
        bump(&c.hot_crossings, reply.crossings.len() as u64);
        report.batches += 1;
        report.key_deltas += batch.key_deltas;
        report.counts += counts;
        report.dropped_old += reply.dropped;
        for &(i, sum) in &reply.crossings {
            if let Some(en) = batch.entries.get(&ob.order[i]) {
                crossings.push((en.key.clone(), sum));
            }
        }
        for (name, &(at, len)) in ob.order.iter().zip(&reply.rings) {
            let Some(en) = batch.entries.remove(name) else {
                continue;
            };
            let k = en.key;
            // Validated by `decode`. Into the key's cached ring, reusing
            // its buffer.
            let bytes = &reply.blob[at..at + len];
            let until = match st.cache.get_mut(&k) {
                Some(r) => {
                    r.decode_into(bytes);
                    r.until()
                }
                None => {
                    let r = Ring::decode(bytes).unwrap_or_default();
                    let u = r.until();
                    st.cache.insert(k.clone(), r);
                    u
                }
            };
            if until > e {
                hot.push((k, until));
            }
        }
        drop(guard);
        report.crossings.extend(crossings);
        if !hot.is_empty() {
            let mut h = write(&self.hot);
            for (k, u) in hot {
                h.insert(g, k, u);
            }
        }
        Ok((reply.hot_version, counts))
    }
}
