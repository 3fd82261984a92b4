//! The *inline history*: a single-limit state's recorded slice counts
//! packed in its `block` word (`history.rs` says when the word holds them),
//! so that a key whose slices count little (the cold keys of skewed
//! traffic, most keys) has no history block, and its roll touches only the
//! state's own words.
//!
//! # The word
//! `counts:47 | tag:16 | 1`. Bit 0 ([`MARK`]) tells it from a block pointer
//! (blocks are word-aligned). The tag is that of the epoch `E` the word
//! describes; count field `j` (`1 <= j < S`, `width` bits from bit `17 +
//! (j - 1) width`) is the final count of slice `E - j`. Their sum is
//! `P(E)`, the `frozen` of a block.
//!
//! `width = 47 / (S - 1)` (`Config::inline_width`): 5 bits (counts up to
//! 31) for 10 slices, 47 bits (never full) for 2. A single-limit state of 48
//! or more slices, a multi-limit state and any state on a 32-bit target have
//! width 0: no inline history. Under loom the width is at most 1, so the
//! models reach the spill with counts of 2.
//!
//! # Arithmetic
//! Every operation is a function of the word alone (no load, no loop over
//! the fields: see [`SumPlan`]): a field, the sum of all or some of them,
//! and the word of a later epoch ([`Inline::rolled`], the roll), or `None`
//! when a count does not fit its field (the roll then *spills* to a block).

use super::config::INLINE_COUNT_BITS;
use crate::pack::{Tag, Value};

/// Bit 0: an inline history (a block pointer has it clear).
pub(crate) const MARK: u64 = 1;
/// Where the tag starts.
const TAG_SHIFT: u32 = 1;
/// Where the first count field starts.
const COUNTS_SHIFT: u32 = TAG_SHIFT + Tag::BITS;
/// The bits all count fields share.
const COUNT_BITS: u32 = 64 - COUNTS_SHIFT;
const _: () = assert!(COUNT_BITS == INLINE_COUNT_BITS);

/// `bits` low ones (`bits <= 47`).
#[inline(always)]
const fn ones(bits: u32) -> u64 {
    (1 << bits) - 1
}

/// How [`Inline::sum`] adds up the `COUNT_BITS / width` fields of one
/// width (unused fields and the bits past the last field are 0):
/// - `width <= 3`: `lanes` has bit 0 of every field; the sum is that of
///   `popcount(c & lanes << b) << b` over the field's bits `b`.
/// - `width >= 4`: `lanes` has the low `width` bits of every lane of
///   `2 width` bits, so `(c & lanes) + (c >> width & lanes)` holds the
///   sum of fields `2i` and `2i + 1` in lane `i`; multiplying by `mul`
///   (bit 0 of every lane) adds lanes `0..=i` into lane `i`, and the top
///   lane (at `top`, masked by `lane`) is the total. No lane overflows:
///   the total is at most `47 / width x (2^width - 1) < 2^(2 width)`, and
///   the top lane ends at bit `2 width x lanes <= 60` (or there is one
///   lane). A unit test checks every width against a loop.
struct SumPlan {
    lanes: u64,
    mul: u64,
    top: u32,
    lane: u64,
}

/// [`SumPlan`] of every width `0..=COUNT_BITS`.
static PLANS: [SumPlan; COUNT_BITS as usize + 1] = {
    let mut plans = [const {
        SumPlan {
            lanes: 0,
            mul: 0,
            top: 0,
            lane: 0,
        }
    }; COUNT_BITS as usize + 1];
    let mut w = 1;
    while w <= COUNT_BITS {
        let fields = COUNT_BITS / w;
        let (step, first) = if w <= 3 { (w, 1) } else { (2 * w, ones(w)) };
        let (mut lanes, mut mul, mut top, mut at) = (0, 0, 0, 0);
        while at < fields * w {
            lanes |= first << at;
            mul |= 1 << at;
            top = at;
            at += step;
        }
        let lane = if 2 * w >= 64 { u64::MAX } else { ones(2 * w) };
        plans[w as usize] = SumPlan {
            lanes,
            mul,
            top,
            lane,
        };
        w += 1;
    }
    plans
};

/// `ceil(2^16 / width)` for every width: `bit * FIELD_OF[width] >> 16` is
/// `bit / width` for every bit of the count fields (`bit < 47`; the error of
/// the rounded reciprocal, below `bit / 2^16`, never reaches the next
/// multiple of `1 / width`). A unit test checks every width and bit.
static FIELD_OF: [u32; COUNT_BITS as usize + 1] = {
    let mut t = [0u32; COUNT_BITS as usize + 1];
    let mut w = 1;
    while w <= COUNT_BITS {
        t[w as usize] = (1u32 << 16).div_ceil(w);
        w += 1;
    }
    t
};

/// An inline history word (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inline(u64);

impl Inline {
    /// The counts of a null word: all zero (its tag is never read).
    pub(crate) const EMPTY: Inline = Inline(MARK);

    /// The epoch tag the word describes.
    #[inline]
    pub(crate) fn tag(self) -> Tag {
        Tag::of(self.0 >> TAG_SHIFT)
    }

    /// The final count of slice `E - j` (`1 <= j`, `E` the word's epoch);
    /// 0 past the last field.
    #[inline]
    pub(crate) fn count(self, width: u32, j: u64) -> u64 {
        let at = (j - 1).saturating_mul(u64::from(width));
        if at >= u64::from(COUNT_BITS) {
            return 0;
        }
        (self.0 >> COUNTS_SHIFT >> at) & ones(width)
    }

    /// The sum of its counts: `P(E)`. Without a loop (see [`SumPlan`]):
    /// a loop that stops at the last nonzero field mispredicted its exit
    /// on most rolls and sweep checks.
    #[inline]
    pub(crate) fn sum(self, width: u32) -> u64 {
        let c = self.0 >> COUNTS_SHIFT;
        let p = &PLANS[width as usize];
        if width > 3 {
            // Adjacent fields paired into lanes of `2 width` bits, then
            // every lane added into the top one by one multiply.
            let x = (c & p.lanes) + ((c >> width) & p.lanes);
            (x.wrapping_mul(p.mul) >> p.top) & p.lane
        } else {
            // Bit `b` of every field at once (width 0: no bits, 0).
            let mut sum = 0;
            for b in 0..width {
                sum += u64::from((c & (p.lanes << b)).count_ones()) << b;
            }
            sum
        }
    }

    /// The sum of its counts from field `j` on (`j >= 1`).
    #[inline]
    pub(crate) fn sum_from(self, width: u32, j: u64) -> u64 {
        let at = (j - 1).saturating_mul(u64::from(width));
        if at >= u64::from(COUNT_BITS) {
            return 0;
        }
        let counts = self.0 >> COUNTS_SHIFT >> at;
        Inline(counts << COUNTS_SHIFT | MARK).sum(width)
    }

    /// The sum of its first `k` counts (slices `E - 1` to `E - k`).
    #[inline]
    pub(crate) fn sum_to(self, width: u32, k: u64) -> u64 {
        let bits = k.saturating_mul(u64::from(width));
        if bits >= u64::from(COUNT_BITS) {
            return self.sum(width);
        }
        let counts = (self.0 >> COUNTS_SHIFT) & ones(bits as u32);
        Inline(counts << COUNTS_SHIFT | MARK).sum(width)
    }

    /// The first and the last field that is not zero (`1 <= j`: slices
    /// `E - j`, the newest and the oldest with a count), or `None` if every
    /// field is zero. No loop and no division: the fields' bit positions
    /// are divided by `width` by a multiply ([`FIELD_OF`]).
    #[inline]
    pub(crate) fn counted(self, width: u32) -> Option<(u64, u64)> {
        let c = self.0 >> COUNTS_SHIFT;
        if c == 0 || width == 0 {
            return None;
        }
        let field = |bit: u32| u64::from((bit * FIELD_OF[width as usize]) >> 16) + 1;
        Some((field(c.trailing_zeros()), field(63 - c.leading_zeros())))
    }

    /// The history at `T = E + d` (`d >= 1`, tag `tag`) of a state of `S`
    /// slices whose slice `E` closed with `count`; `None` if `count` does
    /// not fit a field (the caller spills to a block).
    #[inline]
    pub(crate) fn rolled(
        self,
        width: u32,
        slices: u64,
        d: u64,
        count: u64,
        tag: Tag,
    ) -> Option<Inline> {
        let fresh =
            |counts: u64| Inline(counts << COUNTS_SHIFT | tag.to_bits() << TAG_SHIFT | MARK);
        if d >= slices {
            return (width > 0).then(|| fresh(0));
        }
        if width == 0 || count > ones(width) {
            return None;
        }
        // Field `j` moves to `j + d`; slice `E` lands in field `d`.
        let used = (slices - 1) as u32 * width;
        let d = d as u32;
        let old = self.0 >> COUNTS_SHIFT;
        let counts = (old << (d * width) | count << ((d - 1) * width)) & ones(used);
        Some(fresh(counts))
    }

    /// The word's bits (bit 0 set: `history.rs` reads it as inline).
    #[inline]
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// The inline word whose bits are `bits` (bit 0 set).
    #[inline]
    pub(crate) fn from_bits(bits: u64) -> Inline {
        debug_assert!(bits & MARK != 0);
        Inline(bits)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A reference: the history as a list of counts, slice `E - 1` first.
    fn roll_ref(old: &[u64], d: usize, count: u64) -> Vec<u64> {
        let n = old.len();
        let mut new = vec![0; n];
        if d <= n {
            new[d - 1] = count;
            new[d..n].copy_from_slice(&old[..n - d]);
        }
        new
    }

    #[test]
    fn rolls_match_a_reference_list() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for slices in [2u64, 3, 5, 10, 17, 48] {
            let width = COUNT_BITS / (slices as u32 - 1);
            let max = ones(width);
            let mut w = Inline::EMPTY;
            let mut list = vec![0; slices as usize - 1];
            let mut e = 0u64;
            for _ in 0..crate::sized(2000, 8) {
                let d = rng.random_range(1..slices + 3);
                let count = if rng.random_bool(0.9) {
                    rng.random_range(0..=max)
                } else {
                    max + 1
                };
                e += d;
                let got = w.rolled(width, slices, d, count, Tag::of(e));
                let want = roll_ref(&list, d as usize, count);
                if count > max && d < slices {
                    assert!(got.is_none());
                    continue;
                }
                w = got.expect("fits");
                list = want;
                assert_eq!(w.tag(), Tag::of(e));
                for (j, &c) in list.iter().enumerate() {
                    assert_eq!(w.count(width, j as u64 + 1), c, "S {slices} j {}", j + 1);
                }
                assert_eq!(w.count(width, slices), 0);
                assert_eq!(w.sum(width), list.iter().sum::<u64>());
                for j in 1..slices {
                    let tail: u64 = list[j as usize - 1..].iter().sum();
                    assert_eq!(w.sum_from(width, j), tail, "S {slices} from {j}");
                }
                for k in 0..=slices {
                    let head: u64 = list.iter().take(k as usize).sum();
                    assert_eq!(w.sum_to(width, k), head, "S {slices} to {k}");
                }
                assert_eq!(w.bits() & MARK, MARK);
            }
        }
    }

    #[test]
    fn sums_match_a_loop_at_every_width() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        for width in 1..=COUNT_BITS {
            let fields = COUNT_BITS / width;
            for round in 0..crate::sized(500, 2) {
                let mut counts = 0u64;
                let mut want = 0;
                for i in 0..fields {
                    // All fields full first: the largest total.
                    let c = if round == 0 {
                        ones(width)
                    } else {
                        rng.random_range(0..=ones(width))
                    };
                    counts |= c << (i * width);
                    want += c;
                }
                let w = Inline(counts << COUNTS_SHIFT | 5 << TAG_SHIFT | MARK);
                assert_eq!(w.sum(width), want, "width {width}, counts {counts:#x}");
            }
        }
        assert_eq!(Inline(u64::MAX).sum(0), 0);
    }

    #[test]
    fn counted_fields_match_a_loop() {
        for width in 1..=COUNT_BITS {
            for bit in 0..COUNT_BITS {
                assert_eq!((bit * FIELD_OF[width as usize]) >> 16, bit / width);
            }
        }
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        for width in 1..=COUNT_BITS {
            let fields = u64::from(COUNT_BITS / width);
            for _ in 0..crate::sized(200, 2) {
                let mut counts = 0u64;
                for i in 0..fields {
                    if rng.random_bool(0.3) {
                        counts |= rng.random_range(1..=ones(width)) << (i * u64::from(width));
                    }
                }
                let w = Inline(counts << COUNTS_SHIFT | MARK);
                let nonzero: Vec<u64> = (1..=fields).filter(|&j| w.count(width, j) > 0).collect();
                let want = nonzero.first().map(|&lo| (lo, *nonzero.last().unwrap()));
                assert_eq!(w.counted(width), want, "width {width}, counts {counts:#x}");
            }
        }
        assert_eq!(Inline::EMPTY.counted(5), None);
    }

    #[test]
    fn width_zero_never_holds_a_count() {
        let w = Inline::EMPTY;
        assert_eq!(w.rolled(0, 60, 1, 1, Tag::of(1)), None);
        assert_eq!(w.rolled(0, 60, 1, 0, Tag::of(1)), None);
        assert_eq!(w.sum(0), 0);
        assert_eq!(w.count(0, 3), 0);
    }
}
