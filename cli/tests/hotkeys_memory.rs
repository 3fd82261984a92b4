//! The `hotkeys` command in bounded memory (`--memory`, `--rate`,
//! `--max-keys`), run as a binary: the heavy keys found within the stated
//! bound, the errors, what it dropped and the warning it ends with.

mod hotkeys_support;

use hotkeys_support::{run, stderr, stdout};
use std::process::Output;

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
    // holds 38 of these keys a slice, so 162 of 200 keys seen once are not tracked.
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
        "hotkeys: warning: 162 of 200 adds (81.00%) were not tracked because their slice was \
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
