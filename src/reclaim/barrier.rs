//! The two halves of one store-load fence: between a reader's pin store
//! and its guarded loads (the *light* half, paid on every lookup), and
//! between a retirement's unlink and the collector's scan of the pins (the
//! *heavy* half, paid on rare collections). `epoch.rs` says what they
//! protect; this file only says how each half is made.
//!
//! # Why asymmetric
//! A reader stores its pin, then loads pointers. x86 may let a load pass an
//! earlier store to another address (Intel SDM vol. 3A, 9.2.3.4, "Loads May
//! Be Reordered with Earlier Stores to Different Locations"); only a locked
//! instruction or `mfence` forbids it, at 20 cycles or more, on every
//! lookup. Instead the collector, which runs once per several retirements,
//! asks the kernel to run a full barrier on every CPU currently running a
//! thread of this process (`membarrier(2)`, `MEMBARRIER_CMD_PRIVATE_EXPEDITED`;
//! a thread not running has passed one at its context switch). Then for
//! each reader, either its pin store precedes that barrier (and the scan,
//! after it, sees the pin), or its later loads follow it (and see the
//! unlink, which the collector saw before asking). The reader's half is a
//! compiler fence: its loads stay after its pin store in program order.
//!
//! # Strategies
//! - **Linux, membarrier registered** (decided once, by [`init`], before
//!   any collector of this process exists): the above.
//! - **Elsewhere, under Miri (which cannot run the system call), or if
//!   registration fails:** a `SeqCst` fence on both sides (C++'s
//!   store-buffering litmus test with `seq_cst` fences: both loads cannot
//!   read the old values).
//! - **A membarrier that fails after registration** (it should not): the
//!   collector treats the pins as unknown and frees nothing ([`heavy`]
//!   returns `false`); nothing is freed early, memory waits for the next
//!   collection or the owner's drop.
//! - **Under loom:** a pin is a swap (`AcqRel`) and the scan reads each pin
//!   with an `AcqRel` RMW: the two RMWs are ordered in the pin's
//!   modification order, and whichever is second reads from (and
//!   synchronizes with) the first. That is exactly the guarantee the two
//!   real halves give, in a form loom checks.

use crate::sync::{AtomicU64, Ordering};

#[cfg(all(not(loom), not(miri), target_os = "linux"))]
mod membarrier {
    use crate::sync::{AtomicBool, Ordering};

    /// `membarrier(2)` commands (linux/membarrier.h).
    const QUERY: libc::c_int = 0;
    const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// Set once by [`register`], before any reader relies on it.
    pub(super) static ON: AtomicBool = AtomicBool::new(false);

    fn call(cmd: libc::c_int) -> libc::c_long {
        // SAFETY: `membarrier(cmd, flags = 0)` reads no memory of ours; an
        // unknown command or an old kernel returns -1 (ENOSYS, EINVAL).
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_int) }
    }

    pub(super) fn register() {
        let supported = call(QUERY);
        let needed = libc::c_long::from(PRIVATE_EXPEDITED | REGISTER_PRIVATE_EXPEDITED);
        if supported >= 0 && supported & needed == needed && call(REGISTER_PRIVATE_EXPEDITED) == 0 {
            ON.store(true, Ordering::Relaxed);
        }
    }

    pub(super) fn barrier() -> bool {
        call(PRIVATE_EXPEDITED) == 0
    }
}

/// Chooses the strategy, once per process. Called by every collector's
/// owner when it is built, so before any pin that collector protects:
/// a thread that pins got the owner from its builder (a happens-before
/// edge), and with it the strategy.
#[cfg(not(loom))]
pub(crate) fn init() {
    // Miri cannot make the system call: it runs the fence strategy.
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(membarrier::register);
    }
}

#[cfg(all(not(loom), not(miri), target_os = "linux"))]
#[inline(always)]
fn fast() -> bool {
    membarrier::ON.load(Ordering::Relaxed)
}

#[cfg(all(not(loom), any(miri, not(target_os = "linux"))))]
#[inline(always)]
fn fast() -> bool {
    false
}

/// Stores the pin `e` in `slot`, then the light half: no load the caller
/// makes afterwards is performed before the store (as the heavy half
/// sees it).
#[inline(always)]
pub(crate) fn pin(slot: &AtomicU64, e: u64) {
    #[cfg(not(loom))]
    {
        // `Release`, not `Relaxed`: a collect that reads this pin must
        // also see every load of the thread's previous section (its unpin
        // is an earlier `Release` store, but a later store of the same
        // thread does not extend its release sequence; `epoch.rs`, case 1).
        // On x86 a release store is the same plain `mov`.
        slot.store(e, Ordering::Release);
        if fast() {
            crate::sync::compiler_fence(Ordering::SeqCst);
        } else {
            crate::sync::fence(Ordering::SeqCst);
        }
    }
    #[cfg(loom)]
    slot.swap(e, Ordering::AcqRel);
}

/// The heavy half, run by a collector after the unlinks it will free and
/// before [`scan`]. `false`: the barrier could not be made, and the pins
/// must be treated as unknown.
pub(crate) fn heavy() -> bool {
    #[cfg(all(not(loom), not(miri), target_os = "linux"))]
    if fast() {
        return membarrier::barrier();
    }
    #[cfg(not(loom))]
    crate::sync::fence(Ordering::SeqCst);
    true
}

/// Reads a pin after [`heavy`]: `Acquire`, so that a reader's unpin
/// (`Release`) read here orders every load it made before what follows.
#[inline]
pub(crate) fn scan(slot: &AtomicU64) -> u64 {
    #[cfg(not(loom))]
    return slot.load(Ordering::Acquire);
    #[cfg(loom)]
    return slot.fetch_add(0, Ordering::AcqRel);
}
