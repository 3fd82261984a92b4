//! A flood of keys crafted to collide, on every per-key structure.
//!
//! foldhash, the default hash, multiplies each 8-byte word of a key by
//! another word xored with a secret. Who knows the secret can cancel the
//! multiplier: a 24-byte key whose middle word is `seeds[0]` hashes the
//! same whatever its first word is (foldhash's long-key round is
//! `fold(w0 ^ s0, w1 ^ seeds[0])`, and `fold(x, 0)` is 0 for every `x`).
//! foldhash's `FixedState` uses fixed secrets, the digits of pi in its
//! source, so keys crafted against them collide in full (all 64 bits),
//! under every per-hasher seed of `FixedState`.
//!
//! What each test shows:
//! - under the fixed hasher the crafted keys have one hash, so the
//!   structure puts them in one shard and one probe sequence: every lookup
//!   compares its key with each of them held (counted through the key's
//!   `Eq`), at most `max_keys` (twice, for an insert: the lock-free lookup,
//!   then the insert's own probe); and the structure stays exact and
//!   bounded: every count, every grant, `len`, `untracked_*`, memory;
//! - under the default [`RandomState`] (a seed per instance, drawn from the
//!   operating system) the same keys have distinct hashes spread over the
//!   shards, and a lookup compares about one key.

use foldhash::fast::FixedState;
use std::cell::Cell;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::hash::RandomState;
use stripecount::{
    Denied, HotKeyDetector, HotKeySketch, KeyedLimiter, KeyedWindows, Quota, Timestamp,
};

/// foldhash's fixed `seeds[0]` (`FixedState`'s shared secret: its
/// `ARBITRARY6`, hexadecimal digits of pi).
const FIXED_SEED0: u64 = 0xc0ac_29b7_c97c_50dd;

thread_local! {
    /// `Eq` calls on this thread (each test runs on its own thread).
    static COMPARED: Cell<u64> = const { Cell::new(0) };
}

fn compared() -> u64 {
    COMPARED.with(Cell::get)
}

/// A key of bytes that counts the comparisons made with it, and hashes
/// exactly as its bytes (`Vec<u8>`) do.
#[derive(Clone, Debug)]
struct Crafted(Vec<u8>);

impl PartialEq for Crafted {
    fn eq(&self, other: &Self) -> bool {
        COMPARED.with(|c| c.set(c.get() + 1));
        self.0 == other.0
    }
}

impl Eq for Crafted {}

impl Hash for Crafted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

/// Key `i` of the flood: 24 bytes, its first word free (`i` in decimal),
/// its middle word foldhash's fixed secret, its last word fixed.
fn crafted(i: usize) -> Crafted {
    let mut b = format!("{i:08}").into_bytes();
    assert_eq!(b.len(), 8);
    b.extend_from_slice(&FIXED_SEED0.to_le_bytes());
    b.extend_from_slice(b"flood-00");
    Crafted(b)
}

fn flood(n: usize) -> Vec<Crafted> {
    (0..n).map(crafted).collect()
}

/// The shard a key's hash picks in a map of 128 shards (`src/map/mod.rs`).
fn shard(h: u64) -> u64 {
    (h >> 32) & 127
}

#[test]
fn the_crafted_keys_collide_under_a_known_seed_and_not_under_the_default() {
    let keys = flood(1000);
    for fixed in [FixedState::default(), FixedState::with_seed(0x1234_5678)] {
        let hashes: HashSet<u64> = keys.iter().map(|k| fixed.hash_one(k)).collect();
        assert_eq!(hashes.len(), 1, "one hash for every crafted key");
    }
    // The control: ordinary keys of the same length do not collide.
    let plain: HashSet<u64> = (0..1000)
        .map(|i| FixedState::default().hash_one(Crafted(format!("{i:024}").into_bytes())))
        .collect();
    assert_eq!(plain.len(), 1000);
    for _ in 0..4 {
        let s = RandomState::new();
        let hashes: HashSet<u64> = keys.iter().map(|k| s.hash_one(k)).collect();
        assert_eq!(hashes.len(), keys.len(), "distinct hashes");
        let shards: HashSet<u64> = hashes.iter().map(|&h| shard(h)).collect();
        // 1000 keys over 128 shards leave none empty but by a miracle.
        assert!(shards.len() >= 120, "{} shards", shards.len());
    }
}

/// Windows of 4 slices of 1 s; each key of the flood gets `i % 3 + 1`
/// adds a slice for three slices, one at a time. Returns the most `Eq`
/// calls one add made, and the adds made.
fn windows_flood<S: stripecount::keyed::KeyHasher>(hasher: S, max_keys: usize) -> (u64, u64) {
    let keys = flood(max_keys + max_keys / 2);
    let w = KeyedWindows::builder(Duration::from_secs(4), 4)
        .clock(ManualClock::new())
        .hasher(hasher)
        .max_keys(max_keys)
        .build()
        .unwrap();
    let at = |s: u64| Timestamp::from_nanos(s * 1_000_000_000);
    let (mut worst, mut adds, mut untracked) = (0, 0, 0);
    for s in 0..3u64 {
        for (i, k) in keys.iter().enumerate() {
            for _ in 0..i % 3 + 1 {
                let before = compared();
                let counted = w.add_at(k, at(s), 1);
                worst = worst.max(compared() - before);
                adds += 1;
                // The first `max_keys` keys of each slice are held; the
                // rest are not tracked, and say so.
                assert_eq!(counted, i < max_keys, "key {i} in slice {s}");
                untracked += u64::from(!counted);
            }
        }
        assert_eq!(w.untracked_adds(), untracked);
        assert!(w.len() <= (s as usize + 1) * max_keys);
    }
    for (i, k) in keys.iter().enumerate() {
        let want = if i < max_keys {
            3 * (i as u64 % 3 + 1)
        } else {
            0
        };
        assert_eq!(w.sum_at(k, at(2)), want, "key {i}");
    }
    assert_eq!(w.len(), 3 * max_keys);
    // One slice's map holds `max_keys` entries of 24 bytes and their keys
    // (a `Vec` header; the bytes are the keys' own heap), in tables at
    // least 1/2 full once grown, the first map's other shards' small
    // tables, the spare tables the ring keeps: bounded by `max_keys`.
    let slot = 24 + std::mem::size_of::<Crafted>();
    let bound = 3 * (2 * max_keys * (slot + 1)) + 2 * 128 * 8 * (slot + 1) + (1 << 16);
    assert!(
        w.memory_bytes() <= bound,
        "{} > {bound} bytes",
        w.memory_bytes()
    );
    (worst, adds)
}

#[test]
fn keyed_windows_stay_exact_and_bounded_under_a_flood_of_colliding_keys() {
    let m = 256;
    COMPARED.with(|c| c.set(0));
    let (worst, adds) = windows_flood(FixedState::default(), m);
    let all = compared();
    // Colliding: every insert compared its key with every key held before
    // it (the keys of one slice: n (n - 1) / 2 for n keys, in each slice).
    assert!(all >= 3 * (m * (m - 1) / 2) as u64, "{all} comparisons");
    // At most the keys held, twice (a lookup, then the insert's probe).
    assert!(worst <= 2 * m as u64, "{worst} comparisons in one add");
    COMPARED.with(|c| c.set(0));
    let (worst, adds2) = windows_flood(RandomState::new(), m);
    assert_eq!(adds, adds2);
    // Spread: a lookup compares the key it finds, and now and then one
    // whose 7-bit tag matches by chance.
    assert!(
        compared() <= adds2 + adds2 / 4,
        "{} comparisons",
        compared()
    );
    assert!(worst <= 8, "{worst} comparisons in one add");
}

#[test]
fn a_hot_key_detector_reports_each_crossing_once_under_a_flood() {
    let m = 128;
    let keys = flood(2 * m);
    let d = HotKeyDetector::builder(Duration::from_secs(4), 4, 6)
        .clock(ManualClock::new())
        .hasher(FixedState::default())
        .max_keys(m)
        .build()
        .unwrap();
    let t = Timestamp::ZERO;
    let mut reports = 0;
    for round in 0..8u64 {
        for (i, k) in keys.iter().enumerate() {
            let before = compared();
            let hot = d.add_at(k, t, 1);
            // The tracked keys cross 6 on their sixth add, once.
            assert_eq!(hot, i < m && round == 5, "key {i}, round {round}");
            reports += usize::from(hot);
            // A handful of probes (the windows' lookup and insert, the
            // home check, the exact step's reads), each comparing the key
            // with at most the `m` held in a map.
            assert!(compared() - before <= 6 * m as u64);
        }
    }
    assert_eq!(reports, m);
    assert_eq!(d.windows().untracked_adds(), 8 * m as u64);
    let mut hot = d.hot_keys_at(t);
    hot.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(hot.len(), m);
    assert!(hot.iter().zip(&keys).all(|(a, b)| a.0 == b.0));
}

#[test]
fn a_sketch_never_reports_above_the_truth_and_keeps_its_memory_under_a_flood() {
    let keys = flood(4000);
    let memory = 1 << 20;
    let d = HotKeySketch::builder(Duration::from_secs(4), 4, 400)
        .memory(memory)
        .clock(ManualClock::new())
        .hasher(FixedState::default())
        .build()
        .unwrap();
    // Every crafted key shares one doorkeeper word and its counters: the
    // flood is admitted as one key would be, after `a - 1` adds in all.
    let a = d.admission_level();
    let t = Timestamp::ZERO;
    for k in &keys {
        d.add_at(k, t, 1);
    }
    assert_eq!(d.filtered_adds(), a - 1);
    let held = keys.len() as u64 - (a - 1) - d.untracked_adds();
    assert_eq!(held as usize, d.max_keys(), "the slice is full");
    for k in &keys {
        assert!(d.sum_at(k, t) <= 1, "never above the truth");
    }
    assert!(d.memory_bytes() <= memory);
    // A key the slice holds, sent 400 times more, becomes hot once, flood
    // or not.
    let k = &keys[a as usize - 1];
    let became = (0..400).filter(|_| d.add_at(k, t, 1)).count();
    assert_eq!(became, 1);
    assert_eq!(d.sum_at(k, t), 401);
    assert!(d.memory_bytes() <= memory);
}

#[test]
fn a_keyed_limiter_never_over_admits_and_holds_max_keys_under_a_flood() {
    let m = 128;
    let keys = flood(2 * m);
    let lim = KeyedLimiter::builder(Quota::per_second(3))
        .clock(ManualClock::new())
        .hasher(FixedState::default())
        .max_keys(m)
        .build()
        .unwrap();
    let t = Timestamp::ZERO;
    for round in 0..5u64 {
        for (i, k) in keys.iter().enumerate() {
            let before = compared();
            let d = lim.decide_at(k, t, 1);
            let want = if i >= m {
                Err(Denied::TooManyKeys)
            } else if round < 3 {
                Ok(())
            } else {
                Err(Denied::Exhausted)
            };
            assert_eq!(d.result(), want, "key {i}, round {round}");
            // A new key's request probes three times (a lookup, another
            // on the slow path, the insert's own), each comparing its key
            // with at most the `m` held.
            assert!(compared() - before <= 3 * m as u64);
        }
    }
    assert_eq!(lim.len(), m);
    assert_eq!(lim.untracked_decisions(), 5 * m as u64);
}
