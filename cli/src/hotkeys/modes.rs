//! The two ways `hotkeys` counts: exactly (`HotKeyDetector`, optionally
//! bounded by `--max-keys` a slice) or in fixed memory (`HotKeySketch`,
//! `--memory SIZE`), behind one small trait so that the single- and
//! multi-threaded loops are written once. Each says on stderr, at the end,
//! what it dropped or estimated.

use super::{Key, KeyRef, Opts};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch, Timestamp};

/// What the loops need of a detector.
pub(super) trait Detect: Send + Sync + 'static {
    /// An add of `n` at `now`: the window sum if it made the key hot.
    fn became_hot_at(&self, key: &KeyRef, now: Timestamp, n: u64) -> Option<u64>;
    /// An add of 1 for each of `keys` at `now`, in order: `on_hot(key,
    /// sum)` after each add that made its key hot (the library's
    /// `add_many_at`: the single adds, with the keys' misses overlapped).
    fn add_many_at<'a>(
        &self,
        keys: impl Iterator<Item = &'a KeyRef>,
        now: Timestamp,
        on_hot: impl FnMut(&'a KeyRef, u64),
    );
    /// Every key with a non-zero sum at `now`, with its sum.
    fn top_at(&self, now: Timestamp) -> Vec<(Key, u64)>;
    /// Drops the slices that left the window at `now`.
    fn evict_idle_at(&self, now: Timestamp);
    /// The slice length.
    fn slice_len(&self) -> Duration;
    /// What was dropped or estimated, as lines for stderr (`adds`: every
    /// add made); none when every add was counted exactly and no bound
    /// was asked for.
    fn summary(&self, adds: u64, opts: &Opts) -> Vec<String>;
    /// The warning of a run whose adds were not all tracked (`adds`: every
    /// add made): how many, and what to change; none when every admitted
    /// add was tracked.
    fn warning(&self, adds: u64) -> Option<String>;
}

/// The warning of `untracked` adds of `adds`, with what to change.
fn untracked_warning(untracked: u64, adds: u64, change: &str) -> Option<String> {
    (untracked > 0).then(|| {
        format!(
            "{untracked} of {adds} adds ({}) were not tracked because their slice was full: \
             keys at the threshold may be missing from the hot records, and sums short; {change}",
            percent(untracked, adds)
        )
    })
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
    #[inline]
    fn add_many_at<'a>(
        &self,
        keys: impl Iterator<Item = &'a KeyRef>,
        now: Timestamp,
        on_hot: impl FnMut(&'a KeyRef, u64),
    ) {
        HotKeyDetector::add_many_at(self, keys.map(|k| (k, 1)), now, on_hot)
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
    fn warning(&self, adds: u64) -> Option<String> {
        let untracked = self.windows().untracked_adds();
        untracked_warning(untracked, adds, "raise --max-keys")
    }
    fn summary(&self, adds: u64, opts: &Opts) -> Vec<String> {
        let Some(max_keys) = opts.max_keys else {
            return Vec::new(); // unbounded: every add counted
        };
        let untracked = self.windows().untracked_adds();
        vec![format!(
            "exact counts, at most {max_keys} keys a slice (--max-keys): {untracked} of {adds} \
             adds ({}) not counted because their slice was full; a reported sum is short of \
             the true count by the key's adds among them, never over",
            percent(untracked, adds)
        )]
    }
}

impl Detect for Sketch {
    #[inline]
    fn became_hot_at(&self, key: &KeyRef, now: Timestamp, n: u64) -> Option<u64> {
        HotKeySketch::became_hot_at(self, key, now, n)
    }
    #[inline]
    fn add_many_at<'a>(
        &self,
        keys: impl Iterator<Item = &'a KeyRef>,
        now: Timestamp,
        on_hot: impl FnMut(&'a KeyRef, u64),
    ) {
        HotKeySketch::add_many_at(self, keys.map(|k| (k, 1)), now, on_hot)
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
    fn warning(&self, adds: u64) -> Option<String> {
        let change = "give more --memory (--rate N, the stream's adds a second, sizes it)";
        untracked_warning(self.untracked_adds(), adds, change)
    }
    fn summary(&self, adds: u64, _: &Opts) -> Vec<String> {
        let (kept, untracked) = (self.filtered_adds(), self.untracked_adds());
        let level = self.admission_level();
        let slices = self.windows().slices() as u64;
        let rule = match level {
            1 => "every add is admitted".to_string(),
            _ => format!(
                "at most a key's first {} in a slice, none in a slice after one in which it \
                 reached {level}",
                match level - 1 {
                    1 => "add".to_string(),
                    n => format!("{n} adds"),
                }
            ),
        };
        vec![
            format!(
                "fixed memory: {} held of the {} limit ({} of {} bytes); at most {} keys a slice",
                fmt_size(self.memory_bytes()),
                fmt_size(self.memory_limit()),
                self.memory_bytes(),
                self.memory_limit(),
                self.max_keys(),
            ),
            format!(
                "{kept} of {adds} adds ({}) kept back by the doorkeeper (admission level \
                 {level}: {rule}); {untracked} admitted adds ({}) not tracked because their slice held {} keys",
                percent(kept, adds),
                percent(untracked, adds),
                self.max_keys(),
            ),
            // Each key's adds are made by one thread (the reader, or the
            // worker its hash picks), so they meet one doorkeeper shard:
            // the bound is the one-thread bound of `HotKeySketch`'s docs.
            format!(
                "a reported sum is never above the key's true count, and at most {} below it \
                 (slices x (level - 1) = {slices} x {}) plus the key's adds not tracked",
                slices * (level - 1),
                level - 1,
            ),
        ]
    }
}

fn percent(part: u64, whole: u64) -> String {
    format!("{:.2}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// `bytes` in the largest binary unit that keeps a number of at least 1
/// (`8.00 MiB`), or in bytes below 1 KiB.
fn fmt_size(bytes: usize) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = None;
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = Some(u);
    }
    match unit {
        Some(u) => format!("{v:.2} {u}"),
        None => format!("{bytes} B"),
    }
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
        assert!(parse_size("").is_err());
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(fmt_size(0), "0 B");
        assert_eq!(fmt_size(1023), "1023 B");
        assert_eq!(fmt_size(1024), "1.00 KiB");
        assert_eq!(fmt_size(8 << 20), "8.00 MiB");
        assert_eq!(fmt_size(3 << 29), "1.50 GiB");
    }
}
