//! The round trips of a [`ClusterLimiter`](crate::ClusterLimiter): what a
//! request that its held lease cannot serve does (`miss`), and the state
//! the miss path shares with the sweeper (`sweep.rs`); the requests
//! themselves (a lease, returns, filing a reply) are in `request.rs`.
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
use super::script::{LeaseNames, LeaseShape, Return};
use super::stats::LeaseCounters;
use super::word::{units, LeaseWord, Take, TAGS};
use crate::error::ClusterError;
use crate::group::Groups;
use crate::health::{bump, Counters};
use crate::key::RedisKey;
use crate::link::Link;
use crate::script::{Lua, Request};
use crate::sync::lock;
use crate::timeline::ServerTime;
use scc::HashIndex;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stripecount::keyed::KeyRef;
use stripecount::{Clock, KeyedLimiter, Quota, Timestamp};

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
    /// The key leased and its name.
    pub(crate) lease: Option<(K, Box<[u8]>)>,
    pub(crate) returned: u64,
    pub(crate) sends: u32,
}

/// What the miss path and the sweeper share.
pub(crate) struct Sender<K> {
    /// The group whose keys this sender leases (`group.rs`; 0 on a single
    /// instance).
    pub(crate) group: usize,
    pub(crate) link: Link,
    pub(crate) seq: u64,
    pub(crate) outbox: Option<Outbox<K>>,
    pub(crate) held: HashMap<K, Held>,
    pub(crate) returns: Vec<Return>,
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
    /// `(replicas, timeout)` a request waits for before it is used
    /// (`wait_for_replicas`).
    pub(crate) durability: Option<(u32, Duration)>,
    pub(crate) policy: OutagePolicy,
    pub(crate) local: Option<KeyedLimiter<K, TimeRef<C>>>,
    /// How keys spread over a cluster's slots.
    pub(crate) groups: Groups,
    /// Each group's key names.
    pub(crate) names: Vec<LeaseNames>,
    pub(crate) shape: LeaseShape,
    pub(crate) lua: Lua,
    pub(crate) node_id: String,
    /// One a group, in group order.
    pub(crate) senders: Vec<Mutex<Sender<K>>>,
    pub(crate) link_health: Counters,
    pub(crate) counters: LeaseCounters,
    /// A group's request awaits its acknowledgement, per group.
    pub(crate) in_flight: Vec<AtomicBool>,
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
        let k = key.to_key();
        let sender = &self.senders[self.groups.of_key(&k, &mut Vec::new())];
        let mut s = lock(sender);
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
                self.lease(&mut s, k.clone(), n)
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
                        s = lock(sender);
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
        self.link_health.down(s.group, e);
        s.link.backoff.failed(Instant::now());
        bump(&self.counters.errors, 1);
        if let ClusterError::ShapeMismatch(_) = e {
            // The script checks the shape before any write: nothing of it
            // was applied, and no resend can succeed.
            s.outbox = None;
            self.in_flight[s.group].store(false, Ordering::Relaxed);
        }
    }

    /// The key's word (inserted if missing). Under the sender lock.
    pub(crate) fn word_of(&self, k: &K) -> Arc<LeaseWord> {
        if let Some(w) = self.words.peek_with(k, |_, w| Arc::clone(w)) {
            return w;
        }
        let w = Arc::new(LeaseWord::new());
        match self.words.insert(k.clone(), Arc::clone(&w)) {
            Ok(()) => w,
            Err(_) => self.words.peek_with(k, |_, w| Arc::clone(w)).unwrap_or(w),
        }
    }
}
