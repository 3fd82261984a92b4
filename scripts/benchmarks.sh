#!/usr/bin/env bash
# Runs the benchmarks and rewrites the generated part of BENCHMARKS.md (the
# tables between its BEGIN/END GENERATED markers; the method above them is
# written by hand).
#
#   bash scripts/benchmarks.sh                 # every criterion bench, twice
#   BENCH_TIME=0.6 bash scripts/benchmarks.sh  # 0.6 s a point (a quicker run)
#
# 1. Builds the criterion benches (library, with the `metrics` feature).
# 2. Runs every bench BENCH_RUNS times (default 2), one whole pass after the
#    other, each pass into a criterion directory of its own; the load average
#    is read before and after every bench. Every point: BENCH_TIME seconds
#    measured (default 2) after a quarter of that of warm-up, 20 samples.
#    About 280 points a pass: on the 2-core machines a pass took 6 minutes
#    with BENCH_TIME=0.6 (2026-11-28); with the default 2 s, expect about 13.
#    The first build of the benches takes 3 to 7 minutes.
# 3. The contention report (`cargo run --release`: the CLI, about 75 s),
#    which also rewrites docs/contention.csv and docs/contention.svg.
#    Skip: BENCH_REPORT=0.
# 4. Instructions an operation of the per-key structures, counted by
#    callgrind (scripts/callgrind-keyed.sh; repeatable whatever the load):
#    about 40 s a structure, seven of them; CALLGRIND_BEFORE=path/to/keyed_steady
#    (an older build of examples/keyed_steady.rs) counts that build too, and
#    the table shows both; CALLGRIND_BEFORE_AT names it (a commit). And a
#    refusal of one shared limiter (scripts/callgrind-limiter.sh), about 40 s
#    a mode, eight of them; with CALLGRIND_BASE=<commit>, also on that
#    commit's library (the same harness, built in its own target directory:
#    a before and after). Skip: BENCH_CALLGRIND=0.
# 5. The tower layer's and the Redis layer's benches only with BENCH_LAYERS=1
#    (they build tokio, hyper and a Redis client in release, and the Redis
#    one starts a redis-server). Among them `server` (tower/benches/server/,
#    about 45 s, also starts a redis-server): requests a second through a
#    real axum server against tower-governor, not criterion; it runs every
#    configuration twice itself, so it runs in the first pass only and
#    writes its figures to server.json there. `hotkeys` (benches/hotkeys.rs,
#    about 3 min) is not criterion either: `HotKeySketch`'s accuracy
#    against the true window counts and its adds a second against
#    heavykeeper, each configuration twice, written to hotkeys.md in the
#    first pass. `flood` (redis/benches/flood.rs, about 1 min, starts a
#    redis-server) neither: the cluster limiter under a flood of new keys and
#    on warm keys from 1 to 64 callers against a local KeyedLimiter, twice,
#    written to flood.md in the first pass.
# Then `python3 scripts/bench-table.py --write BENCHMARKS.md` renders one
# table per bench from the runs' criterion estimates (median of the samples)
# and the server bench's server.json, with the date, the machine, the load
# and the command.
#
# BENCH_ONLY="counter window" runs those benches only (names of benches/*.rs,
# plus `layer`, `cluster`, `flood` and `server` with BENCH_LAYERS=1, and
# `callgrind` for step 4 alone) and rewrites only their sections of
# BENCHMARKS.md, each dated; BENCH_RENDER=0 leaves
# BENCHMARKS.md alone. Everything a run produces is kept in
# ${CARGO_TARGET_DIR:-target}/benchmarks/.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

target="${CARGO_TARGET_DIR:-target}"
out="$target/benchmarks"
runs="${BENCH_RUNS:-2}"
benches=(counter window clock limiter multi keyed metrics hotkeys)
layers=()
if [ "${BENCH_LAYERS:-0}" = 1 ]; then
    layers=(layer cluster flood server)
fi
callgrind_only=0
if [ -n "${BENCH_ONLY:-}" ]; then
    read -r -a only <<<"$BENCH_ONLY"
    benches=()
    for b in "${only[@]}"; do
        if [ "$b" = callgrind ]; then callgrind_only=1; else benches+=("$b"); fi
    done
    layers=()
fi

bench_time="${BENCH_TIME:-2}"
warm=$(python3 -c "print(max(0.1, float('$bench_time') / 4))")
# The medians are all the tables use: fewer bootstrap resamples than
# criterion's 100,000 only widen its confidence intervals, and save time.
crit=(--warm-up-time "$warm" --measurement-time "$bench_time" --sample-size 20 --nresamples 10000)

# cargo_bench NAME ARGS...: the cargo command of one bench.
cargo_bench() {
    case "$1" in
    layer) echo cargo bench -p stripecount-tower --bench layer ;;
    cluster) echo cargo bench -p stripecount-redis --bench cluster ;;
    flood) echo cargo bench -p stripecount-redis --bench flood ;;
    server) echo cargo bench -p stripecount-tower --features redis --bench server ;;
    metrics) echo cargo bench -p stripecount --features metrics --bench metrics ;;
    *) echo cargo bench -p stripecount --bench "$1" ;;
    esac
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

start=$SECONDS
elapsed() { echo "$((SECONDS - start))s"; }

rm -rf "$out"
mkdir -p "$out"
{
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
    echo "cpus=$(nproc)"
    echo "memory=$(free -g | awk '/^Mem:/ { print $2 " GiB" }')"
    echo "rustc=$(rustc --version)"
    echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benches baselines || echo ' (modified)')"
    echo "runs=$runs"
    echo "bench_time=${BENCH_TIME:-}"
    echo "layers=${BENCH_LAYERS:-0}"
    echo "crit=${crit[*]}"
} >"$out/machine.txt"
cat "$out/machine.txt"

echo "== building the benches ($(elapsed))"
if [ ${#benches[@]} -gt 0 ]; then
    cargo bench -p stripecount --features metrics --no-run
fi
for b in "${layers[@]}"; do
    $(cargo_bench "$b") --no-run
done

for r in $(seq 1 "$runs"); do
    [ ${#benches[@]} -gt 0 ] || [ ${#layers[@]} -gt 0 ] || break
    dir="$out/run$r"
    mkdir -p "$dir"
    rm -rf "$target/criterion"
    for b in "${benches[@]}" "${layers[@]}"; do
        # The server, hotkeys and flood benches interleave their own two
        # runs: once is enough.
        if { [ "$b" = server ] || [ "$b" = hotkeys ] || [ "$b" = flood ]; } && [ "$r" -gt 1 ]; then
            continue
        fi
        echo "== run $r/$runs: $b, load $(load) ($(elapsed))"
        before=$(load)
        t0=$SECONDS
        args=("${crit[@]}")
        if [ "$b" = server ] || [ "$b" = hotkeys ] || [ "$b" = flood ]; then
            args=()
        fi
        # shellcheck disable=SC2046
        BENCH_MD="$(cd "$dir" && pwd)/$b.md" \
            BENCH_SERVER_JSON="$(cd "$dir" && pwd)/server.json" $(cargo_bench "$b") -- "${args[@]}" >"$dir/$b.log" 2>&1 ||
            { tail -20 "$dir/$b.log"; echo "error: bench $b failed (log: $dir/$b.log)" >&2; exit 1; }
        echo "$before|$(load)|$((SECONDS - t0))" >"$dir/$b.load"
    done
    # No criterion directory when only the server bench ran.
    if [ -d "$target/criterion" ]; then
        mv "$target/criterion" "$dir/criterion"
    fi
done

if [ "${BENCH_REPORT:-1}" = 1 ] && [ -z "${BENCH_ONLY:-}" ]; then
    echo "== the contention report, load $(load) ($(elapsed))"
    before=$(load)
    t0=$SECONDS
    cargo run --release -p stripecount-cli -- --csv docs/contention.csv --svg docs/contention.svg \
        >"$out/report.txt" 2>"$out/report.log"
    echo "$before|$(load)|$((SECONDS - t0))" >"$out/report.load"
fi

if [ "${BENCH_CALLGRIND:-1}" = 1 ] && { [ -z "${BENCH_ONLY:-}" ] || [ "$callgrind_only" = 1 ]; }; then
    echo "== callgrind: instructions an operation ($(elapsed))"
    t0=$SECONDS
    modes=(kw hk kwb dm kl klr gvu)
    bash scripts/callgrind-keyed.sh "${modes[@]}" >"$out/callgrind.txt"
    if [ -n "${CALLGRIND_BEFORE:-}" ]; then
        # A mode at a time: an older harness may lack some (a row of "-").
        {
            head -1 "$out/callgrind.txt"
            for m in "${modes[@]}"; do
                BIN="$CALLGRIND_BEFORE" bash scripts/callgrind-keyed.sh "$m" 2>/dev/null |
                    tail -n +2 || printf '%-8s %14s %12s\n' "$m" - -
            done
        } >"$out/callgrind-before.txt"
        echo "${CALLGRIND_BEFORE_AT:-an older build}" >"$out/callgrind-before.at"
    fi
    echo "$(load)|$(load)|$((SECONDS - t0))" >"$out/callgrind.load"
    t0=$SECONDS
    modes=(rt rd rdt rd@1 rdt@1 md kd gv gvt)
    bash scripts/callgrind-limiter.sh "${modes[@]}" >"$out/callgrind-limiter.txt"
    echo "$(load)|$(load)|$((SECONDS - t0))" >"$out/callgrind-limiter.load"
    # The same refusals on an older commit's library (the same harness),
    # for a before and after: CALLGRIND_BASE=<commit>.
    if [ -n "${CALLGRIND_BASE:-}" ]; then
        base="$out/base"
        mkdir -p "$base"
        git archive "$CALLGRIND_BASE" | tar -x -C "$base"
        cp examples/refusal_steady.rs "$base/examples/"
        (cd "$base" && CARGO_TARGET_DIR="$(cd .. && pwd)/base-target" cargo build --release \
            --example refusal_steady >/dev/null)
        BIN="$out/base-target/release/examples/refusal_steady" bash scripts/callgrind-limiter.sh \
            "${modes[@]}" >"$out/callgrind-limiter-base.txt"
        git rev-parse --short "$CALLGRIND_BASE" >"$out/callgrind-limiter-base.commit"
    fi
fi

echo "== done in $(elapsed)"
echo "$((SECONDS - start))" >"$out/seconds.txt"
if [ "${BENCH_RENDER:-1}" = 1 ]; then
    if [ -n "${BENCH_ONLY:-}" ]; then
        # A partial run rewrites only its benches' sections.
        for b in $BENCH_ONLY; do
            python3 scripts/bench-table.py --write BENCHMARKS.md --from "$out" --section "$b"
        done
        echo "== BENCHMARKS.md: the sections of $BENCH_ONLY rewritten"
    else
        python3 scripts/bench-table.py --write BENCHMARKS.md --from "$out"
        echo "== BENCHMARKS.md rewritten between its markers"
    fi
fi
