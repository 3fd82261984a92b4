#!/usr/bin/env bash
# Instructions and branch mispredicts per request of one shared limiter
# refusing, counted by callgrind (repeatable on a noisy machine: the same
# binary and arguments give the same counts), over the timed loop of
# examples/refusal_steady.rs only (its warm-up is not counted).
#
#   bash scripts/callgrind-limiter.sh [modes...]
#
# Modes are refusal_steady's (rt rd rdt md mdt kd kdt gv gvt; default: rt rd
# rdt gv), each with an optional `@LIMIT`, the permits a second (`rd@1`; without
# it LIMIT, default 1000: a slice's count then needs a history block, where
# 1 keeps every count inline). OPS and WARM set the timed and untimed
# requests (default 2M after 8M: the limit is spent at the start of every
# second, 4M requests, so the timed requests fall in a window that holds
# it). BIN runs another build of refusal_steady (e.g. an older commit's, to
# compare).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/callgrind.sh
OPS=${OPS:-2000000}
WARM=${WARM:-8000000}
BIN=$(cg_example refusal_steady)
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(rt rd rdt gv)
cg_header
for m in "${modes[@]}"; do
    mode=${m%@*}
    limit=${LIMIT:-1000}
    [ "$mode" = "$m" ] || limit=${m#*@}
    LIMIT=$limit cg_per_op "$m" "$OPS" 'refusal_steady::timed*' "$BIN" "$mode" "$OPS" "$WARM"
done
