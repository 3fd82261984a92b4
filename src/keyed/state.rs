//! One key's window state, inline in its map slot (32 bytes): the
//! [`Head`], the filter bound `up`, and the `ext` word that points to the
//! key's out-of-line window ([`Ext`]) and carries its flags. This file
//! owns the protocols that join them: adds, exact reads, eviction and
//! moving a key to another table.
//!
//! # The `ext` word
//! The `Ext` pointer (16-byte aligned, null until needed) or'ed with flags:
//! - `DEAD`: evicted; no pointer. Terminal. (Encoded as `MOVED |
//!   INCOMING`, a combination no live slot has, so that four flag bits and
//!   a 16-byte aligned `Ext` suffice: plain `malloc` alignment.)
//! - `MOVED`: the key is moving (or has moved) to another table. Terminal.
//! - `INCOMING`: this slot is receiving a moved key's state; readers wait
//!   and hot decisions are put off until it clears.
//! - `STRIPED`: the key saw contention: adds go to its stripe rows.
//! - `ABORT`: a writer refused by an eviction in progress set it, so the
//!   eviction's final CAS of this word fails (only the evictor clears it).
//!
//! # Adds
//! Load `ext`; `DEAD`/`MOVED`: look the key up again (the caller). Striped:
//! a pinned add to the thread's stripe row. Otherwise an add on the head
//! (`head.rs`): a live older count inside the window is *folded* into row
//! 0 (`open`: install the `Ext`, mark the fold begun, raise `up` by the
//! count, all before the take; `fold`: an add to row 0, not pinned, its
//! marks protecting it; the fold's end mark when the add is done). An add
//! the head refuses as late goes to row 0 (pinned), then raises `up`; one
//! already outside the window of the head's epoch (the key's newest) is
//! dropped. A CAS on the head that failed because another thread wrote
//! makes the key striped (stripes installed, then the flag set, then `up`
//! set to `UNKNOWN`).
//!
//! Why a fold needs no pin: an evictor reads the fold marks after its
//! snapshot of the head, and closes the head by a CAS from that snapshot.
//! A fold whose take came before the snapshot has its begin mark visible
//! to the evictor (the snapshot's `Acquire` load reads the take), which
//! gives up unless the fold has also ended; a take after the snapshot
//! makes the close fail; a take after the close fails. So no fold places
//! a count once an eviction has checked the key idle. A mover closes the
//! head first, then waits for the marks to settle before it reads the
//! rows, so every fold's count is in row 0 by then.
//!
//! # `up`, the filter bound
//! Invariant: while the key is not striped, `up` is at least row 0's sum
//! over the window of any epoch at or after the head's (`UNKNOWN` or above
//! when unknown). It is raised *before* a fold's take (after its begin
//! mark) and *after* a late add's write, and tightened by the hot-key exact
//! path ([`KeyState::sum_tightening`]): load `ended`, load `up`, read the
//! cells, load `begun`, and CAS `up` from the value read to row 0's sum,
//! only if no fold overlapped the read (a raise in between changes `up` and
//! fails the CAS; one after it adds on top: over, never under). So `head + up` bounds the window from above with no read
//! of the `Ext`: the hot-key filter of `hot.rs`. That filter reads `up` with
//! an RMW after its head write, and every raise is an RMW, so of a head add
//! and a late add racing across the threshold, the later RMW on `up` sees
//! the other's contribution (or the other, exact, path sees the head add).
//!
//! # Exact reads
//! Load `ext`; wait while `INCOMING`; with no `Ext`: read the head, then
//! check `ext` again (a fold installs the `Ext` before its take, so an
//! unchanged null word means no count was in flight). With an `Ext`: the
//! fold marks of `ext.rs` around the head and every cell.
//!
//! # Eviction ([`KeyState::try_retire`], under the shard lock)
//! 1. Clear `ABORT`; snapshot the head and every row guard (none pinned).
//! 2. Check idle: no live count at an epoch inside or after the window, in
//!    the head or any cell, and no fold in flight (`begun == ended`; a fold
//!    that took before the head snapshot has its begin mark visible, one
//!    that takes after it changes the head word).
//! 3. Close the head (CAS from its snapshot), 4. retire the rows (CAS from
//!    their snapshots), 5. CAS `ext` from its value in step 1 to `DEAD`.
//!
//! A writer that finds the head closed or a row retired while the word is
//! neither `DEAD` nor `MOVED` sets `ABORT` (so step 5 fails), reopens the
//! head and un-retires the rows (deterministic values) and retries: it
//! never waits. Any failed step undoes the earlier ones and gives up. No
//! add is lost: an add that completed before a snapshot is seen by the
//! idle check; one after it changes the head word or a guard (steps 3-4
//! fail), or is refused and dooms step 5.
//!
//! # Moves ([`KeyState::move_into`], under the shard lock)
//! The key is already published in the new table with `INCOMING` (map.rs,
//! invariant 2). Set `MOVED` (new writers look the key up again and find
//! the new slot), close the head (retrying while in-flight adds change
//! it), retire every row and wait for their pins to drain and for folds in
//! flight to end (a fold refused by a retired row 0 places its count in the
//! new slot), then *replay* every live count of the old state into the new
//! one as adds at their own epochs (adds commute), copy the hot word,
//! tighten `up`, and clear `INCOMING`. Writers never wait; readers of the
//! new slot wait for `INCOMING` to clear.

use super::ext::{Ext, Write};
use super::head::{Folder, Head, HeadAdd};
use super::map::Value;
use super::reclaim::{Graveyard, Guard};
use crate::slice::Added;
use crate::sync::{wait_hint, AtomicU64, AtomicUsize, Ordering};
use std::ptr::NonNull;

const MOVED: usize = 1;
const INCOMING: usize = 1 << 1;
const STRIPED: usize = 1 << 2;
const ABORT: usize = 1 << 3;
/// `MOVED | INCOMING`, which no live slot has (a slot receiving a move
/// clears `INCOMING` before the shard lock is released, so it is never
/// moved out while incoming): the word of an evicted key.
const DEAD: usize = MOVED | INCOMING;
const FLAGS: usize = (1 << 4) - 1;
const _: () = assert!(std::mem::align_of::<Ext>() > FLAGS);

/// Whether an `ext` word is `DEAD`.
#[inline]
fn is_dead(x: usize) -> bool {
    x & DEAD == DEAD
}

/// Whether an `ext` word is `INCOMING` (and not `DEAD`).
#[inline]
fn is_incoming(x: usize) -> bool {
    x & DEAD == INCOMING
}

/// `up` when nothing is known (a striped key, a slot receiving a move):
/// above every window sum, yet not sticky, so that a raise still changes
/// the word and a tightening CAS from an older value fails (a value that
/// saturated at `u64::MAX` is never tightened, only read as "unknown").
const UNKNOWN: u64 = 1 << 63;

/// The per-map settings every key's state uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cfg {
    /// `S`, slices per window.
    pub(crate) slices: usize,
    /// Stripe rows a contended key gets.
    pub(crate) stripes: usize,
}

/// What became of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Counted in the head; the head's count right after.
    Head(u64),
    /// Counted in row 0 or a stripe row.
    Elsewhere,
    /// Older than the ring: dropped.
    TooOld,
    /// The key is dead or moving: look it up again.
    Retry,
}

/// An exact read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// The window sum.
    Sum(u64),
    /// The key moved: look it up again.
    Moved,
}

/// One key's state (see the module docs).
pub(crate) struct KeyState {
    head: Head,
    up: AtomicU64,
    ext: AtomicUsize,
}

#[inline]
fn ext_of<'a>(x: usize) -> Option<&'a Ext> {
    // SAFETY: a pointer in an `ext` word came from `Ext::alloc`, and is
    // freed only with its slot's table or through the collector after the
    // word turned `DEAD` (reclaim.rs): callers hold a guard.
    unsafe { ((x & !FLAGS) as *const Ext).as_ref() }
}

#[inline]
fn in_window(e: u64, last: u64, slices: u64) -> bool {
    e <= last && last - e < slices
}

/// Saturating `fetch_add` of `up` (raises are rare: folds and late adds).
#[inline]
fn raise(up: &AtomicU64, n: u64) {
    let mut cur = up.load(Ordering::Relaxed);
    while cur != u64::MAX {
        match up.compare_exchange_weak(
            cur,
            cur.saturating_add(n),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(actual) => cur = actual,
        }
    }
}

/// The head's folder for one add: installs the window, keeps the fold
/// marks, raises `up`, and places the taken count in row 0.
struct Fold<'a> {
    state: &'a KeyState,
    cfg: &'a Cfg,
    /// The window whose fold this add has begun.
    open: Option<&'a Ext>,
}

impl Folder for Fold<'_> {
    fn open(&mut self, _epoch: u64, count: u64) {
        if self.open.is_none() {
            if let Some(x) = self.state.ensure_ext(self.cfg) {
                x.begin_fold();
                self.open = Some(x);
            }
        }
        raise(&self.state.up, count);
    }

    fn fold(&mut self, epoch: u64, count: u64) {
        // `open` installed the window unless the key is dead, and a dead
        // key's head is closed: no take can succeed then.
        if let Some(x) = self.open {
            x.add_row0_folded(epoch, count, self.cfg.slices);
        }
    }
}

impl Drop for Fold<'_> {
    /// Ends the fold, if one began, once the add is done.
    fn drop(&mut self) {
        if let Some(x) = self.open {
            x.end_fold();
        }
    }
}

impl KeyState {
    #[inline]
    fn word(&self) -> usize {
        self.ext.load(Ordering::Acquire)
    }

    /// The key's window, installing it if needed (not on a dead key).
    pub(crate) fn ensure_ext(&self, cfg: &Cfg) -> Option<&Ext> {
        let mut x = self.word();
        loop {
            if let Some(e) = ext_of(x) {
                return Some(e);
            }
            if is_dead(x) {
                return None;
            }
            let fresh = Ext::alloc(cfg.slices);
            match self.ext.compare_exchange(
                x,
                x | fresh.as_ptr() as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return ext_of(fresh.as_ptr() as usize),
                Err(actual) => {
                    // SAFETY: never published.
                    unsafe { Ext::free(fresh) };
                    x = actual;
                }
            }
        }
    }

    /// The key's window, if it has one.
    #[inline]
    pub(crate) fn ext(&self) -> Option<&Ext> {
        ext_of(self.word())
    }

    /// Whether adds go to stripe rows.
    pub(crate) fn is_striped(&self) -> bool {
        self.word() & STRIPED != 0
    }

    /// Whether the slot is still receiving a moved key's state.
    pub(crate) fn is_incoming(&self) -> bool {
        is_incoming(self.word())
    }

    /// Waits until the slot is no longer receiving a moved key's state
    /// (the mover clears `INCOMING` when this key is done).
    #[cold]
    pub(crate) fn wait_incoming(&self) {
        let mut rounds = 0;
        while self.is_incoming() {
            wait_hint(&mut rounds);
        }
    }

    /// `up`, read with an RMW (see "`up`, the filter bound").
    #[inline]
    pub(crate) fn up_synced(&self) -> u64 {
        self.up.fetch_add(0, Ordering::AcqRel)
    }

    /// The fast path of [`add`](Self::add): one CAS on the head when it
    /// holds epoch `e` live and the key is not striped. `None`: take `add`.
    #[inline]
    pub(crate) fn try_add(&self, e: u64, n: u64) -> Option<u64> {
        if self.word() & STRIPED != 0 {
            return None;
        }
        let mut contended = false;
        self.head.try_add(e, n, &mut contended)
    }

    /// Adds `n` (> 0) at epoch `e` (see "Adds").
    pub(crate) fn add(&self, e: u64, n: u64, cfg: &Cfg) -> Outcome {
        loop {
            let x = self.word();
            if x & MOVED != 0 {
                return Outcome::Retry;
            }
            if x & STRIPED != 0 {
                let striped = ext_of(x).and_then(|w| w.add_striped(e, n, cfg.slices));
                match striped {
                    Some(Write::Done(a)) => return done(a),
                    _ if self.refused() => continue,
                    _ => return Outcome::Retry,
                }
            }
            let mut f = Fold {
                state: self,
                cfg,
                open: None,
            };
            let mut contended = false;
            let r = self
                .head
                .add(e, n, cfg.slices as u64, &mut contended, &mut f);
            drop(f);
            let o = match r {
                HeadAdd::Added { after } => {
                    if contended {
                        self.stripe(cfg);
                    }
                    Outcome::Head(after)
                }
                HeadAdd::Late { head } if head.saturating_sub(e) >= cfg.slices as u64 => {
                    // Outside the window of the key's newest add: dropped.
                    Outcome::TooOld
                }
                HeadAdd::Late { .. } => match self.add_late(e, n, cfg) {
                    Some(o) => o,
                    None => continue,
                },
                HeadAdd::Closed if self.refused() => continue,
                HeadAdd::Closed => Outcome::Retry,
            };
            return o;
        }
    }

    /// An add the head refused as late: to row 0, then raise `up`. `None`:
    /// refused by an eviction this call has just doomed; retry.
    fn add_late(&self, e: u64, n: u64, cfg: &Cfg) -> Option<Outcome> {
        if self.word() & MOVED != 0 {
            return Some(Outcome::Retry);
        }
        let Some(x) = self.ensure_ext(cfg) else {
            return Some(Outcome::Retry);
        };
        match x.add_row0(e, n, cfg.slices) {
            Write::Done(Added::Recorded) => {
                raise(&self.up, n);
                Some(Outcome::Elsewhere)
            }
            Write::Done(Added::TooOld) => Some(Outcome::TooOld),
            Write::Refused if self.refused() => None,
            Write::Refused => Some(Outcome::Retry),
        }
    }

    /// A writer was refused by a closed head or a retired row. If the key
    /// is neither dead nor moving, an eviction is in progress: doom it
    /// (`ABORT`), undo its closing (deterministic values) and return `true`
    /// to retry; otherwise `false` (look the key up again).
    #[cold]
    fn refused(&self) -> bool {
        let prev = self.ext.fetch_or(ABORT, Ordering::AcqRel);
        if prev & MOVED != 0 {
            return false;
        }
        self.head.reopen();
        if let Some(x) = ext_of(prev) {
            x.unretire_all();
        }
        true
    }

    /// Gives a contended key its stripe rows (see "Adds").
    #[cold]
    pub(crate) fn stripe(&self, cfg: &Cfg) {
        let Some(x) = self.ensure_ext(cfg) else {
            return;
        };
        x.install_stripes(cfg.slices, cfg.stripes);
        let mut w = self.word();
        while w & (MOVED | STRIPED) == 0 {
            match self
                .ext
                .compare_exchange(w, w | STRIPED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => w = actual,
            }
        }
        self.up.swap(UNKNOWN, Ordering::AcqRel);
    }

    /// Tightens `up` to row 0's sum over the window of epoch `e`, unless a
    /// fold overlapped the read or the key is striped.
    fn tighten(&self, x: &Ext, e: u64, cfg: &Cfg) {
        let ended = x.folds_ended();
        let u = self.up.load(Ordering::Acquire);
        if self.word() & (STRIPED | INCOMING | MOVED) != 0 {
            return;
        }
        let s = x.row0_sum(e, cfg.slices);
        if x.folds_begun() == ended && s < u && u != u64::MAX {
            let _ = self
                .up
                .compare_exchange(u, s, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The exact window sum at epoch `last` (see "Exact reads").
    pub(crate) fn sum(&self, last: u64, cfg: &Cfg) -> Read {
        self.read(last, cfg, false)
    }

    /// [`sum`](Self::sum), also tightening `up` to row 0's part of it (the
    /// hot-key exact path: the place where a loose bound costs something).
    pub(crate) fn sum_tightening(&self, last: u64, cfg: &Cfg) -> Read {
        self.read(last, cfg, true)
    }

    fn read(&self, last: u64, cfg: &Cfg, tighten: bool) -> Read {
        let k = cfg.slices as u64;
        let mut rounds = 0;
        loop {
            let x = self.word();
            if is_dead(x) {
                return Read::Sum(0);
            }
            if x & MOVED != 0 {
                return Read::Moved;
            }
            if x & INCOMING != 0 {
                wait_hint(&mut rounds);
                continue;
            }
            let ended = ext_of(x).map(|w| w.folds_ended());
            let u = self.up.load(Ordering::Acquire);
            let (e, c) = self.head.read();
            let mut sum = if in_window(e, last, k) { c } else { 0 };
            if let Some(w) = ext_of(x) {
                let row0 = w.row0_sum(last, cfg.slices);
                sum = sum.saturating_add(row0);
                w.for_each_stripe_cell(cfg.slices, |e, c| {
                    if in_window(e, last, k) {
                        sum = sum.saturating_add(c);
                    }
                });
                if Some(w.folds_begun()) == ended {
                    if tighten && x & STRIPED == 0 && row0 < u && u != u64::MAX {
                        // The protocol of `tighten`: `ended`, `up`, the
                        // cells, `begun`, then a CAS from the `up` read.
                        let _ =
                            self.up
                                .compare_exchange(u, row0, Ordering::AcqRel, Ordering::Relaxed);
                    }
                    return Read::Sum(sum);
                }
            } else if self.word() == x {
                return Read::Sum(sum);
            }
            wait_hint(&mut rounds);
        }
    }

    /// Takes every count (see [`Ext::take`]); run under the shard lock
    /// (no eviction or move can hold the key).
    pub(crate) fn take(&self, cfg: &Cfg, f: &mut impl FnMut(u64, u64)) {
        if let Some((e, c)) = self.head.take() {
            f(e, c);
        }
        if let Some(x) = self.ext() {
            let whole = x.take(cfg.slices, f);
            debug_assert!(whole, "no row is retired under the shard lock");
        }
    }
}

#[inline]
fn done(a: Added) -> Outcome {
    match a {
        Added::Recorded => Outcome::Elsewhere,
        Added::TooOld => Outcome::TooOld,
    }
}

/// An `Ext` handed to the collector when its key is evicted.
struct Detached(NonNull<Ext>);
// SAFETY: the window is only freed through this (never read).
unsafe impl Send for Detached {}
impl Drop for Detached {
    fn drop(&mut self) {
        // SAFETY: unlinked (the word is `DEAD`) and past every guard that
        // could reach it when the collector runs this.
        unsafe { Ext::free(self.0) }
    }
}

impl Value for KeyState {
    type Cfg = Cfg;

    fn vacant() -> Self {
        KeyState {
            head: Head::new(),
            up: AtomicU64::new(0),
            ext: AtomicUsize::new(0),
        }
    }

    fn init(&self, _cfg: &Cfg, incoming: bool) {
        self.head.reset();
        self.up
            .store(if incoming { UNKNOWN } else { 0 }, Ordering::Relaxed);
        self.ext
            .store(if incoming { INCOMING } else { 0 }, Ordering::Relaxed);
    }

    fn is_dead(&self) -> bool {
        is_dead(self.word())
    }

    fn heap_bytes(&self, cfg: &Cfg) -> usize {
        self.ext().map_or(0, |x| x.memory_bytes(cfg.slices))
    }

    fn try_retire(&self, now: u64, cfg: &Cfg, guard: &Guard<'_>, graveyard: &Graveyard) -> bool {
        // 1. Snapshots.
        let mut x = self.word();
        if x & ABORT != 0 {
            x = self.ext.fetch_and(!ABORT, Ordering::AcqRel) & !ABORT;
        }
        if x & (MOVED | INCOMING) != 0 {
            return false;
        }
        let ext = ext_of(x);
        let head = self.head.snapshot_for_close();
        let guards = match ext.map(|w| w.snapshot_guards()) {
            Some(None) => return false,
            Some(Some(g)) => g,
            None => Vec::new(),
        };
        // 2. Idle?
        let first = now.saturating_add(1).saturating_sub(cfg.slices as u64);
        if !Head::idle_before(head, first) {
            return false;
        }
        if let Some(w) = ext {
            let ended = w.folds_ended();
            let mut live = false;
            w.for_each_cell(cfg.slices, |e, c| live |= c > 0 && e >= first);
            if live || w.folds_begun() != ended {
                return false;
            }
        }
        // 3-5. Close, retire, kill.
        if !self.head.close(head) {
            return false;
        }
        if let Some(w) = ext {
            if !w.retire(&guards) {
                self.head.reopen();
                return false;
            }
        }
        if self
            .ext
            .compare_exchange(x, DEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            if let Some(w) = ext {
                w.restore(&guards);
            }
            self.head.reopen();
            return false;
        }
        if let Some(w) = ext {
            let p = Box::into_raw(Box::new(Detached(NonNull::from(w))));
            // SAFETY: the word is `DEAD`: no guard pinned from now on can
            // reach the window, and it is handed over once.
            unsafe { guard.defer_free(p, graveyard) };
        }
        true
    }

    fn move_into(&self, to: &Self, cfg: &Cfg, _guard: &Guard<'_>, _graveyard: &Graveyard) {
        // Close the old state to writers (see "Moves").
        let prev = self.ext.fetch_or(MOVED, Ordering::AcqRel);
        debug_assert!(!is_dead(prev), "the map moves live keys only");
        loop {
            let snap = self.head.snapshot_for_close();
            if self.head.is_closed() || self.head.close(snap) {
                break;
            }
        }
        let ext = self.ext();
        if let Some(w) = ext {
            w.retire_all();
            let mut rounds = 0;
            while w.folds_begun() != w.folds_ended() {
                wait_hint(&mut rounds);
            }
        }
        // Replay its counts into the new slot.
        let (e, c) = self.head.read();
        if c > 0 {
            to.replay(e, c, cfg);
        }
        if let Some(w) = ext {
            w.for_each_cell(cfg.slices, |e, c| {
                if c > 0 {
                    to.replay(e, c, cfg);
                }
            });
            let h = w.hot_word();
            if h != 0 {
                if let Some(t) = to.ensure_ext(cfg) {
                    t.set_hot_word(h);
                }
            }
        }
        to.ext.fetch_and(!INCOMING, Ordering::AcqRel);
        // `up` was unknown while the state moved in; tighten it now (a
        // late add racing this raises it, and the CAS fails).
        let (e, _) = to.head.read();
        match to.ext() {
            Some(x) => to.tighten(x, e, cfg),
            None => {
                let _ = to
                    .up
                    .compare_exchange(UNKNOWN, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }
}

impl KeyState {
    /// A replayed count of a moving key (the mover, under the shard lock;
    /// nothing else can move or evict `self` meanwhile).
    fn replay(&self, e: u64, n: u64, cfg: &Cfg) {
        let o = self.add(e, n, cfg);
        debug_assert!(o != Outcome::Retry);
    }
}

impl Drop for KeyState {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        let x = *self.ext.get_mut();
        #[cfg(loom)]
        let x = self.ext.with_mut(|x| *x);
        if let Some(p) = NonNull::new((x & !FLAGS) as *mut Ext) {
            // SAFETY: the slot's table is being dropped, past every guard
            // (reclaim.rs), and a `DEAD` word holds no pointer, so the
            // window is ours alone.
            unsafe { Ext::free(p) };
        }
    }
}
