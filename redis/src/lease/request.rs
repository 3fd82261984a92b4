//! A limiter's requests to Redis: a lease of one key with the queued
//! returns, returns alone, and the filing of a reply (the lease's
//! deadline, the caller's permits, the rest into the key's word). One
//! request is in flight a group, resent unchanged until acknowledged (the
//! sequence protocol of `script.rs`); see `remote.rs` for the miss path
//! that makes them and the deadline's reasoning.

use super::grant::Grant;
use super::remote::{Outbox, Sender, Shared};
use super::script::{lease_request, name_of, LeaseReply, Return};
use super::word::{units, MAX_LEASE};
use crate::error::ClusterError;
use crate::health::bump;
use crate::key::RedisKey;
use crate::link::MAX_REDIRECTS;
use crate::timeline::DRIFT_PPM;
use std::sync::atomic::Ordering;
use std::time::Duration;
use stripecount::{Clock, Timestamp};

/// The most returns one request carries.
const MAX_RETURNS: usize = 256;

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// Revokes `k`'s lease and asks for a new one of at least `n` permits,
    /// with the queued returns.
    pub(crate) fn lease(
        &self,
        s: &mut Sender<K>,
        k: K,
        n: u64,
    ) -> Result<Option<Grant>, ClusterError> {
        // The key's code first: if it panics, nothing has changed.
        let name = name_of(&k);
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
                name: name.clone(),
                epoch: slice,
                permits: rev,
            });
        }
        s.seq += 1;
        let cut = s.returns.len().saturating_sub(MAX_RETURNS);
        let rets: Vec<Return> = s.returns.drain(cut..).collect();
        let request = lease_request(
            &self.lua.sha,
            &self.names[s.group],
            &self.shape,
            s.seq,
            Some((&name, n, want)),
            &rets,
        );
        s.outbox = Some(Outbox {
            request,
            lease: Some((k, name)),
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
            let rets: Vec<Return> = s.returns.drain(cut..).collect();
            let request = lease_request(
                &self.lua.sha,
                &self.names[s.group],
                &self.shape,
                s.seq,
                None,
                &rets,
            );
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
    pub(crate) fn send(
        &self,
        s: &mut Sender<K>,
        caller: Option<u64>,
    ) -> Result<Option<Grant>, ClusterError> {
        // The first group's server is the node's timeline (as for the
        // windows, `flush.rs`); a lease's deadline comes from its own
        // round trip, whatever master ran it.
        let opened = if s.group == 0 {
            s.link.ensure_sampled(&self.time)?.0
        } else {
            s.link.ensure()?
        };
        if opened {
            bump(&self.counters.connects, 1);
        }
        let (t0, v) = {
            let mut redirects = 0;
            loop {
                let ob = s.outbox.as_mut().expect("a request in flight");
                if ob.sends > 0 {
                    bump(&self.counters.resends, 1);
                }
                ob.sends += 1;
                self.in_flight[s.group].store(true, Ordering::Relaxed);
                let t0 = self.node_now();
                // A redirection (the slot moved, or is migrating) is
                // followed at once: the request is resent unchanged, which
                // the sequence protocol makes safe wherever it lands.
                match s.link.eval(&self.lua, &ob.request.bytes) {
                    Err(e) if redirects < MAX_REDIRECTS && s.link.redirected(&e) => {
                        redirects += 1;
                        bump(&self.counters.redirects, 1);
                    }
                    r => break (t0, r?),
                }
            }
        };
        let t1 = self.node_now();
        let r = LeaseReply::decode(&v)?;
        if let Some((wanted, timeout)) = self.durability {
            // Before anything of the reply is used: short of replicas, the
            // request stays in flight (its permits counted in Redis, unused
            // here) and the next miss resends it.
            let reached = s.link.wait(wanted, timeout)?;
            if reached < u64::from(wanted) {
                bump(&self.counters.not_replicated, 1);
                return Err(ClusterError::NotReplicated { reached, wanted });
            }
        }
        let t1 = if self.durability.is_some() {
            // The lease's deadline counts from the script's run, which the
            // WAIT does not move: `t0` stays, `t1` (the decision whether it
            // is live) includes the wait.
            self.node_now()
        } else {
            t1
        };
        let ob = s.outbox.take().expect("a request in flight");
        self.in_flight[s.group].store(false, Ordering::Relaxed);
        self.link_health.up(s.group);
        s.link.backoff.succeeded();
        if s.group == 0 {
            self.time.sample(
                Timestamp::from_nanos(t0),
                Timestamp::from_nanos(t1),
                Timestamp::from_nanos(r.server_us.saturating_mul(1_000)),
            );
        }
        let c = &self.counters;
        bump(&c.round_trips, 1);
        bump(&c.returned_permits, ob.returned);
        if r.replayed {
            bump(&c.replays, 1);
        }
        let Some((k, name)) = ob.lease else {
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
                    name: name.clone(),
                    epoch: prev,
                    permits: old,
                });
            }
        }
        if back > 0 {
            s.returns.push(Return {
                name,
                epoch: r.epoch,
                permits: back,
            });
        }
        Ok(decided)
    }
}
