//! What an owner that evicts and moves states needs: sealing a state for
//! good, telling whether it is idle, and copying a sealed state into a
//! fresh one. Built for a per-key table whose slots hold states inline.
//!
//! # Sealed for good
//! [`AdmissionState::seal`] first helps any roll in progress to its end,
//! then CASes `epoch: E -> E | FLAG` (only while the state holds `E`
//! unsealed, like any move of the epoch, so invariant 1 of `state.rs`
//! holds), then seals the state word (CAS, retried while grants race it).
//! Grants that CAS before the seal are in the final `used`; every later
//! grant finds the flag (no `state` word matches a flagged epoch, see
//! `state::key`) or the sealed word, and returns `Refused::Sealed`. No one
//! unseals it, no roll moves it (the flagged epoch is not a time), and no
//! roll of an earlier epoch can still write its history (a roll ends before
//! its state is unsealed, which happened before the flag): the state,
//! `used` and history are final. Anyone may help: a grant that meets a
//! flagged epoch seals the word itself.
//!
//! # Pending, and the copy
//! [`AdmissionState::pending`] is a destination for a copy: `epoch` =
//! [`PENDING_EPOCH`] (flagged: every grant gets `Sealed`), `state` = a
//! sealed word whose `used` is all ones (never a live value: budgets stop
//! one below, [`MAX_BUDGET`]), no block. [`AdmissionState::copy_into`]
//! fills it from a sealed source, each word by one CAS from its pending
//! value, in this order:
//! 1. the history: the source's inline or quiet word, or a clone of its block, CASed
//!    in from null (a source with none copies nothing); a loser frees its
//!    clone;
//! 2. `state`: `PENDING_STATE -> tag(E) | used` (unsealed);
//! 3. `epoch`: `PENDING_EPOCH -> E`: the destination is live.
//!
//! Every value is a function of the sealed source, so copiers agree, and
//! the copy is idempotent: a copier that comes late (after 3) fails every
//! CAS. Its state CAS fails because a live `used` is never all ones, its
//! epoch CAS because a live epoch is never `PENDING_EPOCH`, its history CAS
//! because a source with a history gave the destination one in step 1
//! (before it went live; a `block` word never returns to null), and a
//! source without one makes no copier try.
//! Grants cannot start before step 3: the pending epoch matches no state.
//!
//! # How an owner must use these
//! - **Idle** ([`is_idle_at`](AdmissionState::is_idle_at)): no permit in
//!   any level's window at `now` (or at the state's newest epoch, if
//!   later). On a live state it is a snapshot (a grant may land right
//!   after); on a sealed state it is final, and it stays true for any
//!   later `now`.
//! - **Evict**: check idle (cheap pre-filter), [`seal`](AdmissionState::seal),
//!   check idle **again**: only then may the state be dropped (a grant may
//!   have landed between the first check and the seal). If it is no longer
//!   idle, the key must be kept: copy it into a fresh state (as a move).
//!   A new state for an evicted key must start at an epoch no earlier than
//!   the one the idleness was judged at (`new(cfg, epoch)`), or a request
//!   stamped earlier would be judged in a window that has forgotten the
//!   evicted grants (time never runs backwards for a key).
//! - **Move**: `seal` the old state, `copy_into` a `pending()` state in the
//!   new slot, publish the new slot, retire the old one. Any thread that
//!   meets `Sealed` may help the move by calling `copy_into` with the same
//!   source and destination, then retry on the destination.
//! - **Free**: a sealed state may be read (by late helpers) until the owner
//!   knows no thread holds it; drop it after that (its `Drop` frees the
//!   block).
//! - **Start** ([`start`](AdmissionState::start)): an owner whose slots are
//!   built `pending()` (a table's vacant slots) turns one into a fresh state
//!   before publishing it; no other thread can see it yet, so plain stores
//!   do, and the publication (a release store) carries them.
//!
//! `src/limiter/keyed/slot.rs` is the owner that drives all of these: the
//! per-key limiter's map slots.

use super::block;
use super::config::{Config, MAX_BUDGET};
use super::help::Take;
use super::history::{self, History};
use super::state::{holds, key, AdmissionState, FLAG, PENDING_EPOCH};
use crate::pack::{Admission, AtomicWord, Tag, Word};
use crate::sync::{AtomicPtr, AtomicU64, Ordering};

/// `state` of a pending destination: sealed, `used` all ones.
const PENDING_STATE: Word<Admission> =
    Word::from_raw(Admission::SEALED.mask() | Admission::USED.mask());
const _: () = assert!(MAX_BUDGET < Admission::USED.max());

impl AdmissionState {
    /// Seals the state for good (see the module docs); returns once it is
    /// sealed. Idempotent; a pending state is left as it is.
    pub fn seal(&self, cfg: &Config) {
        loop {
            let e = self.epoch.load(Ordering::Acquire);
            if e & FLAG != 0 {
                if e != PENDING_EPOCH {
                    self.seal_word(e & !FLAG);
                }
                return;
            }
            let s = self.state.load(Ordering::Acquire);
            if holds(s, key(e)) {
                let _ =
                    self.epoch
                        .compare_exchange(e, e | FLAG, Ordering::AcqRel, Ordering::Acquire);
            } else {
                self.help(cfg, e, s, Take::NONE);
            }
        }
    }

    /// Whether the state is sealed for good (and final).
    pub fn is_sealed(&self) -> bool {
        let e = self.epoch.load(Ordering::Acquire);
        e & FLAG != 0
            && e != PENDING_EPOCH
            && Admission::SEALED.get(self.state.load(Ordering::Acquire))
    }

    /// Whether the state waits for a copy.
    pub fn is_pending(&self) -> bool {
        self.epoch.load(Ordering::Acquire) == PENDING_EPOCH
    }

    /// A destination for [`copy_into`](Self::copy_into): refuses every
    /// request with `Sealed` until a copy fills it.
    pub fn pending() -> AdmissionState {
        AdmissionState {
            epoch: AtomicU64::new(PENDING_EPOCH),
            state: AtomicWord::new(PENDING_STATE),
            block: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Copies this state into `dest`, a [`pending`](Self::pending) state
    /// (sealing this one first, if it is not yet). Deterministic and
    /// idempotent: any number of threads may call it with the same pair, at
    /// any time, and `dest` ends equal to this state, unsealed, with the
    /// grants made on it since. `false` if this state is itself pending
    /// (nothing to copy).
    pub fn copy_into(&self, cfg: &Config, dest: &AdmissionState) -> bool {
        self.seal(cfg);
        let e = self.epoch.load(Ordering::Acquire);
        if e == PENDING_EPOCH {
            return false;
        }
        let e = e & !FLAG;
        let s = self.state.load(Ordering::Acquire);
        debug_assert!(Admission::SEALED.get(s));
        // 1. The history: an inline word is copied as it is, a block cloned.
        let copy = match self.history(cfg) {
            History::Empty => None,
            History::Inline(w) => Some(history::inline_ptr(w)),
            History::Quiet(e) => Some(history::quiet(e)),
            History::Block(src) if dest.block.load(Ordering::Acquire).is_null() => {
                Some(block::clone_of(src))
            }
            History::Block(_) => None, // a copier before us installed it
        };
        if let Some(copy) = copy {
            if dest
                .block
                .compare_exchange(
                    std::ptr::null_mut(),
                    copy,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
                && History::is_block(copy)
            {
                // SAFETY: `copy` is a clone that was never shared.
                unsafe { block::free(copy) };
            }
        }
        // 2. The state word, unsealed.
        let live = Admission::word(Tag::of(e), false, Admission::USED.get(s));
        let _ =
            dest.state
                .compare_exchange(PENDING_STATE, live, Ordering::AcqRel, Ordering::Acquire);
        // 3. The epoch: from here `dest` is live.
        let _ = dest
            .epoch
            .compare_exchange(PENDING_EPOCH, e, Ordering::AcqRel, Ordering::Acquire);
        true
    }

    /// Turns a [`pending`](Self::pending) state that no other thread can
    /// reach yet (an unpublished slot) into what `new(cfg, epoch)` builds.
    /// The owner publishes it afterwards with a release store.
    pub(crate) fn start(&self, cfg: &Config, epoch: u64) {
        debug_assert!(self.is_pending());
        debug_assert!(self.block.load(Ordering::Relaxed).is_null());
        let epoch = epoch.min(super::state::MAX_EPOCH);
        self.block
            .store(history::first_history(cfg, epoch), Ordering::Relaxed);
        let fresh = Admission::word(Tag::of(epoch), false, 0);
        self.state.store(fresh, Ordering::Relaxed);
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// A live copy of this state (sealing it first): [`pending`](Self::pending)
    /// then [`copy_into`](Self::copy_into), for a single-threaded owner.
    #[cfg_attr(not(any(test, loom)), allow(dead_code))] // tests and loom models
    pub fn copied(&self, cfg: &Config) -> AdmissionState {
        let dest = AdmissionState::pending();
        self.copy_into(cfg, &dest);
        dest
    }

    /// Whether no level's window holds a permit at `now` (or at the state's
    /// newest epoch, if later); final once the state is sealed. A pending
    /// state is not idle.
    pub fn is_idle_at(&self, cfg: &Config, now: u64) -> bool {
        // Every grant is counted at or before the state's epoch `E` (a roll
        // in progress has moved `epoch` ahead of its counts, never behind):
        // if `E` is a whole window behind `now` in every level, nothing is
        // left in any window. One load, for the keys a sweep finds long idle.
        let raw = self.epoch.load(Ordering::Acquire);
        if raw != PENDING_EPOCH {
            let (e, j) = (raw & !FLAG, cfg.epoch_of(now));
            let gone = |lv: &super::config::Level| lv.index(e) + lv.slices <= lv.index(j);
            if cfg.levels().iter().all(gone) {
                return true;
            }
            // A live state already at `j` or later with a permit in its
            // window: not idle, without reading the history (the keys a
            // sweep finds already in its own slice). `epoch` read the same
            // before and after `state` (it only increases): at the state's
            // load the epoch was `E`, and a word holding `E` unsealed is
            // `E`'s (invariant 1 of `state.rs`; a flagged `E` matches no
            // word), whose `used` is the fold level's whole window at `E`,
            // the epoch this is judged at.
            if e >= j {
                let s = self.state.load(Ordering::Acquire);
                if Admission::USED.get(s) > 0
                    && holds(s, key(raw))
                    && self.epoch.load(Ordering::Acquire) == raw
                {
                    return false;
                }
            }
        }
        self.read(cfg, |snap| {
            let j = cfg.epoch_of(now).max(snap.epoch);
            (0..cfg.len()).all(|i| snap.level(cfg, i).used_at(j) == 0)
        })
        .unwrap_or(false)
    }

    /// Heap bytes this state holds (its history block, if any; an inline
    /// history costs none).
    pub fn heap_bytes(&self, cfg: &Config) -> usize {
        self.block(cfg).map_or(0, |_| cfg.block_bytes())
    }
}

impl Drop for AdmissionState {
    fn drop(&mut self) {
        let ptr = self.block.load(Ordering::Acquire);
        if History::is_block(ptr) {
            // SAFETY: the block is this state's, allocated by `history`, and
            // `&mut self` means no one else reads it any more.
            unsafe { block::free(ptr) };
        }
    }
}
