//! The hot-key detector's *bound*: how many adds a heavy key that is not
//! hot can take in a slice before its window could reach the threshold,
//! so that those adds skip the exact step (`hot.rs`).
//!
//! # Why
//! A heavy key (a slice at `H = ceil(T / S)` or more) that is not hot takes
//! the exact step on every add: a lookup in every live slice's map. Keys
//! just below the threshold take it on every add of the slice, and in the
//! first windows after a start, where every heavy key is still below the
//! threshold, about one add in six did (on the per-key benchmarks' Zipf
//! stream: Zipf(1.0) over 1M `u64` keys).
//!
//! # The bound
//! Within a slice `e`, a key's window sum changes only through adds to its
//! entry in `e` and through *late* adds: adds at an older epoch of the
//! window (a thread whose time is behind). An exact step at `e` that leaves
//! the key cold reads the older slices' counts `older` and stores
//! `B = T - older` in the hot word of the key's entry in `e`. A later add
//! at `e` whose entry count after its CAS is `c < B` has a window sum
//! `c + older < T` (if no late add came): cold, and the rule changes
//! nothing, so it skips the exact step. (A striped entry's `c` is read
//! after the add, `Entry::after_striped_add`: no less than the
//! count when it landed, and racing adds do not all miss each other.) Bits of the entry's `hot` word
//! (`crate::pack::EntryHot`): `BOUND` (0: none), `STALE` (a late add came
//! since the bound was installed: it is not used) and `INSTALLING` (an
//! installer's reads are running).
//!
//! # Late adds (the protocol)
//! - The installer first takes the entry's hot word by an RMW that sets
//!   `INSTALLING` and clears `STALE` and `BOUND` (it gives up if another
//!   installer holds it). It raises the ring's `newest` to its epoch
//!   (`Ring::raise_newest`), reads by RMW every ring slot that could still
//!   receive an older map of the window (`Ring::for_each_map_synced`) and
//!   each older entry's word by an RMW that sets `WATCHED`
//!   (`Entry::watch`); it gives up if an older map lacks the key or an
//!   older entry is striped, moving or sealed. Then it installs `B` and
//!   clears `INSTALLING` by CAS, unless `STALE` was set meanwhile.
//! - An add to a `WATCHED` entry leaves the one-CAS path (the flag is one of
//!   the word's), and after it lands, whatever method made it (the
//!   detector's or the plain windows'), sets `STALE` by RMW on the key's
//!   entries in the newer slices of its window, each under its map's shard
//!   lock (the lock a table move copies the hot word in). It skips an
//!   entry whose hot word it finds with no installer and no live bound
//!   (see below), so a hot key's many late adds lock only where a bound
//!   could miss them.
//! - A key's first add in a slice older than the ring's `newest` does the
//!   same (its entry was not there to be watched).
//!
//! So a late add costs the newer slices their bounds only until their next
//! exact step installs new ones that include it; a bound is never used
//! that missed a late add.
//!
//! Why nothing is missed: a late add's CAS and the installer's watch RMW
//! are on the same word, so one comes first.
//! - If the late add's, the installer reads its count.
//! - If the installer's, the late add's CAS reads `WATCHED` (a striped add
//!   loads the word after the `STRIPED` CAS, which keeps the flag; a move
//!   carries it to the new slot), and reads from the installer's RMW (or
//!   a later RMW of its release sequence), so the installer's first RMW on
//!   the newer hot word happens-before the late add's load of that word:
//!   the late add sees `INSTALLING`, or the bound installed since, and sets
//!   `STALE` (it skips only a word with no installer and no live bound,
//!   which this one is not). In the hot word's order that `STALE` comes
//!   after the installer's first RMW: before its CAS, which then fails, or
//!   after it, which drops the bound.
//! - A late add that skips a word: it found no installer and no live
//!   bound. An installer that starts later does its watch RMW after the
//!   late add's CAS (else the second case above holds), so it reads the
//!   late count.
//!
//! A map of an older slice installed by a late add after the installer's
//! scan is installed by a CAS that reads from the scan's RMW, so the late
//! add sees the raised `newest` (its first add there is late) and the
//! newer entry; a key inserted into an older map the installer found
//! without it: the installer gave up.
//!
//! An add that runs while a late add is between its CAS and its `STALE` is
//! concurrent with it, and may or may not see it (as adds racing across a
//! crossing, `hot.rs`). A `WATCHED` entry stays so.
//!
//! Model-checked with loom: `loom-tests/tests/keyed_bound.rs` (the real
//! code), and the protocol's sketch with its naive counter-example (the
//! older counts read by plain loads) in the same file.

use super::entry::Entry;
use super::windows::KeyedWindows;
use crate::clock::Clock;
use crate::key::{Key, KeyHasher, KeyRef};
use crate::pack::EntryHot;
use crate::reclaim::Guard;
use crate::sync::Ordering;
use crate::unwind::AbortOnUnwind;

// The entry's hot word: `crate::pack::EntryHot`.
/// A late add came since the bound was installed: the bound is not used.
pub(super) const STALE: u64 = EntryHot::STALE.mask();
/// An installer's reads are running (it holds the word).
const INSTALLING: u64 = EntryHot::INSTALLING.mask();
const SHIFT: u32 = EntryHot::BOUND.shift();
const BOUND_MAX: u64 = EntryHot::BOUND.max();
const BOUND_BITS: u64 = EntryHot::BOUND.mask();

/// The bound in an entry's hot word (0: none, or `STALE`).
#[inline]
pub(super) fn bound(flags: u64) -> u64 {
    if flags & STALE != 0 {
        0
    } else {
        flags >> SHIFT
    }
}

/// Clears `INSTALLING` when an installer gives up (or unwinds: a key's
/// `Eq` in its reads).
struct Installing<'a>(&'a Entry);

impl Drop for Installing<'_> {
    fn drop(&mut self) {
        self.0.hot().fetch_and(!INSTALLING, Ordering::AcqRel);
    }
}

/// Installs the bound for the key's entry `en` at epoch `e`, after an exact
/// step that left the key cold (see "Late adds").
pub(super) fn install<K: Key, C: Clock, S: KeyHasher, Q: KeyRef<K> + ?Sized>(
    w: &KeyedWindows<K, C, S>,
    hash: u64,
    key: &Q,
    e: u64,
    en: &Entry,
    threshold: u64,
    guard: &Guard<'_>,
) {
    // Take the word: `INSTALLING`, with `STALE` and the old bound cleared
    // (what this install reads supersedes both).
    let mut h = en.hot().load(Ordering::Acquire);
    loop {
        if h & INSTALLING != 0 {
            return; // another installer's reads are running
        }
        let taken = (h & !(STALE | BOUND_BITS)) | INSTALLING;
        match en
            .hot()
            .compare_exchange(h, taken, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => break,
            Err(actual) => h = actual,
        }
    }
    let held = Installing(en);
    w.ring.raise_newest(e);
    let slices = w.slices() as u64;
    let mut older = 0u64;
    let mut ok = true;
    // The older slices of `e`'s window (none at epoch 0, or in a window
    // of one slice).
    let lo = (e + 1).saturating_sub(slices);
    if let Some(hi) = e.checked_sub(1).filter(|&hi| hi >= lo) {
        w.ring.for_each_map_synced(lo, hi, guard, |m| {
            if !ok {
                return;
            }
            match m.map.get(hash, |k| key.is(k), guard).and_then(Entry::watch) {
                Some(c) => older = older.saturating_add(c),
                None => ok = false,
            }
        });
    }
    if !ok || older >= threshold {
        return; // `held` clears `INSTALLING`
    }
    let b = (threshold - older).min(BOUND_MAX);
    let mut h = en.hot().load(Ordering::Acquire);
    loop {
        if h & STALE != 0 || h & INSTALLING == 0 {
            // A late add came (its `STALE`), or the word was moved on
            // without this install (a move does not carry `INSTALLING`).
            return;
        }
        let new = (h & !(INSTALLING | BOUND_BITS)) | (b << SHIFT);
        match en
            .hot()
            .compare_exchange(h, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                std::mem::forget(held);
                return;
            }
            Err(actual) => h = actual,
        }
    }
}

/// A late add's duty (see "Late adds"): `STALE` on the key's entries in
/// the slices after `e` of `e`'s window. Called by an add that landed in a
/// `WATCHED` entry of slice `e`.
#[cold]
#[inline(never)]
pub(super) fn poison_newer<K: Key, C: Clock, S: KeyHasher, Q: KeyRef<K> + ?Sized>(
    w: &KeyedWindows<K, C, S>,
    hash: u64,
    key: &Q,
    e: u64,
    guard: &Guard<'_>,
) {
    let slices = w.slices() as u64;
    // The add has landed: a newer entry left with its bound would let a
    // crossing skip the exact step. A key's `Eq` that panics here aborts
    // (`crate::unwind`).
    let bomb = AbortOnUnwind("a key's Eq panicked while a late add cleared the detector's bounds");
    w.ring.for_each_map(guard, |m| {
        if m.epoch > e && m.epoch - e < slices {
            // No installer and no live bound: nothing to clear, and an
            // installer that starts later reads this add (module docs).
            let h = m.map.get(hash, |k| key.is(k), guard);
            let quiet = |h: u64| h & INSTALLING == 0 && (h & STALE != 0 || h & BOUND_BITS == 0);
            if h.is_some_and(|x| quiet(x.hot().load(Ordering::Acquire))) {
                return;
            }
            m.map.with_locked(
                hash,
                |k| key.is(k),
                |x| x.hot().fetch_or(STALE, Ordering::AcqRel),
            );
        }
    });
    std::mem::forget(bomb);
}
