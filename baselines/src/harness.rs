//! Measuring one operation on N threads that share one instance.
//!
//! The threads are spawned once, outside every timed region, and parked on
//! a barrier. For each measurement they are released together; each runs
//! its share of the operations and the elapsed time is taken from the
//! barrier release to the last thread's finish. (A benchmark that spawns
//! threads inside the timed region measures thread start-up; one that gives
//! each thread its own instance measures nothing shared.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = Arc<dyn Fn(usize, u64) + Send + Sync>;

/// A fixed pool of threads that run a job together.
pub struct Pool {
    threads: usize,
    start: Arc<Barrier>,
    done: Arc<Barrier>,
    job: Arc<std::sync::Mutex<Option<(Job, u64)>>>,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Spawns `threads` parked workers.
    pub fn new(threads: usize) -> Pool {
        let threads = threads.max(1);
        let start = Arc::new(Barrier::new(threads + 1));
        let done = Arc::new(Barrier::new(threads + 1));
        let job: Arc<std::sync::Mutex<Option<(Job, u64)>>> = Arc::new(std::sync::Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..threads)
            .map(|t| {
                let (start, done, job, stop) =
                    (start.clone(), done.clone(), job.clone(), stop.clone());
                std::thread::spawn(move || loop {
                    start.wait();
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let (f, per_thread) =
                        job.lock().unwrap().clone().expect("job set before start");
                    f(t, per_thread);
                    done.wait();
                })
            })
            .collect();
        Pool {
            threads,
            start,
            done,
            job,
            stop,
            handles,
        }
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(thread_index, ops)` on every thread at once, each with
    /// `ops = total_ops / threads` (at least 1), and returns the wall time
    /// from release to the last finish.
    pub fn run(&self, total_ops: u64, f: impl Fn(usize, u64) + Send + Sync + 'static) -> Duration {
        let per_thread = (total_ops / self.threads as u64).max(1);
        *self.job.lock().unwrap() = Some((Arc::new(f), per_thread));
        self.start.wait();
        let t0 = Instant::now();
        self.done.wait();
        let elapsed = t0.elapsed();
        *self.job.lock().unwrap() = None;
        elapsed
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.start.wait();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The thread counts the benches and report use: 1, 2, 4, 8.
pub const THREAD_COUNTS: [usize; 4] = [1, 2, 4, 8];
