#!/usr/bin/env bash
# Lines a second of `stripecount hotkeys` on one thread, exact and in fixed
# memory: the benchmarks' Zipf(1.0) stream over 1M keys as text lines
# `<millis> k:<16 hex digits>` (cli/examples/zipf_lines.rs, 1,000 lines a
# millisecond of stream time), read from a file in the page cache, output
# to /dev/null; 10 s windows of 10 slices, threshold 1000.
#
#   bash scripts/hotkeys-throughput.sh          # LINES=20000000, RUNS=2
#   BIN=/path/to/older/stripecount bash scripts/hotkeys-throughput.sh
#
# Each configuration runs RUNS times, interleaved, under the shared bench
# lock (/tmp/stripecount-bench.lock); prints the load average before.
set -euo pipefail
cd "$(dirname "$0")/.."
lines=${LINES:-20000000}
runs=${RUNS:-2}
target="${CARGO_TARGET_DIR:-target}"
input="$target/hotkeys-input-$lines.txt"
cargo build -q --release -p stripecount-cli --bin stripecount --example zipf_lines
bin=${BIN:-$target/release/stripecount}
if [ ! -s "$input" ]; then
    "$target/release/examples/zipf_lines" "$lines" >"$input.tmp"
    mv "$input.tmp" "$input"
fi
cat "$input" >/dev/null # into the page cache
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $lines lines; $bin"
modes=("exact" "--memory 8MiB")
for run in $(seq "$runs"); do
    for mode in "${modes[@]}"; do
        extra=()
        [ "$mode" = exact ] || read -r -a extra <<<"$mode"
        # Timed inside the lock: waiting for it is not the command's time.
        secs=$(flock /tmp/stripecount-bench.lock bash -c '
            start=$(date +%s.%N)
            "$@" <"'"$input"'" >/dev/null 2>/dev/null
            echo "$start $(date +%s.%N)"' _ "$bin" hotkeys --timestamps --window 10s --slices 10 \
            --threshold 1000 --top 0 "${extra[@]}")
        python3 -c "s, e = map(float, '$secs'.split()); print(f'run $run, $mode: {$lines / (e - s) / 1e6:.2f} M lines/s ({e - s:.2f} s)')"
    done
done
