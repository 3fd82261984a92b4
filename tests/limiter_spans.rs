//! What a limit promises, checked on the grants themselves: every grant's
//! time is recorded, and every span is counted.
//!
//! - A strict quota: at most `limit` permits in **every** closed span of
//!   `window` (whatever its start), from one thread or several.
//! - A default quota of `S` slices: at most `limit` in every closed span of
//!   `window - slice`, and (the counter-example that shows the two differ)
//!   more than `limit` in some span of `window`.
//! - A strict quota refuses exactly when the last `S + 1` slices would hold
//!   more than `limit` (a reference model), so its cost is what the docs say
//!   and no more.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;
use stripecount::{KeyedLimiter, MultiLimiter, Quota, RateLimiter, Timestamp};

/// The most permits granted in any closed span `[t, t + span]` of `grants`
/// (`(time ns, permits)`, any order).
fn busiest_span(grants: &mut [(u64, u64)], span: u64) -> u64 {
    grants.sort_unstable();
    let (mut lo, mut sum, mut best) = (0, 0u64, 0u64);
    for hi in 0..grants.len() {
        sum += grants[hi].1;
        while grants[hi].0 - grants[lo].0 > span {
            sum -= grants[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// A random quota: limit 1-12, 1-6 slices of 1-1000 ns.
fn random_quota(rng: &mut StdRng) -> Quota {
    let slices = rng.random_range(1..=6usize);
    let slice = rng.random_range(1..=1000u64);
    let limit = rng.random_range(1..=12u64);
    Quota::per(limit, Duration::from_nanos(slice * slices as u64)).slices(slices)
}

/// Requests at random times from 0 on: gaps from 0 to a slice and a half,
/// often 0 (bursts), sometimes landing exactly on a slice boundary.
fn next_time(rng: &mut StdRng, t: u64, slice: u64) -> u64 {
    match rng.random_range(0..4) {
        0 => t,
        1 => (t / slice + 1) * slice,
        _ => t + rng.random_range(0..=slice + slice / 2),
    }
}

/// One thread, many random quotas: the strict quota holds in every span of
/// the window, and decides exactly as a model of `S + 1` slices does.
#[test]
fn a_strict_quota_holds_in_every_span_and_refuses_only_what_does_not_fit() {
    let mut rng = StdRng::seed_from_u64(0x5ba4);
    for case in 0..400 {
        let quota = random_quota(&mut rng).strict();
        let (limit, window, slice) = (
            quota.limit(),
            nanos(quota.window()),
            nanos(quota.slice_len()),
        );
        let judged = quota.slice_count() as u64 + 1;
        let lim = RateLimiter::new(quota).unwrap();
        // The model: permits granted per slice.
        let mut per_slice = std::collections::BTreeMap::<u64, u64>::new();
        let mut grants = Vec::new();
        let mut t = 0;
        for _ in 0..300 {
            t = next_time(&mut rng, t, slice);
            let n = rng.random_range(1..=3u64);
            let e = t / slice;
            let held: u64 = per_slice
                .range(e.saturating_sub(judged - 1)..=e)
                .map(|(_, c)| c)
                .sum();
            let fits = held + n <= limit;
            let granted = lim.try_acquire_at(Timestamp::from_nanos(t), n);
            assert_eq!(
                granted, fits,
                "case {case} {quota:?}: {n} at {t} with {held} held"
            );
            if granted {
                *per_slice.entry(e).or_default() += n;
                grants.push((t, n));
            }
        }
        assert!(!grants.is_empty(), "case {case}: nothing granted");
        let busiest = busiest_span(&mut grants, window);
        assert!(
            busiest <= limit,
            "case {case} {quota:?}: {busiest} in a span of the window"
        );
    }
}

/// One thread: the default quota holds in every span of `window - slice`,
/// and the same requests show a span of `window` holding more than the
/// limit (the reason strict exists).
#[test]
fn a_default_quota_holds_in_every_span_of_window_minus_a_slice() {
    let mut rng = StdRng::seed_from_u64(0xd5fa);
    let mut over_in_a_window = 0;
    for case in 0..400 {
        let quota = random_quota(&mut rng);
        let (limit, window, slice) = (
            quota.limit(),
            nanos(quota.window()),
            nanos(quota.slice_len()),
        );
        let lim = RateLimiter::new(quota).unwrap();
        let mut grants = Vec::new();
        let mut t = 0;
        for _ in 0..300 {
            t = next_time(&mut rng, t, slice);
            let n = rng.random_range(1..=3u64);
            if lim.try_acquire_at(Timestamp::from_nanos(t), n) {
                grants.push((t, n));
            }
        }
        let short = busiest_span(&mut grants, window - slice);
        assert!(
            short <= limit,
            "case {case} {quota:?}: {short} in a span of window - slice"
        );
        if busiest_span(&mut grants, window) > limit {
            over_in_a_window += 1;
        }
    }
    assert!(
        over_in_a_window > 0,
        "no default quota ever went over in a span of its window"
    );
}

/// The counter-example by hand: a full window's permits at the end of one
/// slice, and again just after it leaves the window.
#[test]
fn a_default_quota_can_grant_twice_its_limit_in_one_window_and_strict_cannot() {
    let sec = Duration::from_secs(1);
    let ms = |m: u64| Timestamp::from_nanos(m * 1_000_000);
    let quota = Quota::per_second(10).slices(10);
    let lim = RateLimiter::new(quota).unwrap();
    assert!(lim.try_acquire_at(ms(999), 10)); // the last slice of window 1
    assert!(lim.try_acquire_at(ms(1900), 10)); // 901 ms later: slice 19
    let strict = RateLimiter::new(quota.strict()).unwrap();
    assert!(strict.try_acquire_at(ms(999), 10));
    assert!(!strict.try_acquire_at(ms(1900), 10));
    assert!(strict.try_acquire_at(ms(2000), 10), "1001 ms later it fits");
    assert_eq!(strict.window(), sec);
}

/// Threads in rounds: every thread makes its requests of a round at the
/// round's time (rounds move forward by random, often sub-slice, steps), so
/// a grant's recorded time is the time it was judged at.
fn rounds<F>(
    threads: usize,
    rounds: usize,
    slice: u64,
    seed: u64,
    f: F,
) -> Vec<Vec<(usize, u64, u64)>>
where
    F: Fn(usize, Timestamp, &mut StdRng) -> Option<(usize, u64)> + Send + Sync + 'static,
{
    let mut rng = StdRng::seed_from_u64(seed);
    let mut times = Vec::with_capacity(rounds);
    let mut t = 0;
    for _ in 0..rounds {
        t = next_time(&mut rng, t, slice) + 1;
        times.push(t);
    }
    let times = Arc::new(times);
    let barrier = Arc::new(Barrier::new(threads));
    let f = Arc::new(f);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (times, barrier, f) = (times.clone(), barrier.clone(), f.clone());
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ ((i as u64 + 1) * 0x9e37));
                let mut got = Vec::new();
                for &t in times.iter() {
                    barrier.wait();
                    for _ in 0..3 {
                        if let Some((key, n)) = f(i, Timestamp::from_nanos(t), &mut rng) {
                            got.push((key, t, n));
                        }
                    }
                }
                got
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn strict_limiters_hold_in_every_span_under_threads() {
    let threads = 4;
    let slice = 1_000;
    let quota = Quota::per(7, Duration::from_nanos(4 * slice))
        .slices(4)
        .strict();
    let window = nanos(quota.window());

    // A direct limiter.
    let lim = Arc::new(RateLimiter::new(quota).unwrap());
    let l = lim.clone();
    let got = rounds(threads, 600, slice, 1, move |_, now, rng| {
        let n = rng.random_range(1..=2);
        l.try_acquire_at(now, n).then_some((0, n))
    });
    let mut grants: Vec<(u64, u64)> = got.iter().flatten().map(|&(_, t, n)| (t, n)).collect();
    assert!(grants.len() > 100);
    let busiest = busiest_span(&mut grants, window);
    assert!(busiest <= 7, "{busiest} granted in a span of the window");

    // A multi-limiter: the strict short quota and a strict long one.
    let long = Quota::per(20, Duration::from_nanos(20 * slice))
        .slices(5)
        .strict();
    let multi = Arc::new(MultiLimiter::new([quota, long]).unwrap());
    let m = multi.clone();
    let got = rounds(threads, 600, slice, 2, move |_, now, rng| {
        let n = rng.random_range(1..=2);
        m.try_acquire_at(now, n).then_some((0, n))
    });
    let mut grants: Vec<(u64, u64)> = got.iter().flatten().map(|&(_, t, n)| (t, n)).collect();
    assert!(busiest_span(&mut grants, window) <= 7);
    assert!(busiest_span(&mut grants, nanos(long.window())) <= 20);

    // A keyed limiter: every key on its own.
    let keyed = Arc::new(KeyedLimiter::<usize>::new(quota).unwrap());
    let k = keyed.clone();
    let got = rounds(threads, 600, slice, 3, move |_, now, rng| {
        let key = rng.random_range(0..3);
        let n = rng.random_range(1..=2);
        k.try_acquire_at(&key, now, n).then_some((key, n))
    });
    for key in 0..3 {
        let mut grants: Vec<(u64, u64)> = got
            .iter()
            .flatten()
            .filter(|g| g.0 == key)
            .map(|&(_, t, n)| (t, n))
            .collect();
        assert!(grants.len() > 50, "key {key}: {} grants", grants.len());
        let busiest = busiest_span(&mut grants, window);
        assert!(busiest <= 7, "key {key}: {busiest} in a span of the window");
    }
}
