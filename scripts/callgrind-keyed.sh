#!/usr/bin/env bash
# Instructions and branch mispredicts per operation of the per-key engine,
# counted by callgrind (repeatable on a noisy machine: the same binary and
# arguments give the same counts), over the timed loop of
# examples/keyed_steady.rs only.
#
#   bash scripts/callgrind-keyed.sh [modes...]
#
# Modes are keyed_steady's (kw hk kl klr dm gvu ...; default: kw hk kl klr).
# OPS and WARM set the timed and untimed adds (default 2M after 8M: two
# slices of warm-up, then half a slice timed). BIN runs another build of
# keyed_steady (e.g. an older commit's, to compare).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/callgrind.sh
OPS=${OPS:-2000000}
WARM=${WARM:-8000000}
BIN=$(cg_example keyed_steady)
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(kw hk kl klr)
cg_header
for m in "${modes[@]}"; do
    cg_per_op "$m" "$OPS" 'keyed_steady::timed*' "$BIN" "$m" "$OPS" "$WARM"
done
