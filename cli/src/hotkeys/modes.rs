//! The two ways `hotkeys` counts: exactly (`HotKeyDetector`, optionally
//! bounded by `--max-keys` a slice) or in fixed memory (`HotKeySketch`,
//! `--memory SIZE`), behind one small trait so that the single- and
//! multi-threaded loops are written once. Each says on stderr, at the end,
//! what it dropped or estimated.

use super::{Key, KeyRef};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch, Timestamp};

/// What the loops need of a detector.
pub(super) trait Detect: Send + Sync + 'static {
    /// An add of `n` at `now`: the window sum if it made the key hot.
    fn became_hot_at(&self, key: &KeyRef, now: Timestamp, n: u64) -> Option<u64>;
    /// Every key with a non-zero sum at `now`, with its sum.
    fn top_at(&self, now: Timestamp) -> Vec<(Key, u64)>;
    /// Drops the slices that left the window at `now`.
    fn evict_idle_at(&self, now: Timestamp);
    /// The slice length.
    fn slice_len(&self) -> Duration;
    /// What was dropped or estimated, for stderr (`adds`: every add
    /// made); nothing when every add was counted exactly.
    fn summary(&self, adds: u64) -> Option<String>;
}

/// The exact detector.
pub(super) type Exact = HotKeyDetector<Key, ManualClock>;
/// The fixed-memory detector.
pub(super) type Sketch = HotKeySketch<Key, ManualClock>;

impl Detect for Exact {
    #[inline]
    fn became_hot_at(&self, key: &KeyRef, now: Timestamp, n: u64) -> Option<u64> {
        HotKeyDetector::became_hot_at(self, key, now, n)
    }
    fn top_at(&self, now: Timestamp) -> Vec<(Key, u64)> {
        self.windows().top_at(now, usize::MAX)
    }
    fn evict_idle_at(&self, now: Timestamp) {
        HotKeyDetector::evict_idle_at(self, now);
    }
    fn slice_len(&self) -> Duration {
        self.windows().slice_len()
    }
    fn summary(&self, adds: u64) -> Option<String> {
        let untracked = self.windows().untracked_adds();
        if untracked == 0 {
            return None;
        }
        Some(format!(
            "exact counts, but {untracked} of {adds} adds ({}) were not counted: their slice \
             already held --max-keys keys (the sums of those keys are short by them)",
            percent(untracked, adds)
        ))
    }
}

impl Detect for Sketch {
    #[inline]
    fn became_hot_at(&self, key: &KeyRef, now: Timestamp, n: u64) -> Option<u64> {
        HotKeySketch::became_hot_at(self, key, now, n)
    }
    fn top_at(&self, now: Timestamp) -> Vec<(Key, u64)> {
        HotKeySketch::top_at(self, now, usize::MAX)
    }
    fn evict_idle_at(&self, now: Timestamp) {
        HotKeySketch::evict_idle_at(self, now);
    }
    fn slice_len(&self) -> Duration {
        self.windows().slice_len()
    }
    fn summary(&self, adds: u64) -> Option<String> {
        let (kept, untracked) = (self.filtered_adds(), self.untracked_adds());
        Some(format!(
            "fixed memory: {} of {} bytes held; {kept} of {adds} adds ({}) kept back by the \
             doorkeeper (keys below {} adds in a slice), {untracked} not counted (a slice held \
             {} keys); every sum is at most the true count and at most {} below it, plus \
             those not counted",
            self.memory_bytes(),
            self.memory_limit(),
            percent(kept, adds),
            self.admission_level(),
            self.max_keys(),
            self.undercount_bound(),
        ))
    }
}

fn percent(part: u64, whole: u64) -> String {
    format!("{:.2}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// Parses a size: bytes, or a number with `KiB`, `MiB`, `GiB` (powers of
/// 1024) or `KB`, `MB`, `GB` (powers of 1000).
pub(super) fn parse_size(s: &str) -> Result<usize, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size `{s}`: expected a number, e.g. 8MiB"))?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => {
            return Err(format!(
                "invalid size `{s}`: the unit must be B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    n.checked_mul(scale)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("size `{s}` too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("3MB"), Ok(3_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("10B"), Ok(10));
        assert!(parse_size("8mb").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("-1MiB").is_err());
        assert!(parse_size("99999999999GiB").is_err());
    }
}
