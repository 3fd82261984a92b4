//! The one skewed key stream of the benches and the report: Zipf(s = 1.0)
//! over 1,000,000 distinct `u64` keys, the per-key workload.
//!
//! Per-key counting in services is skewed: a few keys take most of the
//! traffic. [`ZipfStream::new`] draws [`STREAM_LEN`] keys once, before any
//! measurement (sampling inside the timed region would measure the
//! sampler), from a fixed [`SEED`], so every run and every tool measures the
//! same stream. Ranks are scrambled ([`scramble`]) so the hottest keys are
//! not numerically adjacent (and do not share a hash bucket by accident).
//!
//! The stream is 64 MiB, twice this machine's last-level cache, so threads
//! walking it (each from its own [`ZipfStream::offset`]) do not replay a
//! cache-resident prefix. Sampling is Vose's alias method: two table reads a
//! key, about 0.3 s for the whole stream.

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// Distinct keys in the distribution.
pub const KEYS: usize = 1_000_000;
/// Zipf exponent s: P(rank k) is proportional to 1 / k^s. 1.0 is the
/// classic web and cache skew (YCSB uses 0.99).
pub const EXPONENT: f64 = 1.0;
/// Keys in the stream: a power of two, so walking it is a mask.
pub const STREAM_LEN: usize = 1 << 23;
/// Seed: every run measures the same stream.
pub const SEED: u64 = 0x5EED_C0DE;

/// A precomputed stream of keys.
#[derive(Debug, Clone)]
pub struct ZipfStream {
    /// The keys, a power-of-two count of them; `keys[i]` is a scrambled
    /// rank.
    pub keys: Vec<u64>,
    distinct: usize,
}

impl Default for ZipfStream {
    fn default() -> Self {
        Self::new()
    }
}

impl ZipfStream {
    /// The per-key stream: [`STREAM_LEN`] keys from
    /// Zipf([`KEYS`], [`EXPONENT`]), seeded with [`SEED`].
    pub fn new() -> ZipfStream {
        Self::with(KEYS, EXPONENT, STREAM_LEN, SEED)
    }

    /// `len` keys (rounded up to a power of two) drawn from Zipf over
    /// `keys` ranks with exponent `s`, from `seed`.
    pub fn with(keys: usize, s: f64, len: usize, seed: u64) -> ZipfStream {
        let keys = keys.max(1);
        let table = Alias::zipf(keys, s);
        let mut rng = StdRng::seed_from_u64(seed);
        let len = len.max(1).next_power_of_two();
        let stream = (0..len)
            .map(|_| scramble(table.sample(rng.next_u64())))
            .collect();
        ZipfStream {
            keys: stream,
            distinct: keys,
        }
    }

    /// The key at position `i` of the endless walk (positions wrap).
    #[inline(always)]
    pub fn key(&self, i: usize) -> u64 {
        self.keys[i & (self.keys.len() - 1)]
    }

    /// Where thread `t` of `threads` starts walking the stream: evenly
    /// spaced starts, so threads do not walk in lockstep.
    pub fn offset(&self, t: usize, threads: usize) -> usize {
        (self.keys.len() / threads.max(1)) * t
    }

    /// Every key of the distribution (rank order, hottest first): what an
    /// untimed pass inserts so that a measurement starts from the steady
    /// state.
    pub fn all_keys(&self) -> impl Iterator<Item = u64> {
        (0..self.distinct as u64).map(scramble)
    }
}

/// A bijection on `u64` (multiplication by an odd constant), so distinct
/// ranks stay distinct keys.
#[inline]
pub fn scramble(rank: u64) -> u64 {
    rank.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Vose's alias table: a draw is one uniform bucket and one biased coin.
struct Alias {
    /// `threshold[i] / 2^32`: the chance bucket `i` yields `i` itself.
    threshold: Vec<u32>,
    /// What bucket `i` yields otherwise.
    alias: Vec<u32>,
}

impl Alias {
    fn zipf(n: usize, s: f64) -> Alias {
        let weights: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        // Scaled so that the average bucket holds 1.
        let mut p: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| p[i] < 1.0);
        while let (Some(&l), Some(&g)) = (small.last(), large.last()) {
            small.pop();
            alias[l] = g as u32;
            p[g] -= 1.0 - p[l];
            if p[g] < 1.0 {
                large.pop();
                small.push(g);
            }
        }
        // Leftovers (rounding) keep their own bucket entirely.
        for i in small.into_iter().chain(large) {
            p[i] = 1.0;
        }
        let threshold = p
            .iter()
            .map(|&q| (q * 4_294_967_296.0).min(u32::MAX as f64) as u32)
            .collect();
        Alias { threshold, alias }
    }

    /// The rank (0-based) for 64 random bits.
    #[inline]
    fn sample(&self, bits: u64) -> u64 {
        let n = self.alias.len() as u64;
        let bucket = ((bits >> 32) * n) >> 32;
        let coin = bits as u32;
        if coin < self.threshold[bucket as usize] {
            bucket
        } else {
            u64::from(self.alias[bucket as usize])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn freq(z: &ZipfStream) -> HashMap<u64, f64> {
        let mut f: HashMap<u64, f64> = HashMap::new();
        for &k in &z.keys {
            *f.entry(k).or_default() += 1.0 / z.keys.len() as f64;
        }
        f
    }

    #[test]
    fn the_stream_is_skewed_like_zipf() {
        // Zipf(1000, 1.0): P(rank k) = 1 / (k H(1000)), H(1000) = 7.4855.
        let z = ZipfStream::with(1000, 1.0, 1 << 18, 7);
        assert_eq!(z.keys.len(), 1 << 18);
        let f = freq(&z);
        for rank in [0u64, 1, 2, 9, 99] {
            let want = 1.0 / ((rank + 1) as f64 * 7.4855);
            let got = f.get(&scramble(rank)).copied().unwrap_or(0.0);
            assert!(
                (got - want).abs() < 0.1 * want + 0.0005,
                "rank {rank}: {got} vs {want}"
            );
        }
        assert!(f.len() <= 1000);
        let universe: std::collections::HashSet<u64> = z.all_keys().collect();
        assert_eq!(universe.len(), 1000);
        assert!(f.keys().all(|k| universe.contains(k)));
    }

    #[test]
    fn other_exponents_and_a_flat_distribution() {
        // s = 0: uniform over 4 keys.
        let f = freq(&ZipfStream::with(4, 0.0, 1 << 16, 3));
        for rank in 0..4 {
            assert!((f[&scramble(rank)] - 0.25).abs() < 0.01);
        }
        // s = 2: P(rank 1) = 1 / H(10, 2) = 0.6452.
        let f = freq(&ZipfStream::with(10, 2.0, 1 << 16, 3));
        assert!(
            (f[&scramble(0)] - 0.6452).abs() < 0.01,
            "{}",
            f[&scramble(0)]
        );
    }

    #[test]
    fn the_stream_is_reproducible_and_walks_by_mask() {
        let a = ZipfStream::with(100, 1.0, 64, 1);
        assert_eq!(a.keys, ZipfStream::with(100, 1.0, 64, 1).keys);
        assert_ne!(a.keys, ZipfStream::with(100, 1.0, 64, 2).keys);
        assert_eq!(a.key(64 + 5), a.keys[5]);
        assert_eq!(ZipfStream::with(100, 1.0, 100, 1).keys.len(), 128);
        assert_eq!((a.offset(0, 2), a.offset(1, 2)), (0, 32));
    }

    #[test]
    fn scrambled_ranks_are_distinct() {
        let keys: std::collections::HashSet<u64> = (0..100_000).map(scramble).collect();
        assert_eq!(keys.len(), 100_000);
    }
}
