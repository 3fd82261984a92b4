//! The round trips of a [`ClusterLimiter`](crate::ClusterLimiter): what a
//! request that its held lease cannot serve does (`miss`), returns, and
//! the sequence protocol's outbox (the sweeper is in `sweep.rs`).
//!
//! # One miss
//! Under the sender lock (one request in flight per node, as the
//! protocol needs): look at the key's word again (another thread may have
//! refilled it while this one waited); if the backoff after a failure
//! runs, decide by the outage policy; resend the request in flight if an
//! earlier failure left one (it is always resolved before anything else
//! is sent); else revoke the key's lease (queueing what it held for
//! return), size the next batch, and send one request: the queued returns
//! and a lease of the key. The reply's permits go first to the caller
//! (if the lease is live), the rest into the key's word.
//!
//! # A lease's deadline
//! The script answers the server microseconds left in the lease's slice
//! when it ran (`left`). It ran after the node sent the request (node
//! time `t0`), so the slice ends, on the node's clock, no earlier than
//! `t0 + left` less the drift of the node's clock over `left`
//! ([`DRIFT_PPM`](crate::DRIFT_PPM)) and the server's 1 us resolution:
//! the lease's deadline is that, less the configured margin. This is the
//! [`ServerTime`](crate::ServerTime) bound with the lease's own round
//! trip as the sample, so it holds whatever the node clock's offset (a
//! node 5 s off obeys the limit) and needs no earlier sample.
//!
//! A lease that arrives with less of its slice left than the round trip
//! and the margin is dead on arrival: its permits are returned. Asking
//! again at once would get a lease from the same dying slice, so the
//! request first waits (without the lock) until the server's next slice
//! has surely begun, `t1 + left`: at most the margin plus a round trip.
//! Without the wait, a request that came within the margin of a slice's
//! end was refused after four such tries (`tests/lease.rs`,
//! `a_request_at_a_slice_end_waits_for_the_next_slice`).
//!
//! # A refused key
//! A script's refusal with a retry time is remembered (`memo.rs`): until
//! then the key's requests of at least the refused permits are refused
//! before the lock is taken (and again once it is held, for the requests
//! that queued behind the round trip that refused), without a round trip.
//!
//! # Locks
//! `sender` (the connection, the sequence, the outbox, the queued
//! returns, the per-key batch sizes) is held across round trips, only on
//! the miss path and by the sweeper. The hot path takes no lock.

use super::config::OutagePolicy;
use super::grant::Grant;
use super::memo::Refusal;
use super::script::{lease_request, LeaseNames, LeaseReply, LeaseShape, Return};
use super::stats::LeaseCounters;
use super::word::{units, LeaseWord, Take, MAX_LEASE, TAGS};
use crate::error::ClusterError;
use crate::health::{bump, Counters};
use crate::key::RedisKey;
use crate::link::Link;
use crate::script::{Lua, Request};
use crate::sync::lock;
use crate::timeline::{ServerTime, DRIFT_PPM};
use scc::HashIndex;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stripecount::keyed::KeyRef;
use stripecount::{Clock, KeyedLimiter, Quota, Timestamp};

/// The most returns one request carries.
const MAX_RETURNS: usize = 256;

/// The server timeline, shared (the outage policy's local limiter runs on
/// it).
pub(crate) struct TimeRef<C>(pub(crate) Arc<ServerTime<C>>);

impl<C: Clock> Clock for TimeRef<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        self.0.now()
    }
}

/// A key's last lease, for returns and batch sizing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Held {
    pub(crate) slice: u64,
    pub(crate) granted: u64,
    pub(crate) batch: u64,
    /// Node time the lease was installed.
    pub(crate) at: u64,
}

/// The request in flight: resent byte for byte until acknowledged.
pub(crate) struct Outbox<K> {
    pub(crate) request: Request,
    pub(crate) lease: Option<K>,
    pub(crate) returned: u64,
    pub(crate) sends: u32,
}

/// What the miss path and the sweeper share.
pub(crate) struct Sender<K> {
    pub(crate) link: Link,
    pub(crate) seq: u64,
    pub(crate) outbox: Option<Outbox<K>>,
    pub(crate) held: HashMap<K, Held>,
    pub(crate) returns: Vec<Return<K>>,
    /// Set by [`send`](Remote::send) when the caller's lease arrived with
    /// its slice (nearly) over: the node time by which the server's next
    /// slice has surely begun (`t1 + left`).
    pub(crate) turn_at: Option<u64>,
}

/// Everything a limiter shares with its sweeper.
pub(crate) struct Shared<K: 'static, C: Clock> {
    pub(crate) words: HashIndex<K, Arc<LeaseWord>>,
    /// The refusal memo (`memo.rs`): keys refused by the script, until
    /// their retry time. Empty when `memo_on` is off.
    pub(crate) memo: HashIndex<K, Refusal>,
    pub(crate) memo_on: bool,
    pub(crate) time: Arc<ServerTime<C>>,
    /// The slices a request is judged against: the quota's, one more when
    /// strict.
    pub(crate) judged: u64,
    pub(crate) slice_ns: u64,
    pub(crate) quota: Quota,
    pub(crate) max_batch: u64,
    pub(crate) margin_ns: u64,
    pub(crate) policy: OutagePolicy,
    pub(crate) local: Option<KeyedLimiter<K, TimeRef<C>>>,
    pub(crate) names: LeaseNames,
    pub(crate) shape: LeaseShape,
    pub(crate) lua: Lua,
    pub(crate) node_id: String,
    pub(crate) sender: Mutex<Sender<K>>,
    pub(crate) link_health: Counters,
    pub(crate) counters: LeaseCounters,
    pub(crate) in_flight: AtomicBool,
}

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// The node clock now, in nanoseconds.
    #[inline]
    pub(crate) fn node_now(&self) -> u64 {
        self.time.node_ns()
    }

    /// A grant of permits counted in server slice `slice`.
    #[inline]
    pub(crate) fn granted(&self, slice: u64) -> Grant {
        Grant::Granted {
            slice_start: Timestamp::from_nanos(slice.saturating_mul(self.slice_ns)),
        }
    }

    /// The hot path: `n` permits from the key's held lease at node time
    /// `now`, if it has them.
    #[inline]
    pub(crate) fn take<Q>(&self, key: &Q, now: u64, n: u64) -> Option<u64>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        match self.words.peek_with(key, |_, w| w.try_take(units(now), n)) {
            Some(Take::Granted { tag }) => Some(tag),
            _ => None,
        }
    }

    /// The full slice number of a lease tagged `tag` granting at node time
    /// `now`: the slice is current on the server's clock, so it is the one
    /// nearest to the node's estimate of the server's slice with that tag.
    pub(crate) fn slice_of(&self, tag: u64, now: u64) -> u64 {
        let est = self.time.server_at(now) / self.slice_ns;
        let d = est.wrapping_sub(tag) & (TAGS - 1);
        if d < TAGS / 2 {
            est.wrapping_sub(d)
        } else {
            est.wrapping_add(TAGS - d)
        }
    }

    /// A request the held lease could not serve.
    pub(crate) fn miss<Q>(&self, key: &Q, n: u64) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        if n > self.quota.limit() {
            return Grant::Refused { retry_after: None };
        }
        if let Some(g) = self.memo_refused(key, self.node_now(), n) {
            return g;
        }
        let mut s = lock(&self.sender);
        // A lease that arrives with its slice already over is returned and
        // asked again; a few tries.
        for _ in 0..4 {
            let now = self.node_now();
            if let Some(tag) = self.take(key, now, n) {
                return self.granted(self.slice_of(tag, now));
            }
            // Refused by a round trip another thread made meanwhile.
            if let Some(g) = self.memo_refused(key, now, n) {
                return g;
            }
            if !s.link.backoff.ready(Instant::now()) {
                return self.outage(key, n);
            }
            let r = if s.outbox.is_some() {
                self.send(&mut s, None)
            } else {
                self.lease(&mut s, key.to_key(), n)
            };
            match r {
                Ok(Some(g)) => return g,
                Ok(None) => {
                    if let Some(at) = s.turn_at.take() {
                        // The lease arrived with its slice (nearly) over:
                        // asked again at once, the next lease would come
                        // from the same dying slice (a round trip is far
                        // shorter than the margin), and after four tries
                        // the request would be refused with room in the
                        // window. Wait, without the sender's lock, until
                        // the server's next slice has surely begun: at
                        // most the margin plus a round trip.
                        drop(s);
                        let wait = at.saturating_sub(self.node_now());
                        std::thread::sleep(Duration::from_nanos(wait));
                        s = lock(&self.sender);
                    }
                }
                Err(e) => {
                    self.failed(&mut s, &e);
                    return self.outage(key, n);
                }
            }
        }
        Grant::Refused { retry_after: None }
    }

    fn outage<Q>(&self, key: &Q, n: u64) -> Grant
    where
        Q: KeyRef<K> + ?Sized,
    {
        let admit = match self.policy {
            OutagePolicy::FailClosed => false,
            OutagePolicy::FailOpen => true,
            OutagePolicy::LocalShare { .. } => {
                self.local.as_ref().is_some_and(|l| l.try_acquire(key, n))
            }
        };
        if admit {
            bump(&self.counters.outage_admitted, 1);
            Grant::OutageAdmitted
        } else {
            bump(&self.counters.outage_refused, 1);
            Grant::OutageRefused
        }
    }

    pub(crate) fn failed(&self, s: &mut Sender<K>, e: &ClusterError) {
        self.link_health.down(e);
        s.link.backoff.failed(Instant::now());
        bump(&self.counters.errors, 1);
        if let ClusterError::ShapeMismatch(_) = e {
            // The script checks the shape before any write: nothing of it
            // was applied, and no resend can succeed.
            s.outbox = None;
            self.in_flight.store(false, Ordering::Relaxed);
        }
    }

    /// The key's word (inserted if missing). Under the sender lock.
    fn word_of(&self, k: &K) -> Arc<LeaseWord> {
        if let Some(w) = self.words.peek_with(k, |_, w| Arc::clone(w)) {
            return w;
        }
        let w = Arc::new(LeaseWord::new());
        match self.words.insert(k.clone(), Arc::clone(&w)) {
            Ok(()) => w,
            Err(_) => self.words.peek_with(k, |_, w| Arc::clone(w)).unwrap_or(w),
        }
    }

    /// Revokes `k`'s lease and asks for a new one of at least `n` permits,
    /// with the queued returns.
    fn lease(&self, s: &mut Sender<K>, k: K, n: u64) -> Result<Option<Grant>, ClusterError> {
        let rev = self.word_of(&k).revoke();
        let h = s.held.entry(k.clone()).or_default();
        // Batches follow this node's rate of the key: a lease that ran out
        // is followed by a slice's worth at the rate it ran out at (at
        // least double), one that ended unused by what it served (the
        // sweeper judges the leases it revokes: `granted` 0).
        h.batch = if h.batch == 0 {
            1
        } else if h.granted == 0 {
            h.batch
        } else if rev == 0 {
            let lasted = u128::from(self.node_now().wrapping_sub(h.at).max(1));
            let per_slice = u128::from(h.granted) * u128::from(self.slice_ns) / lasted;
            u64::try_from(per_slice)
                .unwrap_or(u64::MAX)
                .max(h.granted.saturating_mul(2))
        } else {
            h.granted.saturating_sub(rev)
        }
        .clamp(1, self.max_batch);
        let (want, slice) = (h.batch.max(n), h.slice);
        if rev > 0 {
            s.returns.push(Return {
                key: k.clone(),
                epoch: slice,
                permits: rev,
            });
        }
        s.seq += 1;
        let cut = s.returns.len().saturating_sub(MAX_RETURNS);
        let rets: Vec<Return<K>> = s.returns.drain(cut..).collect();
        let request = lease_request(
            &self.lua.sha,
            &self.names,
            &self.shape,
            s.seq,
            Some((&k, n, want)),
            &rets,
        );
        s.outbox = Some(Outbox {
            request,
            lease: Some(k),
            returned: rets.iter().map(|r| r.permits).sum(),
            sends: 0,
        });
        self.send(s, Some(n))
    }

    /// Sends the queued returns (no lease), after the request in flight.
    pub(crate) fn send_returns(&self, s: &mut Sender<K>) -> Result<(), ClusterError> {
        if s.outbox.is_some() {
            self.send(s, None)?;
        }
        while !s.returns.is_empty() {
            s.seq += 1;
            let cut = s.returns.len().saturating_sub(MAX_RETURNS);
            let rets: Vec<Return<K>> = s.returns.drain(cut..).collect();
            let request =
                lease_request::<K>(&self.lua.sha, &self.names, &self.shape, s.seq, None, &rets);
            s.outbox = Some(Outbox {
                request,
                lease: None,
                returned: rets.iter().map(|r| r.permits).sum(),
                sends: 0,
            });
            self.send(s, None)?;
        }
        Ok(())
    }

    /// Sends the request in flight and files its reply. `caller`: the
    /// permits the thread that made this request needs (`None` for a
    /// resend or returns). `Ok(Some)`: the caller's request is decided.
    fn send(&self, s: &mut Sender<K>, caller: Option<u64>) -> Result<Option<Grant>, ClusterError> {
        let (opened, samples) = s.link.ensure_sampled(&self.time)?;
        if opened {
            bump(&self.counters.connects, 1);
        }
        let _ = samples;
        let ob = s.outbox.as_mut().expect("a request in flight");
        if ob.sends > 0 {
            bump(&self.counters.resends, 1);
        }
        ob.sends += 1;
        self.in_flight.store(true, Ordering::Relaxed);
        let t0 = self.node_now();
        let v = s.link.eval(&self.lua, &ob.request.bytes)?;
        let t1 = self.node_now();
        let r = LeaseReply::decode(&v)?;
        let ob = s.outbox.take().expect("a request in flight");
        self.in_flight.store(false, Ordering::Relaxed);
        self.link_health.up();
        s.link.backoff.succeeded();
        self.time.sample(
            Timestamp::from_nanos(t0),
            Timestamp::from_nanos(t1),
            Timestamp::from_nanos(r.server_us.saturating_mul(1_000)),
        );
        let c = &self.counters;
        bump(&c.round_trips, 1);
        bump(&c.returned_permits, ob.returned);
        if r.replayed {
            bump(&c.replays, 1);
        }
        let Some(k) = ob.lease else {
            return Ok(None);
        };
        if r.granted == 0 {
            bump(&c.refusals, 1);
            if let (Some(need), Some(us)) = (caller, r.retry_us) {
                self.memo_refusal(k, t0, us, need);
            }
            let retry_after = r.retry_us.map(Duration::from_micros);
            return Ok(caller.map(|_| Grant::Refused { retry_after }));
        }
        bump(&c.leases, 1);
        bump(&c.leased_permits, r.granted);
        // Node nanoseconds from t0 the lease may be used for (module docs).
        let left = u64::try_from(r.left_us).unwrap_or(0).saturating_mul(1_000);
        let life = left.saturating_sub(
            (left / (1_000_000 / DRIFT_PPM) + 1_000).saturating_add(self.margin_ns),
        );
        let live = t1.wrapping_sub(t0) < life;
        if !live && caller.is_some() {
            s.turn_at = Some(t1.wrapping_add(left));
        }
        let mut g = r.granted;
        let mut decided = None;
        if let Some(need) = caller {
            if live && g >= need {
                g -= need;
                decided = Some(self.granted(r.epoch));
            }
        }
        let prev = s.held.get(&k).map_or(0, |h| h.slice);
        let h = s.held.entry(k.clone()).or_default();
        h.slice = r.epoch;
        // A lease that arrived with its slice over tells nothing of the rate.
        h.granted = if live { r.granted } else { 0 };
        h.at = t1;
        let mut back = if live { 0 } else { g };
        if live && g > 0 {
            let old = self
                .word_of(&k)
                .install(units(t0.wrapping_add(life)), r.epoch, g);
            back = g.saturating_sub(MAX_LEASE);
            if old > 0 {
                // Never: a key's lease is revoked before it is asked again.
                s.returns.push(Return {
                    key: k.clone(),
                    epoch: prev,
                    permits: old,
                });
            }
        }
        if back > 0 {
            s.returns.push(Return {
                key: k,
                epoch: r.epoch,
                permits: back,
            });
        }
        Ok(decided)
    }
}
