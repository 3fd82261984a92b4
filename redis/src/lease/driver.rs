//! The lanes' threads: one a group, started with the limiter. A lane's
//! thread drives its lane whenever the duty is handed to it (`lane.rs`:
//! by a caller whose batch left requests queued, or by an async caller),
//! until the lane is empty; between batches and while idle it sweeps its
//! group every `sweep_interval` (`sweep.rs`). So a node's threads are its
//! groups' lanes, whatever its callers do, and no caller's thread waits
//! for another's batch longer than that batch.
//!
//! Stopping (the limiter dropped or shut down) refuses later joins,
//! answers the requests still queued with
//! [`Grant::OutageRefused`](crate::Grant::OutageRefused) (their limiter is
//! gone), lets a batch in progress finish, and joins the threads.

use super::grant::Grant;
use super::lane::Duty;
use super::remote::{Answer, Shared};
use crate::key::RedisKey;
use crate::sync::try_lock;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stripecount::Clock;

/// The running threads of a limiter's lanes.
pub(crate) struct Drivers {
    stop: Box<dyn Fn() + Send + Sync>,
    handles: Vec<JoinHandle<()>>,
}

impl Drivers {
    /// Starts a thread for each of `shared`'s lanes.
    pub(crate) fn start<K: RedisKey, C: Clock>(
        shared: &Arc<Shared<K, C>>,
        every: Duration,
    ) -> std::io::Result<Drivers> {
        let mut handles = Vec::new();
        let stopper = Arc::clone(shared);
        let stop: Box<dyn Fn() + Send + Sync> = Box::new(move || stopper.stop_lanes());
        for g in 0..shared.lanes.len() {
            let s = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name(format!("stripecount-redis-lane-{g}"))
                .spawn(move || s.run_lane(g, every));
            match spawned {
                Ok(h) => {
                    shared.lanes[g].set_thread(h.thread().clone());
                    handles.push(h);
                }
                Err(e) => {
                    let mut d = Drivers { stop, handles };
                    d.stop();
                    return Err(e);
                }
            }
        }
        Ok(Drivers { stop, handles })
    }

    /// Stops the lanes and joins their threads (not the calling thread,
    /// if it is one of them: it ends when its step returns).
    pub(crate) fn stop(&mut self) {
        (self.stop)();
        let me = std::thread::current().id();
        for h in self.handles.drain(..) {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Drivers {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<K: RedisKey, C: Clock> Shared<K, C> {
    /// Group `g`'s thread (module docs).
    fn run_lane(&self, g: usize, every: Duration) {
        let mut next_sweep = Instant::now() + every;
        loop {
            match self.lanes[g].poll_duty() {
                Duty::Stop => return,
                Duty::Drive => loop {
                    // `drive` catches the key type's panics; this keeps
                    // the lane driven through any other.
                    let _ = catch_unwind(AssertUnwindSafe(|| self.drive(g)));
                    if Instant::now() >= next_sweep {
                        self.sweep_group(g);
                        next_sweep = Instant::now() + every;
                    }
                    if self.lanes[g].release() {
                        break;
                    }
                },
                Duty::Idle => {
                    let now = Instant::now();
                    if now >= next_sweep {
                        self.sweep_group(g);
                        next_sweep = Instant::now() + every;
                    } else {
                        std::thread::park_timeout(next_sweep - now);
                    }
                }
            }
        }
    }

    /// The sweeper's step for group `g`: skipped if a batch holds its
    /// sender (it sweeps after); the refusal memo is pruned by group 0's
    /// thread, with or without the lock.
    fn sweep_group(&self, g: usize) {
        let now = self.node_now();
        if g == 0 {
            self.memo_prune(now);
        }
        if let Some(mut s) = try_lock(&self.senders[g]) {
            // Counted in `key_panics`; the thread goes on.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                let _ = self.sweep(&mut s, false, now, &mut None);
            }));
        }
    }

    /// Stops every lane; the requests still queued are refused, and every
    /// wake-up still owed is made.
    fn stop_lanes(&self) {
        for (lane, sender) in self.lanes.iter().zip(&self.senders) {
            for slot in lane.stop() {
                let _ = slot.finish(Answer::Decided(Grant::OutageRefused));
            }
            let mut s = crate::sync::lock(sender);
            let mut owed = std::mem::take(&mut s.wakes);
            owed.append(&mut s.wake_on_send);
            drop(s);
            for w in owed {
                w.wake();
            }
        }
    }
}
