//! One key's count in one slice: the value a slice map's slot holds inline
//! (`ring.rs`). A key with adds in three slices of the window has three
//! entries, one in each slice's map; nothing is shared between them.
//!
//! # Layout (24 bytes)
//! - `word`: `SEALED:1 | INCOMING:1 | STRIPED:1 | WATCHED:1 | count:60`
//!   (`crate::pack::EntryWord`).
//!   `WATCHED`: the hot-key detector's bound read this count (`bound.rs`);
//!   an add to a watched entry takes the slow path and reports it.
//! - `stripes`: null, or a [`StripedCounter`] holding the rest of a
//!   contended entry's count; bit 0 (`LENT`) marks a pointer this slot does
//!   not own (it moved on with the key, see "Moves").
//! - `hot`: the hot-key detector's word for this key and slice (`hot.rs`);
//!   0 and unused in plain windows.
//!
//! The entry's count is `count(word)` plus, when `STRIPED`, the stripes'
//! sum.
//!
//! # Adds
//! A CAS of `word` from the value loaded to `count + n` (saturating at
//! [`COUNT_MAX`]), flags unchanged: one locked instruction (an entry with
//! any flag set takes [`Entry::add`], which keeps them). A CAS that
//! failed because another thread added makes the entry *striped*: the
//! stripes are installed (CAS from null), then `STRIPED` is set, and from
//! then on adds go to the calling thread's stripe of the
//! `StripedCounter` (a plain store on a thread-owned line), so threads
//! adding to one hot key do not fight over a line. An entry that is
//! `INCOMING` is never striped (the mover brings the stripes); one that is
//! `SEALED` refuses adds ([`Add::Moved`]: look the key up again).
//!
//! A key's first add in a slice needs no CAS: the insert writes its count
//! into the new entry before the key is published ([`Entry::start_with`]),
//! under the shard lock, so every thread that finds the key finds the add.
//!
//! # Moves (a slice map's table grows; `map/mod.rs` invariant 2)
//! Under the shard lock the mover prepares the new slot `INCOMING`, then:
//! 1. `fetch_or(SEALED)` on the old word: its count is final, and every
//!    later add there is refused;
//! 2. if it was `STRIPED`: the stripes pointer is stored in the new slot and
//!    marked `LENT` in the old one. Writers that loaded `STRIPED` before the
//!    seal still add to the same `StripedCounter`, which now belongs to the
//!    new slot, so nothing is lost;
//! 3. the hot word is copied (but an installer's `INSTALLING`, `bound.rs`);
//! 4. one CAS loop on the new word adds the old count, clears `INCOMING`
//!    and sets `STRIPED` and `WATCHED` if the old word had them (adds that
//!    raced into the new slot meanwhile kept `INCOMING` and are kept).
//!
//! Readers wait while `INCOMING` and look the key up again on `SEALED`.
//!
//! # Takes (a flush, under the shard lock: no move runs)
//! The word's count by CAS to 0 (flags kept), the stripes by
//! `sum_and_reset`: an add racing a take is in the taken total or stays,
//! never both, never neither.
//!
//! # Orderings
//! Word CASes `AcqRel`, loads `Acquire`. The stripes pointer is installed
//! (`Release` CAS) before `STRIPED` is set, so a writer or reader that sees
//! `STRIPED` (`Acquire`) sees the pointer.
//!
//! An add to the stripes learns no count. The hot-key detector reads it
//! after the add ([`Entry::after_striped_add`]): a `SeqCst` fence,
//! then the word and every stripe. Racing striped adds each run "add,
//! fence, read", so the one whose fence comes last in the fences' total
//! order reads every one of their adds (the store-buffering litmus test
//! with `SeqCst` fences: two threads cannot both miss the other's store).
//! Without the fence two adds could each read only their own stripe, and
//! a slice could reach the detector's heavy mark with no add seeing it
//! (`loom-tests/tests/keyed.rs` has the model).
//!
//! # The mark of a striped entry
//! Reading every stripe after every add costs the detector a miss on each
//! stripe another thread wrote since, on every add to a contended key, and
//! makes the writers' lines bounce between cores. An add needs the count
//! only to learn whether it reached a mark `M` (the detector's heavy
//! count). With `w0` the word's count (fixed while striped: adds go to the
//! stripes) and `k` the most stripes the counter can hold
//! (`StripedCounter::max_cells`), every stripe below `q = (M - 1 - w0) / k`
//! means a count of at most `w0 + k (q - 1) < M`. So a striped add
//! ([`Entry::after_striped_add`]) runs "add, fence, load the `hot` word":
//! - no `NEAR` there and its own stripe (the value its add left) below
//!   `q`: the count is below `M` ([`Striped::Below`]), nothing else read;
//! - else it sets `NEAR` (an RMW) if it was not set, fences again, and
//!   reads the count as above.
//!
//! Why some add still reads every add once the count reaches `M`: a stripe
//! is then at `q` or more, and the add that took it there set `NEAR` (or
//! found it). An add that stopped at its stripe loaded a `hot` word without
//! the first `NEAR` RMW, so its fence precedes that RMW's following fence
//! in the `SeqCst` order (C++20 [atomics.order] 4.4), which precedes the
//! fence of the last reader: that reader reads the stopped add's stripe
//! write. Readers read each other as before. `NEAR` is never cleared (every
//! writer of the `hot` word keeps the bits it does not own), and a move
//! gives the new entry of a striped one `NEAR` (a stopped add on the old
//! entry loaded its word before the seal, so its fence precedes that of any
//! reader after the move; with `NEAR`, the new entry has no stopped adds).
//! A take only lowers stripes, so "every stripe below `q`" stays sufficient.
//! Without either fence, without `NEAR`, or without the move's `NEAR`,
//! loom finds a heavy slice no add saw (`loom-tests/tests/keyed.rs`, the
//! models of striped adds that stop at their stripe; the naive design is
//! in `keyed_naive.rs`).

use crate::counter::StripedCounter;
use crate::pack::{EntryHot, EntryWord};
use crate::stripes::install_if_null;
use crate::sync::{fence, wait_hint, AtomicPtr, AtomicU64, Exclusive, Ordering};

// The word's layout is `crate::pack::EntryWord`'s.
const SEALED: u64 = EntryWord::SEALED.mask();
const INCOMING: u64 = EntryWord::INCOMING.mask();
const STRIPED: u64 = EntryWord::STRIPED.mask();
const WATCHED: u64 = EntryWord::WATCHED.mask();
const FLAGS: u64 = SEALED | INCOMING | STRIPED | WATCHED;
/// The flags that keep an entry from being striped.
const UNSTRIPABLE: u64 = SEALED | INCOMING | STRIPED;
/// The largest count an entry's word holds (2^60 - 1); adds saturate there.
pub(crate) const COUNT_MAX: u64 = EntryWord::COUNT.max();
/// Bit 0 of `stripes`: a pointer this slot does not own.
const LENT: usize = 1;
/// The `hot` word's mark of a striped entry some add found near its
/// count's mark (see "The mark of a striped entry").
const NEAR: u64 = EntryHot::NEAR.mask();

#[inline]
fn count(w: u64) -> u64 {
    w & COUNT_MAX
}

/// What became of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Add {
    /// Counted in the entry's own word: its count right after.
    Done(u64),
    /// Counted in the stripes: the value of the stripe it went to right
    /// after (the entry's count is not known).
    Striped(u64),
    /// The entry moved to a bigger table: look the key up again.
    Moved,
}

/// What a striped add learnt of the entry's count
/// ([`Entry::after_striped_add`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Striped {
    /// Below the mark, known from the add's own stripe.
    Below,
    /// The count, read after a fence.
    Count(u64),
    /// The entry moved: its count is not known here.
    Moved,
}

/// One key's count in one slice (see the module docs).
pub(crate) struct Entry {
    word: AtomicU64,
    stripes: AtomicPtr<StripedCounter>,
    hot: AtomicU64,
}

impl Entry {
    /// A vacant slot's entry.
    pub(crate) fn vacant() -> Entry {
        Entry {
            word: AtomicU64::new(0),
            stripes: AtomicPtr::new(std::ptr::null_mut()),
            hot: AtomicU64::new(0),
        }
    }

    /// Prepares a vacant entry for a new key, or (`incoming`) for a key
    /// moving in from another table.
    #[inline]
    pub(crate) fn init(&self, incoming: bool) {
        self.word
            .store(if incoming { INCOMING } else { 0 }, Ordering::Relaxed);
        self.stripes.store(std::ptr::null_mut(), Ordering::Relaxed);
        self.hot.store(0, Ordering::Relaxed);
    }

    /// Gives a new entry its first add, `n` (saturating), and its `hot`
    /// word, after [`init`](Self::init) and before its key is published:
    /// the control byte's `Release` store publishes both with the key, so
    /// the add needs no CAS of its own.
    #[inline]
    pub(crate) fn start_with(&self, n: u64, hot: u64) {
        self.word.store(n.min(COUNT_MAX), Ordering::Relaxed);
        if hot != 0 {
            self.hot.store(hot, Ordering::Relaxed);
        }
    }

    #[inline]
    fn stripes(&self) -> Option<&StripedCounter> {
        let p = (self.stripes.load(Ordering::Acquire) as usize & !LENT) as *const StripedCounter;
        // SAFETY: a non-null pointer came from `Box::into_raw` in `stripe`,
        // is never replaced while the slot is live, and is freed only by
        // the slot that owns it when its table is dropped (past every
        // guard, reclaim.rs).
        unsafe { p.as_ref() }
    }

    /// The fast path of [`add`](Self::add): one CAS when the entry has no
    /// flag set. `None`: take `add`.
    #[inline]
    pub(crate) fn try_add(&self, n: u64) -> Option<u64> {
        let w = self.word.load(Ordering::Acquire);
        // `w <= COUNT_MAX` once no flag is set, so this cannot underflow.
        if w & FLAGS != 0 || n > COUNT_MAX - w {
            return None;
        }
        self.word
            .compare_exchange(w, w + n, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| w + n)
    }

    /// Adds `n` (see "Adds").
    pub(crate) fn add(&self, n: u64) -> Add {
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            if w & SEALED != 0 {
                return Add::Moved;
            }
            if w & STRIPED != 0 {
                if let Some(s) = self.stripes() {
                    return Add::Striped(s.add_in_cell(n));
                }
            }
            let after = count(w).saturating_add(n).min(COUNT_MAX);
            let new = after | (w & FLAGS);
            if new == w {
                return Add::Done(after); // saturated
            }
            match self
                .word
                .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Add::Done(after),
                Err(actual) => {
                    // Another add changed the count: contention. (A move
                    // sealing this entry, or filling it, changes a flag
                    // instead, which the next round sees.)
                    if actual & UNSTRIPABLE == 0 && w & UNSTRIPABLE == 0 {
                        self.stripe();
                    }
                    w = actual;
                }
            }
        }
    }

    /// Makes the entry striped (see "Adds"); not while `INCOMING`.
    #[cold]
    pub(crate) fn stripe(&self) {
        install_if_null(&self.stripes, StripedCounter::new);
        let mut w = self.word.load(Ordering::Acquire);
        while w & UNSTRIPABLE == 0 {
            match self.word.compare_exchange_weak(
                w,
                w | STRIPED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => w = actual,
            }
        }
    }

    /// Whether adds go to stripes.
    pub(crate) fn is_striped(&self) -> bool {
        self.word.load(Ordering::Acquire) & STRIPED != 0
    }

    /// The entry's count; `None` if it moved (look the key up again).
    /// Waits while a move fills it.
    pub(crate) fn read(&self) -> Option<u64> {
        let mut rounds = 0;
        loop {
            let w = self.word.load(Ordering::Acquire);
            if w & SEALED != 0 {
                return None;
            }
            if w & INCOMING != 0 {
                wait_hint(&mut rounds);
                continue;
            }
            let mut c = count(w);
            if w & STRIPED != 0 {
                if let Some(s) = self.stripes() {
                    c = c.saturating_add(s.sum());
                }
            }
            return Some(c);
        }
    }

    /// After this thread's add to the stripes, which left its stripe at
    /// `cell` (`Add::Striped`): whether the count is below `mark`, or
    /// what it is (see "The mark of a striped entry"). Returns the answer
    /// and the `hot` word read after the fence.
    #[inline]
    pub(crate) fn after_striped_add(&self, cell: u64, mark: u64) -> (Striped, u64) {
        fence(Ordering::SeqCst);
        let w = self.word.load(Ordering::Acquire);
        let mut h = self.hot.load(Ordering::Acquire);
        if w & SEALED != 0 {
            return (Striped::Moved, h);
        }
        if h & NEAR == 0 && w & INCOMING == 0 {
            let cells = self.stripes().map_or(1, StripedCounter::max_cells);
            if cell < mark.saturating_sub(1).saturating_sub(count(w)) / cells {
                return (Striped::Below, h);
            }
            h = self.hot.fetch_or(NEAR, Ordering::AcqRel) | NEAR;
            fence(Ordering::SeqCst);
        }
        match self.read() {
            Some(c) => (Striped::Count(c), h),
            None => (Striped::Moved, h),
        }
    }

    /// The count, for the hot-key detector's bound (`bound.rs`), by an RMW
    /// that sets `WATCHED`: an add that comes later in the word's order
    /// sees the flag. `None` if the entry is striped, moving or sealed (the
    /// word is not the whole count, or not for long).
    pub(crate) fn watch(&self) -> Option<u64> {
        let w = self.word.fetch_or(WATCHED, Ordering::AcqRel);
        (w & UNSTRIPABLE == 0).then_some(count(w))
    }

    /// Whether a bound read this entry (`watch`): an add that finds it so,
    /// after it landed, clears the bounds of the key's newer entries.
    #[inline]
    pub(crate) fn is_watched(&self) -> bool {
        self.word.load(Ordering::Acquire) & WATCHED != 0
    }

    /// Takes the whole count, leaving 0 (see "Takes"). Under the shard
    /// lock.
    pub(crate) fn take(&self) -> u64 {
        let mut w = self.word.load(Ordering::Acquire);
        let mut taken = loop {
            if count(w) == 0 {
                break 0;
            }
            match self
                .word
                .compare_exchange_weak(w, w & FLAGS, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break count(w),
                Err(actual) => w = actual,
            }
        };
        if let Some(s) = self.stripes() {
            taken = taken.saturating_add(s.sum_and_reset());
        }
        taken
    }

    /// The hot-key detector's word.
    #[inline]
    pub(crate) fn hot(&self) -> &AtomicU64 {
        &self.hot
    }

    /// Moves this entry's count into `to` (prepared `INCOMING`); see
    /// "Moves". Under the shard lock.
    pub(crate) fn move_into(&self, to: &Entry) {
        let w = self.word.fetch_or(SEALED, Ordering::AcqRel);
        debug_assert!(w & (SEALED | INCOMING) == 0, "moves live entries only");
        if w & STRIPED != 0 {
            let p = self.stripes.load(Ordering::Acquire);
            to.stripes.store(p, Ordering::Release);
            self.stripes.store(
                (p as usize | LENT) as *mut StripedCounter,
                Ordering::Release,
            );
        }
        // Without `INSTALLING`: an installer holding the old word installs
        // nothing here (`bound.rs`).
        // With `NEAR` when striped: a striped add to the old entry may have
        // stopped at its stripe (see "The mark of a striped entry").
        let near = if w & STRIPED != 0 { NEAR } else { 0 };
        let hot = self.hot.load(Ordering::Acquire) & !EntryHot::INSTALLING.mask();
        to.hot.store(hot | near, Ordering::Release);
        let mut t = to.word.load(Ordering::Acquire);
        loop {
            let new = count(t).saturating_add(count(w)).min(COUNT_MAX)
                | (t & FLAGS & !INCOMING)
                | (w & (STRIPED | WATCHED));
            match to
                .word
                .compare_exchange_weak(t, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => t = actual,
            }
        }
    }

    /// Heap bytes held outside the slot (a striped entry's counter).
    pub(crate) fn heap_bytes(&self) -> usize {
        let p = self.stripes.load(Ordering::Acquire) as usize;
        if p == 0 || p & LENT != 0 {
            return 0;
        }
        self.stripes().map_or(0, |s| {
            std::mem::size_of::<StripedCounter>() + s.heap_bytes()
        })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let p = self.stripes.read_mut();
        if !p.is_null() && p as usize & LENT == 0 {
            // SAFETY: owned (not `LENT`), from `Box::into_raw`, and the slot
            // is being dropped with its table, past every guard.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_vacant_entry_is_all_zero_bytes() {
        // `Value::ZEROED_VACANT` for `Entry` (ring.rs) relies on it.
        let e = Entry::vacant();
        // SAFETY: reading the bytes of a plain-old-data struct.
        let bytes: [u8; std::mem::size_of::<Entry>()] = unsafe { std::mem::transmute_copy(&e) };
        assert!(bytes.iter().all(|&b| b == 0));
    }

    #[test]
    fn adds_saturate_and_take() {
        let e = Entry::vacant();
        e.init(false);
        assert_eq!(e.try_add(3), Some(3));
        assert_eq!(e.add(2), Add::Done(5));
        assert_eq!(e.add(u64::MAX), Add::Done(COUNT_MAX));
        assert_eq!(e.read(), Some(COUNT_MAX));
        assert_eq!(e.take(), COUNT_MAX);
        assert_eq!(e.read(), Some(0));
    }

    #[test]
    fn striped_entries_count_in_both_parts_and_move_whole() {
        let e = Entry::vacant();
        e.init(false);
        e.add(4);
        e.stripe();
        assert!(e.is_striped());
        assert_eq!(e.try_add(1), None);
        assert_eq!(e.add(6), Add::Striped(6));
        assert_eq!(e.read(), Some(10));
        let to = Entry::vacant();
        to.init(true);
        assert_eq!(to.add(1), Add::Done(1), "adds race into an incoming slot");
        e.hot().store(9, Ordering::Relaxed);
        e.move_into(&to);
        assert_eq!(e.add(1), Add::Moved);
        assert_eq!(e.read(), None);
        assert_eq!(to.read(), Some(11));
        assert!(to.is_striped());
        assert_eq!(
            to.hot().load(Ordering::Relaxed),
            9 | NEAR,
            "striped: moved near"
        );
        assert_eq!(e.heap_bytes(), 0, "the stripes moved on");
        assert!(to.heap_bytes() > 0);
        assert_eq!(to.take(), 11);
        assert_eq!(to.read(), Some(0));
    }
}
