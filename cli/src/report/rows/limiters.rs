//! The limiter rows: the admitting quota is [`ADMIT_LIMIT`] per window
//! (above any rate reached here, so every request is granted), the refusing
//! quota [`REFUSE_LIMIT`] (spent in the warm-up, so nearly every request is
//! refused); governor gets the same quotas. Every limiter reads its clock on
//! every request: ours `CoarseClock`, governor its default (the TSC, through
//! quanta). The two-limit rows add a per-minute limit of 60 times the quota:
//! `MultiLimiter` (one CAS a grant) and two governor limiters checked in
//! turn.

use super::{Setup, ADMIT_LIMIT, REFUSE_LIMIT, SLICES, WINDOW};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use stripecount::clock::CoarseClock;
use stripecount::{MultiLimiter, Quota, RateLimiter};
use stripecount_baselines::harness::{batches, Job};

// Our limiters read their clock on every request, as governor does; they
// use `CoarseClock` (one atomic load), the clock this crate recommends for
// hot paths (governor's default clock reads the TSC).

/// A job of requests for one permit, each result kept alive.
fn acquire_job(acquire: impl Fn() -> bool + Send + Sync + 'static) -> Job {
    Arc::new(move |_, stop| {
        batches(stop, || {
            black_box(acquire());
        })
    })
}

/// A limiter of `quota` on `CoarseClock`.
fn limiter(quota: Quota) -> RateLimiter<CoarseClock> {
    RateLimiter::builder(quota)
        .clock(CoarseClock::new())
        .build()
        .expect("a valid limiter")
}

/// A sliding window: the report's window in [`SLICES`] slices.
pub(super) fn sliding(limit: u32) -> RateLimiter<CoarseClock> {
    limiter(Quota::per(limit.into(), WINDOW).slices(SLICES))
}

/// A fixed window: the report's window in one slice.
pub(super) fn fixed(limit: u32) -> RateLimiter<CoarseClock> {
    limiter(Quota::per(limit.into(), WINDOW).slices(1))
}

pub(super) fn governor_direct(per_second: u32) -> governor::DefaultDirectRateLimiter {
    let quota = governor::Quota::per_second(NonZeroU32::new(per_second).expect("non-zero quota"));
    governor::RateLimiter::direct(quota)
}

pub(super) fn sliding_admitting(_: &Setup, _: usize) -> Job {
    let l = sliding(ADMIT_LIMIT);
    acquire_job(move || l.try_acquire(1))
}

pub(super) fn sliding_refusing(_: &Setup, _: usize) -> Job {
    let l = sliding(REFUSE_LIMIT);
    acquire_job(move || l.try_acquire(1))
}

pub(super) fn fixed_admitting(_: &Setup, _: usize) -> Job {
    let l = fixed(ADMIT_LIMIT);
    acquire_job(move || l.try_acquire(1))
}

pub(super) fn fixed_refusing(_: &Setup, _: usize) -> Job {
    let l = fixed(REFUSE_LIMIT);
    acquire_job(move || l.try_acquire(1))
}

pub(super) fn sliding_decision_refusing(_: &Setup, _: usize) -> Job {
    let l = sliding(REFUSE_LIMIT);
    acquire_job(move || l.decide(1).is_granted())
}

/// The report's limit per second and 60 times it per minute (60 slices):
/// two limits, all or nothing, one CAS a grant.
pub(super) fn multi(limit: u32) -> MultiLimiter<CoarseClock> {
    let per_second = Quota::per(limit.into(), WINDOW).slices(SLICES);
    let per_minute = Quota::per(60 * u64::from(limit), 60 * WINDOW).slices(60);
    MultiLimiter::builder([per_second, per_minute])
        .clock(CoarseClock::new())
        .build()
        .expect("a valid limiter")
}

pub(super) fn multi_admitting(_: &Setup, _: usize) -> Job {
    let l = multi(ADMIT_LIMIT);
    acquire_job(move || l.try_acquire(1))
}

/// Two governor limiters (per second and per minute) checked in turn, as
/// governor users combine limits (not atomic: a refusal by the second
/// leaves the first's cell spent).
pub(super) fn governor_two_admitting(_: &Setup, _: usize) -> Job {
    let per_minute = NonZeroU32::new(ADMIT_LIMIT.saturating_mul(60)).expect("non-zero quota");
    let a = governor_direct(ADMIT_LIMIT);
    let b = governor::RateLimiter::direct(governor::Quota::per_minute(per_minute));
    acquire_job(move || a.check().is_ok() && b.check().is_ok())
}

pub(super) fn governor_admitting(_: &Setup, _: usize) -> Job {
    let l = governor_direct(ADMIT_LIMIT);
    acquire_job(move || l.check().is_ok())
}

pub(super) fn governor_refusing(_: &Setup, _: usize) -> Job {
    let l = governor_direct(REFUSE_LIMIT);
    acquire_job(move || l.check().is_ok())
}
