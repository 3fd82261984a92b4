//! `stripecount hotkeys`: hot-key detection over keys read from stdin.
//!
//! ```text
//! hotkeys --window 10s --slices 10 --threshold 1000 [--top 20] [--timestamps] [--threads N]
//!         [--memory 8MiB | --max-keys N]
//! ```
//!
//! Each line is a key, or with `--timestamps` `<millis> <key>`; keys are
//! bytes (a binary stream is fine: only `\n` ends a line). Output is
//! tab-separated: `hot\t<millis>\t<key>\t<sum>` each time a key becomes hot,
//! then `top\t<key>\t<sum>` for the `--top` keys at the last time (ties by
//! key). Keys are escaped ([`write_key`]; the rule is in `--help`) so that
//! a record is always one line of four (or three) fields of valid UTF-8. Malformed lines
//! and backwards timestamps (treated as the newest time seen) are counted
//! and reported on stderr at the end.
//!
//! With `--threads N`, the reading thread deals lines to N workers by a
//! hash of the key, so each key's lines keep their order and, with
//! timestamps, the `hot` records are the same set as with one thread.
//! Idle keys are then evicted by the reading thread at a time every worker
//! has reached (workers lag the reader, so a worker's own time cannot be
//! used), instead of by the detector's automatic sweep.
//!
//! By default every key live in the window has an exact count, and memory
//! grows with the number of distinct keys. `--max-keys N` bounds it (keys
//! past N in a slice are not counted); `--memory SIZE` counts with
//! `HotKeySketch` in that memory whatever the key space (`modes.rs`). Both
//! say on stderr, at the end, what they dropped or estimated.
//!
//! Speed: stdin through a 1 MiB `BufReader` and `read_until` into one
//! reused buffer, keys looked up by `&[u8]` (no allocation for known keys),
//! `add_at` with the line's time, stdout through a `BufWriter`.

mod escape;
mod key;
mod modes;
mod threads;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use escape::write_key;
use key::{Key, KeyRef};
use modes::{parse_size, Detect, Exact, Sketch};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch, Timestamp};
use threads::run_threads;

/// stripecount hotkeys: the keys of a stream that become hot.
#[derive(Debug, Parser)]
#[command(
    name = "stripecount hotkeys",
    bin_name = "stripecount hotkeys",
    about = "Reads keys from standard input, one per line, counts each in a sliding window, and \
             reports every key whose window sum reaches the threshold.",
    after_help = concat!(
        "Output (stdout), tab-separated: `hot<TAB><millis><TAB><key><TAB><sum>` each time a key \
         becomes hot, then `top<TAB><key><TAB><sum>` for the --top keys at the end (ties by \
         key). Malformed lines and timestamps that go backwards are counted on stderr.\n\n",
        "With --memory SIZE the counts are kept in that memory whatever the number of distinct \
         keys: a key's adds are counted once it reaches an admission level in a slice, so a sum \
         can fall short of the true count (by at most the bound printed on stderr, never over). \
         Without it every live key is counted exactly; --max-keys N bounds the keys a slice \
         holds (later keys of a full slice are not counted). Either way stderr says what was \
         dropped.\n\n",
        "Keys are escaped so that every record is one line of tab-separated fields in valid \
         UTF-8: a tab is written \\t, a newline \\n, a carriage return \\r, a backslash \\\\, \
         any other ASCII control byte (0x00-0x1F, 0x7F) and every byte that is not part of \
         valid UTF-8 as \\xNN (two lowercase hex digits); every other character as is. \
         Unescaping gives back the key's bytes."
    )
)]
struct Opts {
    /// Window length: a number with ms, s, m or h (e.g. 10s)
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    window: Duration,
    /// Slices per window (the window must divide evenly)
    #[arg(long, value_name = "N")]
    slices: usize,
    /// A key is hot once its window sum reaches N (N >= 1)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    threshold: u64,
    /// Keys listed at the end
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Lines are `<millis> <key>`; otherwise the real clock is used
    #[arg(long)]
    timestamps: bool,
    /// Workers sharing one detector
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    threads: usize,
    /// Count in fixed memory (e.g. 8MiB, 512KiB, 1GiB), whatever the number of distinct keys
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "max_keys")]
    memory: Option<usize>,
    /// Exact counts, with at most N keys in each slice (later keys are not counted)
    #[arg(long, value_name = "N")]
    max_keys: Option<usize>,
}

/// Parses `10ms`, `10s`, `5m`, `1h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid duration `{s}`: expected a number and a unit (ms, s, m, h)")
    })?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or("duration too long")?,
        "h" => n
            .checked_mul(3600)
            .map(Duration::from_secs)
            .ok_or("duration too long")?,
        _ => {
            return Err(format!(
                "invalid duration `{s}`: the unit must be ms, s, m or h"
            ))
        }
    };
    Ok(d)
}

impl Opts {
    /// Parses `args` (the command line after `hotkeys`).
    fn parse_args(args: &[String]) -> Result<Opts, clap::Error> {
        Opts::try_parse_from(
            std::iter::once("stripecount hotkeys".to_string()).chain(args.iter().cloned()),
        )
    }
}

/// One parsed line: `(millis, key)`, or `None` if malformed.
#[inline]
fn parse_line(line: &[u8], timestamps: bool) -> Option<(Option<u64>, &[u8])> {
    let mut line = line;
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    if !timestamps {
        return (!line.is_empty()).then_some((None, line));
    }
    let digits = line.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut ms = 0u64;
    for &b in &line[..digits] {
        ms = ms * 10 + u64::from(b - b'0');
    }
    let rest = &line[digits..];
    let ws = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let key = &rest[ws..];
    let key_end = key.iter().rposition(|b| !b.is_ascii_whitespace())? + 1;
    if ws == 0 {
        return None;
    }
    Some((Some(ms), &key[..key_end]))
}

/// The detector's time of a line's `ms` (milliseconds of stream time).
fn ns(ms: u64) -> Timestamp {
    Timestamp::from_nanos(ms.saturating_mul(1_000_000))
}

/// Stream-wide state kept by the reading thread.
struct Reader {
    timestamps: bool,
    start: Instant,
    newest: u64,
    lines: u64,
    malformed: u64,
    backwards: u64,
}

impl Reader {
    /// The effective time (millis) of a parsed line.
    #[inline]
    fn time(&mut self, parsed: Option<u64>) -> u64 {
        let t = match parsed {
            Some(t) => t,
            None => self.start.elapsed().as_millis() as u64,
        };
        if t < self.newest {
            if self.timestamps {
                self.backwards += 1;
            }
            self.newest
        } else {
            self.newest = t;
            t
        }
    }
}

impl Reader {
    /// Reads standard input to the end, line by line, and calls
    /// `f(millis, key)` for every well-formed line at its effective time
    /// (malformed lines and backwards timestamps are counted here). `f`
    /// returns `Ok(false)` to stop early.
    fn for_each_record(
        &mut self,
        mut f: impl FnMut(u64, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        let mut input = BufReader::with_capacity(1 << 20, io::stdin().lock());
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                return Ok(());
            }
            self.lines += 1;
            let Some((t, key)) = parse_line(&line, self.timestamps) else {
                self.malformed += 1;
                continue;
            };
            let ms = self.time(t);
            if !f(ms, key)? {
                return Ok(());
            }
        }
    }
}

#[inline]
fn write_hot(out: &mut impl Write, ms: u64, key: &[u8], sum: u64) -> io::Result<()> {
    let mut b = itoa_buf();
    out.write_all(b"hot\t")?;
    out.write_all(fmt_u64(&mut b, ms))?;
    out.write_all(b"\t")?;
    write_key(out, key)?;
    out.write_all(b"\t")?;
    out.write_all(fmt_u64(&mut b, sum))?;
    out.write_all(b"\n")
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

fn fmt_u64(buf: &mut [u8; 20], mut v: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// Exit code of a usage error (as clap uses).
const USAGE: u8 = 2;

/// Prints a usage error (or the help) and gives the exit code.
fn usage(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(USAGE)
    } else {
        ExitCode::SUCCESS // --help
    }
}

pub fn run(args: &[String]) -> ExitCode {
    let opts = match Opts::parse_args(args) {
        Ok(o) => o,
        Err(e) => return usage(&e),
    };
    let mut reader = Reader {
        timestamps: opts.timestamps,
        start: Instant::now(),
        newest: 0,
        lines: 0,
        malformed: 0,
        backwards: 0,
    };
    let built = match opts.memory {
        Some(memory) => HotKeySketch::builder(opts.window, opts.slices, opts.threshold)
            .clock(ManualClock::new())
            .memory(memory)
            .build()
            .map(|d| run_with::<Sketch>(d, &opts, &mut reader)),
        None => {
            let b = HotKeyDetector::builder(opts.window, opts.slices, opts.threshold)
                .clock(ManualClock::new());
            b.max_keys(opts.max_keys.unwrap_or(usize::MAX))
                .build()
                .map(|d| run_with::<Exact>(d, &opts, &mut reader))
        }
    };
    let (result, summary) = match built {
        Ok(r) => r,
        // A window or memory the detector refuses (zero slices, uneven
        // slices, too little memory): a usage error like clap's own.
        Err(e) => return usage(&Opts::command().error(ErrorKind::ValueValidation, e)),
    };
    match result {
        Ok(()) => {
            eprintln!(
                "hotkeys: {} lines, {} malformed, {} timestamps went backwards",
                reader.lines, reader.malformed, reader.backwards
            );
            if let Some(summary) = summary {
                eprintln!("hotkeys: {summary}");
            }
            ExitCode::SUCCESS
        }
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hotkeys: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the loop on `detector`; the result and the detector's summary.
fn run_with<D: Detect>(
    detector: D,
    opts: &Opts,
    reader: &mut Reader,
) -> (io::Result<()>, Option<String>) {
    let detector = std::sync::Arc::new(detector);
    let result = if opts.threads == 1 {
        run_single(&*detector, opts, reader)
    } else {
        run_threads(&detector, opts, reader)
    };
    let adds = reader.lines - reader.malformed;
    (result, detector.summary(adds))
}

fn write_top(
    out: &mut impl Write,
    detector: &impl Detect,
    newest: u64,
    top: usize,
) -> io::Result<()> {
    if top == 0 {
        return Ok(());
    }
    // All non-zero keys, so that ties at the cut are broken by key.
    let mut best = detector.top_at(ns(newest));
    best.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.bytes().cmp(b.0.bytes())));
    best.truncate(top);
    let mut b = itoa_buf();
    for (key, sum) in best {
        out.write_all(b"top\t")?;
        write_key(out, key.bytes())?;
        out.write_all(b"\t")?;
        out.write_all(fmt_u64(&mut b, sum))?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn run_single(detector: &impl Detect, opts: &Opts, reader: &mut Reader) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    reader.for_each_record(|ms, key| {
        if let Some(sum) = detector.became_hot_at(KeyRef::new(key), ns(ms), 1) {
            write_hot(&mut out, ms, key, sum)?;
        }
        Ok(true)
    })?;
    write_top(&mut out, detector, reader.newest, opts.top)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms").unwrap(), Duration::from_millis(10));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10d").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn lines() {
        assert_eq!(parse_line(b"abc\n", false), Some((None, &b"abc"[..])));
        assert_eq!(parse_line(b"abc\r\n", false), Some((None, &b"abc"[..])));
        assert_eq!(parse_line(b"\n", false), None);
        assert_eq!(
            parse_line(b"12 k ey \n", true),
            Some((Some(12), &b"k ey"[..]))
        );
        assert_eq!(parse_line(b"12\tk\n", true), Some((Some(12), &b"k"[..])));
        assert_eq!(parse_line(b"12k\n", true), None);
        assert_eq!(parse_line(b"x k\n", true), None);
        assert_eq!(parse_line(b"12 \n", true), None);
        assert_eq!(parse_line(b"99999999999999999999 k\n", true), None);
    }

    #[test]
    fn numbers() {
        let mut b = itoa_buf();
        assert_eq!(fmt_u64(&mut b, 0), b"0");
        assert_eq!(fmt_u64(&mut b, u64::MAX), u64::MAX.to_string().as_bytes());
    }
}
