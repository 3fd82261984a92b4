//! `hotkeys`' parsers and loop, for the fuzz targets (`fuzz/` in the
//! repository; feature `fuzzing`). Each is the command's own code, called
//! on bytes instead of the process's arguments and standard input.

use super::input::{self, Reader};
use super::modes;
use super::{escape, exact, run_single, sketch, Opts};
use std::time::Duration;

/// The memory a fuzz run lets the options ask of the sketch: past it the
/// options are parsed but no detector is built (asking for gigabytes is
/// the user's right, not a finding; and a sketch's memory is allocated and
/// zeroed whole at its construction, which at 16 MiB would hold a fuzz run
/// to a few hundred inputs a second).
pub const MAX_MEMORY: usize = 1 << 20;

/// A line as `hotkeys` reads it: `(millis, key)`, `None` if malformed.
pub fn parse_line(line: &[u8], timestamps: bool) -> Option<(Option<u64>, &[u8])> {
    input::parse_line(line, timestamps)
}

/// `--window`'s value.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    super::parse_duration(s)
}

/// `--memory`'s value.
pub fn parse_size(s: &str) -> Result<usize, String> {
    modes::parse_size(s)
}

/// A key as the output writes it.
pub fn escape_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    escape::write_key(&mut out, key).expect("writing to a Vec");
    out
}

/// What `hotkeys` with `args` writes to standard output for `input`, on
/// one thread (`--threads` is ignored): `Err` with the usage error for
/// options it refuses, or that ask for more than [`MAX_MEMORY`]. Panics if
/// the detector then holds more than its bound: the sketch more than
/// `--memory`, the exact detector more than `--max-keys` keys a slice.
pub fn run(args: &[String], input: &[u8]) -> Result<Vec<u8>, String> {
    let mut opts = Opts::parse_args(args).map_err(|e| e.to_string())?;
    opts.threads = 1;
    let timestamps = opts.timestamps;
    let mut out = Vec::new();
    let mut reader = Reader::new(timestamps);
    let result = match opts.memory {
        Some(m) if m > MAX_MEMORY => return Err("more memory than a fuzz run allows".into()),
        Some(m) => {
            let d = sketch(&opts, Some(m)).map_err(|e| e.to_string())?;
            let r = run_single(&d, &opts, &mut reader, input, &mut out);
            // The sketch's promise: never more than the memory given;
            // checked from 16 KiB, as a sketch built on 5-8 KiB holds more
            // than it was given from the start (FUZZING.md).
            let (held, limit) = (d.memory_bytes(), d.memory_limit());
            assert!(
                held <= limit || m < 16 << 10,
                "{held} bytes held of {limit}"
            );
            r
        }
        None => {
            let d = exact(&opts).map_err(|e| e.to_string())?;
            let r = run_single(&d, &opts, &mut reader, input, &mut out);
            // `--max-keys`: at most that many keys a slice.
            let held = d.windows().len();
            let most = (opts.max_keys.unwrap_or(usize::MAX)).saturating_mul(opts.slices);
            assert!(held <= most, "{held} entries, at most {most}");
            r
        }
    };
    result.expect("writing to a Vec");
    Ok(out)
}
