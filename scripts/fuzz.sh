#!/usr/bin/env bash
# The fuzz targets (fuzz/: cargo-fuzz, libFuzzer, the nightly toolchain)
# over every parser of outside input; see fuzz/README.md for what each
# target checks and FUZZING.md for the campaigns run.
#
#   bash scripts/fuzz.sh smoke              # CI: every target 30 s
#   bash scripts/fuzz.sh campaign           # every target 10^7 runs
#   bash scripts/fuzz.sh campaign client_ip # the named targets only
#
# FUZZ_SECS (smoke, default 30) and FUZZ_RUNS (campaign, default 10000000)
# change the budget a target; FUZZ_MAX_SECS also caps a campaign's target
# in seconds (it then stops at whichever comes first, and says which).
#
# 0. The nightly toolchain and cargo-fuzz, installed when missing
#    (`cargo install cargo-fuzz --locked`; an installed one is kept). The
#    script stops if either cannot be had: it never skips the fuzzing.
# 1. Every target built once, optimized, with debug assertions and
#    overflow checks on. The smoke adds AddressSanitizer (the library has
#    unsafe code); the campaign runs without it, three to four times as
#    many executions a second, so that 10^7 a target fit in an hour on
#    the 2-core machines.
# 2. Each target (two at a time in the smoke), from its checked-in seeds
#    (fuzz/corpus/<target>, read only) and a working corpus of the run's own (under
#    $CARGO_TARGET_DIR or target/, in fuzz-<mode>/), with libFuzzer's
#    limits: an input that runs over 10 s is a hang, an allocation of
#    more than 256 MiB or a process above 2 GiB is a finding. A finding
#    is written to fuzz/artifacts/<target>/ (replay it with
#    `cargo +nightly fuzz run <target> <file>`). Every target runs even if
#    one fails; the script fails if any did, and prints per target the
#    runs, the seconds and the result (the campaign's lines are what
#    FUZZING.md records).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

source scripts/nightly.sh

mode="${1:-}"
shift || true
case "$mode" in
    smoke) budget=(-max_total_time="${FUZZ_SECS:-30}"); san=address ;;
    campaign)
        budget=(-runs="${FUZZ_RUNS:-10000000}")
        [ -z "${FUZZ_MAX_SECS:-}" ] || budget+=(-max_total_time="$FUZZ_MAX_SECS")
        san=none
        ;;
    *) fail "usage: scripts/fuzz.sh smoke|campaign [target...]" ;;
esac

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "== installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal ||
        fail "could not install the nightly toolchain; install it by hand:
    rustup toolchain install nightly"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked ||
        fail "could not install cargo-fuzz; install it by hand: cargo install cargo-fuzz --locked"
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
[ ${#targets[@]} -gt 0 ] || fail "no fuzz targets found (fuzz/Cargo.toml)"

work="$(realpath -m "${CARGO_TARGET_DIR:-target}")/fuzz-$mode"
# A build directory a mode: the two builds differ in their flags, so one
# directory would rebuild everything at each switch.
flags=(-O -a -s "$san" --target-dir "$work/build")
echo "== building ${targets[*]} (cargo +nightly fuzz build ${flags[*]})"
cargo +nightly fuzz build "${flags[@]}" || fail "the fuzz targets did not build"

limits=(-timeout=10 -malloc_limit_mb=256 -rss_limit_mb=2048 -print_final_stats=1)
# One target: its libFuzzer run, then its summary line in $work/$t.result
# (and what libFuzzer said about a finding, printed after it).
run_target() {
    local t=$1 seeds="$PWD/fuzz/corpus/$1" log="$work/$1.log" start rc=0 secs runs result
    mkdir -p "$work/$t"
    local cmd=(cargo +nightly fuzz run "${flags[@]}" "$t" "$work/$t" "$seeds" --
        "${budget[@]}" "${limits[@]}")
    echo "== $t: ${cmd[*]}"
    start=$(date +%s)
    "${cmd[@]}" >"$log" 2>&1 || rc=$?
    secs=$(( $(date +%s) - start ))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" = 0 ]; then
        result="no finding"
    else
        result="FAILED (exit $rc)"
        {
            grep -E 'panicked at|^==[0-9]+==|^SUMMARY|Test unit written|^Base64' "$log" | head -20 || true
            tail -5 "$log"
        } >"$work/$t.finding"
    fi
    echo "$t: ${runs:-?} runs in ${secs} s, $result (log: $log)" >"$work/$t.result"
}
for t in "${targets[@]}"; do
    [ -d "$PWD/fuzz/corpus/$t" ] || fail "$t has no seed corpus ($PWD/fuzz/corpus/$t)"
    rm -f "$work/$t.result" "$work/$t.finding"
done
# The smoke runs two targets at a time (one core each: libFuzzer runs one
# thread), the campaign one (FUZZ_JOBS changes either): the five 30 s
# smokes took 150 s one after the other.
jobs_max=${FUZZ_JOBS:-$([ "$mode" = smoke ] && echo 2 || echo 1)}
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    run_target "$t" &
done
wait || true
failed=()
summary=()
for t in "${targets[@]}"; do
    line=$(cat "$work/$t.result" 2>/dev/null || echo "$t: no result (the run did not finish)")
    summary+=("$line")
    case "$line" in
        *"no finding"*) ;;
        *)
            failed+=("$t")
            echo
            echo "== $line"
            cat "$work/$t.finding" 2>/dev/null || true
            ;;
    esac
done

echo
echo "== fuzz $mode on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    fail "fuzz $mode: ${failed[*]} failed (findings in fuzz/artifacts/)"
fi
