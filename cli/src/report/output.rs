//! The measured points, and their table and CSV.

use super::rows::Row;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::Duration;
use stripecount_baselines::harness::Measured;

/// Measured samples per point. The point's throughput is their median: one
/// sample hit by a scheduling stall (common on a shared 2-core VM) does not
/// move it, and the spread (min, max) is kept in the CSV.
pub const SAMPLES: usize = 3;

/// One measured point.
#[derive(Debug, Clone)]
pub struct Point {
    /// Threads sharing the instance.
    pub threads: usize,
    /// The median sample (by throughput).
    pub measured: Measured,
    /// Every sample's throughput, ascending.
    pub samples: Vec<f64>,
}

impl Point {
    /// The point made of `samples` (at least one).
    pub fn new(threads: usize, mut samples: Vec<Measured>) -> Point {
        assert!(!samples.is_empty(), "a point has samples");
        samples.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
        Point {
            threads,
            measured: samples[samples.len() / 2],
            samples: samples.iter().map(Measured::ops_per_sec).collect(),
        }
    }
}

/// One row's points, in thread-count order.
pub struct RowResult<'a> {
    /// The row.
    pub row: &'a Row,
    /// Its points.
    pub points: Vec<Point>,
}

/// Everything one run measured.
pub struct Report<'a> {
    /// The thread counts, ascending.
    pub threads: Vec<usize>,
    /// Measured time per point (all samples together).
    pub duration: Duration,
    /// Warm-up before each point.
    pub warm_up: Duration,
    /// The machine's core count.
    pub cores: usize,
    /// The rows, the reference first.
    pub rows: Vec<RowResult<'a>>,
}

impl Report<'_> {
    /// Operations per second of `row` at `threads`.
    pub fn ops_per_sec(&self, row: &RowResult<'_>, threads: usize) -> Option<f64> {
        row.points
            .iter()
            .find(|p| p.threads == threads)
            .map(|p| p.measured.ops_per_sec())
    }

    /// `row`'s throughput over the reference's at `threads`.
    pub fn ratio(&self, row: &RowResult<'_>, threads: usize) -> Option<f64> {
        let reference = self.rows.iter().find(|r| r.row.is_reference())?;
        let base = self.ops_per_sec(reference, threads)?;
        let ours = self.ops_per_sec(row, threads)?;
        (base > 0.0).then(|| ours / base)
    }

    /// The one-line description of how the points were measured.
    pub fn setting(&self) -> String {
        format!(
            "{} cores; each point: all threads share one instance, start together after a barrier, \
             {} warm-up then {} samples of {} (median shown)",
            self.cores,
            fmt_duration(self.warm_up),
            SAMPLES,
            fmt_duration(self.duration / SAMPLES as u32)
        )
    }

    /// The table printed on standard output.
    pub fn table(&self) -> String {
        let name_w = self
            .rows
            .iter()
            .map(|r| r.row.name.len())
            .max()
            .unwrap_or(0)
            .max(14);
        let cell_w = 15;
        let mut out = String::new();
        let _ = writeln!(out, "stripecount contention report");
        let _ = writeln!(out, "{}", self.setting());
        let _ = writeln!(
            out,
            "cell = throughput / one shared AtomicU64's at the same thread count, then operations per second"
        );
        let _ = writeln!(out);
        let _ = write!(out, "{:<name_w$}  {:<8}", "implementation", "group");
        for &t in &self.threads {
            let head = if t == 1 {
                "1 thread".to_string()
            } else {
                format!("{t} threads")
            };
            let _ = write!(out, "  {head:>cell_w$}");
        }
        let _ = writeln!(out);
        let mut group = None;
        for r in &self.rows {
            if group.is_some() && group != Some(r.row.group) {
                let _ = writeln!(out);
            }
            group = Some(r.row.group);
            let _ = write!(out, "{:<name_w$}  {:<8}", r.row.name, r.row.group.name());
            for &t in &self.threads {
                let cell = match (self.ratio(r, t), self.ops_per_sec(r, t)) {
                    (Some(x), Some(ops)) => format!("{} {:>7}", fmt_ratio(x), fmt_ops(ops)),
                    (None, Some(ops)) => format!("{:>6} {:>7}", "-", fmt_ops(ops)),
                    _ => "-".to_string(),
                };
                let _ = write!(out, "  {cell:>cell_w$}");
            }
            let _ = writeln!(out);
        }
        out
    }

    /// Writes one CSV line per point.
    pub fn write_csv(&self, w: &mut impl Write) -> io::Result<()> {
        writeln!(
            w,
            "implementation,group,origin,threads,ops_per_sec,ratio_to_atomic_u64,\
             min_ops_per_sec,max_ops_per_sec,ops,elapsed_ns"
        )?;
        for r in &self.rows {
            for p in &r.points {
                writeln!(
                    w,
                    "{},{},{},{},{:.0},{},{:.0},{:.0},{},{}",
                    csv_field(r.row.name),
                    r.row.group.name(),
                    r.row.origin.name(),
                    p.threads,
                    p.measured.ops_per_sec(),
                    self.ratio(r, p.threads)
                        .map_or(String::new(), |x| format!("{x:.4}")),
                    p.samples[0],
                    p.samples[p.samples.len() - 1],
                    p.measured.ops,
                    p.measured.elapsed.as_nanos()
                )?;
            }
        }
        w.flush()
    }
}

/// Quotes a CSV field if it needs it (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `0.52x`, `1.93x`, `0.004x`: at least two significant digits.
pub fn fmt_ratio(x: f64) -> String {
    if x >= 0.095 {
        format!("{x:.2}x")
    } else if x >= 0.0095 {
        format!("{x:.3}x")
    } else {
        format!("{x:.4}x")
    }
}

/// Operations per second with an SI suffix: `402.1M`, `15.3k`, `1.21G`.
pub fn fmt_ops(ops: f64) -> String {
    if ops >= 1e9 {
        format!("{:.2}G", ops / 1e9)
    } else if ops >= 1e6 {
        format!("{:.1}M", ops / 1e6)
    } else if ops >= 1e3 {
        format!("{:.1}k", ops / 1e3)
    } else {
        format!("{ops:.0}")
    }
}

/// `350ms`, `1.5s`.
pub fn fmt_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{}s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_its_median_sample() {
        let m = |ops, ms| Measured {
            ops,
            elapsed: Duration::from_millis(ms),
        };
        // 1000/s, 10/s (a stalled sample), 2000/s.
        let p = Point::new(4, vec![m(1000, 1000), m(10, 1000), m(4000, 2000)]);
        assert_eq!(p.threads, 4);
        assert_eq!(p.measured.ops, 1000);
        assert_eq!(p.samples, vec![10.0, 1000.0, 2000.0]);
    }

    #[test]
    fn numbers_are_formatted_for_reading() {
        assert_eq!(fmt_ops(402_123_456.0), "402.1M");
        assert_eq!(fmt_ops(1_210_000_000.0), "1.21G");
        assert_eq!(fmt_ops(15_300.0), "15.3k");
        assert_eq!(fmt_ops(12.0), "12");
        assert_eq!(fmt_ratio(1.0), "1.00x");
        assert_eq!(fmt_ratio(0.0042), "0.0042x");
        assert_eq!(fmt_ratio(0.042), "0.042x");
        assert_eq!(fmt_duration(Duration::from_millis(350)), "350ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\", ok"), "\"say \"\"hi\"\", ok\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
