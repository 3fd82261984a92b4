//! The `hotkeys` command, run as a binary on small inputs.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], input: &str) -> Output {
    run_bytes(args, input.as_bytes())
}

fn run_bytes(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stripecount"))
        .arg("hotkeys")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

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

/// Three heavy keys `h0`..`h2` (every tenth line, in turn) among 200,000
/// keys seen once, `<millis> <key>` lines at ten a millisecond; and each
/// heavy key's true count in the window of 1 s (10 slices of 100 ms) at
/// the last line's time.
fn heavy_among_many() -> (String, [u64; 3]) {
    let lines = 222_222u64;
    let last_slice = (lines - 1) / 10 / 100;
    let mut s = String::with_capacity(lines as usize * 14);
    let mut truth = [0u64; 3];
    for i in 0..lines {
        let t = i / 10;
        if i % 10 == 0 {
            let h = (i / 10 % 3) as usize;
            s.push_str(&format!("{t} h{h}\n"));
            if t / 100 + 10 > last_slice {
                truth[h] += 1;
            }
        } else {
            s.push_str(&format!("{t} u{i}\n"));
        }
    }
    (s, truth)
}

/// The keys of the `hot` records, sorted, each once.
fn hot_keys(o: &Output) -> Vec<String> {
    let mut h: Vec<String> = stdout(o)
        .lines()
        .filter(|l| l.starts_with("hot\t"))
        .map(|l| l.split('\t').nth(2).unwrap().to_string())
        .collect();
    h.sort();
    h.dedup();
    h
}

/// The `top` records as `(key, sum)`.
fn tops(o: &Output) -> Vec<(String, u64)> {
    stdout(o)
        .lines()
        .filter_map(|l| l.strip_prefix("top\t"))
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// The number right after the first `label` in `text`.
fn number_after(text: &str, label: &str) -> u64 {
    text.split(label)
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {text}"))
}

#[test]
fn fixed_memory_finds_the_heavy_keys_within_the_stated_bound() {
    let (input, truth) = heavy_among_many();
    let mut args = vec![
        "--window",
        "1s",
        "--slices",
        "10",
        "--threshold",
        "250",
        "--timestamps",
        "--memory",
        "1MiB",
        "--top",
        "3",
    ];
    let o = run(&args, &input);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(hot_keys(&o), ["h0", "h1", "h2"]);
    // What was estimated and dropped: the long tail kept back, and the
    // bound of a reported sum.
    let err = stderr(&o);
    assert!(
        err.contains("of 222222 adds") && err.contains("kept back by the doorkeeper"),
        "{err}"
    );
    let kept_line = err.lines().find(|l| l.contains("kept back")).unwrap();
    let level = number_after(&err, "admission level ");
    let bound = number_after(&err, "and at most ");
    assert!(level >= 2 && bound == 10 * (level - 1), "{err}");
    // Nearly every key seen once, and a heavy key's adds before it first
    // reached the level (it stays admitted after).
    let kept = number_after(kept_line, "hotkeys: ");
    assert!(
        (150_000..=200_000 + 3 * (level - 1)).contains(&kept),
        "{err}"
    );
    let untracked = number_after(kept_line, "); ");
    assert!(kept_line.contains(" admitted adds (") && kept_line.contains("not tracked"));
    assert!(err.contains("held of the 1.00 MiB limit"), "{err}");
    let tops = tops(&o);
    assert_eq!(tops.len(), 3);
    for (k, got) in tops {
        let want = truth[k[1..].parse::<usize>().unwrap()];
        assert!(
            got <= want && want - got <= bound + untracked,
            "{k}: {got} vs {want}"
        );
    }
    // With workers (on a prefix: 20,000 keys seen once): the same keys.
    args.extend(["--threads", "2"]);
    let prefix = &input[..input.match_indices('\n').nth(22_221).unwrap().0 + 1];
    let two = run(&args, prefix);
    assert!(two.status.success(), "{}", stderr(&two));
    assert_eq!(hot_keys(&two), ["h0", "h1", "h2"]);
    assert!(stderr(&two).contains("of 22222 adds"), "{}", stderr(&two));
}

#[test]
fn memory_and_max_keys_errors_are_usage_errors() {
    let base = ["--window", "1s", "--slices", "10", "--threshold", "5"];
    for (extra, says) in [
        (
            &["--memory", "8mb"][..],
            "invalid value '8mb' for '--memory <SIZE>': invalid size `8mb`: the unit must be",
        ),
        (&["--memory", "lots"], "expected a number, e.g. 8MiB"),
        (&["--memory", "99999999999GiB"], "too large"),
        (&["--memory", "1KiB"], "memory is too small"),
        (
            &["--memory", "8MiB", "--max-keys", "10"],
            "'--memory <SIZE>' cannot be used with '--max-keys <N>'",
        ),
        (
            &["--max-keys", "0"],
            "invalid value '0' for '--max-keys <N>'",
        ),
    ] {
        let mut a = base.to_vec();
        a.extend(extra);
        let o = run(&a, "");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.starts_with("error: ") && err.contains(says), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn max_keys_bounds_the_exact_mode_and_says_what_it_dropped() {
    // 100 keys in one slice, then k0 four more times (tracked: hot at 5)
    // and k10 five more times (not tracked: the slice is full).
    let mut input: String = (0..100).map(|i| format!("1 k{i}\n")).collect();
    input.push_str(&"2 k0\n".repeat(4));
    input.push_str(&"2 k10\n".repeat(5));
    let a = [
        "--window",
        "1s",
        "--slices",
        "10",
        "--threshold",
        "5",
        "--timestamps",
        "--max-keys",
        "10",
        "--top",
        "2",
    ];
    let o = run(&a, &input);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "hot\t2\tk0\t5\ntop\tk0\t5\ntop\tk1\t1\n");
    let err = stderr(&o);
    assert!(
        err.starts_with("hotkeys: 109 lines, 0 malformed, 0 timestamps went backwards\n"),
        "{err}"
    );
    assert!(
        err.contains("at most 10 keys a slice (--max-keys): 95 of 109 adds (87.16%) not counted"),
        "{err}"
    );
}

#[test]
fn a_run_with_untracked_adds_ends_with_a_warning() {
    // Level 1 (threshold 20 in 10 slices): every add is admitted; 64 KiB
    // holds 50 of these keys a slice, so 150 of 200 keys seen once are not tracked.
    let input: String = (0..200).map(|i| format!("1 k{i}\n")).collect();
    let mut a = vec![
        "--window",
        "1s",
        "--slices",
        "10",
        "--threshold",
        "20",
        "--timestamps",
        "--memory",
        "64KiB",
    ];
    let o = run(&a, &input);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let last = err.lines().last().unwrap();
    assert_eq!(
        last,
        "hotkeys: warning: 150 of 200 adds (75.00%) were not tracked because their slice was \
         full: keys at the threshold may be missing from the hot records, and sums short; give \
         more --memory (--rate N, the stream's adds a second, sizes it)"
    );
    // The exact mode bounded by --max-keys says so too.
    let exact = [&a[..7], &["--max-keys", "150"][..]].concat();
    let o = run(&exact, &input);
    assert!(stderr(&o).ends_with(
        "hotkeys: warning: 50 of 200 adds (25.00%) were not tracked because their slice was \
         full: keys at the threshold may be missing from the hot records, and sums short; raise \
         --max-keys\n"
    ));
    // Every add tracked: no warning.
    let o = run(&exact[..7], &input);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    // --rate sizes the memory for the stream: 200 adds a second over 1 s,
    // 10 keys at 2 adds a slice (hot at 20, in the last slice), every add
    // tracked.
    a.truncate(7);
    a.extend(["--rate", "200"]);
    let steady: String = (0..200)
        .map(|i| format!("{} k{}\n", i * 5, i % 10))
        .collect();
    let o = run(&a, &steady);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(hot_keys(&o).len(), 10, "{}", stdout(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    // --rate refuses a --memory below what the rate needs, as a usage error.
    let o = run(&[&a[..], &["--memory", "8KiB"]].concat(), &input);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot hold every key that can reach the threshold"),
        "{}",
        stderr(&o)
    );
    let o = run(&[&a[..], &["--max-keys", "10"]].concat(), &input);
    assert_eq!(o.status.code(), Some(2));
}
