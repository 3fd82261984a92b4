//! A per-key limiter's quotas: the default limits, and per-key overrides,
//! both changeable at run time.
//!
//! # Never over-admitting across a change
//! The admission state holds no limit: every request reads its key's limits
//! once (an override if the key has one, else the defaults) and is judged
//! against those values by the same CAS that takes its permits. A change
//! touches no count. So no window of any key ever holds more than the limit
//! its last grant was judged against: lowering a quota below what a key's
//! window holds refuses that key until enough expires (nothing resets, the
//! bug of swapping in a fresh limiter), and a request that starts after a
//! change returned (on a thread synchronized with it) is judged against the
//! new value. With several limits each is read on its own, as
//! [`MultiLimiter::set_limit_of`](crate::MultiLimiter::set_limit_of) does:
//! a request racing a change may see some new and some old values, each of
//! which the window honours.
//!
//! # Overrides
//! Overrides live in a second map of the same engine (`crate::map`),
//! keyed like the states, sharing their hash (the same hasher), so a
//! lookup costs no second hash. It is read only while it holds an override
//! (`count`), so a limiter without overrides pays one load of a word that
//! never changes. Overrides are operator data: they are not evicted when
//! idle and do not count towards `max_keys`.
//!
//! Writes (set, remove) take the key's shard lock, so no move of the
//! overrides' table runs while one writes, and a move copies final values.
//! An entry is published (`live`, release) after its limits are written;
//! readers load `live` (acquire) before the limits. A removed entry is
//! marked not live before its slot turns `TOMB`. `count` is raised after an
//! entry goes live and lowered after it is removed.

use crate::key::{Key, KeyRef};
use crate::limiter::config::MAX_LIMITS;
use crate::map::{Map, Value};
use crate::reclaim::Guard;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::hash::BuildHasher;

/// One key's override: its limits, one per level.
pub(crate) struct Override {
    live: AtomicBool,
    limits: [AtomicU64; MAX_LIMITS],
}

impl Value for Override {
    type Cfg = ();

    fn vacant() -> Self {
        Override {
            live: AtomicBool::new(false),
            limits: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn init(&self, _: &(), _: bool) {}

    fn move_into(&self, to: &Self, _: &(), _: &Guard<'_>) {
        // Under the shard lock, which every writer takes: final values.
        for (a, b) in self.limits.iter().zip(&to.limits) {
            b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        to.live
            .store(self.live.load(Ordering::Relaxed), Ordering::Release);
    }

    fn try_retire(&self, _: u64, _: &(), _: &Guard<'_>) -> bool {
        !self.live.load(Ordering::Relaxed)
    }

    fn is_dead(&self) -> bool {
        false
    }

    fn heap_bytes(&self, _: &()) -> usize {
        0
    }
}

/// The default limits and the overrides (module docs).
pub(crate) struct Quotas<K: 'static, S> {
    defaults: [AtomicU64; MAX_LIMITS],
    levels: usize,
    overrides: Map<K, Override, S>,
    count: AtomicUsize,
}

impl<K, S> Quotas<K, S> {
    /// Default limit `i`.
    pub(crate) fn default_of(&self, i: usize) -> u64 {
        self.defaults[i].load(Ordering::Relaxed)
    }

    /// Sets default limit `i`.
    pub(crate) fn set_default(&self, i: usize, limit: u64) {
        self.defaults[i].store(limit, Ordering::Relaxed);
    }
}

impl<K: Key, S: BuildHasher> Quotas<K, S> {
    /// `limits` as the defaults; overrides hashed by `hasher` (which must
    /// hash as the states' map does).
    pub(crate) fn new(limits: &[u64], hasher: S) -> Self {
        Quotas {
            defaults: std::array::from_fn(|i| AtomicU64::new(limits.get(i).copied().unwrap_or(0))),
            levels: limits.len(),
            overrides: Map::new(hasher),
            count: AtomicUsize::new(0),
        }
    }

    /// The number of limits per key.
    #[inline]
    pub(crate) fn levels(&self) -> usize {
        self.levels
    }

    /// The limits of the key whose hash is `hash`, each read once, in
    /// `buf[..levels]`.
    #[inline]
    pub(crate) fn read<'b, Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        guard: &Guard<'_>,
        buf: &'b mut [u64; MAX_LIMITS],
    ) -> &'b [u64] {
        let k = self.levels;
        if self.count.load(Ordering::Acquire) == 0 || !self.read_override(hash, key, guard, buf) {
            for (b, l) in buf[..k].iter_mut().zip(&self.defaults) {
                *b = l.load(Ordering::Relaxed);
            }
        }
        &buf[..k]
    }

    /// The single limit of the key whose hash is `hash` (a limiter of one
    /// limit: no buffer to fill).
    #[inline]
    pub(crate) fn read_one<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        guard: &Guard<'_>,
    ) -> u64 {
        debug_assert_eq!(self.levels, 1);
        if self.count.load(Ordering::Acquire) == 0 {
            return self.defaults[0].load(Ordering::Relaxed);
        }
        let mut buf = [0u64; MAX_LIMITS];
        self.read(hash, key, guard, &mut buf)[0]
    }

    #[inline(never)]
    fn read_override<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        guard: &Guard<'_>,
        buf: &mut [u64; MAX_LIMITS],
    ) -> bool {
        match self.overrides.get(hash, |k| key.is(k), guard) {
            Some(o) if o.live.load(Ordering::Acquire) => {
                for (b, l) in buf[..self.levels].iter_mut().zip(&o.limits) {
                    *b = l.load(Ordering::Relaxed);
                }
                true
            }
            _ => false,
        }
    }

    /// Sets `key`'s override (`limits.len() == levels`, checked by the
    /// caller).
    pub(crate) fn set<Q: KeyRef<K> + ?Sized>(
        &self,
        hash: u64,
        key: &Q,
        limits: &[u64],
        guard: &Guard<'_>,
    ) {
        debug_assert_eq!(limits.len(), self.levels);
        let is = |k: &K| key.is(k);
        let set = self.overrides.upsert(
            hash,
            is,
            crate::map::Miss::NONE,
            || (key.to_key(), ()),
            &(),
            0,
            guard,
            |_, ()| {},
            |o, _| {
                for (l, &v) in o.limits.iter().zip(limits) {
                    l.store(v, Ordering::Relaxed);
                }
                // Release: the limits before `live` (readers acquire it).
                !o.live.swap(true, Ordering::AcqRel)
            },
        );
        if set == Some(true) {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
        debug_assert!(set.is_some(), "the overrides map has no bound");
    }

    /// Removes `key`'s override; whether it had one.
    pub(crate) fn remove<Q: KeyRef<K> + ?Sized>(&self, hash: u64, key: &Q) -> bool {
        let removed = self.overrides.remove_if(
            hash,
            |k| key.is(k),
            |o| o.live.swap(false, Ordering::AcqRel),
        );
        if removed {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }

    /// Keys with an override.
    pub(crate) fn overrides(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Bytes held by the overrides' map.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.overrides.memory_bytes(&())
    }
}
