//! `stripecount hotkeys`: its options and its input lines.
//!
//! Input: the first line is the command line after `hotkeys` (split on
//! whitespace), the rest is standard input.
//!
//! Checked: options give a detector or a usage error, never a panic; a
//! line parses as the documented `<key>` or `<millis> <key>`; a key's
//! escaped form is one field of valid UTF-8 that unescapes to the key; the
//! output is records of the documented form, naming keys of the input;
//! and with `--timestamps`, against a model of the window (every line
//! counted in the slice of its time, times that go backwards taken as the
//! newest): exact counts report each crossing of the threshold and the
//! top keys exactly, `--memory` and `--max-keys` never report more than
//! the true count (a hot record is never a false positive).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use stripecount_cli::__fuzz;

/// The key bytes of an escaped field (the rule in `hotkeys --help`).
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < field.len() {
        if field[i] != b'\\' {
            out.push(field[i]);
            i += 1;
            continue;
        }
        match field.get(i + 1) {
            Some(b't') => out.push(b'\t'),
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(b'\\') => out.push(b'\\'),
            Some(b'x') => {
                let hex = std::str::from_utf8(&field[i + 2..i + 4]).unwrap();
                assert_eq!(hex, hex.to_lowercase());
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 2;
            }
            other => panic!("a bad escape {other:?} in {field:?}"),
        }
        i += 2;
    }
    out
}

/// The input's lines as `read_until(b'\n')` gives them.
fn lines(input: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let flag = format!("--{name}");
    let eq = format!("--{name}=");
    for (i, a) in args.iter().enumerate() {
        if *a == flag {
            return args.get(i + 1).map(String::as_str);
        }
        if let Some(v) = a.strip_prefix(&eq) {
            return Some(v);
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let args: Vec<String> = String::from_utf8_lossy(&data[..split])
        .split_ascii_whitespace()
        .map(str::to_owned)
        .collect();
    let input = data.get(split + 1..).unwrap_or(&[]);
    let timestamps = args.iter().any(|a| a == "--timestamps");

    // Each option's parser, on each argument (the whole command line is
    // parsed, and its detector built, by `run` below).
    for a in &args {
        let _ = __fuzz::parse_duration(a);
        let _ = __fuzz::parse_size(a);
    }

    // The lines, and the model's records: (effective millis, key).
    let mut records = Vec::new();
    let mut newest = 0u64;
    for line in lines(input) {
        let stripped = {
            let mut l = line;
            while let [rest @ .., b'\n' | b'\r'] = l {
                l = rest;
            }
            l
        };
        let parsed = __fuzz::parse_line(line, timestamps);
        if let Some((ms, key)) = parsed {
            assert!(!key.is_empty());
            let escaped = __fuzz::escape_key(key);
            let text = std::str::from_utf8(&escaped).expect("an escaped key is UTF-8");
            assert!(!text.contains(['\t', '\n', '\r']), "{text:?}");
            assert!(!text.chars().any(|c| c.is_ascii_control()));
            assert_eq!(unescape(&escaped), key);
            match ms {
                None => assert_eq!(key, stripped),
                Some(ms) => {
                    // `<digits><whitespace><key>`, the key without its
                    // trailing whitespace.
                    let d = stripped.iter().take_while(|b| b.is_ascii_digit()).count();
                    let digits = std::str::from_utf8(&stripped[..d]).unwrap();
                    assert_eq!(digits.parse::<u64>().ok(), Some(ms));
                    assert!(stripped[d].is_ascii_whitespace());
                    assert_eq!(stripped[d..].trim_ascii(), key);
                    newest = newest.max(ms);
                    records.push((newest, key));
                }
            }
        } else if timestamps {
            // Malformed: no digits, more than 19, or no key after them.
            let digits = stripped.iter().take_while(|b| b.is_ascii_digit()).count();
            let rest = &stripped[digits..];
            let key_start = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
            let has_key = rest[key_start..].iter().any(|b| !b.is_ascii_whitespace());
            assert!(digits == 0 || digits > 19 || key_start == 0 || !has_key);
        } else {
            assert!(stripped.is_empty());
        }
    }

    let Ok(out) = __fuzz::run(&args, input) else {
        return;
    };
    let out = String::from_utf8(out).expect("the output is UTF-8");
    let mut hots = Vec::new();
    let mut tops = Vec::new();
    for rec in out.lines() {
        let f: Vec<&str> = rec.split('\t').collect();
        match f[..] {
            ["hot", ms, key, sum] => hots.push((
                ms.parse::<u64>().unwrap(),
                unescape(key.as_bytes()),
                sum.parse::<u64>().unwrap(),
            )),
            ["top", key, sum] => tops.push((unescape(key.as_bytes()), sum.parse::<u64>().unwrap())),
            _ => panic!("a record of neither form: {rec:?}"),
        }
    }
    if !timestamps {
        return;
    }

    // The model: each record in the slice of its time; the window at a
    // time holds the slices `e - slices + 1 ..= e` of its slice `e`.
    let window = arg(&args, "window")
        .and_then(|w| __fuzz::parse_duration(w).ok())
        .unwrap();
    let slices: u64 = arg(&args, "slices").unwrap().parse().unwrap();
    let threshold: u64 = arg(&args, "threshold").unwrap().parse().unwrap();
    let top: usize = arg(&args, "top").map_or(10, |t| t.parse().unwrap());
    let exact = arg(&args, "memory").is_none() && arg(&args, "max-keys").is_none();
    let slice_ns = (window.as_nanos() / u128::from(slices)) as u64;
    let epoch = |ms: u64| ms.saturating_mul(1_000_000) / slice_ns;
    let in_window = |e: u64, now: u64| e <= now && now - e < slices;
    let mut seen: HashMap<&[u8], Vec<u64>> = HashMap::new();
    let mut want_hots = Vec::new();
    for &(ms, key) in &records {
        let now = epoch(ms);
        let epochs = seen.entry(key).or_default();
        epochs.push(now);
        let sum = epochs.iter().filter(|&&e| in_window(e, now)).count() as u64;
        if sum == threshold {
            want_hots.push((ms, key.to_vec(), sum));
        }
    }
    let now = epoch(newest);
    let mut want_top: Vec<(Vec<u8>, u64)> = (seen.iter())
        .map(|(k, es)| {
            (
                k.to_vec(),
                es.iter().filter(|&&e| in_window(e, now)).count() as u64,
            )
        })
        .filter(|&(_, s)| s > 0)
        .collect();
    want_top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    want_top.truncate(top);
    if exact {
        assert_eq!(hots, want_hots, "hot records");
        assert_eq!(tops, want_top, "top keys");
    } else {
        // Never above the true count: every hot record's key truly
        // crossed at that time or earlier in the window.
        for (ms, key, sum) in &hots {
            let true_sum = (seen[&key[..]].iter())
                .zip(records.iter().filter(|r| r.1 == &key[..]))
                .filter(|(&e, r)| r.0 <= *ms && in_window(e, epoch(*ms)))
                .count() as u64;
            assert!(
                *sum <= true_sum && true_sum >= threshold,
                "{key:?} at {ms}: {sum} of {true_sum}"
            );
        }
        for (key, sum) in &tops {
            let true_sum = seen[&key[..]]
                .iter()
                .filter(|&&e| in_window(e, now))
                .count() as u64;
            assert!(*sum <= true_sum, "top {key:?}: {sum} of {true_sum}");
        }
    }
});
