#!/usr/bin/env bash
# ThreadSanitizer and AddressSanitizer over the library's unit tests and
# its threaded and per-key integration tests (tests/*threads*.rs,
# tests/keyed*.rs), at their full sizes, on real threads.
#
#   bash scripts/san.sh
#
# 0. The nightly toolchain's rust-src component (a sanitizer needs the
#    standard library rebuilt with it: -Zbuild-std), installed when
#    missing; the script stops if it cannot be (it never skips a sanitizer).
# 1. ThreadSanitizer: data races between non-atomic accesses (a free
#    included) that no happens-before orders. An optimized build: under
#    TSan a debug build runs these tests in about 7 minutes on the 2-core
#    machines, an optimized one in about 40 seconds, and builds no slower.
# 2. AddressSanitizer, with LeakSanitizer: use after free, out-of-bounds
#    accesses, double frees, leaks. A debug build, so that the library's
#    debug assertions and the standard library's checks of unsafe
#    preconditions run too.
# Each builds in its own target directory (tsan/ and asan/ under
# $CARGO_TARGET_DIR, or under target/), so the normal build is not
# invalidated. Both run, and each is timed, even if the first fails.
#
# ThreadSanitizer models neither standalone fences (atomic::fence) nor
# membarrier(2), on which the per-key collector's reader side relies
# (src/reclaim/barrier.rs): what it orders is invisible to TSan. That gives
# no false report here (a reader that loaded a retired object is always
# one whose pin the collector read, so the object is not freed), but TSan
# cannot check that part of the protocol either: Miri's data-race
# detector, which does model SeqCst fences, does (scripts/miri.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

source scripts/nightly.sh
need_nightly rust-src

host=x86_64-unknown-linux-gnu
[ "$(rustc +nightly -vV | sed -n 's/^host: //p')" = "$host" ] ||
    fail "the sanitizer runs are set up for $host"
targets=(--lib --test '*threads*' --test 'keyed*')

# sanitize NAME RUSTFLAGS CARGO-ARGS...: one timed test run under a sanitizer.
sanitize() {
    local name=$1 flags=$2 start=$SECONDS rc=0
    shift 2
    local cmd=(cargo +nightly test -Zbuild-std --target "$host"
        --target-dir "${CARGO_TARGET_DIR:-target}/$name"
        -p stripecount --no-fail-fast "$@" "${targets[@]}")
    echo "== $name"
    echo "   RUSTFLAGS=\"$flags\" ${cmd[*]}"
    RUSTFLAGS="$flags" "${cmd[@]}" || rc=$?
    echo "== $name: $((SECONDS - start))s, $([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")"
    return "$rc"
}

tsan_rc=0
asan_rc=0
TSAN_OPTIONS="${TSAN_OPTIONS:-} second_deadlock_stack=1" \
    sanitize tsan "-Zsanitizer=thread" --release || tsan_rc=$?
ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_stack_use_after_return=1" \
    sanitize asan "-Zsanitizer=address" || asan_rc=$?
[ "$tsan_rc" = 0 ] && [ "$asan_rc" = 0 ] || fail "a sanitizer found a problem (see above)"
