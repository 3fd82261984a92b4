//! A time-based, shared-instance measuring pool.
//!
//! The worker threads are spawned once, when the pool is built, and parked
//! on a barrier: no thread start-up is ever inside a timed region. For each
//! phase (warm-up, then measurement) the main thread hands every worker the
//! same job (closures that share ONE instance of the structure under test),
//! releases them together through the barrier, starts its timer, sleeps for
//! the phase's duration, raises the stop flag and waits at a second barrier
//! for the last worker to finish its current batch. Each worker counts the
//! operations it completed; the point's throughput is their total over the
//! wall time from release to the last finish.
//!
//! Workers check the stop flag once per [`BATCH`] operations, so the flag's
//! cache line is read a few hundred times less often than the structure's.
//! On an oversubscribed machine (8 threads on 2 cores) a descheduled worker
//! finishes its batch late; that time is counted, as it would be in a real
//! service.

use crossbeam_utils::CachePadded;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Operations per stop-flag check. 256 keeps the check's cost below 1% of
/// even the cheapest operation (~1 ns) while stopping within microseconds.
pub const BATCH: u64 = 256;

/// One measurement's work for one thread: `job(thread_index, stop)` runs
/// operations until `stop` is raised and returns how many it completed.
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

/// A worker's job panicked during a phase.
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
                    .name(format!("report-worker-{t}"))
                    .spawn(move || loop {
                        start.wait();
                        if shared.quit.load(Ordering::Acquire) {
                            return;
                        }
                        let job = shared.job.lock().unwrap().clone();
                        // A panicking job (a bug in the structure under
                        // test) must not leave the main thread waiting at
                        // the barrier forever: it is caught and reported.
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

    /// Runs `job` on every worker at once for about `duration`.
    /// Errs if a worker panicked (the panic message is on stderr).
    pub fn run(&self, job: &Job, duration: Duration) -> Result<Measured, Panicked> {
        *self.shared.job.lock().unwrap() = Some(job.clone());
        self.shared.stop.store(false, Ordering::Relaxed);
        // The barrier orders the writes above before every worker's start.
        self.start.wait();
        let t0 = Instant::now();
        std::thread::sleep(duration);
        self.shared.stop.store(true, Ordering::Relaxed);
        self.done.wait();
        let elapsed = t0.elapsed();
        // Drop the pool's reference so the instance dies with its row.
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
        let m = pool.run(&job, Duration::from_millis(5)).unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), 0b111);
        assert_eq!(m.ops, total.load(Ordering::Relaxed));
        // The pool is reusable and counts each phase on its own.
        let m2 = pool.run(&job, Duration::from_millis(1)).unwrap();
        assert_eq!(m.ops + m2.ops, total.load(Ordering::Relaxed));
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
            pool.run(&job, Duration::from_millis(1)).unwrap_err(),
            Panicked
        );
        let fine: Job = Arc::new(|_, stop| batches(stop, || {}));
        let m = pool.run(&fine, Duration::from_millis(1)).unwrap();
        assert!(m.ops >= 2 * BATCH);
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
