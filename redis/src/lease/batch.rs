//! A lane's batches: the driver takes the requests queued in its group's
//! lane, answers those that need no round trip, sends one request for the
//! rest (`request.rs`); its reply is filed by `reply.rs`.
//!
//! # Forming a batch
//! Under the group's sender lock, from up to `max_batch_keys` requests
//! taken from the front of the lane:
//! - a request whose key's word can serve it now (a batch before this one
//!   leased it) is granted from the word; one the memo refuses is refused;
//!   one whose waiter went away is dropped;
//! - the others are grouped by key name (a name is leased once a
//!   request): the key's first request sets the lease's need, and it
//!   wants at least what all its requests need together (a new key's first
//!   lease is what is waiting for it: one permit for a key seen once);
//! - each key's held lease is revoked (its permits queued for return) and
//!   the next lease sized to this node's rate of the key, as a lone miss
//!   always did.
//!
//! While the link's backoff runs, every request gets the outage policy; a
//! request an earlier failure left in flight is resent first (the
//! exactly-once protocol resends before anything new); a failed send
//! answers the batch's waiters by the outage policy, and the request stays
//! in flight for the next batch to resend, its leases then going to the
//! words (no one waits for them any more).
//!
//! The key type's code (`Hash` and `Eq` of the words, the memo and the
//! per-key records; `Clone` when a key's record or word is made) runs
//! here, each key inside a catch: a panic answers the key's first request
//! not yet answered with it (resumed on that caller's thread; if every
//! request was answered already, it is only counted), sends the key's
//! other requests back to the lane and returns the permits not yet handed
//! out; the batch goes on. Grouping runs none of it: keys are grouped by
//! their names.

use super::grant::Grant;
use super::lane::Wake;
use super::remote::{Answer, Asked, Outbox, Sender, Shared, WantSlot};
use super::script::{lease_request, Ask, Return};
use crate::health::bump;
use crate::key::RedisKey;
use crate::sync::lock;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripecount::Clock;

/// The most returns one request carries.
pub(crate) const MAX_RETURNS: usize = 256;

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// Drives one batch of group `g`'s lane (the caller has its duty). The
    /// last batch's waiters are woken once this one's request is on the
    /// wire (so the wake-ups overlap Redis's work), or when this one ends
    /// without a request; this batch's, by the next one, or before this
    /// returns if the lane is empty (then no next batch is coming from this
    /// driver).
    pub(crate) fn drive(&self, g: usize) {
        let mut s = lock(&self.senders[g]);
        if let Some(at) = s.turn_at.take() {
            // The last batch arrived with its slice over: wait, without the
            // lock, until the server's next slice has surely begun (at most
            // the margin plus a round trip).
            let wait = at.saturating_sub(self.node_now());
            if wait > 0 {
                wake_all(&mut s.wakes);
                drop(s);
                std::thread::sleep(Duration::from_nanos(wait));
                s = lock(&self.senders[g]);
            }
        }
        let last = std::mem::take(&mut s.wakes);
        s.wake_on_send.extend(last);
        self.drive_locked(&mut s, g);
        wake_all(&mut s.wake_on_send);
        if self.lanes[g].queued() == 0 {
            wake_all(&mut s.wakes);
        }
    }

    fn drive_locked(&self, s: &mut Sender<K>, g: usize) {
        let slots = self.lanes[g].take(self.max_batch_keys);
        let mut asks = self.screen(slots);
        if !s.link.backoff.ready(Instant::now()) {
            self.answer_all_outage(&mut asks);
            return;
        }
        if s.outbox.is_some() {
            // An earlier failure left a request in flight: it goes first,
            // unchanged; the leases it brings may serve these requests.
            if let Err(e) = self.send(s) {
                self.failed(s, &e);
                self.answer_all_outage(&mut asks);
                return;
            }
            asks = self.screen(asks.into_iter().flat_map(|a| a.waiters).collect());
        }
        if asks.is_empty() {
            return;
        }
        self.lease(s, asks);
        if let Err(e) = self.send(s) {
            // The waiters first: `failed` may drop the request (a shape
            // mismatch, which no resend can cure).
            if let Some(ob) = s.outbox.as_mut() {
                self.answer_all_outage(&mut ob.leases);
            }
            self.failed(s, &e);
        }
    }

    /// Answers the requests that need no round trip (module docs) and
    /// groups the others by key, in the lane's order.
    fn screen(&self, slots: Vec<Arc<WantSlot<K>>>) -> Vec<Asked<K>> {
        let now = self.node_now();
        let mut rest = Vec::with_capacity(slots.len());
        for slot in slots {
            if slot.abandoned() {
                continue;
            }
            let w = &slot.req;
            let here = catch_unwind(AssertUnwindSafe(|| {
                if w.n == 0 {
                    // A renewal: it asks Redis whatever the word holds.
                    return None;
                }
                if let Some(tag) = self.take(&w.key, now, w.n) {
                    return Some(self.granted(self.slice_of(tag, now)));
                }
                self.memo_refused(&w.key, now, w.n)
            }));
            match here {
                Ok(Some(grant)) => {
                    let _ = slot.finish(Answer::Decided(grant));
                }
                Ok(None) => rest.push(slot),
                Err(p) => {
                    bump(&self.counters.key_panics, 1);
                    let _ = slot.finish(Answer::Panicked(p));
                }
            }
        }
        // Grouped by name (our bytes, no code of the key type), in the
        // lane's order: the first request of a key leads its lease.
        let mut group = Vec::with_capacity(rest.len());
        let keys = {
            let mut by_name: HashMap<&[u8], usize> = HashMap::with_capacity(rest.len());
            for slot in &rest {
                let next = by_name.len();
                group.push(*by_name.entry(&slot.req.name[..]).or_insert(next));
            }
            by_name.len()
        };
        let mut asks: Vec<Asked<K>> = Vec::with_capacity(keys);
        for (slot, g) in rest.into_iter().zip(group) {
            if g == asks.len() {
                asks.push(Asked {
                    lead: Arc::clone(&slot),
                    waiters: vec![slot],
                });
            } else {
                asks[g].waiters.push(slot);
            }
        }
        asks
    }

    /// Every waiter of `asks` gets the outage policy (and none waits on
    /// them any more).
    fn answer_all_outage(&self, asks: &mut [Asked<K>]) {
        for a in asks {
            for w in a.waiters.drain(..) {
                if w.req.n == 0 {
                    // A renewal: no one waits; the held lease goes on.
                    let _ = w.finish(Answer::Decided(Grant::OutageRefused));
                    continue;
                }
                self.answer_outage(&w);
            }
        }
    }

    /// Revokes each key's held lease, sizes its next one, and puts the
    /// request leasing them all (with queued returns) in flight.
    fn lease(&self, s: &mut Sender<K>, mut asks: Vec<Asked<K>>) {
        let mut wants = Vec::with_capacity(asks.len());
        asks.retain_mut(|a| {
            let sized = catch_unwind(AssertUnwindSafe(|| self.size(s, a)));
            match sized {
                Ok(w) => {
                    wants.push(w);
                    true
                }
                Err(p) => {
                    self.panicked(a, p);
                    false
                }
            }
        });
        s.seq += 1;
        let cut = s.returns.len().saturating_sub(MAX_RETURNS);
        let rets: Vec<Return> = s.returns.drain(cut..).collect();
        let ask: Vec<Ask<'_>> = asks
            .iter()
            .zip(&wants)
            .map(|(a, &(need, want))| Ask {
                name: a.name(),
                need,
                want,
            })
            .collect();
        let request = lease_request(
            &self.lua.sha,
            &self.names[s.group],
            &self.lease_args,
            s.seq,
            &ask,
            &rets,
        );
        s.outbox = Some(Outbox {
            request,
            leases: asks,
            returned: rets.iter().map(|r| r.permits).sum(),
            sends: 0,
        });
    }

    /// Revokes the key's held lease (queueing its permits for return) and
    /// sizes the next one: `(need, want)`.
    fn size(&self, s: &mut Sender<K>, a: &Asked<K>) -> (u64, u64) {
        // Requests of no permits are renewals (`remote.rs`): a batch of
        // only those keeps the held lease granting until the next one
        // arrives, and asks what the held one will not cover.
        let real = || a.waiters.iter().filter(|w| w.req.n > 0);
        let renewal = real().next().is_none();
        let (rev, held_now) = match self.word(a.key()) {
            Some(w) if renewal => (0, w.remaining()),
            Some(w) => (w.revoke(), 0),
            None => (0, 0),
        };
        let need = real().next().map_or(1, |w| w.req.n);
        let waiting = real().fold(0u64, |t, w| t.saturating_add(w.req.n));
        let now = self.node_now();
        // Batches follow this node's rate of the key: a lease that ran out
        // is followed by a slice's worth at the rate it ran out at (at
        // least double), one that ended unused by what it served (the
        // sweeper judges the leases it revokes: `granted` 0). A key with
        // no record (new, or not seen for a window) gets what waits for
        // it: one permit for a key seen once.
        let rate = |granted: u64, at: u64| {
            let lasted = u128::from(now.wrapping_sub(at).max(1));
            let per_slice = u128::from(granted) * u128::from(self.slice_ns) / lasted;
            u64::try_from(per_slice)
                .unwrap_or(u64::MAX)
                .max(granted.saturating_mul(2))
        };
        let batch = match s.held.get_mut(a.key()) {
            Some(h) => {
                h.batch = if h.batch == 0 {
                    1
                } else if h.granted == 0 {
                    h.batch
                } else if rev == 0 {
                    rate(h.granted, h.at)
                } else {
                    h.granted.saturating_sub(rev)
                }
                .clamp(1, self.max_batch);
                if rev > 0 {
                    s.returns.push(Return {
                        name: a.name().into(),
                        epoch: h.slice,
                        permits: rev,
                    });
                }
                h.batch
            }
            // A key holding no lease: its last one was used up. Within its
            // slice, the next follows the rate it was used at; after its
            // slice ended, the same size again (as the sweeper judges a
            // held lease that ran out).
            None => match s.sizes.get(a.name(), now, self.window_ns) {
                Some(r) => {
                    let slice = self.time.server_at(now) / self.slice_ns;
                    let ended = (slice & 15) != r.tag || now.saturating_sub(r.at) >= self.slice_ns;
                    if ended {
                        r.granted
                    } else {
                        rate(r.granted, r.at)
                    }
                    .clamp(1, self.max_batch)
                }
                None => 1,
            },
        };
        let want = if renewal {
            batch.saturating_sub(held_now).max(1)
        } else {
            batch.max(waiting)
        };
        (need, want)
    }

    /// A panic of `a`'s key code: its first waiter gets it, the others go
    /// back to the lane.
    pub(super) fn panicked(&self, a: &mut Asked<K>, p: Box<dyn std::any::Any + Send>) {
        bump(&self.counters.key_panics, 1);
        let mut ws = a.waiters.drain(..);
        if let Some(first) = ws.next() {
            let _ = first.finish(Answer::Panicked(p));
        }
        let rest: Vec<_> = ws.collect();
        if !rest.is_empty() {
            let g = self.groups.of(a.name());
            self.lanes[g].put_back(rest);
        }
    }
}

/// Wakes every waiter of `wakes` (their answers are stored).
pub(super) fn wake_all(wakes: &mut Vec<Wake>) {
    for w in wakes.drain(..) {
        w.wake();
    }
}
