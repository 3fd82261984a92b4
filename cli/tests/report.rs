//! The contention report, run as users run it: the table's shape, the CSV's
//! contents and consistency, the SVG, and usage errors. Durations are tiny:
//! these tests check what is printed, never how fast anything is.

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_stripecount");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the stripecount binary runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// Splits a table cell list such as `1.00x   64.8M    0.52x  33.1M` into
/// (ratio, ops/s) pairs.
fn cells(rest: &str) -> Vec<(f64, f64)> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(words.len() % 2, 0, "cells come in pairs: {rest:?}");
    words
        .chunks(2)
        .map(|c| {
            let ratio: f64 = c[0]
                .strip_suffix('x')
                .unwrap_or_else(|| panic!("ratio {:?} ends in x", c[0]))
                .parse()
                .unwrap();
            let (num, scale) = match c[1].chars().last().unwrap() {
                'k' => (&c[1][..c[1].len() - 1], 1e3),
                'M' => (&c[1][..c[1].len() - 1], 1e6),
                'G' => (&c[1][..c[1].len() - 1], 1e9),
                _ => (c[1], 1.0),
            };
            (ratio, num.parse::<f64>().unwrap() * scale)
        })
        .collect()
}

#[test]
fn table_and_csv_have_one_entry_per_row_and_thread_count() {
    let csv = tmp("striped.csv");
    let out = run(&[
        "--duration",
        "20ms",
        "--threads",
        "2,1",
        "--only",
        "StripedCounter",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stderr: {stderr}");

    // Progress: one line per point, on stderr.
    let progress: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(progress.len(), 4, "{stderr}");
    assert!(progress[0].contains("AtomicU64 fetch_add") && progress[0].contains(" 1 thread "));
    assert!(progress[3].contains("StripedCounter add") && progress[3].contains("2 threads"));

    // The table: a header with the two thread counts, then the reference
    // (always measured, since every ratio is taken against it) and the
    // selected row, each with a (ratio, ops/s) cell per thread count.
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("implementation"))
        .expect("a header line");
    let head: Vec<&str> = lines[header].split_whitespace().collect();
    assert_eq!(
        head,
        ["implementation", "group", "1", "thread", "2", "threads"]
    );
    let rows: Vec<&str> = lines[header + 1..]
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let reference = rows[0]
        .strip_prefix("AtomicU64 fetch_add")
        .expect("the reference row first");
    let striped = rows[1]
        .strip_prefix("StripedCounter add")
        .expect("then the selected row");
    let reference = reference.trim_start().strip_prefix("counters").unwrap();
    let striped = striped.trim_start().strip_prefix("counters").unwrap();
    let reference = cells(reference);
    let striped = cells(striped);
    assert_eq!(reference.len(), 2);
    assert_eq!(striped.len(), 2);
    for (i, (&(r_ratio, r_ops), &(s_ratio, s_ops))) in reference.iter().zip(&striped).enumerate() {
        assert_eq!(r_ratio, 1.0, "the reference's ratio to itself");
        assert!(r_ops > 0.0 && s_ops > 0.0);
        // The printed ratio is the printed throughputs' ratio (both rounded).
        let expect = s_ops / r_ops;
        assert!(
            (s_ratio - expect).abs() <= 0.02 * expect + 0.01,
            "thread column {i}: {s_ratio} vs {s_ops}/{r_ops}"
        );
    }

    // The CSV: a header and one line per point, consistent with itself.
    let csv = std::fs::read_to_string(&csv).unwrap();
    let mut csv_lines = csv.lines();
    assert_eq!(
        csv_lines.next(),
        Some(
            "implementation,group,origin,threads,ops_per_sec,ratio_to_atomic_u64,\
             min_ops_per_sec,max_ops_per_sec,ops,elapsed_ns"
        )
    );
    let records: Vec<Vec<&str>> = csv_lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(records.len(), 4, "{csv}");
    let keys: Vec<(&str, &str, &str, &str)> =
        records.iter().map(|r| (r[0], r[1], r[2], r[3])).collect();
    assert_eq!(
        keys,
        [
            ("AtomicU64 fetch_add", "counters", "baseline", "1"),
            ("AtomicU64 fetch_add", "counters", "baseline", "2"),
            ("StripedCounter add", "counters", "stripecount", "1"),
            ("StripedCounter add", "counters", "stripecount", "2"),
        ]
    );
    let ops_per_sec = |r: &Vec<&str>| r[4].parse::<f64>().unwrap();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.len(), 10);
        let threads: u64 = r[3].parse().unwrap();
        let (min, max): (f64, f64) = (r[6].parse().unwrap(), r[7].parse().unwrap());
        let ops: u64 = r[8].parse().unwrap();
        let elapsed_ns: u64 = r[9].parse().unwrap();
        // Every thread runs whole batches of 256, at least one.
        assert_eq!(ops % 256, 0);
        assert!(ops >= 256 * threads);
        // The median sample: measured for at least its share of --duration.
        assert!(elapsed_ns * 3 >= 20_000_000, "{elapsed_ns} ns");
        let rate = ops as f64 / (elapsed_ns as f64 / 1e9);
        assert!((ops_per_sec(r) - rate).abs() <= 1.0 + rate * 1e-9);
        assert!(min <= ops_per_sec(r) + 1.0 && ops_per_sec(r) <= max + 1.0);
        let reference = &records[i % 2];
        let ratio: f64 = r[5].parse().unwrap();
        assert!((ratio - ops_per_sec(r) / ops_per_sec(reference)).abs() < 1e-4);
    }
}

#[test]
fn the_svg_plot_is_written_and_labelled() {
    let svg = tmp("windows.svg");
    let out = run(&[
        "--duration",
        "5ms",
        "--threads",
        "1,2",
        "--only",
        "SlidingWindow add_at",
        "--only",
        "Mutex<u64>",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("SlidingWindow add_at (caller time)"));
    assert!(stdout.contains("Mutex<u64>"));
    assert!(!stdout.contains("StripedCounter"));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg"));
    assert!(svg.trim_end().ends_with("</svg>"));
    for label in [
        "stripecount contention report",
        "threads sharing one instance",
        "operations per second (log scale)",
        "AtomicU64 fetch_add (reference)",
        "SlidingWindow add_at (caller time)",
        "Mutex&lt;u64&gt;",
        "Counters: add(1)",
    ] {
        assert!(svg.contains(label), "the plot lacks {label:?}");
    }
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["--threads", "0"][..],
        &["--threads", "two"],
        &["--duration", "5"],
        &["--duration", "5 parsecs"],
        &["--frobnicate"],
        &["--only", "no-such-row", "--duration", "1ms"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed a table");
        assert!(text(&out.stderr).contains("error"), "{args:?}");
    }
    let out = run(&["--csv", "/nonexistent-dir/x.csv", "--duration", "1ms"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot create the CSV file"));
    assert!(out.stdout.is_empty(), "failed before measuring");
}

#[test]
fn help_lists_the_options() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for opt in ["--threads", "--duration", "--only", "--csv", "--svg"] {
        assert!(help.contains(opt), "--help lacks {opt}");
    }
}
