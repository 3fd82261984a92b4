//! `stripecount hotkeys`: hot-key detection over keys read from stdin.
//!
//! ```text
//! hotkeys --window 10s --slices 10 --threshold 1000 [--top 20] [--timestamps] [--threads N]
//!         [--memory 8MiB] [--rate N] | [--max-keys N]
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
//! timestamps, the `hot` records of exact counts are the same set as with
//! one thread (with `--max-keys` or `--memory`, which keys a full slice
//! tracks, or which share a doorkeeper's counters, can depend on the
//! workers' interleaving).
//! Idle keys are then evicted by the reading thread at a time every worker
//! has reached (workers lag the reader, so a worker's own time cannot be
//! used), instead of by the detector's automatic sweep.
//!
//! By default every key live in the window has an exact count, and memory
//! grows with the number of distinct keys. `--max-keys N` bounds it: a
//! slice holds at most N keys, and the adds of a key a full slice does not
//! hold are not counted. `--memory SIZE` counts with `HotKeySketch` in that
//! memory whatever the key space (`modes.rs`): a key's adds in a slice are
//! counted from the sketch's admission level on, so a reported sum is never
//! above the true one and at most `slices * (level - 1)` below it (each key
//! is added by one thread, so in one doorkeeper shard), plus the admitted
//! adds a full slice did not track. Either mode says on stderr, at the
//! end, what it dropped: the adds kept back by the doorkeeper (and their
//! share), the adds not tracked, the admission level and the memory held
//! against the limit. A run in which a full slice left adds untracked
//! ends with a warning line (`hotkeys: warning: ...`, with how many): its
//! hot records may miss keys at the threshold. `--rate N` (the stream's
//! adds a second) sizes `--memory` for the stream
//! (`HotKeySketch::memory_for`), or refuses a `--memory` below it.
//!
//! Speed: stdin through a 1 MiB `BufReader` and `read_until` into one
//! reused buffer, keys looked up by `&[u8]` (no allocation for known keys),
//! up to 64 consecutive lines of one time added by one `add_many_at`
//! (`batch.rs`: the keys' cache misses overlap; the same output as one
//! add a line), stdout through a `BufWriter`.

mod batch;
mod escape;
#[cfg(feature = "fuzzing")]
pub mod fuzz;
mod input;
mod key;
mod modes;
mod threads;

use batch::Lines;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use escape::write_key;
use input::{ns, Reader};
use key::{Key, KeyRef};
use modes::{parse_size, Detect, Exact, Sketch};
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{HotKeyDetector, HotKeySketch};
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
        "With --memory SIZE (bytes, or a number with KiB, MiB, GiB, KB, MB or GB) the counts \
         are kept in that memory whatever the number of distinct keys: a key's adds in a slice \
         are counted once they reach an admission level (from the first add in a slice after \
         one in which the key reached it); the others are kept back and counted nowhere. A \
         reported sum is never above the key's true count (a hot record is never a false \
         positive) and at most slices x (level - 1) below it (each key's adds are made by \
         one thread, so they meet one doorkeeper shard), plus any admitted adds not \
         tracked because a slice was full. Stderr gives, at the end, the adds kept back, the \
         adds not tracked, the admission level and the memory held against the limit.\n\n",
        "Without --memory every key live in the window is counted exactly, in memory that \
         grows with the number of distinct keys. --max-keys N bounds the keys a slice holds: \
         the adds of a key a full slice does not hold are not counted, and stderr says how \
         many. --memory and --max-keys cannot be used together.\n\n",
        "A run whose adds were not all tracked (a full slice) ends with a warning line on \
         stderr, `hotkeys: warning: N of M adds (P%) were not tracked ...`: keys at the \
         threshold may be missing from its hot records. --rate N (adds a second, every key) \
         sizes the fixed memory for the stream: the memory that holds every key that can \
         reach the threshold at that rate, and a doorkeeper that keeps the long tail out; \
         with --memory, a memory below that is refused.\n\n",
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
    /// Count in this memory whatever the number of distinct keys (e.g. 8MiB, 512KiB, 1GiB,
    /// or bytes); counts may fall short by a bound printed on stderr
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "max_keys")]
    memory: Option<usize>,
    /// Exact counts, with at most N keys in each slice (adds of further keys are not counted)
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    max_keys: Option<usize>,
    /// The stream's adds a second: counts in fixed memory sized for it, or refuses a --memory
    /// below what it needs
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..),
        conflicts_with = "max_keys"
    )]
    rate: Option<u64>,
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
    let mut reader = Reader::new(opts.timestamps);
    let built = match (opts.memory, opts.rate) {
        (None, None) => exact(&opts).map(|d| run_with(d, &opts, &mut reader)),
        (memory, _) => sketch(&opts, memory).map(|d| run_with(d, &opts, &mut reader)),
    };
    let (result, summary, warning) = match built {
        Ok(r) => r,
        // A window or memory the detector refuses (zero slices, uneven
        // slices, too little memory, less than --rate needs): a usage
        // error like clap's own.
        Err(e) => return usage(&Opts::command().error(ErrorKind::ValueValidation, e)),
    };
    match result {
        Ok(()) => {
            eprintln!(
                "hotkeys: {} lines, {} malformed, {} timestamps went backwards",
                reader.lines, reader.malformed, reader.backwards
            );
            for line in summary {
                eprintln!("hotkeys: {line}");
            }
            if let Some(w) = warning {
                eprintln!("hotkeys: warning: {w}");
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

/// The sketch `--memory` and `--rate` ask for (its default memory
/// without `--memory`).
fn sketch(opts: &Opts, memory: Option<usize>) -> Result<Sketch, stripecount::ConfigError> {
    let mut b =
        HotKeySketch::builder(opts.window, opts.slices, opts.threshold).clock(ManualClock::new());
    if let Some(m) = memory {
        b = b.memory(m);
    }
    if let Some(r) = opts.rate {
        b = b.adds_per_second(r);
    }
    b.build()
}

/// The exact detector (`--max-keys`, or unbounded).
fn exact(opts: &Opts) -> Result<Exact, stripecount::ConfigError> {
    HotKeyDetector::builder(opts.window, opts.slices, opts.threshold)
        .clock(ManualClock::new())
        .max_keys(opts.max_keys.unwrap_or(usize::MAX))
        .build()
}

/// Runs the loop on `detector`; the result, the detector's summary
/// (lines for stderr) and its warning, if any.
fn run_with<D: Detect>(
    detector: D,
    opts: &Opts,
    reader: &mut Reader,
) -> (io::Result<()>, Vec<String>, Option<String>) {
    let detector = std::sync::Arc::new(detector);
    let result = if opts.threads == 1 {
        let out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
        run_single(&*detector, opts, reader, Reader::stdin(), out)
    } else {
        run_threads(&detector, opts, reader)
    };
    let adds = reader.lines - reader.malformed;
    (result, detector.summary(adds, opts), detector.warning(adds))
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

fn run_single(
    detector: &impl Detect,
    opts: &Opts,
    reader: &mut Reader,
    input: impl io::BufRead,
    mut out: impl Write,
) -> io::Result<()> {
    let mut lines = Lines::new();
    reader.for_each_record(input, |ms, key| {
        if lines.is_closed_to(ms) {
            add_lines(detector, &mut lines, &mut out)?;
        }
        lines.push(ms, key);
        Ok(true)
    })?;
    add_lines(detector, &mut lines, &mut out)?;
    write_top(&mut out, detector, reader.newest, opts.top)?;
    out.flush()
}

/// Adds a batch of lines (`batch.rs`) and writes its hot records, then
/// empties it.
fn add_lines(detector: &impl Detect, lines: &mut Lines, out: &mut impl Write) -> io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let ms = lines.ms;
    let mut written = Ok(());
    detector.add_many_at(lines.keys(), ns(ms), |key, sum| {
        if written.is_ok() {
            written = write_hot(out, ms, key.bytes(), sum);
        }
    });
    lines.clear();
    written
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
    fn numbers() {
        let mut b = itoa_buf();
        assert_eq!(fmt_u64(&mut b, 0), b"0");
        assert_eq!(fmt_u64(&mut b, u64::MAX), u64::MAX.to_string().as_bytes());
    }
}
