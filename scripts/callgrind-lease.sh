#!/usr/bin/env bash
# Instructions and branch mispredicts per decide of a fleet-wide limiter
# on keys whose leases the node holds (the warm path, no round trip in the
# timed loop), counted by callgrind over the timed loop of
# redis/examples/lease_steady.rs only (repeatable on a noisy machine).
#
#   bash scripts/callgrind-lease.sh
#
# OPS and WARM set the timed and untimed decides (default 1M after 1M).
# BIN runs another build of lease_steady (e.g. an older commit's). Starts a
# redis-server on a free loopback port and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/callgrind.sh
OPS=${OPS:-1000000}
WARM=${WARM:-1000000}
BIN=$(cg_example lease_steady -p stripecount-redis)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/pid" >/dev/null
trap 'kill "$(cat "$dir/pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
cg_header
cg_per_op decide "$OPS" 'lease_steady::timed*' "$BIN" "redis://127.0.0.1:$port/" "$OPS" "$WARM"
