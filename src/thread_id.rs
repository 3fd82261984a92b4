//! Thread tokens: small, dense numbers, one per live thread, handed on to a
//! new thread only after their holder has exited. They are what lets a
//! stripe (a counter cell, a window row) have exactly one writing thread,
//! which then adds with a plain load and store instead of a locked
//! read-modify-write (see [`crate::stripes`]).
//!
//! # Invariants
//! 1. At any moment a token is held by at most one thread. A stripe owned by
//!    a token is therefore written by one thread at a time.
//! 2. A token passes from an exited thread to a new one only through the
//!    registry's mutex: the old holder gives it back from a thread-local
//!    destructor, after its last use (it first marks its own copy `EXITED`,
//!    so any later use on that thread, from another thread-local's
//!    destructor, gets [`NONE`] and owns nothing); the new holder takes it
//!    under the same mutex. Everything the old holder wrote happens-before
//!    everything the new holder reads (the mutex's release and acquire),
//!    so a stripe owned by the token passes on whole, count included.
//! 3. Tokens are `1..=MAX_TOKEN`; `0` marks an unowned stripe and [`NONE`]
//!    is never an owner, so a thread without a token never matches one.
//!
//! A thread whose thread-local destructors never run (a leaked thread, a
//! process exit) never gives its token back: the token is lost, nothing
//! else. Tokens are reused lowest-first, so they stay dense (at most the
//! peak number of threads that ever held one at once).

#[cfg(not(loom))]
use std::sync::Mutex;

#[cfg(loom)]
use loom::sync::Mutex;

/// The token of no thread: what [`current`] returns on a thread that has
/// given its token back (or could not get one). No stripe is ever owned by
/// it.
pub(crate) const NONE: u32 = u32::MAX;

/// The largest token handed out; beyond it threads get [`NONE`].
const MAX_TOKEN: u32 = u32::MAX - 2;

/// The thread-local copy before the first use.
const UNSET: u32 = 0;

/// The thread-local copy once the token has been given back.
const EXITED: u32 = u32::MAX - 1;

/// Free and never-used tokens.
struct Registry {
    /// Given-back tokens, taken lowest-first.
    free: Vec<u32>,
    /// The next never-used token.
    next: u32,
}

impl Registry {
    const fn new() -> Registry {
        Registry {
            free: Vec::new(),
            next: 1,
        }
    }

    fn take(&mut self) -> u32 {
        if let Some(pos) = self
            .free
            .iter()
            .enumerate()
            .min_by_key(|&(_, t)| *t)
            .map(|(i, _)| i)
        {
            return self.free.swap_remove(pos);
        }
        if self.next > MAX_TOKEN {
            return NONE;
        }
        self.next += 1;
        self.next - 1
    }

    fn give_back(&mut self, token: u32) {
        self.free.push(token);
    }
}

#[cfg(not(loom))]
static REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());

#[cfg(loom)]
loom::lazy_static! {
    static ref REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());
}

fn registry() -> impl std::ops::DerefMut<Target = Registry> {
    // A panic while holding this lock cannot leave the registry half
    // updated (each update is one push or pop), so a poisoned lock is used.
    #[cfg(not(loom))]
    return REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(loom)]
    return REGISTRY.lock().unwrap();
}

#[cfg(not(loom))]
mod local {
    use super::UNSET;
    use std::cell::Cell;

    /// Gives the token back when its thread exits.
    pub(super) struct Holder;

    std::thread_local! {
        /// The thread's token (no destructor, so it is readable until the
        /// thread is gone; `with` is a plain thread-local load).
        pub(super) static TOKEN: Cell<u32> = const { Cell::new(UNSET) };
        /// Registered on the first use; its destructor gives the token back.
        pub(super) static HOLDER: Holder = const { Holder };
    }

    impl Drop for Holder {
        fn drop(&mut self) {
            super::exit();
        }
    }

    #[inline(always)]
    pub(super) fn get() -> u32 {
        TOKEN.with(Cell::get)
    }

    pub(super) fn set(token: u32) {
        TOKEN.with(|t| t.set(token));
    }

    /// Registers the holder; `false` if the thread is already tearing its
    /// thread-locals down.
    pub(super) fn hold() -> bool {
        HOLDER.try_with(|_| ()).is_ok()
    }
}

#[cfg(loom)]
mod local {
    use super::UNSET;
    use std::cell::Cell;

    loom::thread_local! {
        /// The thread's token. Under loom a thread gives it back by calling
        /// [`super::exit_thread`] (loom runs thread-local destructors after
        /// the model's shared state is gone, so one cannot take the
        /// registry's lock there); the code run is the destructor's.
        pub(super) static TOKEN: Cell<u32> = Cell::new(UNSET);
    }

    pub(super) fn get() -> u32 {
        TOKEN.with(Cell::get)
    }

    pub(super) fn set(token: u32) {
        TOKEN.with(|t| t.set(token));
    }

    pub(super) fn hold() -> bool {
        true
    }
}

/// What a thread does when it exits (its thread-local destructor; under
/// loom, called by the model): marks its copy `EXITED`, so that any later
/// use on this thread owns nothing, then gives the token back.
fn exit() {
    let token = local::TOKEN.with(|t| t.replace(EXITED));
    release(token);
}

/// Under loom: the calling thread exits as far as tokens go (see
/// [`exit`]); a model calls it where a real thread would end.
#[cfg(loom)]
pub fn exit_thread() {
    exit();
}

/// Gives `token` (the thread-local copy at exit) back, if it is one.
fn release(token: u32) {
    if token != UNSET && token != EXITED && token != NONE {
        registry().give_back(token);
    }
}

/// The calling thread's token (`1..=MAX_TOKEN`), or [`NONE`] if it has
/// none (its thread-locals are being torn down, or tokens ran out).
#[inline(always)]
pub(crate) fn current() -> u32 {
    let t = local::get();
    // One comparison for `1..=MAX_TOKEN` (UNSET wraps to the top).
    if t.wrapping_sub(1) < MAX_TOKEN {
        return t;
    }
    acquire(t)
}

#[cold]
#[inline(never)]
fn acquire(t: u32) -> u32 {
    if t == EXITED || !local::hold() {
        return NONE;
    }
    let token = registry().take();
    local::set(token);
    token
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_token_and_threads_differ() {
        let mine = current();
        assert_ne!(mine, NONE);
        assert_eq!(current(), mine);
        let other = std::thread::spawn(current).join().unwrap();
        assert_ne!(other, NONE);
        // Both threads hold their tokens until both have one.
        let barrier = std::sync::Barrier::new(2);
        let both = std::thread::scope(|s| {
            let live = || {
                let t = current();
                barrier.wait();
                t
            };
            let (a, b) = (s.spawn(live), s.spawn(live));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_ne!(both.0, both.1, "two live threads never share a token");
        assert!(both.0 != mine && both.1 != mine);
    }

    #[test]
    fn the_registry_hands_out_the_lowest_free_token() {
        let mut r = Registry::new();
        assert_eq!((r.take(), r.take(), r.take()), (1, 2, 3));
        r.give_back(3);
        r.give_back(1);
        assert_eq!(r.take(), 1);
        assert_eq!(r.take(), 3);
        assert_eq!(r.take(), 4);
        r.next = MAX_TOKEN + 1;
        assert_eq!(r.take(), NONE);
    }
}
