//! The sweeper: revokes leases whose deadline passed and returns their
//! unused permits (so they stop counting against the window), forgets
//! keys with no lease for a window, and drops the refusal memo's entries
//! whose retry time passed (`memo.rs`). Each lane's thread sweeps its group
//! every `sweep_interval` (`driver.rs`);
//! [`ClusterLimiter::sweep`](crate::ClusterLimiter::sweep) and
//! [`release_all`](crate::ClusterLimiter::release_all) sweep every group
//! at once.
//!
//! Leases must be revoked within 39 hours of their deadline: the lease
//! word compares times mod 2^36 units (`word.rs`).

use super::layout::name_of;
use super::remote::{Sender, Shared};
use super::script::Return;
use super::word::units;
use crate::error::ClusterError;
use crate::health::bump;
use crate::key::RedisKey;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;
use stripecount::Clock;

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// Revokes the leases whose deadline passed by node time `now` (all of
    /// them if `all`), forgets keys with no lease for a window and the
    /// refusals whose retry time passed, and returns the unused permits to
    /// Redis. Returns the permits queued for return.
    ///
    /// The key's own code (`Hash`, `Eq`, `Clone`, `write_key`) runs here,
    /// each key's inside a catch: a panic skips the rest of that key (its
    /// revoked permits are not returned: they count against the window
    /// until their slice leaves it, never over the limit), is counted
    /// (`LeaseStats::key_panics`) and the first is kept in `panicked`; the
    /// sweep goes on. Every name is written when its return is queued, so
    /// sending the returns runs no key code.
    pub(crate) fn sweep(
        &self,
        s: &mut Sender<K>,
        all: bool,
        now: u64,
        panicked: &mut Option<Box<dyn Any + Send>>,
    ) -> Result<u64, ClusterError> {
        let est = self.time.server_at(now) / self.slice_ns;
        let now = units(now);
        let mut queued = 0;
        let mut gone = Vec::new();
        let mut panics = 0u64;
        let Sender { held, returns, .. } = &mut *s;
        for (k, h) in held.iter_mut() {
            let one = catch_unwind(AssertUnwindSafe(|| {
                let Some(w) = self.words.peek_with(k, |_, w| Arc::clone(w)) else {
                    gone.push(k.clone());
                    return;
                };
                let r = if all {
                    Some(w.revoke())
                } else {
                    w.revoke_if_over(now)
                };
                if let Some(r) = r {
                    if h.granted > 0 {
                        // Judge the lease now: the next one is sized to
                        // what this one served (a lease that ran out keeps
                        // the size).
                        if r > 0 {
                            h.batch = (h.granted - r.min(h.granted)).clamp(1, self.max_batch);
                        }
                        h.granted = 0;
                    }
                    if r > 0 {
                        returns.push(Return {
                            name: name_of(k),
                            epoch: h.slice,
                            permits: r,
                        });
                        queued += r;
                    }
                    if h.slice.saturating_add(self.judged) < est {
                        gone.push(k.clone());
                    }
                }
            }));
            if let Err(p) = one {
                panics += 1;
                panicked.get_or_insert(p);
            }
        }
        for k in gone {
            // Its word is 0 (revoked, and nothing installs without the
            // sender lock): a grant racing the removal misses and comes
            // here for a new word.
            let one = catch_unwind(AssertUnwindSafe(|| {
                held.remove(&k);
                self.words.remove(&k);
            }));
            if let Err(p) = one {
                panics += 1;
                panicked.get_or_insert(p);
            }
        }
        bump(&self.counters.key_panics, panics);
        // Returns of slices that left the window (of the slices a request
        // is judged against) change nothing in Redis.
        let floor = est.saturating_sub(self.judged + 1);
        s.returns.retain(|r| r.epoch > floor);
        if s.returns.is_empty() && s.outbox.is_none() {
            return Ok(queued);
        }
        if !all && !s.link.backoff.ready(Instant::now()) {
            return Ok(queued);
        }
        match self.send_returns(s) {
            Ok(()) => Ok(queued),
            Err(e) => {
                self.failed(s, &e);
                Err(e)
            }
        }
    }

    /// Runs `f` on every group's sender in turn; the sum of what it
    /// returned, or the first error (after trying every group).
    pub(crate) fn each_group(
        &self,
        mut f: impl FnMut(&mut Sender<K>) -> Result<u64, ClusterError>,
    ) -> Result<u64, ClusterError> {
        let mut total = 0u64;
        let mut first = None;
        for sender in &self.senders {
            match f(&mut crate::sync::lock(sender)) {
                Ok(n) => total = total.saturating_add(n),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(total), Err)
    }
}
