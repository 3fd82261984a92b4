//! The strict limiters against reference models over many random
//! sequential runs: one limit (`RateLimiter`, sliding and with a quota of
//! one slice, a fixed window: grants and refusals, `available`,
//! `retry_after`, a refusal's retry time when decided and read late, limit
//! changes, time going back and tag wraps) and several (`MultiLimiter`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use stripecount::clock::ManualClock;
use stripecount::{Decision, Denied, MultiLimiter, Quota, RateLimiter, Timestamp};

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// A decision's verdict with the slice a grant was counted in.
fn verdict(d: Decision) -> Result<u64, Denied> {
    d.result()
        .map(|()| d.__slice().expect("a grant is counted in a slice"))
}

/// The reference: every grant as `(epoch, n)`, judged at the newest epoch.
struct Model {
    slices: u64,
    slice: u64,
    limit: u64,
    newest: u64,
    grants: Vec<(u64, u64)>,
}

impl Model {
    fn used(&self, j: u64) -> u64 {
        self.grants
            .iter()
            .filter(|(e, _)| *e <= j && j - e < self.slices)
            .map(|(_, n)| n)
            .sum()
    }

    fn acquire(&mut self, now: u64, n: u64) -> Result<u64, Denied> {
        let j = (now / self.slice).max(self.newest);
        if n == 0 {
            return Ok(j);
        }
        if n > self.limit {
            return Err(Denied::ExceedsLimit);
        }
        self.newest = j;
        if self.used(j) + n > self.limit {
            return Err(Denied::Exhausted);
        }
        self.grants.push((j, n));
        Ok(j)
    }

    fn available(&self, now: u64) -> u64 {
        let j = (now / self.slice).max(self.newest);
        self.limit.saturating_sub(self.used(j))
    }

    fn retry_after(&self, now: u64, n: u64) -> Option<Duration> {
        if n > self.limit {
            return None;
        }
        let j = (now / self.slice).max(self.newest);
        if n == 0 || self.used(j) + n <= self.limit {
            return Some(Duration::ZERO);
        }
        (j + 1..=j + self.slices).find_map(|e| {
            let used: u64 = self
                .grants
                .iter()
                .filter(|(g, _)| *g <= j && *g + self.slices > e)
                .map(|(_, n)| n)
                .sum();
            (used + n <= self.limit).then(|| Duration::from_nanos(e * self.slice - now))
        })
    }
}

#[test]
fn random_sequential_runs_match_the_reference() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for case in 0..600 {
        let slices = rng.random_range(1..=8u64);
        let slice = rng.random_range(1..=50u64);
        let limit = rng.random_range(0..=12u64);
        let fixed = case % 4 == 0;
        let slices = if fixed { 1 } else { slices };
        let window = Duration::from_nanos(slice * slices);
        let clock = ManualClock::new();
        let sliding = RateLimiter::builder(Quota::per(limit, window).slices(slices as usize))
            .clock(clock.clone())
            .build()
            .unwrap();
        let fixed_lim = RateLimiter::builder(Quota::per(limit, window).slices(1))
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut model = Model {
            slices,
            slice,
            limit,
            newest: 0,
            grants: Vec::new(),
        };
        let mut now = 0u64;
        let mut refusals = Vec::new();
        for step in 0..300 {
            now = match rng.random_range(0..20) {
                0 => now.saturating_sub(rng.random_range(0..3 * slice * slices)), // backwards
                1 => now + rng.random_range(0..4 * slice * slices),
                2 if step % 50 == 0 => now + (1 << 16) * slice + rng.random_range(0..3 * slice), // tag wrap
                _ => now + rng.random_range(0..slice),
            };
            let n = rng.random_range(0..=limit + 1);
            let ctx = format!(
                "case {case} step {step} now {now} n {n} limit {limit} S {slices} L {slice}"
            );
            match rng.random_range(0..10) {
                0 => {
                    assert_eq!(
                        sliding.available_at(ts(now)),
                        model.available(now),
                        "available {ctx}"
                    );
                    if fixed {
                        assert_eq!(
                            fixed_lim.available_at(ts(now)),
                            model.available(now),
                            "fixed available {ctx}"
                        );
                    }
                }
                1 => {
                    assert_eq!(
                        sliding.retry_after_at(ts(now), n),
                        model.retry_after(now, n),
                        "retry {ctx}"
                    );
                    if fixed {
                        assert_eq!(
                            fixed_lim.retry_after_at(ts(now), n),
                            model.retry_after(now, n),
                            "fixed retry {ctx}"
                        );
                    }
                }
                2 if step % 30 == 0 => {
                    let l = rng.random_range(0..=12u64);
                    model.limit = l;
                    sliding.set_limit(l);
                    fixed_lim.set_limit(l);
                }
                _ => {
                    let want = model.acquire(now, n);
                    let d = sliding.decide_at(ts(now), n);
                    assert_eq!(verdict(d), want, "acquire {ctx}");
                    if want.is_err() {
                        // A refusal's retry time, as the model says now, and
                        // again after the limiter has moved on.
                        let retry = model.retry_after(now, n);
                        assert_eq!(d.retry_after(), retry, "refusal's retry {ctx}");
                        refusals.push((d, retry, ctx.clone()));
                    }
                    if fixed {
                        assert_eq!(
                            verdict(fixed_lim.decide_at(ts(now), n)),
                            want,
                            "fixed acquire {ctx}"
                        );
                    }
                }
            }
        }
        for (d, retry, ctx) in refusals {
            assert_eq!(d.retry_after(), retry, "refusal's retry read late: {ctx}");
        }
    }
}

/// A reference for several limits over public `MultiLimiter`: every grant
/// as `(finest epoch, n)`, each limit's window counted at its own slices.
struct MultiModel {
    /// `(limit, ratio to the finest slice, slices)` per limit.
    levels: Vec<(u64, u64, u64)>,
    slice: u64,
    newest: u64,
    grants: Vec<(u64, u64)>,
}

impl MultiModel {
    fn used(&self, i: usize, j: u64) -> u64 {
        let (_, r, s) = self.levels[i];
        let w = |e: u64| e / r <= j / r && j / r - e / r < s;
        self.grants.iter().filter(|g| w(g.0)).map(|g| g.1).sum()
    }

    fn acquire(&mut self, now: u64, n: u64) -> bool {
        let j = (now / self.slice).max(self.newest);
        if n == 0 {
            return true;
        }
        if self.levels.iter().any(|l| n > l.0) {
            return false;
        }
        self.newest = j;
        let fits = (0..self.levels.len()).all(|i| self.used(i, j) + n <= self.levels[i].0);
        if fits {
            self.grants.push((j, n));
        }
        fits
    }

    fn available(&self, now: u64) -> u64 {
        let j = (now / self.slice).max(self.newest);
        let left = |i: usize| self.levels[i].0.saturating_sub(self.used(i, j));
        (0..self.levels.len()).map(left).min().unwrap()
    }
}

#[test]
fn multi_limits_match_the_reference() {
    let mut rng = StdRng::seed_from_u64(0x317);
    for case in 0..300 {
        let slice = rng.random_range(1..=20u64);
        let k = rng.random_range(1..=3);
        let levels: Vec<(u64, u64, u64)> = (0..k)
            .map(|i| {
                let ratio = if i == 0 { 1 } else { rng.random_range(1..=6) };
                (rng.random_range(0..=10), ratio, rng.random_range(1..=4))
            })
            .collect();
        let spec: Vec<(u64, Duration, usize)> = levels
            .iter()
            .map(|&(l, r, s)| (l, Duration::from_nanos(slice * r * s), s as usize))
            .collect();
        let clock = ManualClock::new();
        let quotas: Vec<Quota> = spec
            .iter()
            .map(|&(l, w, s)| Quota::per(l, w).slices(s))
            .collect();
        let lim = MultiLimiter::builder(&quotas)
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut model = MultiModel {
            levels,
            slice,
            newest: 0,
            grants: Vec::new(),
        };
        let span = spec.iter().map(|l| l.1.as_nanos() as u64).max().unwrap();
        let mut now = 0u64;
        for step in 0..300 {
            now = match rng.random_range(0..16) {
                0 => now.saturating_sub(rng.random_range(0..span)),
                1 => now + rng.random_range(0..3 * span),
                _ => now + rng.random_range(0..slice),
            };
            let n = rng.random_range(0..=4);
            let ctx = format!("case {case} step {step} now {now} n {n} {spec:?}");
            if rng.random_range(0..8) == 0 {
                assert_eq!(
                    lim.available_at(ts(now)),
                    model.available(now),
                    "available {ctx}"
                );
            } else {
                assert_eq!(
                    lim.try_acquire_at(ts(now), n),
                    model.acquire(now, n),
                    "acquire {ctx}"
                );
            }
        }
    }
}
