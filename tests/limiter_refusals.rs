//! A refusal's `Decision` is the one a `peek` at its instant gives: the
//! limit, the permits left, when the request would fit and when the window
//! empties, read right away or long after, whether the window's counts are
//! kept inline, in a block, or nowhere (a fixed window), and through a
//! direct limiter's memo of its last walk (many refusals in one slice, for
//! a few request sizes). The refusal path keeps values and computes its
//! times when read; the peek judges a snapshot: two ways to one answer.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Decision, KeyedLimiter, MultiLimiter, Quota, RateLimiter, Timestamp};

/// A test's size: `full` natively, `miri` under Miri.
const fn sized(full: u64, miri: u64) -> u64 {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// A time step: mostly within a slice (refusals of one slice repeat),
/// sometimes across several, now and then far ahead or backwards.
fn step(rng: &mut StdRng, now: u64, slice: u64, window: u64) -> u64 {
    match rng.random_range(0..40) {
        0 => now.saturating_sub(rng.random_range(0..2 * window)),
        1 => now + rng.random_range(0..3 * window),
        2..=5 => now + rng.random_range(0..3 * slice),
        _ => now + rng.random_range(0..slice / 4 + 1),
    }
}

/// A request size: mostly a few small sizes (so a slice's refusals repeat
/// one request), sometimes anything up to just over the limit.
fn size(rng: &mut StdRng, limit: u64) -> u64 {
    match rng.random_range(0..10) {
        0 => rng.random_range(0..=limit.saturating_add(1)),
        1..=3 => 2,
        _ => 1,
    }
}

/// `d`, a decision taken right after `peek` at the same instant: a refusal
/// must equal the peek (is kept, to be compared again later). With several
/// limits (`!one`) the two may name different refusing limits (a refusal
/// names the one its grant failed on, a peek the one that holds the
/// request longest), so only the verdict and the retry time are compared.
fn check(
    peek: Decision,
    d: Decision,
    one: bool,
    late: &mut Vec<(Decision, Decision, String)>,
    ctx: impl Fn() -> String,
) {
    if d.is_granted() {
        assert!(peek.is_granted(), "granted but the peek refused: {}", ctx());
    } else if one {
        assert_eq!(d, peek, "{}", ctx());
        late.push((d, peek, ctx()));
    } else {
        let answer = |d: &Decision| (d.denied(), d.retry_after());
        assert_eq!(answer(&d), answer(&peek), "{}", ctx());
    }
}

#[test]
fn a_refusal_is_what_a_peek_at_its_instant_says() {
    let mut rng = StdRng::seed_from_u64(0x44);
    for case in 0..sized(240, 7) as usize {
        // Fixed windows (no history), few slices (counts inline while small),
        // many (a block from the first count); limits small (inline) and
        // large (a block once a slice counts more than its field holds).
        let slices = [1u64, 2, 3, 10, 17, 48, 60][case % 7];
        let limit = if case % 3 == 0 {
            rng.random_range(0..=12)
        } else {
            rng.random_range(13..=4000)
        };
        let slice = rng.random_range(1..=40u64);
        let window = slice * slices;
        let quota = Quota::per(limit, Duration::from_nanos(window)).slices(slices as usize);
        let lim = RateLimiter::builder(quota)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let mut late = Vec::new();
        let mut now = 0;
        for i in 0..sized(500, 60) {
            now = step(&mut rng, now, slice, window);
            // Large grants now and then, so that large limits fill up.
            let n = match rng.random_range(0..6) {
                0 => rng.random_range(1..=limit.max(1)),
                _ => size(&mut rng, limit),
            };
            let p = lim.peek_at(ts(now), n);
            let d = lim.decide_at(ts(now), n);
            check(p, d, true, &mut late, || {
                format!("case {case} step {i} S {slices} L {slice} limit {limit} now {now} n {n}")
            });
        }
        for (d, p, ctx) in late {
            assert_eq!(d, p, "read late: {ctx}");
        }
    }
}

#[test]
fn a_multi_limit_or_per_key_refusal_is_what_a_peek_says() {
    let mut rng = StdRng::seed_from_u64(0x45);
    for case in 0..sized(60, 2) {
        let slice = rng.random_range(1..=20u64);
        let fast = Quota::per(rng.random_range(1..=60), Duration::from_nanos(slice * 10));
        let slow =
            Quota::per(rng.random_range(1..=400), Duration::from_nanos(slice * 120)).slices(12);
        let multi = MultiLimiter::builder([fast, slow])
            .clock(ManualClock::new())
            .build()
            .unwrap();
        // Per key: 10 slices (counts inline while small) or 48 (a block).
        let s = if case % 2 == 0 { 10 } else { 48 };
        let per_key = Quota::per(fast.limit(), Duration::from_nanos(slice * s)).slices(s as usize);
        let keyed = KeyedLimiter::<u64, _>::builder(per_key)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let mut late = Vec::new();
        let mut now = 0;
        for i in 0..sized(400, 60) {
            now = step(&mut rng, now, slice, slice * 10);
            let n = size(&mut rng, fast.limit());
            let key = rng.random_range(0..3u64);
            let ctx = || format!("case {case} step {i} now {now} n {n} key {key}");
            let p = multi.peek_at(ts(now), n);
            check(p, multi.decide_at(ts(now), n), false, &mut late, ctx);
            let p = keyed.peek_at(&key, ts(now), n);
            check(p, keyed.decide_at(&key, ts(now), n), true, &mut late, ctx);
        }
        for (d, p, ctx) in late {
            assert_eq!(d, p, "read late: {ctx}");
        }
    }
}
