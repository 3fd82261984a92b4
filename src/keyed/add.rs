//! The add path of [`KeyedWindows`]: where an add goes (the map of its
//! slice, found through the ring's `head` hint or by its epoch) and how it
//! lands in the key's entry (one CAS, or the entry's own slow path, or, for
//! a key's first add in the slice, in the insert itself: the new entry is
//! published with the add's count, `Entry::start_with`).
//!
//! # Invariants
//! - An add at `now` writes only the map [`Ring::current`] would give for
//!   the epoch of `now` (`locate` trusts the `head` hint only after the
//!   same checks: `ring.rs`, invariant 4).
//! - An add is counted in exactly one entry, or dropped as older than the
//!   ring (`None`), or not tracked because its slice's map is full (`None`,
//!   counted in [`KeyedWindows::untracked_adds`]). An entry that moved
//!   (`Add::Moved`) is looked up again, never written (`entry.rs`).
//! - An add that lands in an entry a detector's bound read (`WATCHED`)
//!   clears the key's newer bounds before it returns (`bound.rs`), whatever
//!   method made it.
//!
//! [`Ring::current`]: super::ring::Ring::current

use super::entry::{Add, Entry, COUNT_MAX};
use super::slice_map::SliceMap;
use super::windows::KeyedWindows;
use crate::clock::Clock;
use crate::key::{Key, KeyHasher, KeyRef};
use crate::map::{Miss, Now, Probe};
use crate::reclaim::Guard;
use crate::sync::Ordering;

/// The count after an add to an entry that moved, which the add does not
/// learn (no count reaches it: counts stop at `COUNT_MAX`).
pub(super) const UNKNOWN: u64 = u64::MAX;

/// The bit of an add's result that says the add went to the entry's
/// stripes, so that its count is not known: the bits below it hold the
/// value of the add's own stripe right after it (at most `COUNT_MAX`;
/// `entry.rs`, "The mark of a striped entry"). Above every count.
pub(super) const STRIPED_ADD: u64 = 1 << 63;

/// An add's result as [`KeyedWindows::add_with`] returns it: the count
/// after it, or [`STRIPED_ADD`] with its stripe's value. `None`: moved.
#[inline(always)]
fn after(a: Add) -> Option<u64> {
    match a {
        Add::Done(after) => Some(after),
        Add::Striped(cell) => Some(STRIPED_ADD | cell.min(COUNT_MAX)),
        Add::Moved => None,
    }
}

impl<K: Key, C: Clock, S: KeyHasher> KeyedWindows<K, C, S> {
    /// Where an add at `now` goes: its epoch, and the map it writes when
    /// that map is installed and live ([`Ring::current`]). The newest
    /// slice's map is found without a division ([`Ring::head`]).
    #[inline(always)]
    pub(super) fn locate<'g>(
        &'g self,
        now: u64,
        guard: &'g Guard<'_>,
    ) -> (u64, Option<&'g SliceMap<K, S>>) {
        if let Some(m) = self.ring.head(now, guard) {
            return (m.epoch, Some(m));
        }
        let e = self.epoch(now);
        (e, self.ring.current(e, guard))
    }

    /// The engine of every add: the key's entry in the map of slice `e`
    /// (`m`, from [`locate`](Self::locate)), inserted if needed, and the
    /// add on it. `Some((entry, after))`: counted, with the entry's count
    /// right after, or [`STRIPED_ADD`] with the add's stripe when the entry
    /// is striped (two words,
    /// returned in registers; an `Option<u64>` count would make it three,
    /// returned through the stack). `None`: older than the ring,
    /// or not tracked. The common case (the slice is current and holds
    /// the key) is inlined: one lookup and one CAS; a key's first add in
    /// the slice goes straight to the insert, without a second lookup, and
    /// lands with it (no CAS).
    ///
    /// `fresh` is called when this add inserts the key, under its shard's
    /// lock and before anything is written: it returns the new entry's
    /// `hot` word, stored with the add's count before the key is published
    /// (the hot-key detector's home check, `exact.rs`; `|| 0` elsewhere).
    /// It may run the caller's code (a key's `Eq`): a panic there leaves
    /// the map as it was (`crate::map`, "The caller's code").
    #[inline(always)]
    pub(super) fn add_in<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        at: (u64, Option<&'g SliceMap<K, S>>),
        n: u64,
        guard: &'g Guard<'_>,
        fresh: impl Fn() -> u64,
    ) -> Option<(&'g Entry, u64)> {
        self.add_with(hash, key, at, n, guard, fresh, Now)
    }

    /// [`add_in`](Self::add_in) with the key's lookup in `m` made by
    /// `probe`: a plain lookup, or a batch's lookup ahead (`batch.rs`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_with<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        (e, m): (u64, Option<&'g SliceMap<K, S>>),
        n: u64,
        guard: &'g Guard<'_>,
        fresh: impl Fn() -> u64,
        probe: impl Probe<'g, K, Entry>,
    ) -> Option<(&'g Entry, u64)> {
        if let Some(m) = m {
            match probe.lookup(&m.map, hash, |k| key.is(k), guard) {
                Ok(en) => {
                    if let Some(after) = en.try_add(n) {
                        return Some((en, after));
                    }
                    // Striped, contended, saturated or watched: the entry's
                    // own slow path, without a second lookup.
                    if let Some(after) = after(en.add(n)) {
                        self.landed(en, (hash, key), e, false, guard);
                        return Some((en, after));
                    }
                }
                Err(miss) => return self.add_first(m, miss, hash, key, e, n, guard, fresh),
            }
        }
        self.add_slow(hash, key, e, n, guard, fresh)
    }

    /// A key's first add in the slice of `m`, whose map did not hold it:
    /// insert, then add (the general path if the entry moved meanwhile).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn add_first<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        m: &'g SliceMap<K, S>,
        miss: Miss<'g, K, Entry>,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &'g Guard<'_>,
        fresh: impl Fn() -> u64,
    ) -> Option<(&'g Entry, u64)> {
        let en = match self.insert(m, miss, hash, key, e, n, guard, &fresh)? {
            Inserted::Landed(en, after) => return Some((en, after)),
            Inserted::Found(en) => en,
        };
        if let Some(after) = after(en.add(n)) {
            self.landed(en, (hash, key), e, true, guard);
            return Some((en, after));
        }
        self.add_slow(hash, key, e, n, guard, fresh)
    }

    #[inline(never)]
    fn add_slow<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &'g Guard<'_>,
        fresh: impl Fn() -> u64,
    ) -> Option<(&'g Entry, u64)> {
        let m = self.ring.for_add(e, guard)?;
        loop {
            let (en, new) = match m.map.lookup(hash, |k| key.is(k), guard) {
                Ok(en) => (en, false),
                Err(miss) => match self.insert(m, miss, hash, key, e, n, guard, &fresh)? {
                    Inserted::Landed(en, after) => return Some((en, after)),
                    Inserted::Found(en) => (en, true),
                },
            };
            if let Some(after) = after(en.add(n)) {
                self.landed(en, (hash, key), e, new, guard);
                return Some((en, after));
            }
        }
    }

    /// After an add through the entry's slow path (`new`: one whose lookup
    /// found no entry, so it inserted it or another thread did meanwhile):
    /// the add may be late for a detector's bound (`bound.rs`) if the bound
    /// read this entry (`WATCHED`, which keeps every add off the one-CAS
    /// path), or, for a key's first add in a slice older than the newest,
    /// if the bound's reads did not find the slice's map.
    #[inline(always)]
    fn landed<Q: KeyRef<K> + ?Sized>(
        &self,
        en: &Entry,
        (hash, key): (u64, &Q),
        e: u64,
        new: bool,
        guard: &Guard<'_>,
    ) {
        if en.is_watched() || (new && e < self.ring.newest()) {
            super::bound::poison_newer(self, hash, key, e, guard);
        }
    }

    /// Adds `c` back to `key`'s entry in `m`: a count a take removed and
    /// could not deliver (`reads.rs`, `take_all`). The key is in `m` (a
    /// slice map never drops a key), in the entry the take emptied or in
    /// the one that entry moved to; an add to a watched entry clears the
    /// newer bounds, as any slow add's does.
    pub(super) fn add_back<Q: KeyRef<K> + ?Sized>(
        &self,
        m: &SliceMap<K, S>,
        hash: u64,
        key: &Q,
        c: u64,
        guard: &Guard<'_>,
    ) {
        while let Some(en) = m.map.get(hash, |k| key.is(k), guard) {
            if after(en.add(c)).is_some() {
                self.landed(en, (hash, key), m.epoch, false, guard);
                return;
            }
        }
        debug_assert!(false, "a slice map never drops a key");
    }

    /// Inserts the key in the map of `m` with its first add, `n`, and the
    /// hot word `fresh` returned already in its entry (`Entry::start_with`), unless
    /// another thread inserted it first (then the caller adds). `miss`:
    /// where the lookup that missed the key ended (`Map::upsert`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn insert<'g, Q: KeyRef<K> + ?Sized>(
        &'g self,
        m: &'g SliceMap<K, S>,
        miss: Miss<'g, K, Entry>,
        hash: u64,
        key: &Q,
        e: u64,
        n: u64,
        guard: &'g Guard<'_>,
        fresh: &impl Fn() -> u64,
    ) -> Option<Inserted<'g>> {
        let r = m.map.upsert(
            hash,
            |k| key.is(k),
            miss,
            || (key.to_key(), fresh()),
            &(),
            e,
            guard,
            |en, hot| en.start_with(n, hot),
            |en, inserted| (en, inserted),
        );
        let Some((en, inserted)) = r else {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if !inserted {
            return Some(Inserted::Found(en));
        }
        self.landed(en, (hash, key), e, true, guard);
        Some(Inserted::Landed(en, n.min(COUNT_MAX)))
    }
}

/// What `KeyedWindows::insert` did.
enum Inserted<'g> {
    /// It inserted the key, and the add landed with it: the entry and its
    /// count after the add.
    Landed(&'g Entry, u64),
    /// Another thread inserted the key first: the caller adds.
    Found(&'g Entry),
}
