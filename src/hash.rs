//! The default hasher of the per-key structures ([`KeyedWindows`],
//! [`HotKeyDetector`], [`HotKeySketch`], [`KeyedLimiter`]): [`RandomState`],
//! foldhash's quality hash under seeds drawn from the operating system, a
//! new seed for every structure.
//!
//! # Why this hash
//! On a per-key add the hash was a third of the cost: std's SipHash-1-3
//! took ~94 of the ~300 instructions of a `KeyedWindows` add on the
//! benchmarks' Zipf stream (IMPLEMENTATION.md). Measured on this crate's
//! machines, one hash of a `u64` key (4M keys, the best of seven passes):
//! SipHash-1-3 17 ns, foldhash (fast) 1.5 ns, rapidhash (fast) 1.3 ns,
//! ahash (portable build) 2.0 ns; of an IPv4 address as a string: 22.5,
//! 5.9, 5.9 and 7.1 ns; of a 35-byte URL path: 30.6, 10.4, 9.3 and
//! 11.7 ns. foldhash is as fast as the fastest within the noise, has no
//! dependency, and is hashbrown's (so the standard library's `HashMap`
//! algorithm's) default; the per-key benchmarks in BENCHMARKS.md compare
//! every structure and its peers with both hashes.
//!
//! # Why foldhash's quality hash, not its fast one
//! The fast hash maps an integer key through one folded multiply by a
//! seed, so consecutive integers land on a multiplicative sequence. The
//! map reads its high bits (the shard from bits 32.., the group from the
//! top bits of the low 32, the tag from the top 7), and under about one
//! random seed pair in nine that sequence crowds them: 16,384 consecutive
//! keys over 2,048 groups left most groups empty, its chi-square 1,961
//! deviations off (the test `the_fast_hash_crowds_...` below keeps such a
//! pair). The quality hash is the fast one plus one more folded multiply
//! by a constant, which spreads them like a random function (the largest
//! statistic over a million seed pairs: 7.1 deviations). It costs a
//! `KeyedWindows` add 3 instructions (205.4 -> 208.4, callgrind).
//!
//! # Seeds
//! foldhash's own `RandomState` seeds itself from addresses and the time
//! (its documentation says it does not claim HashDoS resistance): an
//! attacker who knows the seeds can make keys collide at will (a block of
//! a long key that cancels its multiplier makes the rest of the block
//! irrelevant: `tests/keyed_hash_flood.rs` does it). So the seeds here come
//! from std's `RandomState`, which draws its keys from the operating
//! system: the secrets foldhash shares between hashers once per process,
//! and a per-instance seed for every [`RandomState::new`], so that keys
//! found to collide in one structure (by timing it) do not collide in
//! another. A clone keeps its seed (every slice map of one structure must
//! hash a key alike). [`RandomState`]'s `Debug` shows no seed.
//!
//! The guide's "Keys from untrusted clients" says what an attacker who
//! chooses keys can and cannot do to a structure bounded by `max_keys`.
//!
//! [`KeyedWindows`]: crate::KeyedWindows
//! [`HotKeyDetector`]: crate::HotKeyDetector
//! [`HotKeySketch`]: crate::HotKeySketch
//! [`KeyedLimiter`]: crate::KeyedLimiter

use foldhash::quality::FoldHasher;
use foldhash::SharedSeed;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// 64 bits no one outside the process can predict: a value hashed by
/// std's SipHash-1-3 under a fresh `RandomState` (keys drawn from the
/// operating system once per thread, then stepped for every new state).
fn os_seed() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0x5EED_u64)
}

/// foldhash's secrets, shared by every [`RandomState`] of the process.
fn shared() -> &'static SharedSeed {
    static SHARED: OnceLock<SharedSeed> = OnceLock::new();
    SHARED.get_or_init(|| SharedSeed::from_u64(os_seed()))
}

/// The per-key structures' default hasher: foldhash (quality), randomly seeded
/// per instance from the operating system's randomness (see the module
/// docs). A `BuildHasher` like std's `RandomState`, about ten times faster
/// on small keys; not a cryptographic hash.
///
/// ```
/// use std::hash::BuildHasher;
/// use stripecount::hash::RandomState;
///
/// let a = RandomState::new();
/// assert_eq!(a.hash_one("k"), a.clone().hash_one("k")); // a clone hashes alike
/// assert_ne!(a.hash_one("k"), RandomState::new().hash_one("k")); // another seed
/// ```
#[derive(Clone)]
pub struct RandomState {
    seed: u64,
    shared: &'static SharedSeed,
}

impl RandomState {
    /// A hasher with a new random seed.
    pub fn new() -> RandomState {
        RandomState {
            seed: os_seed(),
            shared: shared(),
        }
    }
}

impl Default for RandomState {
    fn default() -> RandomState {
        RandomState::new()
    }
}

impl BuildHasher for RandomState {
    type Hasher = DefaultHasher;

    #[inline(always)]
    fn build_hasher(&self) -> DefaultHasher {
        DefaultHasher(FoldHasher::with_seed(self.seed, self.shared))
    }
}

impl fmt::Debug for RandomState {
    /// No seed: a seed in a log is a seed an attacker may read.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RandomState").finish_non_exhaustive()
    }
}

/// The hasher a [`RandomState`] builds (foldhash's quality hasher).
#[derive(Clone)]
pub struct DefaultHasher(FoldHasher<'static>);

impl Hasher for DefaultHasher {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0.finish()
    }

    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes)
    }

    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i)
    }

    #[inline(always)]
    fn write_u16(&mut self, i: u16) {
        self.0.write_u16(i)
    }

    #[inline(always)]
    fn write_u32(&mut self, i: u32) {
        self.0.write_u32(i)
    }

    #[inline(always)]
    fn write_u64(&mut self, i: u64) {
        self.0.write_u64(i)
    }

    #[inline(always)]
    fn write_u128(&mut self, i: u128) {
        self.0.write_u128(i)
    }

    #[inline(always)]
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i)
    }
}

impl fmt::Debug for DefaultHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DefaultHasher").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn clones_hash_alike_and_new_states_do_not() {
        let a = RandomState::new();
        let b = a.clone();
        let keys: Vec<String> = (0..crate::sized(1000, 50))
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        assert!(keys.iter().all(|k| a.hash_one(k) == b.hash_one(k)));
        let c = RandomState::new();
        assert!(keys.iter().all(|k| a.hash_one(k) != c.hash_one(k)));
    }

    /// The chi-square statistic of `loads` (bins expected equal), as
    /// standard deviations above its mean: about normal for a random hash,
    /// large when keys crowd into some bins.
    fn crowding(loads: &[u64], n: u64) -> f64 {
        let bins = loads.len() as f64;
        let expected = n as f64 / bins;
        let chi: f64 = loads
            .iter()
            .map(|&l| (l as f64 - expected).powi(2) / expected)
            .sum();
        (chi - (bins - 1.0)) / (2.0 * (bins - 1.0)).sqrt()
    }

    /// The crowding of the three indexes the map takes from a hash, over
    /// the consecutive integers `0..n` (the keys least like random): the
    /// shard (bits 32.., 64 shards), the group (the top bits of the low 32,
    /// 2,048 groups) and the tag (the top 7 bits).
    fn map_crowding(hash: impl Fn(u64) -> u64, n: u64) -> [f64; 3] {
        let mut shards = vec![0; 64];
        let mut groups = vec![0; 1 << 11];
        let mut tags = vec![0; 128];
        for k in 0..n {
            let h = hash(k);
            shards[(h >> 32) as usize & 63] += 1;
            groups[((u64::from(h as u32) << 11) >> 32) as usize] += 1;
            tags[(h >> 57) as usize] += 1;
        }
        [
            crowding(&shards, n),
            crowding(&groups, n),
            crowding(&tags, n),
        ]
    }

    /// 10 deviations: a random hash's statistic never comes near (the
    /// default hasher's largest over a million seed pairs was 7.1).
    const CROWDED: f64 = 10.0;

    #[test]
    fn consecutive_keys_spread_over_every_bit_and_index_the_map_reads() {
        let n = crate::sized(1u64 << 14, 1 << 9);
        for _ in 0..crate::sized(8, 1) {
            let s = RandomState::new();
            let mut ones = [0u64; 64];
            let mut seen = HashSet::new();
            for k in 0..n {
                let h = s.hash_one(k);
                seen.insert(h);
                for (b, o) in ones.iter_mut().enumerate() {
                    *o += (h >> b) & 1;
                }
            }
            assert_eq!(seen.len() as u64, n, "distinct hashes");
            let crowding = map_crowding(|k| s.hash_one(k), n);
            if cfg!(miri) {
                // Miri runs the hashing (for undefined behaviour) on 512
                // keys, too few for the bounds below; native runs check
                // them on 16,384.
                return;
            }
            for (b, &o) in ones.iter().enumerate() {
                // 10 standard deviations (sqrt(n) / 2 each).
                let dev = (o as f64 - n as f64 / 2.0).abs();
                assert!(dev < 5.0 * (n as f64).sqrt(), "bit {b}: {o} of {n}");
            }
            assert!(crowding.iter().all(|&c| c < CROWDED), "{crowding:?}");
        }
    }

    /// The counter-example: foldhash's fast hash (without the quality
    /// hash's last folded multiply) maps consecutive integers through one
    /// multiply by a seed, and under seeds like this pair (about one random
    /// pair in nine crowds some index past the bound) most shards and
    /// groups get no key. The default hasher, under the same seeds, spreads
    /// them.
    #[test]
    fn the_fast_hash_crowds_consecutive_keys_under_some_seeds_and_ours_does_not() {
        static SHARED: SharedSeed = SharedSeed::from_u64(0x1e2d_3068_8421_2eca);
        const SEED: u64 = 0xafab_0680_daa5_0767;
        let fast = foldhash::fast::SeedableRandomState::with_seed(SEED, &SHARED);
        let ours = RandomState {
            seed: SEED,
            shared: &SHARED,
        };
        let n = crate::sized(1u64 << 14, 1 << 9);
        let crowded = map_crowding(|k| fast.hash_one(k), n);
        let spread = map_crowding(|k| ours.hash_one(k), n);
        if cfg!(miri) {
            return;
        }
        assert!(crowded[0] > 1000.0 && crowded[1] > 1000.0, "{crowded:?}");
        assert!(spread.iter().all(|&c| c < CROWDED), "{spread:?}");
    }

    #[test]
    fn debug_shows_no_seed() {
        let s = RandomState::new();
        assert_eq!(format!("{s:?}"), "RandomState { .. }");
        assert_eq!(format!("{:?}", s.build_hasher()), "DefaultHasher { .. }");
    }
}
