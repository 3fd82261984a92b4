//! The refusal memo: a key the lease script refused, with a retry time,
//! is refused locally until then, without a round trip.
//!
//! # What it remembers
//! Per key, one [`Refusal`]: the node time `until` at which the refused
//! request would fit, as the script saw the window, and the permits `n`
//! it asked for. The script's retry time is when enough of the window's
//! oldest slices leave it for `n` more permits to fit; until then the
//! window's counts only grow (other nodes' leases) or fall by returns. So
//! a request of at least `n` permits would be refused by the script
//! before `until` too, unless returns free room first: the memo refuses
//! it locally. A request of fewer permits may fit sooner (fewer slices
//! need to leave), so it makes the round trip as before. Each refusal
//! replaces the key's entry: it is the script's latest view of the window,
//! and a request of at least its `n` fits no sooner than its `until`.
//!
//! `until` is on the node clock the lease words use: the node time the
//! request was sent (`t0`: the script ran after it), plus the retry time
//! less the node clock's drift over it ([`DRIFT_PPM`]), so it is no later
//! than the moment the script named, whatever the node clock's offset.
//!
//! # Where it is read and written
//! Written only from a script's refusal, on the miss path under the sender
//! lock (one writer); outage decisions never write it. Read without a lock
//! (`peek_with`, as the lease words are): by
//! [`decide_from_lease`](crate::ClusterLimiter::decide_from_lease) after
//! the held lease could not serve the request, and on the miss path before
//! and after taking the sender lock (so a flood of refused requests waits
//! neither on Redis nor on the lock). A grant from a held lease never
//! looks at it.
//!
//! # It only refuses
//! The memo never grants, so the invariant (`mod.rs`) is untouched. Its
//! cost is under-admission until `until`: permits other nodes (or this
//! one) return for the key meanwhile are not seen by this node's requests
//! of at least `n`. At `until` the script said the request would fit
//! anyway.
//!
//! # Bounds
//! An entry lives until its `until`, at most the window (plus a slice for
//! a strict quota) after the round trip that made it; the sweeper drops
//! expired entries every tick, without the sender lock (a busy miss path
//! does not hold it off). Each entry is made by one round trip, so the
//! memo holds at most the keys refused by the script within the last
//! window plus a sweep interval: no more than the round trips of that
//! time, the same bound as the lease words' map, which the sweeper prunes
//! of keys idle for a window.

use super::grant::Grant;
use super::remote::Shared;
use crate::health::bump;
use crate::key::RedisKey;
use crate::timeline::DRIFT_PPM;
use scc::hash_index::Entry;
use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;
use stripecount::keyed::KeyRef;
use stripecount::Clock;

/// A key's remembered refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Node time (ns) until which a request of at least `n` is refused.
    pub(crate) until: u64,
    /// The permits the refused request asked for.
    pub(crate) n: u64,
}

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// The memo's refusal of `n` permits of `key` at node time `now`, if it
    /// holds one (counted in `memo_refusals`).
    #[inline]
    pub(crate) fn memo_refused<Q>(&self, key: &Q, now: u64, n: u64) -> Option<Grant>
    where
        Q: KeyRef<K> + Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        if !self.memo_on {
            return None;
        }
        let until = self
            .memo
            .peek_with(key, |_, r| (n >= r.n && now < r.until).then_some(r.until))??;
        bump(&self.counters.memo_refusals, 1);
        Some(Grant::Refused {
            retry_after: Some(Duration::from_nanos(until - now)),
        })
    }

    /// Remembers the script's refusal of `n` permits of `k`, with a retry
    /// time of `retry_us` server microseconds, of a request sent at node
    /// time `t0`. Under the sender lock.
    pub(crate) fn memo_refusal(&self, k: K, t0: u64, retry_us: u64, n: u64) {
        if !self.memo_on {
            return;
        }
        let retry = retry_us.saturating_mul(1_000);
        let until = t0.saturating_add(retry - retry / (1_000_000 / DRIFT_PPM));
        let r = Refusal { until, n };
        match self.memo.entry(k) {
            Entry::Occupied(o) => o.update(r),
            Entry::Vacant(v) => {
                v.insert_entry(r);
            }
        }
    }

    /// Drops the memo's entries expired by node time `now`.
    pub(crate) fn memo_prune(&self, now: u64) {
        if self.memo_on {
            self.memo.retain(|_, r| now < r.until);
        }
    }
}
