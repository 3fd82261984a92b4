//! [`Config`]: what an admission state needs to know that is the same for
//! every state of one limiter (or of every key of a per-key limiter): the
//! time grid, the windows of its limits, and the units permits are counted
//! in. The limits themselves are not here: they are passed with every call,
//! so that each key can have its own and they can change at run time.
//!
//! # Levels
//! A limiter enforces one or more limits, each over its own window; we call
//! the window of one limit a *level*: `slices` slices of length `L_i`. Time
//! is cut into the finest slices, `L = min L_i`; the *epoch* of `t` is
//! `t / L`, and level `i`'s slice of finest epoch `E` is `E / r_i` with
//! `r_i = L_i / L` (every `L_i` must be a whole multiple of `L`). Level
//! `i`'s window at `E` is its slices `(E / r_i - S_i, E / r_i]`. One level
//! with `r = 1` is the *fold* level: its window total lives in the admission
//! word itself (see `state.rs`).
//!
//! # Units
//! A single-limit state counts in units of `2^shift` permits, `shift` chosen
//! from the limit given at construction so that it fits the 47-bit `used`
//! field ([`MAX_EXACT_LIMIT`](super::MAX_EXACT_LIMIT)); a multi-limit state
//! counts exact permits (`shift = 0`) and clamps each limit to
//! `MAX_EXACT_LIMIT` units (see [`Config::budget`]).

use super::quota::Quota;
pub use super::quota::MAX_LIMITS;
use crate::error::ConfigError;
use crate::pack::Tag;
use crate::window::slice_nanos;
use std::time::Duration;
use strength_reduce::StrengthReducedU64;

/// The largest epoch of time: bit 63 of a state's `epoch` word is its
/// seal flag (`state.rs`), and [`Config::epoch_of`] clamps to one below
/// the largest unflagged value, reserved for no time.
pub(crate) const MAX_EPOCH: u64 = (1 << 63) - 2;

/// The bits an inline history's counts share (`inline.rs`): a word less
/// its mark bit and its tag.
pub(crate) const INLINE_COUNT_BITS: u32 = 64 - 1 - Tag::BITS;

/// The largest budget in units: `used` is 47 bits and its all-ones value is
/// reserved (it marks a state awaiting a copy, see `lifecycle.rs`).
pub(crate) const MAX_BUDGET: u64 = crate::pack::Admission::USED.max() - 1;

/// One limit's window, in finest slices.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Level {
    /// Finest slices per slice of this level (`r`, at least 1).
    pub(crate) ratio: u64,
    /// Slices in this level's window (`S`, at least 1).
    pub(crate) slices: u64,
    /// Index of this level's `frozen` word in the history block.
    pub(crate) base: usize,
    /// Index of this level's first ring word in the history block.
    pub(crate) ring: usize,
}

impl Level {
    /// This level's slice of finest slice `e` (`e / r`), without a
    /// division when `r = 1` (every single-level limiter, and the finest
    /// level of any): a 64-bit division costs tens of cycles on every roll.
    #[inline]
    pub(crate) fn index(&self, e: u64) -> u64 {
        if self.ratio == 1 {
            e
        } else {
            e / self.ratio
        }
    }
}

/// The configuration shared by every admission state of one limiter (see
/// the module docs).
#[derive(Debug, Clone)]
pub struct Config {
    slice_nanos: u64,
    shift: u32,
    len: usize,
    fold: usize,
    levels: [Level; MAX_LIMITS],
    block_words: usize,
    /// Bits per count of the inline history (`inline.rs`); 0: none.
    inline_width: u32,
    /// The fold level's slices, as a divisor: its ring slot of a slice
    /// without a division (a single-limit refusal's walk, `decide.rs`).
    fold_slices: StrengthReducedU64,
}

/// Words of a multi-limit history block before the levels': its length and
/// `at` (see `block.rs`). A single-limit block has only its length.
pub(crate) const BLOCK_HEADER: usize = 2;
/// Words of each level of a multi-limit block before its slice ring:
/// `frozen` and `open`. A single-limit block's level has only `frozen`.
pub(crate) const LEVEL_HEADER: usize = 2;

impl Config {
    /// One limit of `limit` permits per `window` of `slices` slices. The
    /// limit sets the units (see the module docs); the limit enforced is
    /// the one passed with each call.
    ///
    /// Errors: zero window, zero slices, more than
    /// [`MAX_SLICES`](crate::window::MAX_SLICES), a window whose nanoseconds are
    /// not a whole multiple of `slices`, or one longer than `u64::MAX` ns.
    #[allow(dead_code)] // the loom models and unit tests build configs directly
    pub fn single(limit: u64, window: Duration, slices: usize) -> Result<Config, ConfigError> {
        let nanos = slice_nanos(window, slices)?;
        Ok(Config::with_units(limit, nanos, slices))
    }

    /// Several limits enforced together; `windows[i]` is limit `i`'s
    /// `(window, slices)`.
    ///
    /// Errors: as [`single`](Self::single) for each window; no window
    /// ([`ConfigError::NoLevels`]); more than [`MAX_LIMITS`]
    /// ([`ConfigError::Invalid`]); a slice length that is not a whole
    /// multiple of the shortest one ([`ConfigError::LevelSliceMismatch`]).
    #[allow(dead_code)] // the loom models and unit tests build configs directly
    pub fn multi(windows: &[(Duration, usize)]) -> Result<Config, ConfigError> {
        if windows.is_empty() {
            return Err(ConfigError::NoLevels);
        }
        if windows.len() > MAX_LIMITS {
            return Err(ConfigError::Invalid("a multi-limit takes at most 8 limits"));
        }
        let mut lens = [(0u64, 0u64); MAX_LIMITS];
        for (i, &(window, slices)) in windows.iter().enumerate() {
            lens[i] = (slice_nanos(window, slices)?, slices as u64);
        }
        Config::from_levels(&lens[..windows.len()])
    }

    /// The configuration of a limiter of `quotas` (one: its units follow
    /// the limit; several: levels of one state). A strict quota's level
    /// has one slice more (see `quota.rs`).
    ///
    /// Errors: as [`Quota::validate`] for each quota, and as
    /// [`multi`](Self::multi) for several.
    pub(crate) fn for_quotas(quotas: &[Quota]) -> Result<Config, ConfigError> {
        match quotas {
            [] => Err(ConfigError::NoLevels),
            [q] => {
                let (nanos, slices) = q.judged()?;
                Ok(Config::with_units(q.limit(), nanos, slices))
            }
            _ => {
                if quotas.len() > MAX_LIMITS {
                    return Err(ConfigError::Invalid("a multi-limit takes at most 8 limits"));
                }
                let mut lens = [(0u64, 0u64); MAX_LIMITS];
                for (l, q) in lens.iter_mut().zip(quotas) {
                    let (nanos, slices) = q.judged()?;
                    *l = (nanos, slices as u64);
                }
                Config::from_levels(&lens[..quotas.len()])
            }
        }
    }

    fn with_units(limit: u64, nanos: u64, slices: usize) -> Config {
        let mut shift = (64 - limit.leading_zeros()).saturating_sub(Self::used_bits());
        if limit >> shift > MAX_BUDGET {
            shift += 1; // only a limit of 2^47 - 1 times a power of two
        }
        Config::build(nanos, shift, &[(nanos, slices as u64)])
    }

    fn from_levels(lens: &[(u64, u64)]) -> Result<Config, ConfigError> {
        let finest = lens.iter().map(|l| l.0).min().unwrap_or(1);
        if let Some(level) = lens.iter().position(|l| l.0 % finest != 0) {
            return Err(ConfigError::LevelSliceMismatch { level });
        }
        Ok(Config::build(finest, 0, lens))
    }

    fn used_bits() -> u32 {
        64 - MAX_BUDGET.leading_zeros()
    }

    /// `lens[i]` = (slice nanoseconds, slices) of level `i`.
    fn build(finest: u64, shift: u32, lens: &[(u64, u64)]) -> Config {
        let mut levels = [Level::default(); MAX_LIMITS];
        // One limit needs neither `at` nor `open` (see `block.rs`): its
        // block is the length, `frozen` and the ring (12 words for 10
        // slices, not 14).
        let (header, level_header) = if lens.len() == 1 {
            (1, 1)
        } else {
            (BLOCK_HEADER, LEVEL_HEADER)
        };
        let mut next = header;
        for (i, &(nanos, slices)) in lens.iter().enumerate() {
            levels[i] = Level {
                ratio: nanos / finest,
                slices,
                base: next,
                ring: next + level_header,
            };
            next += level_header + slices as usize;
        }
        let fold = lens.iter().position(|l| l.0 == finest).unwrap_or(0);
        // One limit of `S >= 2` slices keeps `S - 1` counts inline while
        // they fit (`inline.rs`); the word is a pointer, so 64-bit only.
        let inline_width = match lens {
            &[(_, slices)] if slices >= 2 && usize::BITS >= 64 => {
                let w = INLINE_COUNT_BITS / (slices - 1).min(64) as u32;
                // Under loom, counts of 2 spill: the models reach the spill.
                if cfg!(loom) {
                    w.min(1)
                } else {
                    w
                }
            }
            _ => 0,
        };
        Config {
            slice_nanos: finest,
            shift,
            len: lens.len(),
            fold,
            levels,
            block_words: next,
            inline_width,
            fold_slices: StrengthReducedU64::new(levels[fold].slices.max(1)),
        }
    }

    /// The epoch (finest slice number) of time `t`, at most
    /// [`MAX_EPOCH`] (2^63 - 2; only reached with 1 ns slices past 292
    /// years).
    #[inline]
    pub(crate) fn epoch_of(&self, t: u64) -> u64 {
        (t / self.slice_nanos).min(MAX_EPOCH)
    }

    /// The finest slice length in nanoseconds.
    #[inline]
    pub(crate) fn slice_nanos(&self) -> u64 {
        self.slice_nanos
    }

    /// Number of limits (levels).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Level `i`.
    #[inline]
    pub(crate) fn level(&self, i: usize) -> Level {
        self.levels[i]
    }

    /// The levels.
    #[inline]
    pub(crate) fn levels(&self) -> &[Level] {
        &self.levels[..self.len]
    }

    /// The fold level's index (see the module docs).
    #[inline]
    pub(crate) fn fold(&self) -> usize {
        self.fold
    }

    /// Whether this is one fixed window (one level of one slice), whose roll
    /// is a single CAS.
    #[inline]
    pub(crate) fn is_fixed(&self) -> bool {
        self.len == 1 && self.levels[0].slices == 1
    }

    /// Words in a history block (see `block.rs`).
    #[inline]
    pub(crate) fn block_words(&self) -> usize {
        self.block_words
    }

    /// The fold level's ring slot of its slice `k` (`k mod S`), by a
    /// multiply.
    #[inline]
    pub(crate) fn fold_slot(&self, k: u64) -> usize {
        (k % self.fold_slices) as usize
    }

    /// Bits per count of the inline history (`inline.rs`); 0 when states of
    /// this config have none.
    #[inline]
    pub(crate) fn inline_width(&self) -> u32 {
        self.inline_width
    }

    /// The budget in units for the raw limit `raw`.
    #[inline]
    pub(crate) fn budget(&self, raw: u64) -> u64 {
        (raw >> self.shift).min(MAX_BUDGET)
    }

    /// The units a request of `0 < n <= raw` costs against `budget`: never
    /// more than the whole budget, so that a request for the whole limit
    /// (even `u64::MAX`) fits an empty window.
    #[inline]
    pub(crate) fn charge(&self, n: u64, budget: u64) -> u64 {
        let units = if self.shift == 0 {
            n
        } else {
            (n >> self.shift) + u64::from(n & ((1 << self.shift) - 1) != 0)
        };
        units.min(budget)
    }

    /// Permits available to one request, for `units` units left of a budget
    /// of the raw limit `raw` (`raw` in an empty window).
    #[inline]
    pub(crate) fn permits(&self, units_left: u64, empty: bool, raw: u64) -> u64 {
        if empty && self.budget(raw) > 0 {
            raw
        } else {
            (units_left << self.shift).min(raw)
        }
    }

    /// Nanoseconds from `now` to the start of finest epoch `epoch`
    /// (saturating; 0 if it has started).
    #[inline]
    pub(crate) fn nanos_until(&self, epoch: u64, now: u64) -> u64 {
        epoch.saturating_mul(self.slice_nanos).saturating_sub(now)
    }

    /// The bytes of one history block (the inline words are the owner's).
    pub(crate) fn block_bytes(&self) -> usize {
        self.block_words * std::mem::size_of::<u64>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::limiter::MAX_EXACT_LIMIT;

    fn single(limit: u64) -> Config {
        Config::single(limit, Duration::from_nanos(1), 1).unwrap()
    }

    #[test]
    fn units_for_wide_limits() {
        assert_eq!(single(MAX_EXACT_LIMIT).shift, 0);
        assert_eq!(single(MAX_EXACT_LIMIT + 1).shift, 1);
        assert_eq!(single((MAX_EXACT_LIMIT + 1) << 3).shift, 4);
        let c = single(u64::MAX);
        assert_eq!(c.shift, 18);
        assert!(u64::MAX >> c.shift <= MAX_BUDGET);
        assert_eq!(c.budget(u64::MAX), u64::MAX >> 18);
        assert_eq!(c.charge(u64::MAX, c.budget(u64::MAX)), c.budget(u64::MAX));
        assert_eq!(c.charge(1, MAX_BUDGET), 1);
        assert_eq!(c.charge(1 << 18, MAX_BUDGET), 1);
        assert_eq!(c.charge((1 << 18) + 1, MAX_BUDGET), 2);
    }

    #[test]
    fn single_blocks_hold_length_frozen_and_ring() {
        let c = Config::single(100, Duration::from_secs(10), 10).unwrap();
        assert_eq!((c.level(0).base, c.level(0).ring), (1, 2));
        assert_eq!(c.block_words(), 12);
        assert_eq!(c.block_bytes(), 96);
    }

    #[test]
    fn multi_levels_share_the_finest_grid() {
        let s = Duration::from_secs(1);
        let c = Config::multi(&[(60 * s, 6), (s, 10)]).unwrap();
        assert_eq!(c.slice_nanos(), 100_000_000);
        assert_eq!(c.fold(), 1);
        assert_eq!(c.level(0).ratio, 100);
        assert_eq!(c.level(1).ratio, 1);
        assert_eq!(c.level(1).base, BLOCK_HEADER + LEVEL_HEADER + 6);
        assert_eq!(c.level(1).ring, c.level(1).base + LEVEL_HEADER);
        assert_eq!(c.block_words(), BLOCK_HEADER + 2 * LEVEL_HEADER + 16);
        assert_eq!(
            Config::multi(&[(s, 10), (Duration::from_millis(1150), 1)]).unwrap_err(),
            ConfigError::LevelSliceMismatch { level: 1 }
        );
        assert_eq!(Config::multi(&[]).unwrap_err(), ConfigError::NoLevels);
        assert!(matches!(
            Config::multi(&[(s, 1); 9]).unwrap_err(),
            ConfigError::Invalid(_)
        ));
        assert_eq!(
            Config::multi(&[(s, 0)]).unwrap_err(),
            ConfigError::ZeroSlices
        );
    }
}
