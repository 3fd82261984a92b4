//! Time stamps for operations whose time the benchmark supplies.
//!
//! The per-key benches measure with time that advances 1 ms every 4096 adds:
//! op `i` of a thread is stamped [`stamp`]`(i)`. Slices of a 10 s / 10
//! window then roll every 4M adds, often enough that the rolling path is
//! measured, rarely enough that the common path dominates, as in a service.

/// Adds per millisecond of stamped time.
pub const ADDS_PER_MS: u64 = 4096;

/// Nanoseconds in a millisecond.
const MS: u64 = 1_000_000;

/// The time (nanoseconds) of op `i`: `1 ms * (i / 4096)`. Non-decreasing
/// in `i`, so a thread that counts its ops never steps back in time.
#[inline(always)]
pub fn stamp(i: u64) -> u64 {
    (i / ADDS_PER_MS).saturating_mul(MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_millisecond_every_4096_ops() {
        assert_eq!(stamp(0), 0);
        assert_eq!(stamp(4095), 0);
        assert_eq!(stamp(4096), 1_000_000);
        assert_eq!(stamp(10 * 4096 + 7), 10_000_000);
        assert_eq!(stamp(u64::MAX), (u64::MAX / 4096).saturating_mul(1_000_000));
    }
}
