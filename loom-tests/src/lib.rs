//! Loom models of stripecount's atomic protocols live in `tests/`. They only
//! compile under `RUSTFLAGS="--cfg loom"`; see the repository README.
//!
//! This library holds what the models share: `model`, which runs a model
//! with a preemption bound of at least 2 (deeper with
//! `LOOM_MAX_PREEMPTIONS=3`), and `expect_failure`, which asserts that loom
//! finds a bug in a naive design, so every suite is known to be able to fail.

/// Runs `f` under loom with a preemption bound of `LOOM_MAX_PREEMPTIONS`
/// (default 2).
#[cfg(loom)]
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Runs `f` under loom at a preemption bound of exactly `bound`, whatever
/// `LOOM_MAX_PREEMPTIONS` says: for the few models with four threads,
/// whose state space at a deeper bound would take CI's whole budget. Each
/// use says why its bound is enough.
#[cfg(loom)]
pub fn model_at_bound<F>(bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

/// Runs `f` under loom (as `model`) and panics unless loom finds an
/// execution in which it panics: the naive designs must be caught.
#[cfg(loom)]
pub fn expect_failure<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model(f)));
    assert!(
        caught.is_err(),
        "loom found no failing execution of the naive design `{name}`: the model cannot fail"
    );
}
