#!/usr/bin/env bash
# Every test of the workspace, loom models included.
#
#   bash scripts/test.sh
#
# About 10 to 13 minutes on the 2-core machines with nothing built yet, most
# of it compiling. Each step prints what it checks and when it starts, and
# the script ends with each step's time.
#
# 0. The Redis layer's tests (redis/) start real redis-servers (and a Redis
#    Cluster, made by redis-cli): install Debian's redis-server package
#    (which brings redis-cli) when either is missing and we are root with
#    apt-get; otherwise stop and say so (never skip those tests).
# 1. `cargo test --workspace --all-features`: unit, integration, CLI and
#    doc tests, the Redis layer's included; with every feature, so the
#    integration features' tests and doc tests (metrics, prometheus, tokio:
#    the waits), the README's doc tests (which use them) and the tower
#    layer's end-to-end tests against a real axum server and client run in
#    the same build (features only add code; the `tsc` feature's absence
#    is step 1b). Then a scrape served by examples/prometheus_server.rs.
# 1b. The clock's tests without the default `tsc` feature: the `Instant`
#    fallback through the public API.
# 1c. The library's unit tests and the per-key tests again in release:
#    optimized builds inline and reorder the lock-free paths differently,
#    so both builds must pass. Only the workspace's own code is optimized:
#    the other crates (criterion, governor, rand and the like, which these
#    tests only link) are built at opt-level 0, which takes 56 s instead
#    of 79 s. The library's dependencies are reached through generic or
#    #[inline] code (CachePadded, strength_reduce), compiled into the
#    library at its own opt-level, so the code under test is the same.
#    Under CI (`CI=true`), .ci/run's ThreadSanitizer lane (scripts/san.sh)
#    runs these same targets in release, so this step says so and is not
#    repeated there.
# 2. The loom models in loom-tests/, built with `--cfg loom` in their own
#    target directory (so the normal build is not invalidated) and run with
#    a preemption bound of 2, two models at a time (see the step).
#    Deeper: LOOM_MAX_PREEMPTIONS=3 bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
times=()
last=""
# step WHAT: starts a step, and closes the previous one's timing.
step() {
    local now=$((SECONDS - start))
    [ -z "$last" ] || times+=("$(printf '%5ss  %s' "$((now - last_at))" "$last")")
    last=$1
    last_at=$now
    echo
    echo "== $1 (t+${now}s)"
}
finish() {
    step "done"
    echo "== step times"
    printf '%s\n' "${times[@]}"
}

step "0. redis-server and redis-cli, for the Redis layer's tests"
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing redis-server (the Redis layer's tests run against a real server)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    else
        echo "error: redis-server or redis-cli is not installed. The tests of redis/ (stripecount-redis)" >&2
        echo "run against a real redis-server and a Redis Cluster made by redis-cli; install them (Debian/Ubuntu: apt-get install" >&2
        echo "redis-server, as root) and run this script again." >&2
        exit 1
    fi
fi
redis-server --version
redis-cli --version

step "1. cargo test --workspace --all-features: unit, integration, CLI, doc and Redis layer tests, the integration features, the tower layer"
cargo test --workspace --all-features
# A scrape served over TCP with the OpenMetrics content type (the example
# checks its own response and fails otherwise); built with step 1's features.
cargo run -q -p stripecount --all-features --example prometheus_server -- --once >/dev/null

step "1b. the clock without the tsc feature (the Instant fallback)"
cargo test -p stripecount --no-default-features --test clock

step "1c. library unit tests and per-key tests, optimized (a release build)"
if [ "${CI:-}" = true ]; then
    echo "CI=true: run in release by scripts/san.sh (ThreadSanitizer: --release --lib --test '*threads*' --test 'keyed*'), which .ci/run calls next"
else
    cargo test -p stripecount --release \
        --config 'profile.release.package."*".opt-level = 0' \
        --config 'profile.release.package.stripecount-baselines.opt-level = 0' \
        --lib --test keyed --test keyed_edges --test keyed_hot --test keyed_threads --test keyed_rotation
fi

step "2. loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}), built with --cfg loom in their own target directory"
# The models are one test binary (loom-tests/tests/models.rs: a module a
# protocol). `cargo test` would run it on one thread per model at a time
# or on several threads at once, but a model uses the library's statics,
# which loom allows in one model at a time per process. Two models take
# most of the time alone (limiter_limits'
# a_stale_helper_meets_a_newer_quiet_word and keyed's
# rotation_racing_adds_and_an_eviction, minutes each): while each runs,
# the other core would idle. So the binary runs as two processes side by
# side, each one module at a time (all its models by exact name, on one
# test thread): the modules holding those two models first, the rest as a
# process ends. Every module runs to the end, each one's output is
# printed after it, and the step fails if any failed.
loom_rust=(env RUSTFLAGS="--cfg loom" cargo test -p stripecount-loom-tests --release
    --target-dir "${CARGO_TARGET_DIR:-target}/loom")
loom_bin=$("${loom_rust[@]}" --test models --no-run --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | grep '/models-' || true)
[ -n "$loom_bin" ] || { echo "error: the loom models were not built" >&2; exit 1; }
loom_logs=$(mktemp -d)
# Same as `cargo test`: the binary runs in the package's directory.
(cd loom-tests && "$loom_bin" --list --format terse) | sed -n 's/: test$//p' >"$loom_logs/names"
loom_mods=$(cut -d: -f1 "$loom_logs/names" | sort -u)
[ -n "$loom_mods" ] || { echo "error: no loom models listed" >&2; exit 1; }
loom_slow_first='^(limiter_limits|keyed)$'
{ grep -E "$loom_slow_first" <<<"$loom_mods" || true; grep -vE "$loom_slow_first" <<<"$loom_mods" || true; } |
    (cd loom-tests && LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" xargs -P 2 -I{} \
        sh -c 'log="$1/$3.log"; s=$(date +%s);
            grep "^$3::" "$1/names" | xargs "$2" --exact --test-threads=1 >"$log" 2>&1;
            rc=$?; echo "$rc $(( $(date +%s) - s ))s" >"$log.rc"; exit 0' sh "$loom_logs" "$loom_bin" {})
loom_rc=0
for m in $loom_mods; do
    log="$loom_logs/$m.log"
    echo "     Running the loom models of $m ($(cut -d' ' -f2 "$log.rc" 2>/dev/null || echo '?'))"
    cat "$log" 2>/dev/null || true
    [ "$(cut -d' ' -f1 "$log.rc" 2>/dev/null)" = 0 ] || { echo "error: the loom models of $m failed" >&2; loom_rc=1; }
done
rm -rf "$loom_logs"
# The loom library's unit and doc tests (none today), as `cargo test` runs them.
"${loom_rust[@]}" --lib
"${loom_rust[@]}" --doc
[ "$loom_rc" = 0 ] || { echo "error: a loom model failed (see above)" >&2; exit 1; }

finish
