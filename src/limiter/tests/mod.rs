//! Unit tests of the admission state against a reference model: thousands
//! of seeded random requests, with limits that change from call to call,
//! one or several levels, times that jump, go backwards and wrap the tag
//! space, and states sealed and copied along the way.

mod model;

use super::config::{Config, MAX_BUDGET};
use super::state::{AdmissionState, Refused};
use super::{Decision, Denied};
use crate::sized;
use model::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// A random time step from `now`: mostly within a slice, sometimes far
/// ahead, backwards, or across a multiple of 2^16 slices (a tag wrap).
fn step(rng: &mut StdRng, now: u64, slice: u64, span: u64, wrap: bool) -> u64 {
    match rng.random_range(0..20) {
        0 => now.saturating_sub(rng.random_range(0..3 * span)),
        1 => now + rng.random_range(0..4 * span),
        2 if wrap => now + (1 << 16) * slice + rng.random_range(0..3 * slice),
        _ => now + rng.random_range(0..slice),
    }
}

fn check_decision(d: &Decision, m: &Model, now: u64, n: u64, limits: &[u64], ctx: &str) {
    let i = d.limit_index();
    let j = m.judge_at(now);
    assert_eq!(d.limit(), limits[i], "limit {ctx}");
    assert_eq!(
        d.retry_after(),
        m.retry_after(now, n, limits),
        "retry {ctx}"
    );
    assert_eq!(d.reset_after(), m.reset(i, j, now), "reset {ctx}");
    assert_eq!(
        d.remaining(),
        limits[i].saturating_sub(m.used(i, j)),
        "remaining {ctx}"
    );
}

/// Runs `steps` random requests, reads and seal-and-copy moves on a state
/// of `levels` (`(slice length in finest slices, slices)`), checking every
/// answer against the model.
fn run(seed: u64, levels: &[(u64, u64)], steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let slice = rng.random_range(1..=20u64);
    let cfg = if levels.len() == 1 {
        Config::single(
            12,
            Duration::from_nanos(slice * levels[0].1),
            levels[0].1 as usize,
        )
    } else {
        let w: Vec<_> = levels
            .iter()
            .map(|&(r, s)| (Duration::from_nanos(slice * r * s), s as usize))
            .collect();
        Config::multi(&w)
    }
    .unwrap();
    let span = levels.iter().map(|&(r, s)| r * s).max().unwrap() * slice;
    let mut m = Model {
        levels: levels.to_vec(),
        slice,
        newest: 0,
        grants: Vec::new(),
    };
    let mut state = AdmissionState::new(&cfg, 0);
    let mut now = 0u64;
    // Every refusal with the times it had to report, read again at the end:
    // a refusal keeps what its times follow from (`times.rs`), so they
    // stay the refusal's however much the state moved since.
    let mut refusals = Vec::new();
    for st in 0..steps {
        now = step(&mut rng, now, slice, span, st % 97 == 0);
        let limits: Vec<u64> = levels.iter().map(|_| rng.random_range(0..=12)).collect();
        let n = rng.random_range(0..=8u64);
        let ctx =
            format!("seed {seed} step {st} now {now} n {n} limits {limits:?} {levels:?} L {slice}");
        match rng.random_range(0..12) {
            0 => assert_eq!(
                state.available(&cfg, now, &limits),
                Some(m.available(now, &limits)),
                "available {ctx}"
            ),
            1 => {
                let d = state.peek(&cfg, now, n, &limits).unwrap();
                let fits = m.retry_after(now, n, &limits) == Some(Duration::ZERO);
                assert_eq!(d.is_granted(), fits, "peek {ctx}");
                check_decision(&d, &m, now, n, &limits, &ctx);
            }
            2 => assert_eq!(state.is_idle_at(&cfg, now), m.idle(now), "idle {ctx}"),
            3 => {
                // Seal for good and go on with a copy (a move); the sealed
                // original is final and agrees with the copy.
                state.seal(&cfg);
                assert!(state.is_sealed());
                let big = vec![12; limits.len()];
                assert_eq!(state.acquire(&cfg, now, 1, &big), Err(Refused::Sealed));
                assert_eq!(
                    state.is_idle_at(&cfg, now),
                    m.idle(now),
                    "sealed idle {ctx}"
                );
                let copy = state.copied(&cfg);
                assert!(
                    state.copy_into(&cfg, &copy),
                    "a second copy changes nothing"
                );
                assert_eq!(
                    copy.available(&cfg, now, &limits),
                    state.available(&cfg, now, &limits)
                );
                state = copy;
            }
            4 => {
                let d = state.decide(&cfg, now, n, &limits).unwrap();
                let want = m.acquire(now, n, &limits);
                match want {
                    Ok(e) => {
                        assert_eq!(d.__slice(), Some(e), "decide {ctx}");
                        if n > 0 {
                            assert_eq!(d.retry_after(), Some(Duration::ZERO), "{ctx}");
                            let i = d.limit_index();
                            let j = m.judge_at(now);
                            assert_eq!(d.remaining(), limits[i] - m.used(i, j), "remaining {ctx}");
                            let least = (0..limits.len()).map(|c| limits[c] - m.used(c, j)).min();
                            assert_eq!(Some(d.remaining()), least, "binding {ctx}");
                            assert_eq!(d.reset_after(), m.reset(i, j, now), "reset {ctx}");
                        }
                    }
                    Err(why) => {
                        let got = (d.denied().unwrap(), d.limit_index());
                        assert!(why.contains(&got), "decide {ctx}: {got:?} not in {why:?}");
                        check_decision(&d, &m, now, n, &limits, &ctx);
                        refusals.push((d, d.retry_after(), d.reset_after(), ctx));
                    }
                }
            }
            _ => {
                let got = state.acquire(&cfg, now, n, &limits);
                match m.acquire(now, n, &limits) {
                    Ok(e) => assert_eq!(got, Ok(e), "acquire {ctx}"),
                    Err(why) => match got {
                        Err(Refused::Denied { reason, level }) => {
                            assert!(
                                why.contains(&(reason, level)),
                                "acquire {ctx}: {reason:?} {level} not in {why:?}"
                            )
                        }
                        other => panic!("acquire {ctx}: {other:?}, want one of {why:?}"),
                    },
                }
            }
        }
    }
    for (d, retry, reset, ctx) in refusals {
        assert_eq!(
            (d.retry_after(), d.reset_after()),
            (retry, reset),
            "read late: {ctx}"
        );
    }
}

#[test]
fn one_level_matches_the_reference() {
    for seed in 0..sized(300, 6) {
        let slices = 1 + seed % 6;
        run(seed, &[(1, slices)], sized(400, 8));
    }
}

/// Windows whose inline counts are narrow (3, 2 and 1 bits: counts of 8, 4
/// and 2 spill), or absent (60 slices), so that the inline history, the
/// spill and the block all meet the reference.
#[test]
fn one_level_spilling_and_blocked_match_the_reference() {
    for seed in 0..sized(120, 5) {
        let slices = [16, 24, 47, 48, 60][seed as usize % 5];
        run(5000 + seed, &[(1, slices)], sized(600, 8));
    }
}

#[test]
fn several_levels_match_the_reference() {
    let mut rng = StdRng::seed_from_u64(11);
    for seed in 0..sized(300, 4) {
        let k = rng.random_range(2..=3);
        let mut levels = vec![(1, rng.random_range(1..=4))];
        for _ in 1..k {
            levels.push((rng.random_range(1..=5), rng.random_range(1..=4)));
        }
        // The fold level need not come first.
        let at = rng.random_range(0..k);
        levels.swap(0, at);
        run(1000 + seed, &levels, sized(400, 8));
    }
}

#[test]
fn small_counts_stay_inline_and_a_large_one_spills() {
    // 10 slices: 9 counts of 5 bits inline (`inline.rs`).
    let cfg = Config::single(100, Duration::from_nanos(10), 10).unwrap();
    assert_eq!(cfg.inline_width(), 5);
    let s = AdmissionState::new(&cfg, 0);
    assert!(s.acquire(&cfg, 3, 2, &[100]).is_ok());
    // Rolling away from a slice that granted nothing, or past the window,
    // and then slices of small counts: still no block.
    assert!(s.acquire(&cfg, 100, 1, &[100]).is_ok());
    for t in 101..110 {
        assert!(s.acquire(&cfg, t, 31, &[100]).is_ok() || t > 102);
        assert_eq!(s.heap_bytes(&cfg), 0, "t {t}");
    }
    assert_eq!(s.available(&cfg, 109, &[100]), Some(100 - 1 - 31 - 31 - 31));
    // A slice of 32 does not fit its field: the roll out of it spills.
    let s = AdmissionState::new(&cfg, 0);
    assert!(s.acquire(&cfg, 0, 32, &[100]).is_ok());
    assert!(s.acquire(&cfg, 1, 1, &[100]).is_ok());
    assert_eq!(s.heap_bytes(&cfg), cfg.block_bytes());
    assert_eq!(s.available(&cfg, 1, &[100]), Some(67));
    assert_eq!(s.available(&cfg, 10, &[100]), Some(99));
    assert_eq!(std::mem::size_of::<AdmissionState>(), 24);
    // 48 slices: one bit each; 60: none, a block from the first count.
    for (slices, width) in [(48, 1), (60, 0)] {
        let cfg = Config::single(100, Duration::from_nanos(slices), slices as usize).unwrap();
        assert_eq!(cfg.inline_width(), width);
        let s = AdmissionState::new(&cfg, 0);
        assert!(s.acquire(&cfg, 0, 1, &[100]).is_ok());
        assert!(s.acquire(&cfg, 1, 1, &[100]).is_ok());
        let block = if width == 0 { cfg.block_bytes() } else { 0 };
        assert_eq!(s.heap_bytes(&cfg), block);
    }
}

#[test]
fn a_multi_limit_state_allocates_at_its_first_count() {
    // 3 per 2 ns (1 ns slices) and 5 per 8 ns (4 ns slices).
    let cfg = Config::multi(&[(Duration::from_nanos(2), 2), (Duration::from_nanos(8), 2)]).unwrap();
    let limits = [3, 5];
    let s = AdmissionState::new(&cfg, 0);
    assert_eq!(s.heap_bytes(&cfg), 0, "quiet until a count is recorded");
    assert_eq!(s.acquire(&cfg, 0, 2, &limits), Ok(0));
    assert_eq!(s.heap_bytes(&cfg), 0, "slice 0 is still open");
    assert_eq!(s.available(&cfg, 0, &limits), Some(1));
    // Rolling out of slice 0 records its 2: the first block.
    assert_eq!(s.acquire(&cfg, 1, 1, &limits), Ok(1));
    assert_eq!(s.heap_bytes(&cfg), cfg.block_bytes());
    assert_eq!(s.available(&cfg, 1, &limits), Some(0));
    // The slow limit still holds all three at 3 (slice 0 of 4 ns).
    assert_eq!(s.available(&cfg, 3, &limits), Some(2));
    assert_eq!(s.available(&cfg, 8, &limits), Some(3));
    // A state copied while quiet stays quiet.
    let q = AdmissionState::new(&cfg, 5);
    let c = q.copied(&cfg);
    assert_eq!(c.heap_bytes(&cfg), 0);
    assert_eq!(c.acquire(&cfg, 5, 3, &limits), Ok(5));
    assert_eq!(c.available(&cfg, 6, &limits), Some(0));
}

#[test]
fn pending_refuses_until_copied_and_budgets_never_reach_all_ones() {
    let cfg = Config::single(u64::MAX, Duration::from_nanos(1), 1).unwrap();
    let p = AdmissionState::pending();
    assert!(p.is_pending() && !p.is_sealed());
    assert_eq!(p.acquire(&cfg, 0, 1, &[u64::MAX]), Err(Refused::Sealed));
    assert_eq!(p.available(&cfg, 0, &[1]), None);
    assert!(!p.is_idle_at(&cfg, 0));
    assert!(!p.copy_into(&cfg, &AdmissionState::pending()));
    // The whole budget in one grant stays below the reserved value.
    let s = AdmissionState::new(&cfg, 0);
    assert!(s.acquire(&cfg, 0, u64::MAX, &[u64::MAX]).is_ok());
    assert!(cfg.budget(u64::MAX) <= MAX_BUDGET);
    s.copy_into(&cfg, &p);
    assert!(!p.is_pending());
    assert_eq!(
        p.acquire(&cfg, 0, 1, &[u64::MAX]),
        Err(Refused::Denied {
            reason: Denied::Exhausted,
            level: 0
        })
    );
    assert_eq!(p.acquire(&cfg, 1, u64::MAX, &[u64::MAX]), Ok(1));
}

#[test]
fn two_step_jump_keeps_tags_apart() {
    let cfg = Config::single(5, Duration::from_nanos(4), 4).unwrap();
    let s = AdmissionState::new(&cfg, 0);
    assert_eq!(s.acquire(&cfg, 3, 5, &[5]), Ok(3));
    // A jump of exactly 2^16 slices would alias the tag.
    let far = 3 + (1 << 16);
    assert_eq!(s.acquire(&cfg, far, 5, &[5]), Ok(far));
    let full = Refused::Denied {
        reason: Denied::Exhausted,
        level: 0,
    };
    assert_eq!(s.acquire(&cfg, far, 1, &[5]), Err(full));
    // A tag distance below S but a real distance above 2^16.
    let far2 = far + (1 << 16) + 2;
    assert_eq!(s.acquire(&cfg, far2, 5, &[5]), Ok(far2));
}
