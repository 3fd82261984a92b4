//! [`Lane`]: a group's queue of requests that need Redis, one batch of
//! them in flight at a time (group commit), and [`Slot`], the hand-off of
//! a batch's answer to the caller waiting for it, by a parked thread or by
//! an async task.
//!
//! # Who drives
//! A request its key's lease cannot serve becomes a [`Slot`] and joins its
//! group's lane. One party at a time *drives* the lane: it takes a batch
//! of slots, sends them to Redis in one request, files the reply and
//! finishes each slot. The duty goes:
//! - to a synchronous caller that joins an idle lane ([`Join::Lead`]): it
//!   drives one batch on its own thread (its request goes straight out, a
//!   lone caller waits for no hand-off), then gives the duty up
//!   ([`release`](Lane::release)) or, with slots queued meanwhile, hands
//!   it to the lane's thread ([`hand_off`](Lane::hand_off));
//! - to a synchronous caller waiting in the lane, passed by the driver
//!   that leaves it ([`pass_to_waiter`](Lane::pass_to_waiter)): that
//!   caller's thread must be woken for its answer anyway, so it wakes to
//!   drive instead (one wake-up, where handing the lane to its thread
//!   would cost that thread's and then the caller's);
//! - to the lane's thread, asked by [`hand_off`](Lane::hand_off): by a
//!   caller after its batch when no synchronous caller waits, or at once
//!   by an async caller that joined an idle lane (an executor thread never
//!   waits on Redis). The thread drives until the queue is empty.
//!
//! # Warm keys first
//! A request of a key that holds (or held) a lease on this node joins
//! ahead ([`join`](Lane::join) with `first`): a batch takes those first,
//! and a batch that carries any carries only them, so a flood of new keys
//! delays a warm key's renewal by at most the batch in flight. The bound
//! applies to each queue on its own: a flood that fills the queue of new
//! keys sheds no warm key.
//!
//! # Invariants (of the state under the lane's lock)
//! 1. **Queued implies driven**: whenever the lock is free, both queues
//!    are empty or `driving` is set. [`join`](Lane::join) sets `driving` if it
//!    was clear (the joiner takes the duty); [`release`](Lane::release)
//!    clears it only when the queue is empty; a hand-off leaves it set and
//!    asks the thread, which drives until a release succeeds. So no slot
//!    waits in a lane nobody drives.
//! 2. **One driver**: `driving` is set by the one party that takes the
//!    duty and cleared only by its release; the duty passes only by a
//!    hand-off or a pass to a waiter, which the driver makes and then stops
//!    driving. A waiter the duty was passed to is still queued (no one
//!    else takes or answers it: only the driver does), and learns of the
//!    duty from its slot ([`Waited::Lead`]).
//! 3. **Bounded**: a join finds at most `bound` slots in its queue or is
//!    refused ([`Join::Full`]) at once, without waiting.
//!
//! # A slot
//! Finished at most once ([`finish`](Slot::finish)), read once by its
//! waiter; its state is behind a lock of its own, so a waiter that stores
//! its thread or waker and a driver that finishes cannot miss each other:
//! the waiter stores its wake-up under the lock only after seeing no
//! answer, and the driver wakes whatever is stored after storing the
//! answer under the same lock (a thread's unpark token, or a waker, makes
//! a wake-up that comes before the park a no-op wait). A waiter that goes
//! away ([`abandon`](Slot::abandon), a dropped future) makes a later
//! finish fail, so the driver keeps what it would have handed over.
//!
//! Nothing here runs code of the key type; the loom model
//! (`loom-tests/tests/lease_lane.rs`) compiles this file with loom's
//! `Mutex`, `Arc` and threads.

use super::sync::{lock, Arc, Mutex, Thread};
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

/// How a synchronous waiter's wait ended.
#[derive(Debug)]
pub(crate) enum Waited<R> {
    /// Its answer.
    Answered(R),
    /// The lane's duty was passed to it: drive, then wait again.
    Lead,
}

/// What a caller joining a lane must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// The lane was idle: the caller has the duty (drive, or hand it off).
    Lead,
    /// Someone drives: wait for the slot.
    Follow,
    /// The queue is full: the slot was not queued.
    Full,
}

/// What the lane's thread is to do ([`Lane::poll_duty`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Duty {
    /// The duty was handed to it: drive until a release succeeds.
    Drive,
    /// Nothing asked of it: park until unparked (or a timer of its own).
    Idle,
    /// The lane is stopped: finish what is queued and end.
    Stop,
}

struct State<T, R> {
    /// Requests of warm keys, taken first.
    first: VecDeque<Arc<Slot<T, R>>>,
    queue: VecDeque<Arc<Slot<T, R>>>,
    driving: bool,
    /// The duty was handed to the lane's thread and it has not taken it.
    wanted: bool,
    stopped: bool,
    thread: Option<Thread>,
}

/// A group's queue of slots, driven by one party at a time (module docs).
pub(crate) struct Lane<T, R> {
    state: Mutex<State<T, R>>,
    bound: usize,
}

impl<T, R> Lane<T, R> {
    /// An idle lane that queues at most `bound` (>= 1) slots.
    pub(crate) fn new(bound: usize) -> Self {
        Lane {
            state: Mutex::new(State {
                first: VecDeque::new(),
                queue: VecDeque::new(),
                driving: false,
                wanted: false,
                stopped: false,
                thread: None,
            }),
            bound: bound.max(1),
        }
    }

    /// The lane's thread, which [`hand_off`](Self::hand_off) unparks.
    pub(crate) fn set_thread(&self, t: Thread) {
        lock(&self.state).thread = Some(t);
    }

    /// Queues `slot` (ahead, with `first`); whether the caller took the
    /// duty (invariant 1), or its queue was full (invariant 3: then nothing
    /// changed).
    pub(crate) fn join(&self, slot: Arc<Slot<T, R>>, first: bool) -> Join {
        let mut s = lock(&self.state);
        if s.stopped {
            return Join::Full;
        }
        let q = if first { &mut s.first } else { &mut s.queue };
        if q.len() >= self.bound {
            return Join::Full;
        }
        q.push_back(slot);
        if s.driving {
            Join::Follow
        } else {
            s.driving = true;
            Join::Lead
        }
    }

    /// [`join`](Self::join) for a caller that must not drive (an async
    /// task): a duty it takes goes to the lane's thread at once. `false`
    /// if the queue was full.
    pub(crate) fn join_async(&self, slot: Arc<Slot<T, R>>, first: bool) -> bool {
        match self.join(slot, first) {
            Join::Full => false,
            Join::Follow => true,
            Join::Lead => {
                self.hand_off();
                true
            }
        }
    }

    /// The driver's next batch: up to `max` slots from the front of the
    /// warm keys' queue, or if it is empty, of the other.
    pub(crate) fn take(&self, max: usize) -> Vec<Arc<Slot<T, R>>> {
        let mut s = lock(&self.state);
        let q = if s.first.is_empty() {
            &mut s.queue
        } else {
            &mut s.first
        };
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// The driver puts slots back at the front of the warm keys' queue, in
    /// their order (they go in the next batch; the bound does not apply:
    /// they were queued).
    pub(crate) fn put_back(&self, slots: Vec<Arc<Slot<T, R>>>) {
        let mut s = lock(&self.state);
        for slot in slots.into_iter().rev() {
            s.first.push_front(slot);
        }
    }

    /// The driver gives the duty up if nothing is queued (`true`); with
    /// slots queued it keeps the duty (`false`) and must drive on or hand
    /// it off (invariant 1).
    pub(crate) fn release(&self) -> bool {
        let mut s = lock(&self.state);
        if s.queue.is_empty() && s.first.is_empty() {
            s.driving = false;
            true
        } else {
            false
        }
    }

    /// The driver hands the duty to the lane's thread (and stops driving).
    pub(crate) fn hand_off(&self) {
        let t = {
            let mut s = lock(&self.state);
            debug_assert!(s.driving, "only the driver hands off");
            s.wanted = true;
            s.thread.clone()
        };
        if let Some(t) = t {
            t.unpark();
        }
    }

    /// The driver passes the duty to a synchronous caller waiting in the
    /// lane (the first found, warm keys' queue first), and stops driving;
    /// `false` if none waits parked (then it must drive on or hand off).
    pub(crate) fn pass_to_waiter(&self) -> bool {
        let t = {
            let s = lock(&self.state);
            debug_assert!(s.driving, "only the driver passes the duty");
            s.first
                .iter()
                .chain(s.queue.iter())
                .find_map(|slot| slot.lead())
        };
        match t {
            Some(t) => {
                t.unpark();
                true
            }
            None => false,
        }
    }

    /// The lane's thread: whether the duty was handed to it (it takes it),
    /// or the lane stopped.
    pub(crate) fn poll_duty(&self) -> Duty {
        let mut s = lock(&self.state);
        if s.stopped {
            Duty::Stop
        } else if s.wanted {
            s.wanted = false;
            Duty::Drive
        } else {
            Duty::Idle
        }
    }

    /// Stops the lane: later joins are refused ([`Join::Full`]); the
    /// thread is told to end. Returns what is queued, for the caller to
    /// finish (no driver takes it any more once the thread ends; a driver
    /// that is running now finishes its own batch).
    pub(crate) fn stop(&self) -> Vec<Arc<Slot<T, R>>> {
        let (rest, t) = {
            let mut s = lock(&self.state);
            s.stopped = true;
            let first = std::mem::take(&mut s.first);
            (
                first.into_iter().chain(s.queue.drain(..)).collect(),
                s.thread.clone(),
            )
        };
        if let Some(t) = t {
            t.unpark();
        }
        rest
    }

    /// Slots queued now.
    pub(crate) fn queued(&self) -> usize {
        let s = lock(&self.state);
        s.first.len() + s.queue.len()
    }
}

/// A waiter's wake-up: its thread, or its task's waker.
pub(crate) enum Wake {
    Thread(Thread),
    Task(Waker),
}

impl Wake {
    /// Wakes the waiter (its answer is stored already).
    pub(crate) fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake(),
        }
    }
}

enum Answer<R> {
    /// Not finished: the waiter's wake-up, once it stored one.
    Waiting(Option<Wake>),
    /// Not finished, and the lane's duty passed to its (parked) waiter.
    Lead,
    Ready(R),
    /// Read by the waiter.
    Taken,
    /// The waiter went away first.
    Abandoned,
}

/// One request in a lane and, once finished, its answer.
pub(crate) struct Slot<T, R> {
    /// What the driver needs to know of the request.
    pub(crate) req: T,
    answer: Mutex<Answer<R>>,
}

impl<T, R> Slot<T, R> {
    pub(crate) fn new(req: T) -> Self {
        Slot {
            req,
            answer: Mutex::new(Answer::Waiting(None)),
        }
    }

    /// Answers the slot and wakes its waiter; `Err(r)` if the waiter went
    /// away (or it was answered before), so the driver keeps `r`.
    pub(crate) fn finish(&self, r: R) -> Result<(), R> {
        if let Some(w) = self.finish_later(r)? {
            w.wake();
        }
        Ok(())
    }

    /// [`finish`](Self::finish), but the waiter's wake-up (if it stored
    /// one) is handed back for the driver to make later: the answer is
    /// stored now (a waiter that looks finds it), the wake-up must be made
    /// before the driver gives up the lane (a parked waiter sleeps until
    /// then).
    pub(crate) fn finish_later(&self, r: R) -> Result<Option<Wake>, R> {
        let mut a = lock(&self.answer);
        match &mut *a {
            Answer::Waiting(w) => {
                let w = w.take();
                *a = Answer::Ready(r);
                Ok(w)
            }
            // Only a stopping lane answers a slot the duty was passed to
            // (its waiter was woken already, and finds the answer).
            Answer::Lead => {
                *a = Answer::Ready(r);
                Ok(None)
            }
            _ => Err(r),
        }
    }

    /// Marks the slot as the lane's next driver if its waiter is parked
    /// (a thread), and returns that thread to unpark. Under the lane's
    /// lock, by the driver.
    fn lead(&self) -> Option<Thread> {
        let mut a = lock(&self.answer);
        match &mut *a {
            Answer::Waiting(Some(Wake::Thread(t))) => {
                let t = t.clone();
                *a = Answer::Lead;
                Some(t)
            }
            _ => None,
        }
    }

    /// Whether the waiter went away (the driver need not send the slot).
    pub(crate) fn abandoned(&self) -> bool {
        matches!(*lock(&self.answer), Answer::Abandoned)
    }

    /// The waiter goes away: a later [`finish`](Self::finish) fails. An
    /// answer already given is dropped.
    pub(crate) fn abandon(&self) {
        let mut a = lock(&self.answer);
        if let Answer::Waiting(_) | Answer::Ready(_) = &*a {
            *a = Answer::Abandoned;
        }
    }

    /// Parks the calling thread until the slot is answered, or the lane's
    /// duty is passed to it.
    pub(crate) fn wait(&self) -> Waited<R> {
        loop {
            {
                let mut a = lock(&self.answer);
                match std::mem::replace(&mut *a, Answer::Taken) {
                    Answer::Ready(r) => return Waited::Answered(r),
                    Answer::Lead => {
                        *a = Answer::Waiting(None);
                        return Waited::Lead;
                    }
                    Answer::Waiting(_) => {
                        *a = Answer::Waiting(Some(Wake::Thread(super::sync::current())))
                    }
                    Answer::Taken | Answer::Abandoned => {
                        unreachable!("a slot is waited for once, by its caller")
                    }
                }
            }
            // An unpark between the unlock and here makes this return at
            // once; a spurious return loops.
            super::sync::park();
        }
    }

    /// The answer, or `Pending` with `cx`'s waker stored.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<R> {
        let mut a = lock(&self.answer);
        match std::mem::replace(&mut *a, Answer::Taken) {
            Answer::Ready(r) => Poll::Ready(r),
            Answer::Waiting(w) => {
                let w = match w {
                    Some(Wake::Task(w)) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                *a = Answer::Waiting(Some(Wake::Task(w)));
                Poll::Pending
            }
            Answer::Taken | Answer::Abandoned | Answer::Lead => {
                unreachable!("a slot is not polled after its answer, nor led by a task")
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn slot(v: u64) -> Arc<Slot<u64, u64>> {
        Arc::new(Slot::new(v))
    }

    #[test]
    fn warm_keys_go_first_alone_and_each_queue_has_its_bound() {
        let lane: Lane<u64, u64> = Lane::new(2);
        assert_eq!(lane.join(slot(1), false), Join::Lead);
        assert_eq!(lane.join(slot(2), false), Join::Follow);
        // The queue of new keys is full; a warm key still joins.
        assert_eq!(lane.join(slot(3), false), Join::Full);
        assert_eq!(lane.join(slot(4), true), Join::Follow);
        assert_eq!(lane.queued(), 3);
        // A batch with a warm key carries only warm keys.
        let b: Vec<u64> = lane.take(8).iter().map(|s| s.req).collect();
        assert_eq!(b, [4]);
        // Put back: ahead of everything, in order.
        lane.put_back(vec![slot(5), slot(6)]);
        let b: Vec<u64> = lane.take(1).iter().map(|s| s.req).collect();
        assert_eq!(b, [5]);
        assert!(!lane.release(), "slots queued: the driver keeps the duty");
        let b: Vec<u64> = lane.take(8).iter().map(|s| s.req).collect();
        assert_eq!(b, [6]);
        let b: Vec<u64> = lane.take(8).iter().map(|s| s.req).collect();
        assert_eq!(b, [1, 2]);
        assert!(lane.release());
        assert_eq!(lane.join(slot(7), true), Join::Lead);
        let rest: Vec<u64> = lane.stop().iter().map(|s| s.req).collect();
        assert_eq!(rest, [7]);
        assert_eq!(lane.join(slot(8), true), Join::Full, "stopped");
    }

    #[test]
    fn an_answer_reaches_its_waiter_once_and_a_gone_waiter_hands_it_back() {
        let s = slot(1);
        assert!(s.finish(10).is_ok());
        assert_eq!(s.finish(11), Err(11), "answered once");
        assert!(matches!(s.wait(), Waited::Answered(10)));
        let gone = slot(2);
        gone.abandon();
        assert!(gone.abandoned());
        assert_eq!(gone.finish_later(20).err(), Some(20));
    }
}
