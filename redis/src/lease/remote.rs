//! What a [`ClusterLimiter`](crate::ClusterLimiter)'s nodes share between
//! the hot path, the miss path and the lanes' threads ([`Shared`]), and the
//! miss path's entry: a request its held lease cannot serve joins its
//! group's lane (`lane.rs`) and waits for the batch that carries it
//! (`batch.rs` forms batches, `request.rs` sends them, `reply.rs` files
//! their replies).
//!
//! # One miss
//! Refused at once, without a lock: more than the limit, or a refusal the
//! memo holds (`memo.rs`). Otherwise the caller writes the key's name (the
//! key's own code runs on the caller's thread: if it panics, nothing has
//! changed) and joins the lane of the key's group:
//! - the lane was idle: a synchronous caller drives one batch itself (its
//!   request goes straight out, with whatever queued meanwhile), then, if
//!   more queued, passes the lane to a synchronous caller waiting in it
//!   (which must be woken anyway) or else hands it to the lane's thread;
//!   an async caller hands it to the thread at once;
//! - a batch is in flight: the caller waits (parked, or as a pending
//!   future) and goes in the next one, with every request queued
//!   meanwhile (up to `max_batch_keys` keys);
//! - the lane holds `max_queue` requests already: the request is shed at
//!   once ([`Grant::Overloaded`], or the outage policy: `Shed`).
//!
//! # A lease's deadline
//! The script answers the server microseconds left in the leases' slice
//! when it ran (`left`). It ran after the node sent the request (node
//! time `t0`), so the slice ends, on the node's clock, no earlier than
//! `t0 + left` less the drift of the node's clock over `left`
//! ([`DRIFT_PPM`](crate::DRIFT_PPM)) and the server's 1 us resolution:
//! the lease's deadline is that, less the configured margin. This is the
//! [`ServerTime`](crate::ServerTime) bound with the lease's own round
//! trip as the sample, so it holds whatever the node clock's offset (a
//! node 5 s off obeys the limit) and needs no earlier sample.
//!
//! A batch whose reply arrives with less of its slice left than the round
//! trip and the margin is dead on arrival: its permits are returned and
//! its requests go back to the lane. Asking again at once would get a
//! lease from the same dying slice, so the lane's next batch first waits
//! (without the sender's lock) until the server's next slice has surely
//! begun, `t1 + left`: at most the margin plus a round trip. A request
//! whose lease arrived dead four times is refused.
//!
//! # Locks
//! `lanes[g]` (its queue and who drives it) is held for a push or a pop,
//! never across I/O or the key type's code. `senders[g]` (the connection,
//! the sequence, the request in flight, the queued returns, the per-key
//! batch sizes) is held by the lane's driver across a batch's round trip,
//! and by a sweep. The hot path takes no lock.

use super::config::{OutagePolicy, Shed};
use super::grant::Grant;
use super::lane::{Join, Lane, Slot, Waited, Wake};
use super::layout::{name_of, LeaseNames};
use super::memo::Refusal;
use super::script::Return;
use super::sizes::Sizes;
use super::stats::LeaseCounters;
use super::word::{LeaseWord, Take, TAGS};
use crate::error::ClusterError;
use crate::group::Groups;
use crate::health::{bump, Counters};
use crate::key::RedisKey;
use crate::link::Link;
use crate::script::{Lua, Request};
use crate::timeline::ServerTime;
use scc::HashIndex;
use std::any::Any;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stripecount::hash::RandomState;
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

/// A request waiting in a lane: the key, its name in Redis (written by
/// the caller), the permits it needs (0: a renewal, which no one waits
/// for).
pub(crate) struct Want<K> {
    pub(crate) key: K,
    pub(crate) name: Box<[u8]>,
    pub(crate) n: u64,
    /// Leases of it that arrived with their slice over.
    pub(crate) dead: AtomicU32,
}

/// How a slot is answered: the decision, or the panic of the key type's
/// code the driver met on its behalf (resumed on the caller's thread).
pub(crate) enum Answer {
    Decided(Grant),
    Panicked(Box<dyn Any + Send>),
}

/// A request in a lane, and its answer.
pub(crate) type WantSlot<K> = Slot<Want<K>, Answer>;

impl Answer {
    /// The decision, or the panic resumed here.
    pub(crate) fn grant(self) -> Grant {
        match self {
            Answer::Decided(g) => g,
            Answer::Panicked(p) => resume_unwind(p),
        }
    }
}

/// A key leased by the request in flight, and the requests waiting for
/// it, in their order in the lane (the first one's permits are the lease's
/// need; each is served in turn from what was granted).
pub(crate) struct Asked<K> {
    /// The first request of the key (its key and name are the lease's).
    pub(crate) lead: Arc<WantSlot<K>>,
    pub(crate) waiters: Vec<Arc<WantSlot<K>>>,
}

impl<K> Asked<K> {
    pub(crate) fn key(&self) -> &K {
        &self.lead.req.key
    }

    pub(crate) fn name(&self) -> &[u8] {
        &self.lead.req.name
    }
}

/// The request in flight: resent byte for byte until acknowledged.
pub(crate) struct Outbox<K> {
    pub(crate) request: Request,
    /// The keys leased, in the request's order.
    pub(crate) leases: Vec<Asked<K>>,
    pub(crate) returned: u64,
    pub(crate) sends: u32,
}

/// What a group's driver and the sweeps share.
pub(crate) struct Sender<K> {
    /// The group whose keys this sender leases (`group.rs`; 0 on a single
    /// instance).
    pub(crate) group: usize,
    pub(crate) link: Link,
    pub(crate) seq: u64,
    pub(crate) outbox: Option<Outbox<K>>,
    /// Keys that hold (or held) permits on this node: their last lease.
    pub(crate) held: HashMap<K, Held>,
    /// The last lease of keys that used theirs up, in fixed memory.
    pub(crate) sizes: Sizes,
    pub(crate) returns: Vec<Return>,
    /// Wake-ups of waiters whose answers are stored, made once the next
    /// request is on the wire (the wake-ups then overlap Redis's work), or
    /// when the lane runs empty (`batch.rs`).
    pub(crate) wakes: Vec<Wake>,
    /// The wake-ups a batch found when it started: made when its request
    /// is on the wire, or when it ends without one.
    pub(crate) wake_on_send: Vec<Wake>,
    /// Set when a batch arrived with its slice (nearly) over: the node
    /// time by which the server's next slice has surely begun (`t1 +
    /// left`); the next batch waits for it.
    pub(crate) turn_at: Option<u64>,
}

/// Everything a limiter shares with its lanes' threads.
pub(crate) struct Shared<K: 'static, C: Clock> {
    pub(crate) words: HashIndex<K, Arc<LeaseWord>, RandomState>,
    /// The refusal memo (`memo.rs`): keys refused by the script, until
    /// their retry time. Empty when `memo_on` is off.
    pub(crate) memo: HashIndex<K, Refusal, RandomState>,
    pub(crate) memo_on: bool,
    /// Leases ask for their next one when they run low (`renew_early`).
    pub(crate) renew_early: bool,
    pub(crate) time: Arc<ServerTime<C>>,
    /// The slices a request is judged against: the quota's, one more when
    /// strict.
    pub(crate) judged: u64,
    pub(crate) slice_ns: u64,
    /// The judged slices' length (ns): how long a size record counts.
    pub(crate) window_ns: u64,
    pub(crate) quota: Quota,
    pub(crate) max_batch: u64,
    /// The most keys one request leases.
    pub(crate) max_batch_keys: usize,
    pub(crate) margin_ns: u64,
    /// `(replicas, timeout)` a request waits for before it is used
    /// (`wait_for_replicas`).
    pub(crate) durability: Option<(u32, Duration)>,
    pub(crate) policy: OutagePolicy,
    pub(crate) shed: Shed,
    pub(crate) local: Option<KeyedLimiter<K, TimeRef<C>>>,
    /// How keys spread over a cluster's slots.
    pub(crate) groups: Groups,
    /// Each group's key names.
    pub(crate) names: Vec<LeaseNames>,
    /// The namespace's fixed arguments of a request
    /// (`LeaseShape::fixed_args`), encoded once.
    pub(crate) lease_args: Vec<u8>,
    pub(crate) lua: Lua,
    pub(crate) node_id: String,
    /// One a group, in group order: the requests waiting for Redis.
    pub(crate) lanes: Vec<Lane<Want<K>, Answer>>,
    /// One a group, in group order.
    pub(crate) senders: Vec<Mutex<Sender<K>>>,
    /// Each group's last round trip (ns): the retry time of a shed request.
    pub(crate) last_rtt: Vec<AtomicU64>,
    pub(crate) link_health: Counters,
    pub(crate) counters: LeaseCounters,
    /// A group's request awaits its acknowledgement, per group.
    pub(crate) in_flight: Vec<AtomicBool>,
}

/// Hands a lane's duty to its thread if the driving caller unwinds.
struct Duty<'a, K: 'static, C: Clock>(&'a Shared<K, C>, usize);

impl<K: 'static, C: Clock> Drop for Duty<'_, K, C> {
    fn drop(&mut self) {
        self.0.lanes[self.1].hand_off();
    }
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
    /// `now`, if it has them. The grant that crosses the lease's renewal
    /// mark also asks for the next lease ([`renew`](Self::renew)).
    #[inline]
    pub(crate) fn take<Q>(&self, key: &Q, now: u64, n: u64) -> Option<u64>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        match self
            .words
            .peek_with(key, |_, w| w.try_take(super::word::units(now), n))
        {
            Some(Take::Granted { tag, renew }) => {
                if renew {
                    self.renew(key);
                }
                Some(tag)
            }
            _ => None,
        }
    }

    /// Asks for `key`'s next lease while its held one still grants: a
    /// request of no permits of its own, in the warm keys' queue, that no
    /// one waits for (its lease replaces the held one, whose rest is
    /// returned). Best effort: not asked if the queue is full, or if the
    /// key's code panics (counted in `key_panics`; the grant that called
    /// this stands).
    #[cold]
    pub(crate) fn renew<Q>(&self, key: &Q)
    where
        Q: KeyRef<K> + ?Sized,
    {
        let named = catch_unwind(AssertUnwindSafe(|| {
            let k = key.to_key();
            let name = name_of(&k);
            (k, name)
        }));
        let Ok((key, name)) = named else {
            bump(&self.counters.key_panics, 1);
            return;
        };
        let g = self.groups.of(&name);
        let want = Want {
            key,
            name,
            n: 0,
            dead: AtomicU32::new(0),
        };
        bump(&self.counters.renewals, 1);
        let _ = self.lanes[g].join_async(Arc::new(Slot::new(want)), true);
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

    /// A request the held lease could not serve, decided on this thread
    /// (module docs): refused at once, or queued in its group's lane and
    /// waited for, driving the lane if it was idle.
    pub(crate) fn miss<Q>(&self, key: &Q, n: u64) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        let (slot, g, warm) = match self.enter(key, n) {
            Ok(s) => s,
            Err(grant) => return grant,
        };
        let mut lead = match self.lanes[g].join(Arc::clone(&slot), warm) {
            Join::Full => return self.shed(key, n, g),
            Join::Follow => false,
            Join::Lead => true,
        };
        loop {
            if lead {
                let duty = Duty(self, g);
                self.drive(g);
                std::mem::forget(duty);
                let lane = &self.lanes[g];
                if !lane.release() && !lane.pass_to_waiter() {
                    lane.hand_off();
                }
            }
            match slot.wait() {
                Waited::Answered(a) => return a.grant(),
                Waited::Lead => lead = true,
            }
        }
    }

    /// The checks before a request joins its lane: `Err` the decision
    /// when it needs no round trip, else the request's slot, its group, and
    /// whether its key is warm (it holds a lease word: it joins ahead).
    /// Runs the key's own code (`Clone`, `write_key`) on this thread.
    #[allow(clippy::type_complexity)]
    pub(crate) fn enter<Q>(&self, key: &Q, n: u64) -> Result<(Arc<WantSlot<K>>, usize, bool), Grant>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        if n > self.quota.limit() {
            return Err(Grant::Refused { retry_after: None });
        }
        if let Some(g) = self.memo_refused(key, self.node_now(), n) {
            return Err(g);
        }
        let warm = self.words.peek_with(key, |_, _| ()).is_some();
        let k = key.to_key();
        let name = name_of(&k);
        let g = self.groups.of(&name);
        let want = Want {
            key: k,
            name,
            n,
            dead: AtomicU32::new(0),
        };
        Ok((Arc::new(Slot::new(want)), g, warm))
    }

    /// The answer to a request its group's full lane did not take.
    pub(crate) fn shed<Q>(&self, key: &Q, n: u64, g: usize) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        bump(&self.counters.shed, 1);
        match self.shed {
            Shed::Overloaded => {
                // The time to drain the lane: its batches, each a round
                // trip.
                let lane = self.lanes[g].queued().div_ceil(self.max_batch_keys) as u64 + 1;
                let rtt = self.last_rtt[g].load(Ordering::Relaxed).max(100_000);
                Grant::Overloaded {
                    retry_after: Duration::from_nanos(rtt.saturating_mul(lane)),
                }
            }
            Shed::Outage => self.outage(key, n),
        }
    }

    /// The outage policy's decision of `n` permits of `key`.
    pub(crate) fn outage<Q>(&self, key: &Q, n: u64) -> Grant
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
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

    /// Answers a waiter by the outage policy (its key's code runs here,
    /// caught: a panic is the waiter's answer).
    pub(crate) fn answer_outage(&self, slot: &WantSlot<K>) {
        let want = &slot.req;
        let a = match catch_unwind(AssertUnwindSafe(|| self.outage(&want.key, want.n))) {
            Ok(g) => Answer::Decided(g),
            Err(p) => Answer::Panicked(p),
        };
        let _ = slot.finish(a);
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

    /// The key's word, if it has one.
    pub(crate) fn word(&self, k: &K) -> Option<Arc<LeaseWord>> {
        self.words.peek_with(k, |_, w| Arc::clone(w))
    }

    /// The key's word (inserted if missing). Under the sender lock.
    pub(crate) fn word_of(&self, k: &K) -> Arc<LeaseWord> {
        if let Some(w) = self.word(k) {
            return w;
        }
        let w = Arc::new(LeaseWord::new());
        match self.words.insert(k.clone(), Arc::clone(&w)) {
            Ok(()) => w,
            Err(_) => self.word(k).unwrap_or(w),
        }
    }
}

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// [`miss`](Self::miss) for a caller that must not block: the decision
    /// at once, or a future of the batch that carries it (its lane driven
    /// by the lane's thread).
    pub(crate) fn miss_async<Q>(&self, key: &Q, n: u64) -> super::future::GrantFuture
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        use super::future::GrantFuture;
        let (slot, g, warm) = match self.enter(key, n) {
            Ok(s) => s,
            Err(grant) => return GrantFuture::ready(grant),
        };
        if self.lanes[g].join_async(Arc::clone(&slot), warm) {
            GrantFuture::waiting(slot)
        } else {
            GrantFuture::ready(self.shed(key, n, g))
        }
    }
}
