#![cfg(loom)]
//! Loom models of the cluster limiter's lanes (`redis/src/lease/lane.rs`):
//! the queue of requests that need Redis, who drives it (a caller that
//! finds it idle, or the lane's thread it is handed to), and the hand-off
//! of each answer to its waiter, a parked thread or an async task. With
//! the naive release it replaces as a counter-example loom must catch.
//!
//! The lane's source is compiled here with loom's `Mutex`, `Arc` and
//! threads (the `sync` module below stands in for `redis/src/sync.rs`), as
//! the lease word's model does: the Redis client is not loom-aware, and
//! the lane runs no code of it (a "batch" here answers each slot with its
//! request's value times ten).
//!
//! The properties: every queued request is answered exactly once (a
//! waiter that is never answered parks forever: loom reports the
//! deadlock), by a driver holding the duty alone (two drivers at once
//! fail an assertion); a waiter that gave up makes the answer come back to
//! the driver (kept, never lost, never given twice).

mod sync {
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread::{current, park, Thread};

    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[allow(dead_code)]
#[path = "../../redis/src/lease/lane.rs"]
mod lane;

use lane::{Duty, Join, Lane, Slot, Waited};
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use stripecount_loom_tests::{expect_failure, model};

type L = Lane<u64, u64>;

/// What the model checks of the drivers: never two at once, and the
/// answers the drivers kept because their waiter had gone.
struct Audit {
    driving: AtomicBool,
    kept: AtomicU64,
    /// The most requests a batch takes.
    batch: usize,
}

/// One batch: every queued slot answered with its value times ten, the
/// wake-ups made after every answer is stored (as `batch.rs` defers them
/// past the next request's send).
fn drive(lane: &L, audit: &Audit) {
    assert!(
        !audit.driving.swap(true, Ordering::SeqCst),
        "two drivers at once"
    );
    let mut wakes = Vec::new();
    for slot in lane.take(audit.batch) {
        match slot.finish_later(slot.req * 10) {
            Ok(w) => wakes.extend(w),
            Err(r) => {
                audit.kept.fetch_add(r, Ordering::SeqCst);
            }
        }
    }
    audit.driving.store(false, Ordering::SeqCst);
    for w in wakes {
        w.wake();
    }
}

/// The lane's thread (`driver.rs`): drives while the duty is its own,
/// parks while idle, ends when stopped.
fn lane_thread(lane: Arc<L>, audit: Arc<Audit>) -> thread::JoinHandle<()> {
    thread::spawn(move || loop {
        match lane.poll_duty() {
            Duty::Stop => return,
            Duty::Drive => loop {
                drive(&lane, &audit);
                if lane.release() {
                    break;
                }
            },
            Duty::Idle => thread::park(),
        }
    })
}

/// A synchronous caller (`remote.rs`'s `miss`): joins (ahead if `warm`),
/// drives one batch if the lane was idle or the duty was passed to it,
/// then releases, passes the duty to a parked caller, or hands it to the
/// lane's thread; waits.
fn sync_caller(lane: &L, audit: &Audit, v: u64, warm: bool) -> Option<u64> {
    let slot = Arc::new(Slot::new(v));
    let mut lead = match lane.join(Arc::clone(&slot), warm) {
        Join::Full => return None,
        Join::Follow => false,
        Join::Lead => true,
    };
    loop {
        if lead {
            drive(lane, audit);
            if !lane.release() && !lane.pass_to_waiter() {
                lane.hand_off();
            }
        }
        match slot.wait() {
            Waited::Answered(r) => return Some(r),
            Waited::Lead => lead = true,
        }
    }
}

/// A caller of the lane, run on a thread of its own.
type Caller = Box<dyn FnOnce(&L, &Audit) -> Option<u64> + Send>;

/// Sets up a lane and its thread, runs `callers` on their own threads,
/// then stops the lane and joins its thread; what each caller returned.
fn run(bound: usize, callers: Vec<Caller>) -> (Vec<Option<u64>>, Arc<Audit>) {
    run_with(bound, 8, callers)
}

/// [`run`] with batches of at most `batch` requests.
fn run_with(bound: usize, batch: usize, callers: Vec<Caller>) -> (Vec<Option<u64>>, Arc<Audit>) {
    let lane = Arc::new(Lane::new(bound));
    let audit = Arc::new(Audit {
        driving: AtomicBool::new(false),
        kept: AtomicU64::new(0),
        batch,
    });
    let t = lane_thread(Arc::clone(&lane), Arc::clone(&audit));
    lane.set_thread(t.thread().clone());
    let hs: Vec<_> = callers
        .into_iter()
        .map(|c| {
            let (lane, audit) = (Arc::clone(&lane), Arc::clone(&audit));
            thread::spawn(move || c(&lane, &audit))
        })
        .collect();
    let out = hs.into_iter().map(|h| h.join().unwrap()).collect();
    // As `driver.rs` stops a lane: what is still queued is answered (only
    // a request whose waiter left can be: every other waited for its
    // answer).
    for slot in lane.stop() {
        assert!(slot.finish(0).is_err(), "a waiter still waits");
    }
    t.join().unwrap();
    (out, audit)
}

/// Two synchronous callers race to lead an idle lane, one of them a warm
/// key's (in the queue taken first): each is answered its own answer, by
/// whoever drives, with the thread taking over when a caller's batch left
/// the other queued.
#[test]
fn two_callers_each_get_their_answer() {
    model(|| {
        let (out, audit) = run(
            4,
            vec![
                Box::new(|l, a| sync_caller(l, a, 1, false)),
                Box::new(|l, a| sync_caller(l, a, 2, true)),
            ],
        );
        assert_eq!(out, vec![Some(10), Some(20)]);
        assert_eq!(audit.kept.load(Ordering::SeqCst), 0);
    });
}

/// Three synchronous callers on a lane whose batches take one request
/// each: every batch leaves the others queued, so the duty passes from
/// caller to parked caller (or to the lane's thread when none is parked
/// yet); each gets its own answer, and never two drivers at once.
#[test]
fn the_duty_passes_from_caller_to_waiting_caller() {
    model(|| {
        let (out, audit) = run_with(
            4,
            1,
            vec![
                Box::new(|l, a| sync_caller(l, a, 1, false)),
                Box::new(|l, a| sync_caller(l, a, 2, false)),
                Box::new(|l, a| sync_caller(l, a, 3, true)),
            ],
        );
        assert_eq!(out, vec![Some(10), Some(20), Some(30)]);
        assert_eq!(audit.kept.load(Ordering::SeqCst), 0);
    });
}

/// A future polling a slot, as `future.rs`'s `GrantFuture` does; gives
/// the request up when dropped unanswered.
struct Pending(Arc<Slot<u64, u64>>, bool);

impl Future for Pending {
    type Output = u64;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        let r = self.0.poll(cx);
        if r.is_ready() {
            self.1 = true;
        }
        r
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.1 {
            self.0.abandon();
        }
    }
}

/// Wakes a parked loom thread (an executor's task, here its thread).
struct Unpark(thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` on this thread, parking it between polls: an executor.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(thread::current())));
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
            return v;
        }
        thread::park();
    }
}

/// An async caller (never drives: the duty goes to the lane's thread)
/// races a synchronous one: both answered, the async one by its waker.
#[test]
fn an_async_caller_is_woken_by_the_lanes_thread() {
    model(|| {
        let (out, _) = run(
            4,
            vec![
                Box::new(|l, _| {
                    let slot = Arc::new(Slot::new(3));
                    assert!(l.join_async(Arc::clone(&slot), false));
                    Some(block_on(Pending(slot, false)))
                }),
                Box::new(|l, a| sync_caller(l, a, 4, false)),
            ],
        );
        assert_eq!(out, vec![Some(30), Some(40)]);
    });
}

/// An async caller gives up (its future dropped after one poll) while a
/// driver answers it: the answer is the waiter's or kept by the driver,
/// exactly one of the two.
#[test]
fn an_answer_to_a_waiter_that_left_is_kept_by_the_driver() {
    model(|| {
        let got = Arc::new(AtomicU64::new(0));
        let g = Arc::clone(&got);
        let (_, audit) = run(
            4,
            vec![Box::new(move |l, _| {
                let slot = Arc::new(Slot::new(5));
                assert!(l.join_async(Arc::clone(&slot), false));
                let mut p = Pending(slot, false);
                if let Poll::Ready(v) =
                    Pin::new(&mut p).poll(&mut Context::from_waker(std::task::Waker::noop()))
                {
                    g.store(v, Ordering::SeqCst);
                }
                drop(p);
                None
            })],
        );
        let (got, kept) = (
            got.load(Ordering::SeqCst),
            audit.kept.load(Ordering::SeqCst),
        );
        assert!(
            (got, kept) == (50, 0) || (got, kept) == (0, 50) || (got, kept) == (0, 0),
            "answered {got}, kept {kept}"
        );
    });
}

/// A lane of one: of two callers that join while one waits in it, the
/// second is refused at once (never queued), or joins after the first was
/// taken; either way nobody waits forever and the queue never holds two.
#[test]
fn a_full_lane_refuses_at_once() {
    model(|| {
        let (out, _) = run(
            1,
            vec![
                Box::new(|l, a| sync_caller(l, a, 6, false)),
                Box::new(|l, a| sync_caller(l, a, 7, false)),
            ],
        );
        assert!(out[0] == Some(60) || out[0].is_none());
        assert!(out[1] == Some(70) || out[1].is_none());
        assert!(
            out.iter().any(Option::is_some),
            "the first to join is queued"
        );
    });
}

/// The naive release: the driver looks at the queue, then clears
/// `driving` under a second lock. A caller that joins in between finds
/// the lane driven (it follows), and nobody drives it: once every caller
/// is done, a request is left in a lane nobody drives (invariant 1; the
/// real lane would make that caller wait forever).
#[test]
fn a_release_that_does_not_recheck_the_queue_loses_a_waiter() {
    expect_failure("release after a separate emptiness check", || {
        let lane = Arc::new(NaiveLane::default());
        let callers: Vec<_> = (1..=2u64)
            .map(|v| {
                let lane = Arc::clone(&lane);
                thread::spawn(move || {
                    if lane.join(v) {
                        loop {
                            lane.take();
                            if lane.is_empty() {
                                lane.clear_driving();
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for h in callers {
            h.join().unwrap();
        }
        let (queue, driving) = &*lane.state.lock().unwrap();
        assert!(
            queue.is_empty() || *driving,
            "a request in a lane nobody drives"
        );
    });
}

/// The naive lane: the same queue (of values: the answers are not what
/// it gets wrong), released in two steps.
#[derive(Default)]
struct NaiveLane {
    state: loom::sync::Mutex<(Vec<u64>, bool)>,
}

impl NaiveLane {
    /// Queues; whether the caller drives.
    fn join(&self, v: u64) -> bool {
        let mut s = self.state.lock().unwrap();
        s.0.push(v);
        !std::mem::replace(&mut s.1, true)
    }
    fn take(&self) -> Vec<u64> {
        std::mem::take(&mut self.state.lock().unwrap().0)
    }
    fn is_empty(&self) -> bool {
        self.state.lock().unwrap().0.is_empty()
    }
    fn clear_driving(&self) {
        self.state.lock().unwrap().1 = false;
    }
}
