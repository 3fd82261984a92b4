//! Filing a lease reply: each key's permits to its waiters in their
//! order, the rest into the key's word (`word.rs`), refusals remembered
//! (`memo.rs`). The batch it answers was formed by `batch.rs`.
//!
//! Per key: refused (no room for the need): the first request and every
//! other asking at least as much are refused with the retry time, and the
//! refusal is remembered (`memo.rs`); smaller ones go back to the lane (they
//! may fit). Granted and live: each request in turn takes its permits
//! while enough are left, the others go back to the lane (a later batch),
//! the rest is installed in the key's word. Granted but dead on arrival:
//! everything is returned, the requests go back to the lane, and the next
//! batch waits for the server's next slice (`remote.rs`).
//!
//! The key type's code runs here, each key inside a catch, as in
//! `batch.rs`: a panic answers the key's first request not yet answered
//! with it, sends the key's other requests back to the lane and returns
//! the permits not yet handed out; the rest of the reply is filed.

use super::grant::Grant;
use super::lane::Wake;
use super::remote::{Answer, Asked, Outbox, Sender, Shared, WantSlot};
use super::script::{LeaseReply, Return};
use super::word::{units, MAX_LEASE};
use crate::health::bump;
use crate::key::RedisKey;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use stripecount::Clock;

/// Leases that arrived with their slice over before a request is refused.
const MAX_DEAD: u32 = 4;

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// Files the reply `r` to the request in flight `ob`, sent at node
    /// time `t0` and answered at `t1` (module docs).
    pub(crate) fn file(&self, s: &mut Sender<K>, ob: Outbox<K>, r: &LeaseReply, t0: u64, t1: u64) {
        let c = &self.counters;
        // Node nanoseconds from t0 the leases may be used for.
        let left = u64::try_from(r.left_us).unwrap_or(0).saturating_mul(1_000);
        let life = left.saturating_sub(
            (left / (1_000_000 / crate::timeline::DRIFT_PPM) + 1_000)
                .saturating_add(self.margin_ns),
        );
        let live = t1.wrapping_sub(t0) < life;
        let deadline = units(t0.wrapping_add(life));
        let mut back: Vec<Arc<WantSlot<K>>> = Vec::new();
        let mut dead_waiters = false;
        for (mut a, l) in ob.leases.into_iter().zip(&r.leases) {
            if l.granted == 0 {
                bump(&c.refusals, 1);
                self.refused(&mut a, l.retry_us, t0, &mut back, &mut s.wakes);
                continue;
            }
            bump(&c.leases, 1);
            bump(&c.leased_permits, l.granted);
            if !live {
                for w in a.waiters.drain(..) {
                    if w.req.n == 0 {
                        // A renewal of a dead lease: not asked again.
                        let _ = w.finish(Answer::Decided(Grant::OutageRefused));
                        continue;
                    }
                    dead_waiters = true;
                    if w.req.dead.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_DEAD {
                        let a = Answer::Decided(Grant::Refused { retry_after: None });
                        s.wakes.extend(w.finish_later(a).ok().flatten());
                    } else {
                        back.push(w);
                    }
                }
            }
            // What is not yet handed out or installed: returned if the
            // key's code panics on the way.
            let mut left_over = l.granted;
            let filed = catch_unwind(AssertUnwindSafe(|| {
                self.file_one(
                    s,
                    &mut a,
                    l.granted,
                    r.epoch,
                    live,
                    deadline,
                    t1,
                    &mut left_over,
                    &mut back,
                )
            }));
            if let Err(p) = filed {
                if left_over > 0 {
                    s.returns.push(Return {
                        name: a.name().into(),
                        epoch: r.epoch,
                        permits: left_over,
                    });
                }
                self.panicked(&mut a, p);
            }
        }
        if dead_waiters {
            // The next batch asks once the server's next slice has surely
            // begun.
            s.turn_at = Some(t1.wrapping_add(left));
        }
        if !back.is_empty() {
            self.lanes[s.group].put_back(back);
        }
    }

    /// A key's lease refused: its requests of at least the need are
    /// refused, smaller ones go back.
    fn refused(
        &self,
        a: &mut Asked<K>,
        retry_us: Option<u64>,
        t0: u64,
        back: &mut Vec<Arc<WantSlot<K>>>,
        wakes: &mut Vec<Wake>,
    ) {
        if a.waiters.is_empty() {
            return;
        }
        // The lease's need: its first request's (1 for a renewal alone).
        let need = a
            .waiters
            .iter()
            .find(|w| w.req.n > 0)
            .map_or(1, |w| w.req.n);
        if let Some(us) = retry_us {
            let k = a.key();
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| {
                self.memo_refusal(k.clone(), t0, us, need)
            })) {
                bump(&self.counters.key_panics, 1);
                drop(p);
            }
        }
        let retry_after = retry_us.map(Duration::from_micros);
        for w in a.waiters.drain(..) {
            if w.req.n >= need || w.req.n == 0 {
                let a = Answer::Decided(Grant::Refused { retry_after });
                wakes.extend(w.finish_later(a).ok().flatten());
            } else {
                back.push(w);
            }
        }
    }

    /// A key's granted lease: to its waiters in turn while it lasts (live),
    /// the rest into its word; everything back to Redis if dead.
    #[allow(clippy::too_many_arguments)]
    fn file_one(
        &self,
        s: &mut Sender<K>,
        a: &mut Asked<K>,
        granted: u64,
        epoch: u64,
        live: bool,
        deadline: u64,
        t1: u64,
        left_over: &mut u64,
        back: &mut Vec<Arc<WantSlot<K>>>,
    ) {
        if live {
            for w in a.waiters.drain(..) {
                if *left_over >= w.req.n {
                    if let Ok(wake) = w.finish_later(Answer::Decided(self.granted(epoch))) {
                        // A renewal (no permits, no waiter) takes nothing.
                        *left_over -= w.req.n;
                        s.wakes.extend(wake);
                    }
                } else {
                    back.push(w);
                }
            }
        }
        let g = *left_over;
        if live && g == 0 && !s.held.contains_key(a.key()) {
            // Used up by its waiters: the node keeps nothing of the key but
            // its size record (`sizes.rs`).
            s.sizes.put(a.name(), granted, epoch, t1);
            return;
        }
        let prev = s.held.get(a.key()).map_or(0, |h| h.slice);
        let h = s.held.entry(a.key().clone()).or_default();
        h.slice = epoch;
        // A lease that arrived with its slice over tells nothing of the
        // rate.
        h.granted = if live { granted } else { 0 };
        h.at = t1;
        if h.batch == 0 {
            h.batch = granted.max(1);
        }
        s.sizes.forget(a.name());
        let mut ret = if live { 0 } else { g };
        if live && g > 0 {
            let old = self.word_of(a.key()).install(
                deadline,
                epoch,
                g,
                self.renewal_mark(g.min(MAX_LEASE)),
            );
            ret = g.saturating_sub(MAX_LEASE);
            if old > 0 {
                // A renewal's lease replaced one that still held permits
                // (a lease is otherwise revoked before it is asked again).
                s.returns.push(Return {
                    name: a.name().into(),
                    epoch: prev,
                    permits: old,
                });
            }
        }
        *left_over = 0;
        if ret > 0 {
            s.returns.push(Return {
                name: a.name().into(),
                epoch,
                permits: ret,
            });
        }
    }

    /// The renewal mark of a lease of `permits` (`word.rs`): with
    /// `renew_early`, its next lease is asked once fewer than a quarter are
    /// left, for leases of at least 8 permits (a smaller one is used up
    /// before a renewal could help); else none.
    fn renewal_mark(&self, permits: u64) -> u32 {
        if !self.renew_early || permits < 8 {
            0
        } else {
            (permits / 4).ilog2()
        }
    }
}
