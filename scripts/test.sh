#!/usr/bin/env bash
# Every test of the workspace, loom models included.
#
#   bash scripts/test.sh
#
# 1. `cargo test --workspace`: unit, integration, CLI and doc tests.
# 1b. The integration features (metrics, prometheus): their tests and doc
#    tests, and the README's doc tests (which use them). Only those targets,
#    so the rest of the workspace is not rebuilt with the features.
# 1b'. The clock's tests without the default `tsc` feature: the `Instant`
#    fallback through the public API.
# 1c. The library's unit tests and the per-key tests again in release: the
#    head's add guards a rustc miscompilation that only optimized builds
#    show (`keyed::head::tests::single_threaded_adds_are_never_contended`).
# 2. The loom models in loom-tests/, built with `--cfg loom` in their own
#    target directory (so the normal build is not invalidated) and run with
#    a preemption bound of 2. Deeper: LOOM_MAX_PREEMPTIONS=3 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test --workspace"
cargo test --workspace

echo "== integration features: tests, doc tests and the README (--all-features)"
cargo test -p stripecount --all-features --test metrics --test prometheus
cargo test -p stripecount --all-features --doc -- metrics prometheus ReadmeDoctests

echo "== the clock without the tsc feature (Instant fallback)"
cargo test -p stripecount --no-default-features --test clock

echo "== library unit tests and per-key tests, optimized (miscompilation guard)"
cargo test -p stripecount --release --lib --test keyed

echo "== loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2})"
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
    cargo test -p stripecount-loom-tests --release --target-dir target/loom
