//! Reference models of the per-key engine (`src/keyed/`), for
//! `tests/keyed.rs` (the ring) and `tests/keyed_hot.rs` (the hot rule). They restate the documented semantics in the plainest
//! code, with none of the engine's machinery:
//!
//! - [`RingModel`]: the slice ring of `KeyedWindows`. `S` slots; slot
//!   `e mod S` holds the map of epoch `e` (the key counts of that slice).
//!   An add at `e` is dropped iff `e + S <= N`, `N` the newest epoch any
//!   add installed (any key); otherwise, if the slot holds an older epoch
//!   (or nothing), the slot's map is replaced by an empty map of `e` (the
//!   older slice's counts are gone for every key), then the key is counted
//!   there (a slice holds at most `max_keys` keys: an add of a new key to a
//!   full slice is untracked). Reads sum the slots whose epoch is in the
//!   window of the read. Arithmetic on epochs is done in `u128`, so epochs
//!   near `u64::MAX` follow the same rule.
//! - [`HotModel`]: the hot rule (`src/keyed/hot.rs`) on top of a
//!   `RingModel`, with per-key state that is never forgotten.
// Each test target that includes this module uses one of its models.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// The largest count a key's entry in one slice holds (2^61 - 1).
pub const COUNT_MAX: u64 = (1 << 60) - 1;

/// The slice ring (see the module docs).
#[derive(Debug, Clone)]
pub struct RingModel<K> {
    slices: u64,
    slice_ns: u64,
    max_keys: usize,
    newest: Option<u64>,
    slots: Vec<Option<(u64, HashMap<K, u64>)>>,
    /// Adds not tracked because their slice was full.
    pub untracked: u64,
}

impl<K: Hash + Eq + Clone + Ord> RingModel<K> {
    /// A ring of `slices` slices of `slice_ns` nanoseconds, each holding at
    /// most `max_keys` keys.
    pub fn new(slice_ns: u64, slices: usize, max_keys: usize) -> Self {
        RingModel {
            slices: slices as u64,
            slice_ns,
            max_keys,
            newest: None,
            slots: vec![None; slices],
            untracked: 0,
        }
    }

    /// The epoch of time `t`.
    pub fn epoch(&self, t: u64) -> u64 {
        t / self.slice_ns
    }

    /// The newest epoch installed, if any.
    pub fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// Whether an add at epoch `e` is dropped: `e + S <= N`.
    pub fn too_old(&self, e: u64) -> bool {
        self.newest
            .is_some_and(|n| e as u128 + self.slices as u128 <= n as u128)
    }

    fn in_window(&self, x: u64, e: u64) -> bool {
        x <= e && (e - x) < self.slices
    }

    /// Adds `n` to `k` at time `t`; `true` if counted.
    pub fn add(&mut self, k: &K, t: u64, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let e = self.epoch(t);
        if self.too_old(e) {
            return false;
        }
        let i = (e % self.slices) as usize;
        match &self.slots[i] {
            Some((x, _)) if *x == e => {}
            Some((x, _)) if *x > e => unreachable!("a later epoch {x} in the slot of {e}"),
            _ => self.slots[i] = Some((e, HashMap::new())),
        }
        self.newest = Some(self.newest.map_or(e, |m| m.max(e)));
        let max_keys = self.max_keys;
        let m = &mut self.slots[i].as_mut().unwrap().1;
        if !m.contains_key(k) {
            if m.len() >= max_keys {
                self.untracked += 1;
                return false;
            }
            m.insert(k.clone(), 0);
        }
        let c = m.get_mut(k).unwrap();
        *c = c.saturating_add(n).min(COUNT_MAX);
        true
    }

    /// The key's window sum at time `t` (saturating).
    pub fn sum(&self, k: &K, t: u64) -> u64 {
        let e = self.epoch(t);
        self.slots
            .iter()
            .flatten()
            .filter(|(x, _)| self.in_window(*x, e))
            .fold(0u64, |s, (_, m)| {
                s.saturating_add(m.get(k).copied().unwrap_or(0))
            })
    }

    /// Every key with a non-zero window sum at `t`, and that sum.
    pub fn sums(&self, t: u64) -> BTreeMap<K, u64> {
        let e = self.epoch(t);
        let mut out: BTreeMap<K, u64> = BTreeMap::new();
        for (x, m) in self.slots.iter().flatten() {
            if self.in_window(*x, e) {
                for (k, c) in m {
                    let s = out.entry(k.clone()).or_insert(0);
                    *s = s.saturating_add(*c);
                }
            }
        }
        out.retain(|_, s| *s > 0);
        out
    }

    /// Entries held: (key, slice) pairs across installed maps.
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().map(|(_, m)| m.len()).sum()
    }

    /// Drops every map older than the window at `t` (`epoch + S <=
    /// epoch(t)`); returns the entries they held.
    pub fn evict(&mut self, t: u64) -> usize {
        let e = self.epoch(t) as u128;
        let s = self.slices as u128;
        let mut dropped = 0;
        for slot in self.slots.iter_mut() {
            if slot.as_ref().is_some_and(|(x, _)| *x as u128 + s <= e) {
                dropped += slot.take().unwrap().1.len();
            }
        }
        dropped
    }

    /// Takes every non-zero count: `(key, epoch) -> count`. Entries stay
    /// (at zero).
    pub fn take_all(&mut self) -> BTreeMap<(K, u64), u64> {
        let mut out = BTreeMap::new();
        for (x, m) in self.slots.iter_mut().flatten() {
            for (k, c) in m.iter_mut() {
                if *c > 0 {
                    out.insert((k.clone(), *x), std::mem::take(c));
                }
            }
        }
        out
    }

    /// Takes the key's non-zero counts: `epoch -> count`.
    pub fn take(&mut self, k: &K) -> BTreeMap<u64, u64> {
        let mut out = BTreeMap::new();
        for (x, m) in self.slots.iter_mut().flatten() {
            if let Some(c) = m.get_mut(k) {
                if *c > 0 {
                    out.insert(*x, std::mem::take(c));
                }
            }
        }
        out
    }
}

/// The hot rule on a [`RingModel`] (see the module docs).
#[derive(Debug, Clone)]
pub struct HotModel<K> {
    /// The counts.
    pub ring: RingModel<K>,
    threshold: u64,
    /// Per key: (hot, the epoch of the latest add that saw it hot).
    state: HashMap<K, (bool, u64)>,
}

impl<K: Hash + Eq + Clone + Ord> HotModel<K> {
    /// The rule with `threshold` over a ring of `slices` slices of
    /// `slice_ns` nanoseconds, at most `max_keys` keys a slice.
    pub fn new(slice_ns: u64, slices: usize, threshold: u64, max_keys: usize) -> Self {
        HotModel {
            ring: RingModel::new(slice_ns, slices, max_keys),
            threshold,
            state: HashMap::new(),
        }
    }

    /// An add of `n` to `k` at `t`: `Some(window sum after it)` if it made
    /// the key hot.
    pub fn add(&mut self, k: &K, t: u64, n: u64) -> Option<u64> {
        if n == 0 || !self.ring.add(k, t, n) {
            return None;
        }
        let e = self.ring.epoch(t);
        let after = self.ring.sum(k, t);
        let before = after.saturating_sub(n);
        let th = self.threshold;
        let (hot, he) = self.state.entry(k.clone()).or_insert((false, 0));
        if *hot {
            if *he >= e {
                None
            } else if before >= th {
                *he = e;
                None
            } else if after >= th {
                *he = e;
                Some(after)
            } else {
                (*hot, *he) = (false, e);
                None
            }
        } else if after >= th {
            (*hot, *he) = (true, e);
            Some(after)
        } else {
            None
        }
    }

    /// Whether `k` is hot by the rule and its sum at `t` reaches the
    /// threshold.
    pub fn is_hot(&self, k: &K, t: u64) -> bool {
        self.state.get(k).is_some_and(|s| s.0) && self.ring.sum(k, t) >= self.threshold
    }

    /// Every key [`is_hot`](Self::is_hot) at `t`, sorted.
    pub fn hot_keys(&self, t: u64) -> Vec<K> {
        let mut v: Vec<K> = self
            .state
            .keys()
            .filter(|k| self.is_hot(k, t))
            .cloned()
            .collect();
        v.sort();
        v
    }
}
