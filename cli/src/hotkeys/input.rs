//! `hotkeys`' input: standard input read line by line into one reused
//! buffer, each line parsed as a key or `<millis> <key>`, with the
//! stream-wide counts (lines, malformed, backwards timestamps).

use std::io::{self, BufRead, BufReader};
use std::time::Instant;
use stripecount::Timestamp;

/// One parsed line: `(millis, key)`, or `None` if malformed.
#[inline]
pub(super) fn parse_line(line: &[u8], timestamps: bool) -> Option<(Option<u64>, &[u8])> {
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
pub(super) fn ns(ms: u64) -> Timestamp {
    Timestamp::from_nanos(ms.saturating_mul(1_000_000))
}

/// Stream-wide state kept by the reading thread.
pub(super) struct Reader {
    timestamps: bool,
    start: Instant,
    /// The newest time seen (millis).
    pub(super) newest: u64,
    /// Lines read.
    pub(super) lines: u64,
    /// Lines that were not a key (or not `<millis> <key>`).
    pub(super) malformed: u64,
    /// Timestamps older than the newest seen.
    pub(super) backwards: u64,
}

impl Reader {
    /// A reader of standard input; `timestamps`: lines are
    /// `<millis> <key>`, otherwise the time is read from the real clock.
    pub(super) fn new(timestamps: bool) -> Reader {
        Reader {
            timestamps,
            start: Instant::now(),
            newest: 0,
            lines: 0,
            malformed: 0,
            backwards: 0,
        }
    }

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

    /// Standard input, buffered for [`for_each_record`](Self::for_each_record).
    pub(super) fn stdin() -> impl BufRead {
        BufReader::with_capacity(1 << 20, io::stdin().lock())
    }

    /// Reads `input` (standard input: [`stdin`](Self::stdin)) to the end, line by line, and calls
    /// `f(millis, key)` for every well-formed line at its effective time
    /// (malformed lines and backwards timestamps are counted here). `f`
    /// returns `Ok(false)` to stop early.
    pub(super) fn for_each_record(
        &mut self,
        mut input: impl BufRead,
        mut f: impl FnMut(u64, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
