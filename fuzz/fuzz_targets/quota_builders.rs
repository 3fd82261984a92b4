//! `Quota` and the builders: arbitrary parameters give a value or a typed
//! error, never a panic, and a limiter built from them keeps its limits.
//!
//! Input (text lines): quotas `q <limit> <window> <slices> [strict]`
//! (durations in nanoseconds, or seconds with an `s`), per-key builders
//! `w <window> <slices> <threshold> <memory> <max keys>`, the cluster
//! builders' settings `c <n>...` (fed to every setter in turn), and
//! requests `<advance ns> <permits> <key>`.
//!
//! Checked: every quota validates or is refused with a `ConfigError`, and
//! the limiters (`RateLimiter`, `MultiLimiter`, `KeyedLimiter`) build
//! exactly when their quotas validate; the per-key windows, the detector,
//! the sketch and the cluster builders' validation answer `Ok` or a typed
//! error. Each request is then granted or refused by every limiter, and
//! the grants hold every quota's promise: at most `limit` in any `slices`
//! consecutive slices, and for a strict quota in every closed span of the
//! window (per key for the keyed limiter).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::keyed::{HotKeyDetector, HotKeySketch, KeyedWindows};
use stripecount::window::MAX_SLICES;
use stripecount::{KeyedLimiter, MultiLimiter, Quota, RateLimiter, Timestamp};
use stripecount_redis::{__fuzz, ClusterLimiter, ClusterWindows, OutagePolicy};

fn duration(w: &str) -> Option<Duration> {
    match w.strip_suffix('s') {
        Some(s) => s.parse().ok().map(Duration::from_secs),
        None => w.parse().ok().map(Duration::from_nanos),
    }
}

/// Whether `grants` (time, permits) keep `q`'s promise.
fn keeps(q: &Quota, grants: &[(u64, u64)]) -> bool {
    let l = q.slice_len().as_nanos() as u64;
    let (s, w) = (q.slice_count() as u64, q.window().as_nanos() as u64);
    grants.iter().all(|&(t, _)| {
        let e = t / l;
        let in_slices: u64 = (grants.iter())
            .filter(|&&(u, _)| u / l <= e && e - u / l < s)
            .map(|g| g.1)
            .fold(0, u64::saturating_add);
        let in_span: u64 = (grants.iter())
            .filter(|&&(u, _)| u <= t && t - u <= w)
            .map(|g| g.1)
            .fold(0, u64::saturating_add);
        in_slices <= q.limit() && (!q.is_strict() || in_span <= q.limit())
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut quotas = Vec::new();
    let mut ops = Vec::new();
    let mut cluster = Vec::new();
    for line in text.lines().take(600) {
        let w: Vec<&str> = line.split_ascii_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        let dur = |i: usize| w.get(i).and_then(|x| duration(x)).unwrap_or_default();
        match w.first().copied() {
            Some("q") => {
                let q = Quota::per(num(1), dur(2)).slices(num(3) as usize);
                quotas.push(if w.get(4) == Some(&"strict") {
                    q.strict()
                } else {
                    q
                });
            }
            Some("w") => {
                let (window, slices, threshold) = (dur(1), num(2) as usize, num(3));
                let clock = ManualClock::new();
                let _ = KeyedWindows::<u64>::builder(window, slices)
                    .clock(clock.clone())
                    .max_keys(num(5) as usize)
                    .build();
                let _ = HotKeyDetector::<u64>::builder(window, slices, threshold)
                    .clock(clock.clone())
                    .max_keys(num(5) as usize)
                    .build();
                // The sketch takes the memory it is given: within reason.
                // Asked only for slice counts up to `MAX_SLICES`: past it,
                // its sizing multiplies before the count is refused (an
                // overflow, a panic with overflow checks; FUZZING.md).
                // Its bound, `memory_bytes() <= memory_limit()`, is checked
                // from 16 KiB: a sketch built on 5-8 KiB holds more than it
                // was given from the start (FUZZING.md).
                if slices <= MAX_SLICES {
                    let memory = (num(4) % (64 << 20)) as usize;
                    let sketch = HotKeySketch::<u64>::builder(window, slices, threshold)
                        .clock(clock)
                        .memory(memory)
                        .build();
                    if let (Ok(sketch), true) = (sketch, memory >= 16 << 10) {
                        let (held, limit) = (sketch.memory_bytes(), sketch.memory_limit());
                        assert!(held <= limit, "{held} bytes held of {limit}");
                    }
                }
            }
            Some("c") => cluster.extend((1..w.len()).map(|i| (num(i), dur(i)))),
            Some(_) if w.len() >= 2 => ops.push((num(0), num(1), num(2) % 4)),
            _ => {}
        }
    }

    // Cluster builders: validation only (building connects to Redis).
    let mut c = cluster
        .into_iter()
        .chain(std::iter::repeat((0, Duration::ZERO)));
    let mut next = || c.next().unwrap();
    let (window, slices) = (next().1, next().0 as usize);
    let b = ClusterWindows::<u64>::builder("redis://127.0.0.1:1", "ns", window, slices)
        .flush_interval(Some(next().1).filter(|d| !d.is_zero()))
        .hot_threshold(next().0)
        .max_keys(next().0 as usize)
        .max_pending_keys(next().0 as usize)
        .max_batch_keys(next().0 as usize)
        .timeouts(next().1, next().1)
        .backoff(next().1, next().1);
    let b = match next().0 {
        0 => b,
        g => b
            .redis_cluster(g as usize)
            .wait_for_replicas(next().0 as u32, next().1),
    };
    let _ = __fuzz::validate_windows(&b);
    let q = quotas
        .first()
        .copied()
        .unwrap_or(Quota::per(next().0, next().1));
    let b = ClusterLimiter::<u64>::builder("redis://127.0.0.1:1", "ns", q)
        .outage(OutagePolicy::LocalShare {
            expected_nodes: next().0,
        })
        .max_batch(next().0)
        .max_batch_keys(next().0 as usize)
        .max_queue(next().0 as usize)
        .margin(next().1)
        .timeouts(next().1, next().1)
        .backoff(next().1, next().1)
        .sweep_interval(next().1);
    let b = match next().0 {
        0 => b,
        g => b
            .redis_cluster(g as usize)
            .wait_for_replicas(next().0 as u32, next().1),
    };
    let _ = __fuzz::validate_limiter(&b);

    // Limiters: built exactly when their quotas validate.
    let valid = quotas.iter().all(|q| q.validate().is_ok());
    let one = quotas.first().map(|q| {
        let built = RateLimiter::builder(*q).clock(ManualClock::new()).build();
        assert_eq!(built.is_ok(), q.validate().is_ok(), "{q:?}");
        built
    });
    let multi = MultiLimiter::builder(&quotas)
        .clock(ManualClock::new())
        .build();
    let keyed = KeyedLimiter::<u64>::builder(&quotas)
        .clock(ManualClock::new())
        .max_keys(8)
        .build();
    if !valid {
        assert!(multi.is_err() && keyed.is_err());
        return;
    }
    if quotas.is_empty() {
        return;
    }
    let one = one.and_then(Result::ok);
    let (multi, keyed) = (multi.ok(), keyed.ok());
    let (mut t, mut g_one, mut g_multi) = (0u64, Vec::new(), Vec::new());
    let mut g_keyed: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for &(dt, n, key) in ops.iter().take(64) {
        t = t.saturating_add(dt);
        let now = Timestamp::from_nanos(t);
        if one.as_ref().is_some_and(|l| l.try_acquire_at(now, n)) {
            g_one.push((t, n));
        }
        if multi.as_ref().is_some_and(|l| l.try_acquire_at(now, n)) {
            g_multi.push((t, n));
        }
        if keyed
            .as_ref()
            .is_some_and(|l| l.try_acquire_at(&key, now, n))
        {
            g_keyed.entry(key).or_default().push((t, n));
        }
    }
    assert!(
        keeps(&quotas[0], &g_one),
        "RateLimiter {:?}: {g_one:?}",
        quotas[0]
    );
    for q in &quotas {
        assert!(keeps(q, &g_multi), "MultiLimiter {q:?}: {g_multi:?}");
        for g in g_keyed.values() {
            assert!(keeps(q, g), "KeyedLimiter {q:?}: {g:?}");
        }
    }
});
