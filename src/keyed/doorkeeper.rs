//! The doorkeeper of [`HotKeySketch`](super::HotKeySketch): a fixed array
//! of words that decides, per add, whether a key's adds in the current
//! slice have reached the *admission level* `a` and so go to exact
//! counting, or stay here (and are not counted anywhere else).
//!
//! # Shards
//! The words are cut into `D` shards (a power of two), and a thread uses
//! the shard of its thread token (`crate::thread_id`) modulo `D`: a key's
//! adds from different threads are counted in different shards, so that
//! threads do not write each other's cache lines (with one shared array,
//! two threads writing random words passed most lines between their cores:
//! 2 threads ran at 0.8-0.9x one; sharded, 1.5-1.7x, with each thread's
//! shard small enough to stay in its core's L2). Everything below holds
//! per shard; a key's kept-back adds in a slice total at most `D (a - 1)`,
//! and `a - 1` when one thread adds it.
//!
//! # The word
//! `tag:16 | c5:8 | c4:8 | c3:8 | c2:8 | c1:8 | c0:8`: the low 16 bits of
//! the epoch (slice number) the counters belong to, and six counters that
//! saturate at `a` (`a <= 255`). A key picks one word and three of its six
//! counters from its hash; its estimate in the word's slice is the least
//! of its three counters. The counters are shared with every other key
//! that picks them, so an estimate never falls below the key's own adds
//! in that slice until it saturates at `a`.
//!
//! # The gate (one CAS, or one load once the key is admitted)
//! An add at epoch `e` reads the key's word:
//! - tag `e`: its counters as they are;
//! - tag `e - 1`: the word is moved to `e`, each counter that reached `a`
//!   in slice `e - 1` starting at `a` (*carry-over*) and the rest at 0, so
//!   a key admitted in one slice is admitted from its first add in the
//!   next one;
//! - an older tag: the word is moved to `e` with every counter at 0;
//! - a newer tag (the add is late: its slice is older than the word's):
//!   the add is admitted without touching the word.
//!
//! Then the key's three counters are raised by *conservative update* in
//! the same CAS as any move: each to at least the least of them plus `n`
//! (capped at `a`), a counter already above that staying as it is; the add
//! is admitted when the least of them is at `a` afterwards. Conservative
//! update keeps the least counter at or above the key's own adds (each
//! update is one atomic step over all three, which a count-min sketch of
//! separate cells cannot have) and raises shared counters far less than
//! adding to all three: on Zipf 0.8 over 100M keys, with plain increments,
//! the long tail raised one thread's 256 KiB shard past a level of 13 a
//! slice and admitted tens of thousands of keys that filled the exact
//! part; with conservative update, see BENCHMARKS.md. A key already at `a` in all three at the word's own
//! epoch is admitted by the load alone (the word of a hot key is only
//! read, so threads adding to it do not pass its cache line around).
//!
//! # The guarantee (what `HotKeySketch` states as its error bound)
//! The adds of one key at one epoch counted in one shard that are *not*
//! admitted total at most `a - 1`, under any concurrency: every one of them wrote the word (an
//! add that writes nothing is admitted) while its tag was that epoch (a
//! late add is admitted), and the last of them, in the word's
//! modification order, left the least of its counters below `a`; every
//! update of the word keeps the least of a key's counters at or above the
//! sum of its adds so far at that epoch (an add raises the least by its
//! `n`, unless capped at `a`, and no counter ever goes down within an
//! epoch), so that sum is at most `a - 1`. Everything else (sharing counters, a tag that wraps after
//! 65,536 slices, carry-over) can only admit a key sooner, never later.
//!
//! # Orderings
//! `Relaxed` throughout: the word publishes nothing else, and the
//! guarantee above rests on the word's modification order alone. Model
//! checked with loom (`loom-tests/tests/doorkeeper.rs`), with a naive gate
//! (a load, then a store) as the counter-example.

use crate::sync::{AtomicU64, Ordering};

/// Counters a word holds.
const LANES: u32 = 6;
/// The bits of a word's counters.
const COUNTS: u64 = (1 << (8 * LANES)) - 1;
/// Where a word's tag starts.
const TAG_SHIFT: u32 = 48;
/// The tag's bits (the low bits of an epoch).
const TAG: u64 = 0xFFFF;

/// The three counters each key picks, as bit offsets: the 16 first of the
/// 20 three-of-six choices (a key's hash picks one with 4 bits).
const PICKS: [[u32; 3]; 16] = {
    let mut out = [[0u32; 3]; 16];
    let mut i = 0;
    let mut a = 0;
    while a < LANES {
        let mut b = a + 1;
        while b < LANES {
            let mut c = b + 1;
            while c < LANES {
                if i < 16 {
                    out[i] = [8 * a, 8 * b, 8 * c];
                }
                i += 1;
                c += 1;
            }
            b += 1;
        }
        a += 1;
    }
    out
};

/// The doorkeeper: `words.len()` is a power of two, cut into `shards`
/// (a power of two) of `shard_mask + 1` words.
pub(crate) struct Doorkeeper {
    words: Box<[AtomicU64]>,
    shard_mask: u64,
    shard_bits: u32,
    shards_mask: u64,
    level: u64,
}

impl Doorkeeper {
    /// A doorkeeper in at most `bytes` (at least one word a shard), in at
    /// most `shards` shards (rounded down to a power of two), admitting
    /// keys at `level` (`1..=255`, the caller checks).
    pub(crate) fn new(bytes: usize, shards: usize, level: u64) -> Doorkeeper {
        debug_assert!((1..=255).contains(&level));
        let floor_pow2 = |x: usize| 1usize << (usize::BITS - 1 - x.max(1).leading_zeros());
        let words = floor_pow2(bytes / 8);
        let shards = floor_pow2(shards).min(words);
        let per_shard = words / shards;
        Doorkeeper {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            shard_mask: per_shard as u64 - 1,
            shard_bits: per_shard.trailing_zeros(),
            shards_mask: shards as u64 - 1,
            level,
        }
    }

    /// The shards `D`.
    pub(crate) fn shards(&self) -> usize {
        self.shards_mask as usize + 1
    }

    /// The admission level `a`.
    pub(crate) fn level(&self) -> u64 {
        self.level
    }

    /// Bytes of the words.
    pub(crate) fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The key's word in the calling thread's shard, and its counters,
    /// from its hash.
    #[inline(always)]
    fn place(&self, hash: u64) -> (&AtomicU64, &'static [u32; 3]) {
        // A multiply spreads the map's hash (whose low bits pick its
        // shard) over the bits used here.
        let mix = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let shard = if self.shards_mask == 0 {
            0
        } else {
            (u64::from(crate::thread_id::current()) & self.shards_mask) << self.shard_bits
        };
        let word = &self.words[(shard | ((mix >> 32) & self.shard_mask)) as usize];
        (word, &PICKS[((mix >> 28) & 15) as usize])
    }

    /// Starts fetching the key's word in the calling thread's shard (a
    /// batch's first step, `batch.rs`). A hint: it changes nothing.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let (word, _) = self.place(hash);
        crate::sync::prefetch(word as *const AtomicU64);
    }

    /// Counts an add of `n > 0` at `epoch`; `true` if it is admitted (see
    /// the module docs).
    #[inline]
    pub(crate) fn admit(&self, hash: u64, epoch: u64, n: u64) -> bool {
        let (word, picks) = self.place(hash);
        let tag = epoch & TAG;
        let a = self.level;
        let mut w = word.load(Ordering::Relaxed);
        loop {
            let wtag = w >> TAG_SHIFT;
            let counts = if wtag == tag || w == 0 {
                // (A word never written is empty at every epoch: every
                // write leaves a counter above 0.)
                w & COUNTS
            } else {
                let ahead = tag.wrapping_sub(wtag) & TAG;
                if ahead >= 0x8000 {
                    // The word holds a later slice: this add is late.
                    return true;
                }
                if ahead == 1 {
                    carry(w, a)
                } else {
                    0
                }
            };
            let (fresh, least) = raise(counts, picks, n, a);
            if w >> TAG_SHIFT == tag && fresh == counts {
                // At `a` in all three already: admitted by the load.
                return true;
            }
            match word.compare_exchange_weak(
                w,
                tag << TAG_SHIFT | fresh,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return least >= a,
                Err(now) => w = now,
            }
        }
    }

    /// The key's estimate at `epoch` (0 unless its word holds that epoch);
    /// for tests.
    #[cfg(test)]
    pub(crate) fn estimate(&self, hash: u64, epoch: u64) -> u64 {
        let (word, picks) = self.place(hash);
        let w = word.load(Ordering::Relaxed);
        if w >> TAG_SHIFT != epoch & TAG {
            return 0;
        }
        picks.iter().map(|&s| (w >> s) & 0xFF).min().unwrap_or(0)
    }
}

/// A word's counters moved to the next slice: those at `a` stay at `a`,
/// the rest start at 0.
#[inline]
fn carry(w: u64, a: u64) -> u64 {
    let mut out = 0;
    for lane in 0..LANES {
        let s = 8 * lane;
        if (w >> s) & 0xFF >= a {
            out |= a << s;
        }
    }
    out
}

/// `counts` with the key's three counters raised by conservative update
/// (each to at least the least of them plus `n`, capped at `a`; a counter
/// already above stays), and the least of them afterwards.
#[inline(always)]
fn raise(counts: u64, picks: &[u32; 3], n: u64, a: u64) -> (u64, u64) {
    let least = picks
        .iter()
        .map(|&s| (counts >> s) & 0xFF)
        .min()
        .unwrap_or(0);
    let target = if n >= a { a } else { (least + n).min(a) };
    let mut fresh = counts;
    for &s in picks {
        if (counts >> s) & 0xFF < target {
            fresh = fresh & !(0xFF << s) | target << s;
        }
    }
    (fresh, target)
}

impl std::fmt::Debug for Doorkeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorkeeper")
            .field("bytes", &self.bytes())
            .field("shards", &self.shards())
            .field("level", &self.level)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn picks_are_distinct_three_of_six() {
        let mut seen = std::collections::HashSet::new();
        for p in PICKS {
            assert!(p[0] < p[1] && p[1] < p[2] && p[2] < 8 * LANES);
            assert!(seen.insert(p));
        }
    }

    #[test]
    fn a_key_is_admitted_once_its_adds_reach_the_level() {
        let d = Doorkeeper::new(1 << 12, 1, 5);
        assert_eq!(d.bytes(), 1 << 12);
        // Alone in its word: exactly the first 4 are kept back.
        let h = 42;
        let admitted: Vec<bool> = (0..7).map(|_| d.admit(h, 9, 1)).collect();
        assert_eq!(admitted, [false, false, false, false, true, true, true]);
        assert_eq!(d.estimate(h, 9), 5);
        // An add of the level or more is admitted at once.
        assert!(d.admit(7, 9, 5));
    }

    #[test]
    fn carry_over_admits_from_the_first_add_of_the_next_slice_only() {
        let d = Doorkeeper::new(64, 1, 3);
        assert!(!d.admit(1, 10, 2));
        assert!(d.admit(1, 10, 1));
        // The next slice: carried over.
        assert!(d.admit(1, 11, 1));
        assert_eq!(d.estimate(1, 11), 3);
        // A slice skipped: the counters start at 0 again.
        assert!(!d.admit(1, 13, 1));
        assert_eq!(d.estimate(1, 13), 1);
        // A late add (epoch older than the word's) is admitted untouched.
        assert!(d.admit(1, 12, 1));
        assert_eq!(d.estimate(1, 13), 1);
    }

    #[test]
    fn threads_count_in_their_own_shards_and_keep_back_at_most_one_level_each() {
        let a = 5;
        let d = std::sync::Arc::new(Doorkeeper::new(1 << 12, 4, a));
        assert_eq!(d.shards(), 4);
        let kept: u64 = (0..6)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || (0..20).filter(|_| !d.admit(99, 1, 1)).count() as u64)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert!(kept <= 4 * (a - 1), "{kept}");
        // One shard a word at most.
        assert_eq!(Doorkeeper::new(16, 8, a).shards(), 2);
    }

    #[test]
    fn tags_wrap_without_losing_the_gate() {
        let d = Doorkeeper::new(64, 1, 2);
        let e = (1 << 16) - 1;
        assert!(!d.admit(3, e, 1));
        assert!(d.admit(3, e, 1));
        // e + 1 has tag 0: the next slice, carried over.
        assert!(d.admit(3, e + 1, 1));
    }

    #[test]
    fn kept_back_adds_never_exceed_the_level_less_one_per_key_and_slice() {
        // Many keys sharing few words: sharing only admits sooner.
        let a = 8;
        let d = Doorkeeper::new(64 * 8, 1, a);
        let mut rng = 0x1234_5678_u64;
        let mut kept = std::collections::HashMap::<(u64, u64), u64>::new();
        // Miri interprets this a thousand times slower: fewer adds a slice.
        let per_slice = if cfg!(miri) { 300 } else { 5_000 };
        for e in 0..20u64 {
            for _ in 0..per_slice {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let key = rng % 300;
                let n = 1 + (rng >> 40) % 3;
                let hash = key.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ key;
                if !d.admit(hash, e, n) {
                    *kept.entry((key, e)).or_default() += n;
                }
            }
        }
        assert!(kept.values().all(|&k| k < a), "{:?}", kept.values().max());
    }
}
