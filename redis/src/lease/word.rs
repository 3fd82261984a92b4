//! [`LeaseWord`]: the permits a node holds for one key, and until when it
//! may grant them, in one atomic word. The hot path of
//! [`ClusterLimiter`](crate::ClusterLimiter): a grant is one load and one
//! compare-and-swap, no lock, no allocation.
//!
//! # The word
//! `deadline << 28 | renew << 24 | tag << 20 | remaining`: `remaining`
//! permits (at most [`MAX_LEASE`]) of the lease of server slice `tag` (the
//! slice number mod 16: the full number is rebuilt from the node's
//! estimate of server time, see `limiter.rs`), grantable while the node's
//! clock, in units of `2^UNIT_SHIFT` ns (4.096 us) mod `2^36`, is *before*
//! `deadline`. `0` holds no lease. Time compares mod `2^36` units (78
//! hours): `now` is before `d` when `d - now` (mod `2^36`) is in
//! `1..2^35`, so the word never runs out of bits; a lease lives at most a
//! slice (at most a day, `Builder` checks), and the sweeper revokes every
//! lease soon after its deadline, long before the comparison could wrap
//! around (39 hours).
//!
//! `renew` (4 bits) is the lease's renewal mark: `0` none, else the grant
//! that takes `remaining` from at least `2^renew` to below it is told so
//! ([`Take::Granted`]'s `renew`), and asks for the next lease while this
//! one still grants (`remote.rs`).
//!
//! # Invariants
//! 1. **A permit is granted at most once, or returned, never both.** A
//!    grant takes `n` by a compare-and-swap of the exact word it checked
//!    (`remaining - n`), a revoke takes every remaining permit by a swap
//!    (or a compare-and-swap) to `0`. All are read-modify-writes of one
//!    word, so they are totally ordered (its modification order): a
//!    permit a revoke took is in no word a grant can succeed from, and a
//!    revoke never sees a permit a grant took. What a revoke takes is
//!    returned to Redis; nothing can use it any more.
//! 2. **No grant at or after the deadline.** A grant compares the time it
//!    was handed (read before the call) with the deadline of the very word
//!    it swaps. Installing a lease swaps the whole word (deadline, tag and
//!    permits together), so a grant never pairs one lease's permits with
//!    another's deadline or slice.
//! 3. Only one thread at a time installs or revokes (the limiter's sender
//!    lock); grants only lower `remaining`.
//! 4. **One renewal a lease.** `remaining` only falls between two
//!    installs, so exactly one grant (the one whose compare-and-swap takes
//!    it from at least `2^renew` to below) crosses the mark: one renewal is
//!    asked per lease however many threads grant from it.
//!
//! # Orderings
//! Relaxed everywhere: the word publishes nothing but itself (no other
//! memory is read on the strength of its value), and invariant 1 rests on
//! the modification order of one location, which every ordering respects.

use super::sync::{AtomicU64, Ordering};

/// Bits of the word that hold the remaining permits.
const REM_BITS: u32 = 20;
/// The most permits one lease holds.
pub const MAX_LEASE: u64 = (1 << REM_BITS) - 1;
/// Bits of the slice tag.
const TAG_BITS: u32 = 4;
/// Where the renewal mark starts.
const RENEW_SHIFT: u32 = REM_BITS + TAG_BITS;
/// Where the deadline starts.
const DL_SHIFT: u32 = RENEW_SHIFT + 4;
/// The deadline's bits (its modulus is `2^36` units).
const DL_MASK: u64 = (1 << (64 - DL_SHIFT)) - 1;
/// A deadline unit is `2^UNIT_SHIFT` ns.
pub(crate) const UNIT_SHIFT: u32 = 12;
/// Slice tags are slice numbers mod this.
pub(crate) const TAGS: u64 = 1 << TAG_BITS;

/// The outcome of [`LeaseWord::try_take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Granted from the lease of the slice tagged `tag`.
    Granted {
        /// The lease's slice mod [`TAGS`].
        tag: u64,
        /// This grant crossed the lease's renewal mark (invariant 4).
        renew: bool,
    },
    /// No live lease with `n` permits (none, too few, or past its deadline).
    Miss,
}

/// One key's lease on this node.
#[derive(Debug)]
pub(crate) struct LeaseWord(AtomicU64);

/// Node nanoseconds as deadline units, rounded *down* (mod `2^36`). A
/// deadline rounded down and a time rounded down: `now` before the rounded
/// deadline implies `now` before the deadline.
#[inline]
pub(crate) fn units(ns: u64) -> u64 {
    (ns >> UNIT_SHIFT) & DL_MASK
}

/// Whether `now` (units) is before `deadline` (units), mod `2^36`.
#[inline]
fn before(now: u64, deadline: u64) -> bool {
    let ahead = deadline.wrapping_sub(now) & DL_MASK;
    ahead != 0 && ahead < (DL_MASK >> 1)
}

impl LeaseWord {
    /// No lease.
    pub(crate) fn new() -> Self {
        LeaseWord(AtomicU64::new(0))
    }

    /// Takes `n` (>= 1) permits at `now` (units), if the lease holds that
    /// many and `now` is before its deadline.
    #[inline]
    pub(crate) fn try_take(&self, now: u64, n: u64) -> Take {
        let mut w = self.0.load(Ordering::Relaxed);
        loop {
            let rem = w & MAX_LEASE;
            if rem < n || !before(now, w >> DL_SHIFT) {
                return Take::Miss;
            }
            match self
                .0
                .compare_exchange_weak(w, w - n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let mark = (w >> RENEW_SHIFT) & 15;
                    let low = (1u64 << mark) & !1;
                    return Take::Granted {
                        tag: (w >> REM_BITS) & (TAGS - 1),
                        renew: rem >= low && rem - n < low,
                    };
                }
                Err(cur) => w = cur,
            }
        }
    }

    /// Installs a lease of `permits` (at most [`MAX_LEASE`]) of slice
    /// `slice`, grantable before `deadline` (units), whose renewal is asked
    /// when fewer than `2^renew` permits are left (`renew` 0: never; at most
    /// 15); returns what the replaced lease still held (to be returned).
    pub(crate) fn install(&self, deadline: u64, slice: u64, permits: u64, renew: u32) -> u64 {
        let w = ((deadline & DL_MASK) << DL_SHIFT)
            | (u64::from(renew.min(15)) << RENEW_SHIFT)
            | ((slice & (TAGS - 1)) << REM_BITS)
            | permits.min(MAX_LEASE);
        self.0.swap(w, Ordering::Relaxed) & MAX_LEASE
    }

    /// The permits the lease holds now (a snapshot: grants may take them).
    pub(crate) fn remaining(&self) -> u64 {
        self.0.load(Ordering::Relaxed) & MAX_LEASE
    }

    /// Ends the lease: returns the permits it still held (no grant can take
    /// them after this).
    pub(crate) fn revoke(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed) & MAX_LEASE
    }

    /// Ends the lease if `now` (units) is at or past its deadline, or it
    /// holds no permit; returns the permits it still held. A live lease
    /// with permits is left alone (`None`).
    pub(crate) fn revoke_if_over(&self, now: u64) -> Option<u64> {
        let mut w = self.0.load(Ordering::Relaxed);
        loop {
            if w & MAX_LEASE != 0 && before(now, w >> DL_SHIFT) {
                return None;
            }
            match self
                .0
                .compare_exchange_weak(w, 0, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(w & MAX_LEASE),
                Err(cur) => w = cur,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn grants_until_empty_or_the_deadline_and_wraps_around() {
        let w = LeaseWord::new();
        assert_eq!(w.try_take(0, 1), Take::Miss);
        assert_eq!(w.install(10, 35, 3, 0), 0);
        assert_eq!(
            w.try_take(9, 2),
            Take::Granted {
                tag: 3,
                renew: false
            }
        );
        assert_eq!(w.try_take(9, 2), Take::Miss); // 1 left
        assert_eq!(w.try_take(10, 1), Take::Miss); // at the deadline
        assert_eq!(w.revoke_if_over(9), None);
        assert_eq!(w.revoke_if_over(10), Some(1));
        assert_eq!(w.revoke(), 0);
        // A deadline past the wrap of the unit counter.
        let now = DL_MASK - 1;
        w.install(
            units(((DL_MASK + 5) & DL_MASK) << UNIT_SHIFT),
            1,
            MAX_LEASE + 9,
            0,
        );
        assert_eq!(
            w.try_take(now, 1),
            Take::Granted {
                tag: 1,
                renew: false
            }
        );
        assert_eq!(
            w.try_take(3, MAX_LEASE - 1),
            Take::Granted {
                tag: 1,
                renew: false
            }
        );
        assert_eq!(w.try_take(3, 1), Take::Miss);
        assert_eq!(w.install(0, 0, 0, 0), 0);
        assert_eq!(units(u64::MAX), DL_MASK);
    }

    #[test]
    fn the_grant_that_crosses_the_renewal_mark_is_told_once() {
        let w = LeaseWord::new();
        // 10 permits, renewal below 4 (2^2).
        w.install(100, 2, 10, 2);
        let renews: Vec<bool> = (0..10)
            .map(|_| match w.try_take(1, 1) {
                Take::Granted { renew, .. } => renew,
                Take::Miss => panic!("10 permits"),
            })
            .collect();
        // 10 -> 9, ..., 4 -> 3 crosses: the 7th grant.
        assert_eq!(renews.iter().filter(|&&r| r).count(), 1);
        assert!(renews[6]);
        // A grant of several permits that jumps over the mark crosses it too.
        w.install(100, 2, 10, 2);
        assert_eq!(
            w.try_take(1, 8),
            Take::Granted {
                tag: 2,
                renew: true
            }
        );
        assert_eq!(w.remaining(), 2);
        // No mark: never.
        w.install(100, 2, 10, 0);
        assert!((0..10).all(|_| w.try_take(1, 1)
            == Take::Granted {
                tag: 2,
                renew: false
            }));
    }
}
