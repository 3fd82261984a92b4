//! The `hotkeys` command, run as a binary on small inputs.

mod hotkeys_support;

use hotkeys_support::{run, run_bytes, stderr, stdout};

#[test]
fn small_stream_with_timestamps() {
    let input = "0 a\n100 b\n200 a\n300 a\n400 c\n1000 b\n1100 b\n";
    let o = run(
        &[
            "--window",
            "1s",
            "--slices",
            "10",
            "--threshold",
            "2",
            "--timestamps",
        ],
        input,
    );
    assert!(o.status.success());
    // Slices of 100 ms. At 1000 ms (epoch 10) b's add at 100 (epoch 1)
    // is still in the window: b is hot. At 1100 ms (epoch 11) it has left:
    // b's `before` is 1, so b cools and this add makes it hot again. The
    // top at 1100 ms covers epochs 2..=11.
    assert_eq!(
        stdout(&o),
        "hot\t200\ta\t2\nhot\t1000\tb\t2\nhot\t1100\tb\t2\ntop\ta\t2\ntop\tb\t2\ntop\tc\t1\n"
    );
    assert_eq!(
        stderr(&o),
        "hotkeys: 7 lines, 0 malformed, 0 timestamps went backwards\n"
    );
}

#[test]
fn a_key_cools_and_becomes_hot_again() {
    let input = "0 k\n0 k\n5000 k\n5000 k\n";
    let o = run(
        &[
            "--window=1s",
            "--slices=10",
            "--threshold=2",
            "--timestamps",
            "--top=1",
        ],
        input,
    );
    assert_eq!(stdout(&o), "hot\t0\tk\t2\nhot\t5000\tk\t2\ntop\tk\t2\n");
}

#[test]
fn bad_lines_and_backwards_time_are_counted_not_fatal() {
    let input = "10 a\nnot-a-number a\n\n5 a\n7\n20 b\n";
    let o = run(
        &[
            "--window",
            "1m",
            "--slices",
            "6",
            "--threshold",
            "2",
            "--timestamps",
        ],
        input,
    );
    assert!(o.status.success());
    // "5 a" goes backwards: treated as 10 ms, and a becomes hot there.
    assert_eq!(stdout(&o), "hot\t10\ta\t2\ntop\ta\t2\ntop\tb\t1\n");
    assert_eq!(
        stderr(&o),
        "hotkeys: 6 lines, 3 malformed, 1 timestamps went backwards\n"
    );
}

#[test]
fn top_lists_at_most_the_asked_keys_ties_by_key() {
    let input = "0 z\n0 y\n0 x\n0 x\n";
    let o = run(
        &[
            "--window",
            "10s",
            "--slices",
            "10",
            "--threshold",
            "100",
            "--timestamps",
            "--top",
            "2",
        ],
        input,
    );
    assert_eq!(stdout(&o), "top\tx\t2\ntop\ty\t1\n");
}

#[test]
fn real_clock_without_timestamps() {
    let o = run(
        &["--window", "1h", "--slices", "10", "--threshold", "2"],
        "a\nb\na\nc d\n",
    );
    assert!(o.status.success());
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    let hot: Vec<&str> = lines[0].split('\t').collect();
    assert_eq!(hot[0], "hot");
    assert!(hot[1].parse::<u64>().is_ok());
    assert_eq!(&hot[2..], ["a", "2"]);
    assert_eq!(lines[1], "top\ta\t2");
    assert_eq!(lines[2], "top\tb\t1");
    assert_eq!(lines[3], "top\tc d\t1");
}

/// A deterministic stream: skewed keys, time moving forward, some going
/// back, some malformed lines.
fn stream(lines: usize, seed: u64) -> String {
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut t = 0u64;
    let mut s = String::new();
    for _ in 0..lines {
        let r = next();
        t += r % 3;
        let key = (next() % 60) * (next() % 60) / 59;
        match r % 50 {
            0 => s.push_str("garbage\n"),
            1 => s.push_str(&format!("{} k{key}\n", t.saturating_sub(40))),
            _ => s.push_str(&format!("{t} k{key}\n")),
        }
    }
    s
}

#[test]
fn threads_report_the_same_hot_records_as_one_thread() {
    let input = stream(60_000, 42);
    let args = [
        "--window",
        "100ms",
        "--slices",
        "10",
        "--threshold",
        "6",
        "--timestamps",
        "--top",
        "5",
    ];
    let one = run(&args, &input);
    let one_out = stdout(&one);
    let mut one_lines: Vec<&str> = one_out.lines().collect();
    assert!(
        one_lines.iter().filter(|l| l.starts_with("hot\t")).count() > 50,
        "{one_out}"
    );
    one_lines.sort_unstable();
    for threads in ["2", "3"] {
        let mut a = args.to_vec();
        a.extend(["--threads", threads]);
        let many = run(&a, &input);
        assert!(many.status.success());
        let many_out = stdout(&many);
        let mut many_lines: Vec<&str> = many_out.lines().collect();
        many_lines.sort_unstable();
        assert_eq!(one_lines, many_lines, "threads {threads}");
        assert_eq!(stderr(&one), stderr(&many));
    }
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        vec!["--slices", "10", "--threshold", "5"],
        vec!["--window", "10", "--slices", "10", "--threshold", "5"],
        vec!["--window", "10d", "--slices", "10", "--threshold", "5"],
        vec!["--window", "10s", "--slices", "x", "--threshold", "5"],
        vec!["--window", "10s", "--slices", "10", "--threshold", "0"],
        vec!["--window", "10s", "--slices", "0", "--threshold", "5"],
        vec!["--window", "10ms", "--slices", "3", "--threshold", "5"],
        vec![
            "--window",
            "10s",
            "--slices",
            "10",
            "--threshold",
            "5",
            "--threads",
            "0",
        ],
        vec![
            "--window",
            "10s",
            "--slices",
            "10",
            "--threshold",
            "5",
            "--bogus",
        ],
        vec!["--window", "10s", "--slices", "10", "--threshold"],
    ] {
        let o = run(&args, "");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        // clap's error format: the error, then a pointer to --help.
        let err = stderr(&o);
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("try '--help'"), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn help_prints_usage() {
    let o = run(&["--help"], "");
    assert!(o.status.success());
    let help = stdout(&o);
    assert!(help.contains("Usage: stripecount hotkeys"), "{help}");
    assert!(
        help.contains("--timestamps") && help.contains("\\xNN"),
        "{help}"
    );
}

/// The inverse of the output's key escaping (`--help`), as a consumer
/// would write it.
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

/// Keys with every kind of byte the output must escape (a tab, a carriage
/// return, a backslash, control bytes, bytes that are not UTF-8) and one it
/// must not (UTF-8 text), each read twice so that each becomes hot: every
/// record is one line of tab-separated UTF-8 fields, and every key field
/// unescapes to the key's bytes. (A key cannot hold a newline: a newline
/// ends the line.)
#[test]
fn keys_are_escaped_and_parse_back_to_their_bytes() {
    let keys: [&[u8]; 8] = [
        b"a\tb",
        b"cr\rmid",
        b"back\\slash",
        b"ctl\x01\x1b[0m\x7f",
        b"bin\xff\xfe\x00",
        b"trunc\xc3",
        "caf\u{e9} \u{1f600}".as_bytes(),
        b"\\x41 not an escape",
    ];
    let mut input = Vec::new();
    for (i, key) in keys.iter().chain(keys.iter()).enumerate() {
        input.extend_from_slice(format!("{i} ").as_bytes());
        input.extend_from_slice(key);
        input.push(b'\n');
    }
    for threads in ["1", "2"] {
        let args = [
            "--window",
            "1h",
            "--slices",
            "60",
            "--threshold",
            "2",
            "--timestamps",
            "--top",
            "100",
            "--threads",
            threads,
        ];
        let o = run_bytes(&args, &input);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8(o.stdout.clone()).expect("the output is UTF-8");
        let (mut hot, mut top) = (Vec::new(), Vec::new());
        for line in out.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields[0] {
                "hot" => {
                    assert_eq!(fields.len(), 4, "{line:?}");
                    assert_eq!(fields[3], "2", "{line:?}");
                    hot.push(unescape(fields[2]));
                }
                "top" => {
                    assert_eq!(fields.len(), 3, "{line:?}");
                    assert_eq!(fields[2], "2", "{line:?}");
                    top.push(unescape(fields[1]));
                }
                _ => panic!("not a record: {line:?}"),
            }
        }
        let mut want: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        want.sort();
        hot.sort();
        top.sort();
        assert_eq!(hot, want, "threads {threads}");
        assert_eq!(top, want, "threads {threads}");
    }
}
