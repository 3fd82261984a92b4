//! The one measuring harness of the criterion benches and the contention
//! report: N parked threads that share one instance.
//!
//! The worker threads are spawned once, when the pool is built, and parked
//! on a barrier: no thread start-up is ever inside a timed region (a
//! benchmark that spawns threads inside it measures thread start-up). For
//! each phase the main thread hands every worker the same [`Job`] (a closure
//! over ONE shared instance of the structure under test: a benchmark that
//! gives each thread its own instance measures nothing shared), releases
//! them together through the barrier, starts its timer, and stops it when
//! the last worker has finished, at a second barrier.
//!
//! Two ways to end a phase:
//! - [`Pool::run_for`] (the report): after a wall-clock duration the main
//!   thread raises a stop flag; workers check it once per [`BATCH`]
//!   operations ([`batches`], [`batches_at`]) and report how many they ran.
//! - [`Pool::run_ops`] (criterion's `iter_custom`): every worker runs a
//!   fixed number of operations.
//!
//! A panicking job (a bug in the structure under test) is caught, so the
//! main thread never waits at a barrier forever; the phase reports it.
//!
//! On an oversubscribed machine (8 threads on 2 cores) a descheduled worker
//! finishes late; that time is counted, as it would be in a real service.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

/// The thread counts every bench and the report cover (the report adds the
/// machine's core count).
pub const THREAD_COUNTS: [usize; 4] = [1, 2, 4, 8];

/// Operations per stop-flag check. 256 keeps the check's cost below 1% of
/// even the cheapest operation (~1 ns) while stopping within microseconds.
pub const BATCH: u64 = 256;

/// One phase's work for one thread: `job(thread_index, stop)` runs
/// operations (until `stop` is raised, for a timed phase) and returns how
/// many it completed.
pub type Job = Arc<dyn Fn(usize, &AtomicBool) -> u64 + Send + Sync>;

/// Runs `op` in batches of [`BATCH`] until `stop` is raised, at least one
/// batch (so a thread the OS did not schedule during the whole phase still
/// contributes, and its lateness is counted in the wall time); returns the
/// number of operations run.
#[inline(always)]
pub fn batches(stop: &AtomicBool, mut op: impl FnMut()) -> u64 {
    let mut ops = 0u64;
    loop {
        for _ in 0..BATCH {
            op();
        }
        ops += BATCH;
        if stop.load(Ordering::Relaxed) {
            return ops;
        }
    }
}

/// Like [`batches`], but reads `now()` once per batch and hands it to every
/// operation of the batch: how a caller that already knows the time (a
/// request's arrival stamp) uses the `*_at(now)` methods.
#[inline(always)]
pub fn batches_at(stop: &AtomicBool, now: impl Fn() -> u64, mut op: impl FnMut(u64)) -> u64 {
    let mut ops = 0u64;
    loop {
        let t = now();
        for _ in 0..BATCH {
            op(t);
        }
        ops += BATCH;
        if stop.load(Ordering::Relaxed) {
            return ops;
        }
    }
}

/// A worker's job panicked during a phase (the message is on stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panicked;

/// What one phase measured.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Operations completed by all threads together.
    pub ops: u64,
    /// Wall time from the release of the threads to the last one's finish.
    pub elapsed: Duration,
}

impl Measured {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

struct Shared {
    job: Mutex<Option<Job>>,
    stop: CachePadded<AtomicBool>,
    quit: AtomicBool,
    panicked: AtomicBool,
    ops: Box<[CachePadded<AtomicU64>]>,
}

/// A fixed set of parked worker threads.
pub struct Pool {
    threads: usize,
    start: Arc<Barrier>,
    done: Arc<Barrier>,
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Spawns `threads` (at least 1) parked workers.
    pub fn new(threads: usize) -> Pool {
        let threads = threads.max(1);
        let start = Arc::new(Barrier::new(threads + 1));
        let done = Arc::new(Barrier::new(threads + 1));
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            stop: CachePadded::new(AtomicBool::new(false)),
            quit: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            ops: (0..threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        });
        let handles = (0..threads)
            .map(|t| {
                let (start, done, shared) = (start.clone(), done.clone(), shared.clone());
                std::thread::Builder::new()
                    .name(format!("measure-{t}"))
                    .spawn(move || loop {
                        start.wait();
                        if shared.quit.load(Ordering::Acquire) {
                            return;
                        }
                        let job = shared.job.lock().unwrap().clone();
                        let ops = job.map_or(0, |job| {
                            catch_unwind(AssertUnwindSafe(|| job(t, &shared.stop))).unwrap_or_else(
                                |_| {
                                    shared.panicked.store(true, Ordering::Relaxed);
                                    0
                                },
                            )
                        });
                        shared.ops[t].store(ops, Ordering::Relaxed);
                        done.wait();
                    })
                    .expect("spawning a measuring thread")
            })
            .collect();
        Pool {
            threads,
            start,
            done,
            shared,
            handles,
        }
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job` on every worker at once for about `duration` (the stop
    /// flag is raised then; each worker finishes its batch). Errs if a
    /// worker panicked.
    pub fn run_for(&self, job: &Job, duration: Duration) -> Result<Measured, Panicked> {
        self.phase(job.clone(), Some(duration))
    }

    /// Runs `op(thread_index, i)` for `i` in `0..ops_per_thread` on every
    /// worker at once and returns the wall time from their release to the
    /// last one's finish (criterion's `iter_custom`). Panics if a worker's
    /// job panicked.
    pub fn run_ops(
        &self,
        ops_per_thread: u64,
        op: impl Fn(usize, u64) + Send + Sync + 'static,
    ) -> Duration {
        let job: Job = Arc::new(move |t, _stop| {
            for i in 0..ops_per_thread {
                op(t, i);
            }
            ops_per_thread
        });
        self.phase(job, None)
            .expect("a measured operation panicked")
            .elapsed
    }

    fn phase(&self, job: Job, duration: Option<Duration>) -> Result<Measured, Panicked> {
        *self.shared.job.lock().unwrap() = Some(job);
        self.shared.stop.store(false, Ordering::Relaxed);
        // The barrier orders the writes above before every worker's start.
        self.start.wait();
        let t0 = Instant::now();
        if let Some(d) = duration {
            std::thread::sleep(d);
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        self.done.wait();
        let elapsed = t0.elapsed();
        // Drop the pool's reference so the instance dies with its caller.
        *self.shared.job.lock().unwrap() = None;
        let ops = self
            .shared
            .ops
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        if self.shared.panicked.swap(false, Ordering::Relaxed) {
            return Err(Panicked);
        }
        Ok(Measured { ops, elapsed })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::Release);
        self.start.wait();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_the_job_and_its_ops_are_summed() {
        let pool = Pool::new(3);
        let seen = Arc::new(AtomicU64::new(0));
        let total = Arc::new(AtomicU64::new(0));
        let (s, tot) = (seen.clone(), total.clone());
        let job: Job = Arc::new(move |t, stop| {
            s.fetch_or(1 << t, Ordering::Relaxed);
            let n = batches(stop, || {
                tot.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(n % BATCH, 0);
            n
        });
        let m = pool.run_for(&job, Duration::from_millis(5)).unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), 0b111);
        assert_eq!(m.ops, total.load(Ordering::Relaxed));
        // The pool is reusable and counts each phase on its own.
        let m2 = pool.run_for(&job, Duration::from_millis(1)).unwrap();
        assert_eq!(m.ops + m2.ops, total.load(Ordering::Relaxed));
    }

    #[test]
    fn counted_phases_run_each_index_once_per_thread() {
        let pool = Pool::new(2);
        let sums: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let s = sums.clone();
        pool.run_ops(100, move |t, i| {
            s[t].fetch_add(i, Ordering::Relaxed);
        });
        for s in sums.iter() {
            assert_eq!(s.load(Ordering::Relaxed), 99 * 100 / 2);
        }
    }

    #[test]
    fn a_panicking_job_is_reported_and_the_pool_survives() {
        let pool = Pool::new(2);
        let job: Job = Arc::new(|t, stop| {
            if t == 1 {
                panic!("a bug in the structure under test");
            }
            batches(stop, || {})
        });
        assert_eq!(
            pool.run_for(&job, Duration::from_millis(1)).unwrap_err(),
            Panicked
        );
        let fine: Job = Arc::new(|_, stop| batches(stop, || {}));
        let m = pool.run_for(&fine, Duration::from_millis(1)).unwrap();
        assert!(m.ops >= 2 * BATCH);
        // Counted phases run on the same pool after the panic.
        let runs = Arc::new(AtomicU64::new(0));
        let r = runs.clone();
        pool.run_ops(3, move |_, _| {
            r.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn batches_at_reads_the_time_once_per_batch() {
        let stop = AtomicBool::new(false);
        let reads = std::cell::Cell::new(0u64);
        let mut adds = 0u64;
        let n = batches_at(
            &stop,
            || {
                reads.set(reads.get() + 1);
                if reads.get() == 3 {
                    stop.store(true, Ordering::Relaxed);
                }
                reads.get()
            },
            |t| {
                assert_eq!(t, reads.get());
                adds += 1;
            },
        );
        assert_eq!(adds, n);
        assert_eq!(reads.get(), 3);
        assert_eq!(n, 3 * BATCH);
        // A flag raised before the start still runs one batch.
        assert_eq!(batches(&stop, || adds += 1), BATCH);
        assert_eq!(adds, n + BATCH);
    }
}
