//! Packed 64-bit words: the crate's bit fields, defined once and typed.
//!
//! Several protocols keep two or three facts in one atomic word, so that one
//! CAS changes them together (a slice's epoch tag and its count; a limiter's
//! epoch tag, seal and count). This module is the one place that says where
//! each fact lives in its word.
//!
//! - A *format* is an uninhabited marker type ([`TagCount`], [`Admission`]).
//! - A [`Word<F>`] is a `u64` in format `F`; an [`AtomicWord<F>`] holds one.
//! - A [`Field<F, V>`] is a run of bits of format `F` holding a value of
//!   type `V` (a `u64` count, a `bool` flag, a [`Tag`]).
//!
//! Fields are declared bottom-up: [`Field::lowest`], then [`Field::above`]
//! the previous one (the idea of sharded-slab's `Pack` trait, whose fields
//! name the field packed below them), so two fields of a format cannot
//! overlap, and each format asserts at compile time that its top field ends
//! at bit 64. A field of one format cannot be applied to a word of another.
//! Everything is `const` or `#[inline(always)]`: an access is a shift and a
//! mask, as hand-written code would be. Code whose hot path works on raw
//! `u64`s takes its masks from the fields (`Field::mask`, a `const fn`).
//!
//! The formats: [`TagCount`] and [`Admission`] here (slices and limiters);
//! the per-key engine's words in `keyed.rs`.

mod keyed;

pub(crate) use self::keyed::{EntryHot, EntryWord, HomeWord};

use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::marker::PhantomData;

/// A value stored in a bit field.
pub(crate) trait Value: Copy {
    /// The value as the field's bits (at most the field's `max`).
    fn to_bits(self) -> u64;
    /// The value the field's bits hold.
    fn from_bits(bits: u64) -> Self;
}

impl Value for u64 {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> u64 {
        bits
    }
}

impl Value for bool {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> bool {
        bits != 0
    }
}

/// The low 16 bits of an epoch (slice number): enough to tell apart the
/// epochs one word can hold (the protocols keep them fewer than 2^15 apart,
/// or treat a larger distance as "everything expired").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tag(u16);

impl Tag {
    /// Bits in a tag.
    pub(crate) const BITS: u32 = 16;

    /// The tag of `epoch`.
    #[inline(always)]
    pub(crate) const fn of(epoch: u64) -> Tag {
        Tag(epoch as u16)
    }

    /// How many epochs `self` is after `earlier`, modulo 2^16.
    #[inline(always)]
    pub(crate) const fn since(self, earlier: Tag) -> u64 {
        self.0.wrapping_sub(earlier.0) as u64
    }
}

impl Value for Tag {
    #[inline(always)]
    fn to_bits(self) -> u64 {
        u64::from(self.0)
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Tag {
        Tag(bits as u16)
    }
}

/// `bits` bits of a word of format `F`, starting at bit `shift`, holding a
/// `V`.
pub(crate) struct Field<F, V> {
    shift: u32,
    bits: u32,
    _format: PhantomData<fn() -> (F, V)>,
}

impl<F, V> Clone for Field<F, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F, V> Copy for Field<F, V> {}

impl<F, V> Field<F, V> {
    /// The field in the lowest `bits` bits.
    pub(crate) const fn lowest(bits: u32) -> Self {
        assert!(bits > 0 && bits <= 64);
        Field {
            shift: 0,
            bits,
            _format: PhantomData,
        }
    }

    /// The field of `bits` bits just above `below`.
    pub(crate) const fn above<W>(below: Field<F, W>, bits: u32) -> Self {
        assert!(bits > 0 && below.end() + bits <= 64);
        Field {
            shift: below.end(),
            bits,
            _format: PhantomData,
        }
    }

    /// The field's lowest bit.
    pub(crate) const fn shift(self) -> u32 {
        self.shift
    }

    /// One past the field's highest bit.
    pub(crate) const fn end(self) -> u32 {
        self.shift + self.bits
    }

    /// The largest value the field holds (all ones).
    pub(crate) const fn max(self) -> u64 {
        u64::MAX >> (64 - self.bits)
    }

    /// The field's bits in place.
    pub(crate) const fn mask(self) -> u64 {
        self.max() << self.shift
    }
}

impl<F, V: Value> Field<F, V> {
    /// The value this field holds in `w`.
    #[inline(always)]
    pub(crate) fn get(self, w: Word<F>) -> V {
        V::from_bits((w.0 >> self.shift) & self.max())
    }

    /// `w` with this field set to `v`.
    #[inline(always)]
    pub(crate) fn set(self, w: Word<F>, v: V) -> Word<F> {
        let bits = v.to_bits();
        debug_assert!(bits <= self.max(), "value does not fit its field");
        Word::from_raw((w.0 & !self.mask()) | (bits << self.shift))
    }
}

impl<F> Field<F, u64> {
    /// `w` with `delta` added to this field. The caller guarantees that the
    /// sum fits the field (checked in debug builds): then this is one add,
    /// with no carry into the field above.
    #[inline(always)]
    pub(crate) fn add(self, w: Word<F>, delta: u64) -> Word<F> {
        debug_assert!(self.get(w) + delta <= self.max(), "field overflow");
        Word::from_raw(w.0 + (delta << self.shift))
    }
}

/// A 64-bit word in format `F`.
pub(crate) struct Word<F>(u64, PhantomData<fn() -> F>);

impl<F> Word<F> {
    /// The all-zero word.
    pub(crate) const ZERO: Word<F> = Word::from_raw(0);

    /// The word whose bits are `raw`.
    #[inline(always)]
    pub(crate) const fn from_raw(raw: u64) -> Self {
        Word(raw, PhantomData)
    }

    /// The word's bits.
    #[inline(always)]
    pub(crate) const fn raw(self) -> u64 {
        self.0
    }
}

impl<F> Clone for Word<F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F> Copy for Word<F> {}
impl<F> PartialEq for Word<F> {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<F> Eq for Word<F> {}
impl<F> fmt::Debug for Word<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Word({:#018x})", self.0)
    }
}

/// An atomic [`Word<F>`] (the atomic comes from [`crate::sync`]).
pub(crate) struct AtomicWord<F> {
    inner: AtomicU64,
    _format: PhantomData<fn() -> F>,
}

impl<F> AtomicWord<F> {
    /// An atomic holding `w`.
    pub(crate) fn new(w: Word<F>) -> Self {
        AtomicWord {
            inner: AtomicU64::new(w.0),
            _format: PhantomData,
        }
    }

    /// Loads the word.
    #[inline(always)]
    pub(crate) fn load(&self, order: Ordering) -> Word<F> {
        Word::from_raw(self.inner.load(order))
    }

    /// Stores `w` (for a word no other thread can see yet).
    #[inline(always)]
    pub(crate) fn store(&self, w: Word<F>, order: Ordering) {
        self.inner.store(w.0, order);
    }

    /// CAS `current -> new`; `Err` carries the value found.
    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: Word<F>,
        new: Word<F>,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Word<F>, Word<F>> {
        self.inner
            .compare_exchange(current.0, new.0, success, failure)
            .map(Word::from_raw)
            .map_err(Word::from_raw)
    }

    /// As [`compare_exchange`](Self::compare_exchange), but may fail
    /// spuriously (for retry loops).
    #[inline(always)]
    pub(crate) fn compare_exchange_weak(
        &self,
        current: Word<F>,
        new: Word<F>,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Word<F>, Word<F>> {
        self.inner
            .compare_exchange_weak(current.0, new.0, success, failure)
            .map(Word::from_raw)
            .map_err(Word::from_raw)
    }
}

impl<F> fmt::Debug for AtomicWord<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.load(Ordering::Relaxed).fmt(f)
    }
}

/// The format `tag:16 | count:48`: a count and the tag of the epoch it
/// belongs to. The slice cell word of [`crate::slice`] (whose all-ones count
/// marks a sealed folding cell), and the limiters' history, frozen-sum and
/// open-slice words.
pub(crate) enum TagCount {}

impl TagCount {
    /// The count: 48 bits.
    pub(crate) const COUNT: Field<TagCount, u64> = Field::lowest(64 - Tag::BITS);
    /// The tag of the count's epoch: the top 16 bits.
    pub(crate) const TAG: Field<TagCount, Tag> = Field::above(Self::COUNT, Tag::BITS);

    /// The word `tag | count`.
    #[inline(always)]
    pub(crate) fn word(tag: Tag, count: u64) -> Word<TagCount> {
        Self::COUNT.set(Self::TAG.set(Word::ZERO, tag), count)
    }
}

const _: () = assert!(TagCount::TAG.end() == 64);

/// The format of a limiter's admission word, `tag:16 | sealed:1 | used:47`
/// (see `crate::limiter`).
pub(crate) enum Admission {}

impl Admission {
    /// Units granted in the current window: 47 bits.
    pub(crate) const USED: Field<Admission, u64> = Field::lowest(64 - Tag::BITS - 1);
    /// The seal: set while a roll (or an owner) has frozen `USED`.
    pub(crate) const SEALED: Field<Admission, bool> = Field::above(Self::USED, 1);
    /// The tag of the epoch the word belongs to: the top 16 bits.
    pub(crate) const TAG: Field<Admission, Tag> = Field::above(Self::SEALED, Tag::BITS);

    /// The word `tag | sealed | used`.
    #[inline(always)]
    pub(crate) fn word(tag: Tag, sealed: bool, used: u64) -> Word<Admission> {
        let w = Self::TAG.set(Word::ZERO, tag);
        Self::USED.set(Self::SEALED.set(w, sealed), used)
    }
}

const _: () = assert!(Admission::TAG.end() == 64);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fields_tile_their_words() {
        assert_eq!(TagCount::COUNT.mask() | TagCount::TAG.mask(), u64::MAX);
        assert_eq!(TagCount::COUNT.mask() & TagCount::TAG.mask(), 0);
        let a = [
            Admission::USED.mask(),
            Admission::SEALED.mask(),
            Admission::TAG.mask(),
        ];
        assert_eq!(a[0] | a[1] | a[2], u64::MAX);
        assert_eq!(a[0] & a[1] | a[1] & a[2] | a[0] & a[2], 0);
        assert_eq!(Admission::USED.max(), (1 << 47) - 1);
        assert_eq!(Admission::SEALED.shift(), 47);
    }

    #[test]
    fn words_round_trip() {
        let w = TagCount::word(Tag::of(0x1_2345), 77);
        assert_eq!(TagCount::TAG.get(w), Tag::of(0x2345));
        assert_eq!(TagCount::COUNT.get(w), 77);
        assert_eq!(w.raw(), 0x2345 << 48 | 77);
        let a = Admission::word(Tag::of(0xffff), true, Admission::USED.max());
        assert_eq!(a.raw(), u64::MAX);
        let a = Admission::word(Tag::of(7), false, 5);
        assert!(!Admission::SEALED.get(a));
        assert_eq!(Admission::USED.get(Admission::USED.add(a, 3)), 8);
        assert_eq!(
            Admission::TAG.get(Admission::SEALED.set(a, true)),
            Tag::of(7)
        );
        assert_eq!(Tag::of(3).since(Tag::of(0xfffe)), 5);
    }
}
