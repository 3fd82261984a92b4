//! How `hotkeys` writes a key into its tab-separated output: escaped, so
//! that every record is one line of tab-separated fields in valid UTF-8
//! whatever bytes the key holds (keys are read as bytes: a binary stream
//! is fine). The rule, also in `--help`:
//!
//! - a tab `\t`, a newline `\n`, a carriage return `\r`, a backslash
//!   `\\`;
//! - any other ASCII control byte (0x00-0x1F, 0x7F) and every byte that is
//!   not part of valid UTF-8: `\xNN`, two lowercase hex digits;
//! - every other character as is (UTF-8 text stays readable).
//!
//! Unescaping gives back the key's bytes (`tests` below and
//! `cli/tests/hotkeys.rs` check it end to end).

use std::io::{self, Write};

/// Writes `key` escaped (the rule is in `--help`): `\t`, `\n`, `\r`,
/// `\\`, `\xNN` for other ASCII control bytes and for bytes that are not
/// part of valid UTF-8; everything else as is. A key that needs no escape
/// (the common case) is one `write_all`.
pub(super) fn write_key(out: &mut impl Write, key: &[u8]) -> io::Result<()> {
    if key.iter().all(|&b| (0x20..0x7f).contains(&b) && b != b'\\') {
        return out.write_all(key);
    }
    for chunk in key.utf8_chunks() {
        let text = chunk.valid().as_bytes();
        let mut start = 0;
        for (i, &b) in text.iter().enumerate() {
            let escape: &[u8] = match b {
                b'\t' => b"\\t",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\\' => b"\\\\",
                0x00..=0x1f | 0x7f => b"",
                _ => continue,
            };
            out.write_all(&text[start..i])?;
            if escape.is_empty() {
                write_hex(out, b)?;
            } else {
                out.write_all(escape)?;
            }
            start = i + 1;
        }
        out.write_all(&text[start..])?;
        for &b in chunk.invalid() {
            write_hex(out, b)?;
        }
    }
    Ok(())
}

/// `\xNN`, two lowercase hex digits.
fn write_hex(out: &mut impl Write, b: u8) -> io::Result<()> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.write_all(&[
        b'\\',
        b'x',
        HEX[usize::from(b >> 4)],
        HEX[usize::from(b & 15)],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse of [`write_key`], as a consumer of the output would
    /// write it.
    fn unescape(s: &str) -> Vec<u8> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'\\' {
                out.push(b[i]);
                i += 1;
                continue;
            }
            match b[i + 1] {
                b't' => out.push(b'\t'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b'\\' => out.push(b'\\'),
                b'x' => {
                    let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 2;
                }
                other => panic!("unknown escape \\{}", other as char),
            }
            i += 2;
        }
        out
    }

    fn escaped(key: &[u8]) -> String {
        let mut out = Vec::new();
        write_key(&mut out, key).unwrap();
        String::from_utf8(out).expect("escaped keys are UTF-8")
    }

    #[test]
    fn keys_are_escaped_and_unescape_to_their_bytes() {
        let cases: [(&[u8], &str); 9] = [
            (b"plain key", "plain key"),
            (b"a\tb", "a\\tb"),
            (b"a\nb\rc", "a\\nb\\rc"),
            (b"back\\slash", "back\\\\slash"),
            (b"\x00\x1b[0m\x7f", "\\x00\\x1b[0m\\x7f"),
            ("caf\u{e9} \u{1f600}".as_bytes(), "caf\u{e9} \u{1f600}"),
            (b"\xff\xfe", "\\xff\\xfe"),
            // A truncated UTF-8 sequence, then a valid one.
            (b"\xc3(\xc3\xa9", "\\xc3(\u{e9}"),
            (b"\\x41", "\\\\x41"),
        ];
        for (key, want) in cases {
            let got = escaped(key);
            assert_eq!(got, want, "{key:?}");
            assert!(!got.contains(['\t', '\n', '\r']));
            assert_eq!(unescape(&got), key, "{got}");
        }
        // Every byte value, alone and between others.
        for b in 0..=255u8 {
            let key = [b'k', b, b'\\', b];
            assert_eq!(unescape(&escaped(&key)), key, "{b}");
        }
    }
}
