//! `hotkeys`' input: standard input read line by line (in place in the
//! reader's buffer), each line parsed as a key or `<millis> <key>`, with the
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
    // The time's digits, read as they are counted (at most 19: any 19
    // digits fit in a u64).
    let mut ms = 0u64;
    let mut digits = 0;
    for &b in line {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        if digits == 19 {
            return None;
        }
        ms = ms * 10 + u64::from(d);
        digits += 1;
    }
    if digits == 0 {
        return None;
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
    ///
    /// The lines that lie whole in the reader's buffer are parsed where they
    /// are (one `memchr` pass over the buffer); only a line cut by the
    /// buffer's end is copied, into one reused line buffer, and completed
    /// from the next read.
    pub(super) fn for_each_record(
        &mut self,
        mut input: impl BufRead,
        mut f: impl FnMut(u64, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        let mut line = Vec::with_capacity(256);
        loop {
            let buf = input.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', buf) {
                let whole = &buf[start..=end];
                start = end + 1;
                if !self.record(whole, &mut f)? {
                    return Ok(());
                }
            }
            if start == buf.len() {
                let n = buf.len();
                input.consume(n);
                continue;
            }
            // A line cut by the buffer's end (or the last line, without
            // its newline): copied, and completed from the next read.
            line.clear();
            line.extend_from_slice(&buf[start..]);
            let n = buf.len();
            input.consume(n);
            input.read_until(b'\n', &mut line)?;
            if !self.record(&line, &mut f)? {
                return Ok(());
            }
        }
    }

    /// One line: counted, parsed, and given to `f` at its effective time
    /// (or counted as malformed). `f`'s answer: go on.
    #[inline(always)]
    fn record(
        &mut self,
        line: &[u8],
        f: &mut impl FnMut(u64, &[u8]) -> io::Result<bool>,
    ) -> io::Result<bool> {
        self.lines += 1;
        let Some((t, key)) = parse_line(line, self.timestamps) else {
            self.malformed += 1;
            return Ok(true);
        };
        let ms = self.time(t);
        f(ms, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines cut by the reader's buffer at every place (buffers of 1 to 9
    /// bytes), a last line without its newline, blank and malformed lines:
    /// the same records and counts as one line at a time.
    #[test]
    fn lines_cut_by_the_buffer_are_read_whole() {
        let text = b"5 a\n7 bb\n\nx y\n6 ccc\r\n12 dddd\n13 e";
        let expect: Vec<(u64, Vec<u8>)> = vec![
            (5, b"a".to_vec()),
            (7, b"bb".to_vec()),
            (7, b"ccc".to_vec()),
            (12, b"dddd".to_vec()),
            (13, b"e".to_vec()),
        ];
        for cap in 1..10 {
            let mut r = Reader::new(true);
            let mut got = Vec::new();
            let input = io::BufReader::with_capacity(cap, &text[..]);
            r.for_each_record(input, |ms, key| {
                got.push((ms, key.to_vec()));
                Ok(true)
            })
            .unwrap();
            assert_eq!(got, expect, "buffer of {cap} bytes");
            assert_eq!(
                (r.lines, r.malformed, r.backwards),
                (7, 2, 1),
                "buffer of {cap}"
            );
        }
        // `f` stops the reading: no line after it is counted.
        let mut r = Reader::new(true);
        let input = io::BufReader::with_capacity(4, &text[..]);
        r.for_each_record(input, |ms, _| Ok(ms < 7)).unwrap();
        assert_eq!(r.lines, 2);
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
        assert_eq!(
            parse_line(b"9999999999999999999 k\n", true),
            Some((Some(9_999_999_999_999_999_999), &b"k"[..]))
        );
        assert_eq!(parse_line(b"007 k\n", true), Some((Some(7), &b"k"[..])));
    }
}
