//! What the `MultiWindow` test targets (`multi.rs`, `multi_threads.rs`)
//! share: the specification of `sum_over_at` restated on a plain list of
//! adds (the reference), random valid levels, and the spans worth checking.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::Rng;
use std::time::Duration;
use stripecount::Timestamp;

pub const fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// The time `n` nanoseconds after the origin (the reference keeps plain
/// nanoseconds; the window takes a `Timestamp`).
pub const fn ts(n: u64) -> Timestamp {
    Timestamp::from_nanos(n)
}

/// The specification, restated on a plain list of `(time, n)` adds: the
/// finest level whose window is at least `span` (else the largest, with
/// `span` clamped), `k = ceil(span / L)`, and the adds whose epoch `t / L` at
/// that level is in `(now / L - k, now / L]`.
pub fn reference(
    levels: &[(Duration, usize)],
    adds: &[(u64, u64)],
    now: u64,
    span: Duration,
) -> u64 {
    let span = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
    if span == 0 {
        return 0;
    }
    let windows: Vec<u64> = levels.iter().map(|l| l.0.as_nanos() as u64).collect();
    let i = windows
        .iter()
        .position(|&w| w >= span)
        .unwrap_or(levels.len() - 1);
    let l = windows[i] / levels[i].1 as u64;
    let k = span.min(windows[i]).div_ceil(l);
    let end = now / l;
    adds.iter()
        .filter(|&&(t, _)| t / l <= end && end - t / l < k)
        .map(|&(_, n)| n)
        .sum()
}

/// Random valid levels: 1 to 4 levels, slice lengths growing by ratios of
/// 1 to 6 (powers of two and not), windows strictly increasing.
pub fn random_levels(rng: &mut StdRng) -> Vec<(Duration, usize)> {
    let mut l = rng.random_range(1..=50u64);
    let mut s = rng.random_range(1..=12usize);
    let mut levels = vec![(ns(l * s as u64), s)];
    for _ in 1..rng.random_range(1..=4) {
        let w_prev = l * s as u64;
        l *= rng.random_range(1..=6u64);
        s = (w_prev / l) as usize + 1 + rng.random_range(0..8usize);
        levels.push((ns(l * s as u64), s));
    }
    levels
}

/// Spans worth checking for these levels: 0, every window and its
/// neighbours, every slice multiple of every level and its neighbours,
/// random spans, and spans beyond the largest window.
pub fn spans(levels: &[(Duration, usize)], rng: &mut StdRng) -> Vec<Duration> {
    let largest = levels.last().unwrap().0.as_nanos() as u64;
    let mut out = vec![
        Duration::ZERO,
        ns(1),
        ns(largest + 1),
        ns(largest * 3),
        Duration::MAX,
    ];
    for &(w, s) in levels {
        let w = w.as_nanos() as u64;
        let l = w / s as u64;
        out.extend([ns(w - 1), ns(w), ns(w + 1)]);
        for k in 1..=s as u64 {
            out.extend([ns(k * l - 1), ns(k * l), ns(k * l + 1)]);
        }
    }
    for _ in 0..8 {
        out.push(ns(rng.random_range(1..=largest + largest / 2)));
    }
    out
}
