//! The report's command-line options.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// Total time the default run aims for (warm-ups included), well under a
/// minute on a 2-core machine once set-up and scheduling are added.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(40);
/// Longest default measurement per point: longer buys little precision on a
/// noisy VM (run-to-run variation is larger than the sampling error).
pub const MAX_DEFAULT_DURATION: Duration = Duration::from_millis(400);
/// Shortest default measurement per point.
pub const MIN_DEFAULT_DURATION: Duration = Duration::from_millis(50);

/// stripecount: the contention report.
///
/// Measures every implementation with 1, 2, 4 and 8 threads (and the
/// machine's core count) sharing ONE instance, started together after a
/// barrier, each point a warm-up then the median of three timed samples.
/// Prints operations per second and the ratio to one shared AtomicU64 at the
/// same thread count (the AtomicU64 reference is always measured).
#[derive(Debug, Parser)]
#[command(name = "stripecount", version)]
#[command(
    about = "The contention report: throughput as threads are added, every thread sharing one \
             instance, as a ratio to one shared AtomicU64 (always measured) and in operations \
             per second. Progress on stderr, the table on stdout.",
    after_help = "Other command: `stripecount hotkeys --help`."
)]
pub struct Options {
    /// Thread counts, comma-separated [default: 1,2,4,8 plus the core count]
    #[arg(long, value_delimiter = ',', value_parser = parse_threads, value_name = "N,N,...")]
    pub threads: Vec<usize>,

    /// Measured time per point, e.g. 200ms or 1s, split into 3 samples (a
    /// warm-up of a quarter of it runs first) [default: 40 s spread over all
    /// points, at most 400ms]
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub duration: Option<Duration>,

    /// Only the rows whose name or group contains this (case-insensitive;
    /// repeat for several)
    #[arg(long, value_name = "SUBSTRING")]
    pub only: Vec<String>,

    /// Also write the points as CSV to FILE
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,

    /// Also plot throughput against thread count as SVG to FILE
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// List the rows and exit
    #[arg(long)]
    pub list: bool,
}

impl Options {
    /// Parses `args` (without the program name).
    pub fn parse_args(args: &[String]) -> Result<Options, clap::Error> {
        Options::try_parse_from(
            std::iter::once("stripecount".to_string()).chain(args.iter().cloned()),
        )
    }

    /// The thread counts to run: the given ones (sorted, deduplicated), or
    /// 1, 2, 4, 8 plus the machine's core count.
    pub fn thread_counts(&self) -> Vec<usize> {
        let mut t = if self.threads.is_empty() {
            let mut t = stripecount_baselines::harness::THREAD_COUNTS.to_vec();
            t.push(cores());
            t
        } else {
            self.threads.clone()
        };
        t.sort_unstable();
        t.dedup();
        t
    }

    /// The measured time per point for `points` points.
    pub fn duration_per_point(&self, points: usize) -> Duration {
        self.duration.unwrap_or_else(|| default_duration(points))
    }
}

/// The default measured time per point: the budget spread over `points`
/// points of (warm-up + measurement), clamped to
/// [`MIN_DEFAULT_DURATION`, `MAX_DEFAULT_DURATION`].
pub fn default_duration(points: usize) -> Duration {
    let per_point = DEFAULT_BUDGET / points.max(1) as u32;
    (per_point * 4 / 5).clamp(MIN_DEFAULT_DURATION, MAX_DEFAULT_DURATION)
}

/// The warm-up before a measurement of `d`: a quarter of it, at least 1 ms.
pub fn warm_up(d: Duration) -> Duration {
    (d / 4).max(Duration::from_millis(1))
}

/// The machine's core count (1 if unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Most threads a point may use: beyond this, thread start-up and memory
/// dominate and the number says nothing about contention.
pub const MAX_THREADS: usize = 1024;

fn parse_threads(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a thread count (expected e.g. 1,2,4)"))?;
    if n == 0 || n > MAX_THREADS {
        return Err(format!("thread counts must be 1..={MAX_THREADS}, got {n}"));
    }
    Ok(n)
}

/// Parses `200ms`, `1s`, `1.5s`, `500us` (a bare number is refused: the unit
/// must be said).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{s}` has no unit (use e.g. 200ms or 1s)"))?;
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (use e.g. 200ms or 1s)"))?;
    let secs = match unit {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "s" => value,
        _ => return Err(format!("unknown unit `{unit}` in `{s}` (use us, ms or s)")),
    };
    let d = Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))?;
    if d.is_zero() || d > Duration::from_secs(3600) {
        return Err(format!(
            "`{s}`: the duration must be above 0 and at most 1 hour"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["200", "ms", "2 h", "0ms", "-1s", "1.2.3s", "2h", "99999s"] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn options_parse_and_default() {
        let o =
            Options::parse_args(&args(&["--threads", "4,1,2,2", "--duration", "20ms"])).unwrap();
        assert_eq!(o.thread_counts(), vec![1, 2, 4]);
        assert_eq!(o.duration_per_point(1000), Duration::from_millis(20));
        let o = Options::parse_args(&[]).unwrap();
        let t = o.thread_counts();
        assert!(t.starts_with(&[1, 2]) && t.contains(&4) && t.contains(&8) && t.contains(&cores()));
        assert!(Options::parse_args(&args(&["--threads", "0"])).is_err());
        assert!(Options::parse_args(&args(&["--threads", "x"])).is_err());
        assert!(Options::parse_args(&args(&["--bogus"])).is_err());
        assert!(Options::parse_args(&args(&["--duration"])).is_err());
    }

    #[test]
    fn the_default_budget_is_spread_over_the_points() {
        // 22 rows x 4 thread counts: (d + d/4) x 88 stays within the budget.
        let d = default_duration(88);
        assert!((d + warm_up(d)) * 88 <= DEFAULT_BUDGET, "{d:?}");
        assert_eq!(default_duration(1), MAX_DEFAULT_DURATION);
        assert_eq!(default_duration(100_000), MIN_DEFAULT_DURATION);
    }
}
