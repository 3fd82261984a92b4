//! The background flusher: one thread per node that, every interval,
//! takes the local counts and flushes them (see `Inner::tick`).
//!
//! It waits on a condition variable with a timeout, so a stop request
//! wakes it at once; it is joined when the node is dropped or shut down.
//! A panic in a step never ends the thread.
//! While Redis is unreachable it keeps taking the local counts every
//! interval (the local ring must not reuse a slot that holds unflushed
//! counts) and retries after the link's backoff.

use crate::key::RedisKey;
use crate::node::Inner;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use stripecount::Clock;

/// A running flusher thread.
pub(crate) struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start<K: RedisKey, C: Clock>(
        inner: Arc<Inner<K, C>>,
        every: Duration,
    ) -> std::io::Result<Self> {
        Self::spawn("stripecount-redis-flusher", every, move || inner.tick())
    }

    /// A thread named `name` that calls `step` every `every` until stopped.
    pub(crate) fn spawn(
        name: &str,
        every: Duration,
        mut step: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                {
                    let (m, cv) = &*s;
                    let g = m.lock().unwrap_or_else(|p| p.into_inner());
                    let (g, _) = cv
                        .wait_timeout_while(g, every, |stopped| !*stopped)
                        .unwrap_or_else(|p| p.into_inner());
                    if *g {
                        return;
                    }
                }
                // Each step catches the panics it knows of (and counts
                // them); this keeps the thread alive through any other.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut step));
            })?;
        Ok(Flusher {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread and waits for it (a flush in progress finishes).
    /// Called on the thread itself (a callback it runs dropped the node's
    /// last handle), it only tells the thread to stop: the thread ends
    /// when its step returns.
    pub(crate) fn stop(&mut self) {
        *self.stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(h) = self.handle.take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}
