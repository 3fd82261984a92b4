//! A limiter's requests to Redis: sending the request in flight (a
//! batch's leases with the queued returns, or returns alone) until it is
//! acknowledged, and what its reply tells before it is filed
//! (`batch.rs`). One request is in flight a group, resent unchanged until
//! acknowledged (the sequence protocol of `script.rs`).

use super::batch::MAX_RETURNS;
use super::remote::{Outbox, Sender, Shared};
use super::script::{lease_request, LeaseReply, Return};
use crate::error::ClusterError;
use crate::health::bump;
use crate::key::RedisKey;
use crate::link::MAX_REDIRECTS;
use crate::script::Request;
use std::sync::atomic::Ordering;
use stripecount::{Clock, Timestamp};

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// Sends the queued returns (no lease), after the request in flight.
    pub(crate) fn send_returns(&self, s: &mut Sender<K>) -> Result<(), ClusterError> {
        if s.outbox.is_some() {
            self.send(s)?;
        }
        while !s.returns.is_empty() {
            s.seq += 1;
            let cut = s.returns.len().saturating_sub(MAX_RETURNS);
            let rets: Vec<Return> = s.returns.drain(cut..).collect();
            let request = lease_request(
                &self.lua.sha,
                &self.names[s.group],
                &self.lease_args,
                s.seq,
                &[],
                &rets,
            );
            s.outbox = Some(Outbox {
                request,
                leases: Vec::new(),
                returned: rets.iter().map(|r| r.permits).sum(),
                sends: 0,
            });
            self.send(s)?;
        }
        Ok(())
    }

    /// Connects the sender's link to its group's master (on a cluster,
    /// found by a read of the group's config key, `EXISTS`, which the node
    /// asked redirects), so that the master's connection checks
    /// (`checks.rs`) run: a limiter's first contact with each group. Files
    /// the outcome in the health.
    pub(crate) fn connect(&self, s: &mut Sender<K>) -> Result<(), ClusterError> {
        let mut exists = Request::new(2);
        exists.arg(b"EXISTS").arg(&self.names[s.group].cfg);
        let mut redirects = 0;
        let r = loop {
            let opened = if s.group == 0 {
                s.link.ensure_sampled(&self.time).map(|(o, _)| o)
            } else {
                s.link.ensure()
            };
            if let Ok(true) = opened {
                bump(&self.counters.connects, 1);
            }
            match opened.and_then(|_| s.link.request(&exists.bytes)) {
                Err(e) if redirects < MAX_REDIRECTS && s.link.redirected(&e) => {
                    redirects += 1;
                    bump(&self.counters.redirects, 1);
                }
                r => break r.map(drop),
            }
        };
        match &r {
            Ok(()) => self.link_health.up(s.group),
            Err(e) => {
                self.link_health.down(s.group, e);
                s.link.backoff.failed(std::time::Instant::now());
            }
        }
        r
    }

    /// Sends the request in flight and files its reply (`reply.rs`). On
    /// error the request stays in flight, to be resent unchanged.
    pub(crate) fn send(&self, s: &mut Sender<K>) -> Result<(), ClusterError> {
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
                // The waiters of the last batch are woken while Redis runs
                // this one.
                let sent = s.link.send(&ob.request.bytes);
                for w in s.wake_on_send.drain(..) {
                    w.wake();
                }
                let ob = s.outbox.as_ref().expect("a request in flight");
                match sent.and_then(|()| s.link.receive_eval(&self.lua, &ob.request.bytes)) {
                    Err(e) if redirects < MAX_REDIRECTS && s.link.redirected(&e) => {
                        redirects += 1;
                        bump(&self.counters.redirects, 1);
                    }
                    r => break (t0, r?),
                }
            }
        };
        let t1 = self.node_now();
        let m = s.outbox.as_ref().map_or(0, |ob| ob.leases.len());
        let r = LeaseReply::decode(&v, m)?;
        if let Some((wanted, timeout)) = self.durability {
            // Before anything of the reply is used: short of replicas, the
            // request stays in flight (its permits counted in Redis, unused
            // here) and the next batch resends it.
            let reached = s.link.wait(wanted, timeout)?;
            if reached < u64::from(wanted) {
                bump(&self.counters.not_replicated, 1);
                return Err(ClusterError::NotReplicated { reached, wanted });
            }
        }
        let t1 = if self.durability.is_some() {
            // The leases' deadline counts from the script's run, which the
            // WAIT does not move: `t0` stays, `t1` (the decision whether
            // they are live) includes the wait.
            self.node_now()
        } else {
            t1
        };
        let ob = s.outbox.take().expect("a request in flight");
        self.in_flight[s.group].store(false, Ordering::Relaxed);
        self.last_rtt[s.group].store(t1.wrapping_sub(t0), Ordering::Relaxed);
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
        self.file(s, ob, &r, t0, t1);
        Ok(())
    }
}
