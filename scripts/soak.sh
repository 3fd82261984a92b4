#!/usr/bin/env bash
# Soaks (not in CI; the results of the recorded runs are in FUZZING.md):
#
#   bash scripts/soak.sh              # both, 10 minutes each
#   bash scripts/soak.sh flood        # one of them
#   SOAK_MINUTES=2 bash scripts/soak.sh redis   # shorter, for a trial
#
# flood: a flood of new keys through the tower layer on a local
#   KeyedLimiter (tower/examples/soak_flood.rs: an axum server on a free
#   loopback port, and a load of SOAK_CONNS (8) keep-alive connections in
#   another process, every request a key never sent before, SOAK_RATE
#   (10000) requests a second in all, every connection replaced after 1000
#   requests). A fixed rate, because the keys the limiter holds, and so its
#   memory, follow the rate: as fast as the server answers, the rate
#   follows the machine's other load, and the memory with it (SOAK_RATE=0
#   floods as fast as it can; FUZZING.md has such a run). The server's resident memory
#   (VmRSS) and open files (/proc/PID/fd) are sampled every 5 s. Flat
#   means: after the warm-up (the first fifth of the run: 2 minutes of
#   10, when the limiter's window of 10 s has long been full), the largest
#   RSS of the last half (the last 5 minutes of 10) is within 10% of the
#   RSS at the end of the warm-up, and the most open files of the last
#   half are at most the warm-up's most (the listener, the runtime's
#   descriptors, and the connections, replaced all along).
# redis: ClusterWindows adds (redis/examples/soak_windows.rs: three nodes,
#   about 300,000 adds a second) against a redis-server this script starts
#   on a free port in 17000-17999, with its append-only file fsynced on
#   every write, SIGKILLed and restarted on the same port and files every
#   30 s. The example then checks every key's sum against what was added
#   minus what the nodes report lost (nothing, with that persistence).
#
# Samples and logs go to $CARGO_TARGET_DIR/soak (or target/soak). Every
# process the script starts is stopped on exit, by its id.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

minutes="${SOAK_MINUTES:-10}"
secs=$((minutes * 60))
conns="${SOAK_CONNS:-8}"
rate="${SOAK_RATE:-10000}"
out="$(realpath -m "${CARGO_TARGET_DIR:-target}")/soak"
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(flood redis)

fail() {
    echo "error: $*" >&2
    exit 1
}

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -9 "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT

flood() {
    echo "== flood: building tower/examples/soak_flood.rs"
    cargo build --release -p stripecount-tower --example soak_flood
    local bin=target/release/examples/soak_flood
    [ -z "${CARGO_TARGET_DIR:-}" ] || bin="$CARGO_TARGET_DIR/release/examples/soak_flood"
    "$bin" serve >"$out/flood-server.log" 2>&1 &
    local server=$!
    pids+=("$server")
    local addr=""
    for _ in $(seq 100); do
        addr=$(sed -n 's/^listening //p' "$out/flood-server.log")
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || fail "the flood server did not start: $(cat "$out/flood-server.log")"
    echo "== flood: server $server on $addr; $conns connections, $rate requests/s, for $minutes min"
    "$bin" load "$addr" "$secs" "$conns" "$rate" >"$out/flood-load.log" 2>&1 &
    local load=$!
    pids+=("$load")
    local samples="$out/flood-samples.csv" t0 now
    echo "secs,rss_kib,open_files" >"$samples"
    t0=$(date +%s)
    while kill -0 "$load" 2>/dev/null; do
        now=$(($(date +%s) - t0))
        local rss fds
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status")
        fds=$(ls "/proc/$server/fd" | wc -l)
        echo "$now,$rss,$fds" >>"$samples"
        sleep 5
    done
    local rc=0
    wait "$load" || rc=$?
    kill -9 "$server" 2>/dev/null || true
    cat "$out/flood-load.log"
    [ "$rc" = 0 ] || fail "the flood's load failed (exit $rc)"
    # The verdict: the samples after the warm-up against its end.
    python3 - "$samples" "$secs" <<'EOF'
import csv, sys
rows = [(int(r["secs"]), int(r["rss_kib"]), int(r["open_files"]))
        for r in csv.DictReader(open(sys.argv[1]))]
secs = int(sys.argv[2])
warm = [r for r in rows if r[0] <= secs / 5]
last = [r for r in rows if r[0] >= secs / 2]
if not warm or not last:
    sys.exit("too few samples")
ref_t, ref_rss, _ = warm[-1]
max_rss = max(r[1] for r in last)
warm_fds = max(r[2] for r in warm)
max_fds = max(r[2] for r in last)
print(f"flood: {len(rows)} samples; RSS {ref_rss} KiB at {ref_t} s (end of the warm-up), "
      f"at most {max_rss} KiB in the last half ({100 * (max_rss / ref_rss - 1):+.1f}%), "
      f"first {rows[0][1]} KiB, last {rows[-1][1]} KiB; open files at most {warm_fds} "
      f"in the warm-up, at most {max_fds} in the last half")
ok = max_rss <= ref_rss * 1.10 and max_fds <= warm_fds
print("flood: " + ("flat" if ok else "NOT FLAT"))
sys.exit(0 if ok else 1)
EOF
}

redis_up() {
    local port=$1
    for _ in $(seq 200); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    return 1
}

redis_soak() {
    command -v redis-server >/dev/null || fail "redis-server is not on the PATH (apt-get install redis-server)"
    echo "== redis: building redis/examples/soak_windows.rs"
    cargo build --release -p stripecount-redis --example soak_windows
    local bin=target/release/examples/soak_windows
    [ -z "${CARGO_TARGET_DIR:-}" ] || bin="$CARGO_TARGET_DIR/release/examples/soak_windows"
    local port="" p
    for _ in $(seq 50); do
        p=$((17000 + RANDOM % 1000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            port=$p
            break
        fi
    done
    [ -n "$port" ] || fail "no free port in 17000-17999"
    local dir
    dir=$(mktemp -d)
    local args=(--port "$port" --bind 127.0.0.1 --dir "$dir" --save ""
        --appendonly yes --appendfsync always --daemonize no --logfile redis.log)
    redis-server "${args[@]}" &
    local redis=$!
    pids+=("$redis")
    redis_up "$port" || fail "redis-server did not start on $port"
    echo "== redis: redis-server $redis on $port (appendfsync always); adds for $minutes min, SIGKILL every 30 s"
    "$bin" "redis://127.0.0.1:$port/" "$secs" >"$out/redis-soak.log" 2>&1 &
    local soak=$!
    pids+=("$soak")
    local kills=0 t0 down
    t0=$(date +%s)
    while kill -0 "$soak" 2>/dev/null && [ $(($(date +%s) - t0 + 30)) -le "$secs" ]; do
        sleep 30
        kill -0 "$soak" 2>/dev/null || break
        kill -9 "$redis"
        wait "$redis" 2>/dev/null || true
        down=$(date +%s.%N)
        redis-server "${args[@]}" &
        redis=$!
        pids+=("$redis")
        redis_up "$port" || fail "redis-server did not restart on $port"
        kills=$((kills + 1))
        echo "kill $kills at $(($(date +%s) - t0)) s: back after $(awk "BEGIN {printf \"%.2f\", $(date +%s.%N) - $down}") s"
    done
    local rc=0
    wait "$soak" || rc=$?
    kill -9 "$redis" 2>/dev/null || true
    wait "$redis" 2>/dev/null || true
    rm -rf "$dir"
    cat "$out/redis-soak.log"
    echo "redis: $kills SIGKILLs and restarts"
    [ "$rc" = 0 ] || fail "the Redis soak failed (exit $rc)"
}

for part in "${parts[@]}"; do
    case "$part" in
        flood) flood ;;
        redis) redis_soak ;;
        *) fail "unknown part $part: flood or redis" ;;
    esac
done
echo "== soak done ($minutes min each; load $(cut -d' ' -f1-3 /proc/loadavg))"
