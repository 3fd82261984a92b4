//! A precomputed Zipf-distributed key stream for the keyed rows.
//!
//! Per-key counting in services is skewed: a few keys take most of the
//! traffic. The keyed rows walk a stream of [`STREAM_LEN`] keys drawn from a
//! Zipf distribution over [`KEYS`] keys with exponent [`EXPONENT`], built once
//! before any measurement (sampling inside the timed region would measure the
//! sampler). Each thread starts at its own offset in the stream.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Distinct keys in the distribution (the keyed issue's 1M-key stream).
pub const KEYS: usize = 1 << 20;
/// Zipf exponent s: P(rank k) is proportional to 1 / k^s. 1.0 is the
/// classic web/cache skew (YCSB uses 0.99).
pub const EXPONENT: f64 = 1.0;
/// Keys in the stream: a power of two so walking it is a mask, and long
/// enough (8 MiB) that the threads do not replay a cache-resident prefix.
pub const STREAM_LEN: usize = 1 << 20;
/// Seed: every run measures the same stream.
pub const SEED: u64 = 0x5EED_C0DE;

/// The key stream; `keys[i]` is a scrambled rank, so the hottest keys are not
/// numerically adjacent.
#[derive(Debug)]
pub struct ZipfStream {
    /// The keys, `STREAM_LEN` of them.
    pub keys: Vec<u64>,
}

impl ZipfStream {
    /// Draws the stream (about 50 ms).
    pub fn new() -> ZipfStream {
        Self::with(KEYS, EXPONENT, STREAM_LEN, SEED)
    }

    /// Draws `len` keys from Zipf(`keys`, `s`) with the given seed.
    pub fn with(keys: usize, s: f64, len: usize, seed: u64) -> ZipfStream {
        let mut cdf = Vec::with_capacity(keys);
        let mut acc = 0.0f64;
        for k in 1..=keys {
            acc += 1.0 / (k as f64).powf(s);
            cdf.push(acc);
        }
        let total = acc;
        let mut rng = StdRng::seed_from_u64(seed);
        let keys = (0..len)
            .map(|_| {
                let u = rng.random::<f64>() * total;
                let rank = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1) as u64;
                scramble(rank)
            })
            .collect();
        ZipfStream { keys }
    }

    /// Where thread `t` of `threads` starts walking the stream.
    pub fn offset(&self, t: usize, threads: usize) -> usize {
        (self.keys.len() / threads.max(1)) * t
    }
}

/// A bijection on u64 (multiplication by an odd constant), so distinct ranks
/// stay distinct keys.
pub fn scramble(rank: u64) -> u64 {
    rank.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_stream_is_skewed_like_zipf() {
        // Zipf(1000, 1.0): P(rank 1) = 1 / H(1000) = 13.4%, P(rank 2) = 6.7%.
        let z = ZipfStream::with(1000, 1.0, 100_000, 7);
        assert_eq!(z.keys.len(), 100_000);
        let mut freq: HashMap<u64, u64> = HashMap::new();
        for &k in &z.keys {
            *freq.entry(k).or_default() += 1;
        }
        let top = freq[&scramble(0)] as f64 / 100_000.0;
        let second = freq[&scramble(1)] as f64 / 100_000.0;
        assert!((top - 0.1336).abs() < 0.01, "rank 1 frequency {top}");
        assert!((second - 0.0668).abs() < 0.01, "rank 2 frequency {second}");
        assert!(freq.len() <= 1000);
        assert!(freq.keys().all(|k| (0..1000).any(|r| scramble(r) == *k)));
    }

    #[test]
    fn the_stream_is_reproducible() {
        assert_eq!(
            ZipfStream::with(100, 1.0, 64, 1).keys,
            ZipfStream::with(100, 1.0, 64, 1).keys
        );
    }
}
