//! The rest of a heavy key's detector add (`hot.rs` settles the others
//! from the entry's flags): the home check of an entry the plain windows
//! created, a new home and its marking, and the exact step.
//!
//! # Why the check runs under the slice's shard lock
//! An add that makes a slice heavy creates the home, then marks `HAS_HOME`
//! on the key's entries in the slices whose window holds that slice, each
//! under its map's shard lock for the key. An entry created meanwhile must
//! not miss both: the add that inserts it checks for the home under the
//! same shard lock, in the same lock hold as the insert (`add.rs`, the
//! `fresh` callback), and the entry is born `CHECKED` (plus `HAS_HOME`).
//! Whichever lock hold comes second sees the other's work: the home
//! (created before the marker took the lock), or the entry to mark. A
//! slice whose map the marker does not find yet is covered by the ring:
//! the marker reads by an RMW every slot that could still receive a map of
//! the slices it marks (`Ring::for_each_map_synced`), so a map installed
//! later is installed by a CAS that reads from it, and
//! whoever finds that map sees the home. The check is a lock-free lookup
//! of the home map inside a lock the insert holds anyway, so a key's
//! first add in a slice takes no lock of its own. An entry created by an
//! add of the plain windows (through [`HotKeyDetector::windows`]) is born
//! unchecked; its first detector add checks under the home map's shard
//! lock, which the home's creation holds before the marking starts: the
//! same argument with that lock.
//!
//! # The exact step (heavy keys)
//! Unless the key is hot at this epoch already: an RMW on the home's word,
//! the exact window sum `after` (a lookup in each live slice), `before =
//! after - n`, and the rule's transition as one CAS (`home::decide`): of
//! racing adds across one crossing exactly one CAS reports. An add whose
//! epoch has left the newest slice's window decides nothing (as the ring
//! drops such adds). A step that leaves the key cold installs the bound
//! (`bound.rs`).

use super::bound;
use super::entry::Entry;
use super::home::{Dead, Home};
use super::hot::{HotKeyDetector, CHECKED, HAS_HOME, HOT_HERE, NOTED};
use crate::clock::Clock;
use crate::key::{Key, KeyHasher, KeyRef};
use crate::reclaim::Guard;
use crate::sync::Ordering;
use crate::unwind::AbortOnUnwind;

impl<K: Key, C: Clock, S: KeyHasher> HotKeyDetector<K, C, S> {
    /// The rest of an add that the flags did not settle.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn heavy_step<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        en: &Entry,
        after: Option<u64>,
        guard: &Guard<'_>,
    ) -> Option<u64> {
        let mut flags = en.hot().load(Ordering::Acquire);
        if flags & CHECKED == 0 {
            // An entry the plain windows created: under the home map's
            // shard lock (see "Why the check runs under the slice's shard
            // lock").
            let has = self
                .homes
                .with_locked(hash, |k| key.is(k), |_| ())
                .is_some();
            let set = CHECKED | if has { HAS_HOME } else { 0 };
            flags = en.hot().fetch_or(set, Ordering::AcqRel) | set;
        }
        // A count not known here (the entry moved after a striped add):
        // treated as heavy.
        let heavy_here = !matches!(after, Some(c) if c < self.heavy);
        if heavy_here && flags & NOTED == 0 {
            if !self.make_home(hash, key, e, guard) {
                return None; // no room for its home (`bound_homes`)
            }
            en.hot().fetch_or(NOTED, Ordering::AcqRel);
        } else if flags & HAS_HOME == 0 {
            return None;
        }
        self.exact_step(hash, key, e, n, en, heavy_here, guard)
    }

    /// Creates the key's home (or finds it) with `last_heavy >= e`, then
    /// marks `HAS_HOME` on its entries whose window holds slice `e`, each
    /// under its map's shard lock (the lock a new entry's check runs in).
    /// `false`: a bounded home map is full (`bound_homes`); nothing was
    /// made or marked, and the add is counted in `homeless`.
    fn make_home<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        e: u64,
        guard: &Guard<'_>,
    ) -> bool {
        let made = self
            .homes
            .upsert(
                hash,
                |k| key.is(k),
                crate::map::Miss::NONE,
                || (key.to_key(), ()),
                &self.home_cfg,
                e,
                guard,
                |_, ()| {},
                |h, _| h.note_heavy(e),
            )
            // A full bounded map refuses before it looks: a home the key
            // has is noted all the same (under the lock, as `upsert` does).
            .or_else(|| {
                self.homes
                    .with_locked(hash, |k| key.is(k), |h| h.note_heavy(e))
            });
        if made.is_none() {
            self.homeless.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let s = self.home_cfg.slices;
        // Once the home exists, an entry left unmarked could skip the
        // exact step of a crossing: a key's `Eq` that panics here aborts
        // (`crate::unwind`).
        let bomb =
            AbortOnUnwind("a key's Eq panicked while the hot-key detector marked its entries");
        let hi = e.saturating_add(s - 1);
        self.windows.ring.for_each_map_synced(e, hi, guard, |m| {
            m.map.with_locked(
                hash,
                |k| key.is(k),
                |x| x.hot().fetch_or(CHECKED | HAS_HOME, Ordering::AcqRel),
            );
        });
        std::mem::forget(bomb);
        true
    }

    /// The exact step of a heavy key (see the module docs).
    #[allow(clippy::too_many_arguments)]
    fn exact_step<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        en: &Entry,
        heavy_here: bool,
        guard: &Guard<'_>,
    ) -> Option<u64> {
        let w = &self.windows;
        self.homes.maybe_sweep(e, e, &self.home_cfg, guard);
        loop {
            if w.ring.too_old(e) {
                return None;
            }
            let Some(home) = self.homes.get(hash, |k| key.is(k), guard) else {
                // Retired: no heavy slice is left in this epoch's window
                // (home.rs, "Lifetime"), unless this add's own is.
                if !heavy_here || !self.make_home(hash, key, e, guard) {
                    return None;
                }
                continue;
            };
            match self.decide(home, hash, key, e, n, guard) {
                Ok((report, since)) => {
                    if since {
                        en.hot().fetch_or(HOT_HERE, Ordering::AcqRel);
                    } else {
                        // Cold after this step: bound the adds to come.
                        bound::install(w, hash, key, e, en, self.threshold, guard);
                    }
                    return report;
                }
                Err(Dead) => continue,
            }
        }
    }

    fn decide<Q: KeyRef<K> + ?Sized>(
        &self,
        home: &Home,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &Guard<'_>,
    ) -> Result<(Option<u64>, bool), Dead> {
        if home.hot_since(e)? {
            return Ok((None, true));
        }
        home.sync()?;
        let after = self.windows.read_in(hash, key, e, guard);
        let before = after.saturating_sub(n);
        let (report, since) = home.transition(e, before, after, self.threshold)?;
        Ok((report.then_some(after), since))
    }
}
